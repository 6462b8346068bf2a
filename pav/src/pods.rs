//! The contract between pav and its pods: what a PaV pod is named,
//! labelled and annotated with, where its `/pav` files are and what they
//! mean, how long it may run. The controller, the node plugin and `pav
//! render` all build and read pods through this module.
//!
//! | part | role |
//! |---|---|
//! | this module | names, labels, annotations, keys, timeouts; an evaluated template becomes the Pod PaV creates ([`build_pod`], [`PodOrigin`] and the pods several phases share; a phase's own pod is built in its module of [`crate::phases`]) |
//! | [`results`] | what a pod's status and exported `/pav` files say, and the messages users see about it |
//! | [`dir`] | a pod's `/pav` directory on its node, unmounted and removed |
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
    HostPathVolumeSource, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodSpec,
    PodTemplateSpec, Toleration, Volume, VolumeDevice, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use pav_templates::Phase;
use sha2::{Digest, Sha256};

pub mod dir;
pub mod results;

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
/// Annotation with the snapshot size a pod exported in `/pav/size`.
pub const ANNOTATION_SIZE: &str = "pav.albertofaria.github.io/size";
/// Annotation with the node names a pod exported in `/pav/topology`.
pub const ANNOTATION_TOPOLOGY: &str = "pav.albertofaria.github.io/topology";
/// Annotation with the publish context an attach pod exported in
/// `/pav/publish-context`.
pub const ANNOTATION_PUBLISH_CONTEXT: &str = "pav.albertofaria.github.io/publish-context";
/// Annotation with the member snapshots a group snapshot creation pod
/// exported in `/pav/snapshots`.
pub const ANNOTATION_SNAPSHOTS: &str = "pav.albertofaria.github.io/snapshots";
/// Annotation with the message a pod exported in `/pav/error`.
pub const ANNOTATION_ERROR: &str = "pav.albertofaria.github.io/error";
/// Annotation set to `"true"` once the node plugin copied the files above
/// into annotations, as node plugins before [`CONDITION_COLLECTED`] did:
/// still read, for pods such a plugin collected before an upgrade.
pub const ANNOTATION_COLLECTED: &str = "pav.albertofaria.github.io/collected";
/// The pod condition the node plugin sets on a validation, creation,
/// deletion (or other controller phase's) pod of its node once the pod
/// terminated: its message is a JSON object of the `/pav` files the pod
/// exported (`{"handle": "vol-1", "capacity": "1Gi"}`). A condition, in the
/// pod's status, so that node plugins need only `patch` on `pods/status`
/// cluster-wide, not on pods: a pod's status cannot change what it runs.
pub const CONDITION_COLLECTED: &str = "pav.albertofaria.github.io/collected";
/// Annotation naming the claim (`namespace/name`) a controller pod works for.
pub const ANNOTATION_CLAIM: &str = "pav.albertofaria.github.io/claim";
/// Annotation naming the staging pod whose staged volume a health check
/// or node expansion pod sees: its unstaging deletes the checks it left.
pub const ANNOTATION_STAGING_POD: &str = "pav.albertofaria.github.io/staging-pod";
/// Annotation naming the PersistentVolume a staging pod stages.
pub const ANNOTATION_PV: &str = "pav.albertofaria.github.io/pv";
/// Annotation naming the client pod (`namespace/name/uid`) of a staging pod.
pub const ANNOTATION_CLIENT: &str = "pav.albertofaria.github.io/client-pod";
/// Annotation holding the kubelet target path a staging pod's volume is
/// bind-mounted on.
pub const ANNOTATION_TARGET: &str = "pav.albertofaria.github.io/target-path";
/// Annotation on a staging pod that stages a Filesystem volume for all
/// the node's client pods (`stagingPer: Node`), holding the staging path
/// the node plugin moves the volume to from the pod's `/pav/volume`:
/// where the pods that use the staged volume (health checks, node
/// expansion) find it.
pub const ANNOTATION_STAGED_AT: &str = "pav.albertofaria.github.io/staged-at";
/// Annotation holding `"true"` when a staging pod stages read-only.
pub const ANNOTATION_READ_ONLY: &str = "pav.albertofaria.github.io/read-only";
/// Annotation on a staging pod holding its unstaging phase as rendered
/// when staging (JSON of the evaluated `volumeUnstaging`): used when the
/// claim or volume is gone by the time the client pod's volume is
/// unpublished (claims of terminated pods may be deleted before that).
pub const ANNOTATION_UNSTAGING: &str = "pav.albertofaria.github.io/unstaging";
/// Annotation on snapshot pods: the snapshot's name (creation) or handle
/// (deletion).
pub const ANNOTATION_SNAPSHOT: &str = "pav.albertofaria.github.io/snapshot";
/// On a health check pod: when its round began (RFC 3339), the time that
/// `pav render --phase health --time` takes to print this pod.
pub const ANNOTATION_HEALTH_ROUND: &str = "pav.albertofaria.github.io/health-round";
/// Finalizer on staging pods: the object (and the state in its annotations)
/// stays until the volume is unstaged.
pub const FINALIZER_UNSTAGE: &str = "pav.albertofaria.github.io/unstage";

/// The [`PodTarget::volume`] key of the staging and unstaging pods of one
/// volume published at one kubelet target path (so unique per client pod):
/// NodeUnpublishVolume knows both, so it finds the pods again.
pub fn staging_key(handle: &str, target_path: &str) -> String {
    format!("{handle}\n{target_path}")
}

/// The [`LABEL_VOLUME`] of the staging and unstaging pods of `handle`
/// published at `target_path`.
pub fn staging_label(handle: &str, target_path: &str) -> String {
    label_value(&staging_key(handle, target_path))
}

/// The labels that select the staging pods of `handle` published at
/// `target_path` on `node` (besides the provisioner's), as label values.
pub fn staging_selector(
    handle: &str,
    target_path: &str,
    node: &str,
) -> [(&'static str, String); 3] {
    [
        (LABEL_PHASE, Phase::Staging.name().to_owned()),
        (LABEL_VOLUME, staging_label(handle, target_path)),
        (LABEL_NODE, label_value(node)),
    ]
}

/// Whether `pod` has every label of `selector`.
pub fn has_labels(pod: &Pod, selector: &[(&str, String)]) -> bool {
    let labels = pod.metadata.labels.as_ref();
    (selector.iter()).all(|(key, value)| labels.and_then(|l| l.get(*key)) == Some(value))
}

/// Whether `pod` is a staging pod of the PersistentVolume named `pv`. Such
/// a pod is the record that the volume is staged on the pod's node: it is
/// created before the volume is staged and, held by [`FINALIZER_UNSTAGE`],
/// outlives the unstaging pod, so from its creation until the node plugin
/// has unstaged the volume (whatever restarted meanwhile) it exists.
pub fn stages_pv(pod: &Pod, pv: &str) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let annotations = pod.metadata.annotations.as_ref();
    labels.and_then(|l| l.get(LABEL_PHASE)).map(String::as_str) == Some(Phase::Staging.name())
        && annotations
            .and_then(|a| a.get(ANNOTATION_PV))
            .map(String::as_str)
            == Some(pv)
}

/// Namespace of pav's own objects and of pods whose template names none.
pub const DEFAULT_NAMESPACE: &str = "pav";

/// Directory on each node under which every PaV pod gets its `/pav`.
pub const HOST_POD_DIR: &str = "/var/lib/pav/pods";

/// Name of the volume PaV adds to each pod for `/pav`.
pub const PAV_VOLUME: &str = "pav";

/// Name of the volume PaV adds to a pod that works on a volume, for
/// `/pav/volume` ([`PodVolume`]).
pub const POD_VOLUME: &str = "pav-volume";

/// Which volume a pod works on, and where.
#[derive(Debug, Clone)]
pub struct PodTarget<'a> {
    /// The PavProvisioner's name.
    pub provisioner: &'a str,
    /// The phase the pod carries out.
    pub phase: Phase,
    /// For validation, creation and deletion the claim's UID; for staging
    /// and unstaging the [`staging_key`]; for expansion the volume handle
    /// and size; for node expansion the staging pod's name and size; for
    /// snapshot creation
    /// the snapshot's name, for its deletion its handle.
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

/// Everything besides its evaluated template that a PaV pod is built from:
/// which volume it works on, who owns it, where it goes, how long it may
/// take, and what PaV records on it.
#[derive(Debug, Clone)]
pub struct PodParams<'a> {
    /// Provisioner, phase, volume key and node.
    pub target: PodTarget<'a>,
    /// The PavProvisioner, so deleting it garbage-collects its pods.
    pub owner: Option<&'a OwnerReference>,
    /// The namespace used when the template names none (`--namespace`).
    pub default_namespace: &'a str,
    /// The phase's `timeout` (see [`set_timeout`]).
    pub timeout: Option<std::time::Duration>,
    /// Annotations PaV records on the pod (over the template's).
    pub annotations: Vec<(&'static str, String)>,
    /// Finalizers PaV puts on the pod.
    pub finalizers: Vec<&'static str>,
    /// The volume the pod works on, mounted at `/pav/volume`, if any.
    pub volume: Option<PodVolume>,
}

/// What a PaV pod sees at `/pav/volume`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodVolume {
    /// A staged volume (node expansion, health): the host directory that
    /// is the staging pod's `/pav/volume`.
    Staged(String),
    /// A volume through its claim, in the pod's namespace (population:
    /// the prime claim of a volume being filled): mounted, or for a block
    /// volume its device.
    Claim {
        /// The claim's name.
        name: String,
        /// Whether the volume is a block device (`volumeMode: Block`).
        block: bool,
    },
}

/// What every pod of one driver shares: the provisioner it belongs to and
/// where pods go. The driver and `pav render` build pods through it, so a
/// preview is the pod that runs.
#[derive(Debug, Clone, Copy)]
pub struct PodOrigin<'a> {
    /// The PavProvisioner's name.
    pub provisioner: &'a str,
    /// An owner reference to the PavProvisioner (none for an object that
    /// has no UID, such as a file given to `pav render`).
    pub owner: Option<&'a OwnerReference>,
    /// The namespace of pods whose template names none.
    pub default_namespace: &'a str,
}

/// A client pod's use of a volume on a node: what a staging pod works for.
#[derive(Debug, Clone, Copy)]
pub struct Publication<'a> {
    /// The volume handle.
    pub handle: &'a str,
    /// The kubelet target path the volume is published at (staged per
    /// node: its staging path).
    pub target_path: &'a str,
    /// The node the client pod runs on.
    pub node: &'a str,
    /// The claim, as `namespace/name`.
    pub claim: &'a str,
    /// The PersistentVolume's name.
    pub pv: &'a str,
    /// The client pod's namespace, name and UID; `None` when staged per
    /// node, for all of them.
    pub client: Option<(&'a str, &'a str, &'a str)>,
    /// Whether the volume is staged read-only.
    pub read_only: bool,
    /// Where the node plugin moves the staged volume from the pod's
    /// `/pav/volume` (a Filesystem volume staged per node: the staging
    /// path); `None` when it stays there.
    pub moved_to: Option<&'a str>,
}

/// A staged volume as the pods that use it on its node (health checks,
/// node expansion) find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedVolume {
    /// The staging pod's name.
    pub staging_pod: String,
    /// Where the volume is on the host.
    pub host_path: String,
}

impl StagedVolume {
    /// The volume the staging pod named `name` staged for one client pod:
    /// at its `/pav/volume`.
    pub fn per_pod(name: &str) -> Self {
        StagedVolume {
            staging_pod: name.to_owned(),
            host_path: format!("{HOST_POD_DIR}/{name}/volume"),
        }
    }

    /// The volume `staging` staged: where the node plugin moved it
    /// ([`ANNOTATION_STAGED_AT`]), else at the pod's `/pav/volume`.
    pub fn of(staging: &Pod) -> Self {
        use kube::ResourceExt as _;
        match staging.annotations().get(ANNOTATION_STAGED_AT) {
            Some(path) => StagedVolume {
                staging_pod: staging.name_any(),
                host_path: path.clone(),
            },
            None => Self::per_pod(&staging.name_any()),
        }
    }
}

/// `namespace/name/uid` of a client pod, as stored in a staging pod's
/// annotation.
pub fn client_annotation(namespace: &str, name: &str, uid: &str) -> String {
    format!("{namespace}/{name}/{uid}")
}

/// Reads a [`client_annotation`] back.
pub fn parse_client(value: &str) -> Option<(&str, &str, &str)> {
    let mut parts = value.splitn(3, '/');
    Some((parts.next()?, parts.next()?, parts.next()?))
}

/// Reads a `namespace/name` claim annotation back.
pub fn parse_claim(value: &str) -> Option<(&str, &str)> {
    value.split_once('/')
}

/// `namespace/name` of a claim, as [`ANNOTATION_CLAIM`] records it.
pub fn claim_name(pvc: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        pvc.metadata.namespace.as_deref().unwrap_or_default(),
        pvc.metadata.name.as_deref().unwrap_or_default()
    )
}

impl<'a> PodOrigin<'a> {
    /// A pod of `phase` for `volume` (on `node`, when given) with PaV's
    /// `annotations`, no finalizer and nothing staged: the shape of every
    /// pod but staging's, unstaging's and those of a staged volume (see
    /// [`PodOrigin::staged_volume_pod`]).
    pub(crate) fn phase_pod(
        &self,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        phase: Phase,
        volume: &str,
        node: Option<&str>,
        annotations: Vec<(&'static str, String)>,
    ) -> Pod {
        build_pod(
            template,
            &PodParams {
                target: PodTarget {
                    provisioner: self.provisioner,
                    phase,
                    volume,
                    node,
                },
                owner: self.owner,
                default_namespace: self.default_namespace,
                timeout,
                annotations,
                finalizers: Vec::new(),
                volume: None,
            },
        )
    }

    /// The validation, creation or deletion pod of claim `pvc`.
    pub fn claim_pod(
        &self,
        phase: Phase,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        pvc: &PersistentVolumeClaim,
    ) -> Pod {
        let uid = pvc.metadata.uid.as_deref().unwrap_or_default();
        self.phase_pod(
            template,
            timeout,
            phase,
            uid,
            None,
            vec![(ANNOTATION_CLAIM, claim_name(pvc))],
        )
    }

    /// The attach or detach pod (`phase`) of volume `handle` and node
    /// `node`, for `claim` (`namespace/name`): placed by its template.
    pub fn attachment_pod(
        &self,
        phase: Phase,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        (handle, node): (&str, &str),
        claim: &str,
    ) -> Pod {
        let key = format!("{handle}\n{node}");
        let annotations = vec![(ANNOTATION_CLAIM, claim.to_owned())];
        self.phase_pod(template, timeout, phase, &key, None, annotations)
    }

    /// A pod of `phase` for the volume `staged`, named after `key`, on
    /// `node`, with the staged volume at `/pav/volume`.
    pub(crate) fn staged_volume_pod(
        &self,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        (phase, key, node): (Phase, &str, &str),
        staged: &StagedVolume,
        claim: &str,
    ) -> Pod {
        build_pod(
            template,
            &PodParams {
                target: PodTarget {
                    provisioner: self.provisioner,
                    phase,
                    volume: key,
                    node: Some(node),
                },
                owner: self.owner,
                default_namespace: self.default_namespace,
                timeout,
                annotations: vec![
                    (ANNOTATION_CLAIM, claim.to_owned()),
                    (ANNOTATION_STAGING_POD, staged.staging_pod.clone()),
                ],
                finalizers: Vec::new(),
                volume: Some(PodVolume::Staged(staged.host_path.clone())),
            },
        )
    }

    /// The (group) snapshot creation pod of the snapshot named `name`, or
    /// the (group) snapshot deletion pod of the snapshot whose handle is
    /// `name`.
    pub fn snapshot_pod(
        &self,
        phase: Phase,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        name: &str,
    ) -> Pod {
        self.phase_pod(
            template,
            timeout,
            phase,
            name,
            None,
            vec![(ANNOTATION_SNAPSHOT, name.to_owned())],
        )
    }
}

/// The namespace of a PaV pod whose template names `named`: that one,
/// else `default_namespace` (an empty name counts as none).
pub fn namespace_of(named: Option<&str>, default_namespace: &str) -> String {
    named
        .filter(|ns| !ns.is_empty())
        .unwrap_or(default_namespace)
        .to_owned()
}

/// Builds the Pod PaV creates from an evaluated template: the one place
/// that decides a PaV pod's name, namespace, labels, annotations, owner,
/// finalizers, `/pav` volume, node and restart policy. Pure.
///
/// The template's namespace is kept when it names one, else
/// `default_namespace`; its labels and annotations are kept under PaV's
/// (PaV's win); its owner references and finalizers are not kept.
///
/// ```
/// use pav::pods::{build_pod, PodParams, PodTarget};
/// use pav_templates::Phase;
/// let template = serde_json::from_value(serde_json::json!({
///     "spec": {"containers": [{"name": "c", "image": "busybox"}]}
/// })).unwrap();
/// let target = PodTarget { provisioner: "p", phase: Phase::Staging, volume: "vol-1", node: Some("node-a") };
/// let params = PodParams {
///     target, owner: None, default_namespace: "pav", timeout: None,
///     annotations: vec![], finalizers: vec![], volume: None,
/// };
/// let pod = build_pod(&template, &params);
/// let spec = pod.spec.unwrap();
/// assert_eq!(spec.node_name.as_deref(), Some("node-a"));
/// assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
/// assert_eq!(spec.containers[0].volume_mounts.as_ref().unwrap()[0].mount_path, "/pav");
/// assert_eq!(pod.metadata.namespace.as_deref(), Some("pav"));
/// ```
pub fn build_pod(template: &PodTemplateSpec, params: &PodParams<'_>) -> Pod {
    let target = &params.target;
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.clone().unwrap_or_default();
    labels.extend(target.labels());
    let mut annotations = template_meta.annotations.clone();
    for (key, value) in &params.annotations {
        annotations
            .get_or_insert_with(Default::default)
            .insert((*key).to_owned(), value.clone());
    }
    let metadata = ObjectMeta {
        name: Some(target.pod_name()),
        namespace: Some(namespace_of(
            template_meta.namespace.as_deref(),
            params.default_namespace,
        )),
        labels: Some(labels),
        annotations,
        owner_references: params.owner.map(|owner| vec![owner.clone()]),
        finalizers: (!params.finalizers.is_empty())
            .then(|| params.finalizers.iter().map(|f| (*f).to_owned()).collect()),
        ..ObjectMeta::default()
    };

    let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
    if spec.restart_policy.is_none() {
        spec.restart_policy = Some("Never".to_owned());
    }
    if let Some(node) = target.node {
        spec.node_name = Some(node.to_owned());
        // A phase pinned to the client's node must run there whatever its
        // taints, as the node plugin's DaemonSet does: the kubelet refuses
        // a pod that does not tolerate a NoExecute taint, and a client pod
        // that tolerates one would otherwise never get its volume.
        spec.tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                operator: Some("Exists".to_owned()),
                ..Toleration::default()
            });
    }
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: PAV_VOLUME.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: target.host_dir(),
            type_: Some("DirectoryOrCreate".to_owned()),
        }),
        ..Volume::default()
    });
    if let Some(volume) = &params.volume {
        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: POD_VOLUME.to_owned(),
            host_path: match volume {
                PodVolume::Staged(path) => Some(HostPathVolumeSource {
                    path: path.clone(),
                    type_: None,
                }),
                PodVolume::Claim { .. } => None,
            },
            persistent_volume_claim: match volume {
                PodVolume::Staged(_) => None,
                PodVolume::Claim { name, .. } => Some(PersistentVolumeClaimVolumeSource {
                    claim_name: name.clone(),
                    read_only: None,
                }),
            },
            ..Volume::default()
        });
    }
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
        match &params.volume {
            None => {}
            // The staged volume is a mount made on the host after the
            // directory was: only propagation shows it in the pod.
            Some(PodVolume::Staged(_)) => container
                .volume_mounts
                .get_or_insert_with(Vec::new)
                .push(VolumeMount {
                    name: POD_VOLUME.to_owned(),
                    mount_path: "/pav/volume".to_owned(),
                    mount_propagation: Some("HostToContainer".to_owned()),
                    ..VolumeMount::default()
                }),
            Some(PodVolume::Claim { block: false, .. }) => container
                .volume_mounts
                .get_or_insert_with(Vec::new)
                .push(VolumeMount {
                    name: POD_VOLUME.to_owned(),
                    mount_path: "/pav/volume".to_owned(),
                    ..VolumeMount::default()
                }),
            Some(PodVolume::Claim { block: true, .. }) => container
                .volume_devices
                .get_or_insert_with(Vec::new)
                .push(VolumeDevice {
                    name: POD_VOLUME.to_owned(),
                    device_path: "/pav/volume".to_owned(),
                }),
        }
    }
    let mut pod = Pod {
        metadata,
        spec: Some(spec),
        status: None,
    };
    set_timeout(&mut pod, params.timeout);
    pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn client_and_claim_annotations_read_back() {
        let client = client_annotation("apps", "web-0", "u-1");
        assert_eq!(parse_client(&client), Some(("apps", "web-0", "u-1")));
        assert_eq!(parse_claim("apps/data"), Some(("apps", "data")));
    }

    fn template(json: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(json).unwrap()
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "pav.albertofaria.github.io/v1alpha1".into(),
            kind: "PavProvisioner".into(),
            name: "p".into(),
            uid: "u-p".into(),
            ..OwnerReference::default()
        }
    }

    fn claim() -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "apps", "uid": "u-claim"}
        }))
        .unwrap()
    }

    #[test]
    fn a_claim_pod_carries_owner_namespace_default_timeout_and_claim() {
        let owner = owner();
        let origin = PodOrigin {
            provisioner: "p",
            owner: Some(&owner),
            default_namespace: "pav-system",
        };
        let template = template(serde_json::json!({
            "metadata": {
                "labels": {"app": "x", LABEL_PHASE: "forged"},
                "annotations": {"note": "kept", ANNOTATION_CLAIM: "forged"},
                "finalizers": ["template/finalizer"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x"}],
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }));
        let pod = origin.claim_pod(
            Phase::Creation,
            &template,
            Some(Duration::from_secs(90)),
            &claim(),
        );
        let target = PodTarget {
            provisioner: "p",
            phase: Phase::Creation,
            volume: "u-claim",
            node: None,
        };
        assert_eq!(pod.metadata.name, Some(target.pod_name()));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("pav-system"));
        assert_eq!(pod.metadata.owner_references, Some(vec![owner.clone()]));
        assert_eq!(pod.metadata.finalizers, None);
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "x");
        assert_eq!(labels[LABEL_PHASE], "creation");
        assert_eq!(labels[LABEL_VOLUME], "u-claim");
        let annotations = pod.metadata.annotations.clone().unwrap();
        assert_eq!(annotations["note"], "kept");
        assert_eq!(annotations[ANNOTATION_CLAIM], "apps/data");
        assert_eq!(annotations[ANNOTATION_TIMEOUT], "90");
        assert_eq!(timeout_of(&pod), Some(Duration::from_secs(90)));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name, None);
        // Scheduled, so the taints of nodes count, as for any pod.
        assert_eq!(spec.tolerations, None);

        // A template naming its namespace keeps it; no owner, no timeout.
        let origin = PodOrigin {
            owner: None,
            ..origin
        };
        let template = self::template(serde_json::json!({
            "metadata": {"namespace": "storage"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }));
        let pod = origin.claim_pod(Phase::Deletion, &template, None, &claim());
        assert_eq!(pod.metadata.namespace.as_deref(), Some("storage"));
        assert_eq!(pod.metadata.owner_references, None);
        assert_eq!(timeout_of(&pod), None);
    }

    fn publication(target_path: &str) -> Publication<'_> {
        Publication {
            handle: "vol-1",
            target_path,
            node: "node-a",
            claim: "apps/data",
            pv: "pvc-1",
            client: Some(("apps", "web-0", "u-web")),
            read_only: true,
            moved_to: None,
        }
    }

    /// A population pod sees its volume through the prime claim at
    /// `/pav/volume` in every container: mounted, or a block volume's
    /// device.
    #[test]
    fn a_claimed_volume_is_mounted_or_a_device_at_pav_volume() {
        let template = template(serde_json::json!({
            "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}
        }));
        for block in [false, true] {
            let params = PodParams {
                target: PodTarget {
                    provisioner: "p",
                    phase: Phase::Population,
                    volume: "vol-1",
                    node: None,
                },
                owner: None,
                default_namespace: "pav",
                timeout: None,
                annotations: vec![],
                finalizers: vec![],
                volume: Some(PodVolume::Claim {
                    name: "prime-1".into(),
                    block,
                }),
            };
            let spec = build_pod(&template, &params).spec.unwrap();
            let volume = spec
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == POD_VOLUME)
                .unwrap();
            assert_eq!(
                (
                    volume
                        .persistent_volume_claim
                        .as_ref()
                        .map(|c| c.claim_name.as_str()),
                    volume.host_path.is_some()
                ),
                (Some("prime-1"), false)
            );
            for container in &spec.containers {
                let mounted = (container.volume_mounts.iter().flatten())
                    .any(|m| m.name == POD_VOLUME && m.mount_path == "/pav/volume");
                let device = (container.volume_devices.iter().flatten())
                    .any(|d| d.name == POD_VOLUME && d.device_path == "/pav/volume");
                assert_eq!((mounted, device), (!block, block), "block: {block}");
            }
        }
    }

    #[test]
    fn a_staged_volume_is_at_the_staging_pods_volume_unless_moved() {
        let origin = PodOrigin {
            provisioner: "p",
            owner: None,
            default_namespace: "pav",
        };
        let staging = pav_templates::StagingPhase {
            pod_template: template(serde_json::json!({
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}
            })),
            timeout: None,
        };
        let per_pod = origin.staging_pod(&staging, None, &publication("/t"));
        let name = per_pod.metadata.name.clone().unwrap();
        assert_eq!(
            StagedVolume::of(&per_pod).host_path,
            format!("{HOST_POD_DIR}/{name}/volume")
        );
        let staging_path = "/var/lib/kubelet/plugins/kubernetes.io/csi/p/h/globalmount";
        let moved = Publication {
            client: None,
            moved_to: Some(staging_path),
            ..publication(staging_path)
        };
        let per_node = origin.staging_pod(&staging, None, &moved);
        assert_eq!(StagedVolume::of(&per_node).host_path, staging_path);
    }

    #[test]
    fn a_staging_pod_is_named_by_its_staging_key_and_records_its_publication() {
        let owner = owner();
        let origin = PodOrigin {
            provisioner: "p",
            owner: Some(&owner),
            default_namespace: "pav",
        };
        let staging = pav_templates::StagingPhase {
            pod_template: template(serde_json::json!({
                "spec": {"containers": [{"name": "c", "image": "busybox",
                    "securityContext": {"privileged": true}}]}
            })),
            timeout: Some(Duration::from_secs(30)),
        };
        let unstaging = pav_templates::OptionalPodPhase {
            pod_template: Some(template(serde_json::json!({
                "spec": {"containers": [{"name": "u", "image": "busybox"}]}
            }))),
            timeout: None,
        };
        let path = "/var/lib/kubelet/pods/u-web/volumes/kubernetes.io~csi/pvc-1/mount";
        let pod = origin.staging_pod(&staging, Some(&unstaging), &publication(path));
        let key = staging_key("vol-1", path);
        let target = PodTarget {
            provisioner: "p",
            phase: Phase::Staging,
            volume: &key,
            node: Some("node-a"),
        };
        assert_eq!(pod.metadata.name, Some(target.pod_name()));
        assert_eq!(
            pod.metadata.finalizers,
            Some(vec![FINALIZER_UNSTAGE.to_owned()])
        );
        assert_eq!(pod.metadata.owner_references, Some(vec![owner.clone()]));
        let annotations = pod.metadata.annotations.clone().unwrap();
        assert_eq!(annotations[ANNOTATION_CLAIM], "apps/data");
        assert_eq!(annotations[ANNOTATION_PV], "pvc-1");
        assert_eq!(annotations[ANNOTATION_CLIENT], "apps/web-0/u-web");
        assert_eq!(annotations[ANNOTATION_TARGET], path);
        assert_eq!(annotations[ANNOTATION_READ_ONLY], "true");
        assert_eq!(annotations[ANNOTATION_TIMEOUT], "30");
        let recorded: Option<PodTemplateSpec> =
            serde_json::from_str(&annotations[ANNOTATION_UNSTAGING]).unwrap();
        assert_eq!(recorded, unstaging.pod_template);
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels[LABEL_VOLUME], label_value(&key));
        assert_eq!(labels[LABEL_NODE], "node-a");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        let tolerations = spec.tolerations.clone().unwrap_or_default();
        assert!(
            tolerations
                .iter()
                .any(|t| t.operator.as_deref() == Some("Exists")
                    && t.key.is_none()
                    && t.effect.is_none()),
            "pinned to the client's node, it tolerates every taint: {tolerations:?}"
        );
        let mount = &spec.containers[0].volume_mounts.as_ref().unwrap()[0];
        assert_eq!(mount.mount_propagation.as_deref(), Some("Bidirectional"));

        // Another target path (another client pod) is another pod.
        let other = origin.staging_pod(&staging, None, &publication("/other"));
        assert_ne!(other.metadata.name, pod.metadata.name);
        assert!(
            !other
                .metadata
                .annotations
                .unwrap()
                .contains_key(ANNOTATION_UNSTAGING)
        );

        // The unstaging pod carries the staging pod's volume label as is.
        let unstaging_pod = origin.unstaging_pod(
            unstaging.pod_template.as_ref().unwrap(),
            &labels[LABEL_VOLUME],
            "node-a",
            "apps/data",
        );
        let unstaging_labels = unstaging_pod.metadata.labels.unwrap();
        assert_eq!(unstaging_labels[LABEL_VOLUME], labels[LABEL_VOLUME]);
        assert_eq!(unstaging_labels[LABEL_PHASE], "unstaging");
        assert_eq!(unstaging_pod.metadata.finalizers, None);
        assert_eq!(
            unstaging_pod.metadata.annotations.unwrap()[ANNOTATION_CLAIM],
            "apps/data"
        );
        let mount = &unstaging_pod.spec.unwrap().containers[0]
            .volume_mounts
            .clone()
            .unwrap()[0];
        assert_eq!(mount.mount_propagation, None);
    }
}
