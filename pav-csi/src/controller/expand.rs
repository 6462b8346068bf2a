//! `ControllerExpandVolume`: grow a volume within the range asked for.

use pav_sdk::{CapacityRange, Secrets, VolumeMode};
use tonic::Status;

use super::{ControllerService, check_modes};
use crate::convert;
use crate::csi;
use crate::error::status;
use crate::guard::Key;
use crate::limits;
use crate::shared::Shared;

/// A `ControllerExpandVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    secrets: Secrets,
    capacity: CapacityRange,
    /// The volume mode of the capability, when one was given.
    volume_mode: Option<VolumeMode>,
}

/// The volume id, a capacity range with a bound, and a capability (when
/// given) of modes the provisioner serves.
pub(crate) fn check(
    req: &csi::ControllerExpandVolumeRequest,
    shared: &Shared,
) -> Result<Checked, Status> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let secrets = convert::secrets(&req.secrets)?;
    let Some(range) = req.capacity_range.as_ref() else {
        return Err(Status::invalid_argument("capacity_range is required"));
    };
    let capacity = convert::capacity_range(Some(range))?;
    if capacity.min_bytes.is_none() && capacity.max_bytes.is_none() {
        return Err(Status::invalid_argument(
            "capacity_range: required_bytes or limit_bytes must be set",
        ));
    }
    let volume_mode = match &req.volume_capability {
        Some(cap) => {
            let cap = convert::capability("volume_capability", cap)?;
            check_modes(shared, cap.mode, &[cap.access_mode]).map_err(Status::invalid_argument)?;
            Some(cap.mode)
        }
        None => None,
    };
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        secrets,
        capacity,
        volume_mode,
    })
}

/// Holds the volume, checks it exists, asks the provisioner's Expand and
/// checks its answer is within the range; a cached `CreateVolume` answer
/// (with the old size) is forgotten.
pub(crate) async fn run(
    service: &ControllerService,
    expander: &dyn pav_sdk::Expand,
    checked: Checked,
) -> Result<csi::ControllerExpandVolumeResponse, Status> {
    let Checked {
        volume_id,
        secrets,
        capacity,
        volume_mode,
    } = checked;
    let volume_id = volume_id.as_str();
    let shared = &service.shared;
    let _guard = shared.in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    service.check_exists(volume_id).await?;
    tracing::info!(volume_id, ?capacity, "ControllerExpandVolume");
    let mut expand = pav_sdk::build::expand(volume_id, 0);
    expand.capacity = capacity;
    expand.volume_mode = volume_mode;
    expand.secrets = secrets;
    let expanded = expander.expand(expand).await.map_err(status)?;
    if !capacity.contains(expanded.capacity_bytes) {
        return Err(Status::internal(format!(
            "the provisioner grew volume {volume_id:?} to {} bytes, outside the requested range",
            expanded.capacity_bytes
        )));
    }
    // A cached CreateVolume answer would report the old size.
    (shared.create_cache.lock())
        .unwrap_or_else(|e| e.into_inner())
        .forget_volume(volume_id);
    // kubelet would call NodeExpandVolume, which this process would not
    // serve; a controller-only process trusts the provisioner, whose
    // node plugins are another process.
    let node_expansion_required = expanded.node_expansion_required
        && (shared.provisioner.node_expand().is_some() || !shared.serves_node);
    Ok(csi::ControllerExpandVolumeResponse {
        capacity_bytes: limits::int64("capacity_bytes", expanded.capacity_bytes)?,
        node_expansion_required,
    })
}
