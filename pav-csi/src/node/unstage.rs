//! `NodeUnstageVolume`: undo a stage recorded at the path given.

use std::path::PathBuf;

use tonic::Status;

use super::binds::blocking;
use super::{NodeConfig, NodeService};
use crate::csi;
use crate::error::internal;
use crate::guard::Key;
use crate::limits;

/// A `NodeUnstageVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    /// Resolved inside the kubelet directory.
    staging: PathBuf,
}

/// The volume id and the staging path.
pub(crate) fn check(
    req: &csi::NodeUnstageVolumeRequest,
    node: &NodeConfig,
) -> Result<Checked, Status> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let staging = node
        .paths
        .path("staging_target_path", &req.staging_target_path)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        staging,
    })
}

/// Holds the volume and undoes its stage when it is recorded at this
/// path; a volume not staged there (never, or unstaged already) is
/// success, and nothing at the path is touched.
pub(crate) async fn run(
    service: &NodeService,
    checked: Checked,
) -> Result<csi::NodeUnstageVolumeResponse, Status> {
    let Checked { volume_id, staging } = checked;
    let volume_id = volume_id.as_str();
    let _guard = (service.shared.in_flight).claim(Key::Volume(volume_id.to_owned()))?;
    let (records, id, path) = (
        service.node.staged.clone(),
        volume_id.to_owned(),
        staging.clone(),
    );
    let recorded = blocking(move || {
        let record = records
            .get(&id)
            .map_err(|e| internal("reading staging records", e))?;
        Ok(record.filter(|r| r.staging == path))
    })
    .await?;
    // Not staged here (never, or unstaged already): nothing to undo,
    // and nothing at this path is ours to unmount.
    let Some(record) = recorded else {
        tracing::info!(volume_id, staging = ?staging, "NodeUnstageVolume: not staged there");
        return Ok(csi::NodeUnstageVolumeResponse {});
    };
    tracing::info!(volume_id, staging = ?staging, "NodeUnstageVolume");
    service
        .unstage_recorded(volume_id, staging, record.capability.mode)
        .await?;
    Ok(csi::NodeUnstageVolumeResponse {})
}
