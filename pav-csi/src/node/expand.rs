//! `NodeExpandVolume`: grow what the volume mounted at the path holds.

use pav_sdk::{CapacityRange, VolumeMode};
use tonic::Status;

use super::binds::{blocking, mounted_mode};
use super::{NodeService, check_capability, volume_paths};
use crate::convert;
use crate::csi;
use crate::error::status;
use crate::guard::Key;
use crate::limits;
use crate::shared::Shared;

/// A `NodeExpandVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    volume_path: String,
    /// Empty when not given.
    staging_target_path: String,
    capacity: CapacityRange,
    /// The volume mode of the capability, when one was given.
    wanted_mode: Option<VolumeMode>,
}

/// The volume id, the paths' limits, a capacity range, and a capability
/// (when given) the provisioner serves.
pub(crate) fn check(
    req: &csi::NodeExpandVolumeRequest,
    shared: &Shared,
) -> Result<Checked, Status> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let volume_path = limits::required_path("volume_path", &req.volume_path)?;
    limits::path("staging_target_path", &req.staging_target_path)?;
    convert::secrets(&req.secrets)?;
    let capacity = convert::capacity_range(req.capacity_range.as_ref())?;
    let wanted_mode = match &req.volume_capability {
        Some(cap) => {
            let cap = convert::capability("volume_capability", cap)?;
            check_capability(shared, &cap)?;
            Some(cap.mode)
        }
        None => None,
    };
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        volume_path: volume_path.to_owned(),
        staging_target_path: req.staging_target_path.clone(),
        capacity,
        wanted_mode,
    })
}

/// Finds the volume mounted at the path (`NOT_FOUND` when none is), holds
/// it, checks its mode is the one asked for, and asks the provisioner.
pub(crate) async fn run(
    service: &NodeService,
    expander: &dyn pav_sdk::NodeExpand,
    checked: Checked,
) -> Result<csi::NodeExpandVolumeResponse, Status> {
    let Checked {
        volume_id,
        volume_path,
        staging_target_path,
        capacity,
        wanted_mode,
    } = checked;
    let volume_id = volume_id.as_str();
    let message = format!("volume {volume_id} is not published at {volume_path}");
    let (path, staging_path) = volume_paths(
        &service.node.paths,
        &volume_path,
        &staging_target_path,
        &message,
    )?;
    let _guard = (service.shared.in_flight).claim(Key::Volume(volume_id.to_owned()))?;
    let (path, mode) = blocking(move || {
        let mode = mounted_mode(&path, || Status::not_found(message.clone()))?;
        Ok((path, mode))
    })
    .await?;
    if let Some(wanted) = wanted_mode
        && wanted != mode
    {
        return Err(Status::invalid_argument(format!(
            "volume_capability says {wanted}, but {volume_path} holds a {mode} volume"
        )));
    }
    tracing::info!(volume_id, path = ?path, ?capacity, "NodeExpandVolume");
    let mut expand = pav_sdk::build::node_expand(volume_id, path, mode);
    expand.staging_path = staging_path;
    expand.capacity = capacity;
    let bytes = expander.node_expand(expand).await.map_err(status)?;
    Ok(csi::NodeExpandVolumeResponse {
        capacity_bytes: limits::int64("capacity_bytes", bytes)?,
    })
}
