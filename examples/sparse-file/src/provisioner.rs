//! The provisioner: storage logic only, no CSI.

use std::path::{Path, PathBuf};

use pav_sdk::{
    Create, CreateRequest, Delete, DeleteRequest, Error, Result, Stage, StageRequest, Staged,
    Unstage, UnstageRequest, Validate, ValidateRequest, Volume, VolumeMode, async_trait,
};
use tokio::process::Command;

/// Size of a volume whose claim requests none.
const DEFAULT_SIZE: u64 = 1 << 30;
/// Sizes are rounded up to whole MiB.
const GRANULARITY: u64 = 1 << 20;
/// Filesystem made when the request names none.
const DEFAULT_FS: &str = "ext4";
/// Filesystems we know how to make (all via e2fsprogs).
const FILESYSTEMS: [&str; 3] = ["ext2", "ext3", "ext4"];

/// Volumes as sparse files `<dir>/<handle>.img`.
#[derive(Debug)]
pub struct SparseFiles {
    dir: PathBuf,
}

impl SparseFiles {
    /// Keeps volumes under `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The handle for a volume name: stable, short, and safe as a file name.
    fn handle_for(name: &str) -> String {
        // FNV-1a: deterministic across runs and Rust versions, unlike std's hasher.
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("sparse-{hash:016x}")
    }

    /// The backing file of `handle`, refusing handles we never issued.
    fn image(&self, handle: &str) -> Result<PathBuf> {
        let hex = handle.strip_prefix("sparse-").unwrap_or_default();
        if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::NotFound(format!(
                "{handle:?} is not a sparse-file volume"
            )));
        }
        Ok(self.dir.join(format!("{handle}.img")))
    }

    /// The backing file of an existing volume.
    fn existing_image(&self, handle: &str) -> Result<PathBuf> {
        let image = self.image(handle)?;
        match image.is_file() {
            true => Ok(image),
            false => Err(Error::NotFound(format!("volume {handle} does not exist"))),
        }
    }
}

/// Runs a command, returning its trimmed stdout, or `Internal` with its stderr.
async fn run(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .await
        .map_err(|e| Error::Internal(format!("running {program}: {e}")))?;
    if !output.status.success() {
        return Err(Error::Internal(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Loop devices currently backed by `image`.
async fn loop_devices(image: &Path) -> Result<Vec<String>> {
    let listing = run("losetup", &["--associated", &image.to_string_lossy()]).await?;
    // Lines look like "/dev/loop3: [2049]:1234 (/path/file.img)".
    Ok(listing
        .lines()
        .filter_map(|line| line.split(':').next())
        .map(str::to_owned)
        .collect())
}

/// Whether something is mounted on `path`. A `mountpoint` that cannot run
/// is an error, never "not mounted", which would stack a second mount.
async fn is_mounted(path: &Path) -> Result<bool> {
    if !path.exists() {
        return Ok(false);
    }
    let status = Command::new("mountpoint")
        .arg("-q")
        .arg(path)
        .status()
        .await
        .map_err(|e| Error::Internal(format!("running mountpoint: {e}")))?;
    match status.code() {
        Some(0) => Ok(true),
        Some(32) => Ok(false), // util-linux: "not a mountpoint"
        _ => Err(Error::Internal(format!(
            "mountpoint -q {}: {status}",
            path.display()
        ))),
    }
}

/// The filesystem on `device`, `None` when it holds none. A `blkid` that
/// cannot run or fails otherwise is an error, never "no filesystem", which
/// would reformat the volume and lose its data.
async fn filesystem_on(device: &str) -> Result<Option<String>> {
    let args = ["-p", "-o", "value", "-s", "TYPE", device];
    let output = Command::new("blkid")
        .args(args)
        .output()
        .await
        .map_err(|e| Error::Internal(format!("running blkid: {e}")))?;
    match output.status.code() {
        Some(0) => Ok(Some(
            String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        )),
        Some(2) => Ok(None), // blkid -p: nothing recognised
        _ => Err(Error::Internal(format!(
            "blkid {}: {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))),
    }
}

/// Checks a filesystem type and returns the one to use.
fn fs_type(requested: Option<&str>) -> Result<&str> {
    match requested.unwrap_or(DEFAULT_FS) {
        fs if FILESYSTEMS.contains(&fs) => Ok(fs),
        fs => Err(Error::InvalidArgument(format!(
            "filesystem {fs:?} is not supported (use one of {FILESYSTEMS:?})"
        ))),
    }
}

#[async_trait]
impl Validate for SparseFiles {
    async fn validate(&self, req: ValidateRequest) -> Result<()> {
        if let Some(key) = req.parameters.keys().next() {
            return Err(Error::InvalidArgument(format!("unknown parameter {key:?}")));
        }
        if req.volume_mode == VolumeMode::Filesystem {
            fs_type(req.mount.fs_type.as_deref())?;
        }
        if let Some(handle) = &req.handle {
            self.existing_image(handle)?;
        }
        Ok(())
    }
}

#[async_trait]
impl Create for SparseFiles {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let handle = Self::handle_for(&req.name);
        let image = self.image(&handle)?;
        if let Ok(meta) = std::fs::metadata(&image) {
            // Same name again: the same volume if its size still fits the request.
            return match req.capacity.contains(meta.len()) {
                true => Ok(Volume::new(handle, meta.len())),
                false => Err(Error::AlreadyExists(format!(
                    "volume {:?} exists with {} bytes, outside the requested range",
                    req.name,
                    meta.len()
                ))),
            };
        }
        let size = req.capacity.choose(DEFAULT_SIZE, GRANULARITY)?;
        // Size a temporary file, then rename: a crash never leaves a short image.
        let partial = self.dir.join(format!("{handle}.partial"));
        std::fs::File::create(&partial)?.set_len(size)?;
        std::fs::rename(&partial, &image)?;
        tracing::info!(name = %req.name, %handle, size, "created sparse file");
        Ok(Volume::new(handle, size))
    }
}

#[async_trait]
impl Delete for SparseFiles {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        let Ok(image) = self.existing_image(&req.handle) else {
            return Ok(()); // already gone
        };
        if !loop_devices(&image).await?.is_empty() {
            return Err(Error::FailedPrecondition(format!(
                "volume {} is still staged",
                req.handle
            )));
        }
        std::fs::remove_file(&image)?;
        tracing::info!(handle = %req.handle, "deleted sparse file");
        Ok(())
    }
}

#[async_trait]
impl Stage for SparseFiles {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        let image = self.existing_image(&req.handle)?;
        let device = match loop_devices(&image).await?.into_iter().next() {
            Some(device) => device,
            None => run("losetup", &["--find", "--show", &image.to_string_lossy()]).await?,
        };
        if req.volume_mode == VolumeMode::Block {
            return Ok(Staged::at(device));
        }
        if is_mounted(&req.target_path).await? {
            return Ok(Staged::at(req.target_path));
        }
        let fs = fs_type(req.mount.fs_type.as_deref())?;
        if filesystem_on(&device).await?.is_none() {
            run(&format!("mkfs.{fs}"), &["-q", "-F", &device]).await?;
        }
        std::fs::create_dir_all(&req.target_path)?;
        let mut options = req.mount.mount_flags.clone();
        if req.read_only {
            options.push("ro".into());
        }
        let target = req.target_path.to_string_lossy().into_owned();
        let mut args = vec!["-t", fs, &device, &target];
        let options = options.join(",");
        if !options.is_empty() {
            args.extend(["-o", &options]);
        }
        run("mount", &args).await?;
        Ok(Staged::at(req.target_path))
    }
}

#[async_trait]
impl Unstage for SparseFiles {
    async fn unstage(&self, req: UnstageRequest) -> Result<()> {
        if is_mounted(&req.target_path).await? {
            run("umount", &[&req.target_path.to_string_lossy()]).await?;
        }
        let Ok(image) = self.existing_image(&req.handle) else {
            return Ok(()); // nothing left to detach
        };
        for device in loop_devices(&image).await? {
            run("losetup", &["--detach", &device]).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_stable_and_bounded() {
        let long = "x".repeat(128);
        assert_eq!(
            SparseFiles::handle_for(&long),
            SparseFiles::handle_for(&long)
        );
        assert_ne!(SparseFiles::handle_for("a"), SparseFiles::handle_for("b"));
        assert_eq!(SparseFiles::handle_for(&long).len(), 23);
    }

    #[test]
    fn foreign_handles_are_not_found() {
        let files = SparseFiles::new("/nonexistent".into());
        assert!(matches!(
            files.image("../../etc/passwd"),
            Err(Error::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn create_is_idempotent_and_delete_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let files = SparseFiles::new(dir.path().into());
        let mut req = pav_sdk::build::create("pvc-1", VolumeMode::Filesystem);
        req.capacity.min_bytes = Some(5 << 20);
        let first = files.create(req.clone()).await.unwrap();
        assert_eq!(first, files.create(req.clone()).await.unwrap());
        assert_eq!(first.capacity_bytes, 5 << 20);
        req.capacity.min_bytes = Some(50 << 20);
        assert!(matches!(
            files.create(req).await,
            Err(Error::AlreadyExists(_))
        ));
        let delete = pav_sdk::build::delete(first.handle.clone());
        files.delete(delete.clone()).await.unwrap();
        files.delete(delete).await.unwrap();
    }
}
