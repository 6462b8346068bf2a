//! The once-per-cluster installation: namespace, CRD, RBAC and the
//! `pav-controller` Deployment.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::{Value, json};

use super::driver::{self, CSI_CONTROLLER_ROLE, CSI_LEADER_ELECTION_ROLE, CSI_NODE_ROLE};
use super::{
    DEFAULT_METRICS_ADDR, LABEL_COMPONENT, LABEL_NAME, PAV_BINARY, Settings, json as to_json,
    labels, typed,
};

/// Name of the controller's Deployment, ServiceAccount and RBAC objects.
pub const CONTROLLER: &str = "pav-controller";

fn meta(name: &str, namespace: Option<&str>) -> Value {
    let mut meta = json!({
        "name": name,
        "labels": labels(&[(LABEL_NAME, "pav"), (LABEL_COMPONENT, "controller")]),
    });
    if let Some(namespace) = namespace {
        meta["namespace"] = json!(namespace);
    }
    meta
}

/// Everything `pav manifests` prints, in the order `kubectl apply` needs.
pub fn objects(settings: &Settings) -> Vec<Value> {
    vec![
        to_json(&namespace(settings)),
        to_json(&pav_templates::PavProvisioner::definition()),
        to_json(&driver::csi_controller_role()),
        to_json(&driver::csi_node_role()),
        to_json(&driver::csi_leader_election_role()),
        to_json(&service_account(settings)),
        to_json(&cluster_role()),
        to_json(&cluster_role_binding(settings)),
        to_json(&role(settings)),
        to_json(&role_binding(settings)),
        to_json(&deployment(settings)),
    ]
}

/// The pav namespace.
pub fn namespace(settings: &Settings) -> Namespace {
    typed(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": settings.namespace,
            "labels": labels(&[(LABEL_NAME, "pav")]),
        },
    }))
}

/// The controller's ServiceAccount.
pub fn service_account(settings: &Settings) -> ServiceAccount {
    typed(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(CONTROLLER, Some(&settings.namespace)),
    }))
}

/// What the controller may do cluster-wide, each verb one it calls:
/// watch PavProvisioners and patch their finalizer and status, apply and
/// delete CSIDrivers and the drivers' ClusterRoleBindings, bind the three
/// shared driver roles (by name: no `escalate`, no other role), count
/// volumes, claims, staging pods and snapshots of a provisioner being
/// deleted, and record events.
pub fn cluster_role() -> ClusterRole {
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(CONTROLLER, None),
        "rules": [
            {
                "apiGroups": [pav_templates::model::GROUP],
                "resources": ["pavprovisioners"],
                "verbs": ["list", "watch", "patch"],
            },
            {
                "apiGroups": [pav_templates::model::GROUP],
                "resources": ["pavprovisioners/status"],
                "verbs": ["patch"],
            },
            {
                // Server-side apply creates through patch, hence create.
                "apiGroups": ["storage.k8s.io"],
                "resources": ["csidrivers"],
                "verbs": ["list", "watch", "create", "patch", "delete"],
            },
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterrolebindings"],
                "verbs": ["create", "patch", "delete"],
            },
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "resourceNames": [CSI_CONTROLLER_ROLE, CSI_NODE_ROLE, CSI_LEADER_ELECTION_ROLE],
                "verbs": ["bind"],
            },
            {
                // PVs requeue their provisioner; the count goes in status.
                "apiGroups": [""],
                "resources": ["persistentvolumes"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": [""],
                "resources": ["persistentvolumeclaims"],
                "verbs": ["list"],
            },
            {
                // Staging pods still running keep a provisioner from being
                // deleted: its node plugin must live to unstage them.
                "apiGroups": [""],
                "resources": ["pods"],
                "verbs": ["list"],
            },
            {
                "apiGroups": ["storage.k8s.io"],
                "resources": ["storageclasses"],
                "verbs": ["list"],
            },
            {
                // Snapshots keep a provisioner from being deleted: deleting
                // one needs its driver.
                "apiGroups": ["snapshot.storage.k8s.io"],
                "resources": ["volumesnapshotcontents"],
                "verbs": ["list"],
            },
            {
                "apiGroups": ["events.k8s.io"],
                "resources": ["events"],
                "verbs": ["create", "patch"],
            },
        ],
    }))
}

/// Binds [`cluster_role`] to the controller's ServiceAccount.
pub fn cluster_role_binding(settings: &Settings) -> ClusterRoleBinding {
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(CONTROLLER, None),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": CONTROLLER,
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": CONTROLLER,
            "namespace": settings.namespace,
        }],
    }))
}

/// What the controller may do in the pav namespace: apply, watch and
/// delete the drivers' Deployments and DaemonSets, apply and delete their
/// ServiceAccounts and leader-election RoleBindings, hold its own
/// leader-election Lease and delete those of a deleted driver's sidecars.
pub fn role(settings: &Settings) -> Role {
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(CONTROLLER, Some(&settings.namespace)),
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments", "daemonsets"],
                "verbs": ["list", "watch", "create", "patch", "delete"],
            },
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts"],
                "verbs": ["create", "patch", "delete"],
            },
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["rolebindings"],
                "verbs": ["create", "patch", "delete"],
            },
            {
                // get, create, update: its own leader election; delete: the
                // Leases of a deleted driver's sidecars.
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "create", "update", "delete"],
            },
        ],
    }))
}

/// Binds [`role`] to the controller's ServiceAccount.
pub fn role_binding(settings: &Settings) -> RoleBinding {
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(CONTROLLER, Some(&settings.namespace)),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": CONTROLLER,
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": CONTROLLER,
            "namespace": settings.namespace,
        }],
    }))
}

/// The `pav controller` Deployment: one replica with leader election, so
/// a rolling update never has two controllers reconciling at once.
pub fn deployment(settings: &Settings) -> Deployment {
    let port = DEFAULT_METRICS_ADDR
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<i32>().ok())
        .unwrap_or(8080);
    let selector = labels(&[(LABEL_NAME, "pav"), (LABEL_COMPONENT, "controller")]);
    typed(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(CONTROLLER, Some(&settings.namespace)),
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": selector },
            "template": {
                "metadata": { "labels": selector },
                "spec": {
                    "serviceAccountName": CONTROLLER,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": { "type": "RuntimeDefault" },
                    },
                    "containers": [{
                        "name": "pav",
                        "image": settings.image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": [PAV_BINARY],
                        "args": [
                            "controller",
                            format!("--namespace={}", settings.namespace),
                            format!("--image={}", settings.image),
                            format!("--provisioner-image={}", settings.provisioner_image),
                            format!("--resizer-image={}", settings.resizer_image),
                            format!("--snapshotter-image={}", settings.snapshotter_image),
                            format!("--registrar-image={}", settings.registrar_image),
                            format!("--kubelet-dir={}", settings.kubelet_dir),
                            format!("--log-format={}", settings.logging.format),
                            format!("--metrics-addr={DEFAULT_METRICS_ADDR}"),
                            "--leader-election".to_owned(),
                        ],
                        "env": [
                            { "name": "RUST_LOG", "value": "info" },
                            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                        ],
                        "ports": [{ "name": "metrics", "containerPort": port, "protocol": "TCP" }],
                        "livenessProbe": {
                            "httpGet": { "path": "/healthz", "port": "metrics" },
                            "periodSeconds": 20,
                        },
                        "readinessProbe": {
                            "httpGet": { "path": "/readyz", "port": "metrics" },
                            "periodSeconds": 10,
                        },
                        "resources": {
                            "requests": { "cpu": "10m", "memory": "32Mi" },
                            "limits": { "memory": "256Mi" },
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": { "drop": ["ALL"] },
                        },
                    }],
                },
            },
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_deployment_passes_settings() {
        let settings = Settings {
            namespace: "storage".into(),
            image: "example/pav:1".into(),
            ..Settings::default()
        };
        let deployment = deployment(&settings);
        assert_eq!(deployment.metadata.namespace.as_deref(), Some("storage"));
        let spec = deployment.spec.template.spec.unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some(CONTROLLER));
        let container = &spec.containers[0];
        assert_eq!(container.image.as_deref(), Some("example/pav:1"));
        assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
        let args = container.args.clone().unwrap();
        assert_eq!(args[0], "controller");
        assert!(args.contains(&"--namespace=storage".to_owned()));
        assert!(args.contains(&"--image=example/pav:1".to_owned()));
        assert!(args.contains(&"--leader-election".to_owned()));
    }

    #[test]
    fn the_controller_gets_every_setting() {
        use clap::Parser as _;
        let settings = Settings {
            namespace: "storage".into(),
            image: "example/pav:1".into(),
            provisioner_image: "example/provisioner:1".into(),
            resizer_image: "example/resizer:1".into(),
            snapshotter_image: "example/snapshotter:1".into(),
            registrar_image: "example/registrar:1".into(),
            kubelet_dir: "/var/lib/k0s/kubelet".into(),
            logging: crate::telemetry::Logging {
                format: crate::telemetry::LogFormat::Json,
            },
        };
        let spec = deployment(&settings).spec.template.spec.unwrap();
        let args = spec.containers[0].args.clone().unwrap();
        let cli = crate::cli::Cli::try_parse_from(std::iter::once("pav".to_owned()).chain(args))
            .expect("the controller's arguments parse");
        let crate::cli::Command::Controller(parsed) = cli.command else {
            panic!("not `pav controller`: {:?}", cli.command);
        };
        assert_eq!(parsed.settings, settings);
    }

    #[test]
    fn controller_binds_only_the_driver_roles() {
        let rules = cluster_role().rules.unwrap();
        let on_roles: Vec<_> = rules
            .iter()
            .filter(|r| {
                r.resources
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|x| x == "clusterroles" || x == "roles")
            })
            .collect();
        assert_eq!(on_roles.len(), 1, "{on_roles:?}");
        assert_eq!(on_roles[0].verbs, ["bind"]);
        assert_eq!(
            on_roles[0].resource_names.as_deref().unwrap(),
            [CSI_CONTROLLER_ROLE, CSI_NODE_ROLE, CSI_LEADER_ELECTION_ROLE]
        );
        let namespaced = role(&Settings::default()).rules.unwrap();
        for rule in rules.iter().chain(&namespaced) {
            assert!(
                !rule.verbs.iter().any(|v| v == "escalate" || v == "*"),
                "{rule:?}"
            );
        }
        // Every role the controller binds is installed next to it.
        let installed: Vec<String> = objects(&Settings::default())
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        for name in on_roles[0].resource_names.as_deref().unwrap() {
            assert!(installed.contains(name), "{name} is not in pav manifests");
        }
    }

    #[test]
    fn objects_are_in_apply_order() {
        let kinds: Vec<String> = objects(&Settings::default())
            .iter()
            .map(|o| o["kind"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "CustomResourceDefinition",
                "ClusterRole",
                "ClusterRole",
                "ClusterRole",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Deployment"
            ]
        );
    }
}
