//! The volume id a provisioner receives, and its safe use as a file name.

use std::fmt;
use std::ops::Deref;

/// The longest volume id that can name a file: Linux's `NAME_MAX`.
const MAX_FILE_NAME: usize = 255;

/// A volume's handle as the CO sends it back: CSI `volume_id`, the
/// PersistentVolume's `spec.csi.volumeHandle`.
///
/// It is whatever [`Volume::handle`](crate::Volume::handle) a
/// [`Create`](crate::Create) returned, or whatever an administrator wrote
/// into a statically provisioned PV, or whatever any client of the driver's
/// socket sends: pav-csi checks only CSI's limits (at most 128 bytes), so
/// treat it as untrusted input. In particular, `DeleteVolume("../victim")`
/// is a valid request.
///
/// There is deliberately no `AsRef<Path>`: `root.join(&req.handle)` does
/// not compile. Use [`path_component`](Self::path_component), which refuses
/// every id that is not a single file name:
///
/// ```
/// # use pav_sdk::VolumeId;
/// let root = std::path::Path::new("/var/lib/volumes");
/// let id = VolumeId::new("pvc-1");
/// assert_eq!(root.join(id.path_component()?), root.join("pvc-1"));
/// assert!(VolumeId::new("../victim").path_component().is_err());
/// # Ok::<(), pav_sdk::PathComponentError>(())
/// ```
///
/// A refused id converts (`?`) to [`Error::NotFound`](crate::Error::NotFound):
/// an id that cannot be a file name names no volume of a provisioner that
/// keeps volumes as files, so Delete of it succeeds (there is nothing to
/// delete) and Stage of it is `NOT_FOUND`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId(String);

/// Why a [`VolumeId`] cannot be used as a file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathComponentError {
    /// The id is the empty string.
    #[error("volume id is empty: it cannot be a file name")]
    Empty,
    /// The id is `.` or `..`, which name a directory and its parent.
    #[error("volume id {0:?} cannot be a file name: it names a directory itself")]
    Dots(String),
    /// The id contains `/`, so it would be a path of several components.
    #[error("volume id {0:?} cannot be a file name: it contains '/'")]
    Slash(String),
    /// The id contains a NUL byte, which no file name may hold.
    #[error("volume id {0:?} cannot be a file name: it contains a NUL byte")]
    Nul(String),
    /// The id is longer than a file name may be.
    #[error(
        "volume id of {len} bytes cannot be a file name: at most {MAX_FILE_NAME} bytes",
        len = .0.len()
    )]
    TooLong(String),
}

impl VolumeId {
    /// Wraps an id as received. Any string is accepted: checks happen where
    /// the id is used, e.g. in [`path_component`](Self::path_component).
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id as received, for messages, lookups and comparisons. Never
    /// join it to a path: use [`path_component`](Self::path_component).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as a `String`.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The id as one file name inside a directory of the provisioner's:
    /// refuses the empty id, `.`, `..`, ids containing `/` or NUL, and ids
    /// longer than 255 bytes (`NAME_MAX`). What it returns joined to a
    /// directory names an entry of that directory and nothing else.
    pub fn path_component(&self) -> Result<&str, PathComponentError> {
        let id = self.0.as_str();
        match id {
            "" => Err(PathComponentError::Empty),
            "." | ".." => Err(PathComponentError::Dots(id.to_owned())),
            _ if id.contains('/') => Err(PathComponentError::Slash(id.to_owned())),
            _ if id.contains('\0') => Err(PathComponentError::Nul(id.to_owned())),
            _ if id.len() > MAX_FILE_NAME => Err(PathComponentError::TooLong(id.to_owned())),
            _ => Ok(id),
        }
    }
}

impl From<PathComponentError> for crate::Error {
    /// `NOT_FOUND`: an id that is not a file name names no volume kept as a file.
    fn from(err: PathComponentError) -> Self {
        Self::NotFound(err.to_string())
    }
}

impl Deref for VolumeId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for VolumeId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for VolumeId {
    /// Escaped like a string, so an id cannot forge a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<String> for VolumeId {
    fn from(id: String) -> Self {
        Self(id)
    }
}

impl From<&str> for VolumeId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl From<&String> for VolumeId {
    fn from(id: &String) -> Self {
        Self(id.clone())
    }
}

impl From<VolumeId> for String {
    fn from(id: VolumeId) -> Self {
        id.0
    }
}

impl PartialEq<str> for VolumeId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for VolumeId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for VolumeId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<VolumeId> for String {
    fn eq(&self, other: &VolumeId) -> bool {
        *self == other.0
    }
}

impl PartialEq<VolumeId> for str {
    fn eq(&self, other: &VolumeId) -> bool {
        self == other.0
    }
}

impl PartialEq<VolumeId> for &str {
    fn eq(&self, other: &VolumeId) -> bool {
        *self == other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn only_single_file_names_become_path_components() {
        let refused = [
            "",
            ".",
            "..",
            "../victim",
            "a/b",
            "/etc",
            "a\0b",
            &"x".repeat(256),
        ];
        for id in refused {
            assert!(VolumeId::new(id).path_component().is_err(), "{id:?}");
        }
        let accepted = [
            "pvc-1",
            "...",
            ".hidden",
            "a b",
            "ünïcode",
            &"x".repeat(255),
        ];
        for id in accepted {
            let id = VolumeId::new(id);
            let joined = Path::new("/base").join(id.path_component().unwrap());
            assert_eq!(joined.parent(), Some(Path::new("/base")), "{id:?}");
        }
    }

    #[test]
    fn a_refused_id_is_not_found_naming_the_id() {
        let err: crate::Error = VolumeId::new("../victim")
            .path_component()
            .unwrap_err()
            .into();
        assert!(matches!(err, crate::Error::NotFound(_)), "{err:?}");
        assert!(err.message().contains("\"../victim\""), "{err}");
    }

    #[test]
    fn compares_with_strings() {
        let id = VolumeId::new("vol-1");
        let owned = String::from("vol-1");
        assert_eq!(id, "vol-1");
        assert_eq!("vol-1", id);
        assert_eq!(owned, id);
        assert_eq!(format!("{id} {id:?}"), "vol-1 \"vol-1\"");
        assert_eq!(format!("{:?}", VolumeId::new("a\nb")), "\"a\\nb\"");
    }
}
