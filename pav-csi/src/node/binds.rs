//! The node service's mount mechanics: bind mounts onto targets made for
//! them, what is published where, and their removal. Blocking (mount
//! table, file system): called through [`blocking`].

use std::path::{Path, PathBuf};

use pav_sdk::VolumeMode;
use tonic::Code;

use crate::mount::blocking::{self as mount, same_file};
use crate::mount::{MountError, MountFlags, TableError, UnmountError};
use crate::paths::Confinement;

/// Where a staged block device is bind-mounted inside the staging directory,
/// so that NodePublishVolume finds it again after a driver restart.
pub(crate) const STAGED_DEVICE: &str = "device";

/// Why a bind, its target or its removal failed, or why what is mounted
/// at a path is refused; each RPC that mounts wraps it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BindError {
    /// The mount work panicked, or its blocking task was cancelled
    /// (`INTERNAL`).
    #[error("mount work: {0}")]
    Task(String),
    /// The mount table could not be read (`INTERNAL`).
    #[error("reading mounts")]
    MountTable(#[source] TableError),
    /// Mounting failed (`INTERNAL`; the error names the paths).
    #[error(transparent)]
    Mount(#[from] MountError),
    /// Unmounting failed (`INTERNAL`; the error names the path).
    #[error(transparent)]
    Unmount(#[from] UnmountError),
    /// The target directory could not be made (`INTERNAL`).
    #[error("creating target")]
    TargetDir(#[source] std::io::Error),
    /// The target file's directory could not be made (`INTERNAL`).
    #[error("creating target parent")]
    TargetParent(#[source] std::io::Error),
    /// The target file could not be made (`INTERNAL`).
    #[error("creating target file")]
    TargetFile(#[source] std::io::Error),
    /// An unmounted path could not be removed (`INTERNAL`).
    #[error("removing")]
    Remove(#[source] std::io::Error),
    /// An unmounted path that is not what publishing makes
    /// (`FAILED_PRECONDITION`).
    #[error("{path:?} is not a mount point, an empty directory or an empty file: not removed")]
    NotRemovable { path: PathBuf },
    /// Another volume (or a foreign mount) is at the target
    /// (`FAILED_PRECONDITION`).
    #[error("target_path {target:?} holds another volume (or a mount this driver did not make)")]
    OtherVolume { target: PathBuf },
    /// The volume is published at the target incompatibly
    /// (`ALREADY_EXISTS`).
    #[error("target_path {} is already published {how}", target.display())]
    Incompatible { target: PathBuf, how: &'static str },
    /// A single-writer volume published at another target
    /// (`FAILED_PRECONDITION`).
    #[error(
        "volume {volume_id} is single-writer (SINGLE_NODE_SINGLE_WRITER) and already published at {}",
        other.display()
    )]
    SingleWriter { volume_id: String, other: PathBuf },
}

impl BindError {
    /// `INTERNAL` for a failure, `FAILED_PRECONDITION` or
    /// `ALREADY_EXISTS` for what is mounted where a request wants it.
    pub(crate) fn code(&self) -> Code {
        match self {
            BindError::Task(_)
            | BindError::MountTable(_)
            | BindError::Mount(_)
            | BindError::Unmount(_)
            | BindError::TargetDir(_)
            | BindError::TargetParent(_)
            | BindError::TargetFile(_)
            | BindError::Remove(_) => Code::Internal,
            BindError::NotRemovable { .. }
            | BindError::OtherVolume { .. }
            | BindError::SingleWriter { .. } => Code::FailedPrecondition,
            BindError::Incompatible { .. } => Code::AlreadyExists,
        }
    }
}

/// Runs blocking mount-table and file work without holding up the
/// runtime ([`crate::blocking_work::run`]).
pub(crate) async fn blocking<T, E>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<BindError> + Send + 'static,
{
    (crate::blocking_work::run(work).await).map_err(|e| E::from(BindError::Task(e)))?
}

/// Bind-mounts `source` on `target` unless `target` is already a mount
/// point (a repeated call is answered from the mount table), creating the
/// target as a directory or an empty file first.
pub(crate) fn bind_once(
    source: &Path,
    target: &Path,
    mode: VolumeMode,
    read_only: bool,
) -> Result<(), BindError> {
    if mount::is_mounted(target).map_err(BindError::MountTable)? {
        return Ok(());
    }
    prepare_target(target, mode == VolumeMode::Filesystem)?;
    let flags = match read_only {
        true => MountFlags::BIND | MountFlags::READ_ONLY,
        false => MountFlags::BIND,
    };
    Ok(mount::mount(source, target, "", flags, "")?)
}

/// Makes `target` exist as what a bind of `source` needs: a directory for a
/// directory, an empty file for a device or file.
fn prepare_target(target: &Path, directory: bool) -> Result<(), BindError> {
    if directory {
        return std::fs::create_dir_all(target).map_err(BindError::TargetDir);
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(BindError::TargetParent)?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(target)
    {
        Ok(_) => Ok(()),
        Err(e) => Err(BindError::TargetFile(e)),
    }
}

/// Whether a volume is published at `target` already, compatibly with a
/// publish of `mode`, read-only when `read_only`: `Ok(true)` when it is
/// (the repeated call succeeds), `Ok(false)` when nothing is mounted there,
/// [`BindError::Incompatible`] when the mount there is incompatible (spec:
/// "Volume published but is incompatible"). `source_read_only` is whether
/// the source is read-only itself (a bind of it is then read-only too).
/// With a `source`, what is mounted at `target` must be a bind of it:
/// another volume there is [`BindError::OtherVolume`].
pub(crate) fn published(
    target: &Path,
    source: Option<&Path>,
    mode: VolumeMode,
    read_only: bool,
    source_read_only: bool,
) -> Result<bool, BindError> {
    let Some(mounted_read_only) = mount::read_only(target).map_err(BindError::MountTable)? else {
        return Ok(false);
    };
    if let Some(source) = source
        && !same_file(source, target)
    {
        return Err(BindError::OtherVolume {
            target: target.to_owned(),
        });
    }
    let is_dir = std::fs::metadata(target).is_ok_and(|m| m.is_dir());
    let incompatible = |how: &'static str| {
        Err(BindError::Incompatible {
            target: target.to_owned(),
            how,
        })
    };
    match mode {
        VolumeMode::Filesystem if !is_dir => return incompatible("as a Block volume"),
        VolumeMode::Block if is_dir => return incompatible("as a Filesystem volume"),
        _ => {}
    }
    if read_only && !mounted_read_only {
        return incompatible("read-write, not read-only");
    }
    if !read_only && mounted_read_only && !source_read_only {
        return incompatible("read-only, not read-write");
    }
    Ok(true)
}

/// The mode of the volume mounted at `path` (a directory is a Filesystem
/// volume, anything else a Block one), or `None` when nothing is.
pub(crate) fn mounted_mode(path: &Path) -> Result<Option<VolumeMode>, BindError> {
    if !mount::is_mounted(path).map_err(BindError::MountTable)? {
        return Ok(None);
    }
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    Ok(Some(match meta.is_dir() {
        true => VolumeMode::Filesystem,
        false => VolumeMode::Block,
    }))
}

/// Unmounts `path` and removes it if it is what [`prepare_target`] makes:
/// an empty directory or an empty file. Anything else (a file with data, a
/// symlink, a device) is not this driver's and is refused
/// ([`BindError::NotRemovable`]). A missing path is fine.
pub(crate) fn unmount_and_remove(path: &Path) -> Result<(), BindError> {
    mount::unmount(path)?;
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir(path),
        Ok(meta) if meta.is_file() && meta.len() == 0 => std::fs::remove_file(path),
        Ok(_) => {
            return Err(BindError::NotRemovable {
                path: path.to_owned(),
            });
        }
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BindError::Remove(e)),
        _ => Ok(()),
    }
}

/// A `SINGLE_NODE_SINGLE_WRITER` volume is published at one target only:
/// a mount of its staged `source` elsewhere in the kubelet directory is
/// refused ([`BindError::SingleWriter`]), as the spec requires of a
/// second target path. Mounts in the state directory are the
/// provisioner's own (a volume's node directory), not publications.
pub(crate) fn check_published_nowhere(
    volume_id: &str,
    source: &Path,
    paths: &Confinement,
) -> Result<(), BindError> {
    let canonical = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let source = canonical(source);
    let state_dir = canonical(&paths.state_dir);
    let mounts =
        mount::mounts_inside(&canonical(&paths.kubelet_dir)).map_err(BindError::MountTable)?;
    let publication = |point: &&PathBuf| {
        **point != source && !point.starts_with(&state_dir) && same_file(point, &source)
    };
    match mounts.iter().find(publication) {
        Some(other) => Err(BindError::SingleWriter {
            volume_id: volume_id.to_owned(),
            other: other.clone(),
        }),
        None => Ok(()),
    }
}
