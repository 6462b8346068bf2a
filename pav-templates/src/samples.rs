//! Built-in sample objects, so any phase can be rendered with no cluster.
//!
//! A 1 GiB `ReadWriteOnce` Filesystem claim `default/sample-claim` of
//! StorageClass `sample-class`, its bound PersistentVolume, and a node
//! `sample-node`. `pav render` uses them for any object file not given.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::context::{CreationContext, StagingContext, ValidationContext};

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
