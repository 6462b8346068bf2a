//! Mounts for provisioners and for pav-csi itself, with system calls only:
//! a driver's image may hold no `mount`, `umount`, `losetup`, `resize2fs`
//! or `xfs_growfs` program, and parsing their output is one more thing to
//! get wrong.
//!
//! The functions here are async: each runs its system calls on tokio's
//! blocking threads (`spawn_blocking`), so a trait method awaits them
//! directly. Their errors convert into [`pav_sdk::Error`] with the
//! category the failed step calls for and the whole chain as message, so
//! `?` is all a provisioner writes. [`blocking`] has the same functions
//! for code that runs on a blocking thread already, and their rules.
//!
//! | Question or step | Function | Error | As [`pav_sdk::Error`] |
//! |---|---|---|---|
//! | what is mounted where (`/proc/self/mountinfo`) | [`mount_table`], [`mounted_at`], [`MountInfo::parse`] | [`TableError`], [`ParseError`] | `Internal` |
//! | is something mounted exactly here | [`is_mounted`] | [`TableError`] | `Internal` |
//! | mount (a filesystem, a tmpfs with `size=64m`, a bind mount) | [`mount`], [`MountFlags`] | [`MountError`] | `Internal` |
//! | mount unless the same is mounted there already (Stage is called again) | [`mount_once`] | [`MountError`] | `FailedPrecondition` when something else is mounted there, else `Internal` |
//! | change a mount's flags or options (a tmpfs grows with `size=`) | [`remount`] | [`MountError`] | `FailedPrecondition` when nothing is mounted there, else `Internal` |
//! | unmount; nothing mounted is success | [`unmount`] | [`UnmountError`] | `FailedPrecondition` when the mount is busy (in use), else `Internal` |
//! | unmount everything inside a directory | [`unmount_below`] | [`UnmountError`] | as [`unmount`] |
//! | a block device's size (`BLKGETSIZE64`) | [`block_device_size`] | [`DeviceError`] | `Internal` |
//! | grow a mounted ext4 or xfs to its device (or a size) | [`grow_filesystem`] | [`GrowError`] | `OutOfRange` for a shrink, `FailedPrecondition` when nothing is mounted, `InvalidArgument` for another filesystem, else `Internal` |
//! | freeze a filesystem for a consistent copy | [`freeze`] | [`FreezeError`] | `Internal` |
//!
//! Errors name the path and the step; the system's answer is their
//! [`source`](std::error::Error::source) (print the chain, with
//! [`error_chain`](crate::error_chain) or `anyhow`'s `{:#}`, to see
//! both; the conversion into [`pav_sdk::Error`] does).
//!
//! A Stage mounts a tmpfs for the volume in the provisioner's own
//! directory the first time, and finds it there when called again; pav-csi
//! bind-mounts it into kubelet's paths. It stays mounted across Unstage and
//! Stage (the data with it) until Delete unmounts it: a tmpfs mounted at
//! the staging path itself would be unmounted with it, its files lost.
//!
//! ```no_run
//! use pav_csi::mount::{self, MountFlags};
//! use pav_sdk::{Result, Staged};
//!
//! const FLAGS: MountFlags = MountFlags::NOSUID.union(MountFlags::NODEV);
//!
//! // Stage: `volume` is `<the driver's directory>/volumes/<id>`.
//! async fn stage(volume: &std::path::Path) -> Result<Staged> {
//!     tokio::fs::create_dir_all(volume).await?;
//!     mount::mount_once("tmpfs", volume, "tmpfs", FLAGS, "size=64m").await?;
//!     Ok(Staged::at(volume))
//! }
//!
//! // NodeExpand: the same tmpfs, 128 MiB.
//! async fn node_expand(volume: &std::path::Path) -> Result<u64> {
//!     mount::remount(volume, FLAGS, "size=128m").await?;
//!     Ok(128 << 20)
//! }
//!
//! // Delete: the data goes with the tmpfs (a busy one is FailedPrecondition).
//! async fn delete(volume: &std::path::Path) -> Result<()> {
//!     mount::unmount(volume).await?;
//!     Ok(())
//! }
//! ```

pub mod blocking;
mod device;
mod freeze;
mod ioctl;
mod sdk_error;
mod table;

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use device::{DeviceError, GrowError};
pub use freeze::{FreezeError, Frozen};
pub use table::{MountInfo, ParseError, TableError};

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

    /// The flags of `self` and those of `other`: `|` in a `const`.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
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
        self.union(other)
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

/// Runs `work`, blocking system calls, on tokio's blocking threads, so
/// that the runtime's threads keep serving other calls meanwhile. A panic
/// there reaches the caller, as it would had it called `work` itself.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(answer) => answer,
        Err(failed) => match failed.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: only when the runtime shuts down, which drops
            // the task awaiting this too.
            Err(failed) => panic!("mount work cancelled: {failed}"),
        },
    }
}

/// Mounts `source` (a device, or a name such as `tmpfs`) of type `fstype`
/// on the directory `target`, with `flags` and filesystem `data` (options
/// such as `size=64m` for a tmpfs; empty for none); [`blocking::mount`]
/// says how binds are made.
pub async fn mount(
    source: impl AsRef<OsStr>,
    target: impl AsRef<Path>,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), MountError> {
    let (source, target) = (source.as_ref().to_owned(), target.as_ref().to_owned());
    let (fstype, data) = (fstype.to_owned(), data.to_owned());
    off_runtime(move || blocking::mount(source, target, &fstype, flags, &data)).await
}

/// [`mount`] unless the same is mounted at `target` already; true when it
/// mounted now. For a Stage, which pav-csi calls again for a volume
/// already staged; [`blocking::mount_once`] says what "the same" is.
pub async fn mount_once(
    source: impl AsRef<OsStr>,
    target: impl AsRef<Path>,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<bool, MountError> {
    let (source, target) = (source.as_ref().to_owned(), target.as_ref().to_owned());
    let (fstype, data) = (fstype.to_owned(), data.to_owned());
    off_runtime(move || blocking::mount_once(source, target, &fstype, flags, &data)).await
}

/// Changes the flags and filesystem options of what is mounted at
/// `target`: how a tmpfs grows (`size=128m`), or a mount becomes
/// read-only; [`blocking::remount`] says which flags and options stay.
pub async fn remount(
    target: impl AsRef<Path>,
    flags: MountFlags,
    data: &str,
) -> Result<(), MountError> {
    let (target, data) = (target.as_ref().to_owned(), data.to_owned());
    off_runtime(move || blocking::remount(target, flags, &data)).await
}

/// Unmounts whatever is mounted at `target`, stacked mounts too; true
/// when something was. Nothing mounted there, or no such path, is
/// success; a busy mount stays ([`blocking::unmount`]).
pub async fn unmount(target: impl AsRef<Path>) -> Result<bool, UnmountError> {
    let target = target.as_ref().to_owned();
    off_runtime(move || blocking::unmount(target)).await
}

/// Unmounts every mount at or below `dir`, deepest first; returns the
/// mount points it unmounted ([`blocking::unmount_below`]).
pub async fn unmount_below(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, UnmountError> {
    let dir = dir.as_ref().to_owned();
    off_runtime(move || blocking::unmount_below(dir)).await
}

/// Every mount of this process's mount namespace
/// ([`blocking::mount_table`]).
pub async fn mount_table() -> Result<Vec<MountInfo>, TableError> {
    off_runtime(blocking::mount_table).await
}

/// The topmost mount whose mount point is `path`, if any
/// ([`blocking::mounted_at`]).
pub async fn mounted_at(path: impl AsRef<Path>) -> Result<Option<MountInfo>, TableError> {
    let path = path.as_ref().to_owned();
    off_runtime(move || blocking::mounted_at(path)).await
}

/// Whether something is mounted exactly at `path`
/// ([`blocking::is_mounted`]).
pub async fn is_mounted(path: impl AsRef<Path>) -> Result<bool, TableError> {
    let path = path.as_ref().to_owned();
    off_runtime(move || blocking::is_mounted(path)).await
}

/// The size in bytes of the block device at `path`
/// ([`blocking::block_device_size`]).
pub async fn block_device_size(path: impl AsRef<Path>) -> Result<u64, DeviceError> {
    let path = path.as_ref().to_owned();
    off_runtime(move || blocking::block_device_size(path)).await
}

/// Grows the ext2/3/4 or xfs filesystem mounted at `mount_point` to its
/// device's size, or to `size` bytes; answers its size
/// ([`blocking::grow_filesystem`]).
pub async fn grow_filesystem(
    mount_point: impl AsRef<Path>,
    size: Option<u64>,
) -> Result<u64, GrowError> {
    let mount_point = mount_point.as_ref().to_owned();
    off_runtime(move || blocking::grow_filesystem(mount_point, size)).await
}

/// Freezes the filesystem mounted at `mount_point` until the [`Frozen`]
/// guard is dropped or thawed ([`blocking::freeze`]).
pub async fn freeze(mount_point: impl AsRef<Path>) -> Result<Frozen, FreezeError> {
    let mount_point = mount_point.as_ref().to_owned();
    off_runtime(move || blocking::freeze(mount_point)).await
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

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

    /// The blocking work runs off the runtime: on a runtime of one
    /// thread, a timer set after it started still fires while it blocks.
    #[tokio::test(flavor = "current_thread")]
    async fn blocking_work_leaves_the_runtime_free() {
        let started = Instant::now();
        let work = off_runtime(|| std::thread::sleep(Duration::from_millis(300)));
        let timer = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            started.elapsed()
        };
        let ((), fired) = tokio::join!(work, timer);
        assert!(
            fired < Duration::from_millis(200),
            "the timer waited {fired:?}"
        );
    }

    /// A panic of the blocking work is the caller's, with its message.
    #[tokio::test]
    async fn a_panic_of_the_blocking_work_reaches_the_caller() {
        let call = tokio::spawn(off_runtime(|| -> () { panic!("the work panicked") }));
        let panic = call.await.unwrap_err().into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"the work panicked"));
    }

    #[tokio::test]
    async fn the_async_forms_answer_as_the_blocking_ones() {
        let plain = tempfile::tempdir().unwrap();
        assert!(!unmount(plain.path()).await.unwrap());
        assert!(!is_mounted(plain.path()).await.unwrap());
        assert_eq!(mounted_at(plain.path()).await.unwrap(), None);
        let err = remount(plain.path(), MountFlags::empty(), "size=1m").await;
        assert!(matches!(err, Err(MountError::NotMounted { .. })), "{err:?}");
    }
}
