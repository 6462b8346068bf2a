//! Translation between CSI messages and pav-sdk types.

use std::collections::{BTreeMap, HashMap};

use pav_sdk::{
    AccessMode, Claim, MountOptions, Parameters, PodInfo, Secrets, Topology, VolumeMode,
};
use tonic::Code;

use crate::csi;
use crate::csi::volume_capability::AccessType;
use crate::csi::volume_capability::access_mode::Mode;
use crate::limits::{self, Int64Error, LimitError};

/// Parameter keys the external-provisioner adds with `--extra-create-metadata`.
pub(crate) const PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
/// See [`PVC_NAME`].
pub(crate) const PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";
/// See [`PVC_NAME`].
pub(crate) const PV_NAME: &str = "csi.storage.k8s.io/pv/name";
/// Keys with this prefix are reserved for the Kubernetes sidecars.
const RESERVED_PREFIX: &str = "csi.storage.k8s.io/";

/// Whether `key` is one of the `csi.storage.k8s.io/` keys the sidecars add
/// to or read from a class's parameters (secrets, object names, fsType),
/// which pav-csi takes out before a provisioner sees them.
pub fn is_reserved_parameter(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX)
}

/// One CSI volume capability in pav-sdk terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Capability {
    pub(crate) mode: VolumeMode,
    pub(crate) access_mode: AccessMode,
    pub(crate) mount: MountOptions,
}

/// Why a request's capabilities were refused (`INVALID_ARGUMENT`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CapabilityError {
    /// A field of one breaks a limit (or the list is missing).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Neither block nor mount.
    #[error("{field}.access_type is required (block or mount)")]
    AccessType { field: String },
    /// No access mode, or an unknown one.
    #[error("{field}.access_mode is required")]
    AccessMode { field: String },
    /// A list that mixes volume modes, where one is needed.
    #[error(transparent)]
    Mixed(#[from] MixedModes),
}

impl CapabilityError {
    /// The code of a request refused for it: `INVALID_ARGUMENT`.
    pub(crate) fn code(&self) -> Code {
        Code::InvalidArgument
    }
}

/// A capability list that asks for two volume modes at once.
#[derive(Debug, thiserror::Error)]
#[error("{field} mixes {first} and {other} volume modes")]
pub(crate) struct MixedModes {
    field: String,
    first: VolumeMode,
    other: VolumeMode,
}

/// Why a capacity range was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RangeError {
    /// A negative size (`INVALID_ARGUMENT`).
    #[error("capacity_range.{field} must not be negative")]
    Negative { field: &'static str },
    /// A limit below the required size (`OUT_OF_RANGE`).
    #[error("capacity_range.limit_bytes {max} is below required_bytes {min}")]
    Inverted { min: u64, max: u64 },
}

impl RangeError {
    /// The code of a request refused for it.
    pub(crate) fn code(&self) -> Code {
        match self {
            RangeError::Negative { .. } => Code::InvalidArgument,
            RangeError::Inverted { .. } => Code::OutOfRange,
        }
    }
}

/// Why a volume the provisioner answered cannot be carried by CSI (the
/// RPC that answers it says `INTERNAL`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum VolumeAnswerError {
    /// Its id, context or topology breaks a limit.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Its size does not fit an int64.
    #[error(transparent)]
    Size(#[from] Int64Error),
}

/// Why a snapshot the provisioner answered cannot be carried by CSI (the
/// RPC that answers it says `INTERNAL`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotAnswerError {
    /// Its handle is not one CSI carries.
    #[error("the provisioner returned a snapshot CSI cannot carry")]
    Handle(#[source] LimitError),
    /// Its size does not fit an int64.
    #[error(transparent)]
    Size(#[from] Int64Error),
}

/// Converts and checks one capability; `field` names it in errors.
pub(crate) fn capability(
    field: &str,
    cap: &csi::VolumeCapability,
) -> Result<Capability, CapabilityError> {
    let (mode, mount) = match &cap.access_type {
        Some(AccessType::Block(_)) => (VolumeMode::Block, MountOptions::default()),
        Some(AccessType::Mount(m)) => {
            limits::limited(&format!("{field}.mount.fs_type"), &m.fs_type)?;
            limits::repeated(&format!("{field}.mount.mount_flags"), m.mount_flags.len())?;
            for (i, flag) in m.mount_flags.iter().enumerate() {
                limits::limited(&format!("{field}.mount.mount_flags[{i}]"), flag)?;
            }
            limits::limited(
                &format!("{field}.mount.volume_mount_group"),
                &m.volume_mount_group,
            )?;
            (
                VolumeMode::Filesystem,
                MountOptions {
                    fs_type: Some(m.fs_type.clone()).filter(|t| !t.is_empty()),
                    mount_flags: m.mount_flags.clone(),
                },
            )
        }
        None => {
            return Err(CapabilityError::AccessType {
                field: field.to_owned(),
            });
        }
    };
    let access_mode = match cap.access_mode.as_ref().map(|m| m.mode()) {
        Some(Mode::SingleNodeWriter) => AccessMode::SingleNodeWriter,
        Some(Mode::SingleNodeReaderOnly) => AccessMode::SingleNodeReaderOnly,
        Some(Mode::MultiNodeReaderOnly) => AccessMode::MultiNodeReaderOnly,
        Some(Mode::MultiNodeSingleWriter) => AccessMode::MultiNodeSingleWriter,
        Some(Mode::MultiNodeMultiWriter) => AccessMode::MultiNodeMultiWriter,
        Some(Mode::SingleNodeSingleWriter) => AccessMode::SingleNodeSingleWriter,
        Some(Mode::SingleNodeMultiWriter) => AccessMode::SingleNodeMultiWriter,
        Some(Mode::Unknown) | None => {
            return Err(CapabilityError::AccessMode {
                field: field.to_owned(),
            });
        }
    };
    Ok(Capability {
        mode,
        access_mode,
        mount,
    })
}

/// The CSI capability for `mode` and `access_mode` (no fs type, no mount
/// flags): the inverse of [`capability`], for clients (`testing`).
#[cfg(feature = "testing")]
pub(crate) fn csi_capability(mode: VolumeMode, access_mode: AccessMode) -> csi::VolumeCapability {
    use csi::volume_capability::{BlockVolume, MountVolume};
    let mode_ = match access_mode {
        AccessMode::SingleNodeWriter => Mode::SingleNodeWriter,
        AccessMode::SingleNodeReaderOnly => Mode::SingleNodeReaderOnly,
        AccessMode::MultiNodeReaderOnly => Mode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter => Mode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter => Mode::MultiNodeMultiWriter,
        AccessMode::SingleNodeSingleWriter => Mode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter => Mode::SingleNodeMultiWriter,
    };
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode { mode: mode_ as i32 }),
        access_type: Some(match mode {
            VolumeMode::Filesystem => AccessType::Mount(MountVolume::default()),
            VolumeMode::Block => AccessType::Block(BlockVolume {}),
        }),
    }
}

/// Converts and checks a non-empty capability list.
pub(crate) fn capability_list(
    field: &str,
    caps: &[csi::VolumeCapability],
) -> Result<Vec<Capability>, CapabilityError> {
    if caps.is_empty() {
        return Err(LimitError::Required {
            field: field.to_owned(),
        }
        .into());
    }
    limits::repeated(field, caps.len())?;
    caps.iter()
        .enumerate()
        .map(|(i, cap)| capability(&format!("{field}[{i}]"), cap))
        .collect()
}

/// The one volume mode of a non-empty list of converted capabilities, its
/// distinct access modes and the first one's mount options; an error when
/// the list mixes volume modes.
pub(crate) fn one_mode(
    field: &str,
    caps: &[Capability],
) -> Result<(VolumeMode, Vec<AccessMode>, MountOptions), MixedModes> {
    let first = &caps[0];
    let mut access_modes = Vec::new();
    for cap in caps {
        if cap.mode != first.mode {
            return Err(MixedModes {
                field: field.to_owned(),
                first: first.mode,
                other: cap.mode,
            });
        }
        if !access_modes.contains(&cap.access_mode) {
            access_modes.push(cap.access_mode);
        }
    }
    Ok((first.mode, access_modes, first.mount.clone()))
}

/// Converts a non-empty capability list that uses one volume mode.
pub(crate) fn capabilities(
    field: &str,
    caps: &[csi::VolumeCapability],
) -> Result<(VolumeMode, Vec<AccessMode>, MountOptions), CapabilityError> {
    Ok(one_mode(field, &capability_list(field, caps)?)?)
}

/// Sorted copy of a proto map.
pub(crate) fn sorted(map: &HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Proto map from a sorted map.
pub(crate) fn unsorted(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A request's `secrets`, checked against CSI's map size limit
/// (`INVALID_ARGUMENT` naming the field) and kept unprintable.
pub(crate) fn secrets(map: &HashMap<String, String>) -> Result<Secrets, LimitError> {
    limits::map("secrets", map)?;
    Ok(Secrets::from(sorted(map)))
}

/// A capacity range from CSI, where 0 means unset: a negative size is
/// `INVALID_ARGUMENT`, a limit below the required size `OUT_OF_RANGE`.
pub(crate) fn capacity_range(
    range: Option<&csi::CapacityRange>,
) -> Result<pav_sdk::CapacityRange, RangeError> {
    let Some(range) = range else {
        return Ok(pav_sdk::CapacityRange::default());
    };
    let bytes = |field: &'static str, v: i64| match v {
        0 => Ok(None),
        v if v < 0 => Err(RangeError::Negative { field }),
        v => Ok(Some(v as u64)),
    };
    let capacity = pav_sdk::CapacityRange {
        min_bytes: bytes("required_bytes", range.required_bytes)?,
        max_bytes: bytes("limit_bytes", range.limit_bytes)?,
    };
    if let (Some(min), Some(max)) = (capacity.min_bytes, capacity.max_bytes)
        && max < min
    {
        return Err(RangeError::Inverted { min, max });
    }
    Ok(capacity)
}

/// Splits StorageClass parameters into the author's parameters, the claim
/// (from `--extra-create-metadata`) and a legacy `fstype` parameter.
pub(crate) fn split_parameters(
    map: &HashMap<String, String>,
) -> (Parameters, Option<Claim>, Option<String>) {
    let claim = match (map.get(PVC_NAME), map.get(PVC_NAMESPACE)) {
        (Some(name), Some(namespace)) => {
            let mut claim = Claim::new(namespace, name);
            claim.pv_name = map.get(PV_NAME).cloned();
            Some(claim)
        }
        _ => None,
    };
    let fs_type = map.get("csi.storage.k8s.io/fstype").cloned();
    let parameters = map
        .iter()
        .filter(|(k, _)| !is_reserved_parameter(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (parameters, claim, fs_type)
}

/// Splits a publish volume context into the volume's own context and the
/// client pod that kubelet describes with `podInfoOnMount: true`
/// (`csi.storage.k8s.io/pod.name`, `.../pod.namespace`, `.../pod.uid`,
/// `.../serviceAccount.name`, `.../ephemeral`); the reserved keys are removed
/// from the context.
pub(crate) fn split_pod_info(map: &HashMap<String, String>) -> (Parameters, Option<PodInfo>) {
    let get = |key: &str| map.get(&format!("{RESERVED_PREFIX}{key}")).cloned();
    let pod = match (get("pod.name"), get("pod.namespace"), get("pod.uid")) {
        (Some(name), Some(namespace), Some(uid)) => Some(PodInfo {
            name,
            namespace,
            uid,
            service_account: get("serviceAccount.name"),
            ephemeral: get("ephemeral").as_deref() == Some("true"),
        }),
        _ => None,
    };
    let context = map
        .iter()
        .filter(|(k, _)| !is_reserved_parameter(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (context, pod)
}

/// A CSI topology from a pav-sdk one.
pub(crate) fn topology(t: &Topology) -> csi::Topology {
    csi::Topology {
        segments: unsorted(t),
    }
}

/// A pav-sdk topology from a CSI one.
pub(crate) fn from_topology(t: &csi::Topology) -> Topology {
    sorted(&t.segments)
}

/// The CSI form of a volume the provisioner created or listed, checked
/// against what CSI allows in a `CreateVolumeResponse`: a `volume_id` of 1
/// to 128 bytes free of the control characters CSI bans in names (kubelet
/// and the sidecars pass it on as the PV's `volumeHandle`), a size that
/// fits an int64, a `volume_context` of at most 4 KiB and valid topology
/// segments.
pub(crate) fn csi_volume(volume: &pav_sdk::Volume) -> Result<csi::Volume, VolumeAnswerError> {
    limits::name("volume_id", &volume.handle)?;
    let volume_context = unsorted(&volume.context);
    limits::map("volume_context", &volume_context)?;
    limits::repeated("accessible_topology", volume.accessible_topology.len())?;
    let accessible_topology: Vec<csi::Topology> =
        volume.accessible_topology.iter().map(topology).collect();
    for (i, topology) in accessible_topology.iter().enumerate() {
        limits::topology(&format!("accessible_topology[{i}]"), &topology.segments)?;
    }
    Ok(csi::Volume {
        capacity_bytes: limits::int64("capacity_bytes", volume.capacity_bytes)?,
        volume_context,
        content_source: None,
        accessible_topology,
        volume_id: volume.handle.to_string(),
    })
}

/// The CSI form of a snapshot the provisioner returned, or why CSI cannot
/// carry it (`INTERNAL`).
pub(crate) fn csi_snapshot(
    snapshot: pav_sdk::SnapshotInfo,
) -> Result<csi::Snapshot, SnapshotAnswerError> {
    limits::name("snapshot_id", &snapshot.handle).map_err(SnapshotAnswerError::Handle)?;
    Ok(csi::Snapshot {
        size_bytes: limits::int64("size_bytes", snapshot.size_bytes)?,
        snapshot_id: snapshot.handle,
        source_volume_id: snapshot.source,
        creation_time: Some(prost_types::Timestamp::from(snapshot.created)),
        ready_to_use: snapshot.ready,
        group_snapshot_id: snapshot.group.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_info_is_split_from_the_volume_context() {
        let map = HashMap::from([
            ("csi.storage.k8s.io/pod.name".to_owned(), "web".to_owned()),
            (
                "csi.storage.k8s.io/pod.namespace".to_owned(),
                "apps".to_owned(),
            ),
            ("csi.storage.k8s.io/pod.uid".to_owned(), "u-1".to_owned()),
            (
                "csi.storage.k8s.io/ephemeral".to_owned(),
                "false".to_owned(),
            ),
            ("size".to_owned(), "big".to_owned()),
        ]);
        let (context, pod) = split_pod_info(&map);
        assert_eq!(context.keys().collect::<Vec<_>>(), ["size"]);
        let pod = pod.unwrap();
        assert_eq!((pod.name.as_str(), pod.namespace.as_str()), ("web", "apps"));
        assert_eq!(pod.uid, "u-1");
        assert!(!pod.ephemeral && pod.service_account.is_none());
        assert!(split_pod_info(&HashMap::new()).1.is_none());
    }

    #[test]
    fn extra_create_metadata_becomes_a_claim() {
        let map = HashMap::from([
            (PVC_NAME.to_owned(), "data".to_owned()),
            (PVC_NAMESPACE.to_owned(), "apps".to_owned()),
            (PV_NAME.to_owned(), "pvc-1".to_owned()),
            ("size".to_owned(), "big".to_owned()),
        ]);
        let (params, claim, fs_type) = split_parameters(&map);
        assert_eq!(params.len(), 1);
        let claim = claim.unwrap();
        assert_eq!(
            (claim.name.as_str(), claim.namespace.as_str()),
            ("data", "apps")
        );
        assert_eq!(claim.pv_name.as_deref(), Some("pvc-1"));
        assert_eq!(fs_type, None);
    }
}
