//! Evaluated phases: what a PavProvisioner says to do for one volume.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use crate::model::{AccessMode, VolumeMode};

/// One step of a PaV volume's life: the original PaV's five, then pav's
/// expansion and snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// `spec.volumeValidation`.
    Validation,
    /// `spec.volumeCreation`.
    Creation,
    /// `spec.volumeDeletion`.
    Deletion,
    /// `spec.volumeStaging`.
    Staging,
    /// `spec.volumeUnstaging`.
    Unstaging,
    /// `spec.volumeExpansion` (pav): a volume grows on the storage side.
    Expansion,
    /// `spec.volumeNodeExpansion` (pav): a staged volume grows on its node.
    NodeExpansion,
    /// `spec.snapshotCreation` (pav): a snapshot of a volume is taken.
    SnapshotCreation,
    /// `spec.snapshotDeletion` (pav): a snapshot is deleted.
    SnapshotDeletion,
    /// `spec.storageCapacity` (pav): the room for new volumes in one
    /// topology segment (a node), published as CSIStorageCapacity.
    Capacity,
    /// `spec.volumeModification` (pav): a volume's mutable parameters
    /// change when its claim moves to another VolumeAttributesClass.
    Modification,
    /// `spec.volumeHealth` (pav): a staged volume's periodic check, whose
    /// `/pav/condition` the kubelet reports.
    Health,
    /// `spec.volumeAttach` (pav): a volume is attached to a node before it
    /// is staged there; the pod's `/pav/publish-context` reaches staging.
    Attach,
    /// `spec.volumeDetach` (pav): a volume is detached from a node after
    /// it was unstaged there.
    Detach,
    /// `spec.groupSnapshotCreation` (pav): snapshots of several volumes
    /// are taken together; the pod's `/pav/snapshots` names each one.
    GroupSnapshotCreation,
    /// `spec.groupSnapshotDeletion` (pav): a group snapshot and its
    /// members are deleted.
    GroupSnapshotDeletion,
}

/// What defines one phase, in one place: the rest of pav (the spec's
/// checks, `pav render`, events, metrics, pod names) reads it from here.
#[derive(Debug)]
pub struct Definition {
    /// The phase defined.
    pub phase: Phase,
    /// The spec field holding it (`volumeStaging`).
    pub field: &'static str,
    /// Lower-case name (`staging`), as used on the command line, in pod
    /// names and labels, and in metrics.
    pub name: &'static str,
    /// The keys its section may hold.
    keys: &'static [&'static str],
    /// Whether it cannot do without its pod: what it does is only the
    /// pod's (expose the volume, check it, attach it, say each member's
    /// snapshot).
    needs_pod: bool,
    /// The reason of the Warning event it reports when it fails.
    pub event_reason: &'static str,
}

/// The keys of a section that is a pod and nothing else.
const POD_ONLY: &[&str] = &["podTemplate", "timeout"];

/// Every phase's definition, in [`Phase`]'s order: the original PaV's in
/// lifecycle order, then pav's.
const DEFINITIONS: [Definition; 16] = [
    Definition {
        phase: Phase::Validation,
        field: "volumeValidation",
        name: "validation",
        keys: &[
            "volumeModes",
            "accessModes",
            "minCapacity",
            "maxCapacity",
            "podTemplate",
            "timeout",
        ],
        needs_pod: false,
        event_reason: "ValidationFailed",
    },
    Definition {
        phase: Phase::Creation,
        field: "volumeCreation",
        name: "creation",
        keys: &["handle", "capacity", "topology", "podTemplate", "timeout"],
        needs_pod: false,
        event_reason: "CreationFailed",
    },
    Definition {
        phase: Phase::Deletion,
        field: "volumeDeletion",
        name: "deletion",
        keys: POD_ONLY,
        needs_pod: false,
        event_reason: "DeletionFailed",
    },
    Definition {
        phase: Phase::Staging,
        field: "volumeStaging",
        name: "staging",
        keys: POD_ONLY,
        needs_pod: true,
        event_reason: "StagingFailed",
    },
    Definition {
        phase: Phase::Unstaging,
        field: "volumeUnstaging",
        name: "unstaging",
        keys: POD_ONLY,
        needs_pod: false,
        event_reason: "UnstagingFailed",
    },
    Definition {
        phase: Phase::Expansion,
        field: "volumeExpansion",
        name: "expansion",
        keys: &["capacity", "podTemplate", "timeout"],
        needs_pod: false,
        event_reason: "ExpansionFailed",
    },
    Definition {
        phase: Phase::NodeExpansion,
        field: "volumeNodeExpansion",
        name: "node-expansion",
        keys: POD_ONLY,
        needs_pod: true,
        event_reason: "NodeExpansionFailed",
    },
    Definition {
        phase: Phase::SnapshotCreation,
        field: "snapshotCreation",
        name: "snapshot-creation",
        keys: &["handle", "size", "podTemplate", "timeout"],
        needs_pod: false,
        event_reason: "SnapshotCreationFailed",
    },
    Definition {
        phase: Phase::SnapshotDeletion,
        field: "snapshotDeletion",
        name: "snapshot-deletion",
        keys: POD_ONLY,
        needs_pod: false,
        event_reason: "SnapshotDeletionFailed",
    },
    Definition {
        phase: Phase::Capacity,
        field: "storageCapacity",
        name: "capacity",
        keys: &[
            "availableCapacity",
            "maximumVolumeSize",
            "podTemplate",
            "timeout",
            "cacheFor",
        ],
        needs_pod: false,
        event_reason: "CapacityFailed",
    },
    Definition {
        phase: Phase::Modification,
        field: "volumeModification",
        name: "modification",
        keys: &["refusal", "podTemplate", "timeout"],
        needs_pod: false,
        event_reason: "ModificationFailed",
    },
    Definition {
        phase: Phase::Health,
        field: "volumeHealth",
        name: "health",
        keys: &["podTemplate", "timeout", "every"],
        needs_pod: true,
        event_reason: "HealthCheckFailed",
    },
    Definition {
        phase: Phase::Attach,
        field: "volumeAttach",
        name: "attach",
        keys: POD_ONLY,
        needs_pod: true,
        event_reason: "AttachFailed",
    },
    Definition {
        phase: Phase::Detach,
        field: "volumeDetach",
        name: "detach",
        keys: POD_ONLY,
        needs_pod: false,
        event_reason: "DetachFailed",
    },
    Definition {
        phase: Phase::GroupSnapshotCreation,
        field: "groupSnapshotCreation",
        name: "group-snapshot-creation",
        keys: &["handle", "podTemplate", "timeout"],
        needs_pod: true,
        event_reason: "GroupSnapshotCreationFailed",
    },
    Definition {
        phase: Phase::GroupSnapshotDeletion,
        field: "groupSnapshotDeletion",
        name: "group-snapshot-deletion",
        keys: POD_ONLY,
        needs_pod: false,
        event_reason: "GroupSnapshotDeletionFailed",
    },
];

impl Phase {
    /// All phases, in the order of their definitions: the original PaV's
    /// in lifecycle order, then pav's.
    pub const ALL: [Phase; 16] = {
        let mut all = [Phase::Validation; 16];
        let mut i = 0;
        while i < all.len() {
            all[i] = DEFINITIONS[i].phase;
            i += 1;
        }
        all
    };

    /// This phase's definition.
    pub fn definition(self) -> &'static Definition {
        &DEFINITIONS[self.index()]
    }

    /// The spec field holding this phase (`volumeStaging`).
    pub fn field(self) -> &'static str {
        self.definition().field
    }

    /// Lower-case name (`staging`), as used on the command line and in pod names.
    pub fn name(self) -> &'static str {
        self.definition().name
    }

    /// The reason of the Warning event this phase reports when it fails
    /// (`StagingFailed`).
    pub fn event_reason(self) -> &'static str {
        self.definition().event_reason
    }

    /// Keys a phase object may hold.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        self.definition().keys
    }

    /// Whether the phase cannot do without its pod.
    pub(crate) fn needs_pod(self) -> bool {
        self.definition().needs_pod
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::str::FromStr for Phase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                format!("unknown phase {s:?}: expected one of {}", names.join(", "))
            })
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Evaluated `spec.volumeValidation`, with the guide's defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationPhase {
    /// Volume modes the provisioner accepts (default `[Filesystem]`).
    pub volume_modes: Vec<VolumeMode>,
    /// Access modes the provisioner accepts (default: all three).
    pub access_modes: Vec<AccessMode>,
    /// Smallest capacity accepted, in bytes (default 1).
    pub min_capacity: u64,
    /// Largest capacity accepted, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_capacity: Option<u64>,
    /// The validation pod, run to completion; failure rejects the volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.volumeCreation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreationPhase {
    /// The volume's handle, if the spec fixes it; otherwise the pod's
    /// `/pav/handle`, else `defaultHandle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The volume's capacity in bytes, if the spec fixes it; otherwise the
    /// pod must write `/pav/capacity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// The nodes the volume is accessible from, if the spec fixes them;
    /// otherwise the pod's `/pav/topology`, else every node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<Vec<String>>,
    /// The creation pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.volumeDeletion` or `spec.volumeUnstaging`: an optional pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptionalPodPhase {
    /// The pod to run to completion, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.volumeExpansion`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpansionPhase {
    /// The volume's new capacity in bytes, if the spec fixes it; otherwise
    /// the pod's `/pav/capacity`, else the requested capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// The expansion pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.snapshotCreation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotCreationPhase {
    /// The snapshot's handle, if the spec fixes it; otherwise the pod's
    /// `/pav/handle`, else `defaultHandle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The snapshot's size in bytes (what a volume restored from it needs),
    /// if the spec fixes it; otherwise the pod's `/pav/size`, else the
    /// source volume's capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The snapshot creation pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.groupSnapshotCreation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSnapshotCreationPhase {
    /// The group's handle, if the spec fixes it; otherwise the pod's
    /// `/pav/handle`, else `defaultHandle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The group snapshot creation pod, run to completion: it takes every
    /// member and writes `/pav/snapshots`, each source volume's handle
    /// mapped to its snapshot's.
    pub pod_template: PodTemplateSpec,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.storageCapacity`: the room in one topology segment.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityPhase {
    /// Bytes available for new volumes, if the spec gives them; otherwise
    /// the pod's `/pav/capacity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_capacity: Option<u64>,
    /// The largest volume that could be created now, when it is less than
    /// the room (CSI `maximum_volume_size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_volume_size: Option<u64>,
    /// The capacity pod, run to completion on the segment's node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
    /// How long a pod's answer is reused before another pod runs
    /// ([`DEFAULT_CAPACITY_CACHE`] when absent).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub cache_for: Option<Duration>,
}

/// Evaluated `spec.volumeModification`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModificationPhase {
    /// Why the new parameters are refused, when the `refusal` template
    /// says so (a non-empty message): nothing changes, and the driver
    /// answers `INVALID_ARGUMENT` with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The modification pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// How long a capacity pod's answer is reused when `cacheFor` is not
/// given: external-provisioner asks every minute per class and segment,
/// and a pod per node each minute would be most of a small cluster's work.
pub const DEFAULT_CAPACITY_CACHE: Duration = Duration::from_secs(300);

/// How often a staged volume is checked when `every` is not given: the
/// kubelet asks for its condition each minute, and a pod per volume each
/// minute would be most of a node's work.
pub const DEFAULT_HEALTH_CHECK_EVERY: Duration = Duration::from_secs(300);

/// Evaluated `spec.volumeHealth`: a staged volume's check.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthPhase {
    /// The health check pod, run to completion on the volume's node with
    /// the staged volume at `/pav/volume`; it writes `/pav/condition`.
    pub pod_template: PodTemplateSpec,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
    /// How long a check's answer stands before the next check runs
    /// ([`DEFAULT_HEALTH_CHECK_EVERY`] when absent).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub every: Option<Duration>,
}

/// Evaluated `spec.volumeStaging` (or `spec.volumeNodeExpansion`, whose
/// pod is mandatory too).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StagingPhase {
    /// The staging pod: it exposes the volume at `/pav/volume`, then either
    /// completes or creates `/pav/ready` and keeps running. (The node
    /// expansion pod: run to completion, the staged volume at `/pav/volume`.)
    pub pod_template: PodTemplateSpec,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

impl ValidationPhase {
    /// Checks a request against the evaluated rules; the error says which
    /// rule the request breaks, in the user's terms.
    ///
    /// ```
    /// use pav_templates::{phase::ValidationPhase, model::{AccessMode, VolumeMode}};
    /// let rules = ValidationPhase {
    ///     volume_modes: vec![VolumeMode::Filesystem],
    ///     access_modes: AccessMode::DEFAULT.to_vec(),
    ///     min_capacity: 1,
    ///     max_capacity: Some(1 << 30),
    ///     pod_template: None,
    ///     timeout: None,
    /// };
    /// assert!(rules.admits(VolumeMode::Filesystem, &[AccessMode::ReadWriteOnce], 1024, None).is_ok());
    /// assert_eq!(
    ///     rules.admits(VolumeMode::Block, &[], 1024, None).unwrap_err().to_string(),
    ///     "volume mode Block is not supported (supported: Filesystem)"
    /// );
    /// ```
    pub fn admits(
        &self,
        volume_mode: VolumeMode,
        access_modes: &[AccessMode],
        min_capacity: u64,
        max_capacity: Option<u64>,
    ) -> Result<(), Refusal> {
        if !self.volume_modes.contains(&volume_mode) {
            return Err(Refusal::VolumeMode {
                requested: volume_mode,
                supported: self.volume_modes.clone(),
            });
        }
        if let Some(mode) = access_modes.iter().find(|m| !self.access_modes.contains(m)) {
            return Err(Refusal::AccessMode {
                requested: *mode,
                supported: self.access_modes.clone(),
            });
        }
        if let Some(max) = self.max_capacity
            && min_capacity > max
        {
            return Err(Refusal::AboveMaximum {
                requested: min_capacity,
                maximum: max,
            });
        }
        let requested_max = max_capacity.unwrap_or(u64::MAX);
        if requested_max < self.min_capacity {
            return Err(Refusal::BelowMinimum {
                limit: requested_max,
                minimum: self.min_capacity,
            });
        }
        Ok(())
    }
}

/// Why [`ValidationPhase::admits`] refuses a request: one variant per rule,
/// so callers decide by the rule (a CSI driver answers `OUT_OF_RANGE` for
/// the capacity rules) and never by the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The volume mode is not among `volumeModes`.
    #[error("volume mode {} is not supported (supported: {})", requested.as_str(), list(supported.iter().map(|m| m.as_str())))]
    VolumeMode {
        /// What the claim asks for.
        requested: VolumeMode,
        /// The evaluated `volumeModes`.
        supported: Vec<VolumeMode>,
    },
    /// An access mode is not among `accessModes`.
    #[error("access mode {} is not supported (supported: {})", requested.as_str(), list(supported.iter().map(|m| m.as_str())))]
    AccessMode {
        /// The first access mode of the claim not supported.
        requested: AccessMode,
        /// The evaluated `accessModes`.
        supported: Vec<AccessMode>,
    },
    /// The least capacity asked for exceeds `maxCapacity`.
    #[error("requested capacity {requested} bytes exceeds the maximum of {maximum} bytes")]
    AboveMaximum {
        /// The request's least capacity, in bytes.
        requested: u64,
        /// The evaluated `maxCapacity`, in bytes.
        maximum: u64,
    },
    /// The capacity limit is below `minCapacity`.
    #[error("capacity limit {limit} bytes is below the minimum of {minimum} bytes")]
    BelowMinimum {
        /// The request's limit, in bytes.
        limit: u64,
        /// The evaluated `minCapacity`, in bytes.
        minimum: u64,
    },
}

impl Refusal {
    /// Whether a capacity rule refused the request (CSI's `OUT_OF_RANGE`).
    pub fn is_capacity(&self) -> bool {
        match self {
            Refusal::AboveMaximum { .. } | Refusal::BelowMinimum { .. } => true,
            Refusal::VolumeMode { .. } | Refusal::AccessMode { .. } => false,
        }
    }
}

/// Most nodes a volume may be accessible from: a PersistentVolume's node
/// affinity lists them, and the API server bounds an object's size.
pub const MAX_TOPOLOGY_NODES: usize = 64;

/// The nodes a volume is accessible from, as `volumeCreation.topology` or a
/// creation pod's `/pav/topology` gives them: one node name, or a
/// non-empty list of distinct node names (each a DNS subdomain).
///
/// ```
/// use pav_templates::phase::topology_nodes;
/// assert_eq!(topology_nodes(&"node-1".into()).unwrap(), ["node-1"]);
/// assert_eq!(topology_nodes(&serde_json::json!(["a", "b"])).unwrap(), ["a", "b"]);
/// assert!(topology_nodes(&serde_json::json!([])).is_err());
/// assert!(topology_nodes(&"Node_1".into()).is_err());
/// ```
pub fn topology_nodes(value: &serde_json::Value) -> Result<Vec<String>, String> {
    use serde_json::Value as Json;
    let items: Vec<&Json> = match value {
        Json::Array(items) if items.is_empty() => {
            return Err("must name at least one node".into());
        }
        Json::Array(items) if items.len() > MAX_TOPOLOGY_NODES => {
            return Err(format!(
                "names {} nodes, more than the {MAX_TOPOLOGY_NODES} allowed",
                items.len()
            ));
        }
        Json::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    let mut nodes: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Json::String(name) = item else {
            return Err(format!(
                "must be a node name or a list of node names, not {}",
                match item {
                    Json::Null => "null".to_owned(),
                    Json::Array(_) => "a nested list".to_owned(),
                    Json::Object(_) => "an object".to_owned(),
                    other => other.to_string(),
                }
            ));
        };
        if !is_node_name(name) {
            return Err(format!(
                "{name:?} is not a node name (a DNS subdomain: at most 253 lowercase alphanumerics, '-' or '.')"
            ));
        }
        if nodes.contains(name) {
            return Err(format!("names node {name:?} twice"));
        }
        nodes.push(name.clone());
    }
    Ok(nodes)
}

fn is_node_name(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= 63
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes[0] != b'-'
                && bytes[bytes.len() - 1] != b'-'
        })
}

fn list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

fn serialize_timeout<S: serde::Serializer>(
    timeout: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match timeout {
        Some(duration) => serializer.serialize_str(&crate::duration::format_timeout(duration)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Phase::definition`] indexes the table by the enum's order, so
    /// each entry must sit at its phase's place; names and fields are
    /// distinct (they name pods, metrics, events and spec sections).
    #[test]
    fn each_definition_is_at_its_phases_place() {
        for (index, definition) in DEFINITIONS.iter().enumerate() {
            assert_eq!(definition.phase.index(), index, "{definition:?}");
        }
        let distinct = |values: Vec<&str>| {
            let set: std::collections::BTreeSet<&str> = values.iter().copied().collect();
            set.len() == values.len()
        };
        assert!(distinct(DEFINITIONS.iter().map(|d| d.name).collect()));
        assert!(distinct(DEFINITIONS.iter().map(|d| d.field).collect()));
        assert!(distinct(
            DEFINITIONS.iter().map(|d| d.event_reason).collect()
        ));
    }
}
