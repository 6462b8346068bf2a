//! Freezing a mounted filesystem (`FIFREEZE`) for a consistent copy of
//! what is under it, thawed when the guard is dropped.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::ioctl;

/// Freezing or thawing a filesystem failed.
#[derive(Debug, thiserror::Error)]
#[error("{doing} the filesystem mounted at {}", path.display())]
pub struct FreezeError {
    doing: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

/// A frozen filesystem: writes to it wait until this is dropped (or
/// [`thaw`](Frozen::thaw)ed), which thaws it, on every path out of the
/// caller, an error or a panic too.
#[derive(Debug)]
pub struct Frozen {
    path: PathBuf,
    dir: Option<OwnedFd>,
}

/// Freezes the filesystem mounted at `mount_point` (its root directory,
/// as the mount table names it: `FIFREEZE` works on a filesystem's root
/// only). Needs `CAP_SYS_ADMIN`. Dirty data is written to the device
/// first, so a copy of the device taken while it is frozen is a clean
/// filesystem, as of one instant.
pub fn freeze(mount_point: impl AsRef<Path>) -> Result<Frozen, FreezeError> {
    let path = mount_point.as_ref().to_owned();
    let failed = |doing, source| FreezeError {
        doing,
        path: path.clone(),
        source,
    };
    let flags =
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC;
    let dir = rustix::fs::open(&path, flags, rustix::fs::Mode::empty())
        .map_err(|e| failed("opening", e.into()))?;
    ioctl::freeze(&dir).map_err(|e| failed("freezing", e))?;
    Ok(Frozen {
        path,
        dir: Some(dir),
    })
}

impl Frozen {
    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Thaws it now, saying whether that worked (dropping thaws too, and
    /// logs a failure).
    pub fn thaw(mut self) -> Result<(), FreezeError> {
        self.thaw_now()
    }

    fn thaw_now(&mut self) -> Result<(), FreezeError> {
        let Some(dir) = self.dir.take() else {
            return Ok(());
        };
        ioctl::thaw(&dir).map_err(|source| FreezeError {
            doing: "thawing",
            path: self.path.clone(),
            source,
        })
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(e) = self.thaw_now() {
            let error = crate::error_chain(&e);
            tracing::error!(error, "a frozen filesystem could not be thawed");
        }
    }
}
