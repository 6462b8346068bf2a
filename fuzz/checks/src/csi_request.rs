//! pav-csi's `CreateVolume` and `DeleteVolume` checks on arbitrary
//! requests, against CSI's limits stated independently of pav-csi.

use std::collections::HashMap;
use std::sync::OnceLock;

use pav_csi::csi;
use pav_csi::fuzzing::Controller;
use pav_sdk::{AccessMode, ContentSource, CreateRequest, Provisioner, VolumeMode};
use prost::Message;
use tonic::{Code, Status};

use csi::volume_capability::AccessType;
use csi::volume_content_source::Type as SourceType;

/// CSI's size limits, as the spec states them.
const MAX_STRING: usize = 128;
const MAX_MAP: usize = 4096;
/// pav-csi's own limit on repeated fields (CSI sets none).
const MAX_REPEATED: usize = 64;
/// Parameter keys the external-provisioner adds with `--extra-create-metadata`.
const PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
const PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";
const PV_NAME: &str = "csi.storage.k8s.io/pv/name";
const FS_TYPE: &str = "csi.storage.k8s.io/fstype";

fn controller() -> &'static Controller {
    static CONTROLLER: OnceLock<Controller> = OnceLock::new();
    CONTROLLER.get_or_init(|| {
        let provisioner = Provisioner::new(())
            .volume_modes([VolumeMode::Filesystem, VolumeMode::Block])
            .access_modes(AccessMode::ALL)
            .clones_volumes();
        Controller::new(provisioner, true)
    })
}

/// Why a request must be refused: the field named first, and the code.
type Refusal = (String, Code);

/// pav-csi's `CreateVolume` check on arbitrary bytes decoded as a CSI
/// `CreateVolumeRequest` (the wire format the controller receives): the
/// real check (`pav_csi::fuzzing`, the function the controller calls),
/// against a provisioner that serves every volume and access mode, clones
/// volumes but takes no snapshots, in a topology-aware driver. Must never
/// panic, and must accept exactly what CSI's limits allow (stated again
/// here, independently of the code): a refusal names the first field that
/// breaks one, in the order the check reads them, and what is accepted is
/// converted faithfully (modes, mount options, parameters without the
/// sidecars' keys, the claim). The volume id check is fuzzed through
/// `DeleteVolume`'s, with the name as the id.
pub fn csi_request(data: &[u8]) {
    let Ok(req) = csi::CreateVolumeRequest::decode(data) else {
        return;
    };
    let verdict = controller().check_create_volume(&req);
    match (expected_refusal(&req), verdict) {
        (None, Ok(create)) => check_accepted(&req, &create),
        (Some((field, code)), Err(status)) => {
            assert_eq!(status.code(), code, "{field}: {status:?}");
            assert!(status.message().starts_with(&field), "{field}: {status:?}");
        }
        (None, Err(status)) => panic!("refused: {status:?}"),
        (Some((field, _)), Ok(_)) => panic!("accepted, though {field} breaks a limit"),
    }
    check_volume_id(&req.name, &req.secrets);
}

/// The first check `req` fails, in the order the controller checks.
fn expected_refusal(req: &csi::CreateVolumeRequest) -> Option<Refusal> {
    let invalid = |field: &str| Some((field.to_owned(), Code::InvalidArgument));
    if !name_allowed(&req.name) {
        return invalid("name");
    }
    for (field, map) in [
        ("parameters", &req.parameters),
        ("secrets", &req.secrets),
        ("mutable_parameters", &req.mutable_parameters),
    ] {
        if !map_allowed(map) {
            return invalid(field);
        }
    }
    if !capabilities_allowed(&req.volume_capabilities) {
        return invalid("volume_capabilities");
    }
    if let Some(range) = &req.capacity_range {
        if range.required_bytes < 0 || range.limit_bytes < 0 {
            return invalid("capacity_range");
        }
        if range.required_bytes > 0
            && range.limit_bytes > 0
            && range.limit_bytes < range.required_bytes
        {
            return Some(("capacity_range".into(), Code::OutOfRange));
        }
    }
    if let Some(requirement) = &req.accessibility_requirements {
        for (kind, list) in [
            ("requisite", &requirement.requisite),
            ("preferred", &requirement.preferred),
        ] {
            let field = format!("accessibility_requirements.{kind}");
            let segments_allowed = list.iter().all(|t| topology_allowed(&t.segments));
            if list.len() > MAX_REPEATED || !segments_allowed {
                return invalid(&field);
            }
        }
    }
    if let Some(source) = &req.volume_content_source {
        // This provisioner clones volumes and takes no snapshots.
        let id_allowed = |id: &str| !id.is_empty() && id.len() <= MAX_STRING;
        let allowed = match &source.r#type {
            Some(SourceType::Volume(volume)) => id_allowed(&volume.volume_id),
            Some(SourceType::Snapshot(_)) | None => false,
        };
        if !allowed {
            return invalid("volume_content_source");
        }
    }
    if !req.mutable_parameters.is_empty() {
        return invalid("mutable_parameters");
    }
    None
}

/// Control characters CSI bans in names: every C0 and C1 control but tab,
/// line feed and carriage return.
fn banned(c: char) -> bool {
    c.is_control() && !matches!(c, '\t' | '\n' | '\r')
}

fn name_allowed(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_STRING && !name.chars().any(banned)
}

fn map_allowed(map: &HashMap<String, String>) -> bool {
    let size: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    size <= MAX_MAP
}

/// A topology segment map: within the map limit, keys `[prefix/]name`
/// with each part at most 63 characters (name required), values 1 to 63
/// characters without `/`.
fn topology_allowed(segments: &HashMap<String, String>) -> bool {
    let part = |s: &str| s.chars().count() <= 63;
    let valid_key = |key: &str| {
        let parts: Vec<&str> = key.split('/').collect();
        match parts[..] {
            [name] => !name.is_empty() && part(name),
            [prefix, name] => part(prefix) && !name.is_empty() && part(name),
            _ => false,
        }
    };
    let valid_value = |value: &str| !value.is_empty() && part(value) && !value.contains('/');
    map_allowed(segments)
        && segments
            .iter()
            .all(|(key, value)| valid_key(key) && valid_value(value))
}

/// What one capability must hold to be accepted: an access type, a known
/// access mode, and for a mount its strings and flags within the limits.
fn capability_allowed(cap: &csi::VolumeCapability) -> bool {
    let access_type = match &cap.access_type {
        Some(AccessType::Block(_)) => true,
        Some(AccessType::Mount(mount)) => {
            mount.fs_type.len() <= MAX_STRING
                && mount.volume_mount_group.len() <= MAX_STRING
                && mount.mount_flags.len() <= MAX_REPEATED
                && mount.mount_flags.iter().all(|f| f.len() <= MAX_STRING)
        }
        None => false,
    };
    let mode = cap.access_mode.as_ref().map_or(0, |m| m.mode);
    access_type && (1..=7).contains(&mode)
}

/// A non-empty list, within the repeated limit, of allowed capabilities
/// that all have one volume mode.
fn capabilities_allowed(caps: &[csi::VolumeCapability]) -> bool {
    !caps.is_empty()
        && caps.len() <= MAX_REPEATED
        && caps.iter().all(capability_allowed)
        && caps.iter().all(|c| volume_mode(c) == volume_mode(&caps[0]))
}

fn volume_mode(cap: &csi::VolumeCapability) -> Option<VolumeMode> {
    match cap.access_type {
        Some(AccessType::Block(_)) => Some(VolumeMode::Block),
        Some(AccessType::Mount(_)) => Some(VolumeMode::Filesystem),
        None => None,
    }
}

/// CSI's access mode numbers (csi.proto), in pav-sdk terms.
fn access_mode(cap: &csi::VolumeCapability) -> AccessMode {
    match cap.access_mode.as_ref().map_or(0, |m| m.mode) {
        1 => AccessMode::SingleNodeWriter,
        2 => AccessMode::SingleNodeReaderOnly,
        3 => AccessMode::MultiNodeReaderOnly,
        4 => AccessMode::MultiNodeSingleWriter,
        5 => AccessMode::MultiNodeMultiWriter,
        6 => AccessMode::SingleNodeSingleWriter,
        7 => AccessMode::SingleNodeMultiWriter,
        other => panic!("access mode {other} was accepted"),
    }
}

/// An accepted request, converted faithfully.
fn check_accepted(req: &csi::CreateVolumeRequest, create: &CreateRequest) {
    assert_eq!(create.name, req.name);
    let first = &req.volume_capabilities[0];
    assert_eq!(Some(create.volume_mode), volume_mode(first));
    // Every access mode asked for, once each, and nothing else.
    let asked: Vec<AccessMode> = req.volume_capabilities.iter().map(access_mode).collect();
    let access_modes = &create.access_modes;
    for (i, m) in access_modes.iter().enumerate() {
        assert!(asked.contains(m), "{m:?} was not asked for");
        assert!(!access_modes[..i].contains(m), "{m:?} twice");
    }
    assert!(asked.iter().all(|m| access_modes.contains(m)));
    // The first capability's mount options, an empty fs_type as none (then
    // the StorageClass' legacy fstype parameter).
    match &first.access_type {
        Some(AccessType::Mount(m)) => {
            let fs_type = Some(&m.fs_type).filter(|t| !t.is_empty());
            assert_eq!(
                create.mount.fs_type.as_ref(),
                fs_type.or(req.parameters.get(FS_TYPE))
            );
            assert_eq!(create.mount.mount_flags, m.mount_flags);
        }
        _ => assert_eq!(create.mount, Default::default()),
    }
    // Capacity: 0 is unset.
    let range = req.capacity_range.unwrap_or_default();
    let bytes = |b: i64| (b > 0).then_some(b as u64);
    assert_eq!(create.capacity.min_bytes, bytes(range.required_bytes));
    assert_eq!(create.capacity.max_bytes, bytes(range.limit_bytes));
    // Topology, entry for entry.
    let requirement = req.accessibility_requirements.clone().unwrap_or_default();
    assert_eq!(create.topology.requisite.len(), requirement.requisite.len());
    assert_eq!(create.topology.preferred.len(), requirement.preferred.len());
    // The source: a volume to clone.
    match (&create.source, &req.volume_content_source) {
        (None, None) => {}
        (Some(ContentSource::Volume(id)), Some(source)) => {
            let Some(SourceType::Volume(volume)) = &source.r#type else {
                panic!("{source:?} became a volume source");
            };
            assert_eq!(id.as_str(), volume.volume_id);
        }
        (ours, theirs) => panic!("source {theirs:?} became {ours:?}"),
    }
    check_split_parameters(&req.parameters, create);
}

/// The StorageClass parameters a provisioner sees never hold the keys
/// reserved for the sidecars; all others pass unchanged. The claim comes
/// from the external-provisioner's keys.
fn check_split_parameters(map: &HashMap<String, String>, create: &CreateRequest) {
    const RESERVED: &str = "csi.storage.k8s.io/";
    let parameters = &create.parameters;
    for (key, value) in map {
        if key.starts_with(RESERVED) {
            assert!(!parameters.contains_key(key), "{key:?} passed through");
        } else {
            assert_eq!(parameters.get(key), Some(value), "{key:?} lost");
        }
    }
    assert_eq!(
        parameters.len(),
        map.keys().filter(|k| !k.starts_with(RESERVED)).count()
    );
    let name = map.get(PVC_NAME);
    let namespace = map.get(PVC_NAMESPACE);
    match &create.claim {
        Some(claim) => {
            assert_eq!(Some(&claim.name), name);
            assert_eq!(Some(&claim.namespace), namespace);
            assert_eq!(claim.pv_name.as_ref(), map.get(PV_NAME));
        }
        None => assert!(name.is_none() || namespace.is_none()),
    }
}

/// The name as a volume id (DeleteVolume's check): required and within
/// the string limit, control characters allowed; then the secrets.
fn check_volume_id(id: &str, secrets: &HashMap<String, String>) {
    let req = csi::DeleteVolumeRequest {
        volume_id: id.to_owned(),
        secrets: secrets.clone(),
    };
    let expected = if id.is_empty() || id.len() > MAX_STRING {
        Some("volume_id")
    } else if !map_allowed(secrets) {
        Some("secrets")
    } else {
        None
    };
    match (expected, Controller::check_delete_volume(&req)) {
        (None, Ok(accepted)) => assert_eq!(accepted, id),
        (Some(field), Err(status)) => expect_refusal(field, &status),
        (None, Err(status)) => panic!("volume_id {id:?} refused: {status:?}"),
        (Some(field), Ok(_)) => panic!("volume_id accepted, though {field} breaks a limit"),
    }
}

/// An `INVALID_ARGUMENT` naming `field`.
fn expect_refusal(field: &str, status: &Status) {
    assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
    assert!(status.message().starts_with(field), "{field}: {status:?}");
}
