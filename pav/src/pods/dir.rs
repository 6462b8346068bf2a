//! A PaV pod's `/pav` directory as the node plugin sees it on its node:
//! unmounted and removed, and the unmount failures already reported.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Why a PaV pod's `/pav` directory could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum PodDirError {
    /// Something the pod mounted there stays mounted.
    #[error(transparent)]
    Unmount(#[from] pav_csi::mount::UnmountError),
    /// The directory itself could not be removed.
    #[error("removing {}", dir.display())]
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
    let unmounted = pav_csi::mount::blocking::unmount_below(dir)?;
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
pub(crate) struct ReportedMounts(std::sync::Mutex<HashSet<(String, PathBuf)>>);

impl ReportedMounts {
    /// True the first time `point` of pod `uid` is seen.
    pub(crate) fn first_report(&self, uid: &str, point: &Path) -> bool {
        let mut reported = self.0.lock().unwrap_or_else(|e| e.into_inner());
        reported.insert((uid.to_owned(), point.to_owned()))
    }

    /// Forgets the reports of pod `uid`, once its directory is gone.
    pub(crate) fn forget(&self, uid: &str) {
        let mut reported = self.0.lock().unwrap_or_else(|e| e.into_inner());
        reported.retain(|(reported_uid, _)| reported_uid != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_dirs_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let pod = dir.path().join("pav-creation-1");
        std::fs::create_dir_all(pod.join("volume")).unwrap();
        std::fs::write(pod.join("handle"), "h").unwrap();
        remove_pod_dir(&pod).unwrap();
        assert!(!pod.exists());
        remove_pod_dir(&pod).unwrap();
    }

    /// A staging pod that ran to completion leaves its bind mount of a node
    /// directory at `/pav/volume`: it is unmounted, not deleted through.
    /// Mounting needs root: `.ci/run` runs it as root with `--ignored`.
    #[test]
    #[ignore = "needs root"]
    fn as_root_pod_dirs_are_unmounted_before_removal() {
        let dir = tempfile::tempdir().unwrap();
        let node_data = dir.path().join("node-data");
        std::fs::create_dir(&node_data).unwrap();
        std::fs::write(node_data.join("kept"), "data").unwrap();
        let pod = dir.path().join("pav-staging-1");
        std::fs::create_dir_all(pod.join("volume")).unwrap();
        rustix::mount::mount_bind(&node_data, pod.join("volume")).unwrap();
        remove_pod_dir(&pod).unwrap();
        assert!(!pod.exists());
        assert_eq!(
            std::fs::read_to_string(node_data.join("kept")).unwrap(),
            "data"
        );
    }

    #[test]
    fn unmount_failures_are_reported_once_per_pod_and_mount() {
        let reported = ReportedMounts::default();
        let point = Path::new("/var/lib/pav/pods/pav-staging-a/volume");
        assert!(reported.first_report("uid-a", point));
        assert!(!reported.first_report("uid-a", point), "reported twice");
        assert!(reported.first_report("uid-b", point), "another pod's");
        assert!(reported.first_report("uid-a", &point.join("inner")));
        reported.forget("uid-a");
        assert!(reported.first_report("uid-a", point), "forgotten pod");
    }
}
