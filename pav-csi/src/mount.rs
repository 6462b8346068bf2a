//! The mount table and the bind mounts that place volumes into kubelet's paths.

use std::io;
use std::path::{Path, PathBuf};

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

/// True when something is mounted on `path` (false when it does not exist).
pub(crate) fn is_mount_point(path: &Path) -> io::Result<bool> {
    Ok(read_only(path)?.is_some())
}

/// Whether the topmost mount on `path` is read-only; `None` when nothing
/// is mounted there (or it does not exist).
pub(crate) fn read_only(path: &Path) -> io::Result<Option<bool>> {
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
}
