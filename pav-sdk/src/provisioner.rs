//! The touch points and the [`Provisioner`] value that bundles them.
//!
//! Each method's documentation names the CSI call it answers, the
//! [`Error`](crate::Error) variants (gRPC codes) it may return, and what the
//! Kubernetes component that made the call does with each: external-provisioner
//! for Create and Delete, external-resizer for Expand and Modify,
//! external-attacher for [`Attach`](crate::Attach), kubelet for Stage,
//! Unstage and Stats. The traits
//! are written with [`async_trait`](crate::async_trait) (implement them
//! with `#[pav_sdk::async_trait]`) so that [`Provisioner`] can hold them as
//! trait objects.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::Result;
use crate::VolumeId;
use crate::attach::Attach;
use crate::group_snapshot::GroupSnapshot;
use crate::health::Health;
use crate::records::{RecordKeeper, Records, Wrapped};

mod switched_off;
use crate::types::{
    AccessMode, AvailableCapacity, CapacityRequest, CreateRequest, DeleteRequest,
    DeleteSnapshotRequest, ExpandRequest, Expanded, ListedVolume, ModifyRequest, NodeExpandRequest,
    SnapshotInfo, SnapshotRequest, StageRequest, Staged, StatsRequest, UnstageRequest,
    ValidateRequest, Volume, VolumeMode, VolumeStats,
};

/// Checks a requested volume before it is created, or an existing one against
/// requested capabilities.
#[async_trait]
pub trait Validate: Send + Sync {
    /// Accepts or refuses `req`.
    ///
    /// **CSI calls:** `CreateVolume`, before [`Create::create`] (with
    /// `req.handle` `None`), and `ValidateVolumeCapabilities` (with the
    /// volume's handle, after [`Create::exists`] found it).
    ///
    /// **Codes:** [`InvalidArgument`](crate::Error::InvalidArgument) or
    /// [`OutOfRange`](crate::Error::OutOfRange) to refuse: in
    /// `CreateVolume` these are errors, in `ValidateVolumeCapabilities` an
    /// answer ("not confirmed", with the message).
    /// [`NotFound`](crate::Error::NotFound) when `req.handle` names no
    /// volume. Anything else is an error of either call.
    ///
    /// **Retries:** in `CreateVolume`, as for [`Create::create`].
    /// `ValidateVolumeCapabilities` is not called by the Kubernetes
    /// sidecars; other COs and csi-sanity call it.
    async fn validate(&self, req: ValidateRequest) -> Result<()>;
}

/// Creates volumes (Kubernetes dynamic provisioning).
///
/// Must be idempotent on [`CreateRequest::name`]; may take minutes.
#[async_trait]
pub trait Create: Send + Sync {
    /// Creates the volume named `req.name`, or returns it if it already exists.
    ///
    /// **CSI call:** `CreateVolume`, from external-provisioner, for each
    /// claim of a StorageClass whose `provisioner` is this driver.
    ///
    /// The returned [`Volume::handle`](crate::Volume::handle) is all that
    /// [`Delete`] will get: it must encode what deletion needs (or name a
    /// record that does), and be at most 128 bytes without control
    /// characters. pav-csi checks the answer: one CSI cannot carry is
    /// deleted (with [`Delete`]) and answered `INTERNAL`.
    ///
    /// **Codes**, and what external-provisioner does with them:
    ///
    /// | Return | Meaning | external-provisioner |
    /// |---|---|---|
    /// | [`Unavailable`](crate::Error::Unavailable), [`Aborted`](crate::Error::Aborted) | not finished, try again | **in progress**: calls again with the same name until a final answer, even after the claim is deleted (then deletes what the final answer created) |
    /// | [`ResourceExhausted`](crate::Error::ResourceExhausted) | no room now | in progress, as above; but for a claim with a selected node (`WaitForFirstConsumer`) and a driver with topology, external-provisioner gives up and asks the scheduler to pick another node |
    /// | [`InvalidArgument`](crate::Error::InvalidArgument) | bad parameter or capability | **final**: a Warning event on the claim; retried with exponential backoff while the claim exists |
    /// | [`OutOfRange`](crate::Error::OutOfRange) | capacity cannot be met | final, as above |
    /// | [`AlreadyExists`](crate::Error::AlreadyExists) | the name exists with other properties | final, as above |
    /// | [`FailedPrecondition`](crate::Error::FailedPrecondition), [`NotFound`](crate::Error::NotFound), [`Internal`](crate::Error::Internal) | anything else | final, as above |
    ///
    /// A claim parked forever is the failure to avoid: an in-progress code
    /// keeps the claim in external-provisioner's in-progress map, so return
    /// one only when calling again can succeed. Timeouts and cancellation
    /// count as in progress too (the call may still be running here; pav-csi
    /// answers a concurrent repeat `ABORTED`).
    async fn create(&self, req: CreateRequest) -> Result<Volume>;

    /// Whether the volume `volume` exists.
    ///
    /// **CSI call:** `ValidateVolumeCapabilities`, which answers `NOT_FOUND`
    /// for a volume that does not exist, before [`Validate`] runs. Not
    /// called by the Kubernetes sidecars; csi-sanity checks it.
    ///
    /// Required because only the provisioner knows, also after a restart:
    /// answer from the storage itself, not from memory. An id this
    /// provisioner could never have issued (see
    /// [`VolumeId::path_component`]) does not exist:
    /// [`NotFound`](crate::Error::NotFound) counts as `false`. Any other
    /// error is the call's error.
    ///
    /// With [records](Provisioner::keep_records) pav-sdk answers from them
    /// and never calls this; the default, for that case, is `INTERNAL`.
    async fn exists(&self, volume: &VolumeId) -> Result<bool> {
        Err(crate::Error::Internal(format!(
            "cannot tell whether volume {:?} exists: implement Create::exists, or keep records",
            volume.as_str()
        )))
    }
}

/// Deletes volumes. Without it, deleting is a no-op: there is nothing to delete.
#[async_trait]
pub trait Delete: Send + Sync {
    /// Deletes the volume; succeeds if it is already gone.
    ///
    /// **CSI call:** `DeleteVolume`, from external-provisioner, when a
    /// PersistentVolume with `persistentVolumeReclaimPolicy: Delete` is
    /// released (its claim deleted), and from pav-csi itself for a
    /// created volume it refused to return.
    ///
    /// Delete gets only the handle (and the StorageClass's deletion
    /// secrets): no parameters, no claim, no size. Whatever deletion needs
    /// must be in the handle [`Create::create`] returned, or in a record
    /// the handle names. The handle is untrusted input: see
    /// [`VolumeId::path_component`].
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) is success (already
    /// gone). [`FailedPrecondition`](crate::Error::FailedPrecondition) when
    /// the volume is still in use (e.g. staged somewhere). Every error is
    /// retried by external-provisioner with exponential backoff while the
    /// PersistentVolume exists; the PV shows a `VolumeFailedDelete` event.
    async fn delete(&self, req: DeleteRequest) -> Result<()>;
}

/// Makes a volume available on one node, as a directory or a block device.
#[async_trait]
pub trait Stage: Send + Sync {
    /// Stages the volume and says where it is; called again for an already
    /// staged volume, it must return the same place.
    ///
    /// **CSI call:** `NodeStageVolume`, from kubelet, once per volume and
    /// node before the first pod using it starts (pav-csi then bind-mounts
    /// the returned path into each pod in `NodePublishVolume`); with
    /// [`Provisioner::stage_on_publish`], `NodePublishVolume` once per pod.
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when the volume does
    /// not exist, [`FailedPrecondition`](crate::Error::FailedPrecondition)
    /// when it is in a state that forbids staging,
    /// [`ResourceExhausted`](crate::Error::ResourceExhausted) when the node
    /// can take no more volumes, [`InvalidArgument`](crate::Error::InvalidArgument)
    /// for an unsupported filesystem or mount flag. kubelet retries every
    /// error with exponential backoff while a pod needs the volume (the pod
    /// stays `ContainerCreating`, with `FailedMount` events). After
    /// `Unavailable`, `Aborted`, `ResourceExhausted` or a timeout it treats
    /// the volume as possibly staged, and calls [`Unstage`] if the pod goes
    /// away before a stage succeeds.
    ///
    /// **Failure and cancellation:** a Stage that fails with a final
    /// error (any but `Unavailable`, `Aborted` and `ResourceExhausted`) is
    /// undone by pav-csi at once when it was the volume's first stage on
    /// the node: pav-csi unmounts the staging path and calls [`Unstage`],
    /// because kubelet does not unstage what it believes was never staged;
    /// if that Unstage fails, the next `NodeUnstageVolume` runs it again.
    /// After `Unavailable`, `Aborted` or `ResourceExhausted` nothing is
    /// undone: kubelet calls Stage again, or `NodeUnstageVolume` once no
    /// pod needs the volume. A repeat of a Stage that succeeded before
    /// leaves that stage in place when it fails (pods may be using it).
    /// With [`Provisioner::stage_on_publish`] nothing undoes a Stage that
    /// failed with a final error: kubelet calls `NodeUnpublishVolume` (and
    /// so Unstage) after a failed publish only when its answer was one of
    /// those three codes or a timeout. Such a Stage must leave nothing
    /// behind.
    /// A call whose client gives up (kubelet's deadline) still runs to its
    /// end, and the volume stays busy (`ABORTED` to a repeat) until it
    /// returns.
    async fn stage(&self, req: StageRequest) -> Result<Staged>;
}

/// Undoes [`Stage`]. Before it runs, pav-csi has unmounted everything
/// mounted at the staging path (its own bind mounts and whatever Stage
/// mounted there); without it, that unmounting is all unstaging does.
#[async_trait]
pub trait Unstage: Send + Sync {
    /// Releases what Stage set up; succeeds if nothing is staged.
    ///
    /// **CSI call:** `NodeUnstageVolume`, from kubelet, after the last pod
    /// on the node using the volume is gone and pav-csi has unmounted the
    /// staging path (with [`Provisioner::stage_on_publish`]:
    /// `NodeUnpublishVolume`, per pod); and from pav-csi itself right after
    /// a first Stage on the node that failed with a final error, to undo
    /// whatever it did before failing (see [`Stage::stage`]), after
    /// unmounting the staging path there too. Whoever calls it, what was
    /// mounted at the path it gets is unmounted already: Unstage releases
    /// the rest (loop devices, locks, records).
    ///
    /// **Codes:** any error is retried by kubelet with exponential backoff
    /// until it succeeds; until then the volume counts as in use on the
    /// node (it cannot be staged elsewhere with a single-node access mode).
    async fn unstage(&self, req: UnstageRequest) -> Result<()>;
}

/// Reports a volume's usage and health.
///
/// Without it pav-csi answers with what it measures
/// ([`StatsRequest::measured`](crate::StatsRequest::measured)): `statvfs`
/// of the filesystem at the volume path, which for a volume that is a
/// directory of a larger filesystem is that whole filesystem.
#[async_trait]
pub trait Stats: Send + Sync {
    /// The usage and condition of the volume published at
    /// `req.volume_path`. Return `req.measured` (or parts of it) for what
    /// the provisioner does not know better.
    ///
    /// **CSI call:** `NodeGetVolumeStats`, from kubelet, periodically for
    /// its volume metrics (`kubelet_volume_stats_*`) and, as pav-csi then
    /// advertises `VOLUME_CONDITION`, for volume health (see
    /// [`Health`](crate::Health)): a condition left `None` is
    /// [`Health`](crate::Health)'s answer, or healthy without it.
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when the volume does
    /// not exist; any error only means no numbers this round: kubelet logs
    /// it and asks again at its next collection.
    async fn stats(&self, req: StatsRequest) -> Result<VolumeStats>;
}

/// Grows volumes on the storage side (Kubernetes volume expansion).
#[async_trait]
pub trait Expand: Send + Sync {
    /// Grows the volume to at least `req.capacity.min_bytes`, never shrinks
    /// it: a volume already that large (a retry) is answered with its size.
    ///
    /// **CSI call:** `ControllerExpandVolume`, from external-resizer, when
    /// a bound claim's storage request grows (the StorageClass needs
    /// `allowVolumeExpansion: true`). pav-csi has checked that the volume
    /// exists (with [`Create::exists`]) and that the answer lies within
    /// the requested range.
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when the volume does
    /// not exist; [`OutOfRange`](crate::Error::OutOfRange) when the size
    /// can never be provided (external-resizer marks the resize failed);
    /// [`ResourceExhausted`](crate::Error::ResourceExhausted) when there is
    /// no room now. external-resizer retries every error with exponential
    /// backoff; the claim shows a `VolumeResizeFailed` event.
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded>;
}

/// Changes the mutable attributes of existing volumes (Kubernetes
/// VolumeAttributesClass): what a claim's class says, such as a tier, a
/// throughput or a reservation, changed while the volume lives.
///
/// A volume's first attributes come with [`Create`]
/// ([`CreateRequest::mutable_parameters`](crate::CreateRequest::mutable_parameters),
/// which pav-csi refuses for a provisioner without this trait). Keys the
/// class and the StorageClass both set are the class's.
#[async_trait]
pub trait Modify: Send + Sync {
    /// Sets the attributes `req.mutable_parameters` names on the volume;
    /// attributes it does not name stay as they are (the CSI spec forbids
    /// acting on absent keys). The same request again (a retry) succeeds
    /// and changes nothing more.
    ///
    /// **CSI call:** `ControllerModifyVolume`, from external-resizer
    /// (with its `VolumeAttributesClass` feature gate), when a bound
    /// claim's `spec.volumeAttributesClassName` names a
    /// VolumeAttributesClass of this driver other than the claim's
    /// current one, with the class's `parameters`. pav-csi has checked
    /// that the volume exists (with [`Create::exists`]), runs no other
    /// call on it meanwhile, and answers a request with no parameters
    /// itself (there is nothing to change).
    ///
    /// **Codes**, and what external-resizer does with them (its v1.14
    /// source, and KEP-3751 for the intent):
    ///
    /// | Return | Meaning | external-resizer |
    /// |---|---|---|
    /// | [`InvalidArgument`](crate::Error::InvalidArgument) | a key or a value this volume can never take: the class is **infeasible** | the claim's `status.modifyVolumeStatus` becomes `Infeasible`, a `VolumeModifyFailed` Warning event; called again only once per `--retry-interval-max` (5 minutes) while the claim names the class; the user rolls back by naming the class the volume has (`status.currentVolumeAttributesClassName`) |
    /// | [`NotFound`](crate::Error::NotFound) | the volume does not exist | final: the status stays `InProgress`, a `ModifyVolumeError` condition and a Warning event; called again with exponential backoff |
    /// | [`FailedPrecondition`](crate::Error::FailedPrecondition), [`OutOfRange`](crate::Error::OutOfRange), [`Internal`](crate::Error::Internal) | not now, or failed | final, as above: a state that may pass (the volume in use) is retried until it does |
    /// | [`Unavailable`](crate::Error::Unavailable), [`Aborted`](crate::Error::Aborted), [`ResourceExhausted`](crate::Error::ResourceExhausted) | not finished, try again | meant as **in progress**: the claim keeps this class as its target until a final answer; v1.14 retries them as it retries final errors |
    ///
    /// `InvalidArgument` also promises that this call changed nothing
    /// (CSI 1.12): check every key and value before applying any, and
    /// answer another code for a failure after a change. On success
    /// external-resizer sets the PersistentVolume's
    /// `spec.volumeAttributesClassName` and the claim's
    /// `status.currentVolumeAttributesClassName`.
    ///
    /// With [records](Provisioner::keep_records), pav-sdk answers
    /// `NOT_FOUND` for a volume it has no record of, and records the new
    /// values once this succeeds (a repeated Create compares them).
    async fn modify(&self, req: ModifyRequest) -> Result<()>;
}

/// Grows what a node sees of a volume: its filesystem, online while pods
/// use it.
#[async_trait]
pub trait NodeExpand: Send + Sync {
    /// Grows the filesystem (or device) of the volume published at
    /// `req.volume_path` to the volume's size, and returns that size in
    /// bytes (0 when unknown). Called again when nothing is left to grow,
    /// it must succeed.
    ///
    /// **CSI call:** `NodeExpandVolume`, from kubelet, after
    /// [`Expand::expand`] answered
    /// [`node_expansion_required`](crate::Expanded::node_expansion_required),
    /// on the node where the volume is published (or staged). pav-csi has
    /// checked that a volume is mounted at `req.volume_path`.
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when the volume is
    /// not there; anything else is retried by kubelet with exponential
    /// backoff (a `FileSystemResizeFailed` event on the pod).
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64>;
}

/// Reports free space, so the scheduler places claims where they fit.
#[async_trait]
pub trait Capacity: Send + Sync {
    /// The room for new volumes like `req` describes, in the topology
    /// segment `req.topology` (all the storage when `None`). Storage
    /// outside that segment counts nothing: answer 0 for a segment this
    /// provisioner does not serve.
    ///
    /// **CSI call:** `GetCapacity`, from external-provisioner with
    /// `--enable-capacity`, once per StorageClass and topology segment
    /// (the segments come from the nodes' `NodeGetInfo`), periodically;
    /// it publishes each answer as a CSIStorageCapacity object, which the
    /// scheduler compares with a `WaitForFirstConsumer` claim's request
    /// before it picks a node. The CSIDriver needs `storageCapacity: true`.
    ///
    /// **Codes:** any error leaves the previous CSIStorageCapacity in
    /// place until the next poll.
    async fn capacity(&self, req: CapacityRequest) -> Result<AvailableCapacity>;
}

/// Lists the volumes that exist.
#[async_trait]
pub trait List: Send + Sync {
    /// Every volume that exists, in any order, from the storage (not from
    /// memory: it must survive a restart).
    ///
    /// **CSI call:** `ListVolumes`; pav-csi sorts the answer by handle
    /// and pages it (`starting_token`, `max_entries`). Kubernetes'
    /// external-health-monitor controller lists volumes for their
    /// condition; other COs reconcile with it.
    ///
    /// **Codes:** any error fails the listing; the caller asks again later.
    async fn list(&self) -> Result<Vec<ListedVolume>>;

    /// True when [`list`](Self::list) reports each volume's condition:
    /// pav-csi then advertises the controller's `VOLUME_CONDITION`
    /// capability. Only say so where checking is cheap: it runs for every
    /// volume on every listing.
    fn reports_condition(&self) -> bool {
        false
    }
}

/// Takes, deletes and lists snapshots; volumes are restored from them by
/// [`Create`] ([`CreateRequest::source`](crate::CreateRequest::source)).
#[async_trait]
pub trait Snapshot: Send + Sync {
    /// Takes a snapshot of `req.source` named `req.name`, or returns it if
    /// it already exists; a snapshot of that name of another volume is
    /// [`AlreadyExists`](crate::Error::AlreadyExists).
    ///
    /// **CSI call:** `CreateSnapshot`, from the csi-snapshotter sidecar for
    /// each VolumeSnapshot of a VolumeSnapshotClass whose `driver` is this
    /// one. pav-csi has checked that the source volume exists (with
    /// [`Create::exists`]), runs no other call on it meanwhile, and
    /// answers repeats from a cache of recent answers.
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when the volume does
    /// not exist, [`ResourceExhausted`](crate::Error::ResourceExhausted)
    /// when there is no room. csi-snapshotter retries every error with
    /// exponential backoff; a snapshot that is not
    /// [`ready`](crate::SnapshotInfo::ready) is asked about again.
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo>;

    /// Deletes the snapshot; one that does not exist is already deleted.
    ///
    /// **CSI call:** `DeleteSnapshot`, from csi-snapshotter when a
    /// VolumeSnapshotContent with `deletionPolicy: Delete` is released.
    /// Any error is retried with exponential backoff.
    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()>;

    /// Every snapshot that exists, in any order, from the storage.
    ///
    /// **CSI call:** `ListSnapshots` (pav-csi filters by id or source,
    /// sorts by handle and pages), and the source lookup of a
    /// `CreateVolume` from a snapshot (`NOT_FOUND` when it is not listed,
    /// `OUT_OF_RANGE` when the requested limit is below its size).
    ///
    /// With [records](Provisioner::keep_records) pav-sdk answers from them
    /// and never calls this; the default, for that case, is `INTERNAL`.
    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Err(crate::Error::Internal(
            "cannot list snapshots: implement Snapshot::list_snapshots, or keep records".into(),
        ))
    }
}

/// Whether [`Expand`] can grow a volume that is in use (CSI plugin
/// capability `VolumeExpansion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expansion {
    /// While published to pods (`ONLINE`).
    Online,
    /// Only while not published anywhere (`OFFLINE`): the CO unpublishes
    /// it first.
    Offline,
}

/// What a provisioner implements, bundled for serving.
///
/// Built from one value that implements any subset of the touch points,
/// usually with [`provisioner!`](crate::provisioner!), which adds every
/// touch point the value's type implements. Otherwise each `with_*` call
/// adds one, checked by the compiler against the traits the value
/// implements. The CSI capabilities are derived from what was added:
///
/// | added | CSI effect |
/// |---|---|
/// | `with_create` | `CREATE_DELETE_VOLUME` controller capability, `CreateVolume` served |
/// | `with_delete` | `DeleteVolume` calls it (otherwise it succeeds doing nothing) |
/// | `with_validate` | runs before `CreateVolume` and for `ValidateVolumeCapabilities` |
/// | `with_stage` | `STAGE_UNSTAGE_VOLUME` node capability, node service can be served |
/// | `with_unstage` | `NodeUnstageVolume` calls it after unmounting |
/// | `with_stats` | `NodeGetVolumeStats` calls it; `VOLUME_CONDITION` node capability (a missing condition is [`Health`]'s, or healthy) |
/// | `with_expand` | `EXPAND_VOLUME` controller capability, `ControllerExpandVolume` served; `VolumeExpansion` plugin capability (`ONLINE`, or [`offline_expansion`](Provisioner::offline_expansion)) |
/// | `with_modify` | `MODIFY_VOLUME` controller capability, `ControllerModifyVolume` served; `CreateVolume` with `mutable_parameters` accepted |
/// | `with_attach` | `PUBLISH_UNPUBLISH_VOLUME` controller capability (and `PUBLISH_READONLY` when [`Attach::attaches_read_only`]), `ControllerPublishVolume` and `ControllerUnpublishVolume` served; `NodeStageVolume`'s `publish_context` passed to Stage |
/// | `max_volumes_per_node` | `NodeGetInfo.max_volumes_per_node`; with records, an attach past it `RESOURCE_EXHAUSTED` |
/// | `with_health` | `GET_VOLUME` and `VOLUME_CONDITION` controller capabilities (with a listing: [`List`] or records), `ControllerGetVolume` served, `ListVolumes` entries without a condition asked; `VOLUME_CONDITION` node capability, `NodeGetVolumeStats` asks it when [`Stats`] gave no condition |
/// | `with_capacity` | `GET_CAPACITY` controller capability, `GetCapacity` served |
/// | `with_list` | `LIST_VOLUMES` controller capability (and `VOLUME_CONDITION` when [`List::reports_condition`]), `ListVolumes` served |
/// | `with_snapshot` | `CREATE_DELETE_SNAPSHOT` and `LIST_SNAPSHOTS` controller capabilities; `CreateSnapshot`, `DeleteSnapshot`, `ListSnapshots` served; `CreateVolume` from a snapshot accepted |
/// | `with_group_snapshot` | `GROUP_CONTROLLER_SERVICE` plugin capability and `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT`; `CreateVolumeGroupSnapshot`, `DeleteVolumeGroupSnapshot`, `GetVolumeGroupSnapshot` served |
/// | `clones_volumes` | `CLONE_VOLUME` controller capability; `CreateVolume` from a volume accepted |
/// | `with_node_expand` | `EXPAND_VOLUME` node capability, `NodeExpandVolume` served |
/// | `ephemeral` | CSI ephemeral inline volumes: `NodePublishVolume` creates and stages, `NodeUnpublishVolume` unstages and deletes (see [`ephemeral`](Provisioner::ephemeral)) |
/// | `stage_on_publish` | no `STAGE_UNSTAGE_VOLUME`; Stage/Unstage run in `NodePublishVolume`/`NodeUnpublishVolume` |
///
/// ```
/// # use pav_sdk::*;
/// # struct Mine;
/// # #[async_trait::async_trait]
/// # impl Create for Mine {
/// #     async fn create(&self, r: CreateRequest) -> Result<Volume> { Ok(Volume::new(r.name, 0)) }
/// #     async fn exists(&self, _: &VolumeId) -> Result<bool> { Ok(false) }
/// # }
/// let p = Provisioner::new(Mine).with_create();
/// assert!(p.create().is_some() && p.delete().is_none());
/// ```
#[derive(Clone)]
pub struct Provisioner<P = ()> {
    inner: Arc<P>,
    validate: Option<Arc<dyn Validate>>,
    pub(crate) create: Option<Arc<dyn Create>>,
    pub(crate) delete: Option<Arc<dyn Delete>>,
    pub(crate) stage: Option<Arc<dyn Stage>>,
    unstage: Option<Arc<dyn Unstage>>,
    stats: Option<Arc<dyn Stats>>,
    expand: Option<Arc<dyn Expand>>,
    modify: Option<Arc<dyn Modify>>,
    attach: Option<Arc<dyn Attach>>,
    max_volumes_per_node: Option<u32>,
    health: Option<Arc<dyn Health>>,
    node_expand: Option<Arc<dyn NodeExpand>>,
    expansion: Expansion,
    capacity: Option<Arc<dyn Capacity>>,
    list: Option<Arc<dyn List>>,
    snapshot: Option<Arc<dyn Snapshot>>,
    group_snapshot: Option<Arc<dyn GroupSnapshot>>,
    clones: bool,
    volume_modes: BTreeSet<VolumeMode>,
    access_modes: BTreeSet<AccessMode>,
    stage_on_publish: bool,
    /// Serves CSI ephemeral inline volumes (crate::ephemeral).
    pub(crate) ephemeral: bool,
    /// Records kept by pav-sdk, and the touch points serving from them.
    records: Option<(Records, Arc<RecordKeeper>)>,
}

impl<P: Send + Sync + 'static> Provisioner<P> {
    /// Wraps `inner`; add its touch points with the `with_*` methods.
    ///
    /// By default only [`VolumeMode::Filesystem`] and the access modes of a
    /// single node ([`AccessMode::SINGLE_NODE`]) are accepted; see
    /// [`volume_modes`](Self::volume_modes) and
    /// [`access_modes`](Self::access_modes).
    pub fn new(inner: P) -> Self {
        Self {
            inner: Arc::new(inner),
            validate: None,
            create: None,
            delete: None,
            stage: None,
            unstage: None,
            stats: None,
            expand: None,
            modify: None,
            attach: None,
            max_volumes_per_node: None,
            health: None,
            node_expand: None,
            expansion: Expansion::Online,
            capacity: None,
            list: None,
            snapshot: None,
            group_snapshot: None,
            clones: false,
            volume_modes: BTreeSet::from([VolumeMode::Filesystem]),
            access_modes: AccessMode::SINGLE_NODE.into_iter().collect(),
            stage_on_publish: false,
            ephemeral: false,
            records: None,
        }
    }

    /// The wrapped value.
    pub fn inner(&self) -> &Arc<P> {
        &self.inner
    }

    /// Adds the [`Validate`] touch point.
    pub fn with_validate(mut self) -> Self
    where
        P: Validate,
    {
        self.validate = Some(self.inner.clone());
        self
    }

    /// Adds the [`Create`] touch point.
    pub fn with_create(mut self) -> Self
    where
        P: Create,
    {
        self.create = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Delete`] touch point.
    pub fn with_delete(mut self) -> Self
    where
        P: Delete,
    {
        self.delete = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Stage`] touch point.
    pub fn with_stage(mut self) -> Self
    where
        P: Stage,
    {
        self.stage = Some(self.inner.clone());
        self
    }

    /// Adds the [`Unstage`] touch point.
    pub fn with_unstage(mut self) -> Self
    where
        P: Unstage,
    {
        self.unstage = Some(self.inner.clone());
        self
    }

    /// Adds the [`Stats`] touch point.
    pub fn with_stats(mut self) -> Self
    where
        P: Stats,
    {
        self.stats = Some(self.inner.clone());
        self
    }

    /// Adds the [`Expand`] touch point; volumes grow online unless
    /// [`offline_expansion`](Self::offline_expansion) says otherwise.
    pub fn with_expand(mut self) -> Self
    where
        P: Expand,
    {
        self.expand = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Modify`] touch point.
    pub fn with_modify(mut self) -> Self
    where
        P: Modify,
    {
        self.modify = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Attach`] touch point.
    pub fn with_attach(mut self) -> Self
    where
        P: Attach,
    {
        self.attach = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// At most `max` volumes can be attached to, or staged on, one node
    /// (a cloud instance's disk slots): the node plugin reports it
    /// (`NodeGetInfo.max_volumes_per_node`; Kubernetes' scheduler then
    /// places no more pods' volumes there), and with [`Attach`] and
    /// records the controller refuses an attach past it
    /// (`RESOURCE_EXHAUSTED`). Set the same on the controller's and the
    /// nodes' provisioner (a flag both are given, say): the controller
    /// knows the limit only this way. 0 means no limit, as without it.
    /// pav-csi's `DriverBuilder::max_volumes_per_node`, when set, wins for
    /// `NodeGetInfo`.
    pub fn max_volumes_per_node(mut self, max: u32) -> Self {
        self.max_volumes_per_node = (max > 0).then_some(max);
        self.rewrap_records();
        self
    }

    /// Adds the [`Health`] touch point.
    pub fn with_health(mut self) -> Self
    where
        P: Health,
    {
        self.health = Some(self.inner.clone());
        self
    }

    /// Adds the [`NodeExpand`] touch point.
    pub fn with_node_expand(mut self) -> Self
    where
        P: NodeExpand,
    {
        self.node_expand = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Capacity`] touch point.
    pub fn with_capacity(mut self) -> Self
    where
        P: Capacity,
    {
        self.capacity = Some(self.inner.clone());
        self
    }

    /// Adds the [`List`] touch point.
    pub fn with_list(mut self) -> Self
    where
        P: List,
    {
        self.list = Some(self.inner.clone());
        self
    }

    /// Adds the [`Snapshot`] touch point.
    pub fn with_snapshot(mut self) -> Self
    where
        P: Snapshot,
    {
        self.snapshot = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`GroupSnapshot`] touch point, and the [`Snapshot`] one
    /// it extends (its members are restored and listed as snapshots).
    pub fn with_group_snapshot(mut self) -> Self
    where
        P: GroupSnapshot,
    {
        self.snapshot = Some(self.inner.clone());
        self.group_snapshot = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// [`Create`] makes volumes from other volumes
    /// ([`ContentSource::Volume`](crate::ContentSource::Volume)): pav-csi
    /// advertises `CLONE_VOLUME` and passes such requests on (after
    /// checking the source exists) instead of refusing them.
    pub fn clones_volumes(mut self) -> Self {
        self.clones = true;
        self
    }

    /// [`Expand`] grows only volumes that are not published: the plugin
    /// capability becomes `VolumeExpansion` `OFFLINE`, and Kubernetes
    /// resizes a claim only once no pod uses it.
    pub fn offline_expansion(mut self) -> Self {
        self.expansion = Expansion::Offline;
        self
    }

    /// Sets the volume modes this provisioner serves (checked before Validate).
    pub fn volume_modes(mut self, modes: impl IntoIterator<Item = VolumeMode>) -> Self {
        self.volume_modes = modes.into_iter().collect();
        self
    }

    /// Sets the access modes this provisioner serves (checked before Validate;
    /// default [`AccessMode::SINGLE_NODE`]). Declare a multi-node mode only
    /// when a volume really can be used from several nodes at once: a
    /// node-local volume would be mounted on each node separately.
    pub fn access_modes(mut self, modes: impl IntoIterator<Item = AccessMode>) -> Self {
        self.access_modes = modes.into_iter().collect();
        self
    }

    /// Stages per client pod instead of per node: pav-csi then advertises no
    /// `STAGE_UNSTAGE_VOLUME` node capability and runs [`Stage`] in
    /// `NodePublishVolume` (with the publish target path and, when the
    /// CSIDriver has `podInfoOnMount: true`, the client pod in
    /// [`StageRequest::pod`](crate::StageRequest::pod)) and [`Unstage`] in
    /// `NodeUnpublishVolume`, after unmounting the target path.
    ///
    /// ```
    /// # use pav_sdk::*;
    /// # struct Mine;
    /// # #[async_trait::async_trait]
    /// # impl Stage for Mine { async fn stage(&self, r: StageRequest) -> Result<Staged> { Ok(Staged::at(r.target_path)) } }
    /// let p = Provisioner::new(Mine).with_stage().stage_on_publish();
    /// assert!(p.stages_on_publish());
    /// ```
    pub fn stage_on_publish(mut self) -> Self {
        self.stage_on_publish = true;
        self
    }

    /// Keeps records of the volumes and snapshots created, and answers from
    /// them: a repeated Create, Delete of an unknown volume,
    /// [`Create::exists`], ListVolumes, ListSnapshots and, with a
    /// [budget](Records::budget), GetCapacity (see
    /// [`records`](crate::records) for each call). In any order with the
    /// `with_*` calls.
    ///
    /// ```
    /// # use pav_sdk::*;
    /// # struct Mine;
    /// # #[async_trait]
    /// # impl Create for Mine {
    /// #     async fn create(&self, r: CreateRequest) -> Result<Volume> { Ok(Volume::new(r.name, 1)) }
    /// # }
    /// let dir = std::env::temp_dir().join("records-doc");
    /// let p = provisioner!(Mine).keep_records(records::Records::in_dir(dir).budget(1 << 30));
    /// assert!(p.list().is_some() && p.capacity().is_some());
    /// ```
    pub fn keep_records(mut self, records: Records) -> Self {
        self.records = Some((
            records.clone(),
            Arc::new(RecordKeeper::new(&records, Wrapped::default())),
        ));
        self.rewrap_records();
        self
    }

    /// Points the record keeper at the touch points added so far.
    fn rewrap_records(&mut self) {
        if let Some((records, _)) = self.records.take() {
            let author = Wrapped {
                create: self.create.clone(),
                delete: self.delete.clone(),
                expand: self.expand.clone(),
                modify: self.modify.clone(),
                attach: self.attach.clone(),
                max_volumes_per_node: self.max_volumes_per_node,
                snapshot: self.snapshot.clone(),
                group_snapshot: self.group_snapshot.clone(),
                node_expand: self.node_expand.is_some(),
            };
            let keeper = Arc::new(RecordKeeper::new(&records, author));
            self.records = Some((records, keeper));
        }
    }

    /// Forgets the concrete type, as pav-csi stores it.
    pub fn erase(self) -> Provisioner {
        Provisioner {
            inner: Arc::new(()),
            validate: self.validate,
            create: self.create,
            delete: self.delete,
            stage: self.stage,
            unstage: self.unstage,
            stats: self.stats,
            expand: self.expand,
            modify: self.modify,
            attach: self.attach,
            max_volumes_per_node: self.max_volumes_per_node,
            health: self.health,
            node_expand: self.node_expand,
            expansion: self.expansion,
            capacity: self.capacity,
            list: self.list,
            snapshot: self.snapshot,
            group_snapshot: self.group_snapshot,
            clones: self.clones,
            volume_modes: self.volume_modes,
            access_modes: self.access_modes,
            stage_on_publish: self.stage_on_publish,
            ephemeral: self.ephemeral,
            records: self.records,
        }
    }
}

impl<P> Provisioner<P> {
    /// The Validate touch point, if implemented.
    pub fn validate(&self) -> Option<&dyn Validate> {
        self.validate.as_deref()
    }

    /// The Create touch point, if implemented.
    pub fn create(&self) -> Option<&dyn Create> {
        match &self.records {
            Some((_, keeper)) if self.create.is_some() => Some(keeper.as_ref()),
            _ => self.create.as_deref(),
        }
    }

    /// The Delete touch point, if implemented.
    pub fn delete(&self) -> Option<&dyn Delete> {
        match &self.records {
            // Records forget a deleted volume even without the author's Delete.
            Some((_, keeper)) if self.create.is_some() => Some(keeper.as_ref()),
            _ => self.delete.as_deref(),
        }
    }

    /// The Stage touch point, if implemented.
    pub fn stage(&self) -> Option<&dyn Stage> {
        self.stage.as_deref()
    }

    /// The Unstage touch point, if implemented.
    pub fn unstage(&self) -> Option<&dyn Unstage> {
        self.unstage.as_deref()
    }

    /// The Stats touch point, if implemented.
    pub fn stats(&self) -> Option<&dyn Stats> {
        self.stats.as_deref()
    }

    /// The Expand touch point, if implemented.
    pub fn expand(&self) -> Option<&dyn Expand> {
        match &self.records {
            Some((_, keeper)) if self.expand.is_some() && self.create.is_some() => {
                Some(keeper.as_ref())
            }
            _ => self.expand.as_deref(),
        }
    }

    /// The Modify touch point, if implemented.
    pub fn modify(&self) -> Option<&dyn Modify> {
        match &self.records {
            Some((_, keeper)) if self.modify.is_some() && self.create.is_some() => {
                Some(keeper.as_ref())
            }
            _ => self.modify.as_deref(),
        }
    }

    /// The Attach touch point, if implemented.
    pub fn attach(&self) -> Option<&dyn Attach> {
        match &self.records {
            Some((_, keeper)) if self.attach.is_some() && self.create.is_some() => {
                Some(keeper.as_ref())
            }
            _ => self.attach.as_deref(),
        }
    }

    /// The most volumes one node holds, if limited; see
    /// [`max_volumes_per_node`](Provisioner::max_volumes_per_node).
    pub fn volumes_per_node_limit(&self) -> Option<u32> {
        self.max_volumes_per_node
    }

    /// The Health touch point, if implemented.
    pub fn health(&self) -> Option<&dyn Health> {
        self.health.as_deref()
    }

    /// The NodeExpand touch point, if implemented.
    pub fn node_expand(&self) -> Option<&dyn NodeExpand> {
        self.node_expand.as_deref()
    }

    /// The Capacity touch point, if implemented.
    pub fn capacity(&self) -> Option<&dyn Capacity> {
        match &self.records {
            Some((_, keeper)) if self.capacity.is_none() && keeper.has_budget() => {
                Some(keeper.as_ref())
            }
            _ => self.capacity.as_deref(),
        }
    }

    /// The List touch point, if implemented.
    pub fn list(&self) -> Option<&dyn List> {
        match &self.records {
            Some((_, keeper)) if self.list.is_none() && self.create.is_some() => {
                Some(keeper.as_ref())
            }
            _ => self.list.as_deref(),
        }
    }

    /// The Snapshot touch point, if implemented.
    pub fn snapshot(&self) -> Option<&dyn Snapshot> {
        match &self.records {
            Some((_, keeper)) if self.snapshot.is_some() => Some(keeper.as_ref()),
            _ => self.snapshot.as_deref(),
        }
    }

    /// The GroupSnapshot touch point, if implemented.
    pub fn group_snapshot(&self) -> Option<&dyn GroupSnapshot> {
        match &self.records {
            Some((_, keeper)) if self.group_snapshot.is_some() => Some(keeper.as_ref()),
            _ => self.group_snapshot.as_deref(),
        }
    }

    /// True when Create clones volumes; see [`clones_volumes`](Provisioner::clones_volumes).
    pub fn clones(&self) -> bool {
        self.clones
    }

    /// Whether Expand grows volumes in use; meaningful with [`expand`](Self::expand).
    pub fn expansion(&self) -> Expansion {
        self.expansion
    }

    /// True when Stage and Unstage run per client pod, in
    /// `NodePublishVolume` and `NodeUnpublishVolume`; see
    /// [`stage_on_publish`](Provisioner::stage_on_publish).
    pub fn stages_on_publish(&self) -> bool {
        self.stage_on_publish
    }

    /// True when `mode` is served.
    pub fn supports_volume_mode(&self, mode: VolumeMode) -> bool {
        self.volume_modes.contains(&mode)
    }

    /// True when `mode` is served.
    pub fn supports_access_mode(&self, mode: AccessMode) -> bool {
        self.access_modes.contains(&mode)
    }

    /// True when both single-node writer modes are served, told apart:
    /// `SingleNodeSingleWriter` (Kubernetes `ReadWriteOncePod`) and
    /// `SingleNodeMultiWriter` (`ReadWriteOnce`). pav-csi then advertises
    /// the `SINGLE_NODE_MULTI_WRITER` controller and node capabilities,
    /// without which Kubernetes refuses `ReadWriteOncePod` claims.
    pub fn tells_single_node_writers_apart(&self) -> bool {
        self.supports_access_mode(AccessMode::SingleNodeSingleWriter)
            && self.supports_access_mode(AccessMode::SingleNodeMultiWriter)
    }
}

impl<P> fmt::Debug for Provisioner<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provisioner")
            .field("validate", &self.validate.is_some())
            .field("create", &self.create.is_some())
            .field("delete", &self.delete.is_some())
            .field("stage", &self.stage.is_some())
            .field("unstage", &self.unstage.is_some())
            .field("stats", &self.stats.is_some())
            .field("expand", &self.expand.is_some())
            .field("modify", &self.modify.is_some())
            .field("attach", &self.attach.is_some())
            .field("max_volumes_per_node", &self.max_volumes_per_node)
            .field("health", &self.health.is_some())
            .field("node_expand", &self.node_expand.is_some())
            .field("expansion", &self.expansion)
            .field("capacity", &self.capacity.is_some())
            .field("list", &self.list.is_some())
            .field("snapshot", &self.snapshot.is_some())
            .field("group_snapshot", &self.group_snapshot.is_some())
            .field("clones", &self.clones)
            .field("volume_modes", &self.volume_modes)
            .field("access_modes", &self.access_modes)
            .field("stage_on_publish", &self.stage_on_publish)
            .field("ephemeral", &self.ephemeral)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_a_provisioner_serves_filesystems_on_one_node() {
        let provisioner = Provisioner::new(());
        for mode in AccessMode::ALL {
            assert_eq!(
                provisioner.supports_access_mode(mode),
                !mode.is_multi_node(),
                "{mode:?}"
            );
        }
        assert!(provisioner.tells_single_node_writers_apart());
        assert!(provisioner.supports_volume_mode(VolumeMode::Filesystem));
        assert!(!provisioner.supports_volume_mode(VolumeMode::Block));
    }

    #[test]
    fn declared_modes_replace_the_defaults() {
        let provisioner = Provisioner::new(()).access_modes([
            AccessMode::SingleNodeWriter,
            AccessMode::MultiNodeMultiWriter,
        ]);
        assert!(provisioner.supports_access_mode(AccessMode::MultiNodeMultiWriter));
        assert!(!provisioner.supports_access_mode(AccessMode::SingleNodeReaderOnly));
        assert!(!provisioner.tells_single_node_writers_apart());
    }
}
