//! What one PavProvisioner becomes: a CSI driver named after it.
//!
//! | object | name | scope |
//! |---|---|---|
//! | CSIDriver | `<name>` | cluster |
//! | ServiceAccount, RoleBinding, Deployment, PodDisruptionBudget | `pav-<name>-controller` | pav namespace |
//! | ClusterRoleBinding | `pav-<name>-controller` | cluster |
//! | ServiceAccount, DaemonSet | `pav-<name>-node` | pav namespace |
//! | ClusterRoleBinding | `pav-<name>-node` | cluster |
//! | RoleBinding | `pav-<name>-node` | each namespace its node phases' pods go to |
//!
//! All carry the label `pav.albertofaria.github.io/provisioner: <name>`;
//! namespaced ones are owned by the PavProvisioner (garbage collected with
//! it), cluster-scoped ones are deleted by the controller's finalizer.
//!
//! The bindings name four ClusterRoles every driver shares
//! ([`csi_controller_role`], [`csi_node_role`], [`csi_node_pods_role`],
//! [`csi_leader_election_role`]). They are installed once by `pav
//! manifests`, so `pav controller` never writes a role: it only binds
//! these four, which needs `bind` on them by name and not `escalate`
//! (with which it could grant itself anything).

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::Resource as _;
use pav_templates::{LifecycleMode, PavProvisioner, Phase, StagingPer, TokenRequest};
use serde_json::{Value, json};

use super::{
    FIELD_MANAGER, Json, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, LABEL_PROVISIONER,
    PAV_BINARY, Placement, Settings, labels, non_root_pod_security, typed,
    unprivileged_container_security,
};
use crate::client::{DEFAULT_BURST, DEFAULT_QPS};
use crate::leader;
use crate::pods::HOST_POD_DIR;
use crate::telemetry::LogFormat;

mod attributes;

/// How long the CSI controller's sidecars (external-provisioner,
/// external-resizer, csi-snapshotter) wait for a call to `pav
/// csi-controller`: it answers CreateVolume, DeleteVolume,
/// ControllerExpandVolume, CreateSnapshot and DeleteSnapshot by running
/// pods, which pull images and run user code, so this is long.
pub const SIDECAR_TIMEOUT: &str = "300s";

/// Leader election of every sidecar of the CSI controller (each holds its
/// own Lease in the pav namespace, as the populator does, see
/// [`lease_names`]).
///
/// A sidecar exits when it cannot renew its lease in time; with the
/// defaults (10 s) an API server restart or an etcd stall of that length
/// restarts it, and repeated ones put it in CrashLoopBackOff, stalling
/// every claim of the driver for minutes (the fault scenarios saw it with
/// external-provisioner). pav's controller's own durations ride them out
/// ([`leader::RENEW_DEADLINE`]); a crashed leader is replaced within
/// [`leader::LEASE_DURATION`].
fn sidecar_leader_election() -> [String; 4] {
    [
        "--leader-election".to_owned(),
        format!(
            "--leader-election-lease-duration={}s",
            leader::LEASE_DURATION.as_secs()
        ),
        format!(
            "--leader-election-renew-deadline={}s",
            leader::RENEW_DEADLINE.as_secs()
        ),
        "--leader-election-retry-period=10s".to_owned(),
    ]
}

/// A sidecar's gate that makes a leader shut down (a rollout, an upgrade,
/// a drained node) release its Lease (alpha and off by default in every
/// sidecar pav runs): without it the new pods wait out the whole
/// [`leader::LEASE_DURATION`], a minute with no provisioning, expansion,
/// snapshot or published capacity after every rollout (Kubernetes'
/// storage suite's capacity spec timed out on it). A flag of its own: the
/// sidecars merge repeated `--feature-gates`.
const RELEASE_LEASE_ON_EXIT: &str = "--feature-gates=ReleaseLeaderElectionOnExit=true";

/// A sidecar of the CSI controller and the port of its HTTP server
/// (`--http-endpoint`): `/metrics` (csi-lib-utils'
/// `csi_sidecar_operations_seconds`, its CSI calls, among others) and
/// [`LEADER_ELECTION_HEALTH_PATH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sidecar {
    /// Container name.
    pub name: &'static str,
    /// Port of its HTTP server, distinct from every other port in the pod.
    pub http_port: u16,
    /// Name of that container port: at most 15 characters (an IANA
    /// service name), hence `-m` for metrics, not `-metrics`.
    pub port_name: &'static str,
    /// What its leader-election Lease's name puts before the driver's
    /// name ([`lease_names`]).
    pub lease_prefix: &'static str,
}

/// external-provisioner.
pub const PROVISIONER: Sidecar = Sidecar {
    name: "csi-provisioner",
    http_port: 8081,
    port_name: "provisioner-m",
    lease_prefix: "",
};
/// external-resizer (provisioners with `volumeExpansion`).
pub const RESIZER: Sidecar = Sidecar {
    name: "csi-resizer",
    http_port: 8082,
    port_name: "resizer-m",
    lease_prefix: "external-resizer-",
};
/// external-attacher (provisioners with `volumeAttach`).
pub const ATTACHER: Sidecar = Sidecar {
    name: "csi-attacher",
    http_port: 8084,
    port_name: "attacher-m",
    lease_prefix: "external-attacher-leader-",
};
/// csi-snapshotter (provisioners with `snapshotCreation`).
pub const SNAPSHOTTER: Sidecar = Sidecar {
    name: "csi-snapshotter",
    http_port: 8083,
    port_name: "snapshotter-m",
    lease_prefix: "external-snapshotter-leader-",
};
/// Every sidecar a driver's CSI controller may run, each with a metrics
/// port of its own (the `pav-metrics` Service lists them all).
pub const CONTROLLER_SIDECARS: [Sidecar; 4] = [PROVISIONER, RESIZER, SNAPSHOTTER, ATTACHER];

/// Where the sidecars' leader-election health check is served
/// (csi-lib-utils' `HealthCheckerAddress`): it fails only while the sidecar
/// leads but has not renewed its lease for the lease duration and 20 s more,
/// that is when it hangs, as it exits by itself when renewing fails.
pub const LEADER_ELECTION_HEALTH_PATH: &str = "/healthz/leader-election";

/// How long the kubelet waits for a liveness probe's answer.
pub const LIVENESS_TIMEOUT_SECONDS: i32 = 5;

/// The liveness probe of pav's containers and the CSI controller's
/// sidecars: `GET path` on the container port named `port` every 10 s; three
/// failures in a row (30 s) restart the container.
fn liveness(path: &str, port: &str) -> Value {
    json!({
        "httpGet": { "path": path, "port": port },
        "periodSeconds": 10,
        "timeoutSeconds": LIVENESS_TIMEOUT_SECONDS,
        "failureThreshold": 3,
    })
}

/// The port of `pav csi-controller` and `pav csi-node` with `/metrics` and
/// `/healthz`, named `metrics`.
fn pav_metrics_port() -> Value {
    json!({ "name": "metrics", "containerPort": crate::csi::METRICS_PORT, "protocol": "TCP" })
}

/// Sets what `settings` say about scheduling and pulling on a pod spec:
/// `placement`'s priority class and scheduling fields unless empty, and
/// the image pull secrets.
pub(super) fn place(spec: &mut Value, settings: &Settings, placement: &impl Placement) {
    if !placement.priority_class().is_empty() {
        spec["priorityClassName"] = json!(placement.priority_class());
    }
    for (field, value) in placement.scheduling() {
        if !value.is_empty() {
            spec[field] = value.0.clone();
        }
    }
    if !settings.image_pull_secrets.is_empty() {
        spec["imagePullSecrets"] = settings
            .image_pull_secrets
            .iter()
            .map(|name| json!({ "name": name }))
            .collect();
    }
}

/// A Deployment of `settings.controller.replicas` pods that lead in turn
/// (the controller, a driver's CSI controller): placed as
/// `settings.controller` says, and spread over nodes where the scheduler
/// can, so that one node's loss leaves a replica to take over.
pub(super) fn leader_elected_deployment(
    metadata: Value,
    selector: &Value,
    pod_labels: &Value,
    mut spec: Value,
    settings: &Settings,
) -> Deployment {
    place(&mut spec, settings, &settings.controller);
    spec["topologySpreadConstraints"] = json!([{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": { "matchLabels": selector },
    }]);
    typed(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": settings.controller.replicas,
            "selector": { "matchLabels": selector },
            "template": {
                "metadata": { "labels": pod_labels },
                "spec": spec,
            },
        },
    }))
}

/// The PodDisruptionBudget of a [`leader_elected_deployment`]: a drain
/// evicts one of its pods at a time, each once its replacement is ready;
/// pods that are not ready may always go (they serve nothing, and would
/// otherwise hold every drain up).
pub(super) fn disruption_budget(metadata: Value, selector: &Value) -> PodDisruptionBudget {
    typed(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": {
            "maxUnavailable": 1,
            "selector": { "matchLabels": selector },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }))
}

/// API group of VolumeSnapshots, their contents and classes.
const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";
/// The API group of group snapshots (VolumeGroupSnapshot and its kin).
const GROUP_SNAPSHOT_GROUP: &str = "groupsnapshot.storage.k8s.io";

/// Socket of the CSI services inside their pods.
pub const CSI_SOCKET: &str = "/csi/csi.sock";

/// Name of a provisioner's CSI controller Deployment, ServiceAccount and RBAC.
pub fn controller_name(provisioner: &str) -> String {
    format!("pav-{provisioner}-controller")
}

/// Name of a provisioner's node DaemonSet, ServiceAccount and RBAC.
pub fn node_name(provisioner: &str) -> String {
    format!("pav-{provisioner}-node")
}

/// The ClusterRole of every driver's CSI controller.
pub const CSI_CONTROLLER_ROLE: &str = "pav-csi-controller";
/// The ClusterRole of every driver's node plugin.
pub const CSI_NODE_ROLE: &str = "pav-csi-node";
/// The ClusterRole every node plugin is bound to by RoleBindings, in the
/// namespaces its node phases' pods go to only: creating, patching and
/// deleting pods.
pub const CSI_NODE_PODS_ROLE: &str = "pav-csi-node-pods";
/// The four ClusterRoles the controller may bind (and nothing else).
pub const DRIVER_ROLES: [&str; 4] = [
    CSI_CONTROLLER_ROLE,
    CSI_NODE_ROLE,
    CSI_NODE_PODS_ROLE,
    CSI_LEADER_ELECTION_ROLE,
];
/// The ClusterRole the CSI controller's sidecars need for leader election,
/// bound in the pav namespace only.
pub const CSI_LEADER_ELECTION_ROLE: &str = "pav-csi-leader-election";

/// Names of the Leases `provisioner`'s CSI controller holds in the pav
/// namespace: one per [`CONTROLLER_SIDECARS`] (each sidecar's
/// `lease_prefix` and the driver name, sanitized by csi-lib-utils):
/// external-provisioner's (the driver name), external-resizer v2's
/// (`external-resizer-<driver>`), csi-snapshotter v8's
/// (`external-snapshotter-leader-<driver>`) and external-attacher v4's
/// (`external-attacher-leader-<driver>`); then pav's populator's
/// ([`populator_lease_name`]).
///
/// ```
/// assert_eq!(
///     pav::manifests::driver::lease_names("files.example.com"),
///     [
///         "files-example-com",
///         "external-resizer-files-example-com",
///         "external-snapshotter-leader-files-example-com",
///         "external-attacher-leader-files-example-com",
///         "pav-populator-files.example.com",
///     ]
/// );
/// ```
pub fn lease_names(provisioner: &str) -> Vec<String> {
    (CONTROLLER_SIDECARS.iter())
        .map(|sidecar| sanitized(&format!("{}{provisioner}", sidecar.lease_prefix)))
        .chain([populator_lease_name(provisioner)])
        .collect()
}

/// The Lease held by the CSI controller replica of `provisioner` that runs
/// its volume populator (`spec.volumePopulation`): one replica at a time.
pub fn populator_lease_name(provisioner: &str) -> String {
    format!("pav-populator-{provisioner}")
}

/// csi-lib-utils' `sanitizeName` of a Lease name: anything but ASCII
/// letters, digits and `-` becomes `-`, and a trailing `-` gets an `X`.
fn sanitized(lock: &str) -> String {
    let mut name: String = lock
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.ends_with('-') {
        name.push('X');
    }
    name
}

/// Label selector matching every object pav deployed for a provisioner.
pub fn selector(provisioner: &str) -> String {
    format!("{LABEL_PROVISIONER}={provisioner}")
}

/// Everything deployed for one PavProvisioner.
#[derive(Debug, Clone)]
pub struct DriverObjects {
    /// The CSIDriver, named after the provisioner.
    pub csi_driver: CSIDriver,
    /// Service accounts of the CSI controller and the node plugin.
    pub service_accounts: Vec<ServiceAccount>,
    /// Bindings of the CSI controller and the node plugin to
    /// [`CSI_CONTROLLER_ROLE`] and [`CSI_NODE_ROLE`].
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// The CSI controller's binding to [`CSI_LEADER_ELECTION_ROLE`] in the
    /// pav namespace, and the node plugin's to [`CSI_NODE_PODS_ROLE`] in
    /// each namespace its node phases' pods go to.
    pub role_bindings: Vec<RoleBinding>,
    /// The CSI controller with the external-provisioner sidecar, and the
    /// external-resizer and csi-snapshotter ones when the provisioner has
    /// `volumeExpansion` and `snapshotCreation`.
    pub deployment: Deployment,
    /// The node plugin with the node-driver-registrar sidecar.
    pub daemon_set: DaemonSet,
    /// The CSI controller's PodDisruptionBudget: one pod evicted at a time.
    pub disruption_budget: PodDisruptionBudget,
    /// Where the node phases' pods go as the spec tells, which the node
    /// plugin's RoleBindings in [`role_bindings`](Self::role_bindings)
    /// follow.
    pub node_pods: NodePodNamespaces,
}

/// Builds every object of `provisioner`'s driver, its node plugin bound
/// to create, patch and delete pods in the namespaces its spec names
/// ([`NodePodNamespaces::fixed`]); those its templates choose per volume
/// are the controller's to add ([`node_pods_binding`]).
pub fn objects(provisioner: &PavProvisioner, settings: &Settings) -> DriverObjects {
    let b = Builder::new(provisioner, settings);
    let mut role_bindings = vec![b.controller_role_binding()];
    let namespaces = node_pod_namespaces(provisioner, settings);
    role_bindings.extend(namespaces.fixed.iter().map(|ns| b.node_pods_binding(ns)));
    DriverObjects {
        csi_driver: b.csi_driver(),
        service_accounts: vec![
            b.service_account(&b.controller, "csi-controller"),
            b.service_account(&b.node, "csi-node"),
        ],
        cluster_role_bindings: vec![
            b.cluster_role_binding(&b.controller, CSI_CONTROLLER_ROLE, "csi-controller"),
            b.cluster_role_binding(&b.node, CSI_NODE_ROLE, "csi-node"),
        ],
        role_bindings,
        deployment: b.deployment(),
        daemon_set: b.daemon_set(),
        disruption_budget: disruption_budget(
            b.namespaced(&b.controller, "csi-controller"),
            &b.selector_labels("csi-controller"),
        ),
        node_pods: namespaces,
    }
}

/// The node plugin's binding to [`CSI_NODE_PODS_ROLE`] in `namespace`.
pub fn node_pods_binding(
    provisioner: &PavProvisioner,
    settings: &Settings,
    namespace: &str,
) -> RoleBinding {
    Builder::new(provisioner, settings).node_pods_binding(namespace)
}

/// Where a driver's node phases (staging, unstaging, node expansion,
/// health: [`Phase::pod_on_volume_node`]) put their pods, as far as the
/// spec tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePodNamespaces {
    /// Namespaces known from the spec: the pav namespace for a phase
    /// whose pod template names none, and every literal
    /// `podTemplate.metadata.namespace`.
    pub fixed: BTreeSet<String>,
    /// Phases whose pods' namespace is a template (or lies inside one):
    /// known per volume only, by rendering the phase.
    pub templated: Vec<Phase>,
}

/// Reads [`NodePodNamespaces`] off `provisioner`'s spec as written.
pub fn node_pod_namespaces(provisioner: &PavProvisioner, settings: &Settings) -> NodePodNamespaces {
    let spec = serde_json::to_value(&provisioner.spec).unwrap_or_default();
    let mut namespaces = NodePodNamespaces::default();
    for phase in Phase::ALL.into_iter().filter(|p| p.pod_on_volume_node()) {
        match pod_namespace(&spec, phase) {
            PodNamespace::NoPod => {}
            PodNamespace::Default => {
                namespaces.fixed.insert(settings.namespace.clone());
            }
            PodNamespace::Literal(ns) => {
                namespaces.fixed.insert(ns);
            }
            PodNamespace::Templated => namespaces.templated.push(phase),
        }
    }
    namespaces
}

/// What a phase's spec says of its pod's namespace.
enum PodNamespace {
    /// The phase, or its pod template, is not there.
    NoPod,
    /// The pod template names no namespace: the pav namespace.
    Default,
    /// `podTemplate.metadata.namespace` as written.
    Literal(String),
    /// A template decides it (the field, or an object above it, is one).
    Templated,
}

fn pod_namespace(spec: &Value, phase: Phase) -> PodNamespace {
    let mut at = spec;
    let path = [phase.field(), "podTemplate", "metadata", "namespace"];
    for (depth, key) in path.into_iter().enumerate() {
        match at.get(key) {
            None | Some(Value::Null) if depth < 2 => return PodNamespace::NoPod,
            None | Some(Value::Null) => return PodNamespace::Default,
            Some(Value::String(text)) if pav_templates::engine::has_template_syntax(text) => {
                return PodNamespace::Templated;
            }
            Some(Value::String(ns)) if key == "namespace" && !ns.is_empty() => {
                return PodNamespace::Literal(ns.clone());
            }
            Some(Value::String(_)) => return PodNamespace::Default,
            Some(next) => at = next,
        }
    }
    PodNamespace::Default
}

struct Builder<'a> {
    name: String,
    controller: String,
    node: String,
    settings: &'a Settings,
    owner: Option<Value>,
    /// The provisioner has `volumeExpansion`: the CSI controller gets
    /// external-resizer.
    expands: bool,
    /// The provisioner has `snapshotCreation`: the CSI controller gets
    /// csi-snapshotter.
    snapshots: bool,
    /// The provisioner has `groupSnapshotCreation`: the CSI controller
    /// gets csi-snapshotter, serving group snapshots.
    group_snapshots: bool,
    /// The provisioner has `storageCapacity`: external-provisioner
    /// publishes CSIStorageCapacity objects.
    capacity: bool,
    /// The provisioner has `volumeModification`: the CSI controller gets
    /// external-resizer with its VolumeAttributesClass support.
    modifies: bool,
    /// The provisioner has `volumeAttach`: the CSIDriver requires attaching
    /// (VolumeAttachments) and the CSI controller gets external-attacher.
    attaches: bool,
    /// `spec.volumeLifecycleModes`: the CSIDriver's, and with `Ephemeral`
    /// the node plugins run with `--ephemeral`.
    lifecycle_modes: Vec<LifecycleMode>,
    /// `spec.stagingPer: Node`: the node plugins run with
    /// `--staging-per-node`.
    staging_per_node: bool,
    /// `spec.tokenRequests`: the CSIDriver's, which kubelet then passes
    /// to NodePublishVolume in its secrets and renews by publishing again.
    token_requests: Vec<TokenRequest>,
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({ "apiGroups": groups, "resources": resources, "verbs": verbs })
}

impl<'a> Builder<'a> {
    fn new(provisioner: &PavProvisioner, settings: &'a Settings) -> Self {
        let name = provisioner.metadata.name.clone().unwrap_or_default();
        Self {
            controller: controller_name(&name),
            node: node_name(&name),
            owner: provisioner
                .controller_owner_ref(&())
                .map(|owner| super::json(&owner)),
            name,
            settings,
            expands: provisioner.spec.has(Phase::Expansion),
            snapshots: provisioner.spec.has(Phase::SnapshotCreation),
            group_snapshots: provisioner.spec.has(Phase::GroupSnapshotCreation),
            capacity: provisioner.spec.has(Phase::Capacity),
            modifies: provisioner.spec.has(Phase::Modification),
            attaches: provisioner.spec.has(Phase::Attach),
            lifecycle_modes: (provisioner.spec.volume_lifecycle_modes.clone())
                .unwrap_or_else(|| vec![LifecycleMode::Persistent]),
            staging_per_node: provisioner.spec.staging_per == Some(StagingPer::Node),
            token_requests: provisioner.spec.token_requests.clone().unwrap_or_default(),
        }
    }

    fn labels(&self, component: &str) -> Value {
        json!(labels(&[
            (LABEL_NAME, "pav"),
            (LABEL_COMPONENT, component),
            (LABEL_MANAGED_BY, FIELD_MANAGER),
            (LABEL_PROVISIONER, &self.name),
        ]))
    }

    fn selector_labels(&self, component: &str) -> Value {
        json!(labels(&[
            (LABEL_COMPONENT, component),
            (LABEL_PROVISIONER, &self.name)
        ]))
    }

    /// Metadata of a namespaced object: in the pav namespace, owned by the
    /// provisioner.
    fn namespaced(&self, name: &str, component: &str) -> Value {
        let mut meta = json!({
            "name": name,
            "namespace": self.settings.namespace,
            "labels": self.labels(component),
        });
        if let Some(owner) = &self.owner {
            meta["ownerReferences"] = json!([owner]);
        }
        meta
    }

    fn cluster(&self, name: &str, component: &str) -> Value {
        json!({ "name": name, "labels": self.labels(component) })
    }

    fn csi_driver(&self) -> CSIDriver {
        let tokens = !self.token_requests.is_empty();
        typed(json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": self.cluster(&self.name, "csi-driver"),
            "spec": {
                // VolumeAttachments (ControllerPublish by attach pods) only
                // with spec.volumeAttach: otherwise volumes are made
                // available on a node by staging pods alone.
                "attachRequired": self.attaches,
                // The node plugin needs the client pod (name, namespace,
                // UID) for the staging context.
                "podInfoOnMount": true,
                // Ephemeral only with spec.volumeLifecycleModes naming it;
                // Persistent unless it leaves it out.
                "volumeLifecycleModes": self.lifecycle_modes(),
                // Like a built-in volume: kubelet gives the volume to the
                // client's fsGroup when the pod asks for one, whatever the
                // access mode or fsType (pav volumes have neither a fixed
                // fsType nor always RWO).
                "fsGroupPolicy": "File",
                // Tokens expire: kubelet publishes again about every
                // minute with fresh ones, which the node plugin writes
                // to the staging pod.
                "requiresRepublish": tokens,
                "tokenRequests": tokens.then(|| super::json(&self.token_requests)),
                // In NodePublishVolume's secrets (never logged), not its
                // volume context; an API server without the field (before
                // Kubernetes' v1.35, or its gate off) drops it, and kubelet
                // then uses the context, which the node plugin reads too.
                "serviceAccountTokenInSecrets": tokens.then_some(true),
                // The scheduler checks CSIStorageCapacity objects only
                // when set (spec.storageCapacity publishes them).
                "storageCapacity": self.capacity,
            },
        }))
    }

    /// The CSIDriver's `volumeLifecycleModes`: the spec's, `Persistent`
    /// without it.
    fn lifecycle_modes(&self) -> Vec<&'static str> {
        (self.lifecycle_modes.iter())
            .map(|mode| match mode {
                LifecycleMode::Persistent => "Persistent",
                LifecycleMode::Ephemeral => "Ephemeral",
            })
            .collect()
    }

    fn service_account(&self, name: &str, component: &str) -> ServiceAccount {
        typed(json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": self.namespaced(name, component),
        }))
    }

    fn cluster_role_binding(&self, name: &str, role: &str, component: &str) -> ClusterRoleBinding {
        typed(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": self.cluster(name, component),
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": self.settings.namespace }],
        }))
    }

    fn controller_role_binding(&self) -> RoleBinding {
        typed(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": self.namespaced(&self.controller, "csi-controller"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CSI_LEADER_ELECTION_ROLE,
            },
            "subjects": [{ "kind": "ServiceAccount", "name": self.controller, "namespace": self.settings.namespace }],
        }))
    }

    /// The node plugin's binding to [`CSI_NODE_PODS_ROLE`] in `namespace`.
    fn node_pods_binding(&self, namespace: &str) -> RoleBinding {
        let mut metadata = self.namespaced(&self.node, "csi-node");
        metadata["namespace"] = json!(namespace);
        typed(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CSI_NODE_PODS_ROLE,
            },
            "subjects": [{ "kind": "ServiceAccount", "name": self.node, "namespace": self.settings.namespace }],
        }))
    }

    fn pav_env(&self) -> Value {
        json!([
            { "name": "PAV_NAMESPACE", "value": self.settings.namespace },
            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
            { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
            { "name": "NODE_NAME", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } },
        ])
    }

    fn deployment(&self) -> Deployment {
        let s = self.settings;
        let selector = self.selector_labels("csi-controller");
        let mut pod_labels = self.labels("csi-controller");
        pod_labels
            .as_object_mut()
            .expect("labels are a map")
            .remove(LABEL_MANAGED_BY);
        let mut containers = vec![
            json!({
                "name": "pav",
                "image": s.image,
                "imagePullPolicy": s.image_pull_policy,
                "command": [PAV_BINARY],
                "args": [
                    "csi-controller", "--provisioner", self.name, "--endpoint", CSI_SOCKET,
                    "--log-format", s.logging.format.name(), "--log-level", s.logging.level.name(),
                ],
                "env": self.pav_env(),
                "ports": [pav_metrics_port()],
                // Restarts it when its CSI socket stops answering Probe.
                "livenessProbe": liveness("/healthz", "metrics"),
                "volumeMounts": [{ "name": "socket-dir", "mountPath": "/csi" }],
                "resources": s.resources.csi_controller.0,
                "securityContext": unprivileged_container_security(),
            }),
            self.sidecar(
                PROVISIONER,
                &s.provisioner_image,
                &s.resources.provisioner,
                &[
                    "--extra-create-metadata",
                    // pav csi-node reports its node as the volume's
                    // topology (crate::csi::TOPOLOGY_KEY); with the gate the
                    // sidecar passes it (the selected node's first) to
                    // CreateVolume. The gate is GA and on by default in
                    // v6.4.0: stated so pav's topology does not rest on a
                    // sidecar default. A release that drops the gate
                    // refuses the flag (exits): take it out then.
                    // (VolumeAttributesClass, GA and on by default too,
                    // needs nothing: pav's drivers do not advertise
                    // MODIFY_VOLUME, and the sidecar reads a claim's class
                    // with a GET only.)
                    "--feature-gates=Topology=true",
                ],
            ),
        ];
        if self.capacity {
            let provisioner = &mut containers[1];
            let args = provisioner["args"].as_array_mut().expect("args are a list");
            args.extend(attributes::CAPACITY_ARGS.map(Value::from));
            provisioner["env"] = attributes::capacity_env();
        }
        if self.expands || self.modifies {
            // Defaults otherwise: --handle-volume-inuse-error stays on, so
            // a claim whose expansion the driver refused while in use
            // (FailedPrecondition) is retried once no pod uses it. The
            // explicit --timeout is also external-resizer v2's timeout of
            // each ControllerExpandVolume and ControllerModifyVolume
            // (--resize-timeout and --modify-timeout, 10 s by default, are
            // ignored then). Its VolumeAttributesClass controller runs for
            // drivers with spec.volumeModification (MODIFY_VOLUME).
            let extra: &[&str] = if self.modifies {
                &attributes::MODIFICATION_ARGS
            } else {
                &[]
            };
            containers.push(self.sidecar(RESIZER, &s.resizer_image, &s.resources.resizer, extra));
        }
        if self.snapshots || self.group_snapshots {
            // The VolumeSnapshot's and VolumeSnapshotContent's names reach
            // CreateSnapshot as parameters. Group snapshots are GA and on
            // by default in csi-snapshotter v8.7; a driver without
            // groupSnapshotCreation has no GroupController service, so
            // the gate is turned off rather than left to watch group
            // snapshot objects for nothing. A release that drops the gate
            // refuses the flag: take it out then.
            let gate = if self.group_snapshots {
                "--feature-gates=CSIVolumeGroupSnapshot=true"
            } else {
                "--feature-gates=CSIVolumeGroupSnapshot=false"
            };
            containers.push(self.sidecar(
                SNAPSHOTTER,
                &s.snapshotter_image,
                &s.resources.snapshotter,
                &["--extra-create-metadata", gate],
            ));
        }
        if self.attaches {
            containers.push(self.sidecar(ATTACHER, &s.attacher_image, &s.resources.attacher, &[]));
        }
        // Nothing in it needs root: the socket is in an emptyDir, and the
        // sidecars only talk to it and to the API server.
        let spec = json!({
            "serviceAccountName": self.controller,
            "securityContext": non_root_pod_security(),
            "containers": containers,
            "volumes": [{ "name": "socket-dir", "emptyDir": {} }],
        });
        leader_elected_deployment(
            self.namespaced(&self.controller, "csi-controller"),
            &selector,
            &pod_labels,
            spec,
            s,
        )
    }

    /// Whether `sidecar` releases its Lease when it is shut down
    /// ([`RELEASE_LEASE_ON_EXIT`]): all but csi-snapshotter with group
    /// snapshots, whose v8.7 never shuts its group snapshot queue down, so
    /// that with the gate its workers wait until the pod's grace period
    /// kills it, and the Lease is not released either way.
    fn releases_lease_on_exit(&self, sidecar: Sidecar) -> bool {
        !(sidecar == SNAPSHOTTER && self.group_snapshots)
    }

    /// A sidecar of the CSI controller next to `pav csi-controller`: its
    /// socket, leader election in the pav namespace
    /// ([`sidecar_leader_election`], [`Self::releases_lease_on_exit`]),
    /// [`SIDECAR_TIMEOUT`], pav's own API
    /// rate limit, pav's log level and format, its HTTP server (metrics and
    /// the leader-election liveness probe), then `extra`.
    fn sidecar(&self, sidecar: Sidecar, image: &str, resources: &Json, extra: &[&str]) -> Value {
        let mut args = vec![format!("--csi-address={CSI_SOCKET}")];
        args.extend(sidecar_leader_election());
        if self.releases_lease_on_exit(sidecar) {
            args.push(RELEASE_LEASE_ON_EXIT.to_owned());
        }
        args.push(format!(
            "--leader-election-namespace={}",
            self.settings.namespace
        ));
        args.push(format!("--timeout={SIDECAR_TIMEOUT}"));
        // client-go's defaults (5 requests/s, burst 10) held
        // external-provisioner's requests back for seconds each at 200
        // claims (docs/performance.md), while pav's components beside it
        // may send ten times as many.
        args.push(format!("--kube-api-qps={DEFAULT_QPS}"));
        args.push(format!("--kube-api-burst={DEFAULT_BURST}"));
        args.extend(self.sidecar_logging());
        args.push(format!("--http-endpoint=:{}", sidecar.http_port));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        json!({
            "name": sidecar.name,
            "image": image,
            "imagePullPolicy": self.settings.image_pull_policy,
            "args": args,
            "ports": [{ "name": sidecar.port_name, "containerPort": sidecar.http_port, "protocol": "TCP" }],
            "livenessProbe": liveness(LEADER_ELECTION_HEALTH_PATH, sidecar.port_name),
            "volumeMounts": [{ "name": "socket-dir", "mountPath": "/csi" }],
            "resources": resources.0,
            "securityContext": unprivileged_container_security(),
        })
    }

    /// The sidecars' (Kubernetes component-base) flags for pav's log level
    /// (`--v`) and format (none for text, their default).
    fn sidecar_logging(&self) -> Vec<String> {
        let logging = self.settings.logging;
        let mut flags = vec![format!("--v={}", logging.level.klog_verbosity())];
        if logging.format == LogFormat::Json {
            flags.push("--logging-format=json".to_owned());
        }
        flags
    }

    fn daemon_set(&self) -> DaemonSet {
        let s = self.settings;
        let kubelet = s.kubelet_dir.trim_end_matches('/');
        let plugin_dir = format!("{kubelet}/plugins/{}", self.name);
        let selector = self.selector_labels("csi-node");
        let mut pod_labels = self.labels("csi-node");
        pod_labels
            .as_object_mut()
            .expect("labels are a map")
            .remove(LABEL_MANAGED_BY);
        let mut registrar_args = vec![
            format!("--csi-address={CSI_SOCKET}"),
            format!("--kubelet-registration-path={plugin_dir}/csi.sock"),
        ];
        // node-driver-registrar v2.11 and later take `--logging-format`, as
        // does the test cluster's stand-in.
        registrar_args.extend(self.sidecar_logging());
        let mut pav_args = vec![
            "csi-node",
            "--provisioner",
            &self.name,
            "--endpoint",
            CSI_SOCKET,
            "--node-id",
            "$(NODE_NAME)",
            // Publishing only inside it.
            "--kubelet-dir",
            kubelet,
            "--log-format",
            s.logging.format.name(),
            "--log-level",
            s.logging.level.name(),
        ];
        if self.lifecycle_modes.contains(&LifecycleMode::Ephemeral) {
            pav_args.push("--ephemeral");
        }
        if self.staging_per_node {
            pav_args.push("--staging-per-node");
        }
        let mut spec = json!({
                        "serviceAccountName": self.node,
                        // Root, said explicitly: the image's USER is not.
                        // pav mounts into kubelet's directory and
                        // /var/lib/pav/pods, and node-driver-registrar
                        // writes its socket into kubelet's
                        // plugins_registry, both root's.
                        "securityContext": { "runAsUser": 0, "runAsGroup": 0 },
                        "containers": [
                            {
                                "name": "pav",
                                "image": s.image,
                                "imagePullPolicy": s.image_pull_policy,
                                "command": [PAV_BINARY],
                                "args": pav_args,
                                "env": self.pav_env(),
                                "ports": [pav_metrics_port()],
                                // Restarts it when its CSI socket stops
                                // answering Probe.
                                "livenessProbe": liveness("/healthz", "metrics"),
                                // Bind mounts into kubelet's directories and
                                // reading what staging pods mount need it.
                                "securityContext": { "privileged": true },
                                "volumeMounts": [
                                    { "name": "socket-dir", "mountPath": "/csi" },
                                    { "name": "kubelet-dir", "mountPath": kubelet, "mountPropagation": "Bidirectional" },
                                    { "name": "pav-pods", "mountPath": HOST_POD_DIR, "mountPropagation": "Bidirectional" },
                                    { "name": "dev", "mountPath": "/dev" },
                                ],
                                "resources": s.resources.node_plugin.0,
                            },
                            {
                                "name": "node-driver-registrar",
                                "image": s.registrar_image,
                                "imagePullPolicy": s.image_pull_policy,
                                "args": registrar_args,
                                "volumeMounts": [
                                    { "name": "socket-dir", "mountPath": "/csi" },
                                    { "name": "registration-dir", "mountPath": "/registration" },
                                ],
                                "resources": s.resources.registrar.0,
                            },
                        ],
                        "volumes": [
                            { "name": "socket-dir", "hostPath": { "path": plugin_dir, "type": "DirectoryOrCreate" } },
                            { "name": "registration-dir", "hostPath": { "path": format!("{kubelet}/plugins_registry"), "type": "Directory" } },
                            { "name": "kubelet-dir", "hostPath": { "path": kubelet, "type": "Directory" } },
                            { "name": "pav-pods", "hostPath": { "path": HOST_POD_DIR, "type": "DirectoryOrCreate" } },
                            { "name": "dev", "hostPath": { "path": "/dev", "type": "Directory" } },
                        ],
        });
        // Every node a client pod may land on needs the plugin: by default
        // it tolerates every taint.
        place(&mut spec, s, &s.node_plugin);
        typed(json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": self.namespaced(&self.node, "csi-node"),
            "spec": {
                "selector": { "matchLabels": selector },
                "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1 } },
                "template": {
                    "metadata": { "labels": pod_labels },
                    "spec": spec,
                },
            },
        }))
    }
}

/// Metadata of a role shared by every driver.
fn shared_role_meta(name: &str, component: &str) -> Value {
    json!({
        "name": name,
        "labels": labels(&[(LABEL_NAME, "pav"), (LABEL_COMPONENT, component)]),
    })
}

/// What every CSI controller may do cluster-wide: exactly the calls of its
/// sidecars with pav's flags (external-provisioner v6 with topology and
/// snapshot or claim data sources, external-resizer v2 without
/// volume attributes classes and csi-snapshotter v8 without group
/// snapshots, none with
/// ControllerPublish, capacity tracking or secrets) and those of `pav
/// csi-controller` (its pods, in whatever namespace a template names;
/// claims and classes for the creation context; its PavProvisioner; the
/// snapshots it lists). Shared by every driver, so it grants the resizer's
/// and the snapshotter's calls whether a driver runs them or not.
///
/// ```
/// use pav::manifests::driver::csi_controller_role;
/// let rules = csi_controller_role().rules.unwrap();
/// assert!(!rules.iter().any(|r| r.resources.as_ref().unwrap().contains(&"secrets".to_owned())));
/// ```
pub fn csi_controller_role() -> ClusterRole {
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": shared_role_meta(CSI_CONTROLLER_ROLE, "csi-controller"),
        "rules": [
            // patch: external-resizer's new capacity.
            rule(&[""], &["persistentvolumes"], &["get", "list", "watch", "create", "patch", "delete"]),
            // patch: the populator's finalizer on a claim it fills
            // (spec.volumePopulation; its prime claims are
            // csi_leader_election_role's, in the pav namespace only).
            rule(
                &[""],
                &["persistentvolumeclaims"],
                &["get", "list", "watch", "update", "patch"],
            ),
            // external-resizer's resize status and conditions.
            rule(&[""], &["persistentvolumeclaims/status"], &["patch"]),
            rule(&["storage.k8s.io"], &["storageclasses"], &["get", "list", "watch"]),
            // client-go's event recorder in the three sidecars.
            rule(&[""], &["events"], &["create", "update", "patch"]),
            // kube's recorder in pav csi-controller.
            rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
            // get: the selected node of a WaitForFirstConsumer claim; list,
            // watch: external-provisioner's topology informers (nodes and
            // the CSINodes naming the drivers' topology keys).
            rule(&[""], &["nodes"], &["get", "list", "watch"]),
            rule(&["storage.k8s.io"], &["csinodes"], &["list", "watch"]),
            // get: external-provisioner's class of a new claim; list,
            // watch: external-resizer's informer (spec.volumeModification).
            rule(&["storage.k8s.io"], &["volumeattributesclasses"], &["get", "list", "watch"]),
            // patch: the finalizer of a staging pod whose node was deleted
            // (csi/deleted_nodes.rs); list, watch: also external-resizer's
            // pod informer (claims in use).
            rule(&[""], &["pods"], &["get", "list", "watch", "create", "delete", "patch"]),
            // Its own PavProvisioner, kept by a watch (field selector on
            // its name), compiled once per generation: never a GET.
            rule(&[pav_templates::model::GROUP], &["pavprovisioners"], &["list", "watch"]),
            // external-provisioner restoring a snapshot: the claim's
            // VolumeSnapshot, then its content (get).
            rule(&[SNAPSHOT_GROUP], &["volumesnapshots"], &["get"]),
            // csi-snapshotter: its content informer (list, watch), get and
            // patch (annotations, finalizers); pav csi-controller's
            // ListSnapshots (get, list, watch).
            rule(&[SNAPSHOT_GROUP], &["volumesnapshotcontents"], &["get", "list", "watch", "patch"]),
            rule(&[SNAPSHOT_GROUP], &["volumesnapshotcontents/status"], &["update", "patch"]),
            // csi-snapshotter's class informer (a lister: never a GET).
            rule(&[SNAPSHOT_GROUP], &["volumesnapshotclasses"], &["list", "watch"]),
            // csi-snapshotter's group snapshots (groupSnapshotCreation), as
            // its v8.7.0 rbac-csi-snapshotter.yaml grants them; pav
            // csi-controller's GetVolumeGroupSnapshot and ListSnapshots
            // (list).
            rule(&[GROUP_SNAPSHOT_GROUP], &["volumegroupsnapshotclasses"], &["get", "list", "watch"]),
            rule(
                &[GROUP_SNAPSHOT_GROUP],
                &["volumegroupsnapshotcontents"],
                &["get", "list", "watch", "update", "patch"],
            ),
            rule(&[GROUP_SNAPSHOT_GROUP], &["volumegroupsnapshotcontents/status"], &["update", "patch"]),
            // external-attacher (spec.volumeAttach): its informer, and the
            // attachment's finalizer and status (merge patches).
            rule(&["storage.k8s.io"], &["volumeattachments"], &["list", "watch", "patch"]),
            rule(&["storage.k8s.io"], &["volumeattachments/status"], &["patch"]),
        ],
    }))
}

/// What every node plugin may do cluster-wide: read pods (its staging
/// waits' cache of its node's pods, client pods), record the `/pav` files
/// of the pods it collects in their status
/// ([`CONDITION_COLLECTED`](crate::pods::CONDITION_COLLECTED)), read the
/// objects of the staging context, watch its PavProvisioner, record
/// events. Creating, patching and deleting pods is [`csi_node_pods_role`]'s,
/// bound only where its pods go. node-driver-registrar needs nothing.
pub fn csi_node_role() -> ClusterRole {
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": shared_role_meta(CSI_NODE_ROLE, "csi-node"),
        "rules": [
            rule(&[""], &["pods"], &["get", "list", "watch"]),
            // A pod's status cannot change what it runs, unlike its spec:
            // patching it anywhere grants no way into another namespace.
            rule(&[""], &["pods/status"], &["patch"]),
            // list and watch: staged per node (spec.stagingPer), kubelet
            // names no pod, so the volume is found by its handle in a watch
            // of PersistentVolumes.
            rule(&[""], &["persistentvolumes"], &["get", "list", "watch"]),
            rule(&[""], &["persistentvolumeclaims", "nodes"], &["get"]),
            rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
            // Its own PavProvisioner, kept by a watch (field selector on
            // its name), compiled once per generation: never a GET.
            rule(&[pav_templates::model::GROUP], &["pavprovisioners"], &["list", "watch"]),
        ],
    }))
}

/// What a node plugin may do in each namespace its node phases' pods go
/// to (a RoleBinding per namespace, [`DriverObjects::role_bindings`]):
/// create its staging, unstaging, health and node expansion pods, remove
/// the staging pods' finalizer (patch) and delete them.
pub fn csi_node_pods_role() -> ClusterRole {
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": shared_role_meta(CSI_NODE_PODS_ROLE, "csi-node"),
        "rules": [rule(&[""], &["pods"], &["create", "patch", "delete"])],
    }))
}

/// The leader election of the CSI controller's sidecars (csi-lib-utils, on
/// client-go's LeaseLock: get, create, update) and of its populator,
/// external-provisioner's CSIStorageCapacity objects with the owner
/// lookup they need (drivers with `storageCapacity`), and the populator's
/// prime claims (create, delete), bound in the pav namespace only.
pub fn csi_leader_election_role() -> ClusterRole {
    let [capacities, replica_sets] = attributes::capacity_rules();
    typed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": shared_role_meta(CSI_LEADER_ELECTION_ROLE, "csi-controller"),
        "rules": [
            rule(&["coordination.k8s.io"], &["leases"], &["get", "create", "update"]),
            capacities,
            replica_sets,
            rule(&[""], &["persistentvolumeclaims"], &["create", "delete"]),
        ],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::api::rbac::v1::PolicyRule;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn provisioner() -> PavProvisioner {
        with_sections("")
    }

    /// The provisioner `hello` with `sections` (YAML lines of the spec,
    /// each indented by two spaces) added.
    fn with_sections(sections: &str) -> PavProvisioner {
        let mut p: PavProvisioner = serde_yaml::from_str(&format!(
            "apiVersion: pav.albertofaria.github.io/v1alpha1\n\
             kind: PavProvisioner\n\
             metadata: {{ name: hello, uid: 1234-abcd }}\n\
             spec:\n  provisioningModes: [Dynamic]\n  volumeStaging: {{ podTemplate: {{ spec: {{ containers: [] }} }} }}\n{sections}",
        ))
        .unwrap();
        p.metadata.resource_version = Some("1".into());
        p
    }

    #[test]
    fn node_plugin_is_bound_where_its_node_phases_pods_go() {
        let settings = Settings::default();
        // Staging names no namespace: the pav namespace.
        let p = provisioner();
        let namespaces = node_pod_namespaces(&p, &settings);
        assert_eq!(namespaces.fixed, BTreeSet::from(["pav".to_owned()]));
        assert!(namespaces.templated.is_empty());
        let bindings = objects(&p, &settings).role_bindings;
        let node: Vec<_> = bindings
            .iter()
            .filter(|b| b.role_ref.name == CSI_NODE_PODS_ROLE)
            .collect();
        assert_eq!(node.len(), 1);
        assert_eq!(node[0].metadata.namespace.as_deref(), Some("pav"));
        assert_eq!(node[0].subjects.as_ref().unwrap()[0].name, "pav-hello-node");

        // A literal namespace, a templated one, a whole templated template.
        let p = with_sections(
            "  volumeUnstaging: { podTemplate: { metadata: { namespace: storage }, spec: { containers: [] } } }\n  \
             volumeHealth: { podTemplate: { metadata: { namespace: '{{ pvc.metadata.namespace }}' }, spec: { containers: [] } } }\n  \
             volumeNodeExpansion: { podTemplate: '{{ {} }}' }\n",
        );
        let namespaces = node_pod_namespaces(&p, &settings);
        assert_eq!(
            namespaces.fixed,
            BTreeSet::from(["pav".to_owned(), "storage".to_owned()])
        );
        assert_eq!(namespaces.templated, [Phase::NodeExpansion, Phase::Health]);
    }

    fn sidecars(p: &PavProvisioner, settings: &Settings) -> Vec<Container> {
        let pod = objects(p, settings).deployment.spec.template.spec.unwrap();
        pod.containers
            .into_iter()
            .filter(|c| c.name != "pav")
            .collect()
    }

    /// The flags every sidecar of the CSI controller takes.
    const COMMON_SIDECAR_FLAGS: [&str; 11] = [
        "--csi-address=/csi/csi.sock",
        "--leader-election",
        "--leader-election-lease-duration=60s",
        "--leader-election-renew-deadline=45s",
        "--leader-election-retry-period=10s",
        "--feature-gates=ReleaseLeaderElectionOnExit=true",
        "--leader-election-namespace=pav",
        "--timeout=300s",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
        "--v=2",
    ];

    fn container<'a>(spec: &'a PodSpec, name: &str) -> &'a Container {
        spec.containers.iter().find(|c| c.name == name).unwrap()
    }

    fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
        rules.iter().any(|r| {
            r.api_groups
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|g| g == group)
                && r.resources
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|x| x == resource)
                && r.verbs.iter().any(|v| v == verb)
        })
    }

    #[test]
    fn csi_driver() {
        let d = objects(&provisioner(), &Settings::default()).csi_driver;
        assert_eq!(d.metadata.name.as_deref(), Some("hello"));
        assert_eq!(d.spec.attach_required, Some(false));
        assert_eq!(d.spec.pod_info_on_mount, Some(true));
        assert_eq!(
            d.spec.volume_lifecycle_modes,
            Some(vec!["Persistent".into()])
        );
        assert_eq!(d.spec.fs_group_policy.as_deref(), Some("File"));
        assert!(
            d.metadata.owner_references.is_none(),
            "cluster-scoped: finalizer cleans up"
        );
        assert_eq!(d.metadata.labels.unwrap()[LABEL_PROVISIONER], "hello");
    }

    #[test]
    fn controller_deployment() {
        let o = objects(&provisioner(), &Settings::default());
        let d = o.deployment;
        assert_eq!(d.metadata.name.as_deref(), Some("pav-hello-controller"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("pav"));
        let owner = &d.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("PavProvisioner", "hello", "1234-abcd")
        );
        assert_eq!(owner.controller, Some(true));
        let spec = d.spec;
        let pod = spec.template.spec.unwrap();
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some("pav-hello-controller")
        );
        let pav = container(&pod, "pav");
        assert_eq!(pav.command.as_deref().unwrap(), [PAV_BINARY]);
        assert_eq!(
            pav.args.as_deref().unwrap(),
            [
                "csi-controller",
                "--provisioner",
                "hello",
                "--endpoint",
                "/csi/csi.sock",
                "--log-format",
                "text",
                "--log-level",
                "info"
            ]
        );
        assert_eq!(pav.image.as_deref(), Some(crate::manifests::DEFAULT_IMAGE));
        let sidecar = container(&pod, "csi-provisioner");
        let args = sidecar.args.clone().unwrap();
        let mut expected = COMMON_SIDECAR_FLAGS.to_vec();
        expected.extend([
            "--http-endpoint=:8081",
            "--extra-create-metadata",
            "--feature-gates=Topology=true",
        ]);
        assert_eq!(args, expected);
        assert_eq!(
            sidecar.image.as_deref(),
            Some(super::super::DEFAULT_PROVISIONER_IMAGE)
        );
        for c in &pod.containers {
            assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        }
        assert!(pod.volumes.unwrap()[0].empty_dir.is_some());
        // The selector must match the pod labels.
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        for (k, v) in spec.selector.match_labels.unwrap() {
            assert_eq!(pod_labels[&k], v);
        }
    }

    #[test]
    fn ephemeral_volumes_are_served_exactly_when_the_spec_lists_them() {
        let settings = Settings::default();
        let node_args = |p: &PavProvisioner| -> Vec<String> {
            let pod = objects(p, &settings).daemon_set.spec.template.spec.unwrap();
            container(&pod, "pav").args.clone().unwrap()
        };
        let modes =
            |p: &PavProvisioner| objects(p, &settings).csi_driver.spec.volume_lifecycle_modes;
        let plain = provisioner();
        assert_eq!(modes(&plain), Some(vec!["Persistent".to_owned()]));
        assert!(!node_args(&plain).contains(&"--ephemeral".to_owned()));
        let both = with_sections("  volumeLifecycleModes: [Persistent, Ephemeral]\n");
        assert_eq!(
            modes(&both),
            Some(vec!["Persistent".to_owned(), "Ephemeral".to_owned()])
        );
        assert!(node_args(&both).contains(&"--ephemeral".to_owned()));
        let only = with_sections("  volumeLifecycleModes: [Ephemeral]\n");
        assert_eq!(modes(&only), Some(vec!["Ephemeral".to_owned()]));
    }

    #[test]
    fn the_csi_driver_asks_for_tokens_exactly_when_the_spec_does() {
        let settings = Settings::default();
        let driver = |p: &PavProvisioner| objects(p, &settings).csi_driver.spec;
        let plain = driver(&provisioner());
        assert_eq!(plain.token_requests, None);
        assert_eq!(plain.requires_republish, Some(false));
        assert_eq!(plain.service_account_token_in_secrets, None);
        let asks = driver(&with_sections(
            "  tokenRequests:\n    - audience: sts.example.com\n      expirationSeconds: 3600\n",
        ));
        let requests = asks.token_requests.expect("the spec's token requests");
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].audience, "sts.example.com");
        assert_eq!(requests[0].expiration_seconds, Some(3600));
        assert_eq!(asks.requires_republish, Some(true));
        assert_eq!(asks.service_account_token_in_secrets, Some(true));
    }

    #[test]
    fn node_plugins_stage_per_node_exactly_when_the_spec_says_node() {
        let settings = Settings::default();
        let per_node = |p: &PavProvisioner| {
            let pod = objects(p, &settings).daemon_set.spec.template.spec.unwrap();
            (container(&pod, "pav").args.clone().unwrap())
                .contains(&"--staging-per-node".to_owned())
        };
        assert!(!per_node(&provisioner()));
        assert!(!per_node(&with_sections("  stagingPer: Pod\n")));
        assert!(per_node(&with_sections("  stagingPer: Node\n")));
    }

    #[test]
    fn attaching_is_required_and_the_attacher_runs_exactly_with_volume_attach() {
        let settings = Settings {
            attacher_image: "example/attacher:1".into(),
            ..Settings::default()
        };
        let attach = "  volumeAttach: { podTemplate: { spec: { containers: [] } } }\n";
        let plain = objects(&provisioner(), &settings);
        assert_eq!(plain.csi_driver.spec.attach_required, Some(false));
        let names = |p: &PavProvisioner| -> Vec<String> {
            sidecars(p, &settings).into_iter().map(|c| c.name).collect()
        };
        assert_eq!(names(&provisioner()), ["csi-provisioner"]);
        let attached = with_sections(attach);
        assert_eq!(
            objects(&attached, &settings)
                .csi_driver
                .spec
                .attach_required,
            Some(true)
        );
        assert_eq!(names(&attached), ["csi-provisioner", "csi-attacher"]);
        let attacher = &sidecars(&attached, &settings)[1];
        assert_eq!(attacher.image.as_deref(), Some("example/attacher:1"));
        let mut expected: Vec<String> = COMMON_SIDECAR_FLAGS.map(String::from).to_vec();
        expected.push("--http-endpoint=:8084".to_owned());
        assert_eq!(attacher.args.as_deref().unwrap(), expected);
    }

    #[test]
    fn resizer_and_snapshotter_run_exactly_for_their_sections() {
        let settings = Settings {
            namespace: "storage".into(),
            resizer_image: "example/resizer:1".into(),
            snapshotter_image: "example/snapshotter:1".into(),
            ..Settings::default()
        };
        let names = |p: &PavProvisioner| -> Vec<String> {
            sidecars(p, &settings).into_iter().map(|c| c.name).collect()
        };
        assert_eq!(names(&provisioner()), ["csi-provisioner"]);
        // Node expansion, snapshot deletion and data sources need no
        // sidecar of their own.
        let expansion = "  volumeExpansion: { capacity: '{{ requestedMinCapacity }}' }\n";
        let node_expansion =
            "  volumeNodeExpansion: { podTemplate: { spec: { containers: [] } } }\n";
        let snapshots = "  snapshotCreation: { handle: h, size: '1Gi' }\n";
        let snapshot_deletion = "  snapshotDeletion: {}\n";
        let sources = "  dataSources: [PersistentVolumeClaim]\n";
        assert_eq!(
            names(&with_sections(&format!(
                "{node_expansion}{snapshot_deletion}{sources}"
            ))),
            ["csi-provisioner"]
        );
        assert_eq!(
            names(&with_sections(&format!("{expansion}{node_expansion}"))),
            ["csi-provisioner", "csi-resizer"]
        );
        assert_eq!(
            names(&with_sections(&format!("{snapshots}{snapshot_deletion}"))),
            ["csi-provisioner", "csi-snapshotter"]
        );
        let both = with_sections(&format!("{expansion}{snapshots}"));
        assert_eq!(
            names(&both),
            ["csi-provisioner", "csi-resizer", "csi-snapshotter"]
        );

        let all = sidecars(&both, &settings);
        let common: Vec<String> = COMMON_SIDECAR_FLAGS
            .iter()
            .map(|f| f.replace("namespace=pav", "namespace=storage"))
            .collect();
        let resizer = &all[1];
        assert_eq!(resizer.image.as_deref(), Some("example/resizer:1"));
        let mut expected = common.clone();
        expected.push("--http-endpoint=:8082".to_owned());
        assert_eq!(resizer.args.as_deref().unwrap(), expected);
        let snapshotter = &all[2];
        assert_eq!(snapshotter.image.as_deref(), Some("example/snapshotter:1"));
        let mut expected = common.clone();
        expected.extend(
            [
                "--http-endpoint=:8083",
                "--extra-create-metadata",
                "--feature-gates=CSIVolumeGroupSnapshot=false",
            ]
            .map(String::from),
        );
        assert_eq!(snapshotter.args.as_deref().unwrap(), expected);
        for sidecar in &all {
            assert_eq!(sidecar.image_pull_policy.as_deref(), Some("IfNotPresent"));
            let mounts = sidecar.volume_mounts.as_deref().unwrap();
            assert_eq!(
                (mounts[0].name.as_str(), mounts[0].mount_path.as_str()),
                ("socket-dir", "/csi"),
                "{}",
                sidecar.name
            );
        }
        assert_eq!(
            sidecars(&both, &Settings::default())
                .iter()
                .map(|c| c.image.clone().unwrap())
                .collect::<Vec<_>>(),
            [
                super::super::DEFAULT_PROVISIONER_IMAGE,
                super::super::DEFAULT_RESIZER_IMAGE,
                super::super::DEFAULT_SNAPSHOTTER_IMAGE,
            ]
        );
    }

    /// Every sidecar leader releases its Lease when shut down, but
    /// csi-snapshotter with group snapshots, whose shutdown with the gate
    /// waits for the pod's grace period.
    #[test]
    fn sidecar_leaders_release_their_leases_on_exit_but_a_group_snapshotter() {
        let releasing = |sections: &str| -> Vec<String> {
            (sidecars(&with_sections(sections), &Settings::default()).into_iter())
                .filter(|c| {
                    let args = c.args.as_deref().unwrap_or_default();
                    args.iter().any(|a| a == RELEASE_LEASE_ON_EXIT)
                })
                .map(|c| c.name)
                .collect()
        };
        let attach = "  volumeAttach: { podTemplate: { spec: { containers: [] } } }\n";
        let expansion = "  volumeExpansion: { capacity: '{{ requestedMinCapacity }}' }\n";
        let snapshots = "  snapshotCreation: { handle: h, size: '1Gi' }\n";
        let groups = "  groupSnapshotCreation: { podTemplate: { spec: { containers: [] } } }\n";
        assert_eq!(
            releasing(&format!("{attach}{expansion}{snapshots}")),
            [
                "csi-provisioner",
                "csi-resizer",
                "csi-snapshotter",
                "csi-attacher"
            ]
        );
        assert_eq!(
            releasing(&format!("{expansion}{snapshots}{groups}")),
            ["csi-provisioner", "csi-resizer"]
        );
    }

    /// Every container of a driver with all three sidecars, the CSI
    /// controller's then the node plugin's.
    fn pods(settings: &Settings) -> (PodSpec, PodSpec) {
        let all = with_sections(concat!(
            "  volumeExpansion: { capacity: '{{ requestedMinCapacity }}' }\n",
            "  snapshotCreation: { handle: h, size: '1Gi' }\n",
        ));
        let o = objects(&all, settings);
        (
            o.deployment.spec.template.spec.unwrap(),
            o.daemon_set.spec.template.spec.unwrap(),
        )
    }

    /// Priority classes, scheduling, pull secrets and policy, and each
    /// container's resources come from the settings.
    #[test]
    fn drivers_are_placed_and_sized_by_the_settings() {
        let (controller, node) = pods(&Settings::default());
        assert_eq!(
            controller.priority_class_name.as_deref(),
            Some("system-cluster-critical")
        );
        assert_eq!(
            node.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        let tolerations = node.tolerations.clone().unwrap();
        assert_eq!(tolerations.len(), 1);
        assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
        assert!(controller.tolerations.is_none() && controller.node_selector.is_none());
        assert!(controller.image_pull_secrets.is_none() && node.affinity.is_none());

        let json = |text: &str| super::super::Json(serde_json::from_str(text).unwrap());
        let mut settings = Settings {
            image_pull_policy: "Always".into(),
            image_pull_secrets: vec!["regcred".into()],
            ..Settings::default()
        };
        settings.node_plugin.priority_class = String::new();
        settings.node_plugin.tolerations = json("[]");
        settings.node_plugin.node_selector = json(r#"{"disk":"ssd"}"#);
        settings.controller.affinity = json(r#"{"podAntiAffinity":{}}"#);
        settings.resources.registrar = json(r#"{"limits":{"memory":"20Mi"}}"#);
        settings.resources.resizer = json(r#"{"requests":{"cpu":"7m"}}"#);
        let (controller, node) = pods(&settings);
        assert_eq!(node.priority_class_name, None);
        assert_eq!(node.tolerations, None);
        assert_eq!(
            node.node_selector
                .as_ref()
                .unwrap()
                .get("disk")
                .map(String::as_str),
            Some("ssd")
        );
        assert!(
            controller
                .affinity
                .as_ref()
                .unwrap()
                .pod_anti_affinity
                .is_some()
        );
        for spec in [&controller, &node] {
            assert_eq!(spec.image_pull_secrets.as_ref().unwrap()[0].name, "regcred");
            for c in &spec.containers {
                assert_eq!(c.image_pull_policy.as_deref(), Some("Always"), "{}", c.name);
            }
        }
        let registrar = container(&node, "node-driver-registrar");
        let limits = registrar
            .resources
            .as_ref()
            .unwrap()
            .limits
            .clone()
            .unwrap();
        assert_eq!(limits["memory"].0, "20Mi");
        let resizer = container(&controller, RESIZER.name);
        let requests = resizer
            .resources
            .as_ref()
            .unwrap()
            .requests
            .clone()
            .unwrap();
        assert_eq!(requests["cpu"].0, "7m");
    }

    /// The liveness probe of `c`: path, port name, and period, timeout and
    /// failure threshold.
    fn probe(c: &Container) -> (String, String, i32, i32, i32) {
        let probe = c
            .liveness_probe
            .clone()
            .unwrap_or_else(|| panic!("{} has no liveness probe", c.name));
        let get = probe.http_get.unwrap();
        let port = match get.port {
            IntOrString::String(name) => name,
            IntOrString::Int(n) => panic!("{}: probe port {n} by number", c.name),
        };
        (
            get.path.unwrap(),
            port,
            probe.period_seconds.unwrap(),
            probe.timeout_seconds.unwrap(),
            probe.failure_threshold.unwrap(),
        )
    }

    /// `(name, port)` of each port `c` declares.
    fn ports(c: &Container) -> Vec<(String, i32)> {
        c.ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap(), p.container_port))
            .collect()
    }

    /// A driver that stopped serving its CSI socket was never restarted:
    /// nothing probed it. And the sidecars' metrics had no port.
    #[test]
    fn driver_containers_are_probed_on_their_declared_ports() {
        let (controller, node) = pods(&Settings::default());
        for pod in [&controller, &node] {
            let pav = container(pod, "pav");
            assert_eq!(ports(pav), [("metrics".to_owned(), 9808)]);
            assert_eq!(
                probe(pav),
                ("/healthz".to_owned(), "metrics".to_owned(), 10, 5, 3)
            );
        }
        for (sidecar, port) in [(PROVISIONER, 8081), (RESIZER, 8082), (SNAPSHOTTER, 8083)] {
            let c = container(&controller, sidecar.name);
            assert_eq!(ports(c), [(sidecar.port_name.to_owned(), port)]);
            let args = c.args.as_deref().unwrap();
            assert!(
                args.contains(&format!("--http-endpoint=:{port}")),
                "{args:?}"
            );
            assert_eq!(
                probe(c),
                (
                    "/healthz/leader-election".to_owned(),
                    sidecar.port_name.to_owned(),
                    10,
                    5,
                    3
                )
            );
        }
        // Ports and their names are distinct within the pod and valid
        // IANA service names (what the API server accepts).
        let declared: Vec<(String, i32)> = controller.containers.iter().flat_map(ports).collect();
        assert_eq!(declared.len(), 4);
        for (i, (name, port)) in declared.iter().enumerate() {
            assert!(
                name.len() <= 15
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !name.contains("--"),
                "{name}"
            );
            for (other, other_port) in &declared[i + 1..] {
                assert!(name != other && port != other_port, "{declared:?}");
            }
        }
    }

    /// pav's containers logged coloured text whatever was asked; with json
    /// the CSI sidecars must log JSON too. The level reaches pav's
    /// containers as their flag and the sidecars as klog's `--v`.
    #[test]
    fn drivers_log_in_the_settings_format_and_level() {
        use crate::telemetry::{LogLevel, Logging};
        use clap::Parser as _;
        let json_debug = Settings {
            logging: Logging {
                format: LogFormat::Json,
                level: LogLevel::Debug,
            },
            ..Settings::default()
        };
        for (settings, format, level) in [
            (Settings::default(), "text", "--v=2"),
            (json_debug, "json", "--v=4"),
        ] {
            let (controller, node) = pods(&settings);
            for pod in [&controller, &node] {
                let args = container(pod, "pav").args.clone().unwrap();
                // pav's own flags, as pav parses them.
                let cli = crate::cli::Cli::try_parse_from(
                    ["pav"].into_iter().map(String::from).chain(args.clone()),
                )
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
                let common = match cli.command {
                    crate::cli::Command::CsiController(a) => a.common,
                    crate::cli::Command::CsiNode(a) => a.common,
                    other => panic!("{other:?}"),
                };
                assert_eq!(common.logging, settings.logging);
                for c in pod.containers.iter().filter(|c| c.name != "pav") {
                    let flags: Vec<&String> = c
                        .args
                        .iter()
                        .flatten()
                        .filter(|a| a.starts_with("--logging-format") || a.starts_with("--v="))
                        .collect();
                    match format {
                        "json" => assert_eq!(flags, [level, "--logging-format=json"], "{}", c.name),
                        _ => assert_eq!(flags, [level], "{}", c.name),
                    }
                }
            }
        }
    }

    #[test]
    fn sidecar_leases_are_named_as_csi_lib_utils_names_them() {
        assert_eq!(
            lease_names("a/b_"),
            [
                "a-b-X",
                "external-resizer-a-b-X",
                "external-snapshotter-leader-a-b-X",
                "external-attacher-leader-a-b-X",
                "pav-populator-a/b_",
            ]
        );
    }

    #[test]
    fn node_daemon_set() {
        let settings = Settings {
            kubelet_dir: "/var/lib/k0s/kubelet/".into(),
            ..Settings::default()
        };
        let ds = objects(&provisioner(), &settings).daemon_set;
        assert_eq!(ds.metadata.name.as_deref(), Some("pav-hello-node"));
        let pod = ds.spec.template.spec.unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some("pav-hello-node"));
        let pav = container(&pod, "pav");
        assert_eq!(
            pav.security_context.as_ref().unwrap().privileged,
            Some(true)
        );
        assert_eq!(
            pav.args.as_deref().unwrap(),
            [
                "csi-node",
                "--provisioner",
                "hello",
                "--endpoint",
                "/csi/csi.sock",
                "--node-id",
                "$(NODE_NAME)",
                "--kubelet-dir",
                "/var/lib/k0s/kubelet",
                "--log-format",
                "text",
                "--log-level",
                "info"
            ]
        );
        let node_env = pav
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == "NODE_NAME")
            .unwrap();
        assert_eq!(
            node_env
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "spec.nodeName"
        );
        let mounts = pav.volume_mounts.as_ref().unwrap();
        let mount = |path: &str| {
            mounts
                .iter()
                .find(|m| m.mount_path == path)
                .unwrap_or_else(|| panic!("no mount at {path}"))
        };
        assert_eq!(
            mount("/var/lib/k0s/kubelet").mount_propagation.as_deref(),
            Some("Bidirectional")
        );
        assert_eq!(
            mount("/var/lib/pav/pods").mount_propagation.as_deref(),
            Some("Bidirectional")
        );
        assert_eq!(mount("/csi").name, "socket-dir");
        mount("/dev");
        let volumes = pod.volumes.as_ref().unwrap();
        let host = |name: &str| {
            volumes
                .iter()
                .find(|v| v.name == name)
                .unwrap()
                .host_path
                .clone()
                .unwrap()
        };
        assert_eq!(
            host("socket-dir").path,
            "/var/lib/k0s/kubelet/plugins/hello"
        );
        assert_eq!(
            host("socket-dir").type_.as_deref(),
            Some("DirectoryOrCreate")
        );
        assert_eq!(
            host("registration-dir").path,
            "/var/lib/k0s/kubelet/plugins_registry"
        );
        let registrar = container(&pod, "node-driver-registrar");
        assert_eq!(
            registrar.args.as_deref().unwrap()[..2],
            [
                "--csi-address=/csi/csi.sock",
                "--kubelet-registration-path=/var/lib/k0s/kubelet/plugins/hello/csi.sock"
            ]
        );
        assert!(
            registrar
                .volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .any(|m| m.mount_path == "/registration")
        );
        assert_eq!(
            pod.tolerations.unwrap()[0].operator.as_deref(),
            Some("Exists")
        );
    }

    /// The CSI controller needs no root: every container of it, sidecars
    /// included, runs as the image's user, restricted; the node plugin,
    /// which mounts into the node, runs as root whatever the image's USER.
    #[test]
    fn only_the_node_plugin_runs_as_root() {
        let every_sidecar = with_sections(
            "  volumeExpansion: { capacity: '{{ requestedMinCapacity }}' }\n  \
             snapshotCreation: { handle: h, size: '1Gi' }\n  \
             volumeAttach: { podTemplate: { spec: { containers: [] } } }\n",
        );
        let o = objects(&every_sidecar, &Settings::default());
        let pod = o.deployment.spec.template.spec.unwrap();
        let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "pav",
                "csi-provisioner",
                "csi-resizer",
                "csi-snapshotter",
                "csi-attacher"
            ]
        );
        let security = pod.security_context.clone().unwrap_or_default();
        assert_eq!(
            (
                security.run_as_non_root,
                security.run_as_user,
                security.run_as_group,
                security.seccomp_profile.map(|p| p.type_),
            ),
            (
                Some(true),
                Some(65532),
                Some(65532),
                Some("RuntimeDefault".to_owned())
            ),
            "Deployment {}: spec.template.spec.securityContext",
            o.deployment.metadata.name.as_deref().unwrap_or_default()
        );
        for c in &pod.containers {
            let security = c.security_context.clone().unwrap_or_default();
            assert_eq!(
                (
                    security.allow_privilege_escalation,
                    security.read_only_root_filesystem,
                    security.capabilities.and_then(|c| c.drop),
                    security.privileged,
                    security.run_as_user,
                ),
                (
                    Some(false),
                    Some(true),
                    Some(vec!["ALL".to_owned()]),
                    None,
                    None
                ),
                "container {}: securityContext",
                c.name
            );
        }
        let node = o.daemon_set.spec.template.spec.unwrap();
        let security = node.security_context.clone().unwrap_or_default();
        assert_eq!(
            (
                security.run_as_user,
                security.run_as_group,
                security.run_as_non_root
            ),
            (Some(0), Some(0), None),
            "DaemonSet {}: spec.template.spec.securityContext",
            o.daemon_set.metadata.name.as_deref().unwrap_or_default()
        );
        for c in &node.containers {
            let user = c.security_context.as_ref().and_then(|s| s.run_as_user);
            assert_eq!(user, None, "container {}: the pod's user, root", c.name);
        }
    }

    #[test]
    fn rbac() {
        let o = objects(&provisioner(), &Settings::default());
        let names: Vec<_> = o
            .service_accounts
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["pav-hello-controller", "pav-hello-node"]);
        let roles: Vec<_> = o
            .cluster_role_bindings
            .iter()
            .map(|b| (b.metadata.name.clone().unwrap(), b.role_ref.name.clone()))
            .collect();
        assert_eq!(
            roles,
            [
                (
                    "pav-hello-controller".to_owned(),
                    CSI_CONTROLLER_ROLE.to_owned()
                ),
                ("pav-hello-node".to_owned(), CSI_NODE_ROLE.to_owned())
            ]
        );
        for binding in &o.cluster_role_bindings {
            let subject = &binding.subjects.as_ref().unwrap()[0];
            assert_eq!(Some(&subject.name), binding.metadata.name.as_ref());
            assert_eq!(subject.namespace.as_deref(), Some("pav"));
        }
        let leases = &o.role_bindings[0];
        assert_eq!(leases.metadata.namespace.as_deref(), Some("pav"));
        assert_eq!(
            (leases.role_ref.kind.as_str(), leases.role_ref.name.as_str()),
            ("ClusterRole", CSI_LEADER_ELECTION_ROLE)
        );

        let controller = csi_controller_role().rules.unwrap();
        for (group, resource, verb) in [
            ("", "persistentvolumes", "create"),
            ("", "persistentvolumes", "delete"),
            ("", "persistentvolumeclaims", "update"),
            ("storage.k8s.io", "storageclasses", "watch"),
            ("", "nodes", "get"),
            ("", "events", "create"),
            ("", "pods", "create"),
            ("", "pods", "delete"),
            ("", "pods", "patch"),
            ("pav.albertofaria.github.io", "pavprovisioners", "list"),
            ("pav.albertofaria.github.io", "pavprovisioners", "watch"),
            // external-provisioner's topology informers.
            ("", "nodes", "list"),
            ("", "nodes", "watch"),
            ("storage.k8s.io", "csinodes", "list"),
            ("storage.k8s.io", "csinodes", "watch"),
            // external-provisioner restoring a snapshot.
            ("snapshot.storage.k8s.io", "volumesnapshots", "get"),
            ("snapshot.storage.k8s.io", "volumesnapshotcontents", "get"),
            // pav csi-controller's ListSnapshots.
            ("snapshot.storage.k8s.io", "volumesnapshotcontents", "list"),
            ("snapshot.storage.k8s.io", "volumesnapshotcontents", "watch"),
        ] {
            assert!(
                allows(&controller, group, resource, verb),
                "controller lacks {verb} {group}/{resource}"
            );
        }
        // external-resizer v2 (deploy/kubernetes/rbac.yaml, without the
        // VolumeAttributesClass controller, which it runs only for a
        // driver with MODIFY_VOLUME).
        for (group, resource, verb) in [
            ("", "persistentvolumes", "get"),
            ("", "persistentvolumes", "list"),
            ("", "persistentvolumes", "watch"),
            ("", "persistentvolumes", "patch"),
            ("", "persistentvolumeclaims", "get"),
            ("", "persistentvolumeclaims", "list"),
            ("", "persistentvolumeclaims", "watch"),
            ("", "persistentvolumeclaims/status", "patch"),
            ("", "pods", "list"),
            ("", "pods", "watch"),
            ("", "events", "create"),
            ("", "events", "update"),
            ("", "events", "patch"),
        ] {
            assert!(
                allows(&controller, group, resource, verb),
                "external-resizer lacks {verb} {group}/{resource}"
            );
        }
        // csi-snapshotter v8 (deploy/kubernetes/csi-snapshotter/
        // rbac-csi-snapshotter.yaml, without group snapshots and secrets).
        for (resource, verb) in [
            ("volumesnapshotclasses", "list"),
            ("volumesnapshotclasses", "watch"),
            ("volumesnapshotcontents", "get"),
            ("volumesnapshotcontents", "list"),
            ("volumesnapshotcontents", "watch"),
            ("volumesnapshotcontents", "patch"),
            ("volumesnapshotcontents/status", "update"),
            ("volumesnapshotcontents/status", "patch"),
        ] {
            assert!(
                allows(&controller, "snapshot.storage.k8s.io", resource, verb),
                "csi-snapshotter lacks {verb} {resource}"
            );
        }
        // csi-snapshotter v8.7.0's group snapshots, as its
        // rbac-csi-snapshotter.yaml grants them.
        for (resource, verbs) in [
            ("volumegroupsnapshotclasses", &["get", "list", "watch"][..]),
            (
                "volumegroupsnapshotcontents",
                &["get", "list", "watch", "update", "patch"],
            ),
            ("volumegroupsnapshotcontents/status", &["update", "patch"]),
        ] {
            for verb in verbs {
                assert!(
                    allows(&controller, GROUP_SNAPSHOT_GROUP, resource, verb),
                    "csi-snapshotter lacks {verb} {resource}"
                );
            }
        }
        // external-attacher (spec.volumeAttach), as its v4.13.0 calls.
        for (resource, verb) in [
            ("volumeattachments", "list"),
            ("volumeattachments", "watch"),
            ("volumeattachments", "patch"),
            ("volumeattachments/status", "patch"),
        ] {
            assert!(
                allows(&controller, "storage.k8s.io", resource, verb),
                "external-attacher lacks {verb} {resource}"
            );
        }
        for (group, resource, verb) in [
            ("", "secrets", "get"),
            ("storage.k8s.io", "volumeattachments", "create"),
            ("storage.k8s.io", "volumeattachments", "delete"),
            ("", "persistentvolumeclaims/status", "update"),
            // The snapshot controller's, not a driver's.
            ("snapshot.storage.k8s.io", "volumesnapshots", "update"),
            (
                "snapshot.storage.k8s.io",
                "volumesnapshotcontents",
                "create",
            ),
            (
                "snapshot.storage.k8s.io",
                "volumesnapshotcontents",
                "delete",
            ),
            (
                "groupsnapshot.storage.k8s.io",
                "volumegroupsnapshotcontents",
                "create",
            ),
            (
                "groupsnapshot.storage.k8s.io",
                "volumegroupsnapshots",
                "update",
            ),
        ] {
            assert!(
                !allows(&controller, group, resource, verb),
                "controller may {verb} {group}/{resource}"
            );
        }
        let leader = csi_leader_election_role().rules.unwrap();
        assert!(allows(&leader, "coordination.k8s.io", "leases", "update"));
        assert!(!allows(&leader, "coordination.k8s.io", "leases", "delete"));
        let node = csi_node_role().rules.unwrap();
        for verb in ["create", "patch", "delete"] {
            assert!(
                !allows(&node, "", "pods", verb),
                "node may {verb} pods everywhere"
            );
        }
        let node_pods = csi_node_pods_role().rules.unwrap();
        for verb in ["create", "patch", "delete"] {
            assert!(
                allows(&node_pods, "", "pods", verb),
                "node pods role lacks {verb}"
            );
        }
        assert_eq!(node_pods.len(), 1, "{node_pods:?}");
        for (group, resource, verb) in [
            ("", "pods", "watch"),
            ("", "pods/status", "patch"),
            ("", "persistentvolumes", "get"),
            ("", "persistentvolumes", "watch"),
            ("", "persistentvolumeclaims", "get"),
            ("", "nodes", "get"),
            ("events.k8s.io", "events", "create"),
            ("pav.albertofaria.github.io", "pavprovisioners", "list"),
            ("pav.albertofaria.github.io", "pavprovisioners", "watch"),
        ] {
            assert!(
                allows(&node, group, resource, verb),
                "node lacks {verb} {group}/{resource}"
            );
        }
        assert!(!allows(&node, "", "persistentvolumes", "create"));
        assert!(!allows(&node, "", "events", "create"));
    }
}
