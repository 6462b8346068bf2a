//! Whether a staging or target path is free for a new mount: mounting there
//! must neither hide other mounts nor reach into another volume.
//!
//! Kubelet never asks for such paths; the checks are defence in depth
//! against a bug or a compromised caller, made only before a new mount (a
//! repeated call is answered from the mount table first).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tonic::Code;

use crate::mount::TableError;
use crate::mount::blocking as mount;
use crate::staged::Records;

/// Why a path is not free for a new mount, naming the field and the path;
/// or why that could not be told.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OccupancyError {
    /// Mounting there would hide a mount below it.
    #[error(
        "{field} {path:?} holds the mount point {point:?} (and {more} more): mounting there would hide it"
    )]
    HidesMount {
        field: &'static str,
        path: PathBuf,
        point: PathBuf,
        more: usize,
    },
    /// It lies below a recorded staging path.
    #[error("{field} {path:?} lies inside the staging path of volume {volume_id:?}")]
    InsideStaging {
        field: &'static str,
        path: PathBuf,
        volume_id: String,
    },
    /// It lies below a mount of a staged volume (a published target).
    #[error("{field} {path:?} lies inside {ancestor:?}, where volume {volume_id:?} is mounted")]
    InsideVolume {
        field: &'static str,
        path: PathBuf,
        ancestor: PathBuf,
        volume_id: String,
    },
    /// The mount table could not be read.
    #[error("reading mounts")]
    MountTable(#[source] TableError),
    /// The staging records could not be read.
    #[error("reading staging records")]
    Records(#[source] std::io::Error),
}

impl OccupancyError {
    /// `FAILED_PRECONDITION` for a path that is not free, `INTERNAL` when
    /// that could not be told.
    pub(crate) fn code(&self) -> Code {
        match self {
            OccupancyError::HidesMount { .. }
            | OccupancyError::InsideStaging { .. }
            | OccupancyError::InsideVolume { .. } => Code::FailedPrecondition,
            OccupancyError::MountTable(_) | OccupancyError::Records(_) => Code::Internal,
        }
    }
}

/// An error naming `field` when mounting on `path` would hide a mount
/// below it (the kubelet's `pods` directory, another volume's paths), or
/// when `path` lies inside a volume this driver staged: below a recorded
/// staging path, or below a mount of one (a published target).
pub(crate) fn check_free(
    field: &'static str,
    path: &Path,
    records: &Records,
) -> Result<(), OccupancyError> {
    let hidden = mounts_below(path).map_err(OccupancyError::MountTable)?;
    if let Some(point) = hidden.first() {
        return Err(OccupancyError::HidesMount {
            field,
            path: path.to_owned(),
            point: point.clone(),
            more: hidden.len() - 1,
        });
    }
    let records = records.all().map_err(OccupancyError::Records)?;
    if let Some(record) = records
        .iter()
        .find(|r| path != r.staging && path.starts_with(&r.staging))
    {
        return Err(OccupancyError::InsideStaging {
            field,
            path: path.to_owned(),
            volume_id: record.volume_id.clone(),
        });
    }
    // A published target is a bind of a staging path: the same directory.
    let staged: Vec<(u64, u64, &str)> = records
        .iter()
        .filter_map(|r| {
            let meta = std::fs::metadata(&r.staging).ok()?;
            Some((meta.dev(), meta.ino(), r.volume_id.as_str()))
        })
        .collect();
    for ancestor in path.ancestors().skip(1) {
        if !mount::is_mounted(ancestor).map_err(OccupancyError::MountTable)? {
            continue;
        }
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        if let Some((_, _, volume)) = staged
            .iter()
            .find(|(dev, ino, _)| (*dev, *ino) == (meta.dev(), meta.ino()))
        {
            return Err(OccupancyError::InsideVolume {
                field,
                path: path.to_owned(),
                ancestor: ancestor.to_owned(),
                volume_id: (*volume).to_owned(),
            });
        }
    }
    Ok(())
}

/// The mount points strictly below `path`. Nothing can be mounted below a
/// path that does not exist, a file, or an empty directory that is no
/// mount point itself (a mount needs an entry to be mounted on; a mount on
/// `path` may hide entries that hold mounts): those, a new mount's usual
/// target, are told without reading the mount table, whose size grows with
/// the node's pods.
fn mounts_below(path: &Path) -> Result<Vec<PathBuf>, TableError> {
    let nothing_below = match std::fs::symlink_metadata(path) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(meta) if meta.is_file() => true,
        Ok(meta) if meta.is_dir() => {
            !mount::is_mounted(path)?
                && std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none())
        }
        Ok(_) => false,
    };
    if nothing_below {
        return Ok(Vec::new());
    }
    mount::mounts_inside(path)
}
