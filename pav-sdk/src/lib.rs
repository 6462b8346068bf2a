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
//! | [`Provisioner::stage_on_publish`] | `NodePublishVolume` / `NodeUnpublishVolume` run Stage / Unstage | staging per client pod ([`PodInfo`]) | yes: default is per node |
//! | [`CreateRequest::name`] | `CreateVolumeRequest.name` | `pvc-<uid>` | idempotency key |
//! | [`Volume::handle`] | `volume_id` | `pv.spec.csi.volumeHandle` | |
//! | [`Volume::context`] | `volume_context` | `pv.spec.csi.volumeAttributes` | |
//! | [`CreateRequest::parameters`] | `parameters` | `StorageClass.parameters` | |
//! | [`Claim`] | `csi.storage.k8s.io/pvc/*` parameters | PVC name/namespace (`--extra-create-metadata`) | |
//! | [`Secrets`] | `secrets` | StorageClass secret references | never logged |
//! | [`VolumeMode`] | `VolumeCapability.access_type` | `volumeMode` | |
//! | [`AccessMode`] | `VolumeCapability.access_mode` | `accessModes` | |
//! | [`CapacityRange`] | `capacity_range` | `resources.requests/limits.storage` | |
//! | [`TopologyRequirement`] | `accessibility_requirements` | `allowedTopologies`, pod scheduling | |
//! | [`Error`] | gRPC status code | event on the PVC/pod | |
//!
//! # A complete provisioner
//!
//! Each volume is a directory under a root: Create makes it, Delete removes it,
//! Stage says where it is. This is everything an author writes; handing
//! `provisioner` to `pav_csi::Driver::builder("example.com/hostdir")` serves it.
//!
//! ```
//! use pav_sdk::{
//!     Create, CreateRequest, Delete, DeleteRequest, Error, Provisioner, Result, Stage,
//!     StageRequest, Staged, Volume,
//! };
//! use std::path::PathBuf;
//!
//! /// Each volume is a directory named after its handle.
//! struct HostDir {
//!     root: PathBuf,
//! }
//!
//! #[pav_sdk::async_trait]
//! impl Create for HostDir {
//!     async fn create(&self, req: CreateRequest) -> Result<Volume> {
//!         if let Some(bad) = req.parameters.keys().next() {
//!             return Err(Error::InvalidArgument(format!("unknown parameter {bad:?}")));
//!         }
//!         let handle = format!("hostdir-{}", req.name);
//!         std::fs::create_dir_all(self.root.join(&handle))?;
//!         // Directories are not size-limited: report the request back.
//!         Ok(Volume::new(handle, req.capacity.min_bytes.unwrap_or(0)))
//!     }
//! }
//!
//! #[pav_sdk::async_trait]
//! impl Delete for HostDir {
//!     async fn delete(&self, req: DeleteRequest) -> Result<()> {
//!         match std::fs::remove_dir_all(self.root.join(&req.handle)) {
//!             Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
//!             _ => Ok(()), // already gone is success
//!         }
//!     }
//! }
//!
//! #[pav_sdk::async_trait]
//! impl Stage for HostDir {
//!     async fn stage(&self, req: StageRequest) -> Result<Staged> {
//!         let dir = self.root.join(&req.handle);
//!         match dir.is_dir() {
//!             true => Ok(Staged::at(dir)), // pav-csi bind-mounts it for the pod
//!             false => Err(Error::NotFound(req.handle)),
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<()> {
//! let root = std::env::temp_dir().join("pav-sdk-doctest");
//! let provisioner = Provisioner::new(HostDir { root }).with_create().with_delete().with_stage();
//!
//! let req = pav_sdk::build::create("pvc-1", pav_sdk::VolumeMode::Filesystem);
//! let volume = provisioner.create().unwrap().create(req).await?;
//! assert_eq!(volume.handle, "hostdir-pvc-1");
//! provisioner.delete().unwrap().delete(pav_sdk::build::delete(volume.handle)).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Rules a provisioner follows
//!
//! * **Idempotency.** The CO retries every call after timeouts and restarts.
//!   `create` with a name it has seen returns the same volume (or
//!   [`Error::AlreadyExists`] if the new request is incompatible); `delete`,
//!   `stage` and `unstage` of something already done succeed. pav-csi also
//!   caches recent `CreateVolume` answers, but only the provisioner survives
//!   restarts.
//! * **No concurrency per volume.** pav-csi never runs two calls for the same
//!   volume (or name) at once; a second one is answered `ABORTED` and retried.
//! * **Slow is fine.** Calls are async and may take minutes.
//! * **Secrets stay secret.** [`Secrets`] has no `Display` and a redacting
//!   `Debug`; keep values out of error messages.

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

mod error;
mod provisioner;
mod types;

pub use async_trait::async_trait;
pub use error::{Error, Result};
pub use provisioner::{Create, Delete, Provisioner, Stage, Unstage, Validate};
pub use types::{
    AccessMode, CapacityRange, Claim, CreateRequest, DeleteRequest, MountOptions, Parameters,
    PodInfo, Secrets, StageRequest, Staged, Topology, TopologyRequirement, UnstageRequest,
    ValidateRequest, Volume, VolumeMode, build,
};
