//! The mount table and the bind mounts that place volumes into kubelet's paths.

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
pub(crate) fn is_mount_point(path: &Path) -> io::Result<bool> {
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
