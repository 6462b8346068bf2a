//! Mounts for provisioners and for pav-csi itself, with system calls only:
//! a driver's image may hold no `mount`, `umount`, `losetup`, `resize2fs`
//! or `xfs_growfs` program, and parsing their output is one more thing to
//! get wrong.
//!
//! | Question or step | Function | Error |
//! |---|---|---|
//! | what is mounted where (`/proc/self/mountinfo`) | [`mount_table`], [`mounted_at`], [`MountInfo::parse`] | [`TableError`], [`ParseError`] |
//! | is something mounted exactly here | [`is_mounted`] | [`TableError`] |
//! | mount (a filesystem, a tmpfs with `size=64m`, a bind mount) | [`mount`], [`MountFlags`] | [`MountError`] |
//! | mount unless the same is mounted there already (Stage is called again) | [`mount_once`] | [`MountError`] |
//! | change a mount's flags or options (a tmpfs grows with `size=`) | [`remount`] | [`MountError`] |
//! | unmount; nothing mounted is success | [`unmount`] | [`UnmountError`] |
//! | unmount everything inside a directory | [`unmount_below`] | [`UnmountError`] |
//! | a block device's size (`BLKGETSIZE64`) | [`block_device_size`] | [`DeviceError`] |
//! | grow a mounted ext4 or xfs to its device (or a size) | [`grow_filesystem`] | [`GrowError`] |
//!
//! Errors name the path and the step; the system's answer is their
//! [`source`](std::error::Error::source) (print the chain, with
//! [`error_chain`](crate::error_chain) or `anyhow`'s `{:#}`, to see
//! both). Everything here blocks: call it from
//! [`tokio::task::spawn_blocking`] in async code.
//!
//! ```no_run
//! use pav_csi::mount::{self, MountFlags};
//! # fn f(staging: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
//! // A Stage that puts a 64 MiB tmpfs at its staging path; called again,
//! // it finds it there.
//! mount::mount_once("tmpfs", staging, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, "size=64m")?;
//! // Expansion: the same tmpfs, 128 MiB.
//! mount::remount(staging, MountFlags::NOSUID | MountFlags::NODEV, "size=128m")?;
//! // Its Unstage (pav-csi unmounts the staging path before; tests call it directly).
//! mount::unmount(staging)?;
//! # Ok(()) }
//! ```

mod device;
mod freeze;
mod ioctl;
mod table;

use std::ffi::{CString, OsStr};
use std::fmt;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::StatVfsMountFlags;
use rustix::mount::UnmountFlags;

pub use device::{DeviceError, GrowError, block_device_size, grow_filesystem};
pub use freeze::{FreezeError, Frozen, freeze};
pub use table::{MountInfo, ParseError, TableError, is_mounted, mount_table, mounted_at};

/// Flags of [`mount`], [`mount_once`] and [`remount`]: `mount(2)`'s
/// `MS_*` flags that a volume needs. Combine them with `|`.
///
/// ```
/// use pav_csi::mount::MountFlags;
/// let flags = MountFlags::READ_ONLY | MountFlags::NOSUID;
/// assert!(flags.contains(MountFlags::NOSUID));
/// assert_eq!(format!("{flags:?}"), "READ_ONLY | NOSUID");
/// assert_eq!(format!("{:?}", MountFlags::empty()), "(none)");
/// ```
///
/// A remount is [`remount`], not a flag: with `MS_REMOUNT`, `mount(2)`
/// ignores the source and type, so "mount it unless it is mounted" would
/// mean nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MountFlags(u32);

impl MountFlags {
    /// `MS_RDONLY`: read-only.
    pub const READ_ONLY: Self = Self(1);
    /// `MS_NOSUID`: set-user-id and set-group-id bits and file
    /// capabilities are ignored.
    pub const NOSUID: Self = Self(1 << 1);
    /// `MS_NODEV`: device files cannot be opened.
    pub const NODEV: Self = Self(1 << 2);
    /// `MS_NOEXEC`: programs cannot be run from it.
    pub const NOEXEC: Self = Self(1 << 3);
    /// `MS_NOATIME`: access times are not updated.
    pub const NOATIME: Self = Self(1 << 4);
    /// `MS_NODIRATIME`: directory access times are not updated.
    pub const NODIRATIME: Self = Self(1 << 5);
    /// `MS_RELATIME`: access times only when older than the modification.
    pub const RELATIME: Self = Self(1 << 6);
    /// `MS_STRICTATIME`: every access time is updated.
    pub const STRICTATIME: Self = Self(1 << 7);
    /// `MS_SYNCHRONOUS`: writes are synchronous.
    pub const SYNCHRONOUS: Self = Self(1 << 8);
    /// `MS_DIRSYNC`: directory changes are synchronous.
    pub const DIRSYNC: Self = Self(1 << 9);
    /// `MS_BIND`: mount the source path (a directory or file) again at
    /// the target; the type and data are ignored. The per-mount flags
    /// above apply too: pav-csi remounts the new bind with them, since
    /// the kernel ignores them when it makes one.
    pub const BIND: Self = Self(1 << 10);
    /// `MS_REC`, with [`BIND`](Self::BIND): the mounts below the source
    /// come along.
    pub const RECURSIVE: Self = Self(1 << 11);

    /// Each flag, its name and `mount(2)` flag.
    const ALL: [(Self, &'static str, rustix::mount::MountFlags); 12] = {
        use rustix::mount::MountFlags as Ms;
        [
            (Self::READ_ONLY, "READ_ONLY", Ms::RDONLY),
            (Self::NOSUID, "NOSUID", Ms::NOSUID),
            (Self::NODEV, "NODEV", Ms::NODEV),
            (Self::NOEXEC, "NOEXEC", Ms::NOEXEC),
            (Self::NOATIME, "NOATIME", Ms::NOATIME),
            (Self::NODIRATIME, "NODIRATIME", Ms::NODIRATIME),
            (Self::RELATIME, "RELATIME", Ms::RELATIME),
            (Self::STRICTATIME, "STRICTATIME", Ms::STRICTATIME),
            (Self::SYNCHRONOUS, "SYNCHRONOUS", Ms::SYNCHRONOUS),
            (Self::DIRSYNC, "DIRSYNC", Ms::DIRSYNC),
            (Self::BIND, "BIND", Ms::BIND),
            (Self::RECURSIVE, "RECURSIVE", Ms::REC),
        ]
    };

    /// The flags a mount has of its own (a bind mount of the same
    /// filesystem may differ in them).
    const PER_MOUNT: Self = Self(
        Self::READ_ONLY.0
            | Self::NOSUID.0
            | Self::NODEV.0
            | Self::NOEXEC.0
            | Self::NOATIME.0
            | Self::NODIRATIME.0
            | Self::RELATIME.0
            | Self::STRICTATIME.0,
    );

    /// No flag.
    pub const fn empty() -> Self {
        Self(0)
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of `self` without those of `other`.
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The `mount(2)` flags.
    fn syscall(self) -> rustix::mount::MountFlags {
        Self::ALL
            .iter()
            .filter(|(flag, _, _)| self.contains(*flag))
            .fold(rustix::mount::MountFlags::empty(), |all, (_, _, ms)| {
                all | *ms
            })
    }
}

impl std::ops::BitOr for MountFlags {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl std::ops::BitOrAssign for MountFlags {
    fn bitor_assign(&mut self, other: Self) {
        self.0 |= other.0;
    }
}

impl fmt::Debug for MountFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let mut names = Self::ALL
            .iter()
            .filter(|(flag, _, _)| self.contains(*flag))
            .map(|(_, name, _)| *name);
        f.write_str(names.next().unwrap_or_default())?;
        names.try_for_each(|name| write!(f, " | {name}"))
    }
}

/// Why [`mount`], [`mount_once`] or [`remount`] failed: one variant per
/// step, each naming the target.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// The mount data (options such as `size=64m`) holds a NUL byte.
    #[error("mount data {data:?} for {} holds a NUL byte", target.display())]
    Data {
        /// Where it was to be mounted.
        target: PathBuf,
        /// The data given.
        data: String,
    },
    /// `mount(2)` refused to mount a filesystem.
    #[error("cannot mount {what:?} ({fstype}) on {}", target.display())]
    Mount {
        /// What was to be mounted: a device, or a name such as `tmpfs`.
        what: String,
        /// The filesystem type.
        fstype: String,
        /// Where.
        target: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// `mount(2)` refused to bind-mount a path.
    #[error("cannot bind-mount {} on {}", what.display(), target.display())]
    Bind {
        /// The path to bind.
        what: PathBuf,
        /// Where.
        target: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// A new bind mount could not be given its flags (read-only, say), so
    /// it was unmounted again.
    #[error("cannot make the bind mount on {} {flags:?}; it was unmounted", target.display())]
    BindFlags {
        /// Where.
        target: PathBuf,
        /// The flags asked for.
        flags: MountFlags,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The mount table could not be read to see what is mounted there.
    #[error("cannot tell what is mounted on {}", target.display())]
    MountTable {
        /// Where.
        target: PathBuf,
        /// Why.
        source: TableError,
    },
    /// [`mount_once`]: something else is mounted there.
    #[error("{} already has {found} mounted, not {wanted}", target.display())]
    Occupied {
        /// Where.
        target: PathBuf,
        /// What is mounted there (source, type, read-only or not).
        found: String,
        /// What was to be mounted.
        wanted: String,
    },
    /// [`remount`]: nothing is mounted there.
    #[error("nothing is mounted on {} to remount", target.display())]
    NotMounted {
        /// Where.
        target: PathBuf,
    },
    /// `mount(2)` refused to remount.
    #[error("cannot remount {} with {flags:?} and {data:?}", target.display())]
    Remount {
        /// Where.
        target: PathBuf,
        /// The flags asked for.
        flags: MountFlags,
        /// The data asked for.
        data: String,
        /// The kernel's answer.
        source: io::Error,
    },
}

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
/// mount::mount("tmpfs", "/mnt/scratch", "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, "size=64m")?;
/// mount::mount("/dev/loop3", "/mnt/volume", "ext4", MountFlags::empty(), "")?;
/// mount::mount("/mnt/volume", "/mnt/copy", "", MountFlags::BIND | MountFlags::READ_ONLY, "")?;
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
/// if mount::mount_once(device, staging, "ext4", MountFlags::NOSUID, "")? {
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
/// mount::remount(staging, MountFlags::NOSUID | MountFlags::NODEV, "size=128m")?;
/// let size = mount::mounted_at(staging).ok().flatten().and_then(|m| m.option("size").map(str::to_owned));
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

/// Why [`unmount`] or [`unmount_below`] could not leave a path free of
/// mounts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnmountError {
    /// `/proc/self/mountinfo` could not be read.
    #[error("reading /proc/self/mountinfo")]
    MountTable(#[source] io::Error),
    /// The kernel refused to unmount a mount point (busy, for instance).
    #[error("cannot unmount {}", point.display())]
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

impl From<TableError> for UnmountError {
    fn from(error: TableError) -> Self {
        UnmountError::MountTable(match error {
            TableError::Read(e) => e,
            TableError::Parse(e) => io::Error::new(io::ErrorKind::InvalidData, e),
        })
    }
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
/// pav_csi::mount::unmount(staging)?;
/// assert!(!pav_csi::mount::unmount(staging)?, "nothing left: still success");
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
/// for point in pav_csi::mount::unmount_below(pod_dir)? {
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
            Err(_) => Ok(mounted_at(path)?.map(|mount| mount.read_only())),
        },
        None => Ok(mounted_at(path)?.map(|mount| mount.read_only())),
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
    fn flags_map_to_mount_2_flags() {
        use rustix::mount::MountFlags as Ms;
        let flags = MountFlags::READ_ONLY | MountFlags::NOSUID | MountFlags::BIND;
        assert_eq!(flags.syscall(), Ms::RDONLY | Ms::NOSUID | Ms::BIND);
        assert_eq!(MountFlags::empty().syscall(), Ms::empty());
        assert_eq!(format!("{flags:?}"), "READ_ONLY | NOSUID | BIND");
        let mut all = MountFlags::empty();
        for (flag, _, ms) in MountFlags::ALL {
            assert_eq!(flag.syscall(), ms);
            assert!(!all.contains(flag), "{flag:?} shares a bit");
            all |= flag;
        }
        assert!(all.contains(MountFlags::PER_MOUNT));
        assert_eq!(
            flags.without(MountFlags::BIND),
            MountFlags::READ_ONLY | MountFlags::NOSUID
        );
    }

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
            let from_table = mounted_at(point).unwrap().map(|m| m.read_only());
            assert_eq!(read_only(point).unwrap(), from_table, "{}", point.display());
            checked += 1;
        }
        assert!(checked > 0, "no mount point could be checked");
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(read_only(plain.path()).unwrap(), None);
    }
}
