//! `DeleteVolume`: a volume that is gone already is deleted; one still
//! staged on this node (when this process serves the node service too) is
//! not.

use std::path::PathBuf;

use pav_sdk::Secrets;
use tonic::{Code, Status};

use super::{ControllerService, Unserved};
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::node_dirs::NodeDirError;

/// Why a `DeleteVolume` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeleteVolumeError {
    /// The provisioner does not create volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The task reading the staging record failed (`INTERNAL`).
    #[error("staging record task")]
    RecordTask(#[source] tokio::task::JoinError),
    /// The staging record could not be read (`INTERNAL`).
    #[error("reading the staging record")]
    Record(#[source] std::io::Error),
    /// The volume is staged on this node (`FAILED_PRECONDITION`: the CO
    /// retries).
    #[error(
        "volume {volume_id:?} is still staged on this node at {}: it is deleted once \
         NodeUnstageVolume has unstaged it",
        staging.display()
    )]
    Staged { volume_id: String, staging: PathBuf },
    /// The provisioner's Delete failed (its code).
    #[error("{}", .0.message())]
    Delete(pav_sdk::Error),
    /// The deleted volume's node directory could not be removed
    /// (`INTERNAL`, or the provisioner's code for its node clean-up; the
    /// CO's retry removes it, the volume being gone).
    #[error(transparent)]
    NodeDir(#[from] NodeDirError),
}

impl From<DeleteVolumeError> for Status {
    fn from(err: DeleteVolumeError) -> Self {
        let code = match &err {
            DeleteVolumeError::Unserved(_) => Code::Unimplemented,
            DeleteVolumeError::Limit(e) => e.code(),
            DeleteVolumeError::Busy(e) => e.code(),
            DeleteVolumeError::RecordTask(_) | DeleteVolumeError::Record(_) => Code::Internal,
            DeleteVolumeError::Staged { .. } => Code::FailedPrecondition,
            DeleteVolumeError::Delete(e) => provisioner_code(e),
            DeleteVolumeError::NodeDir(e) => e.code(),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `DeleteVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) volume_id: String,
    secrets: Secrets,
}

/// The volume id is required; secrets within the map limit.
pub(crate) fn check(req: &csi::DeleteVolumeRequest) -> Result<Checked, DeleteVolumeError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let secrets = convert::secrets(&req.secrets)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        secrets,
    })
}

/// Holds the volume, refuses it while it is staged on this node, asks the
/// provisioner's Delete (if it has one; its `NOT_FOUND` is success) and
/// forgets a cached `CreateVolume` answer.
pub(crate) async fn run(
    service: &ControllerService,
    checked: Checked,
) -> Result<csi::DeleteVolumeResponse, DeleteVolumeError> {
    let Checked { volume_id, secrets } = checked;
    let volume_id = volume_id.as_str();
    let shared = &service.shared;
    let _guard = shared.in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    tracing::info!(volume_id, "DeleteVolume");
    refuse_staged(shared.staged.as_ref(), volume_id).await?;
    if let Some(deleter) = shared.provisioner.delete() {
        let mut delete = pav_sdk::build::delete(volume_id);
        delete.secrets = secrets;
        match deleter.delete(delete).await {
            Ok(()) | Err(pav_sdk::Error::NotFound(_)) => {}
            Err(e) => return Err(DeleteVolumeError::Delete(e)),
        }
    }
    (shared.create_cache.lock())
        .unwrap_or_else(|e| e.into_inner())
        .forget_volume(volume_id);
    // Not staged here (refused above): its node directory in this
    // process goes now; node plugins elsewhere find out from the records.
    if let Some(dirs) = &shared.node_dirs {
        dirs.remove_volume(shared.provisioner.stage(), volume_id)
            .await?;
    }
    Ok(csi::DeleteVolumeResponse {})
}

/// [`DeleteVolumeError::Staged`] (the CSI spec's "volume in use"; the CO
/// retries) while this node's staging records hold `volume_id`. The CO does not
/// order DeleteVolume after the last NodeUnstageVolume: once a client
/// pod's object is gone its claim may be deleted while the kubelet is still
/// unstaging, and a Delete then would remove the storage under the
/// provisioner's Unstage. Only this node's records are known here: a
/// controller serving no node service (`records` is `None`) leaves the
/// check to the provisioner's Delete.
async fn refuse_staged(
    records: Option<&crate::staged::Records>,
    volume_id: &str,
) -> Result<(), DeleteVolumeError> {
    let Some(records) = records.cloned() else {
        return Ok(());
    };
    let id = volume_id.to_owned();
    let record = tokio::task::spawn_blocking(move || records.get(&id))
        .await
        .map_err(DeleteVolumeError::RecordTask)?
        .map_err(DeleteVolumeError::Record)?;
    match record {
        None => Ok(()),
        Some(record) => Err(DeleteVolumeError::Staged {
            volume_id: volume_id.to_owned(),
            staging: record.staging,
        }),
    }
}
