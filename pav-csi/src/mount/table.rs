//! The mount table: `/proc/self/mountinfo` parsed, and what is mounted
//! at a path.

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, StatxAttributes, StatxFlags};

/// Where this process's mount table is read from.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One mount: a line of `/proc/self/mountinfo` (see `proc_pid_mountinfo(5)`),
/// its fields unescaped (`\040` is a space again).
///
/// ```
/// use pav_csi::mount::MountInfo;
/// let line = r"36 25 0:32 / /var/lib/kubelet/a\040b rw,nosuid shared:7 - tmpfs tmpfs rw,size=65536k";
/// let mount = MountInfo::parse(line)?;
/// assert_eq!(mount.mount_point, std::path::Path::new("/var/lib/kubelet/a b"));
/// assert_eq!((mount.source.as_str(), mount.fstype.as_str()), ("tmpfs", "tmpfs"));
/// assert_eq!(mount.option("size"), Some("65536k"));
/// assert!(mount.has_option("nosuid") && !mount.read_only());
/// # Ok::<(), pav_csi::mount::ParseError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MountInfo {
    /// The mount's id, unique in its mount namespace.
    pub mount_id: u32,
    /// The id of the mount it is mounted on.
    pub parent_id: u32,
    /// The `(major, minor)` device number of the mounted filesystem (for
    /// a block device, the device's own number).
    pub device: (u32, u32),
    /// The directory of the filesystem that is mounted (`/` unless it is a
    /// bind mount of a subdirectory).
    pub root: PathBuf,
    /// Where it is mounted, as this process sees it.
    pub mount_point: PathBuf,
    /// Per-mount options: `rw` or `ro`, `nosuid`, `nodev`, `noexec`,
    /// `relatime`...
    pub mount_options: Vec<String>,
    /// Propagation tags (`shared:7`, `master:1`, `unbindable`); empty for a
    /// private mount.
    pub propagation: Vec<String>,
    /// The filesystem type (`tmpfs`, `ext4`, `xfs`...).
    pub fstype: String,
    /// What is mounted: a device path, or a name such as `tmpfs`, as given
    /// to `mount(2)` (`none` when there was none).
    pub source: String,
    /// Per-filesystem options (`size=65536k` for a tmpfs); a remount with
    /// new options shows here.
    pub super_options: Vec<String>,
}

/// A line of `/proc/self/mountinfo` that [`MountInfo::parse`] cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed mountinfo line {line:?}: {problem}")]
pub struct ParseError {
    /// The line.
    pub line: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl MountInfo {
    /// Parses one line of `/proc/<pid>/mountinfo`.
    pub fn parse(line: &str) -> Result<MountInfo, ParseError> {
        let malformed = |problem| ParseError {
            line: line.to_owned(),
            problem,
        };
        let mut fields = line.split(' ');
        let mut next = |what| fields.next().ok_or_else(|| malformed(what));
        let mount_id = next("no mount id")?;
        let parent_id = next("no parent id")?;
        let device = next("no device number")?;
        let root = next("no root")?;
        let mount_point = next("no mount point")?;
        let mount_options = next("no mount options")?;
        let mut propagation = Vec::new();
        loop {
            match next("no `-` after the optional fields")? {
                "-" => break,
                tag => propagation.push(unescape(tag)),
            }
        }
        let fstype = next("no filesystem type")?;
        let source = next("no source")?;
        let super_options = next("no superblock options")?;
        let number = |text: &str, problem| text.parse::<u32>().map_err(|_| malformed(problem));
        let (major, minor) = device
            .split_once(':')
            .ok_or_else(|| malformed("device number is not major:minor"))?;
        Ok(MountInfo {
            mount_id: number(mount_id, "mount id is not a number")?,
            parent_id: number(parent_id, "parent id is not a number")?,
            device: (
                number(major, "device major is not a number")?,
                number(minor, "device minor is not a number")?,
            ),
            root: PathBuf::from(unescape(root)),
            mount_point: PathBuf::from(unescape(mount_point)),
            mount_options: options(mount_options),
            propagation,
            fstype: unescape(fstype),
            source: unescape(source),
            super_options: options(super_options),
        })
    }

    /// Whether the mount is read-only (the per-mount `ro`; a read-only
    /// filesystem under a read-write mount is read-only too).
    pub fn read_only(&self) -> bool {
        self.has_option("ro")
    }

    /// Whether option `name` (`nosuid`, `ro`...) is set, per mount or per
    /// filesystem.
    pub fn has_option(&self, name: &str) -> bool {
        self.mount_options
            .iter()
            .chain(&self.super_options)
            .any(|option| option == name)
    }

    /// The value of option `name=value` (`size` of a tmpfs), per
    /// filesystem or per mount.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.super_options
            .iter()
            .chain(&self.mount_options)
            .find_map(|option| option.strip_prefix(name)?.strip_prefix('='))
    }
}

/// A comma-separated option list, unescaped.
fn options(field: &str) -> Vec<String> {
    field
        .split(',')
        .filter(|o| !o.is_empty())
        .map(unescape)
        .collect()
}

/// Why the mount table could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// `/proc/self/mountinfo` could not be read (is `/proc` mounted?).
    #[error("reading {MOUNTINFO}")]
    Read(#[source] io::Error),
    /// A line of it could not be parsed.
    #[error("parsing {MOUNTINFO}")]
    Parse(#[source] ParseError),
}

/// Every mount this process sees, in the order of `/proc/self/mountinfo`
/// (mount order: a later mount on the same point is on top).
///
/// ```no_run
/// for mount in pav_csi::mount::blocking::mount_table()? {
///     println!("{} on {} ({})", mount.source, mount.mount_point.display(), mount.fstype);
/// }
/// # Ok::<(), pav_csi::mount::TableError>(())
/// ```
pub fn mount_table() -> Result<Vec<MountInfo>, TableError> {
    let table = std::fs::read_to_string(MOUNTINFO).map_err(TableError::Read)?;
    parse_table(&table)
}

/// [`mount_table`] of the text of a mountinfo file.
fn parse_table(table: &str) -> Result<Vec<MountInfo>, TableError> {
    table
        .lines()
        .map(|line| MountInfo::parse(line).map_err(TableError::Parse))
        .collect()
}

/// What is mounted at `path` (the topmost mount when several are stacked
/// there), from the mount table; `None` when nothing is, or `path` does
/// not exist. `path` is resolved first (symlinks followed), as the kernel
/// resolves it. Nothing mounted there (a new mount's usual target) is told
/// by `statx` alone where the kernel can ([`is_mounted`]): the table's size
/// grows with the node's pods.
///
/// ```no_run
/// # fn f(staging: &std::path::Path) -> Result<(), pav_csi::mount::TableError> {
/// if let Some(mount) = pav_csi::mount::blocking::mounted_at(staging)? {
///     println!("{} ({}) is mounted there", mount.source, mount.fstype);
/// }
/// # Ok(()) }
/// ```
pub fn mounted_at(path: impl AsRef<Path>) -> Result<Option<MountInfo>, TableError> {
    let path = path.as_ref();
    if mount_root(path) == Some(false) {
        return Ok(None);
    }
    table_mount_at(path)
}

/// [`mounted_at`] from the mount table alone.
pub(super) fn table_mount_at(path: &Path) -> Result<Option<MountInfo>, TableError> {
    let Ok(path) = path.canonicalize() else {
        return Ok(None);
    };
    Ok(topmost(mount_table()?, &path))
}

/// The mount of `table` visible at `path`, if one is mounted exactly there.
///
/// The table lists mounts in no order to rely on (a container's root may
/// come after the mounts on it), so the mount tree is walked from the root
/// along `path`: at each mount, the next is a child mounted on `path` or
/// on one of its ancestors. Of two such children, the one nearer the root
/// hides the other: it was mounted over the other's parent directory
/// later (mounted first, it would have been the other's parent). A mount
/// stacked on another at the same point is that one's child.
fn topmost(table: Vec<MountInfo>, path: &Path) -> Option<MountInfo> {
    let ids: std::collections::HashSet<u32> = table.iter().map(|m| m.mount_id).collect();
    let root = table.iter().rposition(|m| {
        m.mount_point == Path::new("/")
            && (m.parent_id == m.mount_id || !ids.contains(&m.parent_id))
    });
    let Some(mut at) = root else {
        // No root in view: the last mount listed there.
        return table.into_iter().rfind(|m| m.mount_point == path);
    };
    // Each step goes one mount up the tree; a table with a cycle ends too.
    for _ in 0..table.len() {
        let current = &table[at];
        let next = table
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m.parent_id == current.mount_id
                    && m.mount_id != current.mount_id
                    && path.starts_with(&m.mount_point)
            })
            .min_by_key(|(index, m)| {
                (
                    m.mount_point.components().count(),
                    std::cmp::Reverse(*index),
                )
            });
        match next {
            Some((index, _)) => at = index,
            None => break,
        }
    }
    let mut table = table;
    Some(table.swap_remove(at)).filter(|m| m.mount_point == path)
}

/// True when something is mounted exactly at `path`: `path` is the root
/// of a mount (false when it does not exist, or is only somewhere inside
/// a mount).
///
/// A Stage that mounts at its target path asks this first: pav-csi calls
/// Stage again for a volume already staged (kubelet retries, a second pod
/// on the node), and the same place must be answered instead of mounting
/// twice ([`mount_once`](super::mount_once) does both). Answered by
/// `statx`'s mount-root attribute where the kernel has it (Linux 5.8+),
/// otherwise (or for a path `statx` cannot read, such as a dead FUSE
/// mount) from the mount table.
///
/// ```no_run
/// # fn f(target: &std::path::Path) -> Result<(), pav_csi::mount::TableError> {
/// if !pav_csi::mount::blocking::is_mounted(target)? {
///     // mount the volume at target
/// }
/// # Ok(()) }
/// ```
pub fn is_mounted(path: impl AsRef<Path>) -> Result<bool, TableError> {
    let path = path.as_ref();
    match mount_root(path) {
        Some(answer) => Ok(answer),
        None => Ok(table_mount_at(path)?.is_some()),
    }
}

/// Whether `path` is the root of a mount, answered by `statx` alone when
/// the kernel reports `STATX_ATTR_MOUNT_ROOT` (Linux 5.8+). `None` means
/// "ask the mount table": an older kernel, or a path `statx` cannot read (a
/// dead FUSE mount answers `ENOTCONN` and must still be found mounted).
/// Reading `/proc/self/mountinfo` costs time in proportion to the node's
/// mounts, and node RPCs ask several times each.
pub(super) fn mount_root(path: &Path) -> Option<bool> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo_fields() {
        assert_eq!(unescape(r"/var/lib/a\040b"), "/var/lib/a b");
        assert_eq!(unescape(r"/tab\011and\012newline"), "/tab\tand\nnewline");
        assert_eq!(unescape(r"/back\134slash"), r"/back\slash");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/tail\04"), r"/tail\04");
        assert_eq!(unescape(r"/not\089octal"), r"/not\089octal");
    }

    /// `proc_pid_mountinfo(5)`'s own example.
    #[test]
    fn parses_the_manual_s_example() {
        let line = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue";
        let mount = MountInfo::parse(line).unwrap();
        assert_eq!(
            mount,
            MountInfo {
                mount_id: 36,
                parent_id: 35,
                device: (98, 0),
                root: PathBuf::from("/mnt1"),
                mount_point: PathBuf::from("/mnt2"),
                mount_options: vec!["rw".into(), "noatime".into()],
                propagation: vec!["master:1".into()],
                fstype: "ext3".into(),
                source: "/dev/root".into(),
                super_options: vec!["rw".into(), "errors=continue".into()],
            }
        );
        assert!(!mount.read_only());
        assert_eq!(mount.option("errors"), Some("continue"));
        assert_eq!(mount.option("error"), None, "a prefix is not an option");
    }

    #[test]
    fn parses_escapes_several_tags_and_none() {
        let line = r"412 29 0:58 / /var/lib/kubelet/pods/u\040id/vol\040ume ro,nosuid,nodev shared:210 master:3 - tmpfs my\040tmpfs ro,size=1024k,mode=755";
        let mount = MountInfo::parse(line).unwrap();
        assert_eq!(
            mount.mount_point,
            Path::new("/var/lib/kubelet/pods/u id/vol ume")
        );
        assert_eq!(mount.source, "my tmpfs");
        assert_eq!(mount.propagation, ["shared:210", "master:3"]);
        assert!(mount.read_only());
        assert!(mount.has_option("nodev"));
        assert_eq!(mount.option("size"), Some("1024k"));

        let private = "25 1 0:22 / /proc rw,relatime - proc proc rw";
        assert!(MountInfo::parse(private).unwrap().propagation.is_empty());
        // An empty source (mount(2) given "") is two spaces in a row.
        let empty = "30 1 0:40 / /x rw - tmpfs  rw";
        assert_eq!(MountInfo::parse(empty).unwrap().source, "");
    }

    #[test]
    fn refuses_malformed_lines() {
        for (line, problem) in [
            ("", "no parent id"),
            (
                "36 35 98:0 /mnt1 /mnt2 rw master:1 ext3 /dev/root rw",
                "no `-`",
            ),
            ("36 35 98:0 /mnt1 /mnt2 rw - ext3", "no source"),
            ("x 35 98:0 / /m rw - ext3 /dev/root rw", "mount id"),
            ("36 35 98 / /m rw - ext3 /dev/root rw", "major:minor"),
            ("36 35 98:x / /m rw - ext3 /dev/root rw", "minor"),
        ] {
            let err = MountInfo::parse(line).unwrap_err();
            assert!(err.problem.contains(problem), "{line:?}: {err}");
            assert!(err.to_string().contains(&format!("{line:?}")), "{err}");
        }
    }

    #[test]
    fn a_stacked_mount_is_on_top_and_a_later_parent_hides() {
        // As in a container: its root listed after the mounts on it.
        let table = parse_table(
            "22 27 0:21 / /proc rw - proc proc rw\n\
             27 1 254:0 / / rw - ext4 /dev/vda rw\n\
             2 27 0:2 / /a rw - tmpfs first rw\n\
             3 2 0:3 / /a rw - tmpfs second rw\n\
             4 27 0:4 / /b/c rw - tmpfs inner rw\n\
             5 27 0:5 / /b rw - tmpfs outer rw\n\
             6 5 0:6 / /b/c rw - tmpfs over rw\n",
        )
        .unwrap();
        let source = |path: &str| topmost(table.clone(), Path::new(path)).map(|m| m.source);
        assert_eq!(source("/").as_deref(), Some("/dev/vda"));
        assert_eq!(source("/proc").as_deref(), Some("proc"));
        assert_eq!(source("/a").as_deref(), Some("second"));
        assert_eq!(source("/b").as_deref(), Some("outer"));
        // `inner` is hidden by `outer`, mounted over /b after it; `over`
        // was mounted on /b/c inside `outer`.
        assert_eq!(source("/b/c").as_deref(), Some("over"));
        assert_eq!(source("/a/x"), None);
        let without_over: Vec<MountInfo> = table
            .iter()
            .filter(|m| m.source != "over")
            .cloned()
            .collect();
        assert_eq!(topmost(without_over, Path::new("/b/c")), None);
    }

    #[test]
    fn reads_this_process_s_table() {
        let table = mount_table().unwrap();
        assert!(table.iter().any(|m| m.mount_point == Path::new("/")));
        let root = mounted_at(Path::new("/")).unwrap().unwrap();
        assert_eq!(root.mount_point, Path::new("/"));
        assert_eq!(mounted_at(Path::new("/definitely/not/here")).unwrap(), None);
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(mounted_at(plain.path()).unwrap(), None);
    }

    #[test]
    fn root_is_mounted() {
        assert!(is_mounted(Path::new("/")).unwrap());
        assert!(!is_mounted(Path::new("/definitely/not/here")).unwrap());
    }

    /// The statx answers agree with the mount table for every mount point
    /// of this process and for a directory that is none.
    #[test]
    fn statx_agrees_with_the_mount_table() {
        let table = mount_table().unwrap();
        let mut checked = 0;
        for mount in &table {
            let point = &mount.mount_point;
            // Skip what statx cannot answer and paths the table lists
            // through symlinks.
            if mount_root(point).is_none() || point.canonicalize().ok().as_ref() != Some(point) {
                continue;
            }
            assert_eq!(
                mount_root(point),
                Some(topmost(table.clone(), point).is_some()),
                "{}",
                point.display()
            );
            checked += 1;
        }
        assert!(checked > 0, "no mount point could be checked");
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(mount_root(plain.path()), Some(false));
    }
}
