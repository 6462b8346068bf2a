//! Volume health: the image is there, and still holds the filesystem it
//! was formatted with.
//!
//! Stage records the filesystem it made or found on the image in the
//! image's `user.sparse-file.filesystem` extended attribute; health checks
//! that filesystem's superblock magic at its known offset (two bytes for
//! ext2/3/4, four for xfs: a read of one block). A block volume was never
//! formatted by us: there is nothing to check in it but its image.

use std::io::ErrorKind;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use pav_sdk::{Error, Health, HealthProblem, HealthRequest, Result, VolumeCondition, async_trait};

use super::{SparseFiles, backing, io_error};

/// The extended attribute naming the filesystem Stage made or found.
const FILESYSTEM_XATTR: &str = "user.sparse-file.filesystem";

/// Where each filesystem we format keeps its superblock magic, and what it
/// is: ext2/3/4's `s_magic` (0xEF53, little-endian) at byte 56 of the
/// superblock at 1024; xfs's `sb_magicnum` "XFSB" at byte 0.
fn magic(fs: &str) -> Option<(u64, &'static [u8])> {
    match fs {
        "ext2" | "ext3" | "ext4" => Some((1024 + 56, &[0x53, 0xEF])),
        "xfs" => Some((0, b"XFSB")),
        _ => None,
    }
}

/// Records that `image` holds filesystem `fs` (made or found by Stage).
/// Where extended attributes are not supported nothing is recorded, and
/// health checks the image's presence only.
pub(super) fn record_filesystem(image: &Path, fs: &str) -> std::io::Result<()> {
    let file = std::fs::File::open(image)?;
    let flags = rustix::fs::XattrFlags::empty();
    match rustix::fs::fsetxattr(&file, FILESYSTEM_XATTR, fs.as_bytes(), flags) {
        Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
        other => Ok(other?),
    }
}

/// The filesystem recorded on `file`, if any.
fn recorded_filesystem(file: &std::fs::File) -> std::io::Result<Option<String>> {
    let mut value = [0u8; 16];
    match rustix::fs::fgetxattr(file, FILESYSTEM_XATTR, &mut value) {
        Ok(len) => Ok(Some(String::from_utf8_lossy(&value[..len]).into_owned())),
        Err(rustix::io::Errno::NODATA | rustix::io::Errno::OPNOTSUPP) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What is wrong with the filesystem in `image`, `None` when its
/// superblock magic is where the recorded filesystem keeps it (or no
/// filesystem is recorded: a block volume, or one never staged).
fn damage(image: &Path) -> std::io::Result<Option<String>> {
    let file = std::fs::File::open(image)?;
    let Some(fs) = recorded_filesystem(&file)? else {
        return Ok(None);
    };
    let Some((offset, expected)) = magic(&fs) else {
        return Ok(Some(format!(
            "image {} records an unknown filesystem {fs:?}",
            image.display()
        )));
    };
    let mut found = vec![0u8; expected.len()];
    let read = match file.read_exact_at(&mut found, offset) {
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => false,
        other => other.map(|()| true)?,
    };
    Ok(match read && found == expected {
        true => None,
        false => Some(format!(
            "image {} has no {fs} superblock (no magic at byte {offset}): it was overwritten or truncated",
            image.display()
        )),
    })
}

/// The condition of a published volume whose image is gone
/// (`Inaccessible`, `ImageMissing`): its loop device still holds the
/// deleted file, but nothing written now outlives the device.
pub(super) fn missing(image: &Path) -> VolumeCondition {
    VolumeCondition::abnormal(format!(
        "image {} is missing: the volume's data is lost once it is unstaged",
        image.display()
    ))
    .because(HealthProblem::Inaccessible, "ImageMissing")
}

impl SparseFiles {
    /// The condition of the image at `image`, whose `unbacked` bytes are
    /// not yet allocated: abnormal when its filesystem is damaged
    /// (`DataLoss`, `FilesystemDamaged`), else when the directory has no
    /// room left for those bytes.
    pub(super) fn image_condition(&self, image: &Path, unbacked: u64) -> Result<VolumeCondition> {
        match damage(image) {
            Ok(Some(damage)) => Ok(VolumeCondition::abnormal(damage)
                .because(HealthProblem::DataLoss, "FilesystemDamaged")),
            Ok(None) => self.condition(unbacked),
            Err(e) => Err(io_error("checking", image, e)),
        }
    }
}

/// The image is there, its filesystem intact, and it has room to grow.
/// Asked by the node (pav-csi, when Stats gave no condition, and this
/// driver's Stats itself) a missing image is abnormal: the volume is in
/// use. Asked by the controller it is a volume that does not exist.
#[async_trait]
impl Health for SparseFiles {
    async fn condition(&self, req: HealthRequest) -> Result<VolumeCondition> {
        let image = self.image(&req.handle)?;
        match std::fs::metadata(&image) {
            Ok(meta) => self.image_condition(&image, backing(&meta).1),
            Err(e) if e.kind() == ErrorKind::NotFound && req.on_node() => Ok(missing(&image)),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::NotFound(format!(
                "volume {} does not exist",
                req.handle
            ))),
            Err(e) => Err(io_error("reading", &image, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pav_sdk::{Create, List, Stats, VolumeMode};

    /// A 320 MiB volume (xfs's least) in a fresh directory, its image formatted with
    /// `fs` (by the real mkfs, on the file: no root needed) and recorded
    /// as Stage records it; `None` leaves it a block volume.
    async fn volume(fs: Option<&str>) -> (tempfile::TempDir, SparseFiles, String) {
        let dir = tempfile::tempdir().unwrap();
        let files = SparseFiles::new(dir.path().to_owned());
        let mut req = pav_sdk::build::create("pvc-health", VolumeMode::Filesystem);
        req.capacity.min_bytes = Some(320 << 20);
        let handle = files.create(req).await.unwrap().handle.to_string();
        if let Some(fs) = fs {
            let image = files.existing_image(&handle).unwrap();
            let [quiet, force] = super::super::mkfs_args(fs);
            super::super::run(
                &format!("mkfs.{fs}"),
                &[quiet, force, &image.to_string_lossy()],
            )
            .await
            .unwrap();
            record_filesystem(&image, fs).unwrap();
        }
        (dir, files, handle)
    }

    async fn asked(files: &SparseFiles, req: HealthRequest) -> VolumeCondition {
        Health::condition(files, req).await.unwrap()
    }

    fn on_node(handle: &str) -> HealthRequest {
        HealthRequest::node(
            handle,
            "/var/lib/kubelet/pods/p/volumes/v",
            VolumeMode::Filesystem,
        )
    }

    /// Overwrites `len` bytes of the image at `offset` with zeros.
    fn zero(files: &SparseFiles, handle: &str, offset: u64, len: usize) {
        let image = files.existing_image(handle).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(image).unwrap();
        file.write_all_at(&vec![0; len], offset).unwrap();
    }

    #[tokio::test]
    async fn formatted_images_are_healthy_until_their_superblock_is_overwritten() {
        for (fs, offset) in [("ext4", 1024), ("xfs", 0)] {
            let (_dir, files, handle) = volume(Some(fs)).await;
            let image = files.existing_image(&handle).unwrap();
            for req in [HealthRequest::controller(&*handle), on_node(&handle)] {
                assert_eq!(asked(&files, req).await, VolumeCondition::healthy(), "{fs}");
            }
            zero(&files, &handle, offset, 4096);
            let condition = asked(&files, on_node(&handle)).await;
            assert!(condition.abnormal, "{fs}");
            let named = format!("image {} has no {fs} superblock", image.display());
            assert!(condition.message.starts_with(&named), "{condition:?}");
            assert_eq!(condition.problem, HealthProblem::DataLoss, "{fs}");
            assert_eq!(condition.reason, "FilesystemDamaged", "{fs}");
            assert!(
                asked(&files, HealthRequest::controller(&*handle))
                    .await
                    .abnormal,
                "{fs}: the controller sees it too"
            );
        }
    }

    #[tokio::test]
    async fn a_truncated_image_is_abnormal() {
        let (_dir, files, handle) = volume(Some("ext4")).await;
        let image = files.existing_image(&handle).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&image)
            .unwrap()
            .set_len(1024)
            .unwrap();
        let condition = asked(&files, on_node(&handle)).await;
        assert!(condition.abnormal && condition.message.contains("no ext4 superblock"));
    }

    /// A block volume (never formatted by us) has nothing to check but its
    /// image: zeros anywhere are its user's data.
    #[tokio::test]
    async fn block_volumes_are_not_checked_for_a_filesystem() {
        let (_dir, files, handle) = volume(None).await;
        zero(&files, &handle, 0, 8192);
        assert_eq!(
            asked(&files, on_node(&handle)).await,
            VolumeCondition::healthy()
        );
    }

    /// On the node a missing image is abnormal, named (and Stats says so
    /// too instead of failing, so kubelet's metric shows it); on the
    /// controller it is a volume that does not exist.
    #[tokio::test]
    async fn a_missing_image_is_abnormal_on_the_node_and_not_found_on_the_controller() {
        let (_dir, files, handle) = volume(Some("ext4")).await;
        let image = files.existing_image(&handle).unwrap();
        std::fs::remove_file(&image).unwrap();
        let condition = asked(&files, on_node(&handle)).await;
        assert!(condition.abnormal);
        let named = format!("image {} is missing", image.display());
        assert!(condition.message.starts_with(&named), "{condition:?}");
        assert_eq!(condition.problem, HealthProblem::Inaccessible);
        assert_eq!(condition.reason, "ImageMissing");
        let controller = Health::condition(&files, HealthRequest::controller(&*handle)).await;
        assert!(
            matches!(controller, Err(Error::NotFound(_))),
            "{controller:?}"
        );
        let mut stats =
            pav_sdk::build::stats(&*handle, "/var/lib/kubelet/x", VolumeMode::Filesystem);
        stats.measured = Some(pav_sdk::VolumeStats::default());
        let stats = files.stats(stats).await.unwrap();
        assert_eq!(stats.condition, Some(condition));
        let foreign = Health::condition(&files, on_node("../etc")).await;
        assert!(matches!(foreign, Err(Error::NotFound(_))), "{foreign:?}");
    }

    /// Stats and the listing report a damaged image too.
    #[tokio::test]
    async fn stats_and_listing_report_a_damaged_image() {
        let (_dir, files, handle) = volume(Some("ext4")).await;
        zero(&files, &handle, 1024, 1024);
        let mut stats =
            pav_sdk::build::stats(&*handle, "/var/lib/kubelet/x", VolumeMode::Filesystem);
        stats.measured = Some(pav_sdk::VolumeStats::default());
        let stats = files.stats(stats).await.unwrap();
        assert!(stats.condition.is_some_and(|c| c.abnormal));
        let listed = files.list().await.unwrap();
        assert!(listed[0].condition.as_ref().is_some_and(|c| c.abnormal));
    }
}
