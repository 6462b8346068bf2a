//! Owned, cloneable request and response types passed to provisioners.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::{Error, Result, VolumeId};

mod record;
mod tokens;

pub(crate) use record::recorded;
pub use record::{AttachmentRecord, RecordedMode, RecordedSource, VolumeRecord};
pub use tokens::{ServiceAccountToken, ServiceAccountTokens, TokensError};

/// StorageClass parameters or a volume's context: string keys to string values.
pub type Parameters = BTreeMap<String, String>;

/// One topology segment set, e.g. `{"topology.kubernetes.io/zone": "a"}`.
pub type Topology = BTreeMap<String, String>;

/// Whether a volume is consumed as a mounted filesystem or as a raw block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VolumeMode {
    /// A directory (Kubernetes `volumeMode: Filesystem`, CSI `mount` access type).
    Filesystem,
    /// A block device (Kubernetes `volumeMode: Block`, CSI `block` access type).
    Block,
}

impl fmt::Display for VolumeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Filesystem => "Filesystem",
            Self::Block => "Block",
        })
    }
}

/// How many nodes and writers may use a volume at once (the CSI access modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccessMode {
    /// One node, read-write (Kubernetes `ReadWriteOnce`).
    SingleNodeWriter,
    /// One node, read-only.
    SingleNodeReaderOnly,
    /// Many nodes, read-only (Kubernetes `ReadOnlyMany`).
    MultiNodeReaderOnly,
    /// Many nodes, one of them read-write.
    MultiNodeSingleWriter,
    /// Many nodes, all read-write (Kubernetes `ReadWriteMany`).
    MultiNodeMultiWriter,
    /// One node, one workload read-write (Kubernetes `ReadWriteOncePod`).
    SingleNodeSingleWriter,
    /// One node, several workloads read-write (Kubernetes `ReadWriteOnce` with
    /// the `SINGLE_NODE_MULTI_WRITER` node capability).
    SingleNodeMultiWriter,
}

impl AccessMode {
    /// Every access mode, in CSI enum order.
    pub const ALL: [AccessMode; 7] = [
        Self::SingleNodeWriter,
        Self::SingleNodeReaderOnly,
        Self::MultiNodeReaderOnly,
        Self::MultiNodeSingleWriter,
        Self::MultiNodeMultiWriter,
        Self::SingleNodeSingleWriter,
        Self::SingleNodeMultiWriter,
    ];

    /// The modes of one node: what a provisioner serves unless it declares
    /// more ([`Provisioner::access_modes`](crate::Provisioner::access_modes)).
    /// With both `SingleNodeSingleWriter` and `SingleNodeMultiWriter`,
    /// pav-csi advertises `SINGLE_NODE_MULTI_WRITER`, so that Kubernetes
    /// sends `ReadWriteOncePod` claims as `SingleNodeSingleWriter` and
    /// `ReadWriteOnce` ones as `SingleNodeMultiWriter`.
    pub const SINGLE_NODE: [AccessMode; 4] = [
        Self::SingleNodeWriter,
        Self::SingleNodeReaderOnly,
        Self::SingleNodeSingleWriter,
        Self::SingleNodeMultiWriter,
    ];

    /// True when no writer is allowed.
    pub fn is_read_only(self) -> bool {
        matches!(self, Self::SingleNodeReaderOnly | Self::MultiNodeReaderOnly)
    }

    /// True when more than one node may use the volume.
    pub fn is_multi_node(self) -> bool {
        matches!(
            self,
            Self::MultiNodeReaderOnly | Self::MultiNodeSingleWriter | Self::MultiNodeMultiWriter
        )
    }
}

/// Requested capacity in bytes: `min` is what the claim requests, `max` its limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapacityRange {
    /// At least this many bytes (Kubernetes `resources.requests.storage`).
    pub min_bytes: Option<u64>,
    /// At most this many bytes (Kubernetes `resources.limits.storage`).
    pub max_bytes: Option<u64>,
}

impl CapacityRange {
    /// True when `bytes` lies within the range.
    pub fn contains(&self, bytes: u64) -> bool {
        self.min_bytes.is_none_or(|min| bytes >= min)
            && self.max_bytes.is_none_or(|max| bytes <= max)
    }

    /// Picks a size in bytes within the range:
    ///
    /// 1. The size wanted is `min`, or `default` when the claim sets no
    ///    `min` (`default` is the provisioner's: its usual volume size, a
    ///    source's size, a volume's current size), and at least 1 byte.
    /// 2. It is rounded up to a multiple of `granularity` (0 and 1 mean no
    ///    rounding).
    /// 3. Past `max`:
    ///    * when only the rounding passes it, the answer is `max` itself,
    ///      not a multiple of `granularity` (a volume of an odd size beats
    ///      refusing the claim);
    ///    * when the size wanted exceeds it (a `min` above `max`, or with
    ///      no `min` a `default` above `max`), it is
    ///      [`Error::OutOfRange`]: `default` is not lowered to fit, since
    ///      for an expansion it is the volume's current size, and lowering
    ///      it would shrink the volume. A provisioner that would rather
    ///      make a smaller volume than refuse passes
    ///      `max_bytes.map_or(default, |max| default.min(max))`.
    ///
    /// A rounding that overflows `u64` is [`Error::OutOfRange`] too. Any
    /// size answered lies within the range ([`contains`](Self::contains)).
    ///
    /// ```
    /// use pav_sdk::CapacityRange;
    /// let range = |min, max| CapacityRange { min_bytes: min, max_bytes: max };
    /// // `min`, rounded up; no `min`: the default, rounded up.
    /// assert_eq!(range(Some(5000), None).choose(1, 4096)?, 8192);
    /// assert_eq!(range(None, None).choose(100, 4096)?, 4096);
    /// // Only the rounding passes `max`: `max` itself.
    /// assert_eq!(range(Some(5000), Some(6000)).choose(1, 4096)?, 6000);
    /// assert_eq!(range(Some(1), Some(1)).choose(64 << 20, 4096)?, 1);
    /// // The size wanted passes `max`: OutOfRange, the default too.
    /// assert!(range(Some(2), Some(1)).choose(1, 1).is_err());
    /// assert!(range(None, Some(10 << 20)).choose(64 << 20, 4096).is_err());
    /// // Lowering the default to the limit is the caller's choice.
    /// let limited = range(None, Some(10 << 20));
    /// let default = limited.max_bytes.map_or(64 << 20, |max| max.min(64 << 20));
    /// assert_eq!(limited.choose(default, 4096)?, 10 << 20);
    /// # Ok::<(), pav_sdk::Error>(())
    /// ```
    pub fn choose(&self, default: u64, granularity: u64) -> Result<u64> {
        let wanted = self.min_bytes.unwrap_or(default).max(1);
        let granularity = granularity.max(1);
        let rounded = wanted
            .div_ceil(granularity)
            .checked_mul(granularity)
            .ok_or_else(|| Error::OutOfRange(format!("{wanted} bytes is too large")))?;
        match self.max_bytes {
            Some(max) if rounded > max && wanted <= max => Ok(max),
            Some(max) if rounded > max => Err(Error::OutOfRange(format!(
                "need {rounded} bytes but the limit is {max} bytes"
            ))),
            _ => Ok(rounded),
        }
    }
}

/// Secret key/value pairs from the StorageClass secret references.
///
/// Deliberately has no way to be printed: `Debug` shows only the keys, so a
/// request can be logged without leaking credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(BTreeMap<String, String>);

impl Secrets {
    /// The value of secret `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The secret keys (never the values).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// True when no secret was passed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<BTreeMap<String, String>> for Secrets {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self(map)
    }
}

impl FromIterator<(String, String)> for Secrets {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// The PersistentVolumeClaim behind a dynamic provisioning request.
///
/// Known only when the external-provisioner sidecar runs with
/// `--extra-create-metadata`, which passes the `csi.storage.k8s.io/pvc/name`,
/// `csi.storage.k8s.io/pvc/namespace` and `csi.storage.k8s.io/pv/name`
/// parameters; pav-csi moves those out of [`CreateRequest::parameters`] into this.
///
/// The claim's labels, annotations and selected node are not in the CSI
/// request: pav-csi reads them from the API server when it is built with
/// its `kube` cargo feature and given a client
/// (`DriverBuilder::claim_lookup`); otherwise they are empty. Without the
/// lookup, the selected node of a `WaitForFirstConsumer` claim is still
/// known by its topology: external-provisioner (with its topology feature)
/// puts that node's segments first in [`TopologyRequirement::preferred`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claim {
    /// PVC name.
    pub name: String,
    /// PVC namespace.
    pub namespace: String,
    /// Name the PersistentVolume will get.
    pub pv_name: Option<String>,
    /// The claim's labels (with the `kube` lookup only).
    pub labels: BTreeMap<String, String>,
    /// The claim's annotations (with the `kube` lookup only).
    pub annotations: BTreeMap<String, String>,
    /// The node the scheduler chose for the claim's first pod
    /// (`volume.kubernetes.io/selected-node`; with the `kube` lookup only).
    pub selected_node: Option<String>,
}

impl Claim {
    /// The claim `namespace/name`, nothing else known.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            ..Self::default()
        }
    }
}

/// Topology constraints for where a new volume must (requisite) or should
/// (preferred, in order) be accessible from: CSI
/// `accessibility_requirements`, sent when the driver advertises
/// `VOLUME_ACCESSIBILITY_CONSTRAINTS` (pav-csi's
/// `DriverBuilder::node_topology` or `topology_aware`). external-provisioner
/// builds it from the StorageClass `allowedTopologies` (requisite) and, for
/// a `WaitForFirstConsumer` claim, puts the selected node's topology first
/// in `preferred`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopologyRequirement {
    /// The volume must be accessible from at least one of these.
    pub requisite: Vec<Topology>,
    /// Try these first, in order.
    pub preferred: Vec<Topology>,
}

impl TopologyRequirement {
    /// Where the CO would have the volume most: its first preferred
    /// segment (a `WaitForFirstConsumer` claim's selected node), else its
    /// first requisite one; `None` when it named none.
    pub fn chosen(&self) -> Option<&Topology> {
        self.preferred.first().or(self.requisite.first())
    }
}

/// How the volume will be mounted when it is a filesystem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// Requested filesystem type (`csi.storage.k8s.io/fstype`); `None` lets the provisioner choose.
    pub fs_type: Option<String>,
    /// Mount flags from the StorageClass or PV `mountOptions`.
    pub mount_flags: Vec<String>,
}

/// Asks whether a volume with these properties can be (or is) provided.
///
/// Used before every dynamic creation (`handle` is `None`) and for
/// `ValidateVolumeCapabilities` on an existing or statically provisioned volume
/// (`handle` is its PV `volumeHandle`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ValidateRequest {
    /// The existing volume's handle, for static provisioning and capability checks.
    pub handle: Option<VolumeId>,
    /// Requested volume mode.
    pub volume_mode: VolumeMode,
    /// Requested access modes (at least one).
    pub access_modes: Vec<AccessMode>,
    /// Requested capacity.
    pub capacity: CapacityRange,
    /// StorageClass parameters (dynamic) or PV volume attributes (static).
    pub parameters: Parameters,
    /// The VolumeAttributesClass parameters the volume is to be created
    /// with, or the ones asked about (see
    /// [`CreateRequest::mutable_parameters`]); empty unless the
    /// provisioner implements [`Modify`](crate::Modify).
    pub mutable_parameters: Parameters,
    /// Filesystem options when `volume_mode` is `Filesystem`.
    pub mount: MountOptions,
    /// The claim, when known.
    pub claim: Option<Claim>,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// Asks for a new volume. `name` is the idempotency key: calling again with the
/// same name must return the same volume (or [`Error::AlreadyExists`] when the
/// request is incompatible with what was created).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreateRequest {
    /// Unique name chosen by the CO, at most 128 bytes (e.g. `pvc-<uid>`).
    pub name: String,
    /// Requested volume mode.
    pub volume_mode: VolumeMode,
    /// Requested access modes (at least one).
    pub access_modes: Vec<AccessMode>,
    /// Requested capacity.
    pub capacity: CapacityRange,
    /// StorageClass parameters, without the `csi.storage.k8s.io/` keys.
    pub parameters: Parameters,
    /// The parameters of the claim's VolumeAttributesClass (CSI
    /// `mutable_parameters`, Kubernetes `spec.volumeAttributesClassName`),
    /// without the `csi.storage.k8s.io/` keys: attributes the volume is
    /// created with that [`Modify`](crate::Modify) may change later. A
    /// key here takes precedence over the same key in
    /// [`parameters`](Self::parameters). Empty unless the provisioner
    /// implements [`Modify`](crate::Modify): pav-csi refuses them
    /// (`INVALID_ARGUMENT`) otherwise, as the CSI spec says.
    pub mutable_parameters: Parameters,
    /// Filesystem options when `volume_mode` is `Filesystem`.
    pub mount: MountOptions,
    /// The claim, when known.
    pub claim: Option<Claim>,
    /// Where the volume must or should be accessible from.
    pub topology: TopologyRequirement,
    /// What the new volume starts with: a snapshot's or another volume's
    /// data; `None` for an empty volume.
    pub source: Option<ContentSource>,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// Where a new volume's data comes from (CSI `volume_content_source`;
/// Kubernetes: the claim's `dataSource`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ContentSource {
    /// Restore this snapshot (its handle, as [`Snapshot`](crate::Snapshot) returned it).
    Snapshot(VolumeId),
    /// Clone this volume (its handle).
    Volume(VolumeId),
}

/// A volume that exists, as returned by [`Create`](crate::Create).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Volume {
    /// The handle (CSI `volume_id`, PV `volumeHandle`), at most 128 bytes.
    pub handle: String,
    /// Actual size in bytes; 0 means unknown.
    pub capacity_bytes: u64,
    /// Opaque attributes handed back on every Stage of this volume.
    pub context: Parameters,
    /// Where the volume is accessible from; empty means everywhere.
    pub accessible_topology: Vec<Topology>,
}

impl Volume {
    /// A volume with a handle and a capacity, no context, accessible everywhere.
    pub fn new(handle: impl Into<String>, capacity_bytes: u64) -> Self {
        Self {
            handle: handle.into(),
            capacity_bytes,
            context: Parameters::new(),
            accessible_topology: Vec::new(),
        }
    }

    /// Adds one volume context entry.
    pub fn with_context(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.context.insert(key.into(), value.into());
        self
    }

    /// Adds one topology from which the volume is accessible.
    pub fn accessible_from(mut self, topology: Topology) -> Self {
        self.accessible_topology.push(topology);
        self
    }
}

/// Asks to delete a volume. Deleting a volume that is already gone must succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeleteRequest {
    /// The volume handle: all Delete is told, so the handle must encode
    /// whatever deleting the volume needs (or name a record that does).
    pub handle: VolumeId,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// Asks to change the mutable attributes of an existing volume
/// (Kubernetes: a claim's VolumeAttributesClass changed).
///
/// Only the keys present are to change: an attribute whose key is absent
/// stays as it is (the CSI spec forbids acting on absent keys).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModifyRequest {
    /// The volume handle, untrusted as every [`VolumeId`] is; pav-csi has
    /// checked that the volume exists (with
    /// [`Create::exists`](crate::Create::exists)).
    pub handle: VolumeId,
    /// The new VolumeAttributesClass's parameters (CSI
    /// `mutable_parameters`), without the `csi.storage.k8s.io/` keys;
    /// never empty (pav-csi answers a request with none itself).
    pub mutable_parameters: Parameters,
    /// The claim and PersistentVolume, when external-resizer runs with
    /// `--extra-modify-metadata` (it adds the `csi.storage.k8s.io/pvc/*`
    /// and `.../pv/name` keys, which pav-csi moves here).
    pub claim: Option<Claim>,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// Asks to make a volume available on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageRequest {
    /// The volume handle.
    pub handle: VolumeId,
    /// The node this runs on (as given to `serve_node`).
    pub node_id: String,
    /// Kubelet's per-volume staging directory on this node. A provisioner may
    /// mount the volume right here, or anywhere else and return that path.
    /// When the provisioner stages on publish, this is the publish target
    /// path instead (unique per volume and pod), which pav-csi bind-mounts
    /// the returned path onto.
    pub target_path: PathBuf,
    /// Filesystem or block.
    pub volume_mode: VolumeMode,
    /// The access mode the volume is staged for.
    pub access_mode: AccessMode,
    /// True when the volume must be staged read-only.
    pub read_only: bool,
    /// Filesystem options when `volume_mode` is `Filesystem`.
    pub mount: MountOptions,
    /// The context returned by Create, or PV volume attributes for static volumes.
    pub context: Parameters,
    /// Secrets for the operation (never the service-account tokens:
    /// those are [`service_account_tokens`](Self::service_account_tokens)).
    pub secrets: Secrets,
    /// The client pod's service-account tokens, by audience, when the
    /// CSIDriver has `tokenRequests`: filled only when staging on publish
    /// ([`Provisioner::stage_on_publish`](crate::Provisioner::stage_on_publish))
    /// or for an ephemeral inline volume, since kubelet passes them to
    /// `NodePublishVolume` only; empty otherwise. pav-csi takes them from
    /// the request's `secrets` when the CSIDriver has
    /// `serviceAccountTokenInSecrets: true` (kubelet's GA behaviour), else
    /// from its volume context, and leaves them out of
    /// [`secrets`](Self::secrets) and [`context`](Self::context).
    ///
    /// With the CSIDriver's `requiresRepublish: true`, kubelet publishes
    /// the volume again periodically with renewed tokens, and pav-csi calls
    /// Stage again with them while the volume stays mounted: a provisioner
    /// that hands tokens to its storage renews them then (Stage is
    /// idempotent anyway).
    pub service_account_tokens: ServiceAccountTokens,
    /// The pod the volume is staged for, when the provisioner stages per pod
    /// ([`Provisioner::stage_on_publish`](crate::Provisioner::stage_on_publish))
    /// and the CSIDriver has `podInfoOnMount: true`.
    pub pod: Option<PodInfo>,
    /// What the controller's [`Attach::attach`](crate::Attach::attach)
    /// answered for this node ([`Attached::publish_context`](crate::Attached::publish_context),
    /// the CSI `publish_context`): empty for a provisioner without
    /// [`Attach`](crate::Attach), and for a volume staged before it was
    /// attached (a driver upgraded to attach, a CO that does not attach).
    /// Untrusted as every request string is: check a device path it
    /// names before using it.
    pub publish_context: Parameters,
    /// The volume as pav-sdk recorded it when it keeps records
    /// ([`Provisioner::keep_records`](crate::Provisioner::keep_records)):
    /// its size as created or last expanded, its parameters, context,
    /// topology and source, so that Create need not put them in the
    /// volume context for Stage to parse back. Read from the record store
    /// at each call, not from what this process loaded before: a node
    /// plugin sharing the controller's store sees what the controller
    /// wrote since.
    ///
    /// `None` without records; for a volume pav-sdk did not create (a
    /// static PersistentVolume, one created before records were kept, an
    /// id nobody issued); and on a node whose record store is not the
    /// controller's (a records directory local to each node while another
    /// process serves the controller). [`recorded`](Self::recorded)
    /// answers `NOT_FOUND` then.
    pub record: Option<VolumeRecord>,
    /// The volume's directory on this node, owned by pav-csi: made before
    /// the first Stage, kept while the volume exists, and removed (after
    /// everything mounted in it is unmounted) once the volume is deleted,
    /// wherever the Delete ran. Keep what the volume needs on this node
    /// here (a tmpfs, a loop device's file, a FUSE mount) and nothing
    /// leaks when the controller deletes it from another node. `None`
    /// without records (pav-csi learns a volume is gone from them) and for
    /// a volume they do not hold.
    pub node_dir: Option<PathBuf>,
}

impl StageRequest {
    /// [`record`](Self::record), or [`Error::NotFound`] when there is
    /// none: for a provisioner that keeps records, a volume without one
    /// is none of its.
    pub fn recorded(&self) -> Result<&VolumeRecord> {
        record::recorded(&self.record, &self.handle)
    }

    /// The recorded size in bytes ([`recorded`](Self::recorded)).
    pub fn capacity_bytes(&self) -> Result<u64> {
        Ok(self.recorded()?.capacity_bytes)
    }

    /// [`node_dir`](Self::node_dir), or an error saying why there is none.
    pub fn node_dir(&self) -> Result<&Path> {
        record::node_dir(&self.node_dir, &self.handle)
    }
}

/// The client pod a volume is published to, from the
/// `csi.storage.k8s.io/pod.*` volume context keys that kubelet adds when the
/// CSIDriver has `podInfoOnMount: true`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// Pod name (`csi.storage.k8s.io/pod.name`).
    pub name: String,
    /// Pod namespace (`csi.storage.k8s.io/pod.namespace`).
    pub namespace: String,
    /// Pod UID (`csi.storage.k8s.io/pod.uid`).
    pub uid: String,
    /// Service account name (`csi.storage.k8s.io/serviceAccount.name`), if given.
    pub service_account: Option<String>,
    /// True for a CSI ephemeral inline volume (`csi.storage.k8s.io/ephemeral`).
    pub ephemeral: bool,
}

/// Where a staged volume can be found on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Staged {
    /// A directory (Filesystem) or a block device node (Block). pav-csi
    /// bind-mounts it into kubelet's paths; returning the request's
    /// `target_path` for a filesystem mounted in place is fine too.
    pub path: PathBuf,
}

impl Staged {
    /// The volume is available at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

/// Asks to release what this node holds of a deleted volume
/// ([`Stage::clean_up`](crate::Stage::clean_up)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeCleanUpRequest {
    /// The deleted volume's handle.
    pub handle: VolumeId,
    /// Its node directory, which pav-csi removes next.
    pub node_dir: PathBuf,
}

/// Asks to undo a Stage on this node. Unstaging what is not staged must succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnstageRequest {
    /// The volume handle.
    pub handle: VolumeId,
    /// The node this runs on.
    pub node_id: String,
    /// The staging directory that was passed to Stage (the publish target
    /// path when staging on publish); pav-csi has already unmounted whatever
    /// was mounted on it.
    pub target_path: PathBuf,
    /// The volume as pav-sdk recorded it, as for
    /// [`StageRequest::record`]; also `None` once the volume was deleted
    /// (a Delete that came from another process while it was staged here).
    pub record: Option<VolumeRecord>,
    /// The volume's directory on this node, as for
    /// [`StageRequest::node_dir`]; it stays after Unstage.
    pub node_dir: Option<PathBuf>,
}

impl UnstageRequest {
    /// [`record`](Self::record), or [`Error::NotFound`] when there is none.
    pub fn recorded(&self) -> Result<&VolumeRecord> {
        record::recorded(&self.record, &self.handle)
    }

    /// [`node_dir`](Self::node_dir), or an error saying why there is none.
    pub fn node_dir(&self) -> Result<&Path> {
        record::node_dir(&self.node_dir, &self.handle)
    }
}

/// Asks how full and how healthy a volume published on this node is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsRequest {
    /// The volume handle.
    pub handle: VolumeId,
    /// Where the volume is published (or staged): the CSI `volume_path`,
    /// a path inside kubelet's directory that pav-csi found mounted.
    pub volume_path: PathBuf,
    /// The volume's staging path: the CO's, else (kubelet sends none
    /// here) the one recorded when the volume was staged on this node;
    /// `None` for a provisioner that stages on publish.
    pub staging_path: Option<PathBuf>,
    /// Filesystem or block (a directory or a device at `volume_path`).
    pub volume_mode: VolumeMode,
    /// What pav-csi measured itself, the answer without [`Stats`](crate::Stats):
    /// `statvfs` of the filesystem holding `volume_path` (bytes and
    /// inodes), or the device's size for a block volume. `None` when that
    /// failed. For a volume that is a directory of a larger filesystem this
    /// is the whole filesystem, which is why a provisioner may answer.
    pub measured: Option<VolumeStats>,
}

/// Total, available and used amounts of one unit (bytes or inodes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Everything the volume can hold.
    pub total: u64,
    /// What is still free for the volume's users.
    pub available: u64,
    /// What is in use.
    pub used: u64,
}

/// Whether a volume is healthy, as kubelet reports it on the pod (CSI
/// `VolumeCondition`, and CSI v1.13's `VolumeHealth` of
/// `NodeGetVolumeHealth`).
///
/// Kubelets before Kubernetes' v1.37 read `abnormal` and `message`
/// (`NodeGetVolumeStats`); from v1.37 on kubelet reads an abnormal
/// condition's [`problem`](Self::problem), [`reason`](Self::reason) and
/// `message` into the pod's `status.volumeHealth`. A healthy condition
/// reports neither `problem` nor `reason`.
///
/// ```
/// use pav_sdk::{HealthProblem, VolumeCondition};
///
/// let lost = VolumeCondition::abnormal("the disk behind the volume failed")
///     .because(HealthProblem::DataLoss, "DiskFailed");
/// assert!(lost.abnormal);
/// assert_eq!(lost.reason, "DiskFailed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeCondition {
    /// True when something is wrong with the volume.
    pub abnormal: bool,
    /// What is wrong, or a short note that nothing is.
    pub message: String,
    /// What kind of problem it is, when abnormal (CSI
    /// `VolumeHealthErrorType`).
    pub problem: HealthProblem,
    /// A short CamelCase word for the problem, for machines and listings
    /// (`ImageMissing`, `FilesystemDamaged`), when abnormal; `message` is
    /// for people. Empty when healthy.
    pub reason: String,
}

impl VolumeCondition {
    /// The reason of [`abnormal`](Self::abnormal) until
    /// [`because`](Self::because) gives one.
    pub const ABNORMAL_REASON: &str = "VolumeAbnormal";

    /// A volume in good health.
    pub fn healthy() -> Self {
        Self {
            abnormal: false,
            message: String::new(),
            problem: HealthProblem::default(),
            reason: String::new(),
        }
    }

    /// A volume with a problem, described by `message`: an
    /// [`Inaccessible`](HealthProblem::Inaccessible) one, reason
    /// [`ABNORMAL_REASON`](Self::ABNORMAL_REASON), until
    /// [`because`](Self::because) says which.
    pub fn abnormal(message: impl Into<String>) -> Self {
        Self {
            abnormal: true,
            message: message.into(),
            problem: HealthProblem::default(),
            reason: Self::ABNORMAL_REASON.to_owned(),
        }
    }

    /// Says what kind of problem an abnormal volume has, and a CamelCase
    /// `reason` naming it (`ImageMissing`): keep the reason stable while the
    /// problem lasts, and put the details in the message. A healthy
    /// condition stays healthy and reports neither.
    pub fn because(mut self, problem: HealthProblem, reason: impl Into<String>) -> Self {
        self.problem = problem;
        self.reason = reason.into();
        self
    }
}

/// What is wrong with an abnormal volume (CSI v1.13's
/// `VolumeHealthErrorType`, kubelet's `status.volumeHealth[].healthConditions[].status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HealthProblem {
    /// The volume cannot be reached (from the node, when the node
    /// answers): its storage is gone or cut off. The default: what
    /// [`VolumeCondition::abnormal`] says until told otherwise.
    #[default]
    Inaccessible,
    /// The volume works, but not as it should: slow, short of room, a
    /// replica missing.
    Degraded,
    /// Data is lost, or likely lost: restore it from a snapshot or a
    /// replica.
    DataLoss,
}

impl std::fmt::Display for HealthProblem {
    /// Kubernetes' name: `Inaccessible`, `Degraded`, `DataLoss`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HealthProblem::Inaccessible => "Inaccessible",
            HealthProblem::Degraded => "Degraded",
            HealthProblem::DataLoss => "DataLoss",
        })
    }
}

/// A volume's usage and condition (CSI `NodeGetVolumeStatsResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VolumeStats {
    /// Bytes, when known.
    pub bytes: Option<Usage>,
    /// Inodes, when the volume has them.
    pub inodes: Option<Usage>,
    /// Health; `None` is [`Health`](crate::Health)'s answer, or healthy
    /// without it.
    pub condition: Option<VolumeCondition>,
}

impl VolumeStats {
    /// Stats with byte usage only.
    pub fn bytes(usage: Usage) -> Self {
        Self {
            bytes: Some(usage),
            ..Self::default()
        }
    }

    /// Adds inode usage.
    pub fn with_inodes(mut self, usage: Usage) -> Self {
        self.inodes = Some(usage);
        self
    }

    /// Sets the volume's condition.
    pub fn with_condition(mut self, condition: VolumeCondition) -> Self {
        self.condition = Some(condition);
        self
    }
}

/// Asks to grow a volume on the storage side (CSI
/// `ControllerExpandVolume`, from external-resizer when a claim's request
/// grows).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpandRequest {
    /// The volume handle.
    pub handle: VolumeId,
    /// The size wanted: at least `min_bytes` (the claim's new request), at
    /// most `max_bytes` when set.
    pub capacity: CapacityRange,
    /// Filesystem or block, when the CO says (CSI `volume_capability`).
    pub volume_mode: Option<VolumeMode>,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// A volume grown by [`Expand`](crate::Expand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Expanded {
    /// The volume's size now, in bytes: at least what was asked.
    pub capacity_bytes: u64,
    /// True when the node must grow something too (a filesystem, a loop
    /// device): kubelet then calls [`NodeExpand`](crate::NodeExpand) where
    /// the volume is published. Honoured only when the provisioner has
    /// that touch point, or when the process serves the controller alone
    /// (its node plugins, another process, have it).
    pub node_expansion_required: bool,
}

impl Expanded {
    /// The volume now has `capacity_bytes`; nothing to do on the node.
    pub fn new(capacity_bytes: u64) -> Self {
        Self {
            capacity_bytes,
            node_expansion_required: false,
        }
    }

    /// The node must grow its view of the volume too.
    pub fn with_node_expansion(mut self) -> Self {
        self.node_expansion_required = true;
        self
    }
}

/// Asks to grow what the node sees of a volume: its filesystem, or the
/// device under it (CSI `NodeExpandVolume`, from kubelet).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeExpandRequest {
    /// The volume handle.
    pub handle: VolumeId,
    /// Where the volume is published (or staged): a mount point inside
    /// kubelet's directory that pav-csi found mounted.
    pub volume_path: PathBuf,
    /// The volume's staging path: the CO's, else the one recorded when
    /// the volume was staged on this node; `None` for a provisioner that
    /// stages on publish.
    pub staging_path: Option<PathBuf>,
    /// Filesystem or block (a directory or a device at `volume_path`).
    pub volume_mode: VolumeMode,
    /// The size the volume was grown to, when the CO says.
    pub capacity: CapacityRange,
    /// The volume as pav-sdk recorded it, as for
    /// [`StageRequest::record`]: with records, its size is what the
    /// controller's Expand answered (recorded before kubelet calls this).
    pub record: Option<VolumeRecord>,
    /// The volume's directory on this node, as for
    /// [`StageRequest::node_dir`].
    pub node_dir: Option<PathBuf>,
}

impl NodeExpandRequest {
    /// [`record`](Self::record), or [`Error::NotFound`] when there is none.
    pub fn recorded(&self) -> Result<&VolumeRecord> {
        record::recorded(&self.record, &self.handle)
    }

    /// The recorded size in bytes: what the controller's Expand answered.
    pub fn capacity_bytes(&self) -> Result<u64> {
        Ok(self.recorded()?.capacity_bytes)
    }

    /// [`node_dir`](Self::node_dir), or an error saying why there is none.
    pub fn node_dir(&self) -> Result<&Path> {
        record::node_dir(&self.node_dir, &self.handle)
    }
}

/// Asks how much room there is for new volumes (CSI `GetCapacity`, from
/// external-provisioner for the scheduler's CSIStorageCapacity objects).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapacityRequest {
    /// The volume mode new volumes would have, when the CO says.
    pub volume_mode: Option<VolumeMode>,
    /// The access modes new volumes would have (may be empty).
    pub access_modes: Vec<AccessMode>,
    /// StorageClass parameters, without the `csi.storage.k8s.io/` keys.
    pub parameters: Parameters,
    /// The topology segment asked about (one per CSIStorageCapacity
    /// object); `None` asks about all the storage.
    pub topology: Option<Topology>,
}

/// Room for new volumes, as [`Capacity`](crate::Capacity) reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AvailableCapacity {
    /// Bytes available for new volumes (CSI `available_capacity`).
    pub available_bytes: u64,
    /// The largest volume that could be created now, when it differs from
    /// `available_bytes` (CSI `maximum_volume_size`).
    pub maximum_volume_size: Option<u64>,
    /// The smallest volume that can be created (CSI `minimum_volume_size`).
    pub minimum_volume_size: Option<u64>,
}

impl AvailableCapacity {
    /// `available_bytes` free; no size limits stated.
    pub fn new(available_bytes: u64) -> Self {
        Self {
            available_bytes,
            ..Self::default()
        }
    }

    /// The largest volume that could be created now.
    pub fn with_maximum_volume_size(mut self, bytes: u64) -> Self {
        self.maximum_volume_size = Some(bytes);
        self
    }

    /// The smallest volume that can be created.
    pub fn with_minimum_volume_size(mut self, bytes: u64) -> Self {
        self.minimum_volume_size = Some(bytes);
        self
    }
}

/// A volume as [`List`](crate::List) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedVolume {
    /// The volume, as Create returned it.
    pub volume: Volume,
    /// Its health, when [`List::reports_condition`](crate::List::reports_condition).
    pub condition: Option<VolumeCondition>,
}

impl ListedVolume {
    /// A volume, its condition unknown.
    pub fn new(volume: Volume) -> Self {
        Self {
            volume,
            condition: None,
        }
    }

    /// Adds the volume's condition.
    pub fn with_condition(mut self, condition: VolumeCondition) -> Self {
        self.condition = Some(condition);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abnormal_volume_is_inaccessible_until_told_otherwise() {
        let abnormal = VolumeCondition::abnormal("gone");
        assert!(abnormal.abnormal);
        assert_eq!(abnormal.message, "gone");
        assert_eq!(abnormal.problem, HealthProblem::Inaccessible);
        assert_eq!(abnormal.reason, "VolumeAbnormal");
        assert_eq!(HealthProblem::default(), HealthProblem::Inaccessible);
    }

    #[test]
    fn because_names_the_problem_and_keeps_the_rest() {
        for problem in [
            HealthProblem::Inaccessible,
            HealthProblem::Degraded,
            HealthProblem::DataLoss,
        ] {
            let condition = VolumeCondition::abnormal("superblock overwritten")
                .because(problem, "FilesystemDamaged");
            assert_eq!(
                condition,
                VolumeCondition {
                    abnormal: true,
                    message: "superblock overwritten".into(),
                    problem,
                    reason: "FilesystemDamaged".into(),
                }
            );
        }
    }

    #[test]
    fn a_healthy_volume_has_no_reason_and_stays_healthy() {
        let healthy = VolumeCondition::healthy();
        assert!(!healthy.abnormal && healthy.message.is_empty() && healthy.reason.is_empty());
        let told = VolumeCondition::healthy().because(HealthProblem::Degraded, "Slow");
        assert!(!told.abnormal, "because does not make a volume abnormal");
    }

    #[test]
    fn health_problems_display_as_kubernetes_names_them() {
        let names = [
            HealthProblem::Inaccessible,
            HealthProblem::Degraded,
            HealthProblem::DataLoss,
        ]
        .map(|p| p.to_string());
        assert_eq!(names, ["Inaccessible", "Degraded", "DataLoss"]);
    }

    fn range(min: Option<u64>, max: Option<u64>) -> CapacityRange {
        CapacityRange {
            min_bytes: min,
            max_bytes: max,
        }
    }

    #[test]
    fn choose_rounds_up_within_the_limit() {
        assert_eq!(range(Some(5000), None).choose(1, 4096).unwrap(), 8192);
        assert_eq!(range(Some(8192), None).choose(1, 4096).unwrap(), 8192);
        assert_eq!(range(None, None).choose(100, 4096).unwrap(), 4096);
        // No size at all is still one byte, rounded.
        assert_eq!(range(Some(0), None).choose(0, 512).unwrap(), 512);
        // A granularity of 0 means none.
        assert_eq!(range(Some(7), None).choose(1, 0).unwrap(), 7);
    }

    #[test]
    fn choose_answers_the_limit_when_only_rounding_passes_it() {
        assert_eq!(range(Some(1), Some(1)).choose(64 << 20, 4096).unwrap(), 1);
        assert_eq!(range(Some(5000), Some(6000)).choose(1, 4096).unwrap(), 6000);
    }

    #[test]
    fn choose_refuses_what_cannot_fit() {
        for (chosen, what) in [
            (range(Some(2), Some(1)).choose(1, 1), "min above max"),
            (range(None, Some(10)).choose(11, 1), "default above max"),
            (range(Some(u64::MAX), None).choose(1, 4096), "overflow"),
        ] {
            assert!(
                matches!(chosen, Err(Error::OutOfRange(_))),
                "{what}: {chosen:?}"
            );
        }
    }

    /// What the doc promises of every answer: within the range, a
    /// multiple of the granularity unless it is `max`, never below the
    /// size wanted; OutOfRange only when that size exceeds `max` (or the
    /// rounding overflows).
    #[test]
    fn choose_keeps_its_documented_promises() {
        let bounds = [
            None,
            Some(0),
            Some(1),
            Some(4095),
            Some(4096),
            Some(5000),
            Some(8192),
        ];
        for min in bounds {
            for max in bounds {
                for default in [0, 1, 100, 4096, 9000] {
                    for granularity in [0, 1, 512, 4096] {
                        let range = range(min, max);
                        let chosen = range.choose(default, granularity);
                        let wanted = min.unwrap_or(default).max(1);
                        let case = format!(
                            "{range:?} default {default} granularity {granularity}: {chosen:?}"
                        );
                        match chosen {
                            Ok(size) => {
                                assert!(range.contains(size), "{case}");
                                assert!(size >= wanted, "{case}");
                                assert!(
                                    Some(size) == max || size % granularity.max(1) == 0,
                                    "{case}"
                                );
                            }
                            Err(Error::OutOfRange(_)) => {
                                assert!(max.is_some_and(|max| wanted > max), "{case}")
                            }
                            Err(other) => panic!("{case}: {other:?}"),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn contains_is_inclusive_and_unset_bounds_are_open() {
        let bounded = range(Some(10), Some(20));
        assert!(bounded.contains(10) && bounded.contains(20));
        assert!(!bounded.contains(9) && !bounded.contains(21));
        assert!(range(None, None).contains(0));
        assert!(range(None, Some(5)).contains(0));
        assert!(range(Some(5), None).contains(u64::MAX));
    }

    #[test]
    fn the_single_node_modes_are_the_modes_of_one_node() {
        let single: Vec<_> = (AccessMode::ALL.into_iter())
            .filter(|m| !m.is_multi_node())
            .collect();
        assert_eq!(single, AccessMode::SINGLE_NODE);
        let read_only: Vec<_> = (AccessMode::ALL.into_iter())
            .filter(|m| m.is_read_only())
            .collect();
        assert_eq!(
            read_only,
            [
                AccessMode::SingleNodeReaderOnly,
                AccessMode::MultiNodeReaderOnly
            ]
        );
    }

    #[test]
    fn secrets_never_print_their_values() {
        let secrets: Secrets = [("token".to_owned(), "hunter2".to_owned())]
            .into_iter()
            .collect();
        let printed = format!("{secrets:?}");
        assert!(
            printed.contains("token") && !printed.contains("hunter2"),
            "{printed}"
        );
        assert_eq!(secrets.get("token"), Some("hunter2"));
        assert_eq!(secrets.keys().collect::<Vec<_>>(), ["token"]);
    }
}
