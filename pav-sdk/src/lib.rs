//! Write a Kubernetes volume provisioner as a handful of async functions;
//! [`pav-csi`](https://docs.rs/pav-csi) serves it as a conformant CSI driver.
//!
//! Like the object-bucket provisioning library, the author writes storage
//! logic only and the library does the protocol work: request validation,
//! CSI size limits, idempotency bookkeeping, one operation per volume at a
//! time, mounting into kubelet's paths and mapping errors to gRPC codes.
//!
//! # Concepts
//!
//! | pav-sdk | CSI RPC(s) | Kubernetes | Optional? |
//! |---|---|---|---|
//! | [`Validate`] | `CreateVolume` (first), `ValidateVolumeCapabilities` | PVC/PV checked against the StorageClass | yes: volume/access modes are still checked |
//! | [`Create`] | `CreateVolume` | dynamic provisioning of a PVC | yes: static provisioning only |
//! | [`Delete`] | `DeleteVolume` | PV with `reclaimPolicy: Delete` released | yes: nothing to delete |
//! | [`Stage`] | `NodeStageVolume` (+ bind mounts in `NodePublishVolume`) | volume made available on the pod's node | needed to serve the node service |
//! | [`Unstage`] | `NodeUnstageVolume` | last pod on the node using it gone | yes: nothing to undo |
//! | [`Stats`] | `NodeGetVolumeStats` | kubelet's volume metrics and health events | yes: `statvfs` of the volume path |
//! | [`Expand`] | `ControllerExpandVolume` | a bound claim's request grows (external-resizer) | yes: claims cannot grow |
//! | [`Modify`], [`CreateRequest::mutable_parameters`] | `ControllerModifyVolume`; `CreateVolume.mutable_parameters` | a claim's VolumeAttributesClass (`volumeAttributesClassName`) at creation and when it changes (external-resizer) | yes: `MODIFY_VOLUME` not advertised, classes refused |
//! | [`Attach`], [`Provisioner::max_volumes_per_node`], [`Stage::max_volumes_now`] | `ControllerPublishVolume`, `ControllerUnpublishVolume`; `NodeGetInfo.max_volumes_per_node`; [`StageRequest::publish_context`] | VolumeAttachment (external-attacher): a disk attached to the node before it is staged | yes: nothing to attach |
//! | [`Capacity`] | `GetCapacity` | CSIStorageCapacity objects the scheduler places `WaitForFirstConsumer` claims by (external-provisioner `--enable-capacity`) | yes: the scheduler ignores space |
//! | [`Health`], [`HealthProblem`] | `NodeGetVolumeHealth` (CSI v1.13); `ControllerGetVolume`, `ListVolumes`' and `NodeGetVolumeStats`' `volume_condition` | the pod's `status.volumeHealth` from Kubernetes' v1.37 kubelet, its `kubelet_volume_stats_health_status_abnormal` metric before (feature gate `CSIVolumeHealth`), external-health-monitor's events on the claim | yes: healthy unless Stats or List say otherwise |
//! | [`List`] | `ListVolumes` | the external-health-monitor's volume conditions; reconciling COs | yes |
//! | [`Snapshot`] | `CreateSnapshot`, `DeleteSnapshot`, `ListSnapshots` | VolumeSnapshot (csi-snapshotter sidecar, snapshot-controller) | yes |
//! | [`GroupSnapshot`] | `CreateVolumeGroupSnapshot`, `DeleteVolumeGroupSnapshot`, `GetVolumeGroupSnapshot` (GroupController service) | VolumeGroupSnapshot (csi-snapshotter and snapshot-controller with `CSIVolumeGroupSnapshot=true`) | yes |
//! | [`Provisioner::keep_records`] | `CreateVolume` (repeats), `DeleteVolume` (unknown ids), `ListVolumes`, `GetCapacity`, `ListSnapshots` | idempotency across restarts, volume listing, CSIStorageCapacity from a budget | yes: the provisioner keeps its own records |
//! | [`CreateRequest::source`], [`Provisioner::clones_volumes`] | `CreateVolume.volume_content_source` | a claim's `dataSource`: a VolumeSnapshot (restore) or a claim (clone) | yes: refused |
//! | [`NodeExpand`] | `NodeExpandVolume` | kubelet grows the filesystem where the volume is published | yes: nothing to grow on the node |
//! | [`Provisioner::ephemeral`] | `NodePublishVolume` with `csi.storage.k8s.io/ephemeral` creates and stages, `NodeUnpublishVolume` unstages and deletes | CSI ephemeral inline volumes (a pod's `csi:` volume; CSIDriver `volumeLifecycleModes: [Persistent, Ephemeral]`) | yes: refused |
//! | [`Provisioner::stage_on_publish`] | `NodePublishVolume` / `NodeUnpublishVolume` run Stage / Unstage | staging per client pod ([`PodInfo`]) | yes: default is per node |
//! | [`CreateRequest::name`] | `CreateVolumeRequest.name` | `pvc-<uid>` | idempotency key |
//! | [`Volume::handle`] | `volume_id` | `pv.spec.csi.volumeHandle` | |
//! | [`Volume::context`] | `volume_context` | `pv.spec.csi.volumeAttributes` | |
//! | [`CreateRequest::parameters`] | `parameters` | `StorageClass.parameters` | |
//! | [`Claim`] | `csi.storage.k8s.io/pvc/*`, `.../pv/name` parameters | PVC name, namespace and PV name (external-provisioner `--extra-create-metadata`); labels, annotations and selected node with pav-csi's `kube` feature | |
//! | [`Secrets`] | `secrets` | StorageClass secret references | never logged |
//! | [`ServiceAccountTokens`] ([`StageRequest::service_account_tokens`]) | `csi.storage.k8s.io/serviceAccount.tokens` of `NodePublishVolume`, in `secrets` (else `volume_context`), taken out of both | the client pod's service-account tokens (CSIDriver `tokenRequests`; `serviceAccountTokenInSecrets: true`), renewed by republish (`requiresRepublish: true`), which runs Stage again | never logged; staging on publish and ephemeral volumes only |
//! | [`VolumeMode`] | `VolumeCapability.access_type` | `volumeMode` | |
//! | [`AccessMode`] | `VolumeCapability.access_mode` | `accessModes` | served: [`AccessMode::SINGLE_NODE`] unless [`Provisioner::access_modes`] says more; `ReadWriteOncePod` is `SingleNodeSingleWriter`, `ReadWriteOnce` `SingleNodeMultiWriter` |
//! | [`CapacityRange`] | `capacity_range` | `resources.requests/limits.storage` | |
//! | [`TopologyRequirement`] | `accessibility_requirements` | `allowedTopologies` (requisite); the selected node's topology first in `preferred` (`WaitForFirstConsumer`) | |
//! | [`Error`] | gRPC status code | event on the PVC/pod | |
//!
//! # A complete provisioner
//!
//! Each volume is a directory under a root, within a capacity budget:
//! Create makes it, Delete removes it, Stage says where it is, and pav-csi
//! bind-mounts it for the pod. This is everything an author writes; it is
//! `examples/hostdir/src/provisioner.rs` of the repository, whose `main`
//! (on [pav-csi's front page](https://docs.rs/pav-csi)) serves it, and CI
//! runs the CSI conformance suite (csi-sanity) against it.
//!
//! <!-- examples/hostdir/src/provisioner.rs -->
//! ```
//! // HostDir: each volume is a directory on the node, within a capacity
//! // budget. This file is pav-sdk's front-page example (examples/hostdir in
//! // the repository, run against csi-sanity in CI).
//!
//! use std::os::unix::fs::MetadataExt;
//! use std::path::{Path, PathBuf};
//! use std::sync::Mutex;
//!
//! use pav_sdk::{
//!     Create, CreateRequest, Delete, DeleteRequest, Error, Result, Stage, StageRequest, Staged,
//!     Stats, StatsRequest, Usage, Volume, VolumeCondition, VolumeId, VolumeStats, async_trait,
//! };
//!
//! /// Size of a volume whose claim asks for none: 1 GiB.
//! const DEFAULT_SIZE: u64 = 1 << 30;
//!
//! /// Volumes live in `<root>/volumes/<id>/`: the volume's files in `data/`,
//! /// its size in bytes in `size`. A volume is built in `<root>/partial/<id>/`
//! /// and renamed into place, so a crash never leaves half a volume.
//! pub struct HostDir {
//!     root: PathBuf,
//!     /// Bytes all volumes together may reserve.
//!     budget: u64,
//!     /// Held while creating, so two volumes cannot both fit in the last space.
//!     creating: Mutex<()>,
//! }
//!
//! impl HostDir {
//!     /// Keeps volumes under `root`, reserving at most `budget` bytes.
//!     pub fn new(root: PathBuf, budget: u64) -> std::io::Result<Self> {
//!         for dir in ["volumes", "partial"] {
//!             std::fs::create_dir_all(root.join(dir))?;
//!         }
//!         let creating = Mutex::new(());
//!         Ok(Self {
//!             root,
//!             budget,
//!             creating,
//!         })
//!     }
//!
//!     /// The directory of volume `id`. The id comes from the CO: only
//!     /// `path_component` makes it safe to join (`..` or `a/b` are refused).
//!     fn volume(&self, id: &VolumeId) -> Result<PathBuf> {
//!         Ok(self.root.join("volumes").join(id.path_component()?))
//!     }
//!
//!     /// The recorded size of the volume in `dir`, `None` if there is none.
//!     fn size(dir: &Path) -> Result<Option<u64>> {
//!         match std::fs::read_to_string(dir.join("size")) {
//!             Ok(text) => Ok(Some(text.trim().parse().map_err(Error::internal)?)),
//!             Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
//!             Err(e) => Err(e.into()),
//!         }
//!     }
//!
//!     /// Bytes used below `dir`, symlinks not followed.
//!     fn used(dir: &Path) -> std::io::Result<u64> {
//!         let mut bytes = 0;
//!         for entry in std::fs::read_dir(dir)? {
//!             let entry = entry?;
//!             let meta = entry.metadata()?; // of a symlink, not its target
//!             bytes += meta.blocks() * 512;
//!             if meta.is_dir() {
//!                 bytes += Self::used(&entry.path())?;
//!             }
//!         }
//!         Ok(bytes)
//!     }
//!
//!     /// Bytes reserved by all volumes.
//!     fn reserved(&self) -> Result<u64> {
//!         let mut total = 0;
//!         for entry in std::fs::read_dir(self.root.join("volumes"))? {
//!             total += Self::size(&entry?.path())?.unwrap_or(0);
//!         }
//!         Ok(total)
//!     }
//! }
//!
//! #[async_trait]
//! impl Create for HostDir {
//!     async fn create(&self, req: CreateRequest) -> Result<Volume> {
//!         if let Some(key) = req.parameters.keys().next() {
//!             return Err(Error::InvalidArgument(format!("unknown parameter {key:?}")));
//!         }
//!         // The handle is the name: Delete gets only the handle, and the name
//!         // is all it needs. A name that cannot be a directory is refused.
//!         let id = VolumeId::new(req.name);
//!         let dir = self
//!             .volume(&id)
//!             .map_err(|e| Error::InvalidArgument(e.to_string()))?;
//!         let _one_at_a_time = self.creating.lock().unwrap_or_else(|e| e.into_inner());
//!         if let Some(size) = Self::size(&dir)? {
//!             // Created before (a retry): the same volume, if it still fits the request.
//!             return match req.capacity.contains(size) {
//!                 true => Ok(Volume::new(id, size)),
//!                 false => Err(Error::AlreadyExists(format!(
//!                     "volume {id} has {size} bytes"
//!                 ))),
//!             };
//!         }
//!         let size = req.capacity.choose(DEFAULT_SIZE, 1)?;
//!         if size > self.budget {
//!             let budget = self.budget;
//!             return Err(Error::OutOfRange(format!(
//!                 "{size} bytes exceed the budget of {budget}"
//!             )));
//!         }
//!         if self.reserved()?.saturating_add(size) > self.budget {
//!             return Err(Error::ResourceExhausted(format!(
//!                 "no room for {size} more bytes"
//!             )));
//!         }
//!         let partial = self.root.join("partial").join(id.path_component()?);
//!         if partial.exists() {
//!             std::fs::remove_dir_all(&partial)?; // left by a crash
//!         }
//!         std::fs::create_dir_all(partial.join("data"))?;
//!         std::fs::write(partial.join("size"), size.to_string())?;
//!         std::fs::rename(&partial, &dir)?;
//!         Ok(Volume::new(id, size))
//!     }
//!
//!     async fn exists(&self, id: &VolumeId) -> Result<bool> {
//!         Ok(Self::size(&self.volume(id)?)?.is_some())
//!     }
//! }
//!
//! #[async_trait]
//! impl Delete for HostDir {
//!     async fn delete(&self, req: DeleteRequest) -> Result<()> {
//!         // An id that is no directory name is NOT_FOUND, which is "deleted".
//!         match std::fs::remove_dir_all(self.volume(&req.handle)?) {
//!             Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
//!             _ => Ok(()), // already gone is success
//!         }
//!     }
//! }
//!
//! #[async_trait]
//! impl Stage for HostDir {
//!     async fn stage(&self, req: StageRequest) -> Result<Staged> {
//!         let data = self.volume(&req.handle)?.join("data");
//!         match data.is_dir() {
//!             true => Ok(Staged::at(data)), // pav-csi bind-mounts it for the pod
//!             false => Err(Error::NotFound(format!(
//!                 "volume {} does not exist",
//!                 req.handle
//!             ))),
//!         }
//!     }
//! }
//!
//! /// Without this, NodeGetVolumeStats would report the filesystem that holds
//! /// the root: a 1 GiB volume would show the whole disk.
//! #[async_trait]
//! impl Stats for HostDir {
//!     async fn stats(&self, req: StatsRequest) -> Result<VolumeStats> {
//!         let dir = self.volume(&req.handle)?;
//!         let size = Self::size(&dir)?.ok_or_else(|| Error::NotFound(req.handle.to_string()))?;
//!         let used = Self::used(&dir.join("data"))?;
//!         let bytes = Usage {
//!             total: size,
//!             used,
//!             available: size.saturating_sub(used),
//!         };
//!         let condition = match used > size {
//!             true => VolumeCondition::abnormal(format!("{used} bytes used of {size}")),
//!             false => VolumeCondition::healthy(),
//!         };
//!         // Inodes stay as measured: the host filesystem's, shared by all volumes.
//!         let mut stats = req.measured.unwrap_or_default();
//!         stats.bytes = Some(bytes);
//!         stats.condition = Some(condition);
//!         Ok(stats)
//!     }
//! }
//! ```
//!
//! # A provisioner that leaves the bookkeeping to pav-sdk
//!
//! Each volume is a tmpfs of its own size on the node, grown online and
//! snapshotted by copy. pav-sdk [keeps the records](Provisioner::keep_records)
//! (which volumes and snapshots exist, their sizes and sources, the
//! node's budget: repeated Creates, Deletes, ListVolumes, GetCapacity,
//! ListSnapshots and the controller's side of growth are answered from
//! them, and Stage and NodeExpand get their volume's record,
//! [`StageRequest::record`]); pav-csi mounts with system calls
//! (`pav_csi::mount`, async, its errors converting into [`Error`]) and
//! gives each volume a node directory ([`StageRequest::node_dir`]) that
//! it removes, unmounted, once the volume is deleted, wherever the Delete
//! ran, so the provisioner has no Delete: this is
//! `examples/tmpfs/src/provisioner.rs`,
//! the whole of the storage logic, which passes csi-sanity and pav-csi's
//! conformance checks (`pav_csi::testing`). Its `main` builds it with
//! `pav_sdk::provisioner!(tmpfs).keep_records(Records::in_dir(dir).budget(bytes))`.
//!
//! <!-- examples/tmpfs/src/provisioner.rs -->
//! ```ignore
//! // Tmpfs: node-local volumes in memory, each a tmpfs of its own size,
//! // grown online and snapshotted by copy. pav-sdk keeps the records (which
//! // volumes and snapshots exist, their sizes and sources, the node's
//! // budget), hands each node call its volume's record and grows volumes on
//! // the controller's side; pav-csi checks, mounts, binds, and gives each
//! // volume a node directory that it removes, unmounted, once the volume is
//! // deleted: this file is the storage logic only.
//!
//! use pav_csi::files;
//! use pav_csi::mount::{self, MountFlags};
//! use pav_sdk::prelude::*;
//!
//! /// A volume holds data: no set-user-id programs, no device files.
//! const FLAGS: MountFlags = MountFlags::NOSUID.union(MountFlags::NODEV);
//!
//! /// Volume `<id>` is a tmpfs mounted on its node directory from its first
//! /// Stage until it is deleted, so its files outlive its pods (not the
//! /// node: after a reboot it starts empty, at its recorded size), in its
//! /// `volume/` directory; snapshot `<name>` is a copy of that in
//! /// `<snapshots>/<name>`.
//! pub struct Tmpfs {
//!     /// Where snapshots live.
//!     pub snapshots: std::path::PathBuf,
//!     /// This node's topology: the volumes are accessible from it only.
//!     pub node: Topology,
//! }
//!
//! impl Tmpfs {
//!     /// Where snapshot `id` lives; an id that is not one file name cannot
//!     /// be one of ours (`NOT_FOUND`).
//!     fn snapshot(&self, id: &str) -> Result<std::path::PathBuf> {
//!         Ok(self.snapshots.join(VolumeId::new(id).path_component()?))
//!     }
//! }
//!
//! #[async_trait]
//! impl Create for Tmpfs {
//!     async fn create(&self, req: CreateRequest) -> Result<Volume> {
//!         let size = req.capacity.choose(64 << 20, 4096)?; // none asked: 64 MiB
//!         // The node the CO chose (a waiting claim's pod's), else this one.
//!         let node = req.topology.chosen().unwrap_or(&self.node).clone();
//!         Ok(Volume::new(req.name, size).accessible_from(node))
//!     }
//! }
//!
//! #[async_trait]
//! impl Stage for Tmpfs {
//!     async fn stage(&self, req: StageRequest) -> Result<Staged> {
//!         let (volume, dir) = (req.recorded()?, req.node_dir()?);
//!         let data = format!("size={},mode=0777", volume.capacity_bytes);
//!         // Mounted once, so its files survive Unstage and the next Stage;
//!         // staged from a directory inside, which kubelet can unstage.
//!         let fresh = mount::mount_once("tmpfs", dir, "tmpfs", FLAGS, &data).await?;
//!         let root = files::volume_root(dir.join("volume")).await?;
//!         if let (true, Some(RecordedSource::Snapshot(id))) = (fresh, &volume.source) {
//!             files::copy_tree(self.snapshot(id)?, &root).await?;
//!         }
//!         Ok(Staged::at(root))
//!     }
//! }
//!
//! /// Grown by a remount to the size pav-sdk recorded for it.
//! #[async_trait]
//! impl NodeExpand for Tmpfs {
//!     async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
//!         let size = req.capacity_bytes()?;
//!         mount::remount(req.node_dir()?, FLAGS, &format!("size={size}")).await?;
//!         Ok(size)
//!     }
//! }
//!
//! #[async_trait]
//! impl Snapshot for Tmpfs {
//!     async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
//!         let from = req.source_node_dir()?.join("volume");
//!         let to = self.snapshot(&req.name)?;
//!         files::remove_all(&to).await?; // what a crash mid-copy left
//!         match from.exists() {
//!             true => files::copy_tree(&from, &to).await?,
//!             false => std::fs::create_dir_all(&to)?, // never staged: empty
//!         }
//!         // The volume's size; a volume never staged has no tmpfs: 0.
//!         let size = rustix::fs::statvfs(&from).map_or(0, |s| s.f_blocks * s.f_frsize);
//!         let now = std::time::SystemTime::now();
//!         Ok(SnapshotInfo::new(req.name, req.source.as_str(), size, now))
//!     }
//!
//!     async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
//!         Ok(files::remove_all(self.snapshot(&req.handle)?).await?)
//!     }
//! }
//! ```
//!
//! # Errors and retries
//!
//! Return [`Error`] variants; pav-csi answers each with the gRPC code the
//! CSI spec names. Which codes the Kubernetes side treats as "still in
//! progress" (calls again) and which as final differs per call: each
//! trait method's documentation has the table (see [`Create::create`]).
//!
//! # Serving it
//!
//! [pav-csi](https://docs.rs/pav-csi)'s front page has the complete `main`
//! for this provisioner: `#[tokio::main]` needs tokio's `macros` and
//! `rt-multi-thread` features, and pav-csi logs through `tracing`, so a
//! driver without a subscriber logs nothing.
//!
//! # Rules a provisioner follows
//!
//! * **Idempotency.** The CO retries every call after timeouts and restarts.
//!   `create` with a name it has seen returns the same volume (or
//!   [`Error::AlreadyExists`] if the new request is incompatible); `delete`,
//!   `stage` and `unstage` of something already done succeed. pav-csi also
//!   caches recent `CreateVolume` answers, but only the provisioner survives
//!   restarts, unless it [keeps records](Provisioner::keep_records): then
//!   pav-sdk answers repeated creates, deletes of unknown volumes, listing
//!   and capacity from them ([`records`]).
//! * **No concurrency per volume.** pav-csi never runs two calls for the same
//!   volume (or name) at once; a second one is answered `ABORTED` and retried.
//! * **Slow is fine.** Calls are async and may take minutes.
//! * **Secrets stay secret.** [`Secrets`] and [`ServiceAccountTokens`]
//!   have no `Display` and a redacting `Debug`; keep values out of error
//!   messages.
//! * **Your data stays out of kubelet's way.** Keep the provisioner's own
//!   data (volumes, records) outside kubelet's directory (`/var/lib/<driver>`
//!   on the node), or in pav-csi's state directory (`DriverBuilder::state_dir`,
//!   by default `<kubelet dir>/plugins/<driver name>`, beside its `staged/`):
//!   pav-csi keeps staging and target paths out of that directory only.
//!   Anywhere else in kubelet's directory a staging or target path may lie
//!   over your data, and what is mounted there hides it.

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

// The modules use each other without a cycle (pav's tests/module_graph.rs),
// from the bottom up: `error` and `volume_id`; `types`, the values the
// requests share (a volume's record among them, which `records` keeps);
// the touch points with their requests (`attach`,
// `health`, `snapshot`, `touch_points`, then `group_snapshot` over
// `snapshot`); `build`, their constructors; `records`, which wraps the
// touch points; and on top `provisioner`, which bundles them and the
// record keeper, with `ephemeral` and `register` over it; `prelude`
// re-exports what storage logic names.
mod attach;
pub mod build;
pub mod ephemeral;
mod error;
pub mod group_snapshot;
mod health;
pub mod populate;
pub mod prelude;
mod provisioner;
pub mod records;
// Not an API: what the `provisioner!` macro expands to.
#[doc(hidden)]
pub mod register;
mod snapshot;
mod touch_points;
mod types;
mod volume_id;

pub use async_trait::async_trait;
pub use attach::{Attach, AttachRequest, Attached, DetachRequest};
pub use error::{Error, Result};
pub use group_snapshot::{
    DeleteGroupSnapshotRequest, GetGroupSnapshotRequest, GroupSnapshot, GroupSnapshotInfo,
    GroupSnapshotRequest,
};
pub use health::{Health, HealthRequest};
pub use populate::{DataSourceKind, ObjectName, Populate, PopulateRequest};
pub use provisioner::{Expansion, Provisioner};
pub use snapshot::{DeleteSnapshotRequest, Snapshot, SnapshotInfo, SnapshotRequest};
pub use touch_points::{
    Capacity, Create, Delete, Expand, List, Modify, NodeExpand, Stage, Stats, Unstage, Validate,
};
pub use types::{
    AccessMode, AvailableCapacity, CapacityRange, CapacityRequest, Claim, ContentSource,
    CreateRequest, DeleteRequest, ExpandRequest, Expanded, HealthProblem, ListedVolume,
    ModifyRequest, MountOptions, NodeCleanUpRequest, NodeExpandRequest, Parameters, PodInfo,
    Secrets, ServiceAccountToken, ServiceAccountTokens, StageRequest, Staged, StatsRequest,
    TokensError, Topology, TopologyRequirement, UnstageRequest, Usage, ValidateRequest, Volume,
    VolumeCondition, VolumeMode, VolumeStats,
};
pub use volume_id::{PathComponentError, VolumeId};
