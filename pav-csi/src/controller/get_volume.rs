//! `ControllerGetVolume`: one volume and its condition (for
//! external-health-monitor's controller).

use tonic::{Code, Status};

use super::Unserved;
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::limits::{self, LimitError};

/// A `ControllerGetVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
}

/// The volume id is required and within CSI's limits.
pub(crate) fn check(req: &csi::ControllerGetVolumeRequest) -> Result<Checked, GetVolumeError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
    })
}

/// Why a `ControllerGetVolume` failed: one variant per step of [`check`]
/// and [`run`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum GetVolumeError {
    /// The provisioner has no listing or no Health (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// The volume id is missing or too long (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Listing the volumes, to find this one, failed.
    #[error("listing the volumes failed")]
    Listing(#[source] pav_sdk::Error),
    /// The listing does not have the volume.
    #[error("volume {0:?} does not exist")]
    Unknown(String),
    /// The provisioner listed it in a form CSI cannot carry.
    #[error("the provisioner listed volume {volume:?} in a form CSI cannot return: {refused}")]
    Unanswerable { volume: String, refused: String },
    /// The provisioner's Health failed.
    #[error("checking the volume's health failed")]
    Health(#[source] pav_sdk::Error),
}

impl From<GetVolumeError> for Status {
    /// One mapping for every failure: the provisioner's codes pass on
    /// (its `NOT_FOUND` from Health too: the volume went away meanwhile).
    fn from(err: GetVolumeError) -> Self {
        let code = match &err {
            GetVolumeError::Unserved(_) => Code::Unimplemented,
            GetVolumeError::Limit(e) => e.code(),
            GetVolumeError::Listing(e) | GetVolumeError::Health(e) => provisioner_code(e),
            GetVolumeError::Unknown(_) => Code::NotFound,
            GetVolumeError::Unanswerable { .. } => Code::Internal,
        };
        Status::new(code, error_chain(&err))
    }
}

/// Finds the volume in the provisioner's listing (`NOT_FOUND` when it is
/// not there), takes its condition from the listing or else from Health,
/// and answers both. No node ids: pav-csi does not publish volumes to
/// nodes from the controller (no `PUBLISH_UNPUBLISH_VOLUME`).
pub(crate) async fn run(
    lister: &dyn pav_sdk::List,
    health: &dyn pav_sdk::Health,
    checked: Checked,
) -> Result<csi::ControllerGetVolumeResponse, GetVolumeError> {
    let Checked { volume_id } = checked;
    let listed = find(lister, &volume_id).await?;
    let volume =
        convert::csi_volume(&listed.volume).map_err(|refused| GetVolumeError::Unanswerable {
            volume: volume_id.clone(),
            refused: refused.to_string(),
        })?;
    let condition = match listed.condition {
        Some(condition) => condition,
        None => condition_of(health, &volume_id).await?,
    };
    Ok(csi::ControllerGetVolumeResponse {
        volume: Some(volume),
        status: Some(csi::controller_get_volume_response::VolumeStatus {
            published_node_ids: Vec::new(),
            volume_condition: Some(csi_condition(condition)),
        }),
    })
}

/// The listed volume whose handle is `volume_id`.
async fn find(
    lister: &dyn pav_sdk::List,
    volume_id: &str,
) -> Result<pav_sdk::ListedVolume, GetVolumeError> {
    let volumes = lister.list().await.map_err(GetVolumeError::Listing)?;
    volumes
        .into_iter()
        .find(|listed| listed.volume.handle.as_str() == volume_id)
        .ok_or_else(|| GetVolumeError::Unknown(volume_id.to_owned()))
}

/// What the provisioner's Health says of `volume_id`, asked as the
/// controller (no path).
async fn condition_of(
    health: &dyn pav_sdk::Health,
    volume_id: &str,
) -> Result<pav_sdk::VolumeCondition, GetVolumeError> {
    let ask = pav_sdk::HealthRequest::controller(volume_id);
    health.condition(ask).await.map_err(|e| {
        tracing::warn!(volume_id, error = e.message(), "checking health failed");
        GetVolumeError::Health(e)
    })
}

/// A condition as CSI carries it.
pub(crate) fn csi_condition(condition: pav_sdk::VolumeCondition) -> csi::VolumeCondition {
    csi::VolumeCondition {
        abnormal: condition.abnormal,
        message: condition.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_id_is_required_and_limited() {
        let request = |id: &str| csi::ControllerGetVolumeRequest {
            volume_id: id.into(),
        };
        let missing = Status::from(check(&request("")).unwrap_err());
        assert_eq!(missing.code(), Code::InvalidArgument);
        assert!(missing.message().contains("volume_id"), "{missing:?}");
        let long = Status::from(check(&request(&"v".repeat(129))).unwrap_err());
        assert_eq!(long.code(), Code::InvalidArgument);
        assert_eq!(check(&request("vol-1")).unwrap().volume_id, "vol-1");
    }

    #[test]
    fn each_failure_has_its_code() {
        let not_found = pav_sdk::Error::NotFound("gone".into());
        let codes = [
            (
                GetVolumeError::Listing(pav_sdk::Error::Unavailable("busy".into())),
                Code::Unavailable,
            ),
            (GetVolumeError::Unknown("vol-1".into()), Code::NotFound),
            (
                GetVolumeError::Unanswerable {
                    volume: "vol-1".into(),
                    refused: "too long".into(),
                },
                Code::Internal,
            ),
            (GetVolumeError::Health(not_found), Code::NotFound),
        ];
        for (error, code) in codes {
            let shown = error_chain(&error);
            let status = Status::from(error);
            assert_eq!(status.code(), code, "{shown}");
            assert_eq!(status.message(), shown);
        }
    }
}
