//! `GetVolumeGroupSnapshot`: a group snapshot as it is now.

use pav_sdk::{Secrets, VolumeId};
use tonic::{Code, Status};

use super::{AnswerError, Unserved, csi_group};
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::limits::{self, LimitError};

/// Why a `GetVolumeGroupSnapshot` failed, one variant per step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GetGroupError {
    /// The provisioner takes no group snapshots (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks the spec's rules or limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Request(#[from] LimitError),
    /// The provisioner's answer, with its code (`NOT_FOUND`: no such group).
    #[error("{}", .0.message())]
    Provisioner(pav_sdk::Error),
    /// The request's `snapshot_ids` are not the group's members
    /// (`INVALID_ARGUMENT`, as the spec says).
    #[error("{}", .0.message())]
    Members(pav_sdk::Error),
    /// Its answer cannot be carried (`INTERNAL`).
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

impl From<GetGroupError> for Status {
    fn from(error: GetGroupError) -> Status {
        let code = match &error {
            GetGroupError::Unserved(_) => Code::Unimplemented,
            GetGroupError::Request(e) => e.code(),
            GetGroupError::Provisioner(e) | GetGroupError::Members(e) => provisioner_code(e),
            GetGroupError::Answer(_) => Code::Internal,
        };
        Status::new(code, error_chain(&error))
    }
}

/// A `GetVolumeGroupSnapshotRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    group_snapshot_id: String,
    snapshot_ids: Vec<VolumeId>,
    secrets: Secrets,
}

/// The group id is required; the members' ids each within the limits;
/// secrets within the map limit.
pub(crate) fn check(req: &csi::GetVolumeGroupSnapshotRequest) -> Result<Checked, GetGroupError> {
    let group_snapshot_id = limits::required("group_snapshot_id", &req.group_snapshot_id)?;
    let snapshot_ids = super::snapshot_ids(&req.snapshot_ids)?;
    let secrets = convert::secrets(&req.secrets)?;
    Ok(Checked {
        group_snapshot_id: group_snapshot_id.to_owned(),
        snapshot_ids,
        secrets,
    })
}

/// Asks the provisioner, and checks the members it answers are those the
/// request names (when it names any).
pub(crate) async fn run(
    grouper: &dyn pav_sdk::GroupSnapshot,
    checked: Checked,
) -> Result<csi::GetVolumeGroupSnapshotResponse, GetGroupError> {
    let Checked {
        group_snapshot_id,
        snapshot_ids,
        secrets,
    } = checked;
    let mut get = pav_sdk::group_snapshot::build::get_group_snapshot(
        group_snapshot_id.as_str(),
        snapshot_ids.iter().cloned(),
    );
    get.secrets = secrets;
    let group = (grouper.get_group_snapshot(get).await).map_err(GetGroupError::Provisioner)?;
    pav_sdk::group_snapshot::check_members(
        &group_snapshot_id,
        &snapshot_ids,
        group.snapshots.iter().map(|s| s.handle.as_str()),
    )
    .map_err(GetGroupError::Members)?;
    Ok(csi::GetVolumeGroupSnapshotResponse {
        group_snapshot: Some(csi_group(group)?),
    })
}
