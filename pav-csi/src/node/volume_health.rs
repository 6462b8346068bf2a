//! `NodeGetVolumeHealth` (CSI v1.13): the condition `NodeGetVolumeStats`
//! carries, in the form kubelet's `CSIVolumeHealth` reads from Kubernetes'
//! v1.37 on: no entry when healthy, one (status, reason, message) when not.
//! Finding the volume and asking the provisioner are [`published`]'s,
//! shared with `NodeGetVolumeStats`.

use pav_sdk::{HealthProblem, HealthRequest, VolumeCondition};
use tonic::{Code, Status};

use super::ephemeral::EphemeralError;
use super::published::{self, AskError, PublishedError};
use super::{NodeService, Unserved};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::limits::{self, LimitError};

/// Why a `NodeGetVolumeHealth` failed: one variant per step of [`check`]
/// and [`run`] (and the provisioner's serving it), each mapped to its code
/// once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum VolumeHealthError {
    /// The provisioner has neither Stats nor Health (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// No volume is found published at the path given (its code:
    /// `NOT_FOUND` when none is mounted there).
    #[error(transparent)]
    Published(#[from] PublishedError),
    /// Reading the ephemeral volume record failed (its code).
    #[error(transparent)]
    Ephemeral(#[from] EphemeralError),
    /// The provisioner's Stats or Health of the published volume failed
    /// (its code).
    #[error(transparent)]
    Ask(#[from] AskError),
    /// The provisioner's Health of a volume not published failed (its
    /// code: `NOT_FOUND` for a volume that does not exist).
    #[error("{}", .0.message())]
    Unpublished(pav_sdk::Error),
}

impl From<VolumeHealthError> for Status {
    fn from(err: VolumeHealthError) -> Self {
        let code = match &err {
            VolumeHealthError::Unserved(_) => Code::Unimplemented,
            VolumeHealthError::Limit(e) => e.code(),
            VolumeHealthError::Published(e) => e.code(),
            VolumeHealthError::Ephemeral(e) => e.code(),
            VolumeHealthError::Ask(e) => e.code(),
            VolumeHealthError::Unpublished(e) => provisioner_code(e),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `NodeGetVolumeHealthRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    /// Empty when not given: the CO has not seen the volume published.
    volume_publish_path: String,
    /// Empty when not given.
    staging_target_path: String,
}

/// The volume id and the paths' limits. Unlike `NodeGetVolumeStats`'
/// `volume_path`, the publish path is optional: the CO may ask about a
/// volume whose publish failed.
pub(crate) fn check(req: &csi::NodeGetVolumeHealthRequest) -> Result<Checked, VolumeHealthError> {
    limits::required("volume_id", &req.volume_id)?;
    limits::path("volume_publish_path", &req.volume_publish_path)?;
    limits::path("staging_target_path", &req.staging_target_path)?;
    Ok(Checked {
        volume_id: req.volume_id.clone(),
        volume_publish_path: req.volume_publish_path.clone(),
        staging_target_path: req.staging_target_path.clone(),
    })
}

/// With a publish path, as `NodeGetVolumeStats`: finds the volume mounted
/// there (`NOT_FOUND` when none is, or the path lies outside the kubelet
/// directory) and takes Stats' condition, else Health's. Without one,
/// asks Health about the volume alone, as the controller does. No
/// condition (a provisioner with Stats but no Health, asked without a
/// path) is healthy.
pub(crate) async fn run(
    service: &NodeService,
    checked: Checked,
) -> Result<csi::NodeGetVolumeHealthResponse, VolumeHealthError> {
    let Checked {
        volume_id,
        volume_publish_path,
        staging_target_path,
    } = checked;
    let condition = match volume_publish_path.is_empty() {
        true => unpublished_condition(service, &volume_id).await?,
        false => {
            let paths = (volume_publish_path.as_str(), staging_target_path.as_str());
            published_condition(service, &volume_id, paths).await?
        }
    };
    let condition = condition.unwrap_or_else(VolumeCondition::healthy);
    Ok(csi::NodeGetVolumeHealthResponse {
        volume_health: Some(csi_volume_health(volume_id, condition)),
    })
}

/// The condition of volume `volume_id` published at `volume_publish_path`
/// (with `staging_target_path`), as NodeGetVolumeStats finds and asks it.
async fn published_condition(
    service: &NodeService,
    volume_id: &str,
    (volume_publish_path, staging_target_path): (&str, &str),
) -> Result<Option<VolumeCondition>, VolumeHealthError> {
    let published =
        published::find(service, volume_id, volume_publish_path, staging_target_path).await?;
    let handle = service.provisioner_handle(volume_id).await?;
    let asked = published::ask(service, "NodeGetVolumeHealth", &handle, &published).await?;
    Ok(asked.condition)
}

/// Health's condition of volume `volume_id`, published nowhere the CO
/// knows, asked without a path; `None` without Health.
async fn unpublished_condition(
    service: &NodeService,
    volume_id: &str,
) -> Result<Option<VolumeCondition>, VolumeHealthError> {
    let Some(health) = service.shared.provisioner.health() else {
        return Ok(None);
    };
    let handle = service.provisioner_handle(volume_id).await?;
    let answer = health
        .condition(HealthRequest::controller(handle.as_str()))
        .await;
    let condition = answer.map_err(|e| {
        tracing::warn!(
            volume_id = handle,
            error = e.message(),
            "checking health failed"
        );
        VolumeHealthError::Unpublished(e)
    })?;
    Ok(Some(condition))
}

/// The CSI answer for `condition` of `volume_id` (the id the CO asked
/// about): no entry when healthy, one when abnormal.
fn csi_volume_health(volume_id: String, condition: VolumeCondition) -> csi::VolumeHealth {
    let health_statuses = match condition.abnormal {
        false => Vec::new(),
        true => vec![csi::volume_health::VolumeHealthEntry {
            status: csi_problem(condition.problem) as i32,
            reason: required_reason(condition.reason),
            message: condition.message,
        }],
    };
    csi::VolumeHealth {
        volume_id,
        health_statuses,
    }
}

/// `reason`, which CSI requires: a condition built without one (a struct
/// literal, not [`VolumeCondition::abnormal`]) gets `abnormal`'s.
fn required_reason(reason: String) -> String {
    match reason.is_empty() {
        true => VolumeCondition::ABNORMAL_REASON.to_owned(),
        false => reason,
    }
}

/// CSI's name for `problem`.
fn csi_problem(problem: HealthProblem) -> csi::VolumeHealthErrorType {
    use csi::VolumeHealthErrorType as Csi;
    match problem {
        HealthProblem::Inaccessible => Csi::Inaccessible,
        HealthProblem::Degraded => Csi::Degraded,
        HealthProblem::DataLoss => Csi::DataLoss,
        // A problem pav-sdk adds later is, until mapped, what an abnormal
        // volume is by default.
        _ => Csi::Inaccessible,
    }
}
