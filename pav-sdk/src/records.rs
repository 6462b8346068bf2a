//! Records of the volumes and snapshots a provisioner created, kept by the
//! SDK ([`Provisioner::keep_records`](crate::Provisioner::keep_records)),
//! so that the author writes storage logic only.
//!
//! With records, pav-sdk answers from them:
//!
//! | call | answered |
//! |---|---|
//! | Create of a recorded name | the recorded volume, or `ALREADY_EXISTS` when the request differs (parameters, mutable parameters, volume mode, source, or a capacity range the volume is outside of); [`Create::create`](crate::Create::create) is not called |
//! | Create of a new name | [`Create::create`](crate::Create::create), then the record; with a [budget](Records::budget), `RESOURCE_EXHAUSTED` when the volume does not fit |
//! | [`Create::exists`](crate::Create::exists) | from the records (the author's is never called) |
//! | Delete of an unrecorded handle | success, without calling [`Delete`](crate::Delete) |
//! | Delete of a recorded volume | [`Delete::delete`](crate::Delete::delete), then the record is removed |
//! | Expand | [`Expand::expand`](crate::Expand::expand), then the recorded size; within the budget |
//! | Expand, for a provisioner with [`NodeExpand`](crate::NodeExpand) and no [`Expand`](crate::Expand) (storage that grows on its node only) | pav-sdk alone: `NOT_FOUND` for an unrecorded volume, the budget checked, the size asked (`min_bytes`) recorded and answered, with node expansion; kubelet's NodeExpandVolume then finds it in [`NodeExpandRequest::record`](crate::NodeExpandRequest::record) |
//! | Modify | `NOT_FOUND` for an unrecorded volume; else [`Modify::modify`](crate::Modify::modify), then the recorded mutable parameters (the keys it named take their new values) |
//! | Delete of a recorded volume still attached | `FAILED_PRECONDITION` (in use); [`Delete`](crate::Delete) is not called |
//! | ControllerPublishVolume, ControllerUnpublishVolume | the recorded attachments answer repeats, conflicts and the per-node limit; [`Attach`](crate::Attach) attaches and detaches (see its table) |
//! | NodeStageVolume, NodeUnstageVolume, NodeExpandVolume | [`Stage`](crate::Stage), [`Unstage`](crate::Unstage) and [`NodeExpand`](crate::NodeExpand) get the volume's record ([`StageRequest::record`](crate::StageRequest::record)), read from the store at each call; [`Attach`](crate::Attach) gets it too |
//! | ListVolumes | the recorded volumes, unless the provisioner implements [`List`](crate::List) |
//! | GetCapacity | the budget less the recorded volumes' sizes, unless it implements [`Capacity`](crate::Capacity) |
//! | CreateSnapshot, DeleteSnapshot, ListSnapshots | as for volumes, by snapshot name; [`Snapshot::list_snapshots`](crate::Snapshot::list_snapshots) is never called; DeleteSnapshot of a group's member is `INVALID_ARGUMENT` (CSI: delete the group) |
//! | CreateVolumeGroupSnapshot | a recorded name: the recorded group, or `ALREADY_EXISTS` when the sources (in any order) or parameters differ; a new name: [`GroupSnapshot::create_group_snapshot`](crate::GroupSnapshot::create_group_snapshot), then a record of each member (listed by ListSnapshots with its group) and of the group, once every member is ready |
//! | DeleteVolumeGroupSnapshot | an unrecorded handle: success without calling the author; `INVALID_ARGUMENT` when the request's `snapshot_ids` are not the members; else the author's delete, then the records |
//! | GetVolumeGroupSnapshot | from the records (`NOT_FOUND`, `INVALID_ARGUMENT` for other `snapshot_ids`); [`GroupSnapshot::get_group_snapshot`](crate::GroupSnapshot::get_group_snapshot) is never called |
//!
//! A record is written once the author's call succeeded and removed once
//! the author's delete succeeded. After a crash between the two, the call
//! is made again: a Create for a name whose earlier Create ran but was not
//! recorded, a Delete for a volume already deleted. Make those succeed
//! over what the earlier call left (reuse the directory that exists;
//! treat a volume that is gone as deleted).
//!
//! [`DirStore`] keeps one JSON file per record in a directory, written
//! crash-safe (a temporary file, `fsync`, `rename`, `fsync` of the
//! directory). Keep that directory on storage that outlives the driver's
//! pod, and outside kubelet's directory unless it is pav-csi's state
//! directory (`DriverBuilder::state_dir`), where no request's path may lie.
//! Another [`RecordStore`] (a ConfigMap, a database) plugs in the same way.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::snapshot::SnapshotInfo;
use crate::types::Parameters;
pub use crate::types::{AttachmentRecord, RecordedMode, RecordedSource, VolumeRecord};
use crate::{Error, Result, VolumeId};

mod keeper;

pub(crate) use self::keeper::{RecordKeeper, Wrapped};

/// What the SDK records of a snapshot it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SnapshotRecord {
    /// The name the CO took it under (`SnapshotRequest::name`).
    pub name: String,
    /// Its handle.
    pub handle: String,
    /// The handle of the volume it was taken of.
    pub source: String,
    /// Bytes a volume restored from it needs at least.
    pub size_bytes: u64,
    /// The VolumeSnapshotClass parameters it was taken with.
    pub parameters: Parameters,
    /// When it was taken.
    pub created: SystemTime,
    /// The handle of the group snapshot it is a member of. Absent from
    /// records written before pav-sdk knew groups (none was one then).
    #[serde(default)]
    pub group: Option<String>,
}

impl SnapshotRecord {
    /// The snapshot as CreateSnapshot answered it.
    pub fn info(&self) -> SnapshotInfo {
        let info = SnapshotInfo::new(
            self.handle.clone(),
            self.source.clone(),
            self.size_bytes,
            self.created,
        );
        match &self.group {
            Some(group) => info.in_group(group.clone()),
            None => info,
        }
    }
}

/// What the SDK records of a group snapshot it took. Its members are
/// [`SnapshotRecord`]s whose `group` is this handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GroupRecord {
    /// The name the CO took it under (`GroupSnapshotRequest::name`).
    pub name: String,
    /// Its handle.
    pub handle: String,
    /// The handles of the volumes it was taken of, as requested.
    pub sources: Vec<String>,
    /// The VolumeGroupSnapshotClass parameters it was taken with.
    pub parameters: Parameters,
    /// The names of its members' snapshot records.
    pub members: Vec<String>,
    /// When it was taken.
    pub created: SystemTime,
}

/// Every record a store holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The volumes.
    pub volumes: Vec<VolumeRecord>,
    /// The snapshots.
    pub snapshots: Vec<SnapshotRecord>,
    /// The group snapshots.
    pub groups: Vec<GroupRecord>,
}

/// Where records are kept. pav-sdk reads them all once (at the first call
/// that needs them) and writes through: each method is called with the
/// volume or snapshot held, so calls for one name never overlap.
#[async_trait]
pub trait RecordStore: Send + Sync {
    /// Every record.
    async fn load(&self) -> Result<Recorded>;
    /// Stores `record`, replacing the one of the same name; durable when it
    /// returns.
    async fn put_volume(&self, record: &VolumeRecord) -> Result<()>;
    /// Forgets the volume named `name`; nothing recorded is fine.
    async fn remove_volume(&self, name: &str) -> Result<()>;
    /// Stores `record`, replacing the one of the same name; durable when it
    /// returns.
    async fn put_snapshot(&self, record: &SnapshotRecord) -> Result<()>;
    /// Forgets the snapshot named `name`; nothing recorded is fine.
    async fn remove_snapshot(&self, name: &str) -> Result<()>;
    /// Stores `record`, replacing the one of the same name; durable when it
    /// returns. The default refuses: a store written before group
    /// snapshots keeps none.
    async fn put_group(&self, record: &GroupRecord) -> Result<()> {
        Err(Error::Internal(format!(
            "this record store keeps no group snapshots (recording {:?}): implement RecordStore::put_group",
            record.name
        )))
    }
    /// Forgets the group snapshot named `name`; nothing recorded is fine.
    async fn remove_group(&self, name: &str) -> Result<()> {
        let _ = name;
        Ok(())
    }
}

/// How a provisioner keeps records: where, and within what budget.
#[derive(Clone)]
pub struct Records {
    pub(crate) store: Arc<dyn RecordStore>,
    pub(crate) budget: Option<u64>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Records {
    /// Records as JSON files under `dir` (see [`DirStore`]).
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self::in_store(DirStore::new(dir))
    }

    /// Records in `store`.
    pub fn in_store(store: impl RecordStore + 'static) -> Self {
        Records {
            store: Arc::new(store),
            budget: None,
        }
    }

    /// The bytes all volumes together may take: a Create or Expand that
    /// would pass it is `RESOURCE_EXHAUSTED`, and GetCapacity reports what
    /// is left (unless the provisioner implements
    /// [`Capacity`](crate::Capacity) itself).
    pub fn budget(mut self, bytes: u64) -> Self {
        self.budget = Some(bytes);
        self
    }

    /// The handles of the volumes recorded now, read from the store (not
    /// from what this process loaded before): how pav-csi's node plugin
    /// learns that a volume it holds was deleted, wherever the Delete ran.
    pub async fn volume_handles(&self) -> Result<std::collections::BTreeSet<String>> {
        let recorded = self.store.load().await?;
        Ok(recorded.volumes.into_iter().map(|r| r.handle).collect())
    }
}

/// Records as one JSON file each, under `<dir>/volumes/`,
/// `<dir>/snapshots/` and `<dir>/groups/`, named after the record's name (made safe, with a
/// hash of the name so that two names never share a file).
#[derive(Debug, Clone)]
pub struct DirStore {
    dir: PathBuf,
}

/// The two kinds of record, by their directory.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Volume,
    Snapshot,
    Group,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Kind::Volume => "volumes",
            Kind::Snapshot => "snapshots",
            Kind::Group => "groups",
        }
    }
}

impl DirStore {
    /// Records under `dir`, created at the first write.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirStore { dir: dir.into() }
    }

    fn file(&self, kind: Kind, name: &str) -> PathBuf {
        self.dir.join(kind.dir()).join(file_name(name))
    }

    fn load_kind<T: serde::de::DeserializeOwned>(&self, kind: Kind) -> Result<Vec<T>> {
        let dir = self.dir.join(kind.dir());
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("reading", &dir, &e)),
        };
        let mut records = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| io_error("reading", &dir, &e))?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue; // a write the driver's crash interrupted
            }
            let text = std::fs::read(&path).map_err(|e| io_error("reading", &path, &e))?;
            let record = serde_json::from_slice(&text).map_err(|e| {
                Error::Internal(format!(
                    "record {} is unreadable ({e}): move it away once you know which volume it was",
                    path.display()
                ))
            })?;
            records.push(record);
        }
        Ok(records)
    }

    fn put<T: Serialize>(&self, kind: Kind, name: &str, record: &T) -> Result<()> {
        let file = self.file(kind, name);
        let dir = file.parent().expect("a record file has a directory");
        std::fs::create_dir_all(dir).map_err(|e| io_error("creating", dir, &e))?;
        let partial = file.with_extension("partial");
        let json = serde_json::to_vec_pretty(record)
            .map_err(|e| Error::Internal(format!("encoding record {}: {e}", file.display())))?;
        let write = || -> std::io::Result<()> {
            let mut out = std::fs::File::create(&partial)?;
            out.write_all(&json)?;
            out.sync_all()?;
            std::fs::rename(&partial, &file)?;
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| io_error("writing", &file, &e))
    }

    fn remove(&self, kind: Kind, name: &str) -> Result<()> {
        let file = self.file(kind, name);
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io_error("removing", &file, &e))
            }
            _ => Ok(()),
        }
    }
}

/// A record store's failed file operation: `UNAVAILABLE`, as a full or
/// read-only disk may pass (the CO calls again).
fn io_error(doing: &str, path: &Path, error: &std::io::Error) -> Error {
    Error::Unavailable(format!("{doing} record {}: {error}", path.display()))
}

/// The file of the record named `name`: its ASCII letters, digits and `-`
/// (at most 64), then a 64-bit FNV-1a hash of the whole name.
fn file_name(name: &str) -> String {
    let readable: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{readable}-{hash:016x}.json")
}

#[async_trait]
impl RecordStore for DirStore {
    async fn load(&self) -> Result<Recorded> {
        Ok(Recorded {
            volumes: self.load_kind(Kind::Volume)?,
            snapshots: self.load_kind(Kind::Snapshot)?,
            groups: self.load_kind(Kind::Group)?,
        })
    }

    async fn put_volume(&self, record: &VolumeRecord) -> Result<()> {
        self.put(Kind::Volume, &record.name, record)
    }

    async fn remove_volume(&self, name: &str) -> Result<()> {
        self.remove(Kind::Volume, name)
    }

    async fn put_snapshot(&self, record: &SnapshotRecord) -> Result<()> {
        self.put(Kind::Snapshot, &record.name, record)
    }

    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        self.remove(Kind::Snapshot, name)
    }

    async fn put_group(&self, record: &GroupRecord) -> Result<()> {
        self.put(Kind::Group, &record.name, record)
    }

    async fn remove_group(&self, name: &str) -> Result<()> {
        self.remove(Kind::Group, name)
    }
}

/// Records by name, as the keeper holds them in memory.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub(crate) volumes: BTreeMap<String, VolumeRecord>,
    pub(crate) snapshots: BTreeMap<String, SnapshotRecord>,
    pub(crate) groups: BTreeMap<String, GroupRecord>,
    /// Bytes held for volumes being created or grown.
    pub(crate) reserved: u64,
    /// Attachments being made, per node: they count against the node's
    /// limit until recorded.
    pub(crate) attaching: BTreeMap<String, u32>,
}

impl Index {
    fn of(recorded: Recorded) -> Self {
        Index {
            volumes: (recorded.volumes.into_iter())
                .map(|r| (r.name.clone(), r))
                .collect(),
            snapshots: (recorded.snapshots.into_iter())
                .map(|r| (r.name.clone(), r))
                .collect(),
            groups: (recorded.groups.into_iter())
                .map(|r| (r.name.clone(), r))
                .collect(),
            reserved: 0,
            attaching: BTreeMap::new(),
        }
    }

    /// The recorded volume whose handle is `handle`.
    pub(crate) fn volume(&self, handle: &VolumeId) -> Option<&VolumeRecord> {
        self.volumes.values().find(|r| r.handle == **handle)
    }

    /// The recorded snapshot whose handle is `handle`.
    pub(crate) fn snapshot(&self, handle: &VolumeId) -> Option<&SnapshotRecord> {
        self.snapshots.values().find(|r| r.handle == **handle)
    }

    /// The recorded group snapshot whose handle is `handle`.
    pub(crate) fn group(&self, handle: &VolumeId) -> Option<&GroupRecord> {
        self.groups.values().find(|r| r.handle == **handle)
    }

    /// Bytes the recorded volumes and the reservations take.
    pub(crate) fn used(&self) -> u64 {
        (self.volumes.values())
            .map(|r| r.capacity_bytes)
            .fold(self.reserved, u64::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Topology;

    fn record(name: &str) -> VolumeRecord {
        VolumeRecord {
            name: name.into(),
            handle: format!("h-{name}"),
            capacity_bytes: 1 << 20,
            parameters: Parameters::from([("tier".into(), "fast".into())]),
            mutable_parameters: Parameters::from([("iops".into(), "3000".into())]),
            context: Parameters::new(),
            attachments: Vec::new(),
            accessible_topology: vec![Topology::from([("node".into(), "n1".into())])],
            volume_mode: RecordedMode::Filesystem,
            source: Some(RecordedSource::Snapshot("s-1".into())),
            created: SystemTime::UNIX_EPOCH,
        }
    }

    #[tokio::test]
    async fn a_dir_store_keeps_records_across_instances() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path());
        assert_eq!(store.load().await.unwrap(), Recorded::default());
        store.put_volume(&record("pvc-1")).await.unwrap();
        store.put_volume(&record("pvc-2")).await.unwrap();
        let mut changed = record("pvc-1");
        changed.capacity_bytes = 2 << 20;
        store.put_volume(&changed).await.unwrap();
        store.remove_volume("pvc-2").await.unwrap();
        store.remove_volume("never-recorded").await.unwrap();
        let again = DirStore::new(dir.path()).load().await.unwrap();
        assert_eq!(again.volumes, [changed]);
        assert!(again.snapshots.is_empty());
    }

    /// Records written before mutable parameters were recorded still load.
    #[tokio::test]
    async fn a_record_without_mutable_parameters_loads_with_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path());
        store.put_volume(&record("pvc-1")).await.unwrap();
        let file = store.file(Kind::Volume, "pvc-1");
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        json.as_object_mut().unwrap().remove("mutable_parameters");
        std::fs::write(&file, serde_json::to_vec(&json).unwrap()).unwrap();
        let loaded = store.load().await.unwrap().volumes;
        assert_eq!(loaded.len(), 1);
        assert!(loaded[0].mutable_parameters.is_empty());
        assert_eq!(loaded[0].parameters, record("pvc-1").parameters);
    }

    #[tokio::test]
    async fn an_interrupted_write_is_no_record_and_a_torn_one_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path());
        store.put_volume(&record("pvc-1")).await.unwrap();
        std::fs::write(dir.path().join("volumes/x.partial"), "{").unwrap();
        assert_eq!(store.load().await.unwrap().volumes.len(), 1);
        std::fs::write(dir.path().join("volumes/torn.json"), "{").unwrap();
        let error = store.load().await.unwrap_err();
        assert!(
            matches!(&error, Error::Internal(m) if m.contains("torn.json")),
            "{error:?}"
        );
    }

    #[test]
    fn hostile_names_make_safe_distinct_file_names() {
        let names = ["../../etc/passwd", "a/b", "a\0b", "ab", &"x".repeat(300)];
        let files: std::collections::BTreeSet<String> =
            names.iter().map(|n| file_name(n)).collect();
        assert_eq!(files.len(), names.len());
        for file in &files {
            assert!(!file.contains('/') && !file.contains('\0') && file.len() < 100);
            assert!(!file.starts_with('.'), "{file}");
        }
        assert_eq!(file_name("pvc-1"), file_name("pvc-1"));
        assert!(file_name("pvc-1").starts_with("pvc-1-"));
    }
}
