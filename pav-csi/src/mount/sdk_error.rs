//! What each mount error is to a provisioner: the [`pav_sdk::Error`]
//! category its failed step calls for, with the whole chain (step, path
//! and the system's answer) as its message, so that a trait method writes
//! `mount::unmount(dir).await?` and the CO sees why.
//!
//! A step the node's state refused (something else mounted where the
//! volume goes, nothing mounted where it was, a mount in use) is
//! `FAILED_PRECONDITION`: the CO calls again once that changes. A request
//! no filesystem here can meet is `OUT_OF_RANGE` or `INVALID_ARGUMENT`.
//! The rest (the kernel refused, the mount table unreadable) is
//! `INTERNAL`.

use std::io;

use pav_sdk::Error;

use super::{DeviceError, FreezeError, GrowError, MountError, TableError, UnmountError};
use crate::error_chain;

/// An [`Error`] variant, as the constructor of one with a message.
type Category = fn(String) -> Error;

/// `category` with `err`'s chain as message.
fn chained(category: Category, err: &dyn std::error::Error) -> Error {
    category(error_chain(err))
}

impl From<MountError> for Error {
    fn from(err: MountError) -> Self {
        let category = match &err {
            MountError::Occupied { .. } | MountError::NotMounted { .. } => {
                Error::FailedPrecondition
            }
            _ => Error::Internal,
        };
        chained(category, &err)
    }
}

/// A busy mount is a volume in use: a Delete answers so while the volume
/// is bound into a pod, and external-provisioner calls again.
impl From<UnmountError> for Error {
    fn from(err: UnmountError) -> Self {
        let category = match &err {
            UnmountError::Unmount { source, .. }
                if source.kind() == io::ErrorKind::ResourceBusy =>
            {
                Error::FailedPrecondition
            }
            _ => Error::Internal,
        };
        chained(category, &err)
    }
}

impl From<TableError> for Error {
    fn from(err: TableError) -> Self {
        chained(Error::Internal, &err)
    }
}

impl From<DeviceError> for Error {
    fn from(err: DeviceError) -> Self {
        chained(Error::Internal, &err)
    }
}

/// A filesystem cannot shrink (`OUT_OF_RANGE`: the size cannot be
/// provided), grows online only (`FAILED_PRECONDITION` when it is not
/// mounted) and only as ext2/3/4 or xfs (`INVALID_ARGUMENT`, as for an
/// unsupported filesystem type at Stage).
impl From<GrowError> for Error {
    fn from(err: GrowError) -> Self {
        let category = match &err {
            GrowError::Shrink { .. } => Error::OutOfRange,
            GrowError::NotMounted { .. } => Error::FailedPrecondition,
            GrowError::Unsupported { .. } => Error::InvalidArgument,
            _ => Error::Internal,
        };
        chained(category, &err)
    }
}

impl From<FreezeError> for Error {
    fn from(err: FreezeError) -> Self {
        chained(Error::Internal, &err)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn os_error(errno: rustix::io::Errno) -> io::Error {
        errno.into()
    }

    /// Each error lands in the category its step calls for, its message
    /// the step, the path and the system's answer.
    #[test]
    fn each_step_has_its_category_and_the_whole_chain() {
        let point = PathBuf::from("/var/lib/d/volumes/v1");
        let path = point.display().to_string();
        let path = path.as_str();
        let cases: Vec<(Error, Category, [&str; 2])> = vec![
            (
                MountError::Occupied {
                    target: point.clone(),
                    found: "\"other\" (tmpfs, read-write)".into(),
                    wanted: "\"tmpfs\" (tmpfs, read-write)".into(),
                }
                .into(),
                Error::FailedPrecondition,
                [path, "already has \"other\""],
            ),
            (
                MountError::NotMounted {
                    target: point.clone(),
                }
                .into(),
                Error::FailedPrecondition,
                [path, "nothing is mounted"],
            ),
            (
                MountError::Mount {
                    what: "tmpfs".into(),
                    fstype: "tmpfs".into(),
                    target: point.clone(),
                    source: os_error(rustix::io::Errno::NODEV),
                }
                .into(),
                Error::Internal,
                [path, "No such device"],
            ),
            (
                UnmountError::Unmount {
                    point: point.clone(),
                    source: os_error(rustix::io::Errno::BUSY),
                }
                .into(),
                Error::FailedPrecondition,
                [path, "busy"],
            ),
            (
                UnmountError::Unmount {
                    point: point.clone(),
                    source: os_error(rustix::io::Errno::PERM),
                }
                .into(),
                Error::Internal,
                [path, "not permitted"],
            ),
            (
                GrowError::Shrink {
                    mount_point: point.clone(),
                    current: 2,
                    wanted: 1,
                }
                .into(),
                Error::OutOfRange,
                [path, "cannot shrink"],
            ),
            (
                GrowError::NotMounted {
                    mount_point: point.clone(),
                }
                .into(),
                Error::FailedPrecondition,
                [path, "to grow"],
            ),
            (
                GrowError::Unsupported {
                    mount_point: point.clone(),
                    fstype: "btrfs".into(),
                }
                .into(),
                Error::InvalidArgument,
                [path, "btrfs"],
            ),
            (
                TableError::Read(os_error(rustix::io::Errno::ACCESS)).into(),
                Error::Internal,
                ["reading /proc/self/mountinfo", "Permission denied"],
            ),
        ];
        for (error, category, said) in cases {
            let message = error.message();
            assert_eq!(error, category(message.to_owned()), "{message}");
            for part in said {
                assert!(message.contains(part), "{message:?} lacks {part:?}");
            }
        }
    }
}
