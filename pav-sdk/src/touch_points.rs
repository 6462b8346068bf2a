//! The touch points of a volume's life: validated, created, deleted,
//! staged and unstaged on nodes, measured, grown and modified, counted
//! against the capacity and listed. Those with a Kubernetes object of
//! their own have a module of their own, with their requests:
//! [`Attach`](crate::Attach), [`Health`](crate::Health),
//! [`Snapshot`](crate::Snapshot) and [`GroupSnapshot`](crate::GroupSnapshot).
//! [`Provisioner`](crate::Provisioner) bundles them.
//!
//! Each method's documentation names the CSI call it answers, the
//! [`Error`](crate::Error) variants (gRPC codes) it may return, and what the
//! Kubernetes component that made the call does with each: external-provisioner
//! for Create and Delete, external-resizer for Expand and Modify,
//! external-attacher for [`Attach`](crate::Attach), kubelet for Stage,
//! Unstage and Stats. The traits
//! are written with [`async_trait`](crate::async_trait) (implement them
//! with `#[pav_sdk::async_trait]`) so that [`Provisioner`](crate::Provisioner)
//! can hold them as trait objects.

use async_trait::async_trait;

use crate::types::{
    AvailableCapacity, CapacityRequest, CreateRequest, DeleteRequest, ExpandRequest, Expanded,
    ListedVolume, ModifyRequest, NodeCleanUpRequest, NodeExpandRequest, StageRequest, Staged,
    StatsRequest, UnstageRequest, ValidateRequest, Volume, VolumeStats,
};
use crate::{Result, VolumeId};

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
    /// With [records](crate::Provisioner::keep_records) pav-sdk answers from
    /// them and never calls this; the default, for that case, is `INTERNAL`.
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
    /// [`Provisioner::stage_on_publish`](crate::Provisioner::stage_on_publish),
    /// `NodePublishVolume` once per pod.
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
    /// With [`Provisioner::stage_on_publish`](crate::Provisioner::stage_on_publish)
    /// nothing undoes a Stage that
    /// failed with a final error: kubelet calls `NodeUnpublishVolume` (and
    /// so Unstage) after a failed publish only when its answer was one of
    /// those three codes or a timeout. Such a Stage must leave nothing
    /// behind.
    /// A call whose client gives up (kubelet's deadline) still runs to its
    /// end, and the volume stays busy (`ABORTED` to a repeat) until it
    /// returns.
    async fn stage(&self, req: StageRequest) -> Result<Staged>;

    /// Releases what this node still holds of a deleted volume (a loop
    /// device attached to a file in its node directory, a session of a
    /// daemon), before pav-csi unmounts everything mounted in the node
    /// directory and removes it ([`StageRequest::node_dir`](crate::StageRequest::node_dir),
    /// with records only).
    ///
    /// **Called by pav-csi, not by a CSI call**, on each node that has the
    /// volume's node directory, once the volume is not staged there and
    /// the records no longer hold it: in the DeleteVolume of a process that
    /// serves the node too, else after an Unstage, at the node plugin's
    /// start or every minute. It must succeed on what is released already
    /// (it runs again after a crash). Default: nothing to release.
    ///
    /// **Codes:** any error leaves the directory for the next round
    /// (logged); a DeleteVolume in the same process answers it.
    async fn clean_up(&self, req: NodeCleanUpRequest) -> Result<()> {
        let _ = req;
        Ok(())
    }

    /// The most volumes this node can hold now, those it holds included,
    /// when that changes while the driver runs (disk slots another
    /// program took, loop devices in use elsewhere); `None` keeps the
    /// provisioner's fixed
    /// [`max_volumes_per_node`](crate::Provisioner::max_volumes_per_node).
    /// The default: `None`.
    ///
    /// **CSI call:** `NodeGetInfo` (`max_volumes_per_node`), from kubelet
    /// when the node plugin registers and, with the CSIDriver's
    /// `nodeAllocatableUpdatePeriodSeconds` (Kubernetes 1.35+, or 1.34
    /// with its `MutableCSINodeAllocatableCount` gate; at least 10),
    /// every that many seconds and at once after an attach failed
    /// `RESOURCE_EXHAUSTED`: kubelet copies the answer into the node's
    /// CSINode (`spec.drivers[].allocatable.count`), which the scheduler
    /// counts the node's volumes of this driver against. pav-csi's
    /// `DriverBuilder::max_volumes_per_node`, when set, wins. `Some(0)`
    /// means no limit, as CSI has it. Keep it cheap: kubelet calls it
    /// while pods wait.
    ///
    /// **Codes:** any error fails `NodeGetInfo`; kubelet keeps the count it
    /// had (at registration: it retries registering).
    async fn max_volumes_now(&self) -> Result<Option<u32>> {
        Ok(None)
    }
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
    /// staging path (with
    /// [`Provisioner::stage_on_publish`](crate::Provisioner::stage_on_publish):
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
    /// not exist; [`OutOfRange`](crate::Error::OutOfRange) (or
    /// [`InvalidArgument`](crate::Error::InvalidArgument)) when the size
    /// can never be provided: name the limit in the message;
    /// [`ResourceExhausted`](crate::Error::ResourceExhausted) when there is
    /// no room now. The claim shows a `VolumeResizeFailed` event with the
    /// message. external-resizer (v2, Kubernetes' recovery
    /// from expansion failure, GA in v1.34) marks an `OUT_OF_RANGE` resize **infeasible**
    /// (`ControllerResizeInfeasible` in the claim's
    /// `status.allocatedResourceStatuses`) and calls again with that size
    /// only every few minutes; the claim's owner recovers by lowering the
    /// request (to more than the claim's `status.capacity`), which is
    /// called at once. Other errors are retried with exponential backoff.
    /// [`CapacityRange::choose`](crate::CapacityRange::choose) answers
    /// `OutOfRange` for a size past the range's limit.
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
    /// With [records](crate::Provisioner::keep_records), pav-sdk answers
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
    /// checked that a volume is mounted at `req.volume_path`. Storage
    /// that grows on its node only needs no [`Expand`] when pav-sdk keeps
    /// records: it answers the controller's call and records the size,
    /// which this gets as [`NodeExpandRequest::record`](crate::NodeExpandRequest::record).
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
