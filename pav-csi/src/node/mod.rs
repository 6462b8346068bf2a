//! The CSI Node service: stage through the provisioner, publish with bind mounts.
//!
//! One file per RPC, as in the controller: a `check` (required fields,
//! limits, conversions, the capability against what the provisioner
//! serves, and staging and target paths resolved inside the kubelet
//! directory, which reads symlinks but neither mounts nor records) giving
//! its `Checked` request, and a `run` that carries it out. The mount
//! mechanics are in [`binds`]; what several RPCs need lives here.

mod binds;
mod capabilities;
pub(crate) mod ephemeral;
mod expand;
mod info;
mod publish;
mod stage;
mod stats;
mod unpublish;
mod unstage;

use std::path::PathBuf;
use std::sync::Arc;

use pav_sdk::{Topology, VolumeMode};
use tonic::{Request, Response, Status};

// Where a staged Block volume's device is bound (the `testing` checks too).
pub(crate) use self::binds::STAGED_DEVICE;
use self::binds::{blocking, unmount_and_remove};
use crate::convert;
use crate::csi;
use crate::error::{Subject, internal, logged, status};
use crate::mount;
use crate::paths::Confinement;
use crate::shared::Shared;
use crate::staged::Records;

/// What this node reports about itself, and where it may mount.
#[derive(Debug, Clone)]
pub(crate) struct NodeConfig {
    pub(crate) node_id: String,
    pub(crate) topology: Topology,
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

/// Refuses a capability the provisioner does not serve: a volume mode or
/// access mode it never declared is unsupported by the plugin, not by
/// one volume (`INVALID_ARGUMENT`, not "Exceeds capabilities").
fn check_capability(shared: &Shared, capability: &convert::Capability) -> Result<(), Status> {
    let provisioner = &shared.provisioner;
    if !provisioner.supports_volume_mode(capability.mode) {
        return Err(Status::invalid_argument(format!(
            "volume_capability: volume mode {} is not supported",
            capability.mode
        )));
    }
    if !provisioner.supports_access_mode(capability.access_mode) {
        return Err(Status::invalid_argument(format!(
            "volume_capability: access mode {} is not supported",
            crate::staged::access_mode_name(capability.access_mode)
        )));
    }
    Ok(())
}

/// A request's required `volume_capability`, converted.
fn required_capability(
    capability: Option<&csi::VolumeCapability>,
) -> Result<convert::Capability, Status> {
    let capability =
        capability.ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
    convert::capability("volume_capability", capability)
}

/// `UNIMPLEMENTED` unless the node service stages per node.
fn stages_per_node(shared: &Shared) -> Result<&dyn pav_sdk::Stage, Status> {
    match shared.provisioner.stage() {
        Some(_) if shared.provisioner.stages_on_publish() => Err(Status::unimplemented(
            "this driver stages on publish: STAGE_UNSTAGE_VOLUME is not advertised",
        )),
        Some(stager) => Ok(stager),
        None => Err(Status::unimplemented(
            "this provisioner does not stage volumes",
        )),
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

/// The volume path of a stats or expansion request, resolved, and its
/// staging path when given and inside the kubelet directory; `NOT_FOUND`
/// with `message` when the volume path lies outside it (where nothing of
/// this driver's is mounted).
fn volume_paths(
    paths: &Confinement,
    volume_path: &str,
    staging_target_path: &str,
    message: &str,
) -> Result<(PathBuf, Option<PathBuf>), Status> {
    let path = paths
        .lookup(volume_path)
        .ok_or_else(|| Status::not_found(message))?;
    let staging_path = (!staging_target_path.is_empty())
        .then(|| paths.lookup(staging_target_path))
        .flatten();
    Ok((path, staging_path))
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
    ) -> Result<(), Status> {
        let path = staging.clone();
        blocking(move || {
            // Only a Block volume's staging path holds our device bind; in
            // a Filesystem volume `device` is the volume's own file.
            if mode == VolumeMode::Block {
                unmount_and_remove(&path.join(STAGED_DEVICE))?;
            }
            mount::unmount(&path)
                .map(|_| ())
                .map_err(|e| internal("unmounting staging path", e))
        })
        .await?;
        if let Some(unstager) = self.shared.provisioner.unstage() {
            let unstage = pav_sdk::build::unstage(volume_id, self.node.node_id.clone(), staging);
            unstager.unstage(unstage).await.map_err(status)?;
        }
        let (records, id) = (self.node.staged.clone(), volume_id.to_owned());
        blocking(move || {
            records
                .remove(&id)
                .map_err(|e| internal("removing the staging record", e))
        })
        .await
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
        let answer = answer.await.map(Response::new);
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
        let answer = answer.await.map(Response::new);
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
        let answer = answer.await.map(Response::new);
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
        let answer = answer.await.map(Response::new);
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
        let checked = stats::check(request.get_ref())?;
        stats::run(self, checked).await.map(Response::new)
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let Some(expander) = self.shared.provisioner.node_expand() else {
                return Err(Status::unimplemented(
                    "this provisioner does not expand volumes on nodes (EXPAND_VOLUME is not advertised)",
                ));
            };
            let checked = expand::check(req, &self.shared)?;
            expand::run(self, expander, checked).await
        };
        let answer = answer.await.map(Response::new);
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
        Ok(Response::new(info::answer(&self.node)))
    }
}
