//! `DeleteVolume`: a volume that is gone already is deleted.

use pav_sdk::Secrets;
use tonic::Status;

use super::ControllerService;
use crate::convert;
use crate::csi;
use crate::error::status;
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

/// Holds the volume, asks the provisioner's Delete (if it has one; its
/// `NOT_FOUND` is success) and forgets a cached `CreateVolume` answer.
pub(crate) async fn run(
    service: &ControllerService,
    checked: Checked,
) -> Result<csi::DeleteVolumeResponse, Status> {
    let Checked { volume_id, secrets } = checked;
    let volume_id = volume_id.as_str();
    let shared = &service.shared;
    let _guard = shared.in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    tracing::info!(volume_id, "DeleteVolume");
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
