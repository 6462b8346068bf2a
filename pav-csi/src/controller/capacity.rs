//! `GetCapacity`: what the provisioner has room for.

use pav_sdk::CapacityRequest;
use tonic::Status;

use super::check_modes;
use crate::convert;
use crate::csi;
use crate::error::status;
use crate::limits;
use crate::shared::Shared;

/// A `GetCapacityRequest` that passed [`check`]: the question for the
/// provisioner, or `None` when no volume can have the capabilities asked
/// for (answered 0).
pub(crate) type Checked = Option<CapacityRequest>;

/// Limits, topology segment and capabilities; capabilities with two
/// volume modes, or modes the provisioner does not serve, leave no room.
pub(crate) fn check(req: &csi::GetCapacityRequest, shared: &Shared) -> Result<Checked, Status> {
    limits::map("parameters", &req.parameters)?;
    if let Some(t) = &req.accessible_topology {
        limits::topology("accessible_topology", &t.segments)?;
    }
    let mut ask = pav_sdk::build::capacity();
    if !req.volume_capabilities.is_empty() {
        let capabilities =
            convert::capability_list("volume_capabilities", &req.volume_capabilities)?;
        // No volume can have modes the provisioner does not serve, or
        // two volume modes at once: there is no room for one.
        let Ok((mode, access_modes, _)) = convert::one_mode("volume_capabilities", &capabilities)
        else {
            return Ok(None);
        };
        if check_modes(shared, mode, &access_modes).is_err() {
            return Ok(None);
        }
        ask.volume_mode = Some(mode);
        ask.access_modes = access_modes;
    }
    ask.parameters = convert::split_parameters(&req.parameters).0;
    ask.topology = req.accessible_topology.as_ref().map(convert::from_topology);
    Ok(Some(ask))
}

/// Asks the provisioner; sizes that do not fit CSI's int64 are `INTERNAL`.
pub(crate) async fn run(
    reporter: &dyn pav_sdk::Capacity,
    checked: Checked,
) -> Result<csi::GetCapacityResponse, Status> {
    let Some(ask) = checked else {
        return Ok(csi::GetCapacityResponse::default());
    };
    let available = reporter.capacity(ask).await.map_err(|e| {
        tracing::warn!(error = e.message(), "GetCapacity failed");
        status(e)
    })?;
    let bytes = limits::int64;
    let size = |field, b: Option<u64>| b.map(|b| bytes(field, b)).transpose();
    Ok(csi::GetCapacityResponse {
        available_capacity: bytes("available_capacity", available.available_bytes)?,
        maximum_volume_size: size("maximum_volume_size", available.maximum_volume_size)?,
        minimum_volume_size: size("minimum_volume_size", available.minimum_volume_size)?,
    })
}
