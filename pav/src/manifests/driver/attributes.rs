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
/// `cacheFor`. For every StorageClass, whatever its binding mode: without
/// `--capacity-for-immediate-binding` external-provisioner publishes
/// nothing for `Immediate` classes, and a user of one sees no capacity.
pub const CAPACITY_ARGS: [&str; 3] = [
    "--enable-capacity",
    "--capacity-ownerref-level=2",
    "--capacity-for-immediate-binding",
];

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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Container;

    use super::super::{PROVISIONER, RESIZER, objects};
    use super::{CAPACITY_ARGS, MODIFICATION_ARGS};
    use crate::manifests::Settings;

    fn provisioner(sections: &str) -> pav_templates::PavProvisioner {
        serde_yaml::from_str(&format!(
            "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata: {{ name: p }}\nspec:\n  provisioningModes: [Dynamic]\n  volumeStaging: {{ podTemplate: {{}} }}\n{sections}"
        ))
        .unwrap()
    }

    fn containers(sections: &str) -> (Option<bool>, Vec<Container>) {
        let objects = objects(&provisioner(sections), &Settings::default());
        let capacity = objects.csi_driver.spec.storage_capacity;
        let deployment = serde_json::to_value(&objects.deployment).unwrap();
        let containers =
            serde_json::from_value(deployment["spec"]["template"]["spec"]["containers"].clone())
                .unwrap();
        (capacity, containers)
    }

    fn args<'a>(containers: &'a [Container], name: &str) -> Option<&'a [String]> {
        containers
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.args.as_deref().unwrap_or_default())
    }

    #[test]
    fn capacity_tracking_runs_exactly_with_storage_capacity() {
        let (capacity, plain) = containers("");
        assert_eq!(capacity, Some(false));
        let provisioner_args = args(&plain, PROVISIONER.name).unwrap();
        assert!(!provisioner_args.iter().any(|a| a.contains("capacity")));

        let (capacity, with) = containers("  storageCapacity: { availableCapacity: 1Gi }\n");
        assert_eq!(capacity, Some(true));
        let provisioner_args = args(&with, PROVISIONER.name).unwrap();
        for flag in CAPACITY_ARGS {
            assert!(
                provisioner_args.iter().any(|a| a == flag),
                "{provisioner_args:?}"
            );
        }
        let sidecar = with.iter().find(|c| c.name == PROVISIONER.name).unwrap();
        let env: Vec<&str> = sidecar
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(env, ["NAMESPACE", "POD_NAME"]);
    }

    #[test]
    fn the_resizer_runs_with_the_attributes_gate_exactly_with_volume_modification() {
        let (_, plain) = containers("");
        assert!(args(&plain, RESIZER.name).is_none());
        let (_, expands) = containers("  volumeExpansion: { capacity: 1Gi }\n");
        let resizer = args(&expands, RESIZER.name).unwrap();
        assert!(!resizer.iter().any(|a| a.contains("VolumeAttributesClass")));
        for sections in [
            "  volumeModification: {}\n",
            "  volumeModification: {}\n  volumeExpansion: { capacity: 1Gi }\n",
        ] {
            let (_, modifies) = containers(sections);
            let resizer = args(&modifies, RESIZER.name).expect("a resizer");
            assert_eq!(
                resizer
                    .iter()
                    .filter(|a| MODIFICATION_ARGS.contains(&a.as_str()))
                    .count(),
                1,
                "{resizer:?}"
            );
        }
    }

    #[test]
    fn the_namespaced_role_lets_external_provisioner_keep_its_capacities() {
        let role = super::super::csi_leader_election_role();
        let rules = role.rules.unwrap();
        let allows = |resource: &str, verb: &str| {
            rules.iter().any(|r| {
                r.resources
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|x| x == resource)
                    && r.verbs.iter().any(|v| v == verb)
            })
        };
        for verb in ["list", "watch", "create", "update", "delete"] {
            assert!(allows("csistoragecapacities", verb), "{verb}");
        }
        assert!(allows("replicasets", "get"));
        assert!(!allows("replicasets", "list"));
    }
}
