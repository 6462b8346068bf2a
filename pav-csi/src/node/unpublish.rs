//! `NodeUnpublishVolume`: unmount the target and remove what publishing
//! made there; a provisioner that stages on publish unstages it.

use std::path::PathBuf;

use tonic::Status;

use super::binds::{blocking, unmount_and_remove};
use super::ephemeral;
use super::{NodeConfig, NodeService};
use crate::csi;
use crate::error::status;
use crate::guard::Key;
use crate::limits;

/// A `NodeUnpublishVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    /// Resolved inside the kubelet directory.
    target: PathBuf,
}

/// The volume id and the target path.
pub(crate) fn check(
    req: &csi::NodeUnpublishVolumeRequest,
    node: &NodeConfig,
) -> Result<Checked, Status> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let target = node.paths.path("target_path", &req.target_path)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        target,
    })
}

/// Holds the volume, unmounts and removes the target (gone already is
/// success), and runs the Unstage of a provisioner that stages on publish;
/// an ephemeral inline volume recorded at the target is unstaged and
/// deleted too.
pub(crate) async fn run(
    service: &NodeService,
    checked: Checked,
) -> Result<csi::NodeUnpublishVolumeResponse, Status> {
    let Checked { volume_id, target } = checked;
    let volume_id = volume_id.as_str();
    let shared = &service.shared;
    let _guard = shared.in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    // Looked up whether or not the option is on: a volume recorded before
    // it was turned off is still deleted.
    if let Some(record) = service.ephemeral_at(volume_id, &target).await? {
        tracing::info!(volume_id, target = ?target, "NodeUnpublishVolume: ephemeral volume");
        ephemeral::unpublish(service, record).await?;
        return Ok(csi::NodeUnpublishVolumeResponse {});
    }
    tracing::info!(volume_id, target = ?target, "NodeUnpublishVolume");
    let path = target.clone();
    blocking(move || unmount_and_remove(&path)).await?;
    if shared.provisioner.stages_on_publish()
        && let Some(unstager) = shared.provisioner.unstage()
    {
        let unstage = pav_sdk::build::unstage(volume_id, service.node.node_id.clone(), target);
        unstager.unstage(unstage).await.map_err(status)?;
    }
    Ok(csi::NodeUnpublishVolumeResponse {})
}
