//! `ControllerExpandVolume`: grow a volume within the range asked for.

use pav_sdk::{CapacityRange, Secrets, VolumeMode};
use tonic::{Code, Status};

use super::{ControllerService, ExistsError, ModeError, Unserved, check_modes};
use crate::convert::{self, CapabilityError, RangeError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, Int64Error, LimitError};
use crate::shared::Shared;

/// Why a `ControllerExpandVolume` failed: one variant per step of
/// [`check`] and [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExpandError {
    /// The provisioner does not expand volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// No capacity range (`INVALID_ARGUMENT`).
    #[error("capacity_range is required")]
    NoRange,
    /// The capacity range is refused (its code).
    #[error(transparent)]
    Range(#[from] RangeError),
    /// A capacity range with neither bound (`INVALID_ARGUMENT`).
    #[error("capacity_range: required_bytes or limit_bytes must be set")]
    Unbounded,
    /// The capability cannot be converted (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// Modes the provisioner does not serve (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Mode(#[from] ModeError),
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The volume does not exist, or asking failed (its code).
    #[error(transparent)]
    Lookup(#[from] ExistsError),
    /// The provisioner's Expand failed (its code).
    #[error("{}", .0.message())]
    Expand(pav_sdk::Error),
    /// It grew the volume outside the range (`INTERNAL`).
    #[error(
        "the provisioner grew volume {volume_id:?} to {bytes} bytes, outside the requested range"
    )]
    OutsideRange { volume_id: String, bytes: u64 },
    /// Its size does not fit CSI's int64 (`INTERNAL`).
    #[error(transparent)]
    Size(#[from] Int64Error),
}

impl From<ExpandError> for Status {
    fn from(err: ExpandError) -> Self {
        let code = match &err {
            ExpandError::Unserved(_) => Code::Unimplemented,
            ExpandError::Limit(e) => e.code(),
            ExpandError::Range(e) => e.code(),
            ExpandError::Capability(e) => e.code(),
            ExpandError::NoRange | ExpandError::Unbounded | ExpandError::Mode(_) => {
                Code::InvalidArgument
            }
            ExpandError::Busy(e) => e.code(),
            ExpandError::Lookup(e) => e.code(),
            ExpandError::Expand(e) => provisioner_code(e),
            ExpandError::OutsideRange { .. } | ExpandError::Size(_) => Code::Internal,
        };
        Status::new(code, error_chain(&err))
    }
}

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
) -> Result<Checked, ExpandError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let secrets = convert::secrets(&req.secrets)?;
    let Some(range) = req.capacity_range.as_ref() else {
        return Err(ExpandError::NoRange);
    };
    let capacity = convert::capacity_range(Some(range))?;
    if capacity.min_bytes.is_none() && capacity.max_bytes.is_none() {
        return Err(ExpandError::Unbounded);
    }
    let volume_mode = match &req.volume_capability {
        Some(cap) => {
            let cap = convert::capability("volume_capability", cap)?;
            check_modes(shared, cap.mode, &[cap.access_mode])?;
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
) -> Result<csi::ControllerExpandVolumeResponse, ExpandError> {
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
    let expanded = expander.expand(expand).await.map_err(ExpandError::Expand)?;
    if !capacity.contains(expanded.capacity_bytes) {
        return Err(ExpandError::OutsideRange {
            volume_id: volume_id.to_owned(),
            bytes: expanded.capacity_bytes,
        });
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
