//! pav-csi's request checks, for its fuzz targets (`fuzz/`) only: not an
//! API, and not covered by semver. Compiled with the cargo feature
//! `fuzzing`.
//!
//! The targets call the very `check` functions the services call, so a
//! fuzz run tests what the driver runs.

use std::path::PathBuf;
use std::sync::Mutex;

use pav_sdk::{CreateRequest, Provisioner};
use tonic::Status;

use crate::controller::{create_volume, delete_volume};
use crate::csi;
use crate::guard::InFlight;
use crate::node::unstage::UnstageError;
use crate::paths::Confinement;
use crate::shared::Shared;

/// The controller's checks against one provisioner's declarations.
#[derive(Debug)]
pub struct Controller(Shared);

impl Controller {
    /// Checks as a controller serving `provisioner` would; `topology_aware`
    /// as a driver given a node topology.
    pub fn new(provisioner: Provisioner, topology_aware: bool) -> Self {
        Self(Shared {
            name: "fuzz.pav.dev".into(),
            version: String::new(),
            provisioner,
            in_flight: InFlight::default(),
            create_cache: Mutex::default(),
            snapshot_cache: Mutex::default(),
            topology_aware,
            serves_node: false,
            staged: None,
            node_dirs: None,
            node_dirs_stale: tokio::sync::Notify::new(),
            #[cfg(feature = "kube")]
            claims: None,
        })
    }

    /// `CreateVolume`'s check: the provisioner's request, or the refusal.
    pub fn check_create_volume(
        &self,
        req: &csi::CreateVolumeRequest,
    ) -> Result<CreateRequest, Status> {
        let checked = create_volume::check(req, &self.0).map_err(Status::from)?;
        Ok(checked.create)
    }

    /// `DeleteVolume`'s check: the volume id, or the refusal.
    pub fn check_delete_volume(req: &csi::DeleteVolumeRequest) -> Result<String, Status> {
        let checked = delete_volume::check(req).map_err(Status::from)?;
        Ok(checked.volume_id)
    }
}

/// The node service's staging and target path check.
#[derive(Debug)]
pub struct Paths(Confinement);

impl Paths {
    /// Paths confined to `kubelet_dir`, apart from `state_dir`.
    pub fn new(kubelet_dir: PathBuf, state_dir: PathBuf) -> Self {
        Self(Confinement {
            kubelet_dir,
            state_dir,
        })
    }

    /// A required staging or target path (`field`), resolved, as every node
    /// RPC's check resolves it; refused as `NodeUnstageVolume` refuses it.
    pub fn path(&self, field: &str, value: &str) -> Result<PathBuf, Status> {
        let refused = |e| Status::from(UnstageError::from(e));
        self.0.path(field, value).map_err(refused)
    }

    /// A volume path (stats, expansion), resolved when it lies inside the
    /// kubelet directory.
    pub fn lookup(&self, value: &str) -> Option<PathBuf> {
        self.0.lookup(value)
    }
}
