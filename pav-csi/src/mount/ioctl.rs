//! The `ioctl(2)`s that rustix has no safe function for: freezing and
//! thawing a filesystem, a block device's
//! size and the two of xfs growth. This is pav-csi's only unsafe code;
//! each call passes the kernel a buffer of exactly the type its request
//! number encodes (`_IOR`/`_IOW` with the size of that type), which the
//! compile-time size checks below pin.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsFd;

use rustix::ioctl::{Getter, Opcode, Setter, ioctl, opcode};

/// `BLKGETSIZE64`, `_IOR(0x12, 114, size_t)` in `linux/fs.h`, which
/// writes a `u64` whatever the `size_t` of its number says.
const BLKGETSIZE64: Opcode = opcode::read::<usize>(0x12, 114);

/// The size in bytes of the block device open as `device`.
pub(super) fn block_device_size(device: impl AsFd) -> io::Result<u64> {
    // SAFETY: BLKGETSIZE64 writes one u64 through its argument, the
    // Getter's u64 buffer.
    let getter = unsafe { Getter::<BLKGETSIZE64, u64>::new() };
    // SAFETY: as above; the opcode and buffer type match.
    Ok(unsafe { ioctl(device, getter) }?)
}

/// `struct xfs_fsop_geom_v4` of `xfs_fs.h`, as bytes: the geometry every
/// kernel with xfs answers (`XFS_IOC_FSGEOMETRY_V4`, the number
/// `XFS_IOC_FSGEOMETRY` had before Linux 5.1).
type XfsGeometryV4 = [u8; 112];

/// `XFS_IOC_FSGEOMETRY_V4`, `_IOR('X', 124, struct xfs_fsop_geom_v4)`.
const XFS_IOC_FSGEOMETRY_V4: Opcode = opcode::read::<XfsGeometryV4>(b'X', 124);

/// What xfs growth needs of the geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct XfsGeometry {
    /// Bytes per filesystem block.
    pub(super) block_size: u32,
    /// The limit on inode space, in percent, which growth keeps.
    pub(super) imaxpct: u32,
    /// Filesystem blocks in the data section: its size.
    pub(super) data_blocks: u64,
}

/// The geometry of the xfs filesystem that `file` (any file or directory
/// on it) is on.
pub(super) fn xfs_geometry(file: impl AsFd) -> io::Result<XfsGeometry> {
    // SAFETY: XFS_IOC_FSGEOMETRY_V4 writes a struct xfs_fsop_geom_v4 (112
    // bytes) through its argument, the Getter's buffer of that size.
    let getter = unsafe { Getter::<XFS_IOC_FSGEOMETRY_V4, XfsGeometryV4>::new() };
    // SAFETY: as above; the opcode and buffer type match.
    let geometry = unsafe { ioctl(file, getter) }?;
    Ok(xfs_geometry_from(&geometry))
}

/// The fields of `struct xfs_fsop_geom_v4` growth needs: `blocksize` (a
/// `__u32` at 0), `imaxpct` (a `__u32` at 28) and `datablocks` (a `__u64`
/// at 32), in the machine's byte order.
fn xfs_geometry_from(raw: &XfsGeometryV4) -> XfsGeometry {
    let u32_at = |at: usize| u32::from_ne_bytes(raw[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_ne_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
    XfsGeometry {
        block_size: u32_at(0),
        imaxpct: u32_at(28),
        data_blocks: u64_at(32),
    }
}

/// `struct xfs_growfs_data` of `xfs_fs.h`.
#[repr(C)]
#[derive(Debug)]
struct XfsGrowfsData {
    /// The new size of the data section, in filesystem blocks.
    newblocks: u64,
    /// The limit on inode space to keep, in percent.
    imaxpct: u32,
}

/// `XFS_IOC_FSGROWFSDATA`, `_IOW('X', 110, struct xfs_growfs_data)`.
const XFS_IOC_FSGROWFSDATA: Opcode = opcode::write::<XfsGrowfsData>(b'X', 110);

/// Grows the data section of the xfs filesystem that `file` is on to
/// `blocks` filesystem blocks, keeping its inode space limit `imaxpct`.
pub(super) fn xfs_grow_data(file: impl AsFd, blocks: u64, imaxpct: u32) -> io::Result<()> {
    let input = XfsGrowfsData {
        newblocks: blocks,
        imaxpct,
    };
    // SAFETY: XFS_IOC_FSGROWFSDATA reads a struct xfs_growfs_data through
    // its argument, the Setter's XfsGrowfsData, laid out as that struct.
    let setter = unsafe { Setter::<XFS_IOC_FSGROWFSDATA, XfsGrowfsData>::new(input) };
    // SAFETY: as above; the opcode and input type match.
    Ok(unsafe { ioctl(file, setter) }?)
}

// The request numbers encode these sizes; a kernel given another size
// answers ENOTTY, never a short buffer.
const _: () = assert!(std::mem::size_of::<XfsGeometryV4>() == 112);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<XfsGrowfsData>() == 16);

/// `FIFREEZE`, `_IOWR('X', 119, int)` in `linux/fs.h`: the kernel's
/// `ioctl_fsfreeze` reads no argument.
const FIFREEZE: Opcode = opcode::read_write::<std::ffi::c_int>(b'X', 119);
/// `FITHAW`, `_IOWR('X', 120, int)`: no argument read either.
const FITHAW: Opcode = opcode::read_write::<std::ffi::c_int>(b'X', 120);

/// Freezes the filesystem that `dir` (its mount point, open) is the root
/// of: writes are flushed and new ones wait until [`thaw`].
pub(super) fn freeze(dir: impl AsFd) -> io::Result<()> {
    // SAFETY: FIFREEZE takes no argument (the kernel ignores it); NoArg
    // passes none.
    let freeze = unsafe { rustix::ioctl::NoArg::<FIFREEZE>::new() };
    // SAFETY: as above.
    Ok(unsafe { ioctl(dir, freeze) }?)
}

/// Thaws what [`freeze`] froze.
pub(super) fn thaw(dir: impl AsFd) -> io::Result<()> {
    // SAFETY: FITHAW takes no argument either.
    let thaw = unsafe { rustix::ioctl::NoArg::<FITHAW>::new() };
    // SAFETY: as above.
    Ok(unsafe { ioctl(dir, thaw) }?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers `xfs_fs.h` and `linux/fs.h` give on 64-bit
    /// Linux (x86_64, aarch64).
    #[test]
    #[cfg(all(
        target_pointer_width = "64",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    fn request_numbers_are_the_kernel_s() {
        assert_eq!(BLKGETSIZE64, 0x8008_1272);
        assert_eq!(XFS_IOC_FSGEOMETRY_V4, 0x8070_587c);
        assert_eq!(XFS_IOC_FSGROWFSDATA, 0x4010_586e);
    }

    #[test]
    fn reads_the_fields_growth_needs() {
        let mut raw = [0u8; 112];
        raw[0..4].copy_from_slice(&4096u32.to_ne_bytes());
        raw[28..32].copy_from_slice(&25u32.to_ne_bytes());
        raw[32..40].copy_from_slice(&0x1_0000_0002u64.to_ne_bytes());
        assert_eq!(
            xfs_geometry_from(&raw),
            XfsGeometry {
                block_size: 4096,
                imaxpct: 25,
                data_blocks: 0x1_0000_0002,
            }
        );
    }
}
