//! The [`Provisioner`] value that bundles the touch points for serving, and
//! wires pav-sdk's [record keeper](crate::records) in front of them when it
//! [keeps records](Provisioner::keep_records).
//!
//! The touch points themselves, and their requests, are below it:
//! [`Validate`] to [`List`] in one module, [`Attach`], [`Health`],
//! [`Snapshot`] and [`GroupSnapshot`] each in its own.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::attach::Attach;
use crate::group_snapshot::GroupSnapshot;
use crate::health::Health;
use crate::records::{RecordKeeper, Records, Wrapped};
use crate::snapshot::Snapshot;
use crate::touch_points::{
    Capacity, Create, Delete, Expand, List, Modify, NodeExpand, Stage, Stats, Unstage, Validate,
};
use crate::types::{AccessMode, VolumeMode};

mod switched_off;

/// Whether [`Expand`] can grow a volume that is in use (CSI plugin
/// capability `VolumeExpansion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expansion {
    /// While published to pods (`ONLINE`).
    Online,
    /// Only while not published anywhere (`OFFLINE`): the CO unpublishes
    /// it first.
    Offline,
}

/// What a provisioner implements, bundled for serving.
///
/// Built from one value that implements any subset of the touch points,
/// usually with [`provisioner!`](crate::provisioner!), which adds every
/// touch point the value's type implements. Otherwise each `with_*` call
/// adds one, checked by the compiler against the traits the value
/// implements. The CSI capabilities are derived from what was added:
///
/// | added | CSI effect |
/// |---|---|
/// | `with_create` | `CREATE_DELETE_VOLUME` controller capability, `CreateVolume` served |
/// | `with_delete` | `DeleteVolume` calls it (otherwise it succeeds doing nothing) |
/// | `with_validate` | runs before `CreateVolume` and for `ValidateVolumeCapabilities` |
/// | `with_stage` | `STAGE_UNSTAGE_VOLUME` node capability, node service can be served |
/// | `with_unstage` | `NodeUnstageVolume` calls it after unmounting |
/// | `with_stats` | `NodeGetVolumeStats` and `NodeGetVolumeHealth` call it; `VOLUME_CONDITION` and `GET_VOLUME_HEALTH` node capabilities (a missing condition is [`Health`]'s, or healthy) |
/// | `with_expand` | `EXPAND_VOLUME` controller capability, `ControllerExpandVolume` served; `VolumeExpansion` plugin capability (`ONLINE`, or [`offline_expansion`](Provisioner::offline_expansion)) |
/// | `with_modify` | `MODIFY_VOLUME` controller capability, `ControllerModifyVolume` served; `CreateVolume` with `mutable_parameters` accepted |
/// | `with_attach` | `PUBLISH_UNPUBLISH_VOLUME` controller capability (and `PUBLISH_READONLY` when [`Attach::attaches_read_only`]), `ControllerPublishVolume` and `ControllerUnpublishVolume` served; `NodeStageVolume`'s `publish_context` passed to Stage |
/// | `max_volumes_per_node` | `NodeGetInfo.max_volumes_per_node`; with records, an attach past it `RESOURCE_EXHAUSTED` |
/// | `with_health` | `GET_VOLUME` and `VOLUME_CONDITION` controller capabilities (with a listing: [`List`] or records), `ControllerGetVolume` served, `ListVolumes` entries without a condition asked; `VOLUME_CONDITION` and `GET_VOLUME_HEALTH` node capabilities, `NodeGetVolumeStats` and `NodeGetVolumeHealth` ask it when [`Stats`] gave no condition (`NodeGetVolumeHealth` without a publish path: the controller's question) |
/// | `with_capacity` | `GET_CAPACITY` controller capability, `GetCapacity` served |
/// | `with_list` | `LIST_VOLUMES` controller capability (and `VOLUME_CONDITION` when [`List::reports_condition`]), `ListVolumes` served |
/// | `with_snapshot` | `CREATE_DELETE_SNAPSHOT` and `LIST_SNAPSHOTS` controller capabilities; `CreateSnapshot`, `DeleteSnapshot`, `ListSnapshots` served; `CreateVolume` from a snapshot accepted |
/// | `with_group_snapshot` | `GROUP_CONTROLLER_SERVICE` plugin capability and `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT`; `CreateVolumeGroupSnapshot`, `DeleteVolumeGroupSnapshot`, `GetVolumeGroupSnapshot` served |
/// | `clones_volumes` | `CLONE_VOLUME` controller capability; `CreateVolume` from a volume accepted |
/// | `with_node_expand` | `EXPAND_VOLUME` node capability, `NodeExpandVolume` served; with records and no `with_expand`, `ControllerExpandVolume` too, answered from the records ([`records`](crate::records)) |
/// | `ephemeral` | CSI ephemeral inline volumes: `NodePublishVolume` creates and stages, `NodeUnpublishVolume` unstages and deletes (see [`ephemeral`](Provisioner::ephemeral)) |
/// | `stage_on_publish` | no `STAGE_UNSTAGE_VOLUME`; Stage/Unstage run in `NodePublishVolume`/`NodeUnpublishVolume` |
///
/// ```
/// # use pav_sdk::*;
/// # struct Mine;
/// # #[async_trait::async_trait]
/// # impl Create for Mine {
/// #     async fn create(&self, r: CreateRequest) -> Result<Volume> { Ok(Volume::new(r.name, 0)) }
/// #     async fn exists(&self, _: &VolumeId) -> Result<bool> { Ok(false) }
/// # }
/// let p = Provisioner::new(Mine).with_create();
/// assert!(p.create().is_some() && p.delete().is_none());
/// ```
#[derive(Clone)]
pub struct Provisioner<P = ()> {
    inner: Arc<P>,
    validate: Option<Arc<dyn Validate>>,
    pub(crate) create: Option<Arc<dyn Create>>,
    pub(crate) delete: Option<Arc<dyn Delete>>,
    pub(crate) stage: Option<Arc<dyn Stage>>,
    unstage: Option<Arc<dyn Unstage>>,
    stats: Option<Arc<dyn Stats>>,
    expand: Option<Arc<dyn Expand>>,
    modify: Option<Arc<dyn Modify>>,
    attach: Option<Arc<dyn Attach>>,
    max_volumes_per_node: Option<u32>,
    health: Option<Arc<dyn Health>>,
    node_expand: Option<Arc<dyn NodeExpand>>,
    expansion: Expansion,
    capacity: Option<Arc<dyn Capacity>>,
    list: Option<Arc<dyn List>>,
    snapshot: Option<Arc<dyn Snapshot>>,
    group_snapshot: Option<Arc<dyn GroupSnapshot>>,
    clones: bool,
    volume_modes: BTreeSet<VolumeMode>,
    access_modes: BTreeSet<AccessMode>,
    stage_on_publish: bool,
    /// Serves CSI ephemeral inline volumes (crate::ephemeral).
    pub(crate) ephemeral: bool,
    /// Records kept by pav-sdk, and the touch points serving from them.
    records: Option<(Records, Arc<RecordKeeper>)>,
}

impl<P: Send + Sync + 'static> Provisioner<P> {
    /// Wraps `inner`; add its touch points with the `with_*` methods.
    ///
    /// By default only [`VolumeMode::Filesystem`] and the access modes of a
    /// single node ([`AccessMode::SINGLE_NODE`]) are accepted; see
    /// [`volume_modes`](Self::volume_modes) and
    /// [`access_modes`](Self::access_modes).
    pub fn new(inner: P) -> Self {
        Self {
            inner: Arc::new(inner),
            validate: None,
            create: None,
            delete: None,
            stage: None,
            unstage: None,
            stats: None,
            expand: None,
            modify: None,
            attach: None,
            max_volumes_per_node: None,
            health: None,
            node_expand: None,
            expansion: Expansion::Online,
            capacity: None,
            list: None,
            snapshot: None,
            group_snapshot: None,
            clones: false,
            volume_modes: BTreeSet::from([VolumeMode::Filesystem]),
            access_modes: AccessMode::SINGLE_NODE.into_iter().collect(),
            stage_on_publish: false,
            ephemeral: false,
            records: None,
        }
    }

    /// The wrapped value.
    pub fn inner(&self) -> &Arc<P> {
        &self.inner
    }

    /// Adds the [`Validate`] touch point.
    pub fn with_validate(mut self) -> Self
    where
        P: Validate,
    {
        self.validate = Some(self.inner.clone());
        self
    }

    /// Adds the [`Create`] touch point.
    pub fn with_create(mut self) -> Self
    where
        P: Create,
    {
        self.create = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Delete`] touch point.
    pub fn with_delete(mut self) -> Self
    where
        P: Delete,
    {
        self.delete = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Stage`] touch point.
    pub fn with_stage(mut self) -> Self
    where
        P: Stage,
    {
        self.stage = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Unstage`] touch point.
    pub fn with_unstage(mut self) -> Self
    where
        P: Unstage,
    {
        self.unstage = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Stats`] touch point.
    pub fn with_stats(mut self) -> Self
    where
        P: Stats,
    {
        self.stats = Some(self.inner.clone());
        self
    }

    /// Adds the [`Expand`] touch point; volumes grow online unless
    /// [`offline_expansion`](Self::offline_expansion) says otherwise.
    pub fn with_expand(mut self) -> Self
    where
        P: Expand,
    {
        self.expand = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Modify`] touch point.
    pub fn with_modify(mut self) -> Self
    where
        P: Modify,
    {
        self.modify = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Attach`] touch point.
    pub fn with_attach(mut self) -> Self
    where
        P: Attach,
    {
        self.attach = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// At most `max` volumes can be attached to, or staged on, one node
    /// (a cloud instance's disk slots): the node plugin reports it
    /// (`NodeGetInfo.max_volumes_per_node`; Kubernetes' scheduler then
    /// places no more pods' volumes there), and with [`Attach`] and
    /// records the controller refuses an attach past it
    /// (`RESOURCE_EXHAUSTED`). Set the same on the controller's and the
    /// nodes' provisioner (a flag both are given, say): the controller
    /// knows the limit only this way. 0 means no limit, as without it.
    /// pav-csi's `DriverBuilder::max_volumes_per_node`, when set, wins for
    /// `NodeGetInfo`; a node's limit that changes while it runs is
    /// [`Stage::max_volumes_now`](crate::Stage::max_volumes_now).
    pub fn max_volumes_per_node(mut self, max: u32) -> Self {
        self.max_volumes_per_node = (max > 0).then_some(max);
        self.rewrap_records();
        self
    }

    /// Adds the [`Health`] touch point.
    pub fn with_health(mut self) -> Self
    where
        P: Health,
    {
        self.health = Some(self.inner.clone());
        self
    }

    /// Adds the [`NodeExpand`] touch point.
    pub fn with_node_expand(mut self) -> Self
    where
        P: NodeExpand,
    {
        self.node_expand = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`Capacity`] touch point.
    pub fn with_capacity(mut self) -> Self
    where
        P: Capacity,
    {
        self.capacity = Some(self.inner.clone());
        self
    }

    /// Adds the [`List`] touch point.
    pub fn with_list(mut self) -> Self
    where
        P: List,
    {
        self.list = Some(self.inner.clone());
        self
    }

    /// Adds the [`Snapshot`] touch point.
    pub fn with_snapshot(mut self) -> Self
    where
        P: Snapshot,
    {
        self.snapshot = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// Adds the [`GroupSnapshot`] touch point, and the [`Snapshot`] one
    /// it extends (its members are restored and listed as snapshots).
    pub fn with_group_snapshot(mut self) -> Self
    where
        P: GroupSnapshot,
    {
        self.snapshot = Some(self.inner.clone());
        self.group_snapshot = Some(self.inner.clone());
        self.rewrap_records();
        self
    }

    /// [`Create`] makes volumes from other volumes
    /// ([`ContentSource::Volume`](crate::ContentSource::Volume)): pav-csi
    /// advertises `CLONE_VOLUME` and passes such requests on (after
    /// checking the source exists) instead of refusing them.
    pub fn clones_volumes(mut self) -> Self {
        self.clones = true;
        self
    }

    /// [`Expand`] grows only volumes that are not published: the plugin
    /// capability becomes `VolumeExpansion` `OFFLINE`, and Kubernetes
    /// resizes a claim only once no pod uses it.
    pub fn offline_expansion(mut self) -> Self {
        self.expansion = Expansion::Offline;
        self
    }

    /// Sets the volume modes this provisioner serves (checked before Validate).
    pub fn volume_modes(mut self, modes: impl IntoIterator<Item = VolumeMode>) -> Self {
        self.volume_modes = modes.into_iter().collect();
        self
    }

    /// Sets the access modes this provisioner serves (checked before Validate;
    /// default [`AccessMode::SINGLE_NODE`]). Declare a multi-node mode only
    /// when a volume really can be used from several nodes at once: a
    /// node-local volume would be mounted on each node separately.
    pub fn access_modes(mut self, modes: impl IntoIterator<Item = AccessMode>) -> Self {
        self.access_modes = modes.into_iter().collect();
        self
    }

    /// Stages per client pod instead of per node: pav-csi then advertises no
    /// `STAGE_UNSTAGE_VOLUME` node capability and runs [`Stage`] in
    /// `NodePublishVolume` (with the publish target path and, when the
    /// CSIDriver has `podInfoOnMount: true`, the client pod in
    /// [`StageRequest::pod`](crate::StageRequest::pod)) and [`Unstage`] in
    /// `NodeUnpublishVolume`, after unmounting the target path.
    ///
    /// ```
    /// # use pav_sdk::*;
    /// # struct Mine;
    /// # #[async_trait::async_trait]
    /// # impl Stage for Mine { async fn stage(&self, r: StageRequest) -> Result<Staged> { Ok(Staged::at(r.target_path)) } }
    /// let p = Provisioner::new(Mine).with_stage().stage_on_publish();
    /// assert!(p.stages_on_publish());
    /// ```
    pub fn stage_on_publish(mut self) -> Self {
        self.stage_on_publish = true;
        self
    }

    /// Keeps records of the volumes and snapshots created, and answers from
    /// them: a repeated Create, Delete of an unknown volume,
    /// [`Create::exists`], ListVolumes, ListSnapshots and, with a
    /// [budget](Records::budget), GetCapacity (see
    /// [`records`](crate::records) for each call). In any order with the
    /// `with_*` calls.
    ///
    /// ```
    /// # use pav_sdk::*;
    /// # struct Mine;
    /// # #[async_trait]
    /// # impl Create for Mine {
    /// #     async fn create(&self, r: CreateRequest) -> Result<Volume> { Ok(Volume::new(r.name, 1)) }
    /// # }
    /// let dir = std::env::temp_dir().join("records-doc");
    /// let p = provisioner!(Mine).keep_records(records::Records::in_dir(dir).budget(1 << 30));
    /// assert!(p.list().is_some() && p.capacity().is_some());
    /// ```
    pub fn keep_records(mut self, records: Records) -> Self {
        self.records = Some((
            records.clone(),
            Arc::new(RecordKeeper::new(&records, Wrapped::default())),
        ));
        self.rewrap_records();
        self
    }

    /// Points the record keeper at the touch points added so far.
    fn rewrap_records(&mut self) {
        if let Some((records, _)) = self.records.take() {
            let author = Wrapped {
                create: self.create.clone(),
                delete: self.delete.clone(),
                expand: self.expand.clone(),
                modify: self.modify.clone(),
                attach: self.attach.clone(),
                max_volumes_per_node: self.max_volumes_per_node,
                snapshot: self.snapshot.clone(),
                group_snapshot: self.group_snapshot.clone(),
                stage: self.stage.clone(),
                unstage: self.unstage.clone(),
                node_expand: self.node_expand.clone(),
            };
            let keeper = Arc::new(RecordKeeper::new(&records, author));
            self.records = Some((records, keeper));
        }
    }

    /// The records kept ([`keep_records`](Self::keep_records)), if any.
    pub fn records(&self) -> Option<&Records> {
        self.records.as_ref().map(|(records, _)| records)
    }

    /// Forgets the concrete type, as pav-csi stores it.
    pub fn erase(self) -> Provisioner {
        Provisioner {
            inner: Arc::new(()),
            validate: self.validate,
            create: self.create,
            delete: self.delete,
            stage: self.stage,
            unstage: self.unstage,
            stats: self.stats,
            expand: self.expand,
            modify: self.modify,
            attach: self.attach,
            max_volumes_per_node: self.max_volumes_per_node,
            health: self.health,
            node_expand: self.node_expand,
            expansion: self.expansion,
            capacity: self.capacity,
            list: self.list,
            snapshot: self.snapshot,
            group_snapshot: self.group_snapshot,
            clones: self.clones,
            volume_modes: self.volume_modes,
            access_modes: self.access_modes,
            stage_on_publish: self.stage_on_publish,
            ephemeral: self.ephemeral,
            records: self.records,
        }
    }
}

impl<P> Provisioner<P> {
    /// The Validate touch point, if implemented.
    pub fn validate(&self) -> Option<&dyn Validate> {
        self.validate.as_deref()
    }

    /// The Create touch point, if implemented.
    pub fn create(&self) -> Option<&dyn Create> {
        match &self.records {
            Some((_, keeper)) if self.create.is_some() => Some(keeper.as_ref()),
            _ => self.create.as_deref(),
        }
    }

    /// The Delete touch point, if implemented.
    pub fn delete(&self) -> Option<&dyn Delete> {
        match &self.records {
            // Records forget a deleted volume even without the author's Delete.
            Some((_, keeper)) if self.create.is_some() => Some(keeper.as_ref()),
            _ => self.delete.as_deref(),
        }
    }

    /// The Stage touch point, if implemented; with records, it gets the
    /// volume's ([`StageRequest::record`](crate::StageRequest::record)).
    pub fn stage(&self) -> Option<&dyn Stage> {
        match &self.records {
            Some((_, keeper)) if self.stage.is_some() => Some(keeper.as_ref()),
            _ => self.stage.as_deref(),
        }
    }

    /// The Unstage touch point, if implemented; with records, it gets the
    /// volume's.
    pub fn unstage(&self) -> Option<&dyn Unstage> {
        match &self.records {
            Some((_, keeper)) if self.unstage.is_some() => Some(keeper.as_ref()),
            _ => self.unstage.as_deref(),
        }
    }

    /// The Stats touch point, if implemented.
    pub fn stats(&self) -> Option<&dyn Stats> {
        self.stats.as_deref()
    }

    /// The Expand touch point, if implemented; with records, also for a
    /// provisioner that grows its volumes on the node only ([`NodeExpand`]
    /// without [`Expand`]): pav-sdk then records the new size itself.
    pub fn expand(&self) -> Option<&dyn Expand> {
        let grows = self.expand.is_some() || self.node_expand.is_some();
        match &self.records {
            Some((_, keeper)) if grows && self.create.is_some() => Some(keeper.as_ref()),
            _ => self.expand.as_deref(),
        }
    }

    /// The Modify touch point, if implemented.
    pub fn modify(&self) -> Option<&dyn Modify> {
        match &self.records {
            Some((_, keeper)) if self.modify.is_some() && self.create.is_some() => {
                Some(keeper.as_ref())
            }
            _ => self.modify.as_deref(),
        }
    }

    /// The Attach touch point, if implemented.
    pub fn attach(&self) -> Option<&dyn Attach> {
        match &self.records {
            Some((_, keeper)) if self.attach.is_some() && self.create.is_some() => {
                Some(keeper.as_ref())
            }
            _ => self.attach.as_deref(),
        }
    }

    /// The most volumes one node holds, if limited; see
    /// [`max_volumes_per_node`](Provisioner::max_volumes_per_node).
    pub fn volumes_per_node_limit(&self) -> Option<u32> {
        self.max_volumes_per_node
    }

    /// The Health touch point, if implemented.
    pub fn health(&self) -> Option<&dyn Health> {
        self.health.as_deref()
    }

    /// The NodeExpand touch point, if implemented; with records, it gets
    /// the volume's.
    pub fn node_expand(&self) -> Option<&dyn NodeExpand> {
        match &self.records {
            Some((_, keeper)) if self.node_expand.is_some() => Some(keeper.as_ref()),
            _ => self.node_expand.as_deref(),
        }
    }

    /// The Capacity touch point, if implemented.
    pub fn capacity(&self) -> Option<&dyn Capacity> {
        match &self.records {
            Some((_, keeper)) if self.capacity.is_none() && keeper.has_budget() => {
                Some(keeper.as_ref())
            }
            _ => self.capacity.as_deref(),
        }
    }

    /// The List touch point, if implemented.
    pub fn list(&self) -> Option<&dyn List> {
        match &self.records {
            Some((_, keeper)) if self.list.is_none() && self.create.is_some() => {
                Some(keeper.as_ref())
            }
            _ => self.list.as_deref(),
        }
    }

    /// The Snapshot touch point, if implemented.
    pub fn snapshot(&self) -> Option<&dyn Snapshot> {
        match &self.records {
            Some((_, keeper)) if self.snapshot.is_some() => Some(keeper.as_ref()),
            _ => self.snapshot.as_deref(),
        }
    }

    /// The GroupSnapshot touch point, if implemented.
    pub fn group_snapshot(&self) -> Option<&dyn GroupSnapshot> {
        match &self.records {
            Some((_, keeper)) if self.group_snapshot.is_some() => Some(keeper.as_ref()),
            _ => self.group_snapshot.as_deref(),
        }
    }

    /// True when Create clones volumes; see [`clones_volumes`](Provisioner::clones_volumes).
    pub fn clones(&self) -> bool {
        self.clones
    }

    /// Whether Expand grows volumes in use; meaningful with [`expand`](Self::expand).
    pub fn expansion(&self) -> Expansion {
        self.expansion
    }

    /// True when Stage and Unstage run per client pod, in
    /// `NodePublishVolume` and `NodeUnpublishVolume`; see
    /// [`stage_on_publish`](Provisioner::stage_on_publish).
    pub fn stages_on_publish(&self) -> bool {
        self.stage_on_publish
    }

    /// True when `mode` is served.
    pub fn supports_volume_mode(&self, mode: VolumeMode) -> bool {
        self.volume_modes.contains(&mode)
    }

    /// True when `mode` is served.
    pub fn supports_access_mode(&self, mode: AccessMode) -> bool {
        self.access_modes.contains(&mode)
    }

    /// True when both single-node writer modes are served, told apart:
    /// `SingleNodeSingleWriter` (Kubernetes `ReadWriteOncePod`) and
    /// `SingleNodeMultiWriter` (`ReadWriteOnce`). pav-csi then advertises
    /// the `SINGLE_NODE_MULTI_WRITER` controller and node capabilities,
    /// without which Kubernetes refuses `ReadWriteOncePod` claims.
    pub fn tells_single_node_writers_apart(&self) -> bool {
        self.supports_access_mode(AccessMode::SingleNodeSingleWriter)
            && self.supports_access_mode(AccessMode::SingleNodeMultiWriter)
    }
}

impl<P> fmt::Debug for Provisioner<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provisioner")
            .field("validate", &self.validate.is_some())
            .field("create", &self.create.is_some())
            .field("delete", &self.delete.is_some())
            .field("stage", &self.stage.is_some())
            .field("unstage", &self.unstage.is_some())
            .field("stats", &self.stats.is_some())
            .field("expand", &self.expand.is_some())
            .field("modify", &self.modify.is_some())
            .field("attach", &self.attach.is_some())
            .field("max_volumes_per_node", &self.max_volumes_per_node)
            .field("health", &self.health.is_some())
            .field("node_expand", &self.node_expand.is_some())
            .field("expansion", &self.expansion)
            .field("capacity", &self.capacity.is_some())
            .field("list", &self.list.is_some())
            .field("snapshot", &self.snapshot.is_some())
            .field("group_snapshot", &self.group_snapshot.is_some())
            .field("clones", &self.clones)
            .field("volume_modes", &self.volume_modes)
            .field("access_modes", &self.access_modes)
            .field("stage_on_publish", &self.stage_on_publish)
            .field("ephemeral", &self.ephemeral)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_a_provisioner_serves_filesystems_on_one_node() {
        let provisioner = Provisioner::new(());
        for mode in AccessMode::ALL {
            assert_eq!(
                provisioner.supports_access_mode(mode),
                !mode.is_multi_node(),
                "{mode:?}"
            );
        }
        assert!(provisioner.tells_single_node_writers_apart());
        assert!(provisioner.supports_volume_mode(VolumeMode::Filesystem));
        assert!(!provisioner.supports_volume_mode(VolumeMode::Block));
    }

    #[test]
    fn declared_modes_replace_the_defaults() {
        let provisioner = Provisioner::new(()).access_modes([
            AccessMode::SingleNodeWriter,
            AccessMode::MultiNodeMultiWriter,
        ]);
        assert!(provisioner.supports_access_mode(AccessMode::MultiNodeMultiWriter));
        assert!(!provisioner.supports_access_mode(AccessMode::SingleNodeReaderOnly));
        assert!(!provisioner.tells_single_node_writers_apart());
    }
}
