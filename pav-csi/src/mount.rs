//! The mount table, and mounting and unmounting with system calls (never a
//! `mount` or `umount` program, which a driver's image may not hold).
//!
//! Most of this module serves pav-csi's node service. Two functions are
//! public for provisioners: [`is_mount_point`], for a Stage that must not
//! mount twice, and [`unmount_below`], for drivers that clean up
//! directories where something else (a helper pod, through mount
//! propagation) may have left mounts.

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, StatVfsMountFlags, StatxAttributes, StatxFlags};
use rustix::mount::{MountFlags, UnmountFlags};

/// Mount points listed in `/proc/self/mountinfo`, unescaped, in mount
/// order, each with whether it is mounted read-only.
fn mounts() -> io::Result<Vec<(PathBuf, bool)>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ').skip(4);
            let point = fields.next()?;
            let read_only = fields.next()?.split(',').any(|o| o == "ro");
            Some((PathBuf::from(unescape(point)), read_only))
        })
        .collect())
}

/// Undoes the octal escaping (`\040` for a space) of mountinfo fields.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` is the root of a mount, answered by `statx` alone when
/// the kernel reports `STATX_ATTR_MOUNT_ROOT` (Linux 5.8+). `None` means
/// "ask the mount table": an older kernel, or a path `statx` cannot read (a
/// dead FUSE mount answers `ENOTCONN` and must still be found mounted).
/// Reading `/proc/self/mountinfo` costs time in proportion to the node's
/// mounts, and node RPCs ask several times each.
fn mount_root(path: &Path) -> Option<bool> {
    match rustix::fs::statx(CWD, path, AtFlags::NO_AUTOMOUNT, StatxFlags::empty()) {
        Ok(stat)
            if stat
                .stx_attributes_mask
                .contains(StatxAttributes::MOUNT_ROOT) =>
        {
            Some(stat.stx_attributes.contains(StatxAttributes::MOUNT_ROOT))
        }
        Err(rustix::io::Errno::NOENT) => Some(false),
        _ => None,
    }
}

/// True when something is mounted on `path` (false when it does not exist).
///
/// For a provisioner's Stage, which pav-csi calls again for a volume
/// already staged (kubelet retries, a second pod on the node): a Stage
/// that mounts at its target path asks this first and answers the same
/// place instead of mounting twice. `statx`'s mount-root attribute answers
/// without reading the mount table where the kernel has it (Linux 5.8+).
///
/// ```no_run
/// # fn f(target: &std::path::Path) -> std::io::Result<()> {
/// if !pav_csi::mount::is_mount_point(target)? {
///     // mount the volume at target
/// }
/// # Ok(()) }
/// ```
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    match mount_root(path) {
        Some(answer) => Ok(answer),
        None => Ok(read_only_from_table(path)?.is_some()),
    }
}

/// Whether the topmost mount on `path` is read-only; `None` when nothing
/// is mounted there (or it does not exist).
pub(crate) fn read_only(path: &Path) -> io::Result<Option<bool>> {
    match mount_root(path) {
        Some(false) => Ok(None),
        Some(true) => match rustix::fs::statvfs(path) {
            Ok(vfs) => Ok(Some(vfs.f_flag.contains(StatVfsMountFlags::RDONLY))),
            Err(_) => read_only_from_table(path),
        },
        None => read_only_from_table(path),
    }
}

/// [`read_only`] from the mount table alone.
fn read_only_from_table(path: &Path) -> io::Result<Option<bool>> {
    let Ok(path) = path.canonicalize() else {
        return Ok(None);
    };
    Ok(mounts()?
        .into_iter()
        .rev()
        .find(|(p, _)| p == &path)
        .map(|(_, read_only)| read_only))
}

/// Mount points strictly below `dir` (not `dir` itself), from the mount
/// table.
pub(crate) fn mounts_inside(dir: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(mounts()?
        .into_iter()
        .map(|(point, _)| point)
        .filter(|point| point != dir && point.starts_with(dir))
        .collect())
}

/// How many mounts are stacked on `path` (0 when none is, or it does not
/// exist), from the mount table.
#[cfg(feature = "testing")]
pub(crate) fn mounts_at(path: &Path) -> io::Result<usize> {
    let Ok(path) = path.canonicalize() else {
        return Ok(0);
    };
    Ok(mounts()?.into_iter().filter(|(p, _)| *p == path).count())
}

/// Mount points at or below `dir` (canonicalized), from the mount table.
#[cfg(feature = "testing")]
pub(crate) fn mounts_below(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    Ok(mounts()?
        .into_iter()
        .map(|(point, _)| point)
        .filter(|point| point.starts_with(&dir))
        .collect())
}

/// Bind-mounts `source` on `target`, read-only when asked.
pub(crate) fn bind(source: &Path, target: &Path, read_only: bool) -> io::Result<()> {
    rustix::mount::mount_bind(source, target)?;
    if read_only {
        // A bind mount ignores MS_RDONLY on creation; only a remount applies it.
        if let Err(err) =
            rustix::mount::mount_remount(target, MountFlags::BIND | MountFlags::RDONLY, "")
        {
            let _ = unmount_all(target);
            return Err(err.into());
        }
    }
    Ok(())
}

/// Unmounts everything stacked on `path`; nothing mounted is fine.
pub(crate) fn unmount_all(path: &Path) -> io::Result<()> {
    while is_mount_point(path)? {
        rustix::mount::unmount(path, UnmountFlags::empty())?;
    }
    Ok(())
}

/// Why [`unmount_below`] could not leave a directory free of mounts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnmountError {
    /// `/proc/self/mountinfo` could not be read.
    #[error("reading /proc/self/mountinfo: {0}")]
    MountTable(#[source] io::Error),
    /// The kernel refused to unmount a mount point (busy, for instance).
    #[error("cannot unmount {}: {source}", point.display())]
    Unmount {
        /// The mount point that stays mounted.
        point: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
}

impl UnmountError {
    /// The mount point that could not be unmounted, if that was the failure.
    pub fn mount_point(&self) -> Option<&Path> {
        match self {
            UnmountError::MountTable(_) => None,
            UnmountError::Unmount { point, .. } => Some(point),
        }
    }
}

/// Unmounts every mount at or below `dir`, deepest first, stacked mounts
/// included, with `umount2(2)`; returns the mount points it unmounted.
///
/// Mounts that reached `dir` by propagation (a pod's bidirectional mount)
/// are found too: the mount table of this process lists them. A mount point
/// that disappears meanwhile (unmounted by a peer, or with its parent) is
/// not an error. Nothing is detached lazily: a busy mount is reported as
/// [`UnmountError::Unmount`] and stays, so that no data is cut off from a
/// process still using it.
pub fn unmount_below(dir: &Path) -> Result<Vec<PathBuf>, UnmountError> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let mut unmounted = Vec::new();
    // A mount whose point is itself below a mount just removed may only
    // show up in the table after that; a second pass finds it. The table
    // shrinks with every pass, so this ends.
    loop {
        let mut points: Vec<PathBuf> = mounts()
            .map_err(UnmountError::MountTable)?
            .into_iter()
            .map(|(point, _)| point)
            .filter(|point| point.starts_with(&dir))
            .collect();
        if points.is_empty() {
            return Ok(unmounted);
        }
        // Deepest first; the same point twice (stacked) is unmounted twice.
        points.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
        let mut progress = false;
        for point in points {
            match rustix::mount::unmount(&point, UnmountFlags::NOFOLLOW) {
                Ok(()) => {
                    progress = true;
                    unmounted.push(point);
                }
                // Gone already: unmounted with a parent or by a peer.
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => {}
                Err(errno) => {
                    return Err(UnmountError::Unmount {
                        point,
                        source: errno.into(),
                    });
                }
            }
        }
        if !progress {
            // Listed but neither unmountable nor gone: a mount this process
            // cannot reach (another namespace's view of the same path).
            let point = mounts()
                .map_err(UnmountError::MountTable)?
                .into_iter()
                .map(|(point, _)| point)
                .find(|point| point.starts_with(&dir));
            return match point {
                Some(point) => Err(UnmountError::Unmount {
                    point,
                    source: io::Error::from(io::ErrorKind::InvalidInput),
                }),
                None => Ok(unmounted),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo_fields() {
        assert_eq!(unescape(r"/var/lib/a\040b"), "/var/lib/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/tail\04"), r"/tail\04");
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn unmount_below_clears_nested_and_stacked_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume");
        std::fs::create_dir(&volume).unwrap();
        let tmpfs = |point: &Path| {
            rustix::mount::mount("tmpfs", point, "tmpfs", MountFlags::empty(), None).unwrap()
        };
        tmpfs(&volume);
        tmpfs(&volume); // stacked
        std::fs::create_dir(volume.join("inner")).unwrap();
        tmpfs(&volume.join("inner"));
        std::fs::write(volume.join("inner/data"), "x").unwrap();

        let unmounted = unmount_below(dir.path()).unwrap();
        assert_eq!(unmounted.len(), 3, "{unmounted:?}");
        assert_eq!(unmounted[0], volume.join("inner"), "deepest first");
        assert!(!is_mount_point(&volume).unwrap());
        assert_eq!(unmount_below(dir.path()).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn unmount_below_names_a_busy_mount() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume");
        std::fs::create_dir(&volume).unwrap();
        rustix::mount::mount("tmpfs", &volume, "tmpfs", MountFlags::empty(), None).unwrap();
        // An open directory on the mount keeps it busy.
        let busy = std::fs::File::open(&volume).unwrap();
        let err = unmount_below(dir.path()).unwrap_err();
        assert_eq!(err.mount_point(), Some(volume.as_path()));
        assert!(err.to_string().contains("volume"), "{err}");
        drop(busy);
        unmount_below(dir.path()).unwrap();
        assert!(!is_mount_point(&volume).unwrap());
    }

    #[test]
    fn root_is_a_mount_point() {
        assert!(is_mount_point(Path::new("/")).unwrap());
        assert!(!is_mount_point(Path::new("/definitely/not/here")).unwrap());
    }

    /// The statx answers agree with the mount table for every mount point
    /// of this process and for a directory that is none.
    #[test]
    fn statx_agrees_with_the_mount_table() {
        let table = mounts().unwrap();
        let mut checked = 0;
        for (index, (point, _)) in table.iter().enumerate() {
            // A later mount on an ancestor hides this one from path lookups.
            let hidden = table[index + 1..]
                .iter()
                .any(|(later, _)| later != point && point.starts_with(later));
            // Skip what statx cannot answer and paths the table lists
            // through symlinks.
            if hidden
                || mount_root(point).is_none()
                || point.canonicalize().ok().as_ref() != Some(point)
            {
                continue;
            }
            assert_eq!(
                read_only(point).unwrap(),
                read_only_from_table(point).unwrap(),
                "{}",
                point.display()
            );
            checked += 1;
        }
        assert!(checked > 0, "no mount point could be checked");
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(mount_root(plain.path()), Some(false));
        assert_eq!(read_only(plain.path()).unwrap(), None);
    }
}
