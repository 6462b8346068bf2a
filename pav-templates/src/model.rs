//! The PavProvisioner custom resource, as users write it.
//!
//! Every field under `spec` except `provisioningModes` may be a template, and
//! a template with `{% set yaml = true %}` may stand in for a whole object or
//! list (`volumeModes: "{% set yaml = true %}[{{ params.mode }}]"`). The
//! stored spec therefore keeps each phase as a [`TemplateTree`]: the YAML as
//! written, in [`Phases`], whose fields, schema and descriptions come from
//! the phases' definitions in [`crate::phase`]. [`crate::CompiledProvisioner`]
//! checks its shape and compiles it; rendering a phase yields the typed
//! structs in [`crate::phase`].

use std::borrow::Cow;
use std::fmt;

use kube::core::crd::CustomResourceExt as _;
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap as _, Serializer};
use serde::{Deserialize, Serialize};

use crate::phase::Phase;
// Declared in `volume`, which the phases and their contexts use without
// depending on the spec (which depends on them); still reachable here.
pub use crate::volume::{AccessMode, DataSourceKind, VolumeMode};

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
#[derive(CustomResource, KubeSchema, Serialize, Clone, Debug, PartialEq)]
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
//
// Deserialize is written out below, as serde derives it for a struct with
// `deny_unknown_fields` and one field per phase: derived with `phases`
// flattened, it would buffer the whole spec (its errors then lose their
// location) and refuse an unknown field without naming the known ones.
// The schema keeps `deny_unknown_fields`.
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
// A volume staged one way cannot be unstaged the other (the node plugins'
// CSI capabilities differ), so stagingPer never changes, not even from
// absent to its default spelled out.
#[x_kube(
    validation = Rule::new("(has(self.stagingPer) ? self.stagingPer : 'Pod') == (has(oldSelf.stagingPer) ? oldSelf.stagingPer : 'Pod')")
        .message("spec.stagingPer cannot change once the provisioner exists: delete and recreate it (with no volumes left) to stage the other way")
)]
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

    /// The phases' sections (`volumeStaging`, `volumeCreation`, ...), each
    /// under its phase's field; which fields there are, which are required
    /// and what the CRD says of each come from [`crate::phase`]'s
    /// definitions.
    #[serde(flatten)]
    pub phases: Phases,

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

    /// pav: how many staging pods a volume has on a node: one per client
    /// pod (`Pod`, the PaV guide's staging, and the default), or one per
    /// node (`Node`), made when the node's first client pod of the volume
    /// starts and unstaged when its last one is gone, the others sharing
    /// it (the CSI driver then stages with NodeStageVolume). The staging
    /// templates see no client pod in either case; with `Node` their
    /// `readOnly` is true only for a volume every pod reads only
    /// (ReadOnlyMany), a pod asking read-only getting a read-only bind of
    /// it. Ephemeral inline volumes are staged per pod either way. Not a
    /// template, and fixed once the provisioner exists: volumes staged
    /// one way cannot be unstaged the other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging_per: Option<StagingPer>,

    /// pav: service-account tokens of each client pod that its staging pod
    /// receives, one per audience (its CSIDriver's `tokenRequests`, with
    /// `serviceAccountTokenInSecrets` and `requiresRepublish`): kubelet
    /// hands them to the node plugin at each publish, which writes each
    /// to the staging pod's `/pav/tokens/<audience>` ([`token_file_name`])
    /// before the pod starts and renews it while the volume is published.
    /// Needs `stagingPer: Pod`. Not a template. Without it, no tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["audience"]))]
    pub token_requests: Option<Vec<TokenRequest>>,

    /// pav: the kinds of object a claim's `dataSourceRef` may name for
    /// `volumePopulation` to fill its volume from (a volume populator):
    /// each an `apiGroup` and a `kind`, of custom resources (the API
    /// server accepts no `dataSourceRef` of the core group but a claim).
    /// The driver provisions such a claim empty, fills it with the
    /// population pod and only then binds it. Needs `volumePopulation`,
    /// which needs it. Not a template. Without it, no claim is populated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub populated_from: Option<Vec<PopulatedKind>>,
}

/// A kind of object volumes are filled from
/// ([`PavProvisionerSpec::populated_from`]), as a claim's `dataSourceRef`
/// names it.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PopulatedKind {
    /// The API group (`example.com`); `pav check` refuses the core group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The kind (`VolumeFiles`).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

/// A service-account token the staging pods receive
/// ([`PavProvisionerSpec::token_requests`]), as in a CSIDriver's
/// `tokenRequests`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenRequest {
    /// The token's audience: who will accept it (the storage's identity
    /// service, e.g. `sts.amazonaws.com`).
    #[schemars(length(min = 1, max = 253))]
    pub audience: String,
    /// How long a token is valid, in seconds (at least 600); kubelet's
    /// default (an hour, or the service account's maximum) without it.
    /// `pav check` holds the bounds: a schema's `minimum` would be a float
    /// in the CRD, which the Helm chart's copy spells as an integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
}

/// The file name under a staging pod's `/pav/tokens/` of the token for
/// `audience`: the audience with each byte other than an ASCII letter,
/// digit, `-`, `_` or `.` (a `.` only after the first byte) replaced by
/// `_`, so that an audience that is a URL is still one file name; the
/// empty audience (the API server's own, in a CSIDriver) is `_`.
///
/// ```
/// use pav_templates::token_file_name;
/// assert_eq!(token_file_name("sts.amazonaws.com"), "sts.amazonaws.com");
/// assert_eq!(token_file_name("https://sts.example.com/a"), "https___sts.example.com_a");
/// assert_eq!(token_file_name(".."), "_.");
/// ```
pub fn token_file_name(audience: &str) -> String {
    if audience.is_empty() {
        return "_".to_owned();
    }
    (audience.bytes().enumerate())
        .map(|(i, b)| match b {
            b'.' if i > 0 => '.',
            b'-' | b'_' => b as char,
            b if b.is_ascii_alphanumeric() => b as char,
            _ => '_',
        })
        .collect()
}

impl PavProvisionerSpec {
    /// Whether the spec has `phase`'s section.
    pub fn has(&self, phase: Phase) -> bool {
        self.phases.contains(phase)
    }
}

/// The fields of a spec, in the order [`PavProvisionerSpec`] writes them:
/// those an unknown field's error lists, and the only ones `pav check`
/// accepts.
pub(crate) const SPEC_FIELDS: &[&str] = &{
    let mut fields = [""; Phase::ALL.len() + 7];
    fields[0] = "provisioningModes";
    fields[1] = "getPvcNamespaces";
    let mut i = 0;
    while i < Phase::ALL.len() {
        fields[2 + i] = Phase::ALL[i].field();
        i += 1;
    }
    fields[Phase::ALL.len() + 2] = "dataSources";
    fields[Phase::ALL.len() + 3] = "volumeLifecycleModes";
    fields[Phase::ALL.len() + 4] = "stagingPer";
    fields[Phase::ALL.len() + 5] = "tokenRequests";
    fields[Phase::ALL.len() + 6] = "populatedFrom";
    fields
};

/// A key of a spec.
enum SpecKey {
    ProvisioningModes,
    GetPvcNamespaces,
    Phase(Phase),
    DataSources,
    VolumeLifecycleModes,
    StagingPer,
    TokenRequests,
    PopulatedFrom,
}

impl<'de> Deserialize<'de> for SpecKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl Visitor<'_> for KeyVisitor {
            type Value = SpecKey;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("field identifier")
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<SpecKey, E> {
                Ok(match key {
                    "provisioningModes" => SpecKey::ProvisioningModes,
                    "getPvcNamespaces" => SpecKey::GetPvcNamespaces,
                    "dataSources" => SpecKey::DataSources,
                    "volumeLifecycleModes" => SpecKey::VolumeLifecycleModes,
                    "stagingPer" => SpecKey::StagingPer,
                    "tokenRequests" => SpecKey::TokenRequests,
                    "populatedFrom" => SpecKey::PopulatedFrom,
                    _ => match Phase::ALL.into_iter().find(|phase| phase.field() == key) {
                        Some(phase) => SpecKey::Phase(phase),
                        None => return Err(E::unknown_field(key, SPEC_FIELDS)),
                    },
                })
            }
        }

        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// As serde derives it for the struct with `deny_unknown_fields`: an
/// unknown or repeated field and a missing required one are refused, each
/// value is read where it stands (its errors keep their location), and a
/// `null` optional section is absent.
impl<'de> Deserialize<'de> for PavProvisionerSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecVisitor;

        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = PavProvisionerSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("struct PavProvisionerSpec")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                /// Reads the value of `field`, which must not be seen yet.
                fn read<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
                    map: &mut A,
                    slot: &mut Option<T>,
                    field: &'static str,
                ) -> Result<(), A::Error> {
                    if slot.is_some() {
                        return Err(de::Error::duplicate_field(field));
                    }
                    *slot = Some(map.next_value()?);
                    Ok(())
                }

                let mut provisioning_modes: Option<Vec<ProvisioningMode>> = None;
                let mut get_pvc_namespaces: Option<Option<Vec<String>>> = None;
                let mut data_sources: Option<Option<Vec<DataSourceKind>>> = None;
                let mut volume_lifecycle_modes: Option<Option<Vec<LifecycleMode>>> = None;
                let mut staging_per: Option<Option<StagingPer>> = None;
                let mut token_requests: Option<Option<Vec<TokenRequest>>> = None;
                let mut populated_from: Option<Option<Vec<PopulatedKind>>> = None;
                let mut phases = Phases::default();
                let mut seen = [false; Phase::ALL.len()];
                while let Some(key) = map.next_key()? {
                    match key {
                        SpecKey::ProvisioningModes => {
                            read(&mut map, &mut provisioning_modes, "provisioningModes")?
                        }
                        SpecKey::GetPvcNamespaces => {
                            read(&mut map, &mut get_pvc_namespaces, "getPvcNamespaces")?
                        }
                        SpecKey::DataSources => read(&mut map, &mut data_sources, "dataSources")?,
                        SpecKey::VolumeLifecycleModes => read(
                            &mut map,
                            &mut volume_lifecycle_modes,
                            "volumeLifecycleModes",
                        )?,
                        SpecKey::StagingPer => read(&mut map, &mut staging_per, "stagingPer")?,
                        SpecKey::TokenRequests => {
                            read(&mut map, &mut token_requests, "tokenRequests")?
                        }
                        SpecKey::PopulatedFrom => {
                            read(&mut map, &mut populated_from, "populatedFrom")?
                        }
                        SpecKey::Phase(phase) => {
                            if std::mem::replace(&mut seen[phase.index()], true) {
                                return Err(de::Error::duplicate_field(phase.field()));
                            }
                            // A required section may be null (a template
                            // tree as written); an optional one is then
                            // absent.
                            let section = if phase.required() {
                                Some(map.next_value::<TemplateTree>()?)
                            } else {
                                map.next_value::<Option<TemplateTree>>()?
                            };
                            if let Some(section) = section {
                                phases.insert(phase, section);
                            }
                        }
                    }
                }
                let provisioning_modes = provisioning_modes
                    .ok_or_else(|| de::Error::missing_field("provisioningModes"))?;
                if let Some(missing) = Phase::ALL
                    .into_iter()
                    .find(|phase| phase.required() && !seen[phase.index()])
                {
                    return Err(de::Error::missing_field(missing.field()));
                }
                Ok(PavProvisionerSpec {
                    provisioning_modes,
                    get_pvc_namespaces: get_pvc_namespaces.flatten(),
                    phases,
                    data_sources: data_sources.flatten(),
                    volume_lifecycle_modes: volume_lifecycle_modes.flatten(),
                    staging_per: staging_per.flatten(),
                    token_requests: token_requests.flatten(),
                    populated_from: populated_from.flatten(),
                })
            }
        }

        deserializer.deserialize_struct("PavProvisionerSpec", SPEC_FIELDS, SpecVisitor)
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

/// How many staging pods a volume has on a node
/// ([`PavProvisionerSpec::staging_per`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum StagingPer {
    /// One per client pod, as the PaV guide stages.
    #[default]
    Pod,
    /// One per node, shared by the node's client pods of the volume.
    Node,
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

/// The phases' sections of a spec, each a [`TemplateTree`] kept as written,
/// keyed by [`Phase`]. In the spec each stands under its phase's field
/// ([`Phase::field`], `volumeStaging`), in [`Phase::ALL`]'s order, absent
/// sections left out; its CRD schema is each field with the description
/// of the phase's [`Definition`](crate::phase::Definition), the required
/// ones (staging) required.
///
/// ```
/// use pav_templates::{Phase, PavProvisionerSpec};
/// let spec: PavProvisionerSpec = serde_yaml::from_str(
///     "provisioningModes: [Dynamic]\nvolumeStaging: {podTemplate: {}}\nvolumeAttach: {}\n",
/// )
/// .unwrap();
/// assert!(spec.has(Phase::Attach));
/// assert!(spec.phases.get(Phase::Expansion).is_none());
/// assert_eq!(spec.phases.get(Phase::Staging).unwrap().0["podTemplate"], serde_json::json!({}));
/// ```
#[derive(Clone, Default, PartialEq)]
pub struct Phases([Option<TemplateTree>; Phase::ALL.len()]);

impl Phases {
    /// `phase`'s section, if the spec has it.
    pub fn get(&self, phase: Phase) -> Option<&TemplateTree> {
        self.0[phase.index()].as_ref()
    }

    /// Whether the spec has `phase`'s section.
    pub fn contains(&self, phase: Phase) -> bool {
        self.0[phase.index()].is_some()
    }

    /// Sets `phase`'s section, returning the one it replaces.
    pub fn insert(&mut self, phase: Phase, section: TemplateTree) -> Option<TemplateTree> {
        self.0[phase.index()].replace(section)
    }

    /// Takes `phase`'s section out.
    pub fn remove(&mut self, phase: Phase) -> Option<TemplateTree> {
        self.0[phase.index()].take()
    }

    /// The sections there are, in [`Phase::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (Phase, &TemplateTree)> {
        Phase::ALL
            .into_iter()
            .filter_map(|phase| Some((phase, self.get(phase)?)))
    }
}

impl fmt::Debug for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(phase, section)| (phase.field(), section)))
            .finish()
    }
}

impl Serialize for Phases {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.iter().count()))?;
        for (phase, section) in self.iter() {
            map.serialize_entry(phase.field(), section)?;
        }
        map.end()
    }
}

/// Each phase's field, as the derived schema of a struct with one
/// documented field per phase would have it: a [`TemplateTree`] (an
/// optional one for a section not required) described by the phase's
/// definition.
impl JsonSchema for Phases {
    fn schema_name() -> Cow<'static, str> {
        "Phases".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for phase in Phase::ALL {
            let definition = phase.definition();
            let mut section = if definition.required {
                required.push(serde_json::Value::from(definition.field));
                generator.subschema_for::<TemplateTree>()
            } else {
                generator.subschema_for::<Option<TemplateTree>>()
            };
            section.insert("description".into(), definition.description.into());
            properties.insert(definition.field.into(), section.into());
        }
        json_schema!({
            "type": "object",
            "properties": properties,
            "required": required,
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
        assert_eq!(
            serde_yaml::to_string(&spec).unwrap(),
            "provisioningModes:\n- Dynamic\nvolumeStaging:\n  podTemplate: {}\n"
        );
        let err = serde_yaml::from_str::<PavProvisionerSpec>(
            "provisioningModes: [Dynamic]\nvolumeStaging: {}\nvolumeStagin: {}\n",
        )
        .unwrap_err()
        .to_string();
        // serde's own message, naming every field, and where the key is.
        assert!(
            err.starts_with(
                "unknown field `volumeStagin`, expected one of `provisioningModes`, \
                 `getPvcNamespaces`, `volumeValidation`, `volumeCreation`,"
            ),
            "{err}"
        );
        assert!(
            err.ends_with(
                "`dataSources`, `volumeLifecycleModes`, `stagingPer`, `tokenRequests`, `populatedFrom` at line 3 column 1"
            ),
            "{err}"
        );
        let err = serde_json::from_str::<PavProvisionerSpec>(
            r#"{"provisioningModes": ["Dynamic"], "volumeStaging": {}, "spex": 1}"#,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("unknown field `spex`"), "{err}");
    }

    /// The phases' sections read and write as the struct with a field per
    /// phase did: required staging, each field once, a null optional
    /// section absent, written in the phases' order without the absent.
    #[test]
    fn phase_sections_read_and_write_as_fields() {
        let error = |yaml: &str| {
            serde_yaml::from_str::<PavProvisionerSpec>(yaml)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            error("volumeStaging: {}\n"),
            "missing field `provisioningModes`"
        );
        assert_eq!(
            error("provisioningModes: [Dynamic]\nvolumeHealth: {}\n"),
            "missing field `volumeStaging`"
        );
        assert_eq!(
            error(
                "provisioningModes: [Dynamic]\nvolumeStaging: {}\nvolumeHealth: null\nvolumeHealth: {}\n"
            ),
            "duplicate field `volumeHealth`"
        );
        assert_eq!(
            error("provisioningModes: [Dynamic]\nvolumeStaging: {}\ndataSources: 5\n"),
            "dataSources: invalid type: integer `5`, expected a sequence at line 3 column 14"
        );

        let spec: PavProvisionerSpec = serde_yaml::from_str(
            "volumeLifecycleModes: [Ephemeral]\n\
             groupSnapshotDeletion: {z: 1}\n\
             volumeHealth: null\n\
             volumeStaging: null\n\
             provisioningModes: [Static]\n\
             volumeCreation: {}\n",
        )
        .unwrap();
        assert!(spec.has(Phase::Creation) && spec.has(Phase::GroupSnapshotDeletion));
        assert!(!spec.has(Phase::Health));
        assert_eq!(
            spec.phases.get(Phase::Staging),
            Some(&TemplateTree(serde_json::Value::Null))
        );
        let phases: Vec<Phase> = spec.phases.iter().map(|(phase, _)| phase).collect();
        assert_eq!(
            phases,
            [
                Phase::Creation,
                Phase::Staging,
                Phase::GroupSnapshotDeletion
            ]
        );
        assert_eq!(
            serde_json::to_string(&spec).unwrap(),
            r#"{"provisioningModes":["Static"],"volumeCreation":{},"volumeStaging":null,"groupSnapshotDeletion":{"z":1},"volumeLifecycleModes":["Ephemeral"]}"#
        );
        let back: PavProvisionerSpec =
            serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);

        let mut spec = spec;
        assert!(
            spec.phases
                .insert(Phase::Attach, TemplateTree(serde_json::json!({})))
                .is_none()
        );
        assert!(spec.phases.remove(Phase::Creation).is_some());
        assert!(spec.has(Phase::Attach) && !spec.has(Phase::Creation));
    }

    /// Each phase's field in the CRD is its definition's: the description,
    /// any value allowed, required only if the phase is.
    #[test]
    fn crd_describes_each_phase_from_its_definition() {
        let crd = PavProvisioner::definition();
        let spec = &crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap()
            .properties
            .as_ref()
            .unwrap()["spec"];
        let properties = spec.properties.as_ref().unwrap();
        let required = spec.required.as_deref().unwrap();
        for phase in Phase::ALL {
            let definition = phase.definition();
            let field = &properties[definition.field];
            assert_eq!(field.description.as_deref(), Some(definition.description));
            assert_eq!(field.x_kubernetes_preserve_unknown_fields, Some(true));
            assert_eq!(
                required.iter().any(|r| r == definition.field),
                definition.required,
                "{phase}"
            );
        }
        assert_eq!(properties.len(), SPEC_FIELDS.len());
    }
}
