//! `pav_csi::mount` on real filesystems: a loop device's size and ext4 and
//! xfs grown online with their ioctls. The images are made with mkfs and
//! attached with losetup, programs this host has and a driver's image need
//! not: the functions under test run none.

use std::path::{Path, PathBuf};
use std::process::Command;

use pav_csi::mount::blocking as mount;
use pav_csi::mount::{GrowError, MountFlags, UnmountError};

/// A filesystem image attached to a loop device and mounted; unmounted and
/// detached when dropped, also when a test panics.
struct Mounted {
    _dir: tempfile::TempDir,
    image: PathBuf,
    device: String,
    point: PathBuf,
}

impl Mounted {
    /// A sparse image of `size` bytes made with `mkfs`, attached and mounted.
    fn new(fstype: &str, size: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(size)
            .unwrap();
        run(&format!("mkfs.{fstype}"), &["-q", path(&image)]);
        let device = run("losetup", &["--find", "--show", path(&image)]);
        let point = dir.path().join("mounted");
        std::fs::create_dir(&point).unwrap();
        let mounted = Mounted {
            _dir: dir,
            image,
            device,
            point,
        };
        mount::mount(
            &mounted.device,
            &mounted.point,
            fstype,
            MountFlags::NOSUID,
            "",
        )
        .unwrap();
        mounted
    }

    /// Grows the image and tells the loop device (`losetup --set-capacity`).
    fn grow_device(&self, size: u64) {
        let image = std::fs::OpenOptions::new().write(true).open(&self.image);
        image.unwrap().set_len(size).unwrap();
        run("losetup", &["--set-capacity", &self.device]);
        assert_eq!(mount::block_device_size(&self.device).unwrap(), size);
    }
}

impl Drop for Mounted {
    /// Unmounts (a mount just grown can be busy for a moment: retried for
    /// up to 5 s) and detaches the loop device.
    fn drop(&mut self) {
        for _ in 0..250 {
            match mount::unmount(&self.point) {
                Err(UnmountError::Unmount { source, .. })
                    if source.kind() == std::io::ErrorKind::ResourceBusy =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => {
                    eprintln!("{e}");
                    break;
                }
                Ok(_) => break,
            }
        }
        let _ = Command::new("losetup")
            .args(["--detach", &self.device])
            .status();
    }
}

fn path(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs `program`, which must succeed; its standard output, trimmed.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Bytes the mounted filesystem holds, as `statvfs` says.
fn capacity(point: &Path) -> u64 {
    let vfs = rustix::fs::statvfs(point).unwrap();
    vfs.f_blocks * vfs.f_frsize
}

/// Whether this process has capability `bit` (`CapEff` of its status).
fn capable(bit: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:"));
    effective
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

const MIB: u64 = 1 << 20;

#[test]
#[ignore = "needs root, loop devices and mkfs.xfs: .ci/run runs it as root"]
fn xfs_grows_to_a_size_and_to_its_device() {
    // mkfs.xfs makes nothing smaller than 300 MiB.
    let xfs = Mounted::new("xfs", 300 * MIB);
    assert_eq!(mount::block_device_size(&xfs.device).unwrap(), 300 * MIB);
    let before = capacity(&xfs.point);
    assert_eq!(
        mount::grow_filesystem(&xfs.point, None).unwrap(),
        300 * MIB,
        "as large as its device already: nothing to do"
    );

    xfs.grow_device(600 * MIB);
    assert_eq!(
        mount::grow_filesystem(&xfs.point, Some(450 * MIB)).unwrap(),
        450 * MIB
    );
    let middle = capacity(&xfs.point);
    assert!(middle > before + 100 * MIB, "{before} -> {middle}");
    assert_eq!(mount::grow_filesystem(&xfs.point, None).unwrap(), 600 * MIB);
    assert!(capacity(&xfs.point) > middle + 100 * MIB);

    let err = mount::grow_filesystem(&xfs.point, Some(400 * MIB)).unwrap_err();
    assert!(matches!(err, GrowError::Shrink { .. }), "{err:?}");
    assert!(err.to_string().contains(path(&xfs.point)), "{err}");
}

/// Growing a mounted ext4 needs CAP_SYS_RESOURCE, which some machines
/// withhold even from root (this project's CI among them): without it,
/// the growth must fail saying so, and what needs no privilege (nothing to
/// grow, a refused shrink) is still checked.
#[test]
#[ignore = "needs root, loop devices and mkfs.ext4: .ci/run runs it as root"]
fn ext4_grows_or_says_it_needs_cap_sys_resource() {
    const CAP_SYS_RESOURCE: u32 = 24;
    let ext4 = Mounted::new("ext4", 64 * MIB);
    assert_eq!(mount::grow_filesystem(&ext4.point, None).unwrap(), 64 * MIB);
    let err = mount::grow_filesystem(&ext4.point, Some(32 * MIB)).unwrap_err();
    assert!(matches!(err, GrowError::Shrink { .. }), "{err:?}");

    let before = capacity(&ext4.point);
    ext4.grow_device(128 * MIB);
    let grown = mount::grow_filesystem(&ext4.point, None);
    if !capable(CAP_SYS_RESOURCE) {
        println!("ext4 growth not checked: no CAP_SYS_RESOURCE here, only its refusal");
        let err = grown.unwrap_err();
        assert!(
            matches!(&err, GrowError::Permission { capability, .. } if *capability == "CAP_SYS_RESOURCE"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "growing the ext4 filesystem on {} needs CAP_SYS_RESOURCE",
                ext4.point.display()
            )
        );
        return;
    }
    assert_eq!(grown.unwrap(), 128 * MIB);
    assert!(capacity(&ext4.point) > before + 50 * MIB);
}
