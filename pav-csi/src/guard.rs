//! At most one operation in flight per volume; a concurrent one is `ABORTED`.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tonic::Code;

/// What an operation holds while it runs. Its `Display` is the text an
/// `ABORTED` answer names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// A volume, by id.
    Volume(String),
    /// A volume being created, by the name `CreateVolume` gives it.
    VolumeName(String),
    /// A snapshot being taken, by the name `CreateSnapshot` gives it.
    SnapshotName(String),
    /// A snapshot, by id.
    Snapshot(String),
    /// A group snapshot being taken, by the name
    /// `CreateVolumeGroupSnapshot` gives it.
    GroupSnapshotName(String),
    /// A group snapshot, by id.
    GroupSnapshot(String),
    /// A publish target (resolved): two volumes must not both find it free.
    TargetPath(PathBuf),
    /// A staging path (resolved): two volumes must not both find it free.
    StagingPath(PathBuf),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Volume(id) => write!(f, "volume {id}"),
            Key::VolumeName(name) => write!(f, "volume name {name:?}"),
            Key::SnapshotName(name) => write!(f, "snapshot name {name:?}"),
            Key::Snapshot(id) => write!(f, "snapshot {id}"),
            Key::GroupSnapshotName(name) => write!(f, "group snapshot name {name:?}"),
            Key::GroupSnapshot(id) => write!(f, "group snapshot {id:?}"),
            Key::TargetPath(path) => write!(f, "target path {path:?}"),
            Key::StagingPath(path) => write!(f, "staging path {}", path.display()),
        }
    }
}

/// Another operation holds the key (`ABORTED`: the caller tries again).
#[derive(Debug, thiserror::Error)]
#[error("an operation on {0} is already in progress")]
pub(crate) struct Busy(Key);

impl Busy {
    /// The code of a call refused for it: `ABORTED`.
    pub(crate) fn code(&self) -> Code {
        Code::Aborted
    }
}

/// Keys with an operation in progress.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight(Arc<Mutex<HashSet<Key>>>);

/// Holds a key until dropped.
#[derive(Debug)]
pub(crate) struct OperationGuard {
    set: InFlight,
    key: Key,
}

impl InFlight {
    /// Claims `key`, or [`Busy`] when another operation holds it.
    pub(crate) fn claim(&self, key: Key) -> Result<OperationGuard, Busy> {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !set.insert(key.clone()) {
            return Err(Busy(key));
        }
        Ok(OperationGuard {
            set: self.clone(),
            key,
        })
    }
}

impl Drop for OperationGuard {
    fn drop(&mut self) {
        let mut set = self.set.0.lock().unwrap_or_else(|e| e.into_inner());
        set.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_claim_is_aborted_until_release() {
        let in_flight = InFlight::default();
        let volume = |id: &str| Key::Volume(id.into());
        let guard = in_flight.claim(volume("vol-1")).unwrap();
        let refused = in_flight.claim(volume("vol-1")).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Aborted);
        assert_eq!(
            refused.to_string(),
            "an operation on volume vol-1 is already in progress"
        );
        assert!(in_flight.claim(volume("vol-2")).is_ok());
        // A name and an id are different keys, even when spelled alike.
        assert!(in_flight.claim(Key::VolumeName("vol-1".into())).is_ok());
        drop(guard);
        assert!(in_flight.claim(volume("vol-1")).is_ok());
    }

    #[test]
    fn keys_read_as_before() {
        let texts = [
            (Key::VolumeName("a\nb".into()), r#"volume name "a\nb""#),
            (Key::SnapshotName("s".into()), r#"snapshot name "s""#),
            (Key::Snapshot("snap-1".into()), "snapshot snap-1"),
            (Key::TargetPath("/k/t".into()), r#"target path "/k/t""#),
            (Key::StagingPath("/k/s".into()), "staging path /k/s"),
        ];
        for (key, text) in texts {
            assert_eq!(key.to_string(), text);
        }
    }
}
