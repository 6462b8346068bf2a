//! pav-csi's request checks on arbitrary bytes decoded as a CSI
//! `CreateVolumeRequest` (the wire format the controller receives): the
//! name, the string maps, the capability list and the topology
//! requirements, each through the function the controller calls. Must
//! never panic, and each check must accept exactly what CSI's limits allow
//! (stated again here, independently of the code): what is accepted is
//! within the limits, what is refused breaks one, naming the field.
//!
//! The checks are private to pav-csi, so `limits.rs` and `convert.rs` are
//! compiled here from its source, against pav-csi's generated messages.

#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use pav_sdk::{AccessMode, VolumeMode};
use prost::Message;
use tonic::{Code, Status};

pub use pav_csi::csi;
#[allow(dead_code)]
#[path = "../../pav-csi/src/convert.rs"]
mod convert;
#[allow(dead_code)]
#[path = "../../pav-csi/src/limits.rs"]
mod limits;

use csi::volume_capability::AccessType;

/// CSI's size limits, as the spec states them.
const MAX_STRING: usize = 128;
const MAX_MAP: usize = 4096;
/// pav-csi's own limit on repeated fields (CSI sets none).
const MAX_REPEATED: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = csi::CreateVolumeRequest::decode(data) else {
        return;
    };
    check_name(&req.name);
    for (field, map) in [
        ("parameters", &req.parameters),
        ("secrets", &req.secrets),
        ("mutable_parameters", &req.mutable_parameters),
    ] {
        check_map(field, map);
    }
    check_capabilities(&req.volume_capabilities);
    if let Some(requirement) = &req.accessibility_requirements {
        for (kind, list) in [
            ("requisite", &requirement.requisite),
            ("preferred", &requirement.preferred),
        ] {
            let field = format!("accessibility_requirements.{kind}");
            let allowed = list.len() <= MAX_REPEATED;
            expect(&field, limits::repeated(&field, list.len()), allowed);
            for (i, topology) in list.iter().enumerate() {
                check_topology(&format!("{field}[{i}]"), &topology.segments);
            }
        }
    }
    check_split_parameters(&req.parameters);
});

/// `result` is `Ok` exactly when `allowed`, and an error is
/// `INVALID_ARGUMENT` naming `field`.
fn expect<T: std::fmt::Debug>(field: &str, result: Result<T, Status>, allowed: bool) -> Option<T> {
    match result {
        Ok(value) => {
            assert!(allowed, "{field}: accepted {value:?}");
            Some(value)
        }
        Err(status) => {
            assert!(!allowed, "{field}: refused: {status:?}");
            assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
            assert!(status.message().starts_with(field), "{field}: {status:?}");
            None
        }
    }
}

/// Control characters CSI bans in names: every C0 and C1 control but tab,
/// line feed and carriage return.
fn banned(c: char) -> bool {
    c.is_control() && !matches!(c, '\t' | '\n' | '\r')
}

fn check_name(name: &str) {
    let allowed = !name.is_empty() && name.len() <= MAX_STRING && !name.chars().any(banned);
    if let Some(accepted) = expect("name", limits::name("name", name), allowed) {
        assert_eq!(accepted, name);
    }
    let required = !name.is_empty() && name.len() <= MAX_STRING;
    expect("volume_id", limits::required("volume_id", name), required);
}

fn check_map(field: &str, map: &HashMap<String, String>) {
    let size: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    expect(field, limits::map(field, map), size <= MAX_MAP);
}

/// A topology segment map: within the map limit, keys `[prefix/]name`
/// with each part at most 63 characters (name required), values 1 to 63
/// characters without `/`.
fn check_topology(field: &str, segments: &HashMap<String, String>) {
    let size: usize = segments.iter().map(|(k, v)| k.len() + v.len()).sum();
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
    let allowed = size <= MAX_MAP
        && segments
            .iter()
            .all(|(key, value)| valid_key(key) && valid_value(value));
    expect(field, limits::topology(field, segments), allowed);
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

fn volume_mode(cap: &csi::VolumeCapability) -> Option<VolumeMode> {
    match cap.access_type {
        Some(AccessType::Block(_)) => Some(VolumeMode::Block),
        Some(AccessType::Mount(_)) => Some(VolumeMode::Filesystem),
        None => None,
    }
}

fn check_capabilities(caps: &[csi::VolumeCapability]) {
    const FIELD: &str = "volume_capabilities";
    let allowed = !caps.is_empty()
        && caps.len() <= MAX_REPEATED
        && caps.iter().all(capability_allowed)
        && caps.iter().all(|c| volume_mode(c) == volume_mode(&caps[0]));
    let result = convert::capabilities(FIELD, caps);
    let Some((mode, access_modes, mount)) = expect(FIELD, result, allowed) else {
        return;
    };
    let first = &caps[0];
    assert_eq!(Some(mode), volume_mode(first));
    // Every access mode asked for, once each, and nothing else.
    let asked: Vec<AccessMode> = caps
        .iter()
        .map(|c| {
            let one = convert::capability("c", c).expect("an accepted list's capability");
            one.access_mode
        })
        .collect();
    for (i, m) in access_modes.iter().enumerate() {
        assert!(asked.contains(m), "{m:?} was not asked for");
        assert!(!access_modes[..i].contains(m), "{m:?} twice");
    }
    assert!(asked.iter().all(|m| access_modes.contains(m)));
    // The first capability's mount options, an empty fs_type as none.
    match &first.access_type {
        Some(AccessType::Mount(m)) => {
            assert_eq!(
                mount.fs_type.as_deref(),
                Some(m.fs_type.as_str()).filter(|t| !t.is_empty())
            );
            assert_eq!(mount.mount_flags, m.mount_flags);
        }
        _ => assert_eq!(mount, Default::default()),
    }
}

/// The StorageClass parameters a provisioner sees never hold the keys
/// reserved for the sidecars; all others pass unchanged.
fn check_split_parameters(map: &HashMap<String, String>) {
    const RESERVED: &str = "csi.storage.k8s.io/";
    let (parameters, claim, fs_type) = convert::split_parameters(map);
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
    let name = map.get(convert::PVC_NAME);
    let namespace = map.get(convert::PVC_NAMESPACE);
    match claim {
        Some(claim) => {
            assert_eq!(Some(&claim.name), name);
            assert_eq!(Some(&claim.namespace), namespace);
            assert_eq!(claim.pv_name.as_ref(), map.get(convert::PV_NAME));
        }
        None => assert!(name.is_none() || namespace.is_none()),
    }
    assert_eq!(fs_type.as_ref(), map.get("csi.storage.k8s.io/fstype"));
}
