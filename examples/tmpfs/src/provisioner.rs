// Tmpfs: node-local volumes in memory, each a tmpfs of its own size,
// grown online and snapshotted by copy. pav-sdk keeps the records (which
// volumes and snapshots exist, their sizes and sources, the node's
// budget), hands each node call its volume's record and grows volumes on
// the controller's side; pav-csi checks, mounts and binds: this file is
// the storage logic only.

use std::path::{Path, PathBuf};

use pav_csi::mount::{self, MountFlags};
use pav_sdk::prelude::*;

/// Size of a volume whose claim asks for none; tmpfs sizes are whole pages.
const DEFAULT_SIZE: u64 = 64 << 20;
const PAGE: u64 = 4096;
/// A volume holds data: no set-user-id programs, no device files.
const FLAGS: MountFlags = MountFlags::NOSUID.union(MountFlags::NODEV);

/// Volume `<id>` is a tmpfs mounted at `<root>/volumes/<id>` from its
/// first Stage until Delete, so its files outlive its pods (not the node:
/// after a reboot it starts empty, at its recorded size); snapshot `<name>`
/// is a copy of one in `<root>/snapshots/<name>`.
pub struct Tmpfs {
    /// Where volumes and snapshots live.
    pub root: PathBuf,
    /// This node's topology: the volumes are accessible from it only.
    pub node: Topology,
}

impl Tmpfs {
    /// Where volume or snapshot `id` lives; an id that is not one file name
    /// cannot be one of ours (`NOT_FOUND`).
    fn path(&self, kind: &str, id: &VolumeId) -> Result<PathBuf> {
        Ok(self.root.join(kind).join(id.path_component()?))
    }
}

#[async_trait]
impl Create for Tmpfs {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let size = req.capacity.choose(DEFAULT_SIZE, PAGE)?;
        Ok(Volume::new(req.name, size).accessible_from(self.node.clone()))
    }
}

#[async_trait]
impl Delete for Tmpfs {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        let dir = self.path("volumes", &req.handle)?;
        mount::unmount(&dir).await?; // busy (bound into a pod): retried
        removed(std::fs::remove_dir(dir))
    }
}

#[async_trait]
impl Stage for Tmpfs {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        let (volume, dir) = (req.recorded()?, self.path("volumes", &req.handle)?);
        std::fs::create_dir_all(&dir)?;
        let data = format!("size={},mode=0777", volume.capacity_bytes);
        // Mounted once, so its files survive Unstage and the next Stage.
        let fresh = mount::mount_once("tmpfs", &dir, "tmpfs", FLAGS, &data).await?;
        if let (true, Some(RecordedSource::Snapshot(id))) = (fresh, &volume.source) {
            copy_tree(&self.path("snapshots", &VolumeId::new(id.as_str()))?, &dir)?;
        }
        Ok(Staged::at(dir))
    }
}

/// Grown by a remount to the size pav-sdk recorded for it.
#[async_trait]
impl NodeExpand for Tmpfs {
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        let (size, dir) = (
            req.recorded()?.capacity_bytes,
            self.path("volumes", &req.handle)?,
        );
        mount::remount(dir, FLAGS, &format!("size={size}")).await?;
        Ok(size)
    }
}

#[async_trait]
impl Snapshot for Tmpfs {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        let from = self.path("volumes", &req.source)?;
        let to = self.path("snapshots", &VolumeId::new(req.name.as_str()))?;
        removed(std::fs::remove_dir_all(&to))?; // what a crash mid-copy left
        match from.exists() {
            true => copy_tree(&from, &to)?,
            false => std::fs::create_dir_all(&to)?, // never staged: empty
        }
        // The volume's size; a volume never staged has no tmpfs: 0.
        let size = rustix::fs::statvfs(&from).map_or(0, |s| s.f_blocks * s.f_frsize);
        let now = std::time::SystemTime::now();
        Ok(SnapshotInfo::new(req.name, req.source.as_str(), size, now))
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        removed(std::fs::remove_dir_all(
            self.path("snapshots", &req.handle)?,
        ))
    }
}

/// Removing what is gone already is success (a retry after a crash).
fn removed(result: std::io::Result<()>) -> Result<()> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Copies the files, directories and symlinks under `from` into `to`.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (kind, target) = (entry.file_type()?, to.join(entry.file_name()));
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
