//! The variables each phase's templates see, built from Kubernetes objects.
//!
//! Objects are serialised as the API server returns them (camelCase, with
//! `apiVersion` and `kind`), so `pvc.metadata.annotations['x']` and
//! `node.metadata.labels` read as in `kubectl get -o yaml`.
//!
//! | phase | context type | variables |
//! |---|---|---|
//! | validation (dynamic) | [`ValidationContext::dynamic`] | `requestedVolumeMode`, `requestedAccessModes`, `requestedMinCapacity`, `requestedMaxCapacity`, `params`, `sc`, `pvc` |
//! | validation (static) | [`ValidationContext::static_pv`] | `requestedVolumeMode`, `requestedAccessModes`, `requestedMinCapacity`, `requestedMaxCapacity`, `params`, `handle`, `pv` |
//! | creation, deletion | [`CreationContext::new`] | the dynamic validation variables and `defaultHandle` |
//! | staging, unstaging | [`StagingContext::new`] (staging: then [`StagingContext::attached_with`]), or [`StagingContext::ephemeral`] | `volumeMode`, `accessModes`, `capacity`, `params`, `mutableParams`, `handle`, `readOnly`, `publishContext`, `ephemeral`, `pvc`, `pv`, `node` |
//! | expansion | [`ExpansionContext::new`] | `handle`, `capacity` (now), `requestedMinCapacity`, `requestedMaxCapacity`, `volumeMode`, `params`, `pv`, `pvc` (none without a claim) |
//! | node expansion | [`StagingContext::new`] then [`StagingContext::expanded_to`] | the staging variables, `capacity` being the new one |
//! | health, attach, detach | [`StagingContext::new`] | the staging variables |
//! | snapshot creation | [`SnapshotContext::creation`] | `snapshotName`, `defaultHandle`, `params` (the VolumeSnapshotClass's), `sourceHandle`, `sourceCapacity`, `pv`, `pvc` (none without a claim) |
//! | snapshot deletion | [`SnapshotContext::deletion`] | `snapshotHandle`, `sourceHandle` (none when unknown) |
//! | group snapshot creation | [`GroupSnapshotContext::creation`] | `groupSnapshotName`, `defaultHandle`, `params` (the VolumeGroupSnapshotClass's), `sourceHandles` (the members' volumes, in the CO's order), `sources` (the same, each with `handle`, `capacity`, `pv`, `pvc`) |
//! | group snapshot deletion | [`GroupSnapshotContext::deletion`] | `groupSnapshotHandle`, `snapshotHandles`, `snapshots` (each with `handle` and `sourceHandle`, none when unknown) |
//! | storage capacity | [`CapacityContext::new`] | `topology` (the segment's labels, none for all the storage), `nodeName` (the segment's node, none without one), `params` (the StorageClass's) |
//! | volume modification | [`ModificationContext::new`] | `handle`, `capacity`, `volumeMode`, `params`, `mutableParams` (after the change), `previousMutableParams`, `requestedMutableParams` (the class's), `pv`, `pvc` (none without a claim) |
//! | volume population | [`PopulationContext::new`] | `handle`, `capacity`, `volumeMode`, `params`, `pv`, `pvc` (the claim being filled), `dataSource` (the object its `dataSourceRef` names, as the API server returned it) |
//!
//! The creation and deletion contexts and the staging ones also have
//! `mutableParams`: the VolumeAttributesClass parameters the volume is
//! created with, or has as recorded ([`recorded_mutable_parameters`]).
//!
//! The creation and deletion contexts also have `selectedNode` (the node
//! the scheduler picked for a `WaitForFirstConsumer` claim, none
//! otherwise), `topologyNodes` (the nodes the volume should be accessible
//! from, most preferred first: see [`CreationContext::with_topology_nodes`]),
//! `source` (none, or what the volume is created from: see
//! [`Source`]); the deletion context of an existing volume has its `handle`
//! (undefined when creating, or undoing a failed creation).
//!
//! Every context also has the function `get_pvc(name, namespace)`, answered
//! by the [`PvcLookup`] given with [`with_pvc_lookup`](CreationContext::with_pvc_lookup).
//! It reads only claims in the namespace of the context's own claim (`pvc`)
//! and in the namespaces the provisioner lists in `spec.getPvcNamespaces`
//! (`"*"`: any); the static validation context has no claim, so there only
//! listed namespaces may be read. A refused read never reaches the lookup.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use minijinja::value::Value;
use minijinja::{Error as JinjaError, ErrorKind, State};
use serde::Serialize;

use crate::error::{Error, Location, Result};
use crate::quantity::{Rounding, parse_bytes};
use crate::volume::DataSourceKind;

/// The claim annotation in which the scheduler records the node it picked
/// for a `WaitForFirstConsumer` claim.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";

/// Answers the templates' `get_pvc(name, namespace)`.
///
/// The `pav` binary reads through the Kubernetes API; tests use
/// [`PvcMap`]. Template evaluation is synchronous, so an implementation
/// backed by async I/O should block (for example with
/// `tokio::task::block_in_place`) or prefetch.
pub trait PvcLookup: Send + Sync {
    /// The claim `namespace/name`; `Ok(None)` when it does not exist.
    fn get_pvc(
        &self,
        name: &str,
        namespace: &str,
    ) -> std::result::Result<Option<PersistentVolumeClaim>, String>;
}

/// An in-memory [`PvcLookup`], for tests and `pav render`.
///
/// ```
/// use pav_templates::context::{PvcLookup, PvcMap};
/// use k8s_openapi::api::core::v1::PersistentVolumeClaim;
/// let mut pvc = PersistentVolumeClaim::default();
/// pvc.metadata.name = Some("data".into());
/// pvc.metadata.namespace = Some("default".into());
/// let map = PvcMap::from_iter([pvc]);
/// assert!(map.get_pvc("data", "default").unwrap().is_some());
/// assert!(map.get_pvc("data", "other").unwrap().is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct PvcMap(BTreeMap<(String, String), PersistentVolumeClaim>);

impl FromIterator<PersistentVolumeClaim> for PvcMap {
    fn from_iter<I: IntoIterator<Item = PersistentVolumeClaim>>(iter: I) -> Self {
        PvcMap(
            iter.into_iter()
                .map(|pvc| {
                    let key = (
                        pvc.metadata.namespace.clone().unwrap_or_default(),
                        pvc.metadata.name.clone().unwrap_or_default(),
                    );
                    (key, pvc)
                })
                .collect(),
        )
    }
}

impl PvcLookup for PvcMap {
    fn get_pvc(
        &self,
        name: &str,
        namespace: &str,
    ) -> std::result::Result<Option<PersistentVolumeClaim>, String> {
        Ok(self
            .0
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned())
    }
}

/// Name of the environment global holding `spec.getPvcNamespaces` (a list
/// of strings). Not an identifier, so no template can assign or shadow it;
/// [`crate::CompiledProvisioner`] sets it, and without it `get_pvc` reads
/// only the claim's own namespace.
pub(crate) const GET_PVC_NAMESPACES_GLOBAL: &str = "pav:getPvcNamespaces";

/// Variables shared by every context type.
#[derive(Clone)]
struct Vars {
    entries: Vec<(&'static str, Value)>,
    lookup: Option<Arc<dyn PvcLookup>>,
    /// Namespace of the claim the context is built from (`pvc`), if any.
    claim_namespace: Option<Arc<str>>,
}

impl Vars {
    fn new(claim: Option<&PersistentVolumeClaim>) -> Self {
        Vars {
            entries: Vec::with_capacity(10),
            lookup: None,
            claim_namespace: claim.and_then(|pvc| pvc.metadata.namespace.as_deref().map(Arc::from)),
        }
    }

    fn set(&mut self, name: &'static str, value: Value) {
        self.entries.push((name, value));
    }

    /// Sets `name`, replacing the value it had.
    fn replace(&mut self, name: &'static str, value: Value) {
        match self.entries.iter_mut().find(|(k, _)| *k == name) {
            Some(entry) => entry.1 = value,
            None => self.set(name, value),
        }
    }

    fn to_value(&self) -> Value {
        let lookup = self.lookup.clone();
        let claim_namespace = self.claim_namespace.clone();
        let get_pvc = Value::from_function(
            move |state: &State<'_, '_>, name: Value, namespace: Value| {
                let name = string_argument("name", &name)?;
                let namespace = string_argument("namespace", &namespace)?;
                check_namespace(state, claim_namespace.as_deref(), name, namespace)?;
                get_pvc(lookup.as_deref(), name, namespace)
            },
        );
        Value::from_pairs(
            self.entries
                .iter()
                .cloned()
                .chain(std::iter::once(("get_pvc", get_pvc))),
        )
    }
}

fn string_argument<'v>(what: &str, value: &'v Value) -> std::result::Result<&'v str, JinjaError> {
    value.as_str().ok_or_else(|| {
        JinjaError::new(
            ErrorKind::InvalidOperation,
            format!(
                "get_pvc(name, namespace): {what} must be a string, not {}",
                crate::engine::kind_name(value.kind())
            ),
        )
    })
}

/// Refuses a `get_pvc` read outside the claim's namespace unless
/// `spec.getPvcNamespaces` lists the namespace (or `"*"`).
fn check_namespace(
    state: &State<'_, '_>,
    claim_namespace: Option<&str>,
    name: &str,
    namespace: &str,
) -> std::result::Result<(), JinjaError> {
    if claim_namespace == Some(namespace) {
        return Ok(());
    }
    let listed = state
        .lookup(GET_PVC_NAMESPACES_GLOBAL)
        .and_then(|list| list.try_iter().ok())
        .into_iter()
        .flatten()
        .any(|item| matches!(item.as_str(), Some(listed) if listed == "*" || listed == namespace));
    if listed {
        return Ok(());
    }
    let why = match claim_namespace {
        Some(own) => format!(
            "namespace {namespace:?} is not the claim's namespace {own:?} and is not listed in spec.getPvcNamespaces"
        ),
        None => format!(
            "this phase has no claim, and namespace {namespace:?} is not listed in spec.getPvcNamespaces"
        ),
    };
    Err(JinjaError::new(
        ErrorKind::InvalidOperation,
        format!("get_pvc(): may not read PersistentVolumeClaim {namespace}/{name}: {why}"),
    ))
}

fn get_pvc(
    lookup: Option<&dyn PvcLookup>,
    name: &str,
    namespace: &str,
) -> std::result::Result<Value, JinjaError> {
    let lookup = lookup.ok_or_else(|| {
        JinjaError::new(
            ErrorKind::InvalidOperation,
            "get_pvc() has no claim lookup in this evaluation",
        )
    })?;
    match lookup.get_pvc(name, namespace) {
        Ok(Some(pvc)) => Ok(object_value(&pvc)),
        Ok(None) => Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("get_pvc(): PersistentVolumeClaim {namespace}/{name} does not exist"),
        )),
        Err(message) => Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("get_pvc(): cannot read PersistentVolumeClaim {namespace}/{name}: {message}"),
        )),
    }
}

/// An object as the API server returns it: k8s-openapi writes `apiVersion`
/// and `kind` itself, and camelCase names, so serialising straight into a
/// template value needs no intermediate JSON tree.
fn object_value<K: k8s_openapi::Resource + Serialize>(object: &K) -> Value {
    to_value(object)
}

/// Any serialisable value as a template value.
pub(crate) fn to_value<T: Serialize>(value: T) -> Value {
    Value::from(minijinja::value::Serde(value))
}

fn describe<
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
>(
    object: &K,
) -> String {
    let meta = object.metadata();
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(name)) => format!("{} {ns}/{name}", K::KIND),
        (None, Some(name)) => format!("{} {name}", K::KIND),
        _ => format!("{} <unnamed>", K::KIND),
    }
}

fn object_error(object: String, path: &str, message: impl Into<String>) -> Error {
    Error::Schema {
        at: Location {
            provisioner: object,
            path: path.to_owned(),
            line: None,
        },
        message: message.into(),
    }
}

fn quantity(object: &str, path: &str, text: Option<&str>, rounding: Rounding) -> Result<u64> {
    let text = text.ok_or_else(|| object_error(object.to_owned(), path, "is required"))?;
    parse_bytes(text, rounding)
        .map_err(|err| object_error(object.to_owned(), path, err.to_string()))
}

fn string_map(map: Option<&BTreeMap<String, String>>) -> Value {
    Value::from_pairs(
        map.into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    )
}

/// The capacity a claim asks for: at least its request, at most its limit
/// when it has one, in bytes.
pub fn requested_capacity(pvc: &PersistentVolumeClaim) -> Result<(u64, Option<u64>)> {
    let requested = Requested::from_pvc(pvc)?;
    Ok((requested.min_capacity, requested.max_capacity))
}

struct Requested {
    volume_mode: String,
    access_modes: Vec<String>,
    min_capacity: u64,
    max_capacity: Option<u64>,
}

impl Requested {
    fn from_pvc(pvc: &PersistentVolumeClaim) -> Result<Self> {
        let object = describe(pvc);
        let spec = pvc
            .spec
            .as_ref()
            .ok_or_else(|| object_error(object.clone(), "spec", "is required"))?;
        let resources = spec.resources.as_ref();
        fn storage(
            map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
        ) -> Option<&str> {
            map.and_then(|m| m.get("storage")).map(|q| q.0.as_str())
        }
        let min_capacity = quantity(
            &object,
            "spec.resources.requests.storage",
            storage(resources.and_then(|r| r.requests.as_ref())),
            Rounding::Up,
        )?;
        let max_capacity = match storage(resources.and_then(|r| r.limits.as_ref())) {
            None => None,
            Some(text) => Some(quantity(
                &object,
                "spec.resources.limits.storage",
                Some(text),
                Rounding::Up,
            )?),
        };
        Ok(Requested {
            volume_mode: spec
                .volume_mode
                .clone()
                .unwrap_or_else(|| "Filesystem".to_owned()),
            access_modes: spec.access_modes.clone().unwrap_or_default(),
            min_capacity,
            max_capacity,
        })
    }

    fn set_into(&self, vars: &mut Vars) {
        vars.set(
            "requestedVolumeMode",
            Value::from(self.volume_mode.as_str()),
        );
        vars.set("requestedAccessModes", to_value(&self.access_modes));
        vars.set("requestedMinCapacity", Value::from(self.min_capacity));
        vars.set(
            "requestedMaxCapacity",
            self.max_capacity.map_or(Value::from(()), Value::from),
        );
    }
}

/// A PersistentVolume's `spec.capacity.storage`, in bytes.
pub fn pv_capacity(pv: &PersistentVolume) -> Result<u64> {
    let object = describe(pv);
    let text = pv
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.as_str());
    quantity(&object, "spec.capacity.storage", text, Rounding::Up)
}

fn pv_csi(pv: &PersistentVolume) -> Result<&k8s_openapi::api::core::v1::CSIPersistentVolumeSource> {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .ok_or_else(|| object_error(describe(pv), "spec.csi", "is required for a PaV volume"))
}

/// The variables a phase's templates see: what every context type is, so
/// that [`CompiledProvisioner::render`](crate::CompiledProvisioner::render)
/// takes the one its phase's [`Section`](crate::phase::Section) names.
pub trait PhaseContext {
    /// The variables as a minijinja value (a map).
    fn value(&self) -> &Value;
}

macro_rules! context_common {
    ($ty:ident) => {
        impl $crate::context::PhaseContext for $ty {
            fn value(&self) -> &Value {
                &self.value
            }
        }

        impl $ty {
            /// Makes `get_pvc(name, namespace)` answer from `lookup`.
            pub fn with_pvc_lookup(mut self, lookup: Arc<dyn PvcLookup>) -> Self {
                self.vars.lookup = Some(lookup);
                self.value = self.vars.to_value();
                self
            }

            /// The variables as a minijinja value (a map), for inspection.
            pub fn value(&self) -> &Value {
                &self.value
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field(
                        "variables",
                        &self
                            .vars
                            .entries
                            .iter()
                            .map(|(k, _)| *k)
                            .collect::<Vec<_>>(),
                    )
                    .field("pvc_lookup", &self.vars.lookup.is_some())
                    .finish()
            }
        }
    };
}

/// Context of `spec.volumeValidation`.
#[derive(Clone)]
pub struct ValidationContext {
    vars: Vars,
    value: Value,
}

context_common!(ValidationContext);

impl ValidationContext {
    /// For dynamic provisioning: the claim being provisioned and its
    /// StorageClass.
    ///
    /// Fails when the claim has no `spec.resources.requests.storage`, or a
    /// quantity that is not one.
    pub fn dynamic(pvc: &PersistentVolumeClaim, sc: &StorageClass) -> Result<Self> {
        let requested = Requested::from_pvc(pvc)?;
        let mut vars = Vars::new(Some(pvc));
        requested.set_into(&mut vars);
        vars.set("params", string_map(sc.parameters.as_ref()));
        vars.set("sc", object_value(sc));
        vars.set("pvc", object_value(pvc));
        Ok(Self::from_vars(vars))
    }

    /// For static provisioning: the PersistentVolume a user created.
    pub fn static_pv(pv: &PersistentVolume) -> Result<Self> {
        let capacity = pv_capacity(pv)?;
        let csi = pv_csi(pv)?;
        let spec = pv.spec.as_ref();
        let mut vars = Vars::new(None);
        Requested {
            volume_mode: spec
                .and_then(|s| s.volume_mode.clone())
                .unwrap_or_else(|| "Filesystem".to_owned()),
            access_modes: spec
                .and_then(|s| s.access_modes.clone())
                .unwrap_or_default(),
            min_capacity: capacity,
            max_capacity: Some(capacity),
        }
        .set_into(&mut vars);
        vars.set("params", string_map(csi.volume_attributes.as_ref()));
        vars.set("handle", Value::from(csi.volume_handle.as_str()));
        vars.set("pv", object_value(pv));
        Ok(Self::from_vars(vars))
    }

    fn from_vars(vars: Vars) -> Self {
        let value = vars.to_value();
        ValidationContext { vars, value }
    }
}

/// Context of `spec.volumeCreation` and `spec.volumeDeletion`: the dynamic
/// validation context plus `defaultHandle` (`pvc-<claim uid>`).
#[derive(Clone)]
pub struct CreationContext {
    vars: Vars,
    value: Value,
    default_handle: String,
}

context_common!(CreationContext);

impl CreationContext {
    /// Builds the context from the claim and its StorageClass.
    pub fn new(pvc: &PersistentVolumeClaim, sc: &StorageClass) -> Result<Self> {
        let uid = pvc.metadata.uid.as_deref().ok_or_else(|| {
            object_error(
                describe(pvc),
                "metadata.uid",
                "is required to name the volume",
            )
        })?;
        let default_handle = format!("pvc-{uid}");
        let mut vars = ValidationContext::dynamic(pvc, sc)?.vars;
        vars.set("defaultHandle", Value::from(default_handle.as_str()));
        let selected_node = pvc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE_ANNOTATION));
        vars.set(
            "selectedNode",
            selected_node.map_or(Value::from(()), |n| Value::from(n.as_str())),
        );
        vars.set("source", Value::from(()));
        vars.set("topologyNodes", Value::from(Vec::<Value>::new()));
        vars.set("mutableParams", string_map(None));
        let value = vars.to_value();
        Ok(CreationContext {
            vars,
            value,
            default_handle,
        })
    }

    /// `pvc-<claim uid>`: the handle of a volume whose creation names none.
    pub fn default_handle(&self) -> &str {
        &self.default_handle
    }

    /// For the deletion of an existing volume: its handle (the templates'
    /// `handle`, undefined otherwise, so `handle | default(defaultHandle)`
    /// reads either).
    pub fn with_handle(mut self, handle: &str) -> Self {
        self.vars.replace("handle", Value::from(handle));
        self.value = self.vars.to_value();
        self
    }

    /// The volume is created from `source` (the templates' `source`).
    pub fn with_source(mut self, source: &Source) -> Self {
        self.vars.replace("source", to_value(source));
        self.value = self.vars.to_value();
        self
    }

    /// The claim's VolumeAttributesClass parameters the volume is created
    /// with (the templates' `mutableParams`, a pav extension; empty
    /// otherwise).
    pub fn with_mutable_parameters(mut self, parameters: &BTreeMap<String, String>) -> Self {
        self.vars
            .replace("mutableParams", string_map(Some(parameters)));
        self.value = self.vars.to_value();
        self
    }

    /// The nodes the CO asks the volume to be accessible from, most
    /// preferred first (the templates' `topologyNodes`, a pav extension;
    /// empty unless the driver passes them): how a node-local provisioner
    /// places a volume whose claim has no `selectedNode` (an `Immediate`
    /// class, with or without `allowedTopologies`).
    pub fn with_topology_nodes(mut self, nodes: &[String]) -> Self {
        let nodes: Vec<Value> = nodes.iter().map(|n| Value::from(n.as_str())).collect();
        self.vars.replace("topologyNodes", Value::from(nodes));
        self.value = self.vars.to_value();
        self
    }
}

/// What a new volume is created from, as the creation templates see it:
/// `source.kind`, `source.handle` and `source.capacity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// `VolumeSnapshot` (restore) or `PersistentVolumeClaim` (clone).
    pub kind: DataSourceKind,
    /// The snapshot's handle, or the source volume's.
    pub handle: String,
    /// The snapshot's size, or the source volume's capacity, in bytes.
    pub capacity: u64,
}

/// Context of `spec.volumeExpansion`.
#[derive(Clone)]
pub struct ExpansionContext {
    vars: Vars,
    value: Value,
}

context_common!(ExpansionContext);

impl ExpansionContext {
    /// Builds the context from the volume, its claim when it has one, and
    /// the capacity asked for (at least `min`, at most `max` when set).
    pub fn new(
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
        min: u64,
        max: Option<u64>,
    ) -> Result<Self> {
        let capacity = pv_capacity(pv)?;
        let csi = pv_csi(pv)?;
        let mut vars = Vars::new(pvc);
        vars.set("handle", Value::from(csi.volume_handle.as_str()));
        vars.set("capacity", Value::from(capacity));
        vars.set("requestedMinCapacity", Value::from(min));
        vars.set(
            "requestedMaxCapacity",
            max.map_or(Value::from(()), Value::from),
        );
        vars.set("volumeMode", Value::from(volume_mode(pv)));
        vars.set("params", volume_params(csi));
        vars.set("pv", object_value(pv));
        vars.set("pvc", pvc.map_or(Value::from(()), object_value));
        let value = vars.to_value();
        Ok(ExpansionContext { vars, value })
    }
}

/// Context of `spec.snapshotCreation` and `spec.snapshotDeletion`.
#[derive(Clone)]
pub struct SnapshotContext {
    vars: Vars,
    value: Value,
}

context_common!(SnapshotContext);

impl SnapshotContext {
    /// Taking snapshot `name` (the CO's, `snapshot-<uid>`; also
    /// `defaultHandle`) of the volume `pv`, bound to `pvc` when it is, with
    /// the VolumeSnapshotClass `params`.
    pub fn creation(
        name: &str,
        params: &BTreeMap<String, String>,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
    ) -> Result<Self> {
        let capacity = pv_capacity(pv)?;
        let csi = pv_csi(pv)?;
        let mut vars = Vars::new(pvc);
        vars.set("snapshotName", Value::from(name));
        vars.set("defaultHandle", Value::from(name));
        vars.set("params", string_map(Some(params)));
        vars.set("sourceHandle", Value::from(csi.volume_handle.as_str()));
        vars.set("sourceCapacity", Value::from(capacity));
        vars.set("pv", object_value(pv));
        vars.set("pvc", pvc.map_or(Value::from(()), object_value));
        let value = vars.to_value();
        Ok(SnapshotContext { vars, value })
    }

    /// Deleting the snapshot `handle`, taken of the volume `source` when
    /// that is known (the VolumeSnapshotContent says).
    pub fn deletion(handle: &str, source: Option<&str>) -> Self {
        let mut vars = Vars::new(None);
        vars.set("snapshotHandle", Value::from(handle));
        vars.set("sourceHandle", source.map_or(Value::from(()), Value::from));
        let value = vars.to_value();
        SnapshotContext { vars, value }
    }
}

/// Context of `spec.groupSnapshotCreation` and
/// `spec.groupSnapshotDeletion`.
#[derive(Clone)]
pub struct GroupSnapshotContext {
    vars: Vars,
    value: Value,
}

context_common!(GroupSnapshotContext);

/// One member of a group snapshot being taken: the source volume, and its
/// claim when it is bound.
#[derive(Debug, Clone, Copy)]
pub struct GroupMember<'a> {
    /// The source volume.
    pub pv: &'a PersistentVolume,
    /// Its claim, if bound.
    pub pvc: Option<&'a PersistentVolumeClaim>,
}

impl GroupSnapshotContext {
    /// Taking group snapshot `name` (the CO's, `groupsnapshot-<uid>`;
    /// also `defaultHandle`) of `members`, in the CO's order, with the
    /// VolumeGroupSnapshotClass `params`. `get_pvc` reads in the first
    /// bound member's namespace (a VolumeGroupSnapshot selects claims of
    /// its own namespace).
    pub fn creation(
        name: &str,
        params: &BTreeMap<String, String>,
        members: &[GroupMember<'_>],
    ) -> Result<Self> {
        let mut handles = Vec::with_capacity(members.len());
        let mut sources = Vec::with_capacity(members.len());
        for member in members {
            let handle = Value::from(pv_csi(member.pv)?.volume_handle.as_str());
            handles.push(handle.clone());
            sources.push(Value::from_pairs([
                ("handle", handle),
                ("capacity", Value::from(pv_capacity(member.pv)?)),
                ("pv", object_value(member.pv)),
                ("pvc", member.pvc.map_or(Value::from(()), object_value)),
            ]));
        }
        let mut vars = Vars::new(members.iter().find_map(|m| m.pvc));
        vars.set("groupSnapshotName", Value::from(name));
        vars.set("defaultHandle", Value::from(name));
        vars.set("params", string_map(Some(params)));
        vars.set("sourceHandles", Value::from(handles));
        vars.set("sources", Value::from(sources));
        let value = vars.to_value();
        Ok(GroupSnapshotContext { vars, value })
    }

    /// Deleting group snapshot `handle` and its members `snapshots`: each
    /// snapshot's handle and, when known, its source volume's.
    pub fn deletion(handle: &str, snapshots: &[(String, Option<String>)]) -> Self {
        let mut vars = Vars::new(None);
        vars.set("groupSnapshotHandle", Value::from(handle));
        vars.set(
            "snapshotHandles",
            Value::from_iter(snapshots.iter().map(|(h, _)| Value::from(h.as_str()))),
        );
        vars.set(
            "snapshots",
            Value::from_iter(snapshots.iter().map(|(snapshot, source)| {
                Value::from_pairs([
                    ("handle", Value::from(snapshot.as_str())),
                    (
                        "sourceHandle",
                        source.as_deref().map_or(Value::from(()), Value::from),
                    ),
                ])
            })),
        );
        let value = vars.to_value();
        GroupSnapshotContext { vars, value }
    }
}

/// Context of `spec.volumeStaging` and `spec.volumeUnstaging`.
#[derive(Clone)]
pub struct StagingContext {
    vars: Vars,
    value: Value,
}

context_common!(StagingContext);

impl StagingContext {
    /// Builds the context from the claim through which the volume is used,
    /// its PersistentVolume, the node, and whether to stage read-only.
    ///
    /// `accessModes` come from the claim, not the volume: a pod may use only
    /// what its claim asked for.
    pub fn new(
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
    ) -> Result<Self> {
        let capacity = pv_capacity(pv)?;
        let csi = pv_csi(pv)?;
        let mut vars = Vars::new(Some(pvc));
        vars.set("volumeMode", Value::from(volume_mode(pv)));
        vars.set(
            "accessModes",
            to_value(
                pvc.spec
                    .as_ref()
                    .and_then(|s| s.access_modes.as_ref())
                    .cloned()
                    .unwrap_or_default(),
            ),
        );
        vars.set("capacity", Value::from(capacity));
        vars.set("params", volume_params(csi));
        vars.set(
            "mutableParams",
            string_map(Some(&recorded_mutable_parameters(pv))),
        );
        vars.set("handle", Value::from(csi.volume_handle.as_str()));
        vars.set("readOnly", Value::from(read_only));
        vars.set("pvc", object_value(pvc));
        vars.set("pv", object_value(pv));
        vars.set("node", object_value(node));
        vars.set("publishContext", string_map(None));
        vars.set("ephemeral", Value::from(false));
        let value = vars.to_value();
        Ok(StagingContext { vars, value })
    }

    /// For a CSI ephemeral inline volume of a pod on `node`, which has no
    /// claim and no PersistentVolume (`pvc` and `pv` are none): `handle`
    /// is the volume id the kubelet made up, `params` the pod's
    /// `volumeAttributes` (without `size`), `capacity` its `size` in bytes
    /// (none without it), `ephemeral` true.
    pub fn ephemeral(
        handle: &str,
        attributes: &BTreeMap<String, String>,
        capacity: Option<u64>,
        node: &Node,
        read_only: bool,
    ) -> Self {
        let mut vars = Vars::new(None);
        vars.set("volumeMode", Value::from("Filesystem"));
        vars.set("accessModes", to_value(vec!["ReadWriteOnce"]));
        vars.set("capacity", capacity.map_or(Value::from(()), Value::from));
        vars.set("params", string_map(Some(attributes)));
        vars.set("mutableParams", string_map(None));
        vars.set("handle", Value::from(handle));
        vars.set("readOnly", Value::from(read_only));
        vars.set("pvc", Value::from(()));
        vars.set("pv", Value::from(()));
        vars.set("node", object_value(node));
        vars.set("publishContext", string_map(None));
        vars.set("ephemeral", Value::from(true));
        let value = vars.to_value();
        StagingContext { vars, value }
    }

    /// For `spec.volumeStaging` of an attached volume: `publishContext` is
    /// what its attach pod wrote (`/pav/publish-context`).
    pub fn attached_with(mut self, publish_context: &BTreeMap<String, String>) -> Self {
        self.vars
            .replace("publishContext", string_map(Some(publish_context)));
        self.value = self.vars.to_value();
        self
    }

    /// For `spec.volumeNodeExpansion`: `capacity` is the size the volume
    /// grew to, which its PersistentVolume may not show yet.
    pub fn expanded_to(mut self, capacity: u64) -> Self {
        self.vars.replace("capacity", Value::from(capacity));
        self.value = self.vars.to_value();
        self
    }
}

fn volume_mode(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.volume_mode.clone())
        .unwrap_or_else(|| "Filesystem".to_owned())
}

/// Where a volume's VolumeAttributesClass parameters are recorded: as this
/// key of its volume context (`spec.csi.volumeAttributes`) at creation,
/// and as this annotation of its PersistentVolume once modified (the
/// volume context is immutable); both hold a JSON object of strings. The
/// templates' `params` never show the key.
pub const MUTABLE_PARAMETERS_KEY: &str = "pav.albertofaria.github.io/mutable-parameters";

/// The volume's StorageClass parameters, as its volume context keeps
/// them, without the record of [`MUTABLE_PARAMETERS_KEY`].
fn volume_params(csi: &k8s_openapi::api::core::v1::CSIPersistentVolumeSource) -> Value {
    Value::from_pairs(
        csi.volume_attributes
            .iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != MUTABLE_PARAMETERS_KEY)
            .map(|(k, v)| (k.clone(), v.clone())),
    )
}

/// The mutable parameters a volume has: those its last modification
/// recorded on the PersistentVolume, else those it was created with, else
/// none. A record that is not a JSON object of strings counts as none.
///
/// ```
/// use pav_templates::context::{MUTABLE_PARAMETERS_KEY, recorded_mutable_parameters};
/// let mut pv = k8s_openapi::api::core::v1::PersistentVolume::default();
/// assert!(recorded_mutable_parameters(&pv).is_empty());
/// pv.metadata.annotations = Some([(MUTABLE_PARAMETERS_KEY.to_owned(), r#"{"mode":"ro"}"#.to_owned())].into());
/// assert_eq!(recorded_mutable_parameters(&pv)["mode"], "ro");
/// ```
pub fn recorded_mutable_parameters(pv: &PersistentVolume) -> BTreeMap<String, String> {
    let modified = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MUTABLE_PARAMETERS_KEY));
    let created = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .and_then(|c| c.volume_attributes.as_ref())
        .and_then(|a| a.get(MUTABLE_PARAMETERS_KEY));
    modified
        .or(created)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

mod capacity;
mod modification;
mod population;

pub use self::capacity::CapacityContext;
pub use self::modification::ModificationContext;
pub use self::population::PopulationContext;
