//! `NodeGetVolumeStats`: the provisioner's answer, or what pav-csi
//! measures of the volume mounted at the path given.

use std::path::Path;

use pav_sdk::{Usage, VolumeCondition, VolumeMode, VolumeStats};
use tonic::{Code, Status};

use super::binds::{BindError, blocking, mounted_mode};
use super::ephemeral::EphemeralError;
use super::{NodeService, volume_paths};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::limits::{self, Int64Error, LimitError};

/// Why a `NodeGetVolumeStats` failed: one variant per step of [`check`]
/// and [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatsError {
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// No volume is mounted at the path (`NOT_FOUND`).
    #[error("no volume is published at {volume_path}")]
    NotPublished { volume_path: String },
    /// Reading what is mounted there failed (its code).
    #[error(transparent)]
    Bind(#[from] BindError),
    /// Reading the ephemeral volume record failed (its code).
    #[error(transparent)]
    Ephemeral(#[from] EphemeralError),
    /// Measuring the volume failed (`INTERNAL`).
    #[error("reading usage")]
    Usage(#[source] std::io::Error),
    /// The provisioner's Stats failed (its code).
    #[error("{}", .0.message())]
    Stats(pav_sdk::Error),
    /// The provisioner's Health failed (its code).
    #[error("{}", .0.message())]
    Health(pav_sdk::Error),
    /// A count does not fit CSI's int64 (`INTERNAL`).
    #[error(transparent)]
    Size(#[from] Int64Error),
}

impl From<StatsError> for Status {
    fn from(err: StatsError) -> Self {
        let code = match &err {
            StatsError::Limit(e) => e.code(),
            StatsError::NotPublished { .. } => Code::NotFound,
            StatsError::Bind(e) => e.code(),
            StatsError::Ephemeral(e) => e.code(),
            StatsError::Usage(_) | StatsError::Size(_) => Code::Internal,
            StatsError::Stats(e) | StatsError::Health(e) => provisioner_code(e),
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
    let not_published = || StatsError::NotPublished {
        volume_path: volume_path.clone(),
    };
    let (node, id, asked) = (service.node.clone(), volume_id.clone(), volume_path.clone());
    let recorded = !service.shared.provisioner.stages_on_publish();
    let mounted = blocking(move || -> Result<_, BindError> {
        let paths = volume_paths(&node, &id, (&asked, &staging_target_path), recorded);
        let Some((path, staging_path)) = paths else {
            return Ok(None);
        };
        let Some(mode) = mounted_mode(&path)? else {
            return Ok(None);
        };
        let measured = measure(&path, mode);
        Ok(Some((path, staging_path, mode, measured)))
    });
    let (path, staging_path, mode, measured) = mounted.await?.ok_or_else(not_published)?;
    let provisioner = &service.shared.provisioner;
    let volume_id = service.provisioner_handle(&volume_id).await?;
    let mut stats = match provisioner.stats() {
        None => measured.map_err(StatsError::Usage)?,
        Some(provisioner) => {
            let mut ask = pav_sdk::build::stats(volume_id.as_str(), path.clone(), mode);
            ask.staging_path = staging_path;
            ask.measured = measured.ok();
            provisioner.stats(ask).await.map_err(|e| {
                tracing::warn!(volume_id, error = e.message(), "NodeGetVolumeStats failed");
                StatsError::Stats(e)
            })?
        }
    };
    if let (None, Some(health)) = (&stats.condition, provisioner.health()) {
        let ask = pav_sdk::HealthRequest::node(volume_id.as_str(), path, mode);
        let condition = health.condition(ask).await.map_err(|e| {
            tracing::warn!(volume_id, error = e.message(), "checking health failed");
            StatsError::Health(e)
        })?;
        stats.condition = Some(condition);
    }
    let condition_advertised = provisioner.stats().is_some() || provisioner.health().is_some();
    Ok(csi_stats(stats, condition_advertised)?)
}

/// What pav-csi measures of the volume at `path` itself: `statvfs` (bytes
/// and inodes) for a filesystem, the device's size for a block volume.
fn measure(path: &Path, mode: VolumeMode) -> std::io::Result<VolumeStats> {
    if mode == VolumeMode::Filesystem {
        let fs = rustix::fs::statvfs(path)?;
        let block = fs.f_frsize;
        let bytes = Usage {
            total: fs.f_blocks.saturating_mul(block),
            available: fs.f_bavail.saturating_mul(block),
            used: (fs.f_blocks.saturating_sub(fs.f_bfree)).saturating_mul(block),
        };
        let inodes = Usage {
            total: fs.f_files,
            available: fs.f_ffree,
            used: fs.f_files.saturating_sub(fs.f_ffree),
        };
        return Ok(VolumeStats::bytes(bytes).with_inodes(inodes));
    }
    // A block device's size is where seeking to its end lands.
    use std::io::Seek;
    let size = std::fs::File::open(path)?.seek(std::io::SeekFrom::End(0))?;
    Ok(VolumeStats::bytes(Usage {
        total: size,
        available: 0,
        used: 0,
    }))
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
