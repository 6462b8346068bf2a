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

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::pods::{DEFAULT_NAMESPACE, LABEL_PROVISIONER};

/// Default pav image.
pub const DEFAULT_IMAGE: &str = "pav:dev";
/// Default external-provisioner sidecar image.
pub const DEFAULT_PROVISIONER_IMAGE: &str = "registry.k8s.io/sig-storage/csi-provisioner:v5.3.0";
/// Default external-resizer sidecar image (deployed for provisioners with
/// `volumeExpansion`).
pub const DEFAULT_RESIZER_IMAGE: &str = "registry.k8s.io/sig-storage/csi-resizer:v1.14.0";
/// Default csi-snapshotter sidecar image (external-snapshotter; deployed for
/// provisioners with `snapshotCreation`).
pub const DEFAULT_SNAPSHOTTER_IMAGE: &str = "registry.k8s.io/sig-storage/csi-snapshotter:v8.3.0";
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
    /// The node-driver-registrar sidecar image.
    #[arg(long, env = "PAV_REGISTRAR_IMAGE", default_value = DEFAULT_REGISTRAR_IMAGE)]
    pub registrar_image: String,
    /// The kubelet's root directory on every node.
    #[arg(long, env = "PAV_KUBELET_DIR", default_value = DEFAULT_KUBELET_DIR)]
    pub kubelet_dir: String,
    /// How the controller, its drivers and their sidecars log.
    #[command(flatten)]
    pub logging: crate::telemetry::Logging,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.into(),
            image: DEFAULT_IMAGE.into(),
            provisioner_image: DEFAULT_PROVISIONER_IMAGE.into(),
            resizer_image: DEFAULT_RESIZER_IMAGE.into(),
            snapshotter_image: DEFAULT_SNAPSHOTTER_IMAGE.into(),
            registrar_image: DEFAULT_REGISTRAR_IMAGE.into(),
            kubelet_dir: DEFAULT_KUBELET_DIR.into(),
            logging: Default::default(),
        }
    }
}

/// Default address of the controller's metrics and health endpoints.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:8080";

/// Flags of `pav manifests`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// Namespace and images.
    #[command(flatten)]
    pub settings: Settings,
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
    for object in install::objects(&args.settings) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&object)?);
    }
    Ok(out)
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
