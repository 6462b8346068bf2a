// Tmpfs: node-local volumes in memory, each a tmpfs of its own size,
// grown online and snapshotted by copy. pav-sdk keeps the records (which
// volumes and snapshots exist, their sizes, the node's budget) and
// pav-csi checks, mounts and binds: this file is the storage logic only.

use std::path::{Path, PathBuf};

use pav_csi::mount::{self, MountFlags};
use pav_sdk::{
    ContentSource, Create, CreateRequest, Delete, DeleteRequest, DeleteSnapshotRequest, Error,
    Expand, ExpandRequest, Expanded, NodeExpand, NodeExpandRequest, Result, Snapshot, SnapshotInfo,
    SnapshotRequest, Stage, StageRequest, Staged, Topology, Volume, VolumeId, async_trait,
};

/// Size of a volume whose claim asks for none; tmpfs sizes are whole pages.
const DEFAULT_SIZE: u64 = 64 << 20;
const PAGE: u64 = 4096;

/// Volume `<id>` is a tmpfs mounted at `<root>/volumes/<id>` from its
/// first Stage until Delete, so its files outlive its pods (not the node:
/// after a reboot it starts empty, at its created size); snapshot `<name>`
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

/// `INTERNAL`: what failed where, and why (pav_csi::mount's errors say
/// their step, their source the system's answer: print the chain).
fn io(context: &str, path: &Path, e: impl std::error::Error) -> Error {
    let why = pav_csi::error_chain(&e);
    Error::Internal(format!("{context} {}: {why}", path.display()))
}

/// Removing what is gone already is success.
fn removed(path: &Path, result: std::io::Result<()>) -> Result<()> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", path, e)),
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

#[async_trait]
impl Create for Tmpfs {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let size = req.capacity.choose(DEFAULT_SIZE, PAGE)?;
        let mut volume = Volume::new(req.name, size)
            .with_context("size", size.to_string())
            .accessible_from(self.node.clone());
        if let Some(ContentSource::Snapshot(snapshot)) = &req.source {
            self.path("snapshots", snapshot)?; // one of ours, or NOT_FOUND
            volume = volume.with_context("snapshot", snapshot.as_str());
        }
        Ok(volume)
    }
}

#[async_trait]
impl Delete for Tmpfs {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        let dir = self.path("volumes", &req.handle)?;
        mount::unmount(&dir)
            .await
            .map_err(|e| io("unmounting", &dir, e))?;
        removed(&dir, std::fs::remove_dir(&dir))
    }
}

#[async_trait]
impl Stage for Tmpfs {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        let dir = self.path("volumes", &req.handle)?;
        // Create put the size in every volume's context: no size, no volume.
        let size = (req.context.get("size"))
            .ok_or_else(|| Error::NotFound(format!("no volume {:?}", req.handle.as_str())))?;
        std::fs::create_dir_all(&dir).map_err(|e| io("creating", &dir, e))?;
        let flags = MountFlags::NOSUID | MountFlags::NODEV;
        let data = format!("size={size},mode=0777");
        let fresh = mount::mount_once("tmpfs", &dir, "tmpfs", flags, &data)
            .await
            .map_err(|e| io("mounting", &dir, e))?;
        if let (true, Some(snapshot)) = (fresh, req.context.get("snapshot")) {
            let from = self.path("snapshots", &VolumeId::new(snapshot.as_str()))?;
            copy_tree(&from, &dir).map_err(|e| io("restoring into", &dir, e))?;
        }
        Ok(Staged::at(dir))
    }
}

#[async_trait]
impl Expand for Tmpfs {
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded> {
        let size = req.capacity.choose(DEFAULT_SIZE, PAGE)?;
        Ok(Expanded::new(size).with_node_expansion())
    }
}

#[async_trait]
impl NodeExpand for Tmpfs {
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        let dir = self.path("volumes", &req.handle)?;
        let size = req.capacity.choose(DEFAULT_SIZE, PAGE)?;
        let flags = MountFlags::NOSUID | MountFlags::NODEV;
        mount::remount(&dir, flags, &format!("size={size}"))
            .await
            .map_err(|e| io("growing", &dir, e))?;
        Ok(size)
    }
}

#[async_trait]
impl Snapshot for Tmpfs {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        let from = self.path("volumes", &req.source)?;
        let to = self.path("snapshots", &VolumeId::new(req.name.as_str()))?;
        let _ = std::fs::remove_dir_all(&to); // what a crash mid-copy left
        let copied = match from.exists() {
            true => copy_tree(&from, &to),
            false => std::fs::create_dir_all(&to), // never staged: empty
        };
        copied.map_err(|e| io("copying into", &to, e))?;
        // The volume's size; a volume never staged has no tmpfs: 0.
        let size = rustix::fs::statvfs(&from).map_or(0, |s| s.f_blocks * s.f_frsize);
        let now = std::time::SystemTime::now();
        Ok(SnapshotInfo::new(req.name, req.source.as_str(), size, now))
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        let dir = self.path("snapshots", &req.handle)?;
        removed(&dir, std::fs::remove_dir_all(&dir))
    }
}
