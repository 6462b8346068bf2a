//! The PavProvisioner custom resource, as users write it.
//!
//! Every field under `spec` except `provisioningModes` may be a template, and
//! a template with `{% set yaml = true %}` may stand in for a whole object or
//! list (`volumeModes: "{% set yaml = true %}[{{ params.mode }}]"`). The
//! stored spec therefore keeps each phase as a [`TemplateTree`]: the YAML as
//! written. [`crate::CompiledProvisioner`] checks its shape and compiles it;
//! rendering a phase yields the typed structs in [`crate::phase`].

use std::borrow::Cow;

use kube::core::crd::CustomResourceExt as _;
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// API group of PavProvisioner, shared with the original PaV so existing
/// objects keep working.
pub const GROUP: &str = "pav.albertofaria.github.io";

/// API version of PavProvisioner.
pub const VERSION: &str = "v1alpha1";

/// How volumes are validated, created, deleted, staged on a node and
/// unstaged, as pod templates. Every string field below provisioningModes
/// is a Jinja template, evaluated per volume (see the PaV user guide).
///
/// Phase fields are kept as written, since a template may stand in for a
/// whole object; `CompiledProvisioner` checks and evaluates them.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pav.albertofaria.github.io",
    version = "v1alpha1",
    kind = "PavProvisioner",
    plural = "pavprovisioners",
    shortname = "pavp",
    status = "PavProvisionerStatus",
    doc = "A volume provisioner whose steps are pods instantiated from templates",
    printcolumn(name = "Modes", type_ = "string", json_path = ".spec.provisioningModes"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Volumes", type_ = "integer", json_path = ".status.volumes"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')")
        .message("metadata.name must be a DNS label: at most 63 lowercase alphanumerics or '-', starting and ending with an alphanumeric")
)]
// Rules about the phase fields (volumeCreation only with Dynamic, ...) are
// not CEL rules here: the API server's CEL cannot see fields whose schema
// has no type, so `pav check` and the controller's InvalidSpec enforce them.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PavProvisionerSpec {
    /// How volumes of this provisioner come to exist: created on demand for
    /// claims (`Dynamic`), or declared by users as PersistentVolumes (`Static`).
    #[schemars(length(min = 1, max = 2))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub provisioning_modes: Vec<ProvisioningMode>,

    /// Namespaces, besides that of the claim the templates are evaluated
    /// for, in which `get_pvc(name, namespace)` may read claims; `"*"`
    /// allows every namespace. Not a template. Without it, templates may
    /// read only claims in the namespace of the claim being provisioned (and
    /// none in a phase that has no claim: static validation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(pattern(r"^(\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$")))]
    pub get_pvc_namespaces: Option<Vec<String>>,

    /// What volumes may be requested: `volumeModes`, `accessModes`,
    /// `minCapacity`, `maxCapacity` and an optional validation `podTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_validation: Option<TemplateTree>,

    /// How a volume is created (dynamic provisioning only): `handle`,
    /// `capacity` and an optional creation `podTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_creation: Option<TemplateTree>,

    /// How a volume is deleted (dynamic provisioning only): an optional
    /// deletion `podTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_deletion: Option<TemplateTree>,

    /// How a volume is made available on a node: the mandatory staging
    /// `podTemplate`, whose pod exposes the volume at `/pav/volume`.
    pub volume_staging: TemplateTree,

    /// How staging is undone on a node: an optional unstaging `podTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_unstaging: Option<TemplateTree>,

    /// pav: how a volume grows when its claim asks for more (the
    /// StorageClass needs `allowVolumeExpansion: true`): the new
    /// `capacity` and an optional expansion `podTemplate`. Without it,
    /// volumes do not grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_expansion: Option<TemplateTree>,

    /// pav: how a staged volume grows on its node, while pods use it: the
    /// mandatory node expansion `podTemplate`, run on each node where the
    /// volume is staged, with the volume at `/pav/volume`. Needs
    /// volumeExpansion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_node_expansion: Option<TemplateTree>,

    /// pav: how a snapshot of a volume is taken (for VolumeSnapshots of a
    /// VolumeSnapshotClass whose `driver` is this provisioner): `handle`,
    /// `size` and an optional snapshot creation `podTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_creation: Option<TemplateTree>,

    /// pav: how a snapshot is deleted: an optional snapshot deletion
    /// `podTemplate`. Needs snapshotCreation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_deletion: Option<TemplateTree>,

    /// pav: how much room for new volumes each topology segment (each
    /// node) has, published as CSIStorageCapacity so the scheduler places
    /// `WaitForFirstConsumer` claims where they fit: `availableCapacity`
    /// (and `maximumVolumeSize`) from templates, or an optional capacity
    /// `podTemplate` run on the segment's node that writes
    /// `/pav/capacity`; its answer is reused for `cacheFor` (default 5m).
    /// Dynamic provisioning only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_capacity: Option<TemplateTree>,

    /// pav: how a volume's mutable parameters change when its claim moves
    /// to another VolumeAttributesClass of this driver: an optional
    /// modification `podTemplate` and a `refusal` message that refuses them;
    /// on success the new parameters are recorded on the volume, and
    /// staging sees them as `mutableParams`. Without it, claims naming a
    /// VolumeAttributesClass are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_modification: Option<TemplateTree>,

    /// pav: how a staged volume's health is checked: a health check
    /// `podTemplate` run on each node where the volume is staged, with the
    /// volume at `/pav/volume`, every `every` (default 5m); it writes
    /// `/pav/condition`, which the kubelet reports (NodeGetVolumeStats).
    /// Without it, a staging pod that keeps running may write
    /// `/pav/condition` itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_health: Option<TemplateTree>,

    /// pav: how a volume is attached to a node before it is staged there
    /// (Kubernetes VolumeAttachments; the CSIDriver then has
    /// `attachRequired: true`): the mandatory attach `podTemplate`, whose
    /// `/pav/publish-context` (a map of strings) staging sees as
    /// `publishContext`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_attach: Option<TemplateTree>,

    /// pav: how a volume is detached from a node once no pod there uses
    /// it: an optional detach `podTemplate`. Needs volumeAttach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_detach: Option<TemplateTree>,

    /// pav: how snapshots of several volumes are taken together (for
    /// VolumeGroupSnapshots of a VolumeGroupSnapshotClass whose `driver`
    /// is this provisioner): `handle` and the mandatory group snapshot
    /// creation `podTemplate`, which writes `/pav/snapshots` (each source
    /// volume's handle mapped to the handle of its snapshot). The members
    /// are ordinary snapshots: restored as `source` of kind
    /// `VolumeSnapshot`, deleted by snapshotDeletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_snapshot_creation: Option<TemplateTree>,

    /// pav: how a group snapshot and its members are deleted: an optional
    /// group snapshot deletion `podTemplate`. Needs groupSnapshotCreation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_snapshot_deletion: Option<TemplateTree>,

    /// pav: what a new volume may be created from, besides nothing: a
    /// claim's `dataSource` of kind `VolumeSnapshot` (restore; needs
    /// snapshotCreation) or `PersistentVolumeClaim` (clone). The creation
    /// templates then see the source as `source`. Not a template. Without
    /// it, claims with a data source are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub data_sources: Option<Vec<DataSourceKind>>,

    /// pav: the kinds of volume the driver serves (its CSIDriver's
    /// `volumeLifecycleModes`): `Persistent` (claims and their
    /// PersistentVolumes), `Ephemeral` (CSI ephemeral inline volumes, in
    /// a pod's own `volumes`: made by the staging pod, removed by the
    /// unstaging pod, with the pod's `volumeAttributes` as `params`). Not
    /// a template. Without it, `Persistent` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub volume_lifecycle_modes: Option<Vec<LifecycleMode>>,
}

/// What a volume may be created from (a claim's `dataSource.kind`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DataSourceKind {
    /// A VolumeSnapshot of this provisioner: the volume is restored from it.
    VolumeSnapshot,
    /// A claim bound to a volume of this provisioner: the volume is cloned.
    PersistentVolumeClaim,
}

impl DataSourceKind {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DataSourceKind::VolumeSnapshot => "VolumeSnapshot",
            DataSourceKind::PersistentVolumeClaim => "PersistentVolumeClaim",
        }
    }
}

/// A kind of volume a driver serves (a CSIDriver's `volumeLifecycleModes`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum LifecycleMode {
    /// Claims and their PersistentVolumes.
    Persistent,
    /// CSI ephemeral inline volumes, declared in a pod and gone with it.
    Ephemeral,
}

/// Observed state of a PavProvisioner, written by `pav controller`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PavProvisionerStatus {
    /// `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions, `Ready` among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Number of PersistentVolumes of this provisioner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<i32>,
}

/// A status condition, as in `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, such as `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// One CamelCase word saying why.
    #[serde(default)]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// How volumes of a provisioner come to exist.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ProvisioningMode {
    /// Created on demand when a claim names a StorageClass of the provisioner.
    Dynamic,
    /// Declared by a user as a PersistentVolume naming the provisioner.
    Static,
}

/// Whether a volume is a file system or a raw block device.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum VolumeMode {
    /// A directory tree.
    Filesystem,
    /// A block special file.
    Block,
}

impl VolumeMode {
    /// All volume modes, in the guide's order.
    pub const ALL: [VolumeMode; 2] = [VolumeMode::Filesystem, VolumeMode::Block];

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeMode::Filesystem => "Filesystem",
            VolumeMode::Block => "Block",
        }
    }
}

/// How pods may use a volume.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AccessMode {
    /// Read-write by the pods of a single node.
    ReadWriteOnce,
    /// Read-only by pods on many nodes.
    ReadOnlyMany,
    /// Read-write by pods on many nodes.
    ReadWriteMany,
    /// Read-write by a single pod. Not in the PaV guide (it predates the
    /// mode): a provisioner serves it only when its
    /// `volumeValidation.accessModes` names it.
    ReadWriteOncePod,
}

impl AccessMode {
    /// The guide's three modes, in its order: the default of
    /// `volumeValidation.accessModes`.
    pub const DEFAULT: [AccessMode; 3] = [
        AccessMode::ReadWriteOnce,
        AccessMode::ReadOnlyMany,
        AccessMode::ReadWriteMany,
    ];

    /// Every mode a claim may ask for.
    pub const ALL: [AccessMode; 4] = [
        AccessMode::ReadWriteOnce,
        AccessMode::ReadOnlyMany,
        AccessMode::ReadWriteMany,
        AccessMode::ReadWriteOncePod,
    ];

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::ReadWriteOnce => "ReadWriteOnce",
            AccessMode::ReadOnlyMany => "ReadOnlyMany",
            AccessMode::ReadWriteMany => "ReadWriteMany",
            AccessMode::ReadWriteOncePod => "ReadWriteOncePod",
        }
    }
}

/// A YAML subtree whose string leaves are templates, kept exactly as written.
///
/// Its CRD schema accepts any value (`x-kubernetes-preserve-unknown-fields`),
/// because a template with `yaml = true` may stand where an object, a list or
/// a number is expected; its shape is checked by `pav check` and by the
/// controller, which report the exact field path.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(transparent)]
pub struct TemplateTree(pub serde_json::Value);

impl JsonSchema for TemplateTree {
    fn schema_name() -> Cow<'static, str> {
        "TemplateTree".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

impl PavProvisioner {
    /// The CustomResourceDefinition of PavProvisioner, generated from these
    /// types (what `pav crd` prints).
    ///
    /// ```
    /// let crd = pav_templates::PavProvisioner::definition();
    /// assert_eq!(crd.spec.names.kind, "PavProvisioner");
    /// assert_eq!(crd.spec.scope, "Cluster");
    /// ```
    pub fn definition()
    -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition
    {
        Self::crd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_is_cluster_scoped_and_carries_the_rules() {
        let crd = PavProvisioner::definition();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("pavprovisioners.pav.albertofaria.github.io")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let text = serde_json::to_string(&crd).unwrap();
        for needle in [
            "x-kubernetes-preserve-unknown-fields",
            r#""enum":["Dynamic","Static"]"#,
            r#""enum":["VolumeSnapshot","PersistentVolumeClaim"]"#,
            r#""x-kubernetes-list-type":"set""#,
            r#""minItems":1"#,
            "metadata.name must be a DNS label",
        ] {
            assert!(text.contains(needle), "CRD lacks {needle}: {text}");
        }
        let spec = &version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap()
            .properties
            .as_ref()
            .unwrap()["spec"];
        assert_eq!(
            spec.required.as_deref(),
            Some(&["provisioningModes".to_owned(), "volumeStaging".to_owned()][..])
        );
    }

    #[test]
    fn spec_round_trips_and_refuses_unknown_fields() {
        let yaml = "provisioningModes: [Dynamic]\nvolumeStaging:\n  podTemplate: {}\n";
        let spec: PavProvisionerSpec = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(spec.provisioning_modes, vec![ProvisioningMode::Dynamic]);
        assert!(
            serde_yaml::from_str::<PavProvisionerSpec>(
                "provisioningModes: [Dynamic]\nvolumeStaging: {}\nvolumeStagin: {}\n"
            )
            .is_err()
        );
    }
}
