//! `DeleteVolumeGroupSnapshot`: a group snapshot and its members; one
//! that is gone already is deleted.

use pav_sdk::{Secrets, VolumeId};
use tonic::Status;

use crate::convert;
use crate::csi;
use crate::error::status;
use crate::guard::Key;
use crate::limits;
use crate::shared::Shared;

/// Why a `DeleteVolumeGroupSnapshot` failed, one variant per step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeleteGroupError {
    /// A field breaks the spec's rules or limits (`INVALID_ARGUMENT`).
    #[error("{}", .0.message())]
    Request(Status),
    /// Another call holds the group (`ABORTED`).
    #[error("{}", .0.message())]
    Busy(Status),
    /// The provisioner's answer, with its code (`NOT_FOUND` is success).
    #[error("{}", .0.message())]
    Provisioner(pav_sdk::Error),
}

impl From<DeleteGroupError> for Status {
    fn from(error: DeleteGroupError) -> Status {
        match error {
            DeleteGroupError::Request(s) | DeleteGroupError::Busy(s) => s,
            DeleteGroupError::Provisioner(e) => status(e),
        }
    }
}

/// A `DeleteVolumeGroupSnapshotRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    group_snapshot_id: String,
    snapshot_ids: Vec<VolumeId>,
    secrets: Secrets,
}

/// The group id is required; the members' ids (the spec requires them,
/// csi-sanity sends none) each within the limits; secrets within the map
/// limit.
pub(crate) fn check(
    req: &csi::DeleteVolumeGroupSnapshotRequest,
) -> Result<Checked, DeleteGroupError> {
    let group_snapshot_id = limits::required("group_snapshot_id", &req.group_snapshot_id)
        .map_err(DeleteGroupError::Request)?;
    let snapshot_ids = super::snapshot_ids(&req.snapshot_ids).map_err(DeleteGroupError::Request)?;
    let secrets = convert::secrets(&req.secrets).map_err(DeleteGroupError::Request)?;
    Ok(Checked {
        group_snapshot_id: group_snapshot_id.to_owned(),
        snapshot_ids,
        secrets,
    })
}

/// Holds the group and asks the provisioner (its `NOT_FOUND` is success).
pub(crate) async fn run(
    shared: &Shared,
    grouper: &dyn pav_sdk::GroupSnapshot,
    checked: Checked,
) -> Result<csi::DeleteVolumeGroupSnapshotResponse, DeleteGroupError> {
    let Checked {
        group_snapshot_id,
        snapshot_ids,
        secrets,
    } = checked;
    let _guard = (shared.in_flight)
        .claim(Key::GroupSnapshot(group_snapshot_id.clone()))
        .map_err(DeleteGroupError::Busy)?;
    tracing::info!(
        group_snapshot_id,
        ?snapshot_ids,
        "DeleteVolumeGroupSnapshot"
    );
    let mut delete =
        pav_sdk::group_snapshot::build::delete_group_snapshot(group_snapshot_id, snapshot_ids);
    delete.secrets = secrets;
    match grouper.delete_group_snapshot(delete).await {
        Ok(()) | Err(pav_sdk::Error::NotFound(_)) => Ok(csi::DeleteVolumeGroupSnapshotResponse {}),
        Err(e) => Err(DeleteGroupError::Provisioner(e)),
    }
}
