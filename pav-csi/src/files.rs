//! Files a provisioner copies and removes, async, with errors that convert
//! into [`pav_sdk::Error`]: so a Stage restoring a snapshot by copy writes
//! `files::copy_tree(from, to).await?`.

use std::io;
use std::path::Path;

/// Copies the files, directories and symlinks under `from` into `to`
/// (made if missing), on tokio's blocking threads. Other kinds of file
/// (devices, sockets, FIFOs) are skipped: volume data holds none worth a
/// copy, and a device node copied would hand out a device.
pub async fn copy_tree(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (from, to) = (from.as_ref().to_owned(), to.as_ref().to_owned());
    tokio::task::spawn_blocking(move || blocking::copy_tree(&from, &to))
        .await
        .map_err(io::Error::other)?
}

/// Makes directory `path` (and its parents) writable by every user, as a
/// new volume's root directory is (mode `0777`, whatever the umask), and
/// answers it; one that exists is left as it is (its owner may have
/// changed its mode since). The directory a Stage hands out inside a
/// filesystem it keeps mounted (`StageRequest::node_dir`).
pub async fn volume_root(path: impl AsRef<Path>) -> io::Result<std::path::PathBuf> {
    let path = path.as_ref().to_owned();
    tokio::task::spawn_blocking(move || blocking::volume_root(&path).map(|()| path))
        .await
        .map_err(io::Error::other)?
}

/// Removes `path` and everything under it; what is gone already is
/// success (a retry after a crash).
pub async fn remove_all(path: impl AsRef<Path>) -> io::Result<()> {
    match tokio::fs::remove_dir_all(path).await {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The same, for code already on a blocking thread.
pub mod blocking {
    use std::io;
    use std::path::Path;

    /// [`volume_root`](super::volume_root), blocking.
    pub fn volume_root(path: &Path) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if path.is_dir() {
            return Ok(());
        }
        std::fs::create_dir_all(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
    }

    /// [`copy_tree`](super::copy_tree), blocking.
    pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let (kind, target) = (entry.file_type()?, to.join(entry.file_name()));
            if kind.is_dir() {
                copy_tree(&entry.path(), &target)?;
            } else if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, target)?;
            } else if kind.is_file() {
                std::fs::copy(entry.path(), target)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tree_is_copied_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        std::fs::create_dir_all(from.join("a/b")).unwrap();
        std::fs::write(from.join("a/b/file"), "data").unwrap();
        std::os::unix::fs::symlink("a/b/file", from.join("link")).unwrap();
        copy_tree(&from, &to).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("a/b/file")).unwrap(),
            "data"
        );
        assert_eq!(
            std::fs::read_link(to.join("link")).unwrap(),
            Path::new("a/b/file")
        );
        remove_all(&to).await.unwrap();
        assert!(!to.exists());
        let root = volume_root(dir.path().join("a/root")).await.unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&root).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o777, "{mode:o}");
        remove_all(&to).await.unwrap(); // gone already: success
    }
}
