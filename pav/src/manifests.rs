//! `pav manifests`: the installation, generated from Rust types.
//!
//! Every object pav deploys is built here by a pure function, so it can be
//! tested without a cluster and is the same whether `pav manifests` prints
//! it or `pav controller` applies it:
//!
//! - [`install`]: what `kubectl apply -f deploy/pav.yaml` creates once per
//!   cluster (namespace, CRD, the controller's RBAC and Deployment);
//! - [`driver`]: what `pav controller` creates for each PavProvisioner
//!   (CSIDriver, CSI controller Deployment, node DaemonSet, service
//!   accounts and RBAC).

pub mod driver;
pub mod install;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::pods::{DEFAULT_NAMESPACE, LABEL_PROVISIONER};

/// Default pav image: `pav:<version of this pav>`, the tag the Helm chart's
/// `appVersion` also names (docs/install.md says how to build and load or
/// push it).
pub const DEFAULT_IMAGE: &str = concat!("pav:", env!("CARGO_PKG_VERSION"));
/// Default image pull policy of every container pav deploys.
pub const DEFAULT_IMAGE_PULL_POLICY: &str = "IfNotPresent";
/// Default replicas of the controller and of every driver's CSI
/// controller: two, so that one survives a node's drain or loss.
pub const DEFAULT_CONTROLLER_REPLICAS: i32 = 2;
/// Default priority class of the controller and of every driver's CSI
/// controller.
pub const DEFAULT_CONTROLLER_PRIORITY_CLASS: &str = "system-cluster-critical";
/// Default priority class of every driver's node plugin: a node plugin
/// evicted or not scheduled leaves the node's volumes unusable.
pub const DEFAULT_NODE_PLUGIN_PRIORITY_CLASS: &str = "system-node-critical";
/// Default tolerations of the node plugins: every node a client pod may
/// land on needs one.
pub const DEFAULT_NODE_PLUGIN_TOLERATIONS: &str = r#"[{"operator":"Exists"}]"#;
/// Default resources of the controller's container.
pub const DEFAULT_CONTROLLER_RESOURCES: &str =
    r#"{"limits":{"memory":"256Mi"},"requests":{"cpu":"10m","memory":"32Mi"}}"#;
/// Default resources of `pav csi-controller`, `pav csi-node` and the CSI
/// controller's sidecars.
pub const DEFAULT_DRIVER_RESOURCES: &str = r#"{"requests":{"cpu":"10m","memory":"32Mi"}}"#;
/// Default resources of node-driver-registrar.
pub const DEFAULT_REGISTRAR_RESOURCES: &str = r#"{"requests":{"cpu":"5m","memory":"16Mi"}}"#;
/// Default Pod Security level of the pav namespace: the node plugins and
/// staging pods are privileged.
pub const DEFAULT_POD_SECURITY: &str = "privileged";
/// Label of the Pod Security level a namespace enforces.
pub const LABEL_POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
/// Default external-provisioner sidecar image.
pub const DEFAULT_PROVISIONER_IMAGE: &str = "registry.k8s.io/sig-storage/csi-provisioner:v6.4.0";
/// Default external-resizer sidecar image (deployed for provisioners with
/// `volumeExpansion`).
pub const DEFAULT_RESIZER_IMAGE: &str = "registry.k8s.io/sig-storage/csi-resizer:v2.3.0";
/// Default csi-snapshotter sidecar image (external-snapshotter; deployed for
/// provisioners with `snapshotCreation`).
pub const DEFAULT_SNAPSHOTTER_IMAGE: &str = "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0";
/// Default external-attacher sidecar image (deployed for provisioners
/// with `volumeAttach`).
pub const DEFAULT_ATTACHER_IMAGE: &str = "registry.k8s.io/sig-storage/csi-attacher:v4.13.0";
/// Default node-driver-registrar sidecar image.
pub const DEFAULT_REGISTRAR_IMAGE: &str =
    "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0";
/// Default kubelet root directory.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";
/// Where the `pav` binary lives in the pav image (see the Dockerfile).
pub const PAV_BINARY: &str = "/usr/local/bin/pav";
/// Label `app.kubernetes.io/name`, `pav` on everything pav deploys.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Label `app.kubernetes.io/component`.
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// Label `app.kubernetes.io/managed-by`.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Field manager and `managed-by` value of objects `pav controller` applies.
pub const FIELD_MANAGER: &str = "pav-controller";

/// Where pav runs and with which images: shared by `pav manifests` and
/// `pav controller` (which passes them on to the drivers it deploys).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Settings {
    /// Namespace of pav's own objects (controller, drivers, default pod namespace).
    #[arg(long, env = "PAV_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The pav image (controller, CSI controller and CSI node plugin).
    #[arg(long, env = "PAV_IMAGE", default_value = DEFAULT_IMAGE)]
    pub image: String,
    /// The external-provisioner sidecar image.
    #[arg(long, env = "PAV_PROVISIONER_IMAGE", default_value = DEFAULT_PROVISIONER_IMAGE)]
    pub provisioner_image: String,
    /// The external-resizer sidecar image (drivers with `volumeExpansion`).
    #[arg(long, env = "PAV_RESIZER_IMAGE", default_value = DEFAULT_RESIZER_IMAGE)]
    pub resizer_image: String,
    /// The csi-snapshotter sidecar image (drivers with `snapshotCreation`).
    #[arg(long, env = "PAV_SNAPSHOTTER_IMAGE", default_value = DEFAULT_SNAPSHOTTER_IMAGE)]
    pub snapshotter_image: String,
    /// The external-attacher sidecar image (drivers with `volumeAttach`).
    #[arg(long, env = "PAV_ATTACHER_IMAGE", default_value = DEFAULT_ATTACHER_IMAGE)]
    pub attacher_image: String,
    /// The node-driver-registrar sidecar image.
    #[arg(long, env = "PAV_REGISTRAR_IMAGE", default_value = DEFAULT_REGISTRAR_IMAGE)]
    pub registrar_image: String,
    /// The kubelet's root directory on every node.
    #[arg(long, env = "PAV_KUBELET_DIR", default_value = DEFAULT_KUBELET_DIR)]
    pub kubelet_dir: String,
    /// How the controller, its drivers and their sidecars log.
    #[command(flatten)]
    pub logging: crate::telemetry::Logging,
    /// Image pull policy of every container pav deploys.
    #[arg(long, env = "PAV_IMAGE_PULL_POLICY", default_value = DEFAULT_IMAGE_PULL_POLICY,
          value_parser = ["Always", "IfNotPresent", "Never"])]
    pub image_pull_policy: String,
    /// Secrets (in the pav namespace) the controller's and the drivers'
    /// pods pull their images with: repeat the flag or separate by commas.
    #[arg(
        long = "image-pull-secret",
        env = "PAV_IMAGE_PULL_SECRETS",
        value_delimiter = ','
    )]
    pub image_pull_secrets: Vec<String>,
    /// Where the controller and every driver's CSI controller run.
    #[command(flatten)]
    pub controller: ControllerPlacement,
    /// Where every driver's node plugin runs.
    #[command(flatten)]
    pub node_plugin: NodePluginPlacement,
    /// Resources of every container pav deploys.
    #[command(flatten)]
    pub resources: Resources,
}

/// Scheduling of the controller and of every driver's CSI controller
/// Deployment.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ControllerPlacement {
    /// Replicas of the controller and of each driver's CSI controller:
    /// one leads (a Lease each, its CSI sidecars' Leases), the others
    /// stand by and take over within the Lease's duration when it goes.
    /// Each Deployment has a PodDisruptionBudget of one unavailable pod.
    #[arg(long = "controller-replicas", id = "controller_replicas", env = "PAV_CONTROLLER_REPLICAS",
          default_value_t = DEFAULT_CONTROLLER_REPLICAS, value_parser = clap::value_parser!(i32).range(1..))]
    pub replicas: i32,
    /// Priority class of the controller and of the drivers' CSI
    /// controllers (empty: none).
    #[arg(long = "controller-priority-class", id = "controller_priority_class", env = "PAV_CONTROLLER_PRIORITY_CLASS",
          default_value = DEFAULT_CONTROLLER_PRIORITY_CLASS)]
    pub priority_class: String,
    /// Their pods' `nodeSelector`, as a JSON object.
    #[arg(long = "controller-node-selector", id = "controller_node_selector", env = "PAV_CONTROLLER_NODE_SELECTOR",
          default_value = "{}", value_parser = Json::parser::<BTreeMap<String, String>>)]
    pub node_selector: Json,
    /// Their pods' `tolerations`, as a JSON array.
    #[arg(long = "controller-tolerations", id = "controller_tolerations", env = "PAV_CONTROLLER_TOLERATIONS",
          default_value = "[]", value_parser = Json::parser::<Vec<Toleration>>)]
    pub tolerations: Json,
    /// Their pods' `affinity`, as a JSON object.
    #[arg(long = "controller-affinity", id = "controller_affinity", env = "PAV_CONTROLLER_AFFINITY",
          default_value = "{}", value_parser = Json::parser::<Affinity>)]
    pub affinity: Json,
}

impl Default for ControllerPlacement {
    fn default() -> Self {
        Self {
            replicas: DEFAULT_CONTROLLER_REPLICAS,
            priority_class: DEFAULT_CONTROLLER_PRIORITY_CLASS.into(),
            node_selector: Json::default_of("{}"),
            tolerations: Json::default_of("[]"),
            affinity: Json::default_of("{}"),
        }
    }
}

/// Where pods go: a priority class and the scheduling fields of a pod spec
/// (nodeSelector, tolerations, affinity). Two types hold it, because each
/// has command-line flags of its own.
pub trait Placement {
    /// The priority class (empty: none).
    fn priority_class(&self) -> &str;
    /// The pod spec fields, by name; an empty one is left out.
    fn scheduling(&self) -> [(&'static str, &Json); 3];
}

impl Placement for ControllerPlacement {
    fn priority_class(&self) -> &str {
        &self.priority_class
    }

    fn scheduling(&self) -> [(&'static str, &Json); 3] {
        [
            ("nodeSelector", &self.node_selector),
            ("tolerations", &self.tolerations),
            ("affinity", &self.affinity),
        ]
    }
}

impl Placement for NodePluginPlacement {
    fn priority_class(&self) -> &str {
        &self.priority_class
    }

    fn scheduling(&self) -> [(&'static str, &Json); 3] {
        [
            ("nodeSelector", &self.node_selector),
            ("tolerations", &self.tolerations),
            ("affinity", &self.affinity),
        ]
    }
}

/// Scheduling of every driver's node plugin DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct NodePluginPlacement {
    /// Priority class of the drivers' node plugins (empty: none).
    #[arg(long = "node-plugin-priority-class", id = "node_plugin_priority_class", env = "PAV_NODE_PLUGIN_PRIORITY_CLASS",
          default_value = DEFAULT_NODE_PLUGIN_PRIORITY_CLASS)]
    pub priority_class: String,
    /// Their pods' `nodeSelector`, as a JSON object.
    #[arg(long = "node-plugin-node-selector", id = "node_plugin_node_selector", env = "PAV_NODE_PLUGIN_NODE_SELECTOR",
          default_value = "{}", value_parser = Json::parser::<BTreeMap<String, String>>)]
    pub node_selector: Json,
    /// Their pods' `tolerations`, as a JSON array (default: every taint).
    #[arg(long = "node-plugin-tolerations", id = "node_plugin_tolerations", env = "PAV_NODE_PLUGIN_TOLERATIONS",
          default_value = DEFAULT_NODE_PLUGIN_TOLERATIONS, value_parser = Json::parser::<Vec<Toleration>>)]
    pub tolerations: Json,
    /// Their pods' `affinity`, as a JSON object.
    #[arg(long = "node-plugin-affinity", id = "node_plugin_affinity", env = "PAV_NODE_PLUGIN_AFFINITY",
          default_value = "{}", value_parser = Json::parser::<Affinity>)]
    pub affinity: Json,
}

impl Default for NodePluginPlacement {
    fn default() -> Self {
        Self {
            priority_class: DEFAULT_NODE_PLUGIN_PRIORITY_CLASS.into(),
            node_selector: Json::default_of("{}"),
            tolerations: Json::default_of(DEFAULT_NODE_PLUGIN_TOLERATIONS),
            affinity: Json::default_of("{}"),
        }
    }
}

/// `resources` of each container pav deploys, as JSON objects
/// (`{"requests":{"cpu":"10m"},"limits":{"memory":"256Mi"}}`).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Resources {
    /// The controller (`pav controller`).
    #[arg(long = "controller-resources", id = "controller_resources", env = "PAV_CONTROLLER_RESOURCES",
          default_value = DEFAULT_CONTROLLER_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub controller: Json,
    /// `pav csi-controller` in every driver's CSI controller.
    #[arg(long = "csi-controller-resources", id = "csi_controller_resources", env = "PAV_CSI_CONTROLLER_RESOURCES",
          default_value = DEFAULT_DRIVER_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub csi_controller: Json,
    /// `pav csi-node` in every driver's node plugin.
    #[arg(long = "node-plugin-resources", id = "node_plugin_resources", env = "PAV_NODE_PLUGIN_RESOURCES",
          default_value = DEFAULT_DRIVER_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub node_plugin: Json,
    /// external-provisioner.
    #[arg(long = "provisioner-resources", id = "provisioner_resources", env = "PAV_PROVISIONER_RESOURCES",
          default_value = DEFAULT_DRIVER_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub provisioner: Json,
    /// external-resizer.
    #[arg(long = "resizer-resources", id = "resizer_resources", env = "PAV_RESIZER_RESOURCES",
          default_value = DEFAULT_DRIVER_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub resizer: Json,
    /// csi-snapshotter.
    #[arg(long = "snapshotter-resources", id = "snapshotter_resources", env = "PAV_SNAPSHOTTER_RESOURCES",
          default_value = DEFAULT_DRIVER_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub snapshotter: Json,
    /// external-attacher.
    #[arg(long = "attacher-resources", id = "attacher_resources", env = "PAV_ATTACHER_RESOURCES",
          default_value = DEFAULT_DRIVER_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub attacher: Json,
    /// node-driver-registrar.
    #[arg(long = "registrar-resources", id = "registrar_resources", env = "PAV_REGISTRAR_RESOURCES",
          default_value = DEFAULT_REGISTRAR_RESOURCES, value_parser = Json::parser::<ResourceRequirements>)]
    pub registrar: Json,
}

impl Default for Resources {
    fn default() -> Self {
        Self {
            controller: Json::default_of(DEFAULT_CONTROLLER_RESOURCES),
            csi_controller: Json::default_of(DEFAULT_DRIVER_RESOURCES),
            node_plugin: Json::default_of(DEFAULT_DRIVER_RESOURCES),
            provisioner: Json::default_of(DEFAULT_DRIVER_RESOURCES),
            resizer: Json::default_of(DEFAULT_DRIVER_RESOURCES),
            snapshotter: Json::default_of(DEFAULT_DRIVER_RESOURCES),
            attacher: Json::default_of(DEFAULT_DRIVER_RESOURCES),
            registrar: Json::default_of(DEFAULT_REGISTRAR_RESOURCES),
        }
    }
}

/// A JSON flag value (resources, tolerations, ...), checked against its
/// Kubernetes type when parsed and kept with its object keys sorted, so it
/// prints as compact JSON exactly as Helm's `toJson` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json(pub serde_json::Value);

impl Json {
    /// A clap value parser: JSON that deserializes as `T`.
    pub fn parser<T: DeserializeOwned>(text: &str) -> Result<Json, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        serde_json::from_value::<T>(value.clone()).map_err(|e| e.to_string())?;
        Ok(Json(sorted(value)))
    }

    /// A built-in default.
    fn default_of(text: &str) -> Json {
        Json(sorted(
            serde_json::from_str(text).expect("defaults are JSON"),
        ))
    }

    /// Whether it is `null`, `{}` or `[]`: such a field is left out.
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            serde_json::Value::Null => true,
            serde_json::Value::Object(map) => map.is_empty(),
            serde_json::Value::Array(items) => items.is_empty(),
            _ => false,
        }
    }
}

impl std::fmt::Display for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.to_string())
    }
}

/// `value` with every object's keys in order (serde_json keeps insertion
/// order in this workspace).
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let ordered: BTreeMap<String, serde_json::Value> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            serde_json::Value::Object(ordered.into_iter().collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.into(),
            image: DEFAULT_IMAGE.into(),
            provisioner_image: DEFAULT_PROVISIONER_IMAGE.into(),
            resizer_image: DEFAULT_RESIZER_IMAGE.into(),
            snapshotter_image: DEFAULT_SNAPSHOTTER_IMAGE.into(),
            attacher_image: DEFAULT_ATTACHER_IMAGE.into(),
            registrar_image: DEFAULT_REGISTRAR_IMAGE.into(),
            kubelet_dir: DEFAULT_KUBELET_DIR.into(),
            logging: Default::default(),
            image_pull_policy: DEFAULT_IMAGE_PULL_POLICY.into(),
            image_pull_secrets: Vec::new(),
            controller: Default::default(),
            node_plugin: Default::default(),
            resources: Default::default(),
        }
    }
}

/// Default address of the controller's metrics and health endpoints.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:8080";

/// Flags of `pav manifests`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct Args {
    /// Namespace and images.
    #[command(flatten)]
    pub settings: Settings,
    /// Pod Security level the pav namespace enforces (label
    /// `pod-security.kubernetes.io/enforce`): the node plugins and staging
    /// pods are privileged, so anything else refuses them.
    #[arg(long, env = "PAV_POD_SECURITY", default_value = DEFAULT_POD_SECURITY,
          value_parser = ["privileged", "baseline", "restricted"])]
    pub pod_security: String,
    /// Address of the controller's metrics and health endpoints (its
    /// container port and the `pav-metrics` Service follow the port).
    #[arg(long, env = "PAV_METRICS_ADDR", default_value = DEFAULT_METRICS_ADDR)]
    pub metrics_addr: std::net::SocketAddr,
    /// The controller reconciles only PavProvisioners matching this label
    /// selector (default: all).
    #[arg(long, env = "PAV_SELECTOR")]
    pub selector: Option<String>,
    /// The controller's client-side API rate limit.
    #[command(flatten)]
    pub api: crate::client::ApiLimits,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            pod_security: DEFAULT_POD_SECURITY.into(),
            metrics_addr: DEFAULT_METRICS_ADDR.parse().expect("a socket address"),
            selector: None,
            api: Default::default(),
        }
    }
}

/// The manifests as a multi-document YAML stream.
///
/// ```
/// let yaml = pav::manifests::render(&Default::default()).unwrap();
/// assert!(yaml.contains("kind: CustomResourceDefinition"));
/// ```
pub fn render(args: &Args) -> anyhow::Result<String> {
    let mut out = String::from(
        "# pav: Pods-as-Volumes. Generated by `pav manifests`; do not edit.\n\
         # Regenerate with: cargo run -p pav -- manifests > deploy/pav.yaml\n",
    );
    for object in install::objects(args) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&object)?);
    }
    Ok(out)
}

/// The user and group pav's pods that need no root run as: the pav
/// image's `USER` (the Dockerfile), distroless' "nonroot".
pub const NON_ROOT_USER: i64 = 65532;

/// The pod `securityContext` of pav's pods that need no root (the
/// controller, every driver's CSI controller): Pod Security `restricted`'s
/// user and seccomp fields. Pod-level, so every container runs as the same
/// user: the CSI sidecars' images set no `USER` (they would run as root,
/// which `runAsNonRoot` refuses), and the CSI socket `pav csi-controller`
/// makes is its user's alone (mode 0600).
pub(crate) fn non_root_pod_security() -> serde_json::Value {
    serde_json::json!({
        "runAsNonRoot": true,
        "runAsUser": NON_ROOT_USER,
        "runAsGroup": NON_ROOT_USER,
        "seccompProfile": { "type": "RuntimeDefault" },
    })
}

/// The container `securityContext` of every container of those pods: no
/// privilege escalation, no capability, a read-only root (they write only
/// the CSI socket, in an emptyDir).
pub(crate) fn unprivileged_container_security() -> serde_json::Value {
    serde_json::json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": { "drop": ["ALL"] },
    })
}

/// Builds a typed object from JSON written with `serde_json::json!`.
///
/// Panics if the JSON does not fit the type: the builders are pure and
/// covered by tests, so that is a programming error.
pub(crate) fn typed<T: DeserializeOwned>(value: serde_json::Value) -> T {
    match serde_json::from_value(value) {
        Ok(object) => object,
        Err(err) => panic!("object builder produced an invalid object: {err}"),
    }
}

/// Serializes anything to JSON (for embedding typed parts in `json!`).
pub(crate) fn json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("serializable")
}

/// Labels as a map.
pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scripts/versions.env` as KEY=value pairs, `${KEY}` expanded.
    fn versions() -> BTreeMap<String, String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/versions.env");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut vars = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = vars
                .iter()
                .fold(value.to_owned(), |v, (k, x): (&String, &String)| {
                    v.replace(&format!("${{{k}}}"), x)
                });
            vars.insert(key.to_owned(), value);
        }
        vars
    }

    /// The cluster scripts build the sidecar images under the names in
    /// versions.env and install pav with the default settings, so the
    /// defaults must be those names.
    #[test]
    fn default_sidecar_images_are_those_the_cluster_scripts_load() {
        let versions = versions();
        for (default, key) in [
            (DEFAULT_PROVISIONER_IMAGE, "CSI_PROVISIONER_IMAGE"),
            (DEFAULT_RESIZER_IMAGE, "CSI_RESIZER_IMAGE"),
            (DEFAULT_SNAPSHOTTER_IMAGE, "CSI_SNAPSHOTTER_IMAGE"),
            (DEFAULT_ATTACHER_IMAGE, "CSI_ATTACHER_IMAGE"),
            (DEFAULT_REGISTRAR_IMAGE, "CSI_NODE_DRIVER_REGISTRAR_IMAGE"),
        ] {
            assert_eq!(
                Some(default),
                versions.get(key).map(String::as_str),
                "{key}"
            );
        }
    }
}
