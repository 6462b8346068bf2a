//! Attach, as a cloud disk is attached to an instance: the controller
//! attaches the volume's image to a loop device (the "disk" appearing on
//! the node) and answers its device path, with the image it backs, as the
//! publish context; the node's Stage formats and mounts that device
//! instead of attaching one itself, once it has checked that the device
//! really is a loop device backed by exactly that image; the controller
//! detaches it once the node unstaged the volume.
//!
//! The images live on the controller's node, the only node volumes are
//! accessible from (their topology), so the controller attaches there
//! only: another node id is `NOT_FOUND`. The device the controller
//! attached is recorded in the image's `user.sparse-file.attached`
//! extended attribute, so that Unstage leaves it attached (it is the
//! controller's to detach) and Detach detaches only it.
//!
//! A volume staged without a publish context (staged before the driver
//! attached, or by a CO that does not attach) is attached by Stage as
//! before, and detached by Unstage.

use std::path::{Path, PathBuf};

use pav_sdk::{
    Attach, AttachRequest, Attached, DetachRequest, Error, Parameters, Result, StageRequest,
    async_trait,
};

use crate::provisioner::{SparseFiles, io_error, locked, loop_devices, run, settle};

/// Publish context key: the loop device the image is attached to.
pub const DEVICE_KEY: &str = "devicePath";
/// Publish context key: the image the device is backed by.
pub const IMAGE_KEY: &str = "image";
/// The image's extended attribute naming the loop device Attach attached.
const ATTACHED_XATTR: &str = "user.sparse-file.attached";

/// Where the kernel tells a loop device's properties.
const SYS_BLOCK: &str = "/sys/block";

/// The loop device's name (`loop3`) of a device path that names one
/// (`/dev/loop3`), else `None`: no other path may come from a context.
fn loop_name(device: &str) -> Option<&str> {
    let name = device.strip_prefix("/dev/")?;
    let number = name.strip_prefix("loop")?;
    let digits = !number.is_empty() && number.len() <= 6;
    (digits && number.bytes().all(|b| b.is_ascii_digit())).then_some(name)
}

/// The file backing loop device `name`, `None` when it is not attached
/// (or not a loop device).
fn backing_file(name: &str) -> Result<Option<PathBuf>> {
    let path = Path::new(SYS_BLOCK).join(name).join("loop/backing_file");
    match std::fs::read_to_string(&path) {
        Ok(file) => Ok(Some(PathBuf::from(file.trim_end_matches('\n')))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Internal(format!("reading {}: {e}", path.display()))),
    }
}

/// Whether loop device `name` is read-only.
fn read_only(name: &str) -> Result<bool> {
    let path = Path::new(SYS_BLOCK).join(name).join("ro");
    let ro = std::fs::read_to_string(&path)
        .map_err(|e| Error::Internal(format!("reading {}: {e}", path.display())))?;
    Ok(ro.trim() == "1")
}

/// `path` with its links and `..` resolved, as the kernel names backing
/// files.
fn resolved(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path).map_err(|e| io_error("resolving", path, e))
}

/// Whether `device` is a loop device backed by exactly `image`.
fn backs(device: &str, image: &Path) -> Result<bool> {
    backed_by(device, &resolved(image)?)
}

/// Whether `device` is a loop device whose backing file the kernel names
/// `backing` (canonical, as the kernel gives it).
fn backed_by(device: &str, backing: &Path) -> Result<bool> {
    let Some(name) = loop_name(device) else {
        return Ok(false);
    };
    Ok(backing_file(name)?.is_some_and(|file| file == backing))
}

/// The name the kernel gives the backing file of a loop device whose
/// `image` was deleted: `<image> (deleted)`, its directory resolved.
fn deleted_backing(image: &Path) -> Result<Option<PathBuf>> {
    let (Some(dir), Some(name)) = (image.parent(), image.file_name()) else {
        return Ok(None);
    };
    let mut deleted = resolved(dir)?.join(name).into_os_string();
    deleted.push(" (deleted)");
    Ok(Some(deleted.into()))
}

/// The device Attach recorded on `image`, if any.
fn recorded_device(file: &std::fs::File) -> std::io::Result<Option<String>> {
    let mut value = [0_u8; 64];
    match rustix::fs::fgetxattr(file, ATTACHED_XATTR, &mut value) {
        Ok(len) => Ok(Some(String::from_utf8_lossy(&value[..len]).into_owned())),
        // Nothing recorded; or nothing can be, where the filesystem has
        // no user extended attributes (then Attach fails, and no device
        // is the controller's).
        Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn record_device(file: &std::fs::File, device: Option<&str>) -> std::io::Result<()> {
    let done = match device {
        Some(device) => rustix::fs::fsetxattr(
            file,
            ATTACHED_XATTR,
            device.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        ),
        None => match rustix::fs::fremovexattr(file, ATTACHED_XATTR) {
            Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP) => Ok(()),
            other => other,
        },
    };
    done.map_err(Into::into)
}

/// The loop device of `image`: the one attached already, or a new one
/// (after releasing blocks a Modify left reserved). Holds the image's
/// lock meanwhile, so that Modify never punches holes under a loop device
/// it did not see. With `attach`, the device is recorded as the
/// controller's (Unstage leaves it).
pub async fn loop_device(image: &Path, read_only_wanted: bool, attach: bool) -> Result<String> {
    let locked = locked(image).await?;
    let device = match loop_devices(image).await?.into_iter().next() {
        Some(device) => device,
        None => {
            settle(&locked).map_err(|e| io_error("releasing", image, e))?;
            let image = image.to_string_lossy();
            let mut args = vec!["--find", "--show"];
            if read_only_wanted {
                args.push("--read-only");
            }
            args.push(&image);
            run("losetup", &args).await?
        }
    };
    if attach {
        record_device(&locked, Some(&device)).map_err(|e| io_error("recording", image, e))?;
    }
    Ok(device)
}

/// Makes loop `device` as large as its image is now: a loop device keeps
/// the size its image had when it was attached.
pub async fn follow_image_size(device: &str) -> Result<()> {
    run("losetup", &["--set-capacity", device]).await?;
    Ok(())
}

/// How long [`detach`] waits for the kernel to let a device go.
const DETACH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Detaches loop `device` from `image` and returns once the kernel has
/// let it go. `losetup --detach` of a device another process still holds
/// open (udev probing it after the unmount) only marks it to be cleared
/// at the last close, and succeeds; Delete, or the next Stage, would then
/// find the image still attached. Past [`DETACH_WAIT`] it is
/// `UNAVAILABLE`, naming the device, so that the caller's retry finishes.
pub async fn detach(device: &str, image: &Path) -> Result<()> {
    detach_from(device, &resolved(image)?).await
}

/// Detaches the loop devices still backed by `image` after it was
/// deleted, as [`detach`] does: they hold its blocks until then.
pub async fn detach_deleted(image: &Path) -> Result<Vec<String>> {
    let Some(backing) = deleted_backing(image)? else {
        return Ok(Vec::new());
    };
    let devices = devices_backed_by(&backing)?;
    for device in &devices {
        detach_from(device, &backing).await?;
    }
    Ok(devices)
}

/// [`detach`] of `device`, whose backing file the kernel names `backing`.
async fn detach_from(device: &str, backing: &Path) -> Result<()> {
    run("losetup", &["--detach", device]).await?;
    let deadline = tokio::time::Instant::now() + DETACH_WAIT;
    let mut pause = std::time::Duration::from_millis(5);
    while backed_by(device, backing)? {
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Unavailable(format!(
                "loop device {device} still backs {} {}s after it was detached: another process holds it open",
                backing.display(),
                DETACH_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(500));
    }
    Ok(())
}

/// Loop devices still backed by `image` after it was deleted: the kernel
/// names their backing file `<image> (deleted)`, and they hold its blocks
/// until detached.
#[cfg(test)]
pub fn devices_of_deleted(image: &Path) -> Result<Vec<String>> {
    match deleted_backing(image)? {
        Some(backing) => devices_backed_by(&backing),
        None => Ok(Vec::new()),
    }
}

/// The loop devices whose backing file the kernel names `backing`.
fn devices_backed_by(backing: &Path) -> Result<Vec<String>> {
    let attached = attached_loop_devices()?.into_iter();
    let backed = attached.filter(|(_, file)| file == backing);
    Ok(backed.map(|(name, _)| format!("/dev/{name}")).collect())
}

/// A node's loop devices, as the volume limit counts them.
struct Room {
    /// The loop devices the driver may use (`--max-volumes-per-node`).
    budget: u32,
    /// Attached loop devices backed by files outside the directory.
    others: usize,
    /// Attached loop devices backed by images of the directory.
    held: usize,
    /// The most volumes the node can hold now.
    limit: u32,
}

impl Room {
    /// The room `budget` loop devices leave for images under `dir`, with
    /// `attached` (name, backing file) attached.
    fn count(budget: u32, dir: &Path, attached: &[(String, PathBuf)]) -> Room {
        let held = (attached.iter())
            .filter(|(_, file)| file.starts_with(dir))
            .count();
        let others = attached.len() - held;
        // At least 1: CSI's 0 means no limit.
        let free = (budget as usize).saturating_sub(others).max(1);
        Room {
            budget,
            others,
            held,
            limit: u32::try_from(free).unwrap_or(budget),
        }
    }
}

/// Every attached loop device of this node, by name (`loop3`), with the
/// backing file the kernel names.
fn attached_loop_devices() -> Result<Vec<(String, PathBuf)>> {
    let entries =
        std::fs::read_dir(SYS_BLOCK).map_err(|e| Error::Internal(format!("{SYS_BLOCK}: {e}")))?;
    let mut attached = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| n.starts_with("loop")) else {
            continue;
        };
        if let Some(file) = backing_file(name)? {
            attached.push((name.to_owned(), file));
        }
    }
    Ok(attached)
}

/// The loop device Attach attached for `image`, which Unstage leaves.
pub fn attached_by_controller(image: &Path) -> Result<Option<String>> {
    let file = std::fs::File::open(image).map_err(|e| io_error("opening", image, e))?;
    recorded_device(&file).map_err(|e| io_error("reading the attachment of", image, e))
}

impl SparseFiles {
    /// `NOT_FOUND` unless `node_id` is the node the images are on.
    fn check_node(&self, node_id: &str) -> Result<()> {
        match self.node_id() {
            Some(node) if node == node_id => Ok(()),
            Some(node) => Err(Error::NotFound(format!(
                "node {node_id:?} does not exist for this driver: its volumes are on node {node:?}, and attach there only"
            ))),
            None => Err(Error::FailedPrecondition(
                "this controller was started without --node-id: it does not know the node its volumes are on".into(),
            )),
        }
    }

    /// `RESOURCE_EXHAUSTED` when as many images of the directory as the
    /// node may hold now are attached to loop devices already.
    fn check_room(&self) -> Result<()> {
        let Some(room) = self.room()? else {
            return Ok(());
        };
        if room.held >= room.limit as usize {
            return Err(Error::ResourceExhausted(format!(
                "{} volumes are attached to this node, its maximum now ({} loop devices for this driver, {} of them used by other programs)",
                room.held, room.budget, room.others
            )));
        }
        Ok(())
    }

    /// The most volumes this node can hold now (`NodeGetInfo`): the loop
    /// devices the driver may use (`--max-volumes-per-node`) less those
    /// other programs attached meanwhile; `None` without a limit.
    pub(crate) fn volume_limit_now(&self) -> Result<Option<u32>> {
        Ok(self.room()?.map(|room| room.limit))
    }

    /// The node's loop devices as the limit counts them, `None` without
    /// a limit.
    fn room(&self) -> Result<Option<Room>> {
        let Some(budget) = self.attached_limit() else {
            return Ok(None);
        };
        let dir = resolved(self.dir())?;
        Ok(Some(Room::count(budget, &dir, &attached_loop_devices()?)))
    }

    /// The device the publish context names, once checked: a loop device
    /// backed by exactly this volume's image (never another volume's, nor
    /// another device: the context comes from the CO, as every request
    /// string, and Stage formats what it names). `None` without a
    /// context: Stage attaches the image itself.
    pub fn published_device(&self, req: &StageRequest, image: &Path) -> Result<Option<String>> {
        let context = &req.publish_context;
        let Some(device) = context.get(DEVICE_KEY) else {
            return Ok(None);
        };
        let refused = |why: String| {
            Err(Error::FailedPrecondition(format!(
                "publish context of volume {}: {why}; refusing to stage it (ControllerPublishVolume attaches it again)",
                req.handle
            )))
        };
        if loop_name(device).is_none() {
            return refused(format!("{device:?} is not a loop device"));
        }
        if context.get(IMAGE_KEY).map(PathBuf::from).as_deref() != Some(image) {
            return refused(format!(
                "it names image {:?}, not {}",
                context.get(IMAGE_KEY),
                image.display()
            ));
        }
        if !backs(device, image)? {
            return refused(format!("{device} is not backed by {}", image.display()));
        }
        Ok(Some(device.clone()))
    }
}

/// The publish context of `device` attached for `image`.
fn context(device: &str, image: &Path) -> Parameters {
    Parameters::from([
        (DEVICE_KEY.to_owned(), device.to_owned()),
        (IMAGE_KEY.to_owned(), image.to_string_lossy().into_owned()),
    ])
}

#[async_trait]
impl Attach for SparseFiles {
    async fn attach(&self, req: AttachRequest) -> Result<Attached> {
        self.check_node(&req.node_id)?;
        let image = self.existing_image(&req.handle)?;
        match loop_devices(&image).await?.into_iter().next() {
            // Attached already (a retry, or staged without a context):
            // the same device, if it is attached as asked.
            Some(device) => {
                let name = loop_name(&device).unwrap_or_default();
                if read_only(name)? != req.read_only {
                    return Err(Error::AlreadyExists(format!(
                        "volume {} is attached to {device} {}",
                        req.handle,
                        if req.read_only {
                            "read-write"
                        } else {
                            "read-only"
                        }
                    )));
                }
            }
            None => self.check_room()?,
        }
        let device = loop_device(&image, req.read_only, true).await?;
        tracing::info!(handle = %req.handle, device, node = req.node_id, "attached");
        Ok(Attached::with_context(context(&device, &image)))
    }

    async fn detach(&self, req: DetachRequest) -> Result<()> {
        if let Some(node) = &req.node_id
            && self.check_node(node).is_err()
        {
            return Ok(()); // never attached there
        }
        let Ok(image) = self.existing_image(&req.handle) else {
            return Ok(()); // gone: attached nowhere
        };
        let locked = locked(&image).await?;
        let Some(device) = recorded_device(&locked).map_err(|e| io_error("reading", &image, e))?
        else {
            return Ok(()); // not attached by Attach
        };
        // Only the device still backed by this image: a device number is
        // reused once detached, and may back another volume by now.
        if backs(&device, &image)? {
            detach(&device, &image).await?;
            tracing::info!(handle = %req.handle, device, "detached");
        }
        record_device(&locked, None).map_err(|e| io_error("recording", &image, e))?;
        Ok(())
    }

    fn attaches_read_only(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node's limit is the budget less what other programs attached,
    /// never 0 (CSI's "no limit"); the driver's own devices count as held.
    #[test]
    fn other_programs_loop_devices_lower_the_limit() {
        let dir = Path::new("/var/lib/sparse-file");
        let device = |name: &str, file: &str| (name.to_owned(), PathBuf::from(file));
        let attached = [
            device("loop0", "/var/lib/sparse-file/a.img"),
            device("loop1", "/var/lib/other/disk.img"),
            device("loop2", "/var/lib/sparse-file-old/b.img"),
        ];
        let room = Room::count(8, dir, &attached);
        assert_eq!((room.held, room.others, room.limit), (1, 2, 6));
        assert_eq!(Room::count(8, dir, &attached[..1]).limit, 8);
        assert_eq!(Room::count(2, dir, &attached).limit, 1, "never 0");
    }

    #[test]
    fn only_loop_device_paths_are_accepted() {
        for device in ["/dev/loop0", "/dev/loop12"] {
            assert!(loop_name(device).is_some(), "{device}");
        }
        for device in [
            "/dev/sda",
            "/dev/loop",
            "/dev/loop1/../sda",
            "/dev/loop-control",
            "/etc/passwd",
            "loop3",
            "/dev/loop9999999",
        ] {
            assert!(loop_name(device).is_none(), "{device}");
        }
    }
}
