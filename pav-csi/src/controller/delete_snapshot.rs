//! `DeleteSnapshot`: a snapshot that is gone already is deleted.

use pav_sdk::Secrets;
use tonic::Status;

use super::ControllerService;
use crate::convert;
use crate::csi;
use crate::error::status;
use crate::guard::Key;
use crate::limits;

/// A `DeleteSnapshotRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    snapshot_id: String,
    secrets: Secrets,
}

/// The snapshot id is required; secrets within the map limit.
pub(crate) fn check(req: &csi::DeleteSnapshotRequest) -> Result<Checked, Status> {
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
) -> Result<csi::DeleteSnapshotResponse, Status> {
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
        Err(e) => return Err(status(e)),
    }
    (shared.snapshot_cache.lock())
        .unwrap_or_else(|e| e.into_inner())
        .forget_snapshot(snapshot_id);
    Ok(csi::DeleteSnapshotResponse {})
}
