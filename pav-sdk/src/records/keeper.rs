//! The touch points pav-sdk serves when it keeps records: each answers from
//! the records where it can and calls the author's only for storage work.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::{Index, RecordStore, RecordedSource, Records, SnapshotRecord, VolumeRecord};
use crate::attach::Attach;
use crate::group_snapshot::GroupSnapshot;
use crate::snapshot::{DeleteSnapshotRequest, Snapshot, SnapshotInfo, SnapshotRequest};
use crate::touch_points::{
    Capacity, Create, Delete, Expand, List, Modify, NodeExpand, Stage, Unstage,
};
use crate::types::{
    AvailableCapacity, CapacityRequest, CreateRequest, DeleteRequest, ExpandRequest, Expanded,
    ListedVolume, ModifyRequest, Volume,
};
use crate::{Error, Result, VolumeId};

mod attachments;
mod groups;
mod node;

/// The author's touch points that records wrap.
#[derive(Clone, Default)]
pub(crate) struct Wrapped {
    pub(crate) create: Option<Arc<dyn Create>>,
    pub(crate) delete: Option<Arc<dyn Delete>>,
    pub(crate) expand: Option<Arc<dyn Expand>>,
    pub(crate) modify: Option<Arc<dyn Modify>>,
    pub(crate) attach: Option<Arc<dyn Attach>>,
    /// The most attachments one node may hold.
    pub(crate) max_volumes_per_node: Option<u32>,
    pub(crate) snapshot: Option<Arc<dyn Snapshot>>,
    pub(crate) group_snapshot: Option<Arc<dyn GroupSnapshot>>,
    pub(crate) stage: Option<Arc<dyn Stage>>,
    pub(crate) unstage: Option<Arc<dyn Unstage>>,
    /// Also tells whether the nodes grow volumes too.
    pub(crate) node_expand: Option<Arc<dyn NodeExpand>>,
}

/// Create, Delete, Expand, Modify, Attach, List, Capacity and Snapshot
/// over records; Stage, Unstage and NodeExpand given their volume's record.
pub(crate) struct RecordKeeper {
    store: Arc<dyn RecordStore>,
    budget: Option<u64>,
    author: Wrapped,
    /// The records, read from the store at the first call that needs them.
    index: OnceCell<Mutex<Index>>,
}

impl RecordKeeper {
    pub(crate) fn new(records: &Records, author: Wrapped) -> Self {
        RecordKeeper {
            store: records.store.clone(),
            budget: records.budget,
            author,
            index: OnceCell::new(),
        }
    }

    /// Whether GetCapacity can be answered from the records.
    pub(crate) fn has_budget(&self) -> bool {
        self.budget.is_some()
    }

    /// The records, loaded once. The lock is never held across a call to
    /// the author or the store.
    async fn index(&self) -> Result<MutexGuard<'_, Index>> {
        let index = self
            .index
            .get_or_try_init(|| async {
                Ok::<_, Error>(Mutex::new(Index::of(self.store.load().await?)))
            })
            .await?;
        Ok(index.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Holds `bytes` of the budget until [`release`](Self::release);
    /// `RESOURCE_EXHAUSTED` when they do not fit.
    async fn reserve(&self, bytes: u64, what: &str) -> Result<()> {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let mut index = self.index().await?;
        let free = budget.saturating_sub(index.used());
        if bytes > free {
            return Err(Error::ResourceExhausted(format!(
                "{what} needs {bytes} bytes; {free} of the budget of {budget} are free"
            )));
        }
        index.reserved += bytes;
        Ok(())
    }

    async fn release(&self, bytes: u64) {
        if self.budget.is_none() {
            return;
        }
        if let Ok(mut index) = self.index().await {
            index.reserved = index.reserved.saturating_sub(bytes);
        }
    }

    /// The author's Create (present: the keeper serves Create only then).
    fn author_create(&self) -> &dyn Create {
        self.author
            .create
            .as_deref()
            .expect("records serve Create only for a provisioner with Create")
    }

    /// Deletes a volume whose record could not be written, so that
    /// failing leaks nothing; says how that went.
    async fn undo_create(&self, volume: &Volume) -> String {
        let Some(delete) = &self.author.delete else {
            return "it was not deleted (no Delete)".to_owned();
        };
        match delete
            .delete(crate::build::delete(volume.handle.as_str()))
            .await
        {
            Ok(()) | Err(Error::NotFound(_)) => "it was deleted".to_owned(),
            Err(e) => format!("deleting it failed too: {}", e.message()),
        }
    }

    /// Creates and records the volume `req.name`, within the budget.
    async fn create_new(&self, req: CreateRequest) -> Result<VolumeRecord> {
        let name = req.name.clone();
        let reserved = req.capacity.min_bytes.unwrap_or(0);
        self.reserve(reserved, &format!("volume {name:?}")).await?;
        let record = self.create_and_record(req, reserved).await;
        self.release(reserved).await;
        record
    }

    async fn create_and_record(&self, req: CreateRequest, reserved: u64) -> Result<VolumeRecord> {
        let name = req.name.clone();
        let template = VolumeRecord {
            name: name.clone(),
            handle: String::new(),
            capacity_bytes: 0,
            parameters: req.parameters.clone(),
            mutable_parameters: req.mutable_parameters.clone(),
            context: Default::default(),
            attachments: Vec::new(),
            accessible_topology: Vec::new(),
            volume_mode: req.volume_mode.into(),
            source: req.source.as_ref().and_then(RecordedSource::of),
            created: SystemTime::now(),
        };
        let volume = self.author_create().create(req).await?;
        // A volume larger than asked may still not fit.
        if let Err(e) = self
            .reserve(
                volume.capacity_bytes.saturating_sub(reserved),
                &format!("volume {name:?}"),
            )
            .await
        {
            let undo = self.undo_create(&volume).await;
            return Err(Error::ResourceExhausted(format!("{}; {undo}", e.message())));
        }
        let extra = volume.capacity_bytes.saturating_sub(reserved);
        let record = VolumeRecord {
            handle: volume.handle.clone(),
            capacity_bytes: volume.capacity_bytes,
            context: volume.context.clone(),
            accessible_topology: volume.accessible_topology.clone(),
            ..template
        };
        let stored = self.store.put_volume(&record).await;
        self.release(extra).await;
        if let Err(e) = stored {
            let undo = self.undo_create(&volume).await;
            return Err(Error::Unavailable(format!(
                "volume {name:?} was created but cannot be recorded ({}); {undo}",
                e.message()
            )));
        }
        self.index().await?.volumes.insert(name, record.clone());
        Ok(record)
    }
}

/// `ALREADY_EXISTS` unless the recorded volume answers `req`: the same
/// parameters, mutable parameters (as last modified), volume mode and
/// source, and a size within its range.
fn check_same(record: &VolumeRecord, req: &CreateRequest) -> Result<()> {
    let differs = |what: &str| {
        Err(Error::AlreadyExists(format!(
            "volume {:?} exists with another {what}",
            req.name
        )))
    };
    if record.parameters != req.parameters {
        return differs("set of parameters");
    }
    if record.mutable_parameters != req.mutable_parameters {
        return differs("set of mutable parameters");
    }
    if record.volume_mode != req.volume_mode.into() {
        return differs("volume mode");
    }
    if record.source != req.source.as_ref().and_then(RecordedSource::of) {
        return differs("source");
    }
    if record.capacity_bytes != 0 && !req.capacity.contains(record.capacity_bytes) {
        return differs(&format!("size ({} bytes)", record.capacity_bytes));
    }
    Ok(())
}

#[async_trait]
impl Create for RecordKeeper {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let recorded = self.index().await?.volumes.get(&req.name).cloned();
        let record = match recorded {
            Some(record) => {
                check_same(&record, &req)?;
                record
            }
            None => self.create_new(req).await?,
        };
        Ok(record.volume())
    }

    async fn exists(&self, volume: &VolumeId) -> Result<bool> {
        Ok(self.index().await?.volume(volume).is_some())
    }
}

#[async_trait]
impl Delete for RecordKeeper {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        let Some(record) = self.index().await?.volume(&req.handle).cloned() else {
            return Ok(()); // never created, or deleted already
        };
        if let Some(attached) = record.attachments.first() {
            // The CSI spec's "volume in use": detach it first.
            return Err(Error::FailedPrecondition(format!(
                "volume {:?} is still attached to node {:?}",
                req.handle.as_str(),
                attached.node_id
            )));
        }
        let name = record.name;
        if let Some(delete) = &self.author.delete {
            match delete.delete(req).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.store.remove_volume(&name).await?;
        self.index().await?.volumes.remove(&name);
        Ok(())
    }
}

#[async_trait]
impl Expand for RecordKeeper {
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded> {
        let Some(record) = self.index().await?.volume(&req.handle).cloned() else {
            return Err(Error::NotFound(format!(
                "volume {:?} does not exist",
                req.handle.as_str()
            )));
        };
        let requested = req.capacity.min_bytes.unwrap_or(0);
        if requested <= record.capacity_bytes {
            // As large already (a retry, or one that came late): never
            // shrunk, the author not asked.
            let expanded = Expanded::new(record.capacity_bytes);
            return Ok(match self.author.node_expand.is_some() {
                true => expanded.with_node_expansion(),
                false => expanded,
            });
        }
        let growth = requested - record.capacity_bytes;
        let what = format!("growing volume {:?}", record.name);
        self.reserve(growth, &what).await?;
        let expanded = match self.author.expand.as_deref() {
            Some(expand) => expand.expand(req).await,
            // Storage that grows on its node only (records serve Expand
            // without the author's only with NodeExpand): the size asked
            // is the volume's once the node has grown it.
            None => Ok(Expanded::new(requested).with_node_expansion()),
        };
        self.release(growth).await;
        let expanded = expanded?;
        let updated = VolumeRecord {
            capacity_bytes: expanded.capacity_bytes,
            ..record
        };
        self.store.put_volume(&updated).await?;
        self.index()
            .await?
            .volumes
            .insert(updated.name.clone(), updated);
        Ok(expanded)
    }
}

#[async_trait]
impl Modify for RecordKeeper {
    async fn modify(&self, req: ModifyRequest) -> Result<()> {
        let modify = (self.author.modify.as_deref())
            .expect("records serve Modify only for a provisioner with Modify");
        let Some(record) = self.index().await?.volume(&req.handle).cloned() else {
            return Err(Error::NotFound(format!(
                "volume {:?} does not exist",
                req.handle.as_str()
            )));
        };
        let changed = req.mutable_parameters.clone();
        modify.modify(req).await?;
        // Only the keys named change: the others keep their values.
        let mut updated = record;
        updated.mutable_parameters.extend(changed);
        self.store.put_volume(&updated).await?;
        self.index()
            .await?
            .volumes
            .insert(updated.name.clone(), updated);
        Ok(())
    }
}

#[async_trait]
impl List for RecordKeeper {
    async fn list(&self) -> Result<Vec<ListedVolume>> {
        let index = self.index().await?;
        Ok((index.volumes.values())
            .map(|r| ListedVolume::new(r.volume()))
            .collect())
    }
}

#[async_trait]
impl Capacity for RecordKeeper {
    async fn capacity(&self, _req: CapacityRequest) -> Result<AvailableCapacity> {
        let budget = self
            .budget
            .expect("records serve GetCapacity only with a budget");
        let used = self.index().await?.used();
        Ok(AvailableCapacity::new(budget.saturating_sub(used)))
    }
}

#[async_trait]
impl Snapshot for RecordKeeper {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        let snapshot = (self.author.snapshot.as_deref())
            .expect("records serve snapshots only for a provisioner with Snapshot");
        if let Some(record) = self.index().await?.snapshots.get(&req.name).cloned() {
            if record.source != *req.source || record.parameters != req.parameters {
                return Err(Error::AlreadyExists(format!(
                    "snapshot {:?} exists of another volume or with other parameters",
                    req.name
                )));
            }
            return Ok(record.info());
        }
        let (name, parameters) = (req.name.clone(), req.parameters.clone());
        let info = snapshot.create_snapshot(req).await?;
        if !info.ready {
            // Recorded once ready: the snapshotter asks again until then.
            return Ok(info);
        }
        let record = SnapshotRecord {
            name: name.clone(),
            handle: info.handle.clone(),
            source: info.source.clone(),
            size_bytes: info.size_bytes,
            parameters,
            created: info.created,
            group: None,
        };
        self.store.put_snapshot(&record).await?;
        self.index().await?.snapshots.insert(name, record);
        Ok(info)
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        let Some(record) = self.index().await?.snapshot(&req.handle).cloned() else {
            return Ok(()); // never taken, or deleted already
        };
        if let Some(group) = &record.group {
            return Err(Error::InvalidArgument(format!(
                "snapshot {:?} is a member of group snapshot {group:?}: delete the group",
                record.handle
            )));
        }
        let name = record.name;
        let snapshot = (self.author.snapshot.as_deref())
            .expect("records serve snapshots only for a provisioner with Snapshot");
        match snapshot.delete_snapshot(req).await {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        self.store.remove_snapshot(&name).await?;
        self.index().await?.snapshots.remove(&name);
        Ok(())
    }

    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let index = self.index().await?;
        Ok(index.snapshots.values().map(SnapshotRecord::info).collect())
    }
}
