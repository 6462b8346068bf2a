//! The CSI Node service: stage through the provisioner, publish with bind mounts.
//!
//! One file per RPC, as in the controller: a `check` (required fields,
//! limits, conversions, the capability against what the provisioner
//! serves, and staging and target paths resolved inside the kubelet
//! directory, which reads symlinks but neither mounts nor records) giving
//! its `Checked` request, a `run` that carries it out, and an error enum
//! (one variant per failing step) with the one mapping of it to a
//! `Status`. The mount mechanics are in [`binds`]; what
//! `NodeGetVolumeStats` and `NodeGetVolumeHealth` share in [`published`];
//! what several RPCs need lives here.

pub(crate) mod binds;
mod capabilities;
pub(crate) mod clean_up;
pub(crate) mod ephemeral;
mod expand;
mod info;
pub(crate) mod publish;
pub(crate) mod published;
mod stage;
pub(crate) mod stats;
mod unpublish;
pub(crate) mod unstage;
pub(crate) mod volume_health;

use std::path::PathBuf;
use std::sync::Arc;

use pav_sdk::{AccessMode, Topology, VolumeMode};
use tonic::{Code, Request, Response, Status};

// Where a staged Block volume's device is bound (the `testing` checks too).
pub(crate) use self::binds::STAGED_DEVICE;
use self::binds::{BindError, blocking, unmount_and_remove};
use crate::convert;
use crate::csi;
use crate::error::{Subject, logged, provisioner_code};
use crate::mount::UnmountError;
use crate::mount::blocking as mount;
use crate::paths::Confinement;
use crate::shared::Shared;
use crate::staged::Records;

/// What this node reports about itself, and where it may mount.
#[derive(Debug, Clone)]
pub(crate) struct NodeConfig {
    pub(crate) node_id: String,
    pub(crate) topology: Topology,
    /// The builder's volume limit; 0: the provisioner's (`NodeGetInfo`).
    pub(crate) max_volumes: i64,
    /// Staging and target paths must lie in the kubelet directory.
    pub(crate) paths: Confinement,
    /// Which volume is staged where.
    pub(crate) staged: Records,
}

/// Node service.
#[derive(Debug)]
pub(crate) struct NodeService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) node: Arc<NodeConfig>,
}

/// A touch point the provisioner lacks, so that an RPC is not served
/// (`UNIMPLEMENTED`; its capability is not advertised).
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub(crate) enum Unserved {
    /// Node staging RPCs of a provisioner that stages on publish.
    #[error("this driver stages on publish: STAGE_UNSTAGE_VOLUME is not advertised")]
    StagesOnPublish,
    /// A provisioner without [`pav_sdk::Stage`].
    #[error("this provisioner does not stage volumes")]
    Stage,
    /// `NodeExpandVolume` without [`pav_sdk::NodeExpand`].
    #[error("this provisioner does not expand volumes on nodes (EXPAND_VOLUME is not advertised)")]
    NodeExpand,
    /// `NodeGetVolumeHealth` without [`pav_sdk::Stats`] or [`pav_sdk::Health`].
    #[error(
        "this provisioner reports no volume health (GET_VOLUME_HEALTH is not advertised: it has neither Stats nor Health)"
    )]
    VolumeHealth,
}

/// Why a request's `volume_capability` was refused (`INVALID_ARGUMENT`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CapabilityError {
    /// It is missing.
    #[error("volume_capability is required")]
    Missing,
    /// It cannot be converted.
    #[error(transparent)]
    Convert(#[from] convert::CapabilityError),
    /// Its volume mode is not one the provisioner declared.
    #[error("volume_capability: volume mode {0} is not supported")]
    VolumeMode(VolumeMode),
    /// Its access mode is not one the provisioner declared.
    #[error("volume_capability: access mode {} is not supported", crate::staged::access_mode_name(*.0))]
    AccessMode(AccessMode),
}

impl CapabilityError {
    /// The code of a request refused for it: `INVALID_ARGUMENT`.
    pub(crate) fn code(&self) -> Code {
        Code::InvalidArgument
    }
}

/// The staging records could not be read or written (`INTERNAL`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error("reading staging records")]
    Read(#[source] std::io::Error),
    #[error("writing the staging record")]
    Write(#[source] std::io::Error),
    #[error("removing the staging record")]
    Remove(#[source] std::io::Error),
}

/// Why undoing a recorded stage failed; the record is kept for the next
/// NodeUnstageVolume.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UndoStageError {
    /// Unmounting or removing the device bind failed (its code).
    #[error(transparent)]
    Bind(#[from] BindError),
    /// Unmounting the staging path failed (`INTERNAL`).
    #[error("unmounting staging path")]
    Unmount(#[source] UnmountError),
    /// The provisioner's Unstage failed (its code).
    #[error("{}", .0.message())]
    Unstage(pav_sdk::Error),
    /// Removing the record failed (`INTERNAL`).
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl UndoStageError {
    /// The code of the call that undid the stage.
    pub(crate) fn code(&self) -> Code {
        match self {
            UndoStageError::Bind(e) => e.code(),
            UndoStageError::Unmount(_) | UndoStageError::Record(_) => Code::Internal,
            UndoStageError::Unstage(e) => provisioner_code(e),
        }
    }
}

/// Refuses a capability the provisioner does not serve: a volume mode or
/// access mode it never declared is unsupported by the plugin, not by
/// one volume (`INVALID_ARGUMENT`, not "Exceeds capabilities").
fn check_capability(
    shared: &Shared,
    capability: &convert::Capability,
) -> Result<(), CapabilityError> {
    let provisioner = &shared.provisioner;
    if !provisioner.supports_volume_mode(capability.mode) {
        return Err(CapabilityError::VolumeMode(capability.mode));
    }
    if !provisioner.supports_access_mode(capability.access_mode) {
        return Err(CapabilityError::AccessMode(capability.access_mode));
    }
    Ok(())
}

/// A request's required `volume_capability`, converted.
fn required_capability(
    capability: Option<&csi::VolumeCapability>,
) -> Result<convert::Capability, CapabilityError> {
    let capability = capability.ok_or(CapabilityError::Missing)?;
    Ok(convert::capability("volume_capability", capability)?)
}

/// The provisioner's Stage when the node service stages per node, or
/// [`Unserved`].
fn stages_per_node(shared: &Shared) -> Result<&dyn pav_sdk::Stage, Unserved> {
    match shared.provisioner.stage() {
        Some(_) if shared.provisioner.stages_on_publish() => Err(Unserved::StagesOnPublish),
        Some(stager) => Ok(stager),
        None => Err(Unserved::Stage),
    }
}

/// The StageRequest of `volume_id` at `path` (the staging path, or the
/// publish target when staging on publish), for `capability`; context,
/// secrets and pod are the caller's to add.
fn stage_request(
    node_id: &str,
    volume_id: &str,
    path: PathBuf,
    capability: convert::Capability,
    read_only: bool,
) -> pav_sdk::StageRequest {
    let mut stage = pav_sdk::build::stage(volume_id, node_id.to_owned(), path, capability.mode);
    stage.access_mode = capability.access_mode;
    stage.read_only = read_only;
    stage.mount = capability.mount;
    stage
}

/// The volume path of a stats, health or expansion request, resolved, and
/// its staging path when given and inside the kubelet directory, else the one
/// recorded when `volume_id` was staged on this node, if it stages per
/// node (`recorded`; kubelet's NodeGetVolumeStats names none); `None` when
/// the volume path lies outside it (where nothing of this driver's is
/// mounted: the caller's `NOT_FOUND`). Blocking: it may read the record.
fn volume_paths(
    node: &NodeConfig,
    volume_id: &str,
    (volume_path, staging_target_path): (&str, &str),
    recorded: bool,
) -> Option<(PathBuf, Option<PathBuf>)> {
    let path = node.paths.lookup(volume_path)?;
    let staging_path = match (staging_target_path.is_empty(), recorded) {
        (false, _) => node.paths.lookup(staging_target_path),
        (true, true) => (node.staged.get(volume_id).ok().flatten()).map(|record| record.staging),
        (true, false) => None,
    };
    Some((path, staging_path))
}

impl NodeService {
    /// Undoes a stage recorded at `staging`: unmounts what is mounted there
    /// (the driver's binds and whatever the provisioner mounted), runs the
    /// provisioner's Unstage, then forgets the record. A failure keeps the
    /// record, so that the next NodeUnstageVolume tries again.
    async fn unstage_recorded(
        &self,
        volume_id: &str,
        staging: PathBuf,
        mode: VolumeMode,
    ) -> Result<(), UndoStageError> {
        let path = staging.clone();
        blocking(move || {
            // Only a Block volume's staging path holds our device bind; in
            // a Filesystem volume `device` is the volume's own file.
            if mode == VolumeMode::Block {
                unmount_and_remove(&path.join(STAGED_DEVICE))?;
            }
            mount::unmount(&path)
                .map(|_| ())
                .map_err(UndoStageError::Unmount)
        })
        .await?;
        if let Some(unstager) = self.shared.provisioner.unstage() {
            (self.unstage(unstager, volume_id, staging).await).map_err(UndoStageError::Unstage)?;
        }
        let (records, id) = (self.node.staged.clone(), volume_id.to_owned());
        blocking(move || -> Result<(), UndoStageError> {
            records
                .remove(&id)
                .map_err(|e| RecordError::Remove(e).into())
        })
        .await?;
        // A volume deleted while staged here keeps its node directory
        // until now.
        self.shared.node_dirs_stale.notify_one();
        Ok(())
    }

    /// Where volume `volume_id`'s node directory goes, for a provisioner
    /// that keeps records (pav-sdk makes it when they hold the volume).
    fn node_dir(&self, volume_id: &str) -> Option<PathBuf> {
        (self.shared.node_dirs.as_ref()).and_then(|dirs| dirs.path(volume_id))
    }

    /// Volume `volume_id`'s node directory, if it has one.
    fn existing_node_dir(&self, volume_id: &str) -> Option<PathBuf> {
        (self.shared.node_dirs.as_ref()).and_then(|dirs| dirs.existing(volume_id))
    }

    /// The provisioner's Unstage of `volume_id` at `path`, given the
    /// volume's node directory; then the node directories are looked at
    /// (the volume may be deleted already).
    async fn unstage(
        &self,
        unstager: &dyn pav_sdk::Unstage,
        volume_id: &str,
        path: PathBuf,
    ) -> pav_sdk::Result<()> {
        let mut unstage = pav_sdk::build::unstage(volume_id, self.node.node_id.clone(), path);
        unstage.node_dir = self.existing_node_dir(volume_id);
        unstager.unstage(unstage).await?;
        self.shared.node_dirs_stale.notify_one();
        Ok(())
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let stager = stages_per_node(&self.shared)?;
            let checked = stage::check(req, &self.shared, &self.node)?;
            stage::run(self, stager, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged("NodeStageVolume", Subject::Volume(&req.volume_id), answer)
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            stages_per_node(&self.shared)?;
            let checked = unstage::check(req, &self.node)?;
            unstage::run(self, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged("NodeUnstageVolume", Subject::Volume(&req.volume_id), answer)
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let checked = publish::check(req, &self.shared, &self.node)?;
            publish::run(self, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged("NodePublishVolume", Subject::Volume(&req.volume_id), answer)
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let checked = unpublish::check(req, &self.node)?;
            unpublish::run(self, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "NodeUnpublishVolume",
            Subject::Volume(&req.volume_id),
            answer,
        )
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        let answer = async {
            let checked = stats::check(request.get_ref())?;
            stats::run(self, checked).await
        };
        Ok(Response::new(answer.await?))
    }

    async fn node_get_volume_health(
        &self,
        request: Request<csi::NodeGetVolumeHealthRequest>,
    ) -> Result<Response<csi::NodeGetVolumeHealthResponse>, Status> {
        let answer = async {
            if !published::reports_condition(&self.shared.provisioner) {
                return Err(Unserved::VolumeHealth.into());
            }
            let checked = volume_health::check(request.get_ref())?;
            volume_health::run(self, checked).await
        };
        Ok(Response::new(answer.await?))
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let expander = self.shared.provisioner.node_expand();
            let expander = expander.ok_or(Unserved::NodeExpand)?;
            let checked = expand::check(req, &self.shared)?;
            expand::run(self, expander, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged("NodeExpandVolume", Subject::Volume(&req.volume_id), answer)
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new(capabilities::answer(&self.shared)))
    }

    async fn node_get_info(
        &self,
        _request: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        Ok(Response::new(info::answer(&self.node, &self.shared).await?))
    }
}
