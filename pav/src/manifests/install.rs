//! The once-per-cluster installation: namespace, CRD, RBAC and the
//! `pav-controller` Deployment.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::{Value, json};

use super::driver;
use super::{
    Args, FIELD_MANAGER, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, LABEL_POD_SECURITY_ENFORCE,
    PAV_BINARY, Settings, json as to_json, labels, non_root_pod_security, typed,
    unprivileged_container_security,
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

/// Name of the headless Service over every pav pod's metrics ports.
pub const METRICS_SERVICE: &str = "pav-metrics";

/// Everything `pav manifests` prints, in the order `kubectl apply` needs.
pub fn objects(args: &Args) -> Vec<Value> {
    let settings = &args.settings;
    vec![
        to_json(&namespace(args)),
        to_json(&pav_templates::PavProvisioner::definition()),
        to_json(&driver::csi_controller_role()),
        to_json(&driver::csi_node_role()),
        to_json(&driver::csi_node_pods_role()),
        to_json(&driver::csi_leader_election_role()),
        to_json(&service_account(settings)),
        to_json(&cluster_role()),
        to_json(&cluster_role_binding(settings)),
        to_json(&binding_policy(settings)),
        to_json(&binding_policy_binding()),
        to_json(&role(settings)),
        to_json(&role_binding(settings)),
        to_json(&metrics_service(args)),
        to_json(&deployment(args)),
        to_json(&disruption_budget(settings)),
    ]
}

/// The pav namespace, enforcing the Pod Security level `--pod-security`
/// (`privileged` by default: the node plugins and staging pods are).
pub fn namespace(args: &Args) -> Namespace {
    typed(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": args.settings.namespace,
            "labels": labels(&[
                (LABEL_NAME, "pav"),
                (LABEL_POD_SECURITY_ENFORCE, &args.pod_security),
            ]),
        },
    }))
}

/// A headless Service over the metrics ports of every pav pod in the pav
/// namespace (the controller's `metrics`, each driver's `metrics` and its
/// CSI controller's sidecars' ports), for a Prometheus ServiceMonitor;
/// each port resolves by name on the pods that declare it.
pub fn metrics_service(args: &Args) -> Service {
    let sidecars = driver::CONTROLLER_SIDECARS;
    let mut ports = vec![json!({
        "name": "metrics",
        "port": args.metrics_addr.port(),
        "targetPort": "metrics",
        "protocol": "TCP",
    })];
    ports.extend(sidecars.iter().map(|s| {
        json!({
            "name": s.port_name,
            "port": s.http_port,
            "targetPort": s.port_name,
            "protocol": "TCP",
        })
    }));
    typed(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": METRICS_SERVICE,
            "namespace": args.settings.namespace,
            "labels": labels(&[(LABEL_NAME, "pav"), (LABEL_COMPONENT, "metrics")]),
        },
        "spec": {
            "clusterIP": "None",
            "selector": labels(&[(LABEL_NAME, "pav")]),
            "ports": ports,
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
/// delete CSIDrivers and the drivers' ClusterRoleBindings and RoleBindings
/// (the node plugins' in the namespaces their pods go to), bind the four
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
                // In whichever namespaces node phases' pods go to; list:
                // a driver's bindings where its pods no longer go.
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["rolebindings"],
                "verbs": ["list", "create", "patch", "delete"],
            },
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "resourceNames": driver::DRIVER_ROLES,
                "verbs": ["bind"],
            },
            {
                // PVs requeue their provisioner; the count goes in status;
                // get: a volume whose node pods' namespace is a template.
                "apiGroups": [""],
                "resources": ["persistentvolumes"],
                "verbs": ["get", "list", "watch"],
            },
            {
                // get: the claim such a template renders with.
                "apiGroups": [""],
                "resources": ["persistentvolumeclaims"],
                "verbs": ["get", "list"],
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

/// Name of the admission policy that keeps the controller to the
/// ClusterRoleBindings and RoleBindings it made, and of its binding
/// (named when it covered ClusterRoleBindings only).
pub const BINDING_POLICY: &str = "pav-controller-cluster-role-bindings";

/// Keeps the controller to its own ClusterRoleBindings and RoleBindings:
/// RBAC cannot limit `create`, `patch` and `delete` of bindings to names
/// (and namespaces) not known in advance (some per driver), so this
/// admission policy refuses the controller's ServiceAccount any change to
/// a binding that is not labelled as the controller's, before and after
/// the change (`managed-by: pav-controller`, which it puts on the
/// drivers' bindings).
pub fn binding_policy(settings: &Settings) -> Value {
    let account = format!("system:serviceaccount:{}:{CONTROLLER}", settings.namespace);
    let managed = format!("{LABEL_MANAGED_BY}={FIELD_MANAGER}");
    let labelled = |object: &str| {
        format!("{object}.metadata.?labels[?'{LABEL_MANAGED_BY}'].orValue('') == '{FIELD_MANAGER}'")
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta(BINDING_POLICY, None),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["rbac.authorization.k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["clusterrolebindings", "rolebindings"],
                }],
            },
            "matchConditions": [{
                "name": "pav-controller",
                "expression": format!("request.userInfo.username == '{account}'"),
            }],
            "validations": [
                {
                    "expression": format!("request.operation == 'CREATE' || {}", labelled("oldObject")),
                    "message": format!("pav's controller may only change or delete the role bindings it made (labelled {managed})"),
                },
                {
                    "expression": format!("request.operation == 'DELETE' || {}", labelled("object")),
                    "message": format!("pav's controller may only make role bindings labelled {managed}"),
                },
            ],
        },
    })
}

/// Applies [`binding_policy`], refusing what it refuses.
pub fn binding_policy_binding() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": meta(BINDING_POLICY, None),
        "spec": {
            "policyName": BINDING_POLICY,
            "validationActions": ["Deny"],
        },
    })
}

/// What the controller may do in the pav namespace: apply, watch and
/// delete the drivers' Deployments and DaemonSets, apply and delete their
/// ServiceAccounts and PodDisruptionBudgets, hold its own
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
                // Each driver's CSI controller's disruption budget.
                "apiGroups": ["policy"],
                "resources": ["poddisruptionbudgets"],
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

/// The `pav controller` Deployment: `--controller-replicas` pods, one
/// leading at a time (leader election), so neither a rolling update nor
/// a standby ever has two controllers reconciling at once.
pub fn deployment(args: &Args) -> Deployment {
    let settings = &args.settings;
    let pod_labels = json!(controller_selector());
    let mut controller_args = vec![
        "controller".to_owned(),
        format!("--namespace={}", settings.namespace),
        format!("--metrics-addr={}", args.metrics_addr),
        "--leader-election".to_owned(),
        format!("--kube-api-qps={}", args.api.qps),
        format!("--kube-api-burst={}", args.api.burst),
    ];
    if let Some(selector) = &args.selector {
        controller_args.push(format!("--selector={selector}"));
    }
    controller_args.extend(settings_args(settings));
    let spec = json!({
        "serviceAccountName": CONTROLLER,
        "securityContext": non_root_pod_security(),
        "containers": [{
            "name": "pav",
            "image": settings.image,
            "imagePullPolicy": settings.image_pull_policy,
            "command": [PAV_BINARY],
            "args": controller_args,
            "env": [
                { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
            ],
            "ports": [{ "name": "metrics", "containerPort": args.metrics_addr.port(), "protocol": "TCP" }],
            "livenessProbe": {
                "httpGet": { "path": "/healthz", "port": "metrics" },
                "periodSeconds": 20,
            },
            "readinessProbe": {
                "httpGet": { "path": "/readyz", "port": "metrics" },
                "periodSeconds": 10,
            },
            "resources": settings.resources.controller.0,
            "securityContext": unprivileged_container_security(),
        }],
    });
    driver::leader_elected_deployment(
        meta(CONTROLLER, Some(&settings.namespace)),
        &pod_labels,
        &pod_labels,
        spec,
        settings,
    )
}

/// The controller's PodDisruptionBudget.
pub fn disruption_budget(settings: &Settings) -> PodDisruptionBudget {
    driver::disruption_budget(
        meta(CONTROLLER, Some(&settings.namespace)),
        &json!(controller_selector()),
    )
}

/// The labels of the controller's pods.
fn controller_selector() -> std::collections::BTreeMap<String, String> {
    labels(&[(LABEL_NAME, "pav"), (LABEL_COMPONENT, "controller")])
}

/// The controller's flags that it passes on to the drivers it deploys,
/// every one of them, in a fixed order (the Helm chart writes the same).
fn settings_args(settings: &Settings) -> Vec<String> {
    let s = settings;
    let mut args = vec![
        format!("--image={}", s.image),
        format!("--image-pull-policy={}", s.image_pull_policy),
        format!("--provisioner-image={}", s.provisioner_image),
        format!("--resizer-image={}", s.resizer_image),
        format!("--snapshotter-image={}", s.snapshotter_image),
        format!("--attacher-image={}", s.attacher_image),
        format!("--registrar-image={}", s.registrar_image),
        format!("--kubelet-dir={}", s.kubelet_dir),
        format!("--log-format={}", s.logging.format),
        format!("--log-level={}", s.logging.level),
        format!("--controller-replicas={}", s.controller.replicas),
        format!(
            "--controller-priority-class={}",
            s.controller.priority_class
        ),
        format!("--controller-node-selector={}", s.controller.node_selector),
        format!("--controller-tolerations={}", s.controller.tolerations),
        format!("--controller-affinity={}", s.controller.affinity),
        format!(
            "--node-plugin-priority-class={}",
            s.node_plugin.priority_class
        ),
        format!(
            "--node-plugin-node-selector={}",
            s.node_plugin.node_selector
        ),
        format!("--node-plugin-tolerations={}", s.node_plugin.tolerations),
        format!("--node-plugin-affinity={}", s.node_plugin.affinity),
        format!("--controller-resources={}", s.resources.controller),
        format!("--csi-controller-resources={}", s.resources.csi_controller),
        format!("--node-plugin-resources={}", s.resources.node_plugin),
        format!("--provisioner-resources={}", s.resources.provisioner),
        format!("--resizer-resources={}", s.resources.resizer),
        format!("--snapshotter-resources={}", s.resources.snapshotter),
        format!("--attacher-resources={}", s.resources.attacher),
        format!("--registrar-resources={}", s.resources.registrar),
    ];
    if !s.image_pull_secrets.is_empty() {
        args.push(format!(
            "--image-pull-secret={}",
            s.image_pull_secrets.join(",")
        ));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::Json;
    use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
    use std::collections::BTreeMap;

    #[test]
    fn controller_deployment_passes_settings() {
        let args = Args {
            settings: Settings {
                namespace: "storage".into(),
                image: "example/pav:1".into(),
                ..Settings::default()
            },
            ..Args::default()
        };
        let deployment = deployment(&args);
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

    fn resources(cpu: &str) -> Json {
        Json::parser::<ResourceRequirements>(&format!(r#"{{"requests":{{"cpu":"{cpu}"}}}}"#))
            .unwrap()
    }

    /// Every setting reaches the controller through its arguments, so it
    /// deploys its drivers with them (and the arguments parse).
    #[test]
    fn the_controller_gets_every_setting() {
        use clap::Parser as _;
        let settings = Settings {
            namespace: "storage".into(),
            image: "example/pav:1".into(),
            provisioner_image: "example/provisioner:1".into(),
            resizer_image: "example/resizer:1".into(),
            snapshotter_image: "example/snapshotter:1".into(),
            attacher_image: "example/attacher:1".into(),
            registrar_image: "example/registrar:1".into(),
            kubelet_dir: "/var/lib/k0s/kubelet".into(),
            logging: crate::telemetry::Logging {
                format: crate::telemetry::LogFormat::Json,
                level: crate::telemetry::LogLevel::Debug,
            },
            image_pull_policy: "Always".into(),
            image_pull_secrets: vec!["one".into(), "two".into()],
            controller: crate::manifests::ControllerPlacement {
                replicas: 3,
                priority_class: String::new(),
                node_selector: Json::parser::<BTreeMap<String, String>>(r#"{"role":"infra"}"#)
                    .unwrap(),
                tolerations: Json::parser::<Vec<Toleration>>(
                    r#"[{"key":"infra","operator":"Exists","effect":"NoSchedule"}]"#,
                )
                .unwrap(),
                affinity: Json::parser::<Affinity>(r#"{"podAntiAffinity":{}}"#).unwrap(),
            },
            node_plugin: crate::manifests::NodePluginPlacement {
                priority_class: "storage-critical".into(),
                node_selector: Json::parser::<BTreeMap<String, String>>(r#"{"disk":"ssd"}"#)
                    .unwrap(),
                tolerations: Json::parser::<Vec<Toleration>>("[]").unwrap(),
                affinity: Json::parser::<Affinity>(r#"{"nodeAffinity":{}}"#).unwrap(),
            },
            resources: crate::manifests::Resources {
                controller: resources("1m"),
                csi_controller: resources("2m"),
                node_plugin: resources("3m"),
                provisioner: resources("4m"),
                resizer: resources("5m"),
                snapshotter: resources("6m"),
                registrar: resources("7m"),
                attacher: resources("8m"),
            },
        };
        let args = Args {
            settings: settings.clone(),
            ..Args::default()
        };
        let spec = deployment(&args).spec.template.spec.unwrap();
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
            driver::DRIVER_ROLES
        );
        let namespaced = role(&Settings::default()).rules.unwrap();
        for rule in rules.iter().chain(&namespaced) {
            assert!(
                !rule.verbs.iter().any(|v| v == "escalate" || v == "*"),
                "{rule:?}"
            );
        }
        // Every role the controller binds is installed next to it.
        let installed: Vec<String> = objects(&Args::default())
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
        let kinds: Vec<String> = objects(&Args::default())
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
                "ClusterRole",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
                "Role",
                "RoleBinding",
                "Service",
                "Deployment",
                "PodDisruptionBudget"
            ]
        );
    }
}
