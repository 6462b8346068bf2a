//! `DeleteVolumeGroupSnapshot`: a group snapshot and its members; one
//! that is gone already is deleted.

use pav_sdk::{Secrets, VolumeId};
use tonic::{Code, Status};

use super::Unserved;
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::shared::Shared;

/// Why a `DeleteVolumeGroupSnapshot` failed, one variant per step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeleteGroupError {
    /// The provisioner takes no group snapshots (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks the spec's rules or limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Request(#[from] LimitError),
    /// Another call holds the group (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The provisioner's answer, with its code (`NOT_FOUND` is success).
    #[error("{}", .0.message())]
    Provisioner(pav_sdk::Error),
}

impl From<DeleteGroupError> for Status {
    fn from(error: DeleteGroupError) -> Status {
        let code = match &error {
            DeleteGroupError::Unserved(_) => Code::Unimplemented,
            DeleteGroupError::Request(e) => e.code(),
            DeleteGroupError::Busy(e) => e.code(),
            DeleteGroupError::Provisioner(e) => provisioner_code(e),
        };
        Status::new(code, error_chain(&error))
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
    let group_snapshot_id = limits::required("group_snapshot_id", &req.group_snapshot_id)?;
    let snapshot_ids = super::snapshot_ids(&req.snapshot_ids)?;
    let secrets = convert::secrets(&req.secrets)?;
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
    let _guard = (shared.in_flight).claim(Key::GroupSnapshot(group_snapshot_id.clone()))?;
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
