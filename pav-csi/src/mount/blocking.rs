//! The blocking forms of [`super`]'s functions, and their rules: for code
//! on a blocking thread already (inside `spawn_blocking`, a program
//! without an async runtime, pav-csi's own node service), which cannot
//! await. In async code, call [`super`]'s: they run these on tokio's
//! blocking threads.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::StatVfsMountFlags;
use rustix::mount::UnmountFlags;

pub use super::device::{block_device_size, grow_filesystem};
pub use super::freeze::freeze;
use super::table;
pub use super::table::{is_mounted, mount_table, mounted_at};
use super::{MountError, MountFlags, MountInfo, TableError, UnmountError};

/// Mounts `source` (a device, or a name such as `tmpfs`) of type `fstype`
/// on the directory `target`, with `flags` and filesystem `data` (options
/// such as `size=64m` for a tmpfs; empty for none): `mount(2)`.
///
/// With [`MountFlags::BIND`], `source` is a path (a directory on a
/// directory, a file or device node on a file) and `fstype` and `data` are
/// ignored; its other flags are applied by a remount of the new bind, as
/// the kernel ignores them when it makes one (a failure unmounts it again:
/// [`MountError::BindFlags`]). The target must exist; nothing is checked
/// first: [`mount_once`] does not mount twice.
///
/// ```no_run
/// use pav_csi::mount::{self, MountFlags};
/// # fn f() -> Result<(), pav_csi::mount::MountError> {
/// mount::blocking::mount("tmpfs", "/mnt/scratch", "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, "size=64m")?;
/// mount::blocking::mount("/dev/loop3", "/mnt/volume", "ext4", MountFlags::empty(), "")?;
/// mount::blocking::mount("/mnt/volume", "/mnt/copy", "", MountFlags::BIND | MountFlags::READ_ONLY, "")?;
/// # Ok(()) }
/// ```
pub fn mount(
    source: impl AsRef<OsStr>,
    target: impl AsRef<Path>,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), MountError> {
    let (source, target) = (source.as_ref(), target.as_ref());
    if flags.contains(MountFlags::BIND) {
        return bind(Path::new(source), target, flags);
    }
    let data_c = c_data(target, data)?;
    rustix::mount::mount(source, target, fstype, flags.syscall(), data_c.as_deref()).map_err(
        |errno| MountError::Mount {
            what: source.to_string_lossy().into_owned(),
            fstype: fstype.to_owned(),
            target: target.to_owned(),
            source: errno.into(),
        },
    )
}

/// `data` for `mount(2)`: none when empty.
fn c_data(target: &Path, data: &str) -> Result<Option<CString>, MountError> {
    if data.is_empty() {
        return Ok(None);
    }
    CString::new(data).map(Some).map_err(|_| MountError::Data {
        target: target.to_owned(),
        data: data.to_owned(),
    })
}

/// [`mount`] of a bind: bind, then apply the per-mount flags by a remount.
fn bind(source: &Path, target: &Path, flags: MountFlags) -> Result<(), MountError> {
    let bind_flags = flags.intersection(MountFlags::BIND | MountFlags::RECURSIVE);
    rustix::mount::mount(source, target, "", bind_flags.syscall(), None).map_err(|errno| {
        MountError::Bind {
            what: source.to_owned(),
            target: target.to_owned(),
            source: errno.into(),
        }
    })?;
    let per_mount = flags.intersection(MountFlags::PER_MOUNT);
    if per_mount.is_empty() {
        return Ok(());
    }
    let applied =
        rustix::mount::mount_remount(target, (MountFlags::BIND | per_mount).syscall(), "");
    if let Err(errno) = applied {
        // Only the bind just made, not what it may have been stacked on.
        let _ = rustix::mount::unmount(target, UnmountFlags::empty());
        return Err(MountError::BindFlags {
            target: target.to_owned(),
            flags: per_mount,
            source: errno.into(),
        });
    }
    Ok(())
}

/// [`mount`] unless the same is mounted at `target` already; true when it
/// mounted now. For a Stage, which pav-csi calls again for a volume
/// already staged (kubelet retries, a second pod on the node).
///
/// "The same" is the same source (for a block device, the same device
/// number; for [`MountFlags::BIND`], the same file or directory) and type,
/// read-only exactly when [`MountFlags::READ_ONLY`] is asked; the other
/// flags and the data are not compared. Anything else mounted there is
/// [`MountError::Occupied`], which names both.
///
/// ```no_run
/// use pav_csi::mount::{self, MountFlags};
/// # fn f(device: &std::path::Path, staging: &std::path::Path) -> Result<(), pav_csi::mount::MountError> {
/// if mount::blocking::mount_once(device, staging, "ext4", MountFlags::NOSUID, "")? {
///     println!("mounted {} on {}", device.display(), staging.display());
/// }
/// # Ok(()) }
/// ```
pub fn mount_once(
    source: impl AsRef<OsStr>,
    target: impl AsRef<Path>,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<bool, MountError> {
    let (source, target) = (source.as_ref(), target.as_ref());
    let found = mounted_at(target).map_err(|e| MountError::MountTable {
        target: target.to_owned(),
        source: e,
    })?;
    let Some(found) = found else {
        mount(source, target, fstype, flags, data)?;
        return Ok(true);
    };
    let read_only = flags.contains(MountFlags::READ_ONLY);
    let bind = flags.contains(MountFlags::BIND);
    let same_source = match bind {
        true => same_file(Path::new(source), target),
        false => found.fstype == fstype && same_device(source, &found),
    };
    if same_source && found.read_only() == read_only {
        return Ok(false);
    }
    let describe = |source: &str, fstype: &str, read_only: bool| {
        let access = if read_only { "read-only" } else { "read-write" };
        format!("{source:?} ({fstype}, {access})")
    };
    let wanted_type = if bind { "bind" } else { fstype };
    Err(MountError::Occupied {
        target: target.to_owned(),
        found: describe(&found.source, &found.fstype, found.read_only()),
        wanted: describe(&source.to_string_lossy(), wanted_type, read_only),
    })
}

/// Whether `source` names what `found` mounts: the same block device
/// (whatever path reached it), or the same name.
fn same_device(source: &OsStr, found: &MountInfo) -> bool {
    match std::fs::metadata(source) {
        Ok(meta) if meta.file_type().is_block_device() => {
            let rdev = meta.rdev();
            (rustix::fs::major(rdev), rustix::fs::minor(rdev)) == found.device
        }
        _ => OsStr::new(&found.source) == source,
    }
}

/// Whether `a` and `b` name the same file or directory (a bind mount of a
/// path is the same inode as the path).
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Changes the flags and filesystem options of what is mounted at
/// `target` (`mount(2)` with `MS_REMOUNT`): how a tmpfs grows
/// (`size=128m`), or a mount becomes read-only.
///
/// `flags` replace the mount's flags: pass every one to keep
/// ([`MountInfo::mount_options`] lists them). With [`MountFlags::BIND`],
/// only the per-mount flags of that mount change and `data` is ignored;
/// without it the filesystem is reconfigured with `data`, whose options a
/// tmpfs merges with its current ones (other filesystems may reset what
/// `data` leaves out). Nothing mounted there is
/// [`MountError::NotMounted`].
///
/// ```no_run
/// use pav_csi::mount::{self, MountFlags};
/// # fn f(staging: &std::path::Path) -> Result<(), pav_csi::mount::MountError> {
/// mount::blocking::remount(staging, MountFlags::NOSUID | MountFlags::NODEV, "size=128m")?;
/// let size = mount::blocking::mounted_at(staging).ok().flatten().and_then(|m| m.option("size").map(str::to_owned));
/// assert_eq!(size.as_deref(), Some("131072k"));
/// # Ok(()) }
/// ```
pub fn remount(target: impl AsRef<Path>, flags: MountFlags, data: &str) -> Result<(), MountError> {
    let target = target.as_ref();
    let mounted = is_mounted(target).map_err(|e| MountError::MountTable {
        target: target.to_owned(),
        source: e,
    })?;
    if !mounted {
        return Err(MountError::NotMounted {
            target: target.to_owned(),
        });
    }
    let flags = match flags.contains(MountFlags::BIND) {
        true => flags.intersection(MountFlags::BIND | MountFlags::PER_MOUNT),
        false => flags.without(MountFlags::RECURSIVE),
    };
    let data_c = c_data(target, data)?.unwrap_or_default();
    rustix::mount::mount_remount(target, flags.syscall(), data_c.as_c_str()).map_err(|errno| {
        MountError::Remount {
            target: target.to_owned(),
            flags,
            data: data.to_owned(),
            source: errno.into(),
        }
    })
}

/// Unmounts whatever is mounted at `target`, stacked mounts too (topmost
/// first), with `umount2(2)`; true when something was. Nothing mounted
/// there, or no such path, is success: unstaging twice is fine.
///
/// Nothing is detached lazily: a busy mount is [`UnmountError::Unmount`]
/// and stays, so that no data is cut off from a process still using it.
///
/// ```no_run
/// # fn f(staging: &std::path::Path) -> Result<(), pav_csi::mount::UnmountError> {
/// pav_csi::mount::blocking::unmount(staging)?;
/// assert!(!pav_csi::mount::blocking::unmount(staging)?, "nothing left: still success");
/// # Ok(()) }
/// ```
pub fn unmount(target: impl AsRef<Path>) -> Result<bool, UnmountError> {
    let target = target.as_ref();
    let mut unmounted = false;
    loop {
        match rustix::mount::unmount(target, UnmountFlags::empty()) {
            Ok(()) => unmounted = true,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(unmounted),
            // Not a mount point, or one this process may not unmount (a
            // mount locked by a user namespace): the table tells.
            Err(rustix::io::Errno::INVAL) if !is_mounted(target)? => return Ok(unmounted),
            Err(errno) => {
                return Err(UnmountError::Unmount {
                    point: target.to_owned(),
                    source: errno.into(),
                });
            }
        }
    }
}

/// Unmounts every mount at or below `dir`, deepest first, stacked mounts
/// included, with `umount2(2)`; returns the mount points it unmounted.
///
/// For drivers that clean up directories where something else (a helper
/// pod, through mount propagation) may have left mounts. Mounts that
/// reached `dir` by propagation (a pod's bidirectional mount) are found
/// too: the mount table of this process lists them. A mount point that
/// disappears meanwhile (unmounted by a peer, or with its parent) is not
/// an error. Nothing is detached lazily: a busy mount is reported as
/// [`UnmountError::Unmount`] and stays, so that no data is cut off from a
/// process still using it.
///
/// ```no_run
/// # fn f(pod_dir: &std::path::Path) -> Result<(), pav_csi::mount::UnmountError> {
/// for point in pav_csi::mount::blocking::unmount_below(pod_dir)? {
///     println!("unmounted {}", point.display());
/// }
/// std::fs::remove_dir_all(pod_dir).ok(); // nothing mounted to delete through
/// # Ok(()) }
/// ```
pub fn unmount_below(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, UnmountError> {
    let dir = dir.as_ref();
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let mut unmounted = Vec::new();
    // A mount whose point is itself below a mount just removed may only
    // show up in the table after that; a second pass finds it. The table
    // shrinks with every pass, so this ends.
    loop {
        let mut points: Vec<PathBuf> = mount_table()?
            .into_iter()
            .map(|mount| mount.mount_point)
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
            let point = mount_table()?
                .into_iter()
                .map(|mount| mount.mount_point)
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

/// Whether the topmost mount on `path` is read-only; `None` when nothing
/// is mounted there (or it does not exist).
pub(crate) fn read_only(path: &Path) -> Result<Option<bool>, TableError> {
    match table::mount_root(path) {
        Some(false) => Ok(None),
        Some(true) => match rustix::fs::statvfs(path) {
            Ok(vfs) => Ok(Some(vfs.f_flag.contains(StatVfsMountFlags::RDONLY))),
            Err(_) => Ok(table::table_mount_at(path)?.map(|mount| mount.read_only())),
        },
        None => Ok(table::table_mount_at(path)?.map(|mount| mount.read_only())),
    }
}

/// Mount points strictly below `dir` (not `dir` itself), from the mount
/// table.
pub(crate) fn mounts_inside(dir: &Path) -> Result<Vec<PathBuf>, TableError> {
    Ok(mount_table()?
        .into_iter()
        .map(|mount| mount.mount_point)
        .filter(|point| point != dir && point.starts_with(dir))
        .collect())
}

/// How many mounts are stacked on `path` (0 when none is, or it does not
/// exist), from the mount table.
#[cfg(feature = "testing")]
pub(crate) fn mounts_at(path: &Path) -> Result<usize, TableError> {
    let Ok(path) = path.canonicalize() else {
        return Ok(0);
    };
    Ok(mount_table()?
        .into_iter()
        .filter(|m| m.mount_point == path)
        .count())
}

/// Mount points at or below `dir` (canonicalized), from the mount table.
#[cfg(feature = "testing")]
pub(crate) fn mounts_below(dir: &Path) -> Result<Vec<PathBuf>, TableError> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    Ok(mount_table()?
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|point| point.starts_with(&dir))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_unmount_is_success() {
        let plain = tempfile::tempdir().unwrap();
        assert!(!unmount(plain.path()).unwrap());
        assert!(!unmount(plain.path().join("missing")).unwrap());
        assert!(!unmount(plain.path().join("missing/deeper")).unwrap());
    }

    #[test]
    fn remounting_nothing_says_so() {
        let plain = tempfile::tempdir().unwrap();
        let err = remount(plain.path(), MountFlags::empty(), "size=1m").unwrap_err();
        assert!(matches!(err, MountError::NotMounted { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains(&plain.path().display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn data_with_a_nul_byte_is_refused_before_mounting() {
        let err = mount(
            "tmpfs",
            "/nonexistent",
            "tmpfs",
            MountFlags::empty(),
            "size=1m\0x",
        )
        .unwrap_err();
        assert!(matches!(err, MountError::Data { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent"), "{err}");
    }

    /// A tmpfs of `size` on a new directory `name` in `dir`.
    fn tmpfs(dir: &Path, name: &str, size: &str) -> PathBuf {
        let point = dir.join(name);
        std::fs::create_dir_all(&point).unwrap();
        let flags = MountFlags::NOSUID | MountFlags::NODEV;
        mount("pav-test", &point, "tmpfs", flags, &format!("size={size}")).unwrap();
        point
    }

    /// Bytes a filesystem holds, as `statvfs` says.
    fn capacity(path: &Path) -> u64 {
        let vfs = rustix::fs::statvfs(path).unwrap();
        vfs.f_blocks * vfs.f_frsize
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn a_tmpfs_is_mounted_found_grown_and_unmounted() {
        let dir = tempfile::tempdir().unwrap();
        let point = tmpfs(dir.path(), "with space", "1m");
        assert!(is_mounted(&point).unwrap());
        let found = mounted_at(&point).unwrap().unwrap();
        assert_eq!(found.mount_point, point, "the space is unescaped");
        assert_eq!(
            (found.source.as_str(), found.fstype.as_str()),
            ("pav-test", "tmpfs")
        );
        assert_eq!(found.option("size"), Some("1024k"));
        assert!(found.has_option("nosuid") && found.has_option("nodev"));
        assert_eq!(capacity(&point), 1 << 20);

        remount(&point, MountFlags::NOSUID | MountFlags::NODEV, "size=4m").unwrap();
        let grown = mounted_at(&point).unwrap().unwrap();
        assert_eq!(grown.option("size"), Some("4096k"));
        assert!(grown.has_option("nosuid"), "flags kept: {grown:?}");
        assert_eq!(capacity(&point), 4 << 20);

        assert!(unmount(&point).unwrap());
        assert!(!is_mounted(&point).unwrap());
        assert!(!unmount(&point).unwrap(), "unmounted twice is fine");
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn mount_once_mounts_once_and_names_what_else_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("point");
        std::fs::create_dir(&point).unwrap();
        let flags = MountFlags::NODEV;
        assert!(mount_once("pav-test", &point, "tmpfs", flags, "size=1m").unwrap());
        std::fs::write(point.join("data"), "kept").unwrap();
        assert!(!mount_once("pav-test", &point, "tmpfs", flags, "size=1m").unwrap());
        assert_eq!(std::fs::read_to_string(point.join("data")).unwrap(), "kept");

        let other = mount_once("other", &point, "tmpfs", flags, "").unwrap_err();
        assert!(matches!(other, MountError::Occupied { .. }), "{other:?}");
        let message = other.to_string();
        assert!(message.contains(&point.display().to_string()), "{message}");
        assert!(
            message.contains("\"pav-test\"") && message.contains("\"other\""),
            "{message}"
        );
        let read_only = MountFlags::NODEV | MountFlags::READ_ONLY;
        let err = mount_once("pav-test", &point, "tmpfs", read_only, "").unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
        unmount(&point).unwrap();
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn binds_are_read_only_when_asked_and_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let source = tmpfs(dir.path(), "source", "1m");
        std::fs::write(source.join("data"), "x").unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let flags = MountFlags::BIND | MountFlags::READ_ONLY;
        assert!(mount_once(&source, &target, "", flags, "").unwrap());
        assert!(mounted_at(&target).unwrap().unwrap().read_only());
        assert_eq!(read_only(&target).unwrap(), Some(true));
        assert!(std::fs::write(target.join("data"), "y").is_err());
        assert!(!mount_once(&source, &target, "", flags, "").unwrap());
        // Another directory bound there is something else.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let err = mount_once(&elsewhere, &target, "", flags, "").unwrap_err();
        assert!(matches!(err, MountError::Occupied { .. }), "{err:?}");
        unmount_below(dir.path()).unwrap();
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn unmount_takes_stacked_mounts_and_names_a_busy_one() {
        let dir = tempfile::tempdir().unwrap();
        let point = tmpfs(dir.path(), "point", "1m");
        tmpfs(dir.path(), "point", "1m"); // stacked
        assert!(unmount(&point).unwrap());
        assert!(!is_mounted(&point).unwrap());

        let point = tmpfs(dir.path(), "busy", "1m");
        let busy = std::fs::File::open(&point).unwrap();
        let err = unmount(&point).unwrap_err();
        assert_eq!(err.mount_point(), Some(point.as_path()));
        drop(busy);
        assert!(unmount(&point).unwrap());
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn unmount_below_clears_nested_and_stacked_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let volume = tmpfs(dir.path(), "volume", "1m");
        tmpfs(dir.path(), "volume", "1m"); // stacked
        let inner = tmpfs(&volume, "inner", "1m");
        std::fs::write(inner.join("data"), "x").unwrap();

        let unmounted = unmount_below(dir.path()).unwrap();
        assert_eq!(unmounted.len(), 3, "{unmounted:?}");
        assert_eq!(unmounted[0], inner, "deepest first");
        assert!(!is_mounted(&volume).unwrap());
        assert_eq!(unmount_below(dir.path()).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    #[ignore = "needs root (mounts): .ci/run runs it as root"]
    fn unmount_below_names_a_busy_mount() {
        let dir = tempfile::tempdir().unwrap();
        let volume = tmpfs(dir.path(), "volume", "1m");
        // An open directory on the mount keeps it busy.
        let busy = std::fs::File::open(&volume).unwrap();
        let err = unmount_below(dir.path()).unwrap_err();
        assert_eq!(err.mount_point(), Some(volume.as_path()));
        assert!(err.to_string().contains("volume"), "{err}");
        drop(busy);
        unmount_below(dir.path()).unwrap();
        assert!(!is_mounted(&volume).unwrap());
    }

    /// The mount-root answer of statx and the read-only answer of statvfs
    /// agree with the mount table for every mount point of this process.
    #[test]
    fn read_only_agrees_with_the_mount_table() {
        let table = mount_table().unwrap();
        let mut checked = 0;
        for mount in &table {
            let point = &mount.mount_point;
            if table::mount_root(point).is_none()
                || point.canonicalize().ok().as_ref() != Some(point)
            {
                continue;
            }
            let from_table = (table::table_mount_at(point).unwrap()).map(|m| m.read_only());
            assert_eq!(read_only(point).unwrap(), from_table, "{}", point.display());
            checked += 1;
        }
        assert!(checked > 0, "no mount point could be checked");
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(read_only(plain.path()).unwrap(), None);
    }
}
