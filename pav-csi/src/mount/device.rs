//! Block devices, and growing the filesystems on them with the kernel's
//! own online resize (`EXT4_IOC_RESIZE_FS`, `XFS_IOC_FSGROWFSDATA`): what
//! `resize2fs` and `xfs_growfs` do for a mounted filesystem, without them.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};

use super::ioctl;
use super::table::{TableError, mounted_at};

/// Why [`block_device_size`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The device could not be opened.
    #[error("cannot open {}", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// The system's answer.
        source: io::Error,
    },
    /// The path is not a block device (a regular file, say).
    #[error("{} is not a block device", path.display())]
    NotBlockDevice {
        /// The path given.
        path: PathBuf,
    },
    /// `BLKGETSIZE64` failed.
    #[error("cannot read the size of block device {}", path.display())]
    Size {
        /// The device.
        path: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
}

/// The size in bytes of the block device at `path` (a loop device, a
/// disk, a partition, an LVM volume), from the `BLKGETSIZE64` ioctl. A
/// regular file is [`DeviceError::NotBlockDevice`]: its size is its
/// length (`std::fs::metadata`).
///
/// ```no_run
/// let bytes = pav_csi::mount::blocking::block_device_size("/dev/loop3")?;
/// println!("{} MiB", bytes >> 20);
/// # Ok::<(), pav_csi::mount::DeviceError>(())
/// ```
pub fn block_device_size(path: impl AsRef<Path>) -> Result<u64, DeviceError> {
    let path = path.as_ref();
    let device = open_device(path)?;
    ioctl::block_device_size(&device).map_err(|source| DeviceError::Size {
        path: path.to_owned(),
        source,
    })
}

/// `path` opened for reading, checked to be a block device.
fn open_device(path: &Path) -> Result<File, DeviceError> {
    let device = File::open(path).map_err(|source| DeviceError::Open {
        path: path.to_owned(),
        source,
    })?;
    match device.metadata() {
        Ok(meta) if meta.file_type().is_block_device() => Ok(device),
        Ok(_) => Err(DeviceError::NotBlockDevice {
            path: path.to_owned(),
        }),
        Err(source) => Err(DeviceError::Open {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Why [`grow_filesystem`] failed: one variant per step, each naming the
/// mount point.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrowError {
    /// The mount table could not be read.
    #[error("cannot tell what is mounted on {}", mount_point.display())]
    MountTable {
        /// The mount point given.
        mount_point: PathBuf,
        /// Why.
        source: TableError,
    },
    /// Nothing is mounted there: growth is online only.
    #[error("nothing is mounted on {} to grow", mount_point.display())]
    NotMounted {
        /// The mount point given.
        mount_point: PathBuf,
    },
    /// Not an ext2/3/4 or xfs filesystem.
    #[error("cannot grow the {fstype} filesystem on {}: only ext2, ext3, ext4 and xfs grow here (a tmpfs grows by a remount with size=)", mount_point.display())]
    Unsupported {
        /// The mount point.
        mount_point: PathBuf,
        /// Its filesystem type.
        fstype: String,
    },
    /// The mount point could not be opened.
    #[error("cannot open {}", mount_point.display())]
    Open {
        /// The mount point.
        mount_point: PathBuf,
        /// The system's answer.
        source: io::Error,
    },
    /// The device the filesystem is on could not be read (its size, or an
    /// ext superblock).
    #[error("cannot read the device of {}", mount_point.display())]
    Device {
        /// The mount point.
        mount_point: PathBuf,
        /// Why.
        source: DeviceError,
    },
    /// The filesystem's size could not be read (xfs geometry, ext
    /// superblock).
    #[error("cannot read the size of the {fstype} filesystem on {}", mount_point.display())]
    Size {
        /// The mount point.
        mount_point: PathBuf,
        /// Its filesystem type.
        fstype: String,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The filesystem is larger than the size asked for: it cannot shrink.
    #[error("the filesystem on {} has {current} bytes, more than {wanted}: it cannot shrink", mount_point.display())]
    Shrink {
        /// The mount point.
        mount_point: PathBuf,
        /// Its size in bytes.
        current: u64,
        /// The size asked for, in bytes.
        wanted: u64,
    },
    /// The kernel refused the growth for want of a capability.
    #[error("growing the {fstype} filesystem on {} needs {capability}", mount_point.display())]
    Permission {
        /// The mount point.
        mount_point: PathBuf,
        /// Its filesystem type.
        fstype: String,
        /// What the kernel asks for: `CAP_SYS_RESOURCE` for ext4,
        /// `CAP_SYS_ADMIN` for xfs.
        capability: &'static str,
        /// The kernel's answer (`EPERM`).
        source: io::Error,
    },
    /// The kernel refused to grow the filesystem.
    #[error("cannot grow the {fstype} filesystem on {} to {wanted} bytes", mount_point.display())]
    Grow {
        /// The mount point.
        mount_point: PathBuf,
        /// Its filesystem type.
        fstype: String,
        /// The size asked for, in bytes.
        wanted: u64,
        /// The kernel's answer.
        source: io::Error,
    },
}

/// The filesystems [`grow_filesystem`] grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// ext2, ext3 and ext4, served by the ext4 driver.
    Ext,
    Xfs,
}

/// Grows the ext2/3/4 or xfs filesystem mounted at `mount_point`, online,
/// to `size` bytes (rounded down to whole filesystem blocks), or to the
/// whole of its device when `size` is `None`; returns its size in bytes
/// now. What `resize2fs` and `xfs_growfs` do for a mounted filesystem,
/// with their ioctls (`EXT4_IOC_RESIZE_FS`; `XFS_IOC_FSGEOMETRY`,
/// `XFS_IOC_FSGROWFSDATA`): for a NodeExpand after the device grew (a
/// loop device's `LOOP_SET_CAPACITY`, an LVM volume extended).
///
/// A filesystem as large as asked already is success without a change
/// (and without privileges); one larger is [`GrowError::Shrink`]. The
/// kernel asks for `CAP_SYS_RESOURCE` to grow ext4 and `CAP_SYS_ADMIN` to
/// grow xfs ([`GrowError::Permission`]). The device is read at the path
/// the mount table names as its source (the ext superblock, and the
/// device's size when `size` is `None`), so in a container it must be
/// there (`/dev` of the host). A tmpfs grows with [`remount`](super::remount)
/// and `size=`.
///
/// ```no_run
/// # fn f(staging: &std::path::Path) -> Result<(), pav_csi::mount::GrowError> {
/// // The volume's device has grown: its filesystem follows.
/// let bytes = pav_csi::mount::blocking::grow_filesystem(staging, None)?;
/// println!("the filesystem has {bytes} bytes");
/// # Ok(()) }
/// ```
pub fn grow_filesystem(mount_point: impl AsRef<Path>, size: Option<u64>) -> Result<u64, GrowError> {
    let mount_point = mount_point.as_ref();
    let path = || mount_point.to_owned();
    let mount = mounted_at(mount_point)
        .map_err(|source| GrowError::MountTable {
            mount_point: path(),
            source,
        })?
        .ok_or_else(|| GrowError::NotMounted {
            mount_point: path(),
        })?;
    let kind = match mount.fstype.as_str() {
        "ext2" | "ext3" | "ext4" => Kind::Ext,
        "xfs" => Kind::Xfs,
        _ => {
            return Err(GrowError::Unsupported {
                mount_point: path(),
                fstype: mount.fstype,
            });
        }
    };
    let fstype = mount.fstype;
    let device = Path::new(&mount.source);
    let on_device = |source| GrowError::Device {
        mount_point: path(),
        source,
    };
    let wanted = match size {
        Some(bytes) => bytes,
        None => block_device_size(device).map_err(on_device)?,
    };
    let dir = File::open(mount_point).map_err(|source| GrowError::Open {
        mount_point: path(),
        source,
    })?;
    let unreadable = |source| GrowError::Size {
        mount_point: path(),
        fstype: fstype.clone(),
        source,
    };
    // The filesystem's block size and blocks, and how to grow it to a
    // number of blocks.
    let current = || -> Result<(u64, u64), GrowError> {
        match kind {
            Kind::Xfs => {
                let geometry = ioctl::xfs_geometry(&dir).map_err(unreadable)?;
                Ok((u64::from(geometry.block_size), geometry.data_blocks))
            }
            Kind::Ext => {
                let device = open_device(device).map_err(on_device)?;
                ext_superblock(&device).map_err(unreadable)
            }
        }
    };
    let (block_size, blocks) = current()?;
    let wanted_blocks = wanted / block_size;
    if wanted_blocks < blocks {
        return Err(GrowError::Shrink {
            mount_point: path(),
            current: blocks * block_size,
            wanted,
        });
    }
    if wanted_blocks == blocks {
        return Ok(blocks * block_size);
    }
    let grown = match kind {
        Kind::Xfs => {
            let imaxpct = ioctl::xfs_geometry(&dir).map_err(unreadable)?.imaxpct;
            ioctl::xfs_grow_data(&dir, wanted_blocks, imaxpct)
        }
        Kind::Ext => rustix::fs::ext4_ioc_resize_fs(&dir, wanted_blocks).map_err(io::Error::from),
    };
    if let Err(source) = grown {
        let fstype = fstype.clone();
        return Err(match source.raw_os_error() {
            Some(code) if code == rustix::io::Errno::PERM.raw_os_error() => GrowError::Permission {
                mount_point: path(),
                fstype,
                capability: match kind {
                    Kind::Ext => "CAP_SYS_RESOURCE",
                    Kind::Xfs => "CAP_SYS_ADMIN",
                },
                source,
            },
            _ => GrowError::Grow {
                mount_point: path(),
                fstype,
                wanted,
                source,
            },
        });
    }
    // The kernel may stop short of the size asked (a last group or
    // allocation group too small to add): what it is now.
    let (block_size, blocks) = current()?;
    Ok(blocks * block_size)
}

/// An ext2/3/4 superblock's block size and block count, read from the
/// device (whose page cache holds the mounted filesystem's superblock, so
/// a growth just made shows).
fn ext_superblock(device: &File) -> io::Result<(u64, u64)> {
    let mut block = [0u8; 1024];
    device.read_exact_at(&mut block, 1024)?;
    parse_ext_superblock(&block)
}

/// [`ext_superblock`] of the superblock's bytes (little-endian fields:
/// `s_blocks_count_lo` at 0x4, `s_log_block_size` at 0x18, `s_magic` at
/// 0x38, `s_feature_incompat` at 0x60, `s_blocks_count_hi` at 0x150).
fn parse_ext_superblock(block: &[u8; 1024]) -> io::Result<(u64, u64)> {
    let u32_at = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes"));
    const MAGIC: u16 = 0xEF53;
    const INCOMPAT_64BIT: u32 = 0x80;
    if u16::from_le_bytes([block[0x38], block[0x39]]) != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no ext2/3/4 superblock on the device",
        ));
    }
    let log_block_size = u32_at(0x18);
    if log_block_size > 6 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("ext superblock with a block size of 1024 << {log_block_size}"),
        ));
    }
    let high = match u32_at(0x60) & INCOMPAT_64BIT {
        0 => 0,
        _ => u64::from(u32_at(0x150)),
    };
    Ok((1024 << log_block_size, high << 32 | u64::from(u32_at(0x4))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(log_block_size: u32, lo: u32, hi: u32, incompat: u32) -> [u8; 1024] {
        let mut block = [0u8; 1024];
        block[0x4..0x8].copy_from_slice(&lo.to_le_bytes());
        block[0x18..0x1c].copy_from_slice(&log_block_size.to_le_bytes());
        block[0x38..0x3a].copy_from_slice(&0xEF53u16.to_le_bytes());
        block[0x60..0x64].copy_from_slice(&incompat.to_le_bytes());
        block[0x150..0x154].copy_from_slice(&hi.to_le_bytes());
        block
    }

    #[test]
    fn reads_ext_superblocks() {
        assert_eq!(
            parse_ext_superblock(&superblock(2, 16384, 0, 0)).unwrap(),
            (4096, 16384)
        );
        // The high half counts only with the 64bit feature.
        assert_eq!(
            parse_ext_superblock(&superblock(2, 5, 1, 0x80 | 0x2)).unwrap(),
            (4096, (1 << 32) + 5)
        );
        assert_eq!(
            parse_ext_superblock(&superblock(0, 5, 1, 0x2)).unwrap(),
            (1024, 5)
        );
        let mut not_ext = superblock(2, 5, 0, 0);
        not_ext[0x38] = 0;
        assert!(parse_ext_superblock(&not_ext).is_err());
        assert!(parse_ext_superblock(&superblock(40, 5, 0, 0)).is_err());
    }

    #[test]
    fn a_regular_file_is_no_block_device() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = block_device_size(file.path()).unwrap_err();
        assert!(matches!(err, DeviceError::NotBlockDevice { .. }), "{err:?}");
        assert!(err.to_string().contains(&file.path().display().to_string()));
        let err = block_device_size("/definitely/not/here").unwrap_err();
        assert!(matches!(err, DeviceError::Open { .. }), "{err:?}");
        assert_eq!(err.to_string(), "cannot open /definitely/not/here");
    }

    #[test]
    fn only_ext_and_xfs_grow() {
        let plain = tempfile::tempdir().unwrap();
        let err = grow_filesystem(plain.path(), None).unwrap_err();
        assert!(matches!(err, GrowError::NotMounted { .. }), "{err:?}");
        // /proc is mounted wherever these tests run.
        let err = grow_filesystem("/proc", Some(1 << 30)).unwrap_err();
        match &err {
            GrowError::Unsupported { fstype, .. } => assert_eq!(fstype, "proc"),
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("/proc"), "{err}");
    }
}
