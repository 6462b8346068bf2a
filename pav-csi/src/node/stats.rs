//! `NodeGetVolumeStats`: the provisioner's answer, or what pav-csi
//! measures of the volume mounted at the path given. Finding the volume
//! and asking the provisioner are [`published`]'s, shared with
//! `NodeGetVolumeHealth`.

use pav_sdk::{Usage, VolumeCondition, VolumeStats};
use tonic::{Code, Status};

use super::NodeService;
use super::ephemeral::EphemeralError;
use super::published::{self, AskError, Asked, PublishedError};
use crate::csi;
use crate::error::error_chain;
use crate::limits::{self, Int64Error, LimitError};

/// Why a `NodeGetVolumeStats` failed: one variant per step of [`check`]
/// and [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatsError {
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// No volume is found published at the path (its code: `NOT_FOUND`
    /// when none is mounted there).
    #[error(transparent)]
    Published(#[from] PublishedError),
    /// Reading the ephemeral volume record failed (its code).
    #[error(transparent)]
    Ephemeral(#[from] EphemeralError),
    /// The provisioner's Stats or Health failed (its code).
    #[error(transparent)]
    Ask(#[from] AskError),
    /// Measuring the volume failed (`INTERNAL`).
    #[error("reading usage")]
    Usage(#[source] std::io::Error),
    /// A count does not fit CSI's int64 (`INTERNAL`).
    #[error(transparent)]
    Size(#[from] Int64Error),
}

impl From<StatsError> for Status {
    fn from(err: StatsError) -> Self {
        let code = match &err {
            StatsError::Limit(e) => e.code(),
            StatsError::Published(e) => e.code(),
            StatsError::Ephemeral(e) => e.code(),
            StatsError::Ask(e) => e.code(),
            StatsError::Usage(_) | StatsError::Size(_) => Code::Internal,
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `NodeGetVolumeStatsRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    volume_path: String,
    /// Empty when not given.
    staging_target_path: String,
}

/// The volume id, the volume path and the paths' limits.
pub(crate) fn check(req: &csi::NodeGetVolumeStatsRequest) -> Result<Checked, StatsError> {
    limits::required("volume_id", &req.volume_id)?;
    let volume_path = limits::required_path("volume_path", &req.volume_path)?;
    limits::path("staging_target_path", &req.staging_target_path)?;
    Ok(Checked {
        volume_id: req.volume_id.clone(),
        volume_path: volume_path.to_owned(),
        staging_target_path: req.staging_target_path.clone(),
    })
}

/// Finds the volume mounted at the path (`NOT_FOUND` when none is, or the
/// path lies outside the kubelet directory), measures it and asks the
/// provisioner's Stats, if it has one, then its Health when it has one
/// and Stats gave no condition.
pub(crate) async fn run(
    service: &NodeService,
    checked: Checked,
) -> Result<csi::NodeGetVolumeStatsResponse, StatsError> {
    let Checked {
        volume_id,
        volume_path,
        staging_target_path,
    } = checked;
    let published =
        published::find(service, &volume_id, &volume_path, &staging_target_path).await?;
    let handle = service.provisioner_handle(&volume_id).await?;
    let asked = published::ask(service, "NodeGetVolumeStats", &handle, &published).await?;
    let Asked { stats, condition } = asked;
    let mut stats = match stats {
        Some(stats) => stats,
        None => published.measured.map_err(StatsError::Usage)?,
    };
    stats.condition = condition;
    let condition_advertised = published::reports_condition(&service.shared.provisioner);
    Ok(csi_stats(stats, condition_advertised)?)
}

/// The CSI answer for `stats`. With `VOLUME_CONDITION` advertised
/// (`condition_advertised`) the spec requires a condition: none from the
/// provisioner is reported as healthy.
fn csi_stats(
    stats: VolumeStats,
    condition_advertised: bool,
) -> Result<csi::NodeGetVolumeStatsResponse, Int64Error> {
    use csi::volume_usage::Unit;
    let usage = |unit: Unit, u: Usage| {
        let count = |field: &str, value| {
            let field = format!("{} {field}", unit.as_str_name().to_lowercase());
            limits::int64(&field, value)
        };
        Ok::<_, Int64Error>(csi::VolumeUsage {
            available: count("available", u.available)?,
            total: count("total", u.total)?,
            used: count("used", u.used)?,
            unit: unit as i32,
        })
    };
    let mut usages = Vec::new();
    if let Some(bytes) = stats.bytes {
        usages.push(usage(Unit::Bytes, bytes)?);
    }
    if let Some(inodes) = stats.inodes {
        usages.push(usage(Unit::Inodes, inodes)?);
    }
    let condition = match stats.condition {
        Some(c) => Some(c),
        None if condition_advertised => Some(VolumeCondition::healthy()),
        None => None,
    };
    Ok(csi::NodeGetVolumeStatsResponse {
        usage: usages,
        volume_condition: condition.map(|c| csi::VolumeCondition {
            abnormal: c.abnormal,
            message: c.message,
        }),
    })
}
