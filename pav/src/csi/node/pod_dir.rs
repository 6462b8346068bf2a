//! A PaV pod's `/pav` directory on this node: unmounted and removed, and
//! the unmount failures already reported.

use super::*;

/// Why a PaV pod's `/pav` directory could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum PodDirError {
    /// Something the pod mounted there stays mounted.
    #[error(transparent)]
    Unmount(#[from] pav_csi::mount::UnmountError),
    /// The directory itself could not be removed.
    #[error("removing {}: {source}", dir.display())]
    Remove {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Unmounts whatever a PaV pod left mounted in its directory (deepest
/// first, with system calls: the pav image holds no `umount`), then removes
/// the directory; never deletes through a mount point. Gone is fine.
pub(crate) fn remove_pod_dir(dir: &Path) -> std::result::Result<(), PodDirError> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    let unmounted = pav_csi::mount::unmount_below(dir)?;
    if !unmounted.is_empty() {
        tracing::info!(dir = %dir.display(), mounts = ?unmounted, "unmounted what a PaV pod left mounted");
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(PodDirError::Remove {
            dir: dir.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Mount points that could not be unmounted and have been reported, each
/// with the uid of the staging pod that left it: a failure is reported once
/// as an event on the claim, not on every retry of NodeUnstageVolume.
#[derive(Debug, Default)]
pub(super) struct ReportedMounts(std::sync::Mutex<HashSet<(String, PathBuf)>>);

impl ReportedMounts {
    /// True the first time `point` of pod `uid` is seen.
    pub(super) fn first_report(&self, uid: &str, point: &Path) -> bool {
        let mut reported = self.0.lock().unwrap_or_else(|e| e.into_inner());
        reported.insert((uid.to_owned(), point.to_owned()))
    }

    /// Forgets the reports of pod `uid`, once its directory is gone.
    pub(super) fn forget(&self, uid: &str) {
        let mut reported = self.0.lock().unwrap_or_else(|e| e.into_inner());
        reported.retain(|(reported_uid, _)| reported_uid != uid);
    }
}
