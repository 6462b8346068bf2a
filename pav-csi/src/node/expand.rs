//! `NodeExpandVolume`: grow what the volume mounted at the path holds.

use pav_sdk::{CapacityRange, VolumeMode};
use tonic::{Code, Status};

use super::binds::{BindError, blocking, mounted_mode};
use super::{CapabilityError, NodeService, Unserved, check_capability, volume_paths};
use crate::convert::{self, RangeError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, Int64Error, LimitError};
use crate::shared::Shared;

/// Why a `NodeExpandVolume` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExpandError {
    /// The provisioner does not expand volumes on nodes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The capacity range is refused (its code).
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The capability is malformed or not served (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// No volume is mounted at the path (`NOT_FOUND`).
    #[error("volume {volume_id} is not published at {volume_path}")]
    NotPublished {
        volume_id: String,
        volume_path: String,
    },
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// Reading what is mounted there failed (its code).
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The capability's volume mode is not the mounted volume's
    /// (`INVALID_ARGUMENT`).
    #[error("volume_capability says {wanted}, but {volume_path} holds a {mode} volume")]
    OtherMode {
        wanted: VolumeMode,
        volume_path: String,
        mode: VolumeMode,
    },
    /// The provisioner's NodeExpand failed (its code).
    #[error("{}", .0.message())]
    Expand(pav_sdk::Error),
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
            ExpandError::NotPublished { .. } => Code::NotFound,
            ExpandError::Busy(e) => e.code(),
            ExpandError::Bind(e) => e.code(),
            ExpandError::OtherMode { .. } => Code::InvalidArgument,
            ExpandError::Expand(e) => provisioner_code(e),
            ExpandError::Size(_) => Code::Internal,
        };
        Status::new(code, error_chain(&err))
    }
}

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
) -> Result<Checked, ExpandError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let volume_path = limits::required_path("volume_path", &req.volume_path)?;
    limits::path("staging_target_path", &req.staging_target_path)?;
    convert::secrets(&req.secrets)?;
    let capacity = convert::capacity_range(req.capacity_range.as_ref())?;
    let wanted_mode = match &req.volume_capability {
        Some(cap) => {
            let cap =
                convert::capability("volume_capability", cap).map_err(CapabilityError::from)?;
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
) -> Result<csi::NodeExpandVolumeResponse, ExpandError> {
    let Checked {
        volume_id,
        volume_path,
        staging_target_path,
        capacity,
        wanted_mode,
    } = checked;
    let volume_id = volume_id.as_str();
    let not_published = || ExpandError::NotPublished {
        volume_id: volume_id.to_owned(),
        volume_path: volume_path.clone(),
    };
    let _guard = (service.shared.in_flight).claim(Key::Volume(volume_id.to_owned()))?;
    let (node, id, asked) = (
        service.node.clone(),
        volume_id.to_owned(),
        volume_path.clone(),
    );
    let recorded = !service.shared.provisioner.stages_on_publish();
    let found = blocking::<_, BindError>(move || {
        let paths = volume_paths(&node, &id, (&asked, &staging_target_path), recorded);
        let Some((path, staging_path)) = paths else {
            return Ok(None);
        };
        let mode = mounted_mode(&path)?;
        Ok(mode.map(|mode| (path, staging_path, mode)))
    })
    .await?;
    let (path, staging_path, mode) = found.ok_or_else(not_published)?;
    if let Some(wanted) = wanted_mode
        && wanted != mode
    {
        return Err(ExpandError::OtherMode {
            wanted,
            volume_path,
            mode,
        });
    }
    tracing::info!(volume_id, path = ?path, ?capacity, "NodeExpandVolume");
    let mut expand = pav_sdk::build::node_expand(volume_id, path, mode);
    expand.staging_path = staging_path;
    expand.capacity = capacity;
    expand.node_dir = service.existing_node_dir(volume_id);
    let bytes = expander
        .node_expand(expand)
        .await
        .map_err(ExpandError::Expand)?;
    Ok(csi::NodeExpandVolumeResponse {
        capacity_bytes: limits::int64("capacity_bytes", bytes)?,
    })
}
