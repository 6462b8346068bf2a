//! From an evaluated pod template to the Pod that PaV creates.
//!
//! What PaV adds to every template, so that user templates stay short and
//! the controller can find, share files with and clean up its pods:
//!
//! - a deterministic name, so a restarted controller finds the pod it
//!   started instead of starting a second one;
//! - labels naming the provisioner, the phase and the volume;
//! - the pav namespace when the template names none (never a namespace
//!   named after the provisioner);
//! - a `/pav` directory shared with the node plugin, mounted in every
//!   container (with bidirectional propagation for privileged staging
//!   containers, so FUSE and device-mapper mounts reach the node);
//! - for staging and unstaging, `nodeName` pinning the pod to the client's
//!   node;
//! - `restartPolicy: Never` when the template leaves it unset.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Pod, PodSpec, PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use pav_templates::Phase;
use sha2::{Digest, Sha256};

/// Label and annotation prefix shared with the original PaV.
pub const DOMAIN: &str = "pav.albertofaria.github.io";

/// Label holding the provisioner's name.
pub const LABEL_PROVISIONER: &str = "pav.albertofaria.github.io/provisioner";
/// Label holding the phase (`creation`, `staging`, ...).
pub const LABEL_PHASE: &str = "pav.albertofaria.github.io/phase";
/// Label holding the volume key (claim UID, or volume handle for staging).
pub const LABEL_VOLUME: &str = "pav.albertofaria.github.io/volume";
/// Label holding the node a staging or unstaging pod runs on.
pub const LABEL_NODE: &str = "pav.albertofaria.github.io/node";

/// Annotation: seconds the pod's phase may take (see [`set_timeout`]).
pub const ANNOTATION_TIMEOUT: &str = "pav.albertofaria.github.io/timeout-seconds";

/// Records on `pod` how long its phase may take (the phase's `timeout`
/// field), so whoever waits for it, before or after a restart, applies the
/// same deadline; without one the runner's `--phase-timeout` applies.
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use std::time::Duration;
/// let mut pod = Pod::default();
/// assert_eq!(pav::pods::timeout_of(&pod), None);
/// pav::pods::set_timeout(&mut pod, Some(Duration::from_secs(90)));
/// assert_eq!(pav::pods::timeout_of(&pod), Some(Duration::from_secs(90)));
/// ```
pub fn set_timeout(pod: &mut Pod, timeout: Option<std::time::Duration>) {
    if let Some(timeout) = timeout {
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                ANNOTATION_TIMEOUT.to_owned(),
                timeout.as_secs().max(1).to_string(),
            );
    }
}

/// The timeout recorded on `pod` by [`set_timeout`].
pub fn timeout_of(pod: &Pod) -> Option<std::time::Duration> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_TIMEOUT)?
        .parse()
        .ok()
        .map(std::time::Duration::from_secs)
}

/// Annotation with the volume handle a pod exported in `/pav/handle`.
pub const ANNOTATION_HANDLE: &str = "pav.albertofaria.github.io/handle";
/// Annotation with the capacity a pod exported in `/pav/capacity`.
pub const ANNOTATION_CAPACITY: &str = "pav.albertofaria.github.io/capacity";
/// Annotation with the message a pod exported in `/pav/error`.
pub const ANNOTATION_ERROR: &str = "pav.albertofaria.github.io/error";
/// Annotation set to `"true"` once the node plugin copied the files above.
pub const ANNOTATION_COLLECTED: &str = "pav.albertofaria.github.io/collected";
/// Annotation naming the claim (`namespace/name`) a controller pod works for.
pub const ANNOTATION_CLAIM: &str = "pav.albertofaria.github.io/claim";
/// Annotation naming the PersistentVolume a staging pod stages.
pub const ANNOTATION_PV: &str = "pav.albertofaria.github.io/pv";
/// Annotation naming the client pod (`namespace/name/uid`) of a staging pod.
pub const ANNOTATION_CLIENT: &str = "pav.albertofaria.github.io/client-pod";
/// Annotation holding the kubelet target path a staging pod's volume is
/// bind-mounted on.
pub const ANNOTATION_TARGET: &str = "pav.albertofaria.github.io/target-path";
/// Annotation holding `"true"` when a staging pod stages read-only.
pub const ANNOTATION_READ_ONLY: &str = "pav.albertofaria.github.io/read-only";
/// Annotation on a staging pod holding its unstaging phase as rendered
/// when staging (JSON of the evaluated `volumeUnstaging`): used when the
/// claim or volume is gone by the time the client pod's volume is
/// unpublished (claims of terminated pods may be deleted before that).
pub const ANNOTATION_UNSTAGING: &str = "pav.albertofaria.github.io/unstaging";
/// Finalizer on staging pods: the object (and the state in its annotations)
/// stays until the volume is unstaged.
pub const FINALIZER_UNSTAGE: &str = "pav.albertofaria.github.io/unstage";

/// The [`PodTarget::volume`] key of the staging and unstaging pods of one
/// volume published at one kubelet target path (so unique per client pod):
/// NodeUnpublishVolume knows both, so it finds the pods again.
pub fn staging_key(handle: &str, target_path: &str) -> String {
    format!("{handle}\n{target_path}")
}

/// Namespace of pav's own objects and of pods whose template names none.
pub const DEFAULT_NAMESPACE: &str = "pav";

/// Directory on each node under which every PaV pod gets its `/pav`.
pub const HOST_POD_DIR: &str = "/var/lib/pav/pods";

/// Name of the volume PaV adds to each pod for `/pav`.
pub const PAV_VOLUME: &str = "pav";

/// Which volume a pod works on, and where.
#[derive(Debug, Clone)]
pub struct PodTarget<'a> {
    /// The PavProvisioner's name.
    pub provisioner: &'a str,
    /// The phase the pod carries out.
    pub phase: Phase,
    /// For validation, creation and deletion the claim's UID; for staging
    /// and unstaging the volume handle.
    pub volume: &'a str,
    /// The node, for staging and unstaging.
    pub node: Option<&'a str>,
}

impl PodTarget<'_> {
    /// The pod's name: `pav-<phase>-<digest>`, where the digest covers
    /// provisioner, volume and node, so it is the same after any restart
    /// and distinct between nodes.
    ///
    /// ```
    /// use pav::pods::PodTarget;
    /// use pav_templates::Phase;
    /// let target = PodTarget { provisioner: "p", phase: Phase::Creation, volume: "uid-1", node: None };
    /// assert_eq!(target.pod_name(), target.pod_name());
    /// assert!(target.pod_name().starts_with("pav-creation-"));
    /// assert!(target.pod_name().len() <= 63);
    /// ```
    pub fn pod_name(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [self.provisioner, self.volume, self.node.unwrap_or("")] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        let digest = hasher.finalize();
        let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
        format!("pav-{}-{hex}", self.phase.name())
    }

    /// The directory on the node that the pod sees as `/pav`.
    pub fn host_dir(&self) -> String {
        format!("{HOST_POD_DIR}/{}", self.pod_name())
    }

    /// The labels PaV puts on the pod (provisioner, phase, volume, node).
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            (LABEL_PROVISIONER.to_owned(), label_value(self.provisioner)),
            (LABEL_PHASE.to_owned(), self.phase.name().to_owned()),
            (LABEL_VOLUME.to_owned(), label_value(self.volume)),
        ]);
        if let Some(node) = self.node {
            labels.insert(LABEL_NODE.to_owned(), label_value(node));
        }
        labels
    }
}

/// Label values are at most 63 characters of `[A-Za-z0-9._-]`; longer or
/// other values are replaced by a digest so the label still identifies them.
///
/// ```
/// use pav::pods::label_value;
/// assert_eq!(label_value("pvc-1"), "pvc-1");
/// assert!(label_value("a/b").starts_with("sha256-"));
/// ```
pub fn label_value(value: &str) -> String {
    let valid = value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && value
            .bytes()
            .next()
            .is_none_or(|b| b.is_ascii_alphanumeric())
        && value
            .bytes()
            .last()
            .is_none_or(|b| b.is_ascii_alphanumeric());
    if valid {
        return value.to_owned();
    }
    let digest = Sha256::digest(value.as_bytes());
    format!(
        "sha256-{}",
        digest
            .iter()
            .take(20)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// Builds the Pod PaV creates for `target` from an evaluated template.
///
/// ```
/// use pav::pods::{build_pod, PodTarget};
/// use pav_templates::Phase;
/// let template = serde_json::from_value(serde_json::json!({
///     "spec": {"containers": [{"name": "c", "image": "busybox"}]}
/// })).unwrap();
/// let target = PodTarget { provisioner: "p", phase: Phase::Staging, volume: "vol-1", node: Some("node-a") };
/// let pod = build_pod(&template, &target);
/// let spec = pod.spec.unwrap();
/// assert_eq!(spec.node_name.as_deref(), Some("node-a"));
/// assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
/// assert_eq!(spec.containers[0].volume_mounts.as_ref().unwrap()[0].mount_path, "/pav");
/// assert_eq!(pod.metadata.namespace.as_deref(), Some("pav"));
/// ```
pub fn build_pod(template: &PodTemplateSpec, target: &PodTarget<'_>) -> Pod {
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.clone().unwrap_or_default();
    labels.extend(target.labels());
    let metadata = ObjectMeta {
        name: Some(target.pod_name()),
        namespace: Some(
            template_meta
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
        ),
        labels: Some(labels),
        annotations: template_meta.annotations.clone(),
        ..ObjectMeta::default()
    };

    let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
    if spec.restart_policy.is_none() {
        spec.restart_policy = Some("Never".to_owned());
    }
    if let Some(node) = target.node {
        spec.node_name = Some(node.to_owned());
    }
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: PAV_VOLUME.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: target.host_dir(),
            type_: Some("DirectoryOrCreate".to_owned()),
        }),
        ..Volume::default()
    });
    let staging = matches!(target.phase, Phase::Staging);
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for container in containers {
        let privileged = container
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false);
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: PAV_VOLUME.to_owned(),
                mount_path: "/pav".to_owned(),
                mount_propagation: (staging && privileged).then(|| "Bidirectional".to_owned()),
                ..VolumeMount::default()
            });
    }
    Pod {
        metadata,
        spec: Some(spec),
        status: None,
    }
}
