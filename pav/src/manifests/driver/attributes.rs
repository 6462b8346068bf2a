//! What the CSI controller's sidecars need for `spec.storageCapacity`
//! (external-provisioner's capacity tracking) and
//! `spec.volumeModification` (external-resizer's VolumeAttributesClass
//! support), kept apart from the sidecars every driver runs.

use serde_json::{Value, json};

/// external-provisioner's flags for a provisioner with
/// `spec.storageCapacity`: GetCapacity per StorageClass and node segment,
/// published as CSIStorageCapacity objects in the pav namespace, owned by
/// the CSI controller's Deployment (level 2: pod, ReplicaSet, Deployment),
/// so they outlive a rollout and go with the driver. Polled every minute
/// (the default); the driver reuses a capacity pod's answer for
/// `cacheFor`.
pub const CAPACITY_ARGS: [&str; 2] = ["--enable-capacity", "--capacity-ownerref-level=2"];

/// The environment external-provisioner reads with `--enable-capacity`:
/// the namespace its CSIStorageCapacity objects go to (`NAMESPACE`) and
/// its pod, where the owner chain starts (`POD_NAME`).
pub fn capacity_env() -> Value {
    json!([
        { "name": "NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
        { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
    ])
}

/// external-resizer's flags for a provisioner with
/// `spec.volumeModification`: its VolumeAttributesClass gate, named
/// although v2 has it GA and on (it probes the API then): v1.14 has it off
/// by default, and a claim's class change must never rest on a probe.
pub const MODIFICATION_ARGS: [&str; 1] = ["--feature-gates=VolumeAttributesClass=true"];

/// The namespaced calls external-provisioner makes with
/// `--enable-capacity` (bound in the pav namespace only, with the sidecars'
/// leader election): its CSIStorageCapacity objects (a namespaced
/// informer, then create, update, delete), and the ReplicaSet between its
/// pod and the Deployment that owns the objects (`get`; the pod's `get` is
/// in the cluster-wide role already).
pub fn capacity_rules() -> [Value; 2] {
    [
        super::rule(
            &["storage.k8s.io"],
            &["csistoragecapacities"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        super::rule(&["apps"], &["replicasets"], &["get"]),
    ]
}
