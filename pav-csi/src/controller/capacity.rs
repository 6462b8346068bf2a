//! `GetCapacity`: what the provisioner has room for.

use pav_sdk::CapacityRequest;
use tonic::{Code, Status};

use super::{Unserved, check_modes};
use crate::convert::{self, CapabilityError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::limits::{self, Int64Error, LimitError};
use crate::shared::Shared;

/// Why a `GetCapacity` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum CapacityError {
    /// The provisioner does not report capacity (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The capabilities cannot be converted (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// The provisioner's Capacity failed (its code).
    #[error("{}", .0.message())]
    Capacity(pav_sdk::Error),
    /// A size it answered does not fit CSI's int64 (`INTERNAL`).
    #[error(transparent)]
    Size(#[from] Int64Error),
}

impl From<CapacityError> for Status {
    fn from(err: CapacityError) -> Self {
        let code = match &err {
            CapacityError::Unserved(_) => Code::Unimplemented,
            CapacityError::Limit(e) => e.code(),
            CapacityError::Capability(e) => e.code(),
            CapacityError::Capacity(e) => provisioner_code(e),
            CapacityError::Size(_) => Code::Internal,
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `GetCapacityRequest` that passed [`check`]: the question for the
/// provisioner, or `None` when no volume can have the capabilities asked
/// for (answered 0).
pub(crate) type Checked = Option<CapacityRequest>;

/// Limits, topology segment and capabilities; capabilities with two
/// volume modes, or modes the provisioner does not serve, leave no room.
pub(crate) fn check(
    req: &csi::GetCapacityRequest,
    shared: &Shared,
) -> Result<Checked, CapacityError> {
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
) -> Result<csi::GetCapacityResponse, CapacityError> {
    let Some(ask) = checked else {
        return Ok(csi::GetCapacityResponse::default());
    };
    let available = reporter.capacity(ask).await.map_err(|e| {
        tracing::warn!(error = e.message(), "GetCapacity failed");
        CapacityError::Capacity(e)
    })?;
    let bytes = limits::int64;
    let size = |field, b: Option<u64>| b.map(|b| bytes(field, b)).transpose();
    Ok(csi::GetCapacityResponse {
        available_capacity: bytes("available_capacity", available.available_bytes)?,
        maximum_volume_size: size("maximum_volume_size", available.maximum_volume_size)?,
        minimum_volume_size: size("minimum_volume_size", available.minimum_volume_size)?,
    })
}
