//! What `NodeGetVolumeStats` and `NodeGetVolumeHealth` share: the volume
//! published at the path kubelet names, found in the mount table, and what
//! the provisioner says of it (its Stats' answer, whose condition is
//! Health's when Stats gave none).

use std::path::{Path, PathBuf};

use pav_sdk::{Provisioner, Usage, VolumeCondition, VolumeMode, VolumeStats};
use tonic::Code;

use super::binds::{BindError, blocking, mounted_mode};
use super::{NodeService, volume_paths};
use crate::error::provisioner_code;

/// Why no published volume was found at a request's path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishedError {
    /// No volume is mounted at the path, or it lies outside the kubelet
    /// directory (`NOT_FOUND`).
    #[error("no volume is published at {volume_path}")]
    NotPublished { volume_path: String },
    /// Reading what is mounted there failed (its code).
    #[error(transparent)]
    Bind(#[from] BindError),
}

impl PublishedError {
    /// The code of a call that found no published volume.
    pub(crate) fn code(&self) -> Code {
        match self {
            PublishedError::NotPublished { .. } => Code::NotFound,
            PublishedError::Bind(e) => e.code(),
        }
    }
}

/// Why the provisioner could not say how a published volume is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    /// The provisioner's Stats failed (its code).
    #[error("{}", .0.message())]
    Stats(pav_sdk::Error),
    /// The provisioner's Health failed (its code).
    #[error("{}", .0.message())]
    Health(pav_sdk::Error),
}

impl AskError {
    /// The code of the provisioner's failure.
    pub(crate) fn code(&self) -> Code {
        match self {
            AskError::Stats(e) | AskError::Health(e) => provisioner_code(e),
        }
    }
}

/// A volume found mounted at a stats or health request's path.
#[derive(Debug)]
pub(crate) struct Published {
    /// The path, resolved inside the kubelet directory.
    pub(crate) path: PathBuf,
    /// Its staging path: the request's, else the one recorded when the
    /// volume was staged on this node.
    pub(crate) staging_path: Option<PathBuf>,
    /// What is mounted there.
    pub(crate) mode: VolumeMode,
    /// What pav-csi measures of it ([`measure`]).
    pub(crate) measured: std::io::Result<VolumeStats>,
}

/// What the provisioner says of a published volume.
#[derive(Debug)]
pub(crate) struct Asked {
    /// Its Stats' answer, without the condition, when it has Stats.
    pub(crate) stats: Option<VolumeStats>,
    /// Stats' condition, else Health's; `None` when neither gave one.
    pub(crate) condition: Option<VolumeCondition>,
}

/// Whether the node reports volume conditions (`VOLUME_CONDITION` and
/// `GET_VOLUME_HEALTH`): the provisioner has Stats or Health.
pub(crate) fn reports_condition(provisioner: &Provisioner) -> bool {
    provisioner.stats().is_some() || provisioner.health().is_some()
}

/// The volume mounted at `volume_path`, with its staging path and what
/// pav-csi measures of it; `NotPublished` when nothing is mounted there or
/// the path lies outside the kubelet directory.
pub(crate) async fn find(
    service: &NodeService,
    volume_id: &str,
    volume_path: &str,
    staging_target_path: &str,
) -> Result<Published, PublishedError> {
    let node = service.node.clone();
    let (id, asked, staging_asked) = (
        volume_id.to_owned(),
        volume_path.to_owned(),
        staging_target_path.to_owned(),
    );
    // kubelet names no staging path: a volume staged per node has one recorded.
    let recorded = !service.shared.provisioner.stages_on_publish();
    let found = blocking(move || -> Result<_, BindError> {
        let paths = volume_paths(&node, &id, (&asked, &staging_asked), recorded);
        let Some((path, staging_path)) = paths else {
            return Ok(None);
        };
        let Some(mode) = mounted_mode(&path)? else {
            return Ok(None);
        };
        let measured = measure(&path, mode);
        Ok(Some(Published {
            path,
            staging_path,
            mode,
            measured,
        }))
    });
    found.await?.ok_or_else(|| PublishedError::NotPublished {
        volume_path: volume_path.to_owned(),
    })
}

/// Asks the provisioner about the published volume `handle`: its Stats,
/// if it has one, given what pav-csi measured; then its Health, if it has
/// one, when Stats gave no condition. `rpc` names the call in the log.
pub(crate) async fn ask(
    service: &NodeService,
    rpc: &'static str,
    handle: &str,
    published: &Published,
) -> Result<Asked, AskError> {
    let provisioner = &service.shared.provisioner;
    let mut stats = match provisioner.stats() {
        None => None,
        Some(provisioner) => {
            let path = published.path.clone();
            let mut ask = pav_sdk::build::stats(handle, path, published.mode);
            ask.staging_path = published.staging_path.clone();
            ask.measured = published.measured.as_ref().ok().cloned();
            let answer = provisioner.stats(ask).await.map_err(|e| {
                tracing::warn!(volume_id = handle, error = e.message(), "{rpc} failed");
                AskError::Stats(e)
            })?;
            Some(answer)
        }
    };
    let mut condition = stats.as_mut().and_then(|stats| stats.condition.take());
    if let (None, Some(health)) = (&condition, provisioner.health()) {
        let path = published.path.clone();
        let ask = pav_sdk::HealthRequest::node(handle, path, published.mode);
        let answer = health.condition(ask).await.map_err(|e| {
            tracing::warn!(
                volume_id = handle,
                error = e.message(),
                "checking health failed"
            );
            AskError::Health(e)
        })?;
        condition = Some(answer);
    }
    Ok(Asked { stats, condition })
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
