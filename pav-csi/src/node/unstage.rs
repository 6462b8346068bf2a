//! `NodeUnstageVolume`: undo a stage recorded at the path given.

use std::path::PathBuf;

use tonic::{Code, Status};

use super::binds::{BindError, blocking};
use super::{NodeConfig, NodeService, RecordError, UndoStageError, Unserved};
use crate::csi;
use crate::error::error_chain;
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::paths::PathError;

/// Why a `NodeUnstageVolume` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnstageError {
    /// The node service does not stage per node (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The staging path is refused (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Path(#[from] PathError),
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The staging records could not be read (`INTERNAL`).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The blocking task reading them failed (`INTERNAL`).
    #[error(transparent)]
    Task(#[from] BindError),
    /// Undoing the stage failed (its code); the record is kept.
    #[error(transparent)]
    Undo(#[from] UndoStageError),
}

impl From<UnstageError> for Status {
    fn from(err: UnstageError) -> Self {
        let code = match &err {
            UnstageError::Unserved(_) => Code::Unimplemented,
            UnstageError::Limit(e) => e.code(),
            UnstageError::Path(e) => e.code(),
            UnstageError::Busy(e) => e.code(),
            UnstageError::Record(_) => Code::Internal,
            UnstageError::Task(e) => e.code(),
            UnstageError::Undo(e) => e.code(),
        };
        Status::new(code, error_chain(&err))
    }
}

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
) -> Result<Checked, UnstageError> {
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
) -> Result<csi::NodeUnstageVolumeResponse, UnstageError> {
    let Checked { volume_id, staging } = checked;
    let volume_id = volume_id.as_str();
    let _guard = (service.shared.in_flight).claim(Key::Volume(volume_id.to_owned()))?;
    let (records, id, path) = (
        service.node.staged.clone(),
        volume_id.to_owned(),
        staging.clone(),
    );
    let recorded = blocking(move || -> Result<_, UnstageError> {
        let record = records.get(&id).map_err(RecordError::Read)?;
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
