//! `DeleteSnapshot`: a snapshot that is gone already is deleted.

use pav_sdk::Secrets;
use tonic::{Code, Status};

use super::{ControllerService, Unserved};
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};

/// Why a `DeleteSnapshot` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeleteSnapshotError {
    /// The provisioner does not take snapshots (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Another call holds the snapshot (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The provisioner's delete failed (its code; `NOT_FOUND` is success).
    #[error("{}", .0.message())]
    Delete(pav_sdk::Error),
}

impl From<DeleteSnapshotError> for Status {
    fn from(err: DeleteSnapshotError) -> Self {
        let code = match &err {
            DeleteSnapshotError::Unserved(_) => Code::Unimplemented,
            DeleteSnapshotError::Limit(e) => e.code(),
            DeleteSnapshotError::Busy(e) => e.code(),
            DeleteSnapshotError::Delete(e) => provisioner_code(e),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `DeleteSnapshotRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    snapshot_id: String,
    secrets: Secrets,
}

/// The snapshot id is required; secrets within the map limit.
pub(crate) fn check(req: &csi::DeleteSnapshotRequest) -> Result<Checked, DeleteSnapshotError> {
    let snapshot_id = limits::required("snapshot_id", &req.snapshot_id)?;
    let secrets = convert::secrets(&req.secrets)?;
    Ok(Checked {
        snapshot_id: snapshot_id.to_owned(),
        secrets,
    })
}

/// Holds the snapshot, asks the provisioner (its `NOT_FOUND` is success)
/// and forgets a cached `CreateSnapshot` answer.
pub(crate) async fn run(
    service: &ControllerService,
    snapshotter: &dyn pav_sdk::Snapshot,
    checked: Checked,
) -> Result<csi::DeleteSnapshotResponse, DeleteSnapshotError> {
    let Checked {
        snapshot_id,
        secrets,
    } = checked;
    let snapshot_id = snapshot_id.as_str();
    let shared = &service.shared;
    let _guard = shared
        .in_flight
        .claim(Key::Snapshot(snapshot_id.to_owned()))?;
    tracing::info!(snapshot_id, "DeleteSnapshot");
    let mut delete = pav_sdk::build::delete_snapshot(snapshot_id);
    delete.secrets = secrets;
    match snapshotter.delete_snapshot(delete).await {
        Ok(()) | Err(pav_sdk::Error::NotFound(_)) => {}
        Err(e) => return Err(DeleteSnapshotError::Delete(e)),
    }
    (shared.snapshot_cache.lock())
        .unwrap_or_else(|e| e.into_inner())
        .forget_snapshot(snapshot_id);
    Ok(csi::DeleteSnapshotResponse {})
}
