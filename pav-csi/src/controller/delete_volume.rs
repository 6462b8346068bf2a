//! `DeleteVolume`: a volume that is gone already is deleted; one still
//! staged on this node (when this process serves the node service too) is
//! not.

use pav_sdk::Secrets;
use tonic::Status;

use super::ControllerService;
use crate::convert;
use crate::csi;
use crate::error::{internal, status};
use crate::guard::Key;
use crate::limits;

/// A `DeleteVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) volume_id: String,
    secrets: Secrets,
}

/// The volume id is required; secrets within the map limit.
pub(crate) fn check(req: &csi::DeleteVolumeRequest) -> Result<Checked, Status> {
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
) -> Result<csi::DeleteVolumeResponse, Status> {
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
            Err(e) => return Err(status(e)),
        }
    }
    (shared.create_cache.lock())
        .unwrap_or_else(|e| e.into_inner())
        .forget_volume(volume_id);
    Ok(csi::DeleteVolumeResponse {})
}

/// `FAILED_PRECONDITION` (the CSI spec's "volume in use"; the CO retries)
/// while this node's staging records hold `volume_id`. The CO does not
/// order DeleteVolume after the last NodeUnstageVolume: once a client
/// pod's object is gone its claim may be deleted while the kubelet is still
/// unstaging, and a Delete then would remove the storage under the
/// provisioner's Unstage. Only this node's records are known here: a
/// controller serving no node service (`records` is `None`) leaves the
/// check to the provisioner's Delete.
async fn refuse_staged(
    records: Option<&crate::staged::Records>,
    volume_id: &str,
) -> Result<(), Status> {
    let Some(records) = records.cloned() else {
        return Ok(());
    };
    let id = volume_id.to_owned();
    let record = tokio::task::spawn_blocking(move || records.get(&id))
        .await
        .map_err(|e| internal("staging record task", e))?
        .map_err(|e| internal("reading the staging record", e))?;
    match record {
        None => Ok(()),
        Some(record) => Err(Status::failed_precondition(format!(
            "volume {volume_id:?} is still staged on this node at {}: it is deleted once \
             NodeUnstageVolume has unstaged it",
            record.staging.display()
        ))),
    }
}
