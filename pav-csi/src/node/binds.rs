//! The node service's mount mechanics: bind mounts onto targets made for
//! them, what is published where, and their removal. Blocking (mount
//! table, file system): called through [`blocking`].

use std::path::Path;

use pav_sdk::VolumeMode;
use tonic::Status;

use crate::error::{failed, internal};
use crate::mount::{self, MountFlags, same_file};

/// Where a staged block device is bind-mounted inside the staging directory,
/// so that NodePublishVolume finds it again after a driver restart.
pub(crate) const STAGED_DEVICE: &str = "device";

/// Runs blocking mount-table work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| internal("mount task", e))?
}

/// Bind-mounts `source` on `target` unless `target` is already a mount
/// point (a repeated call is answered from the mount table), creating the
/// target as a directory or an empty file first.
pub(crate) fn bind_once(
    source: &Path,
    target: &Path,
    mode: VolumeMode,
    read_only: bool,
) -> Result<(), Status> {
    if mount::is_mounted(target).map_err(|e| internal("reading mounts", e))? {
        return Ok(());
    }
    prepare_target(target, mode == VolumeMode::Filesystem)?;
    let flags = match read_only {
        true => MountFlags::BIND | MountFlags::READ_ONLY,
        false => MountFlags::BIND,
    };
    mount::mount(source, target, "", flags, "").map_err(failed)
}

/// Makes `target` exist as what a bind of `source` needs: a directory for a
/// directory, an empty file for a device or file.
fn prepare_target(target: &Path, directory: bool) -> Result<(), Status> {
    if directory {
        return std::fs::create_dir_all(target).map_err(|e| internal("creating target", e));
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| internal("creating target parent", e))?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(target)
    {
        Ok(_) => Ok(()),
        Err(e) => Err(internal("creating target file", e)),
    }
}

/// Whether a volume is published at `target` already, compatibly with a
/// publish of `mode`, read-only when `read_only`: `Ok(true)` when it is
/// (the repeated call succeeds), `Ok(false)` when nothing is mounted there,
/// `ALREADY_EXISTS` when the mount there is incompatible (spec:
/// "Volume published but is incompatible"). `source_read_only` is whether
/// the source is read-only itself (a bind of it is then read-only too).
/// With a `source`, what is mounted at `target` must be a bind of it:
/// another volume there is `FAILED_PRECONDITION`.
pub(crate) fn published(
    target: &Path,
    source: Option<&Path>,
    mode: VolumeMode,
    read_only: bool,
    source_read_only: bool,
) -> Result<bool, Status> {
    let Some(mounted_read_only) =
        mount::read_only(target).map_err(|e| internal("reading mounts", e))?
    else {
        return Ok(false);
    };
    if let Some(source) = source
        && !same_file(source, target)
    {
        return Err(Status::failed_precondition(format!(
            "target_path {target:?} holds another volume (or a mount this driver did not make)"
        )));
    }
    let is_dir = std::fs::metadata(target).is_ok_and(|m| m.is_dir());
    let incompatible = |what: &str| {
        Err(Status::already_exists(format!(
            "target_path {} is already published {what}",
            target.display()
        )))
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
/// volume, anything else a Block one), or `not_found` when nothing is.
pub(crate) fn mounted_mode(
    path: &Path,
    not_found: impl Fn() -> Status,
) -> Result<VolumeMode, Status> {
    if !mount::is_mounted(path).map_err(|e| internal("reading mounts", e))? {
        return Err(not_found());
    }
    let meta = std::fs::metadata(path).map_err(|_| not_found())?;
    Ok(match meta.is_dir() {
        true => VolumeMode::Filesystem,
        false => VolumeMode::Block,
    })
}

/// Unmounts `path` and removes it if it is what [`prepare_target`] makes:
/// an empty directory or an empty file. Anything else (a file with data, a
/// symlink, a device) is not this driver's and is refused with
/// `FAILED_PRECONDITION`. A missing path is fine.
pub(crate) fn unmount_and_remove(path: &Path) -> Result<(), Status> {
    mount::unmount(path).map_err(failed)?;
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir(path),
        Ok(meta) if meta.is_file() && meta.len() == 0 => std::fs::remove_file(path),
        Ok(_) => {
            return Err(Status::failed_precondition(format!(
                "{path:?} is not a mount point, an empty directory or an empty file: not removed"
            )));
        }
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(internal("removing", e)),
        _ => Ok(()),
    }
}

/// A `SINGLE_NODE_SINGLE_WRITER` volume is published at one target only:
/// a mount of its staged `source` elsewhere in the kubelet directory is
/// `FAILED_PRECONDITION`, as the spec requires of a second target path.
pub(crate) fn check_published_nowhere(
    volume_id: &str,
    source: &Path,
    kubelet_dir: &Path,
) -> Result<(), Status> {
    let canonical = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let source = canonical(source);
    let mounts =
        mount::mounts_inside(&canonical(kubelet_dir)).map_err(|e| internal("reading mounts", e))?;
    match (mounts.iter()).find(|point| **point != source && same_file(point, &source)) {
        Some(other) => Err(Status::failed_precondition(format!(
            "volume {volume_id} is single-writer (SINGLE_NODE_SINGLE_WRITER) and already published at {}",
            other.display()
        ))),
        None => Ok(()),
    }
}
