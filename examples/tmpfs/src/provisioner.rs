// Tmpfs: node-local volumes in memory, each a tmpfs of its own size,
// grown online and snapshotted by copy. pav-sdk keeps the records (which
// volumes and snapshots exist, their sizes and sources, the node's
// budget), hands each node call its volume's record and grows volumes on
// the controller's side; pav-csi checks, mounts, binds, and gives each
// volume a node directory that it removes, unmounted, once the volume is
// deleted: this file is the storage logic only.

use pav_csi::files;
use pav_csi::mount::{self, MountFlags};
use pav_sdk::prelude::*;

/// A volume holds data: no set-user-id programs, no device files.
const FLAGS: MountFlags = MountFlags::NOSUID.union(MountFlags::NODEV);

/// Volume `<id>` is a tmpfs mounted on its node directory from its first
/// Stage until it is deleted, so its files outlive its pods (not the
/// node: after a reboot it starts empty, at its recorded size), in its
/// `volume/` directory; snapshot `<name>` is a copy of that in
/// `<snapshots>/<name>`.
pub struct Tmpfs {
    /// Where snapshots live.
    pub snapshots: std::path::PathBuf,
    /// This node's topology: the volumes are accessible from it only.
    pub node: Topology,
}

impl Tmpfs {
    /// Where snapshot `id` lives; an id that is not one file name cannot
    /// be one of ours (`NOT_FOUND`).
    fn snapshot(&self, id: &str) -> Result<std::path::PathBuf> {
        Ok(self.snapshots.join(VolumeId::new(id).path_component()?))
    }
}

#[async_trait]
impl Create for Tmpfs {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let size = req.capacity.choose(64 << 20, 4096)?; // none asked: 64 MiB
        // The node the CO chose (a waiting claim's pod's), else this one.
        let node = req.topology.chosen().unwrap_or(&self.node).clone();
        Ok(Volume::new(req.name, size).accessible_from(node))
    }
}

#[async_trait]
impl Stage for Tmpfs {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        let (volume, dir) = (req.recorded()?, req.node_dir()?);
        let data = format!("size={},mode=0777", volume.capacity_bytes);
        // Mounted once, so its files survive Unstage and the next Stage;
        // staged from a directory inside, which kubelet can unstage.
        let fresh = mount::mount_once("tmpfs", dir, "tmpfs", FLAGS, &data).await?;
        let root = files::volume_root(dir.join("volume")).await?;
        if let (true, Some(RecordedSource::Snapshot(id))) = (fresh, &volume.source) {
            files::copy_tree(self.snapshot(id)?, &root).await?;
        }
        Ok(Staged::at(root))
    }
}

/// Grown by a remount to the size pav-sdk recorded for it.
#[async_trait]
impl NodeExpand for Tmpfs {
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        let size = req.capacity_bytes()?;
        mount::remount(req.node_dir()?, FLAGS, &format!("size={size}")).await?;
        Ok(size)
    }
}

#[async_trait]
impl Snapshot for Tmpfs {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        let from = req.source_node_dir()?.join("volume");
        let to = self.snapshot(&req.name)?;
        files::remove_all(&to).await?; // what a crash mid-copy left
        match from.exists() {
            true => files::copy_tree(&from, &to).await?,
            false => std::fs::create_dir_all(&to)?, // never staged: empty
        }
        // The volume's size; a volume never staged has no tmpfs: 0.
        let size = rustix::fs::statvfs(&from).map_or(0, |s| s.f_blocks * s.f_frsize);
        let now = std::time::SystemTime::now();
        Ok(SnapshotInfo::new(req.name, req.source.as_str(), size, now))
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        Ok(files::remove_all(self.snapshot(&req.handle)?).await?)
    }
}
