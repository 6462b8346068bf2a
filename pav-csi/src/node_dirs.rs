//! Node directories: one per volume on a node, under the state
//! directory's `node-dirs/`, for a provisioner that keeps records. pav-csi
//! names a volume's, pav-sdk makes it before the first Stage of a volume
//! its records hold, and Stage, Unstage and NodeExpand get it
//! ([`pav_sdk::StageRequest::node_dir`]). pav-csi removes it, after
//! unmounting whatever is mounted in it, when DeleteVolume runs in the
//! same process, and otherwise once the node finds the records no longer
//! hold the volume (`node::clean_up`). So storage a node keeps for a
//! volume (a tmpfs, a loop device's file) goes with the volume even when
//! the Delete ran in a controller on another node.

use std::io;
use std::path::{Path, PathBuf};

use pav_sdk::VolumeId;

use crate::mount::{self, TableError, UnmountError};

/// The directory under the state directory that holds them.
const NODE_DIRS: &str = "node-dirs";

/// The node directories of one node.
#[derive(Debug, Clone)]
pub(crate) struct NodeDirs {
    /// `<state dir>/node-dirs`.
    root: PathBuf,
}

/// Why node directories could not be listed or one removed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeDirError {
    /// The node directories could not be listed.
    #[error("cannot list node directories in {}", .0.display())]
    List(PathBuf, #[source] io::Error),
    /// Unmounting inside a deleted volume's directory failed.
    #[error("cannot unmount inside {}", .0.display())]
    Unmount(PathBuf, #[source] UnmountError),
    /// The mount table could not be read to check the directory is free.
    #[error("cannot check mounts inside {}", .0.display())]
    Table(PathBuf, #[source] TableError),
    /// Something is still mounted inside: removing would reach into it.
    #[error("{} still has {} mounted inside; left in place", .0.display(), .1.display())]
    StillMounted(PathBuf, PathBuf),
    /// Removing the directory failed.
    #[error("cannot remove {}", .0.display())]
    Remove(PathBuf, #[source] io::Error),
    /// The provisioner's node clean-up failed ([`pav_sdk::Stage::clean_up`]).
    #[error("node clean-up of deleted volume {0:?}")]
    CleanUp(String, #[source] pav_sdk::Error),
}

impl NodeDirError {
    /// The code a call that removed the directory answers: the
    /// provisioner's for its clean-up, else `INTERNAL`.
    pub(crate) fn code(&self) -> tonic::Code {
        match self {
            NodeDirError::CleanUp(_, e) => crate::error::provisioner_code(e),
            NodeDirError::List(..)
            | NodeDirError::Unmount(..)
            | NodeDirError::Table(..)
            | NodeDirError::StillMounted(..)
            | NodeDirError::Remove(..) => tonic::Code::Internal,
        }
    }
}

impl NodeDirs {
    pub(crate) fn new(state_dir: &Path) -> Self {
        Self {
            root: state_dir.join(NODE_DIRS),
        }
    }

    /// Where volume `volume_id`'s directory is, or would be; `None` for
    /// an id that cannot name one (no recorded volume has it).
    pub(crate) fn path(&self, volume_id: &str) -> Option<PathBuf> {
        let id = VolumeId::new(volume_id);
        Some(self.root.join(id.path_component().ok()?))
    }

    /// Volume `volume_id`'s directory if it has one.
    pub(crate) fn existing(&self, volume_id: &str) -> Option<PathBuf> {
        self.path(volume_id).filter(|dir| dir.is_dir())
    }

    /// The names of the directories there are.
    pub(crate) async fn names(&self) -> Result<Vec<String>, NodeDirError> {
        let failed = |e| NodeDirError::List(self.root.clone(), e);
        let mut entries = match tokio::fs::read_dir(&self.root).await {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            listed => listed.map_err(failed)?,
        };
        let mut names = Vec::new();
        while let Some(entry) = entries.next_entry().await.map_err(failed)? {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    /// Removes the node directory of volume `volume_id`, deleted and not
    /// staged here, if it has one: the provisioner's node clean-up first
    /// (`stager`'s), then everything mounted in it.
    pub(crate) async fn remove_volume(
        &self,
        stager: Option<&dyn pav_sdk::Stage>,
        volume_id: &str,
    ) -> Result<(), NodeDirError> {
        let Some(dir) = self.existing(volume_id) else {
            return Ok(());
        };
        if let Some(stager) = stager {
            let clean_up = pav_sdk::build::node_clean_up(volume_id, dir.clone());
            (stager.clean_up(clean_up).await)
                .map_err(|e| NodeDirError::CleanUp(volume_id.to_owned(), e))?;
        }
        self.remove(&dir).await?;
        tracing::info!(volume_id, "removed the node directory of a deleted volume");
        Ok(())
    }

    /// Unmounts everything in `dir`, checks nothing is left mounted there
    /// (a removal would reach into it), and removes it.
    async fn remove(&self, dir: &Path) -> Result<(), NodeDirError> {
        mount::unmount_below(dir)
            .await
            .map_err(|e| NodeDirError::Unmount(dir.to_owned(), e))?;
        let table =
            (mount::mount_table().await).map_err(|e| NodeDirError::Table(dir.to_owned(), e))?;
        if let Some(left) = table.iter().find(|m| m.mount_point.starts_with(dir)) {
            return Err(NodeDirError::StillMounted(
                dir.to_owned(),
                left.mount_point.clone(),
            ));
        }
        (crate::files::remove_all(dir).await).map_err(|e| NodeDirError::Remove(dir.to_owned(), e))
    }
}
