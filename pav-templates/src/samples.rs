//! Built-in sample objects, so any phase can be rendered with no cluster.
//!
//! A 1 GiB `ReadWriteOnce` Filesystem claim `default/sample-claim` of
//! StorageClass `sample-class`, its bound PersistentVolume, and a node
//! `sample-node`. `pav render` uses them for any object file not given.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::context::{CreationContext, PvcMap, StagingContext, ValidationContext};

/// YAML of the sample claim.
pub const PVC_YAML: &str = include_str!("samples/pvc.yaml");
/// YAML of the sample StorageClass.
pub const STORAGE_CLASS_YAML: &str = include_str!("samples/sc.yaml");
/// YAML of the sample PersistentVolume.
pub const PV_YAML: &str = include_str!("samples/pv.yaml");
/// YAML of the sample Node.
pub const NODE_YAML: &str = include_str!("samples/node.yaml");

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_yaml::from_str(yaml).expect("built-in sample objects are valid")
}

/// The sample claim.
pub fn pvc() -> PersistentVolumeClaim {
    parse(PVC_YAML)
}

/// The sample StorageClass.
pub fn storage_class() -> StorageClass {
    parse(STORAGE_CLASS_YAML)
}

/// The sample PersistentVolume, bound to the sample claim.
pub fn pv() -> PersistentVolume {
    parse(PV_YAML)
}

/// The sample node.
pub fn node() -> Node {
    parse(NODE_YAML)
}

/// Dynamic validation context of the sample claim.
pub fn validation_context() -> ValidationContext {
    ValidationContext::dynamic(&pvc(), &storage_class()).expect("samples are consistent")
}

/// Creation and deletion context of the sample claim.
pub fn creation_context() -> CreationContext {
    CreationContext::new(&pvc(), &storage_class()).expect("samples are consistent")
}

/// Staging and unstaging context of the sample volume on the sample node.
pub fn staging_context() -> StagingContext {
    StagingContext::new(&pvc(), &pv(), &node(), false).expect("samples are consistent")
}

/// The sample context of every phase, each with the `get_pvc` lookup
/// [`contexts`] was given.
#[derive(Debug, Clone)]
pub struct Contexts {
    /// Dynamic validation of the sample claim.
    pub validation: ValidationContext,
    /// Static validation of the sample PersistentVolume (no claim).
    pub static_validation: ValidationContext,
    /// Creation and deletion of the sample claim.
    pub creation: CreationContext,
    /// Staging and unstaging of the sample volume (and its node expansion).
    pub staging: StagingContext,
    /// Expansion of the sample volume to twice its capacity.
    pub expansion: crate::ExpansionContext,
    /// A snapshot of the sample volume being taken.
    pub snapshot_creation: crate::SnapshotContext,
    /// A snapshot of the sample volume being deleted.
    pub snapshot_deletion: crate::SnapshotContext,
    /// The room on the sample node for volumes of the sample class.
    pub capacity: crate::CapacityContext,
    /// The sample volume moving to a class with `mode: ro`.
    pub modification: crate::ModificationContext,
    /// A group snapshot of the sample volume being taken.
    pub group_snapshot_creation: crate::GroupSnapshotContext,
    /// The sample group snapshot being deleted.
    pub group_snapshot_deletion: crate::GroupSnapshotContext,
    /// The sample volume being filled from [`data_source`].
    pub population: crate::PopulationContext,
}

/// The topology key of pav's drivers, as the sample segment has it.
pub const SAMPLE_TOPOLOGY_KEY: &str = "topology.pav.albertofaria.github.io/node";

/// The room on the sample node for volumes of the sample class.
pub fn capacity_context() -> crate::CapacityContext {
    let node = node();
    let name = node.metadata.name.clone().unwrap_or_default();
    let topology =
        std::collections::BTreeMap::from([(SAMPLE_TOPOLOGY_KEY.to_owned(), name.clone())]);
    crate::CapacityContext::new(
        Some(&topology),
        Some(&name),
        &storage_class().parameters.unwrap_or_default(),
    )
}

/// The sample volume, bound to the sample claim, moving to a
/// VolumeAttributesClass whose parameters are `mode: ro`.
pub fn modification_context() -> crate::ModificationContext {
    let requested = std::collections::BTreeMap::from([("mode".to_owned(), "ro".to_owned())]);
    crate::ModificationContext::new(&pv(), Some(&pvc()), &requested)
        .expect("samples are consistent")
}

/// The object the sample volume is filled from: files of a custom
/// resource in the sample claim's namespace.
pub fn data_source() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "examples.pav.albertofaria.github.io/v1",
        "kind": "VolumeFiles",
        "metadata": {"name": "greeting", "namespace": pvc().metadata.namespace},
        "spec": {"files": {"hello": "Hello world!\n"}},
    })
}

/// The sample volume, for the sample claim, being filled from
/// [`data_source`].
pub fn population_context() -> crate::PopulationContext {
    crate::PopulationContext::new(&pv(), &pvc(), &data_source()).expect("samples are consistent")
}

/// Expansion of the sample volume, bound to the sample claim, to twice its
/// capacity.
pub fn expansion_context() -> crate::ExpansionContext {
    let pv = pv();
    let capacity = crate::context::pv_capacity(&pv).expect("samples are consistent");
    crate::ExpansionContext::new(&pv, Some(&pvc()), capacity * 2, None)
        .expect("samples are consistent")
}

/// The name of the sample snapshot (`snapshot-<uid>`, as csi-snapshotter
/// names them).
pub const SNAPSHOT_NAME: &str = "snapshot-0f8e7d6c-5b4a-4392-8180-7f6e5d4c3b2a";

/// A snapshot of the sample volume, bound to the sample claim, being taken.
pub fn snapshot_creation_context() -> crate::SnapshotContext {
    crate::SnapshotContext::creation(SNAPSHOT_NAME, &Default::default(), &pv(), Some(&pvc()))
        .expect("samples are consistent")
}

/// The sample snapshot being deleted.
pub fn snapshot_deletion_context() -> crate::SnapshotContext {
    crate::SnapshotContext::deletion(SNAPSHOT_NAME, sample_handle().as_deref())
}

/// The name of the sample group snapshot (`groupsnapshot-<uid>`, as the
/// snapshot-controller names them).
pub const GROUP_SNAPSHOT_NAME: &str = "groupsnapshot-3c2b1a09-8f7e-4d6c-9b5a-493827160f5e";

/// The sample volume's handle.
fn sample_handle() -> Option<String> {
    let pv = pv();
    pv.spec.and_then(|s| s.csi).map(|c| c.volume_handle)
}

/// A group snapshot of the sample volume, bound to the sample claim, being
/// taken.
pub fn group_snapshot_creation_context() -> crate::GroupSnapshotContext {
    let (pv, pvc) = (pv(), pvc());
    let member = crate::GroupMember {
        pv: &pv,
        pvc: Some(&pvc),
    };
    crate::GroupSnapshotContext::creation(GROUP_SNAPSHOT_NAME, &Default::default(), &[member])
        .expect("samples are consistent")
}

/// The sample group snapshot being deleted: its one member, the sample
/// snapshot, of the sample volume.
pub fn group_snapshot_deletion_context() -> crate::GroupSnapshotContext {
    crate::GroupSnapshotContext::deletion(
        GROUP_SNAPSHOT_NAME,
        &[(SNAPSHOT_NAME.to_owned(), sample_handle())],
    )
}

/// A `get_pvc` lookup that knows the sample claim and one claim of another
/// namespace, `team/data`, which a template of the sample claim may not
/// read unless its PavProvisioner allows that namespace.
pub fn pvc_lookup() -> Arc<PvcMap> {
    let mut other = PersistentVolumeClaim::default();
    other.metadata.name = Some("data".into());
    other.metadata.namespace = Some("team".into());
    Arc::new(PvcMap::from_iter([pvc(), other]))
}

/// Every phase's sample context, with `get_pvc` answered by `lookup`.
///
/// ```
/// let contexts = pav_templates::samples::contexts(pav_templates::samples::pvc_lookup());
/// # let _ = contexts.staging;
/// ```
pub fn contexts(lookup: Arc<PvcMap>) -> Contexts {
    Contexts {
        validation: validation_context().with_pvc_lookup(lookup.clone()),
        static_validation: ValidationContext::static_pv(&pv())
            .expect("samples are consistent")
            .with_pvc_lookup(lookup.clone()),
        creation: creation_context().with_pvc_lookup(lookup.clone()),
        staging: staging_context().with_pvc_lookup(lookup.clone()),
        expansion: expansion_context().with_pvc_lookup(lookup.clone()),
        snapshot_creation: snapshot_creation_context().with_pvc_lookup(lookup.clone()),
        snapshot_deletion: snapshot_deletion_context().with_pvc_lookup(lookup.clone()),
        capacity: capacity_context().with_pvc_lookup(lookup.clone()),
        modification: modification_context().with_pvc_lookup(lookup.clone()),
        group_snapshot_creation: group_snapshot_creation_context().with_pvc_lookup(lookup.clone()),
        group_snapshot_deletion: group_snapshot_deletion_context().with_pvc_lookup(lookup.clone()),
        population: population_context().with_pvc_lookup(lookup),
    }
}
