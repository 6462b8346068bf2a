//! A test provisioner and a driver served on a temporary Unix socket.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pav_csi::csi;
use pav_sdk::{
    AccessMode, AvailableCapacity, Capacity, CapacityRequest, Create, CreateRequest, Delete,
    DeleteRequest, Error, Expand, ExpandRequest, Expanded, Health, HealthProblem, HealthRequest,
    List, ListedVolume, Modify, ModifyRequest, NodeExpand, NodeExpandRequest, Parameters,
    Provisioner, Result, Stage, StageRequest, Staged, Stats, StatsRequest, Unstage, UnstageRequest,
    Usage, Validate, ValidateRequest, Volume, VolumeCondition, VolumeId, VolumeMode, VolumeStats,
    async_trait,
};
use pav_sdk::{DeleteSnapshotRequest, Snapshot, SnapshotInfo, SnapshotRequest};
use tonic::transport::Channel;

/// Volumes kept in memory; staging hands out directories and files under
/// `root`. Every call of a trait method is recorded in `calls`.
#[derive(Debug)]
pub struct Memory {
    pub root: PathBuf,
    pub volumes: Mutex<HashMap<String, Volume>>,
    pub creates: AtomicUsize,
    pub unstages: AtomicUsize,
    pub calls: Mutex<Vec<&'static str>>,
    /// Snapshots by name.
    pub snapshots: Mutex<HashMap<String, SnapshotInfo>>,
    /// Handles whose Stage fails (`NotFound`, a final answer) while
    /// listed here.
    pub failing_stages: Mutex<Vec<String>>,
    /// Handles whose Unstage fails (`Internal`) while listed here.
    pub failing_unstages: Mutex<Vec<String>>,
    /// For each Unstage, whether something was still mounted at its path
    /// (pav-sdk's docs say pav-csi has unmounted it).
    pub mounted_at_unstage: Mutex<Vec<bool>>,
    /// Each volume's mutable parameters by handle: as created, then as
    /// modified.
    pub attributes: Mutex<HashMap<String, Parameters>>,
    /// The claim of each Modify, in order.
    pub modify_claims: Mutex<Vec<Option<pav_sdk::Claim>>>,
    /// The staging path each Stats was given, in order.
    pub stats_staging_paths: Mutex<Vec<Option<PathBuf>>>,
    /// Each Stage's request, in order.
    pub stage_requests: Mutex<Vec<StageRequest>>,
}

impl Memory {
    /// An empty store staging under `root`.
    pub fn new(root: PathBuf) -> Self {
        Memory {
            root,
            volumes: Mutex::default(),
            creates: AtomicUsize::new(0),
            unstages: AtomicUsize::new(0),
            calls: Mutex::default(),
            snapshots: Mutex::default(),
            failing_stages: Mutex::default(),
            failing_unstages: Mutex::default(),
            mounted_at_unstage: Mutex::default(),
            attributes: Mutex::default(),
            modify_claims: Mutex::default(),
            stats_staging_paths: Mutex::default(),
            stage_requests: Mutex::default(),
        }
    }

    fn record(&self, method: &'static str) {
        self.calls.lock().unwrap().push(method);
    }

    /// The trait methods called so far, in order.
    pub fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().unwrap().clone()
    }

    /// How many times `method` was called so far.
    pub fn count(&self, method: &str) -> usize {
        self.calls().iter().filter(|m| **m == method).count()
    }

    /// Waits (up to 5 s) until `method` has been called `times` times.
    pub async fn wait_for_calls(&self, method: &str, times: usize) {
        for _ in 0..500 {
            if self.count(method) >= times {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "{method} was called {} times, not {times}",
            self.count(method)
        );
    }
}

/// Maps the `error` parameter to the error a test wants back.
fn requested_error(parameters: &pav_sdk::Parameters) -> Option<Error> {
    let message = || "requested by test".to_owned();
    Some(match parameters.get("error")?.as_str() {
        "invalid" => Error::InvalidArgument(message()),
        "not-found" => Error::NotFound(message()),
        "exists" => Error::AlreadyExists(message()),
        "range" => Error::OutOfRange(message()),
        "exhausted" => Error::ResourceExhausted(message()),
        "precondition" => Error::FailedPrecondition(message()),
        "aborted" => Error::Aborted(message()),
        "unavailable" => Error::Unavailable(message()),
        _ => Error::Internal(message()),
    })
}

#[async_trait]
impl Validate for Memory {
    async fn validate(&self, req: ValidateRequest) -> Result<()> {
        self.record("validate");
        if let Some(handle) = &req.handle
            && !self
                .volumes
                .lock()
                .unwrap()
                .values()
                .any(|v| &v.handle == handle)
        {
            return Err(Error::NotFound(handle.to_string()));
        }
        if req.parameters.contains_key("reject") {
            return Err(Error::InvalidArgument("rejected by test".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl Create for Memory {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        self.record("create");
        if let Some(err) = requested_error(&req.parameters) {
            return Err(err);
        }
        // Slow enough for concurrent requests to overlap; the `slow`
        // parameter makes it outlast a client's short deadline.
        let pause = match req.parameters.contains_key("slow") {
            true => 500,
            false => 50,
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let mut volumes = self.volumes.lock().unwrap();
        if let Some(volume) = volumes.get(&req.name) {
            return Ok(volume.clone());
        }
        self.creates.fetch_add(1, Ordering::SeqCst);
        // The `size` parameter makes the test's choice of size, right or wrong.
        let size = match req.parameters.get("size") {
            Some(size) => size.parse().expect("a number of bytes"),
            None => req.capacity.choose(1 << 20, 1 << 20)?,
        };
        // The `handle` parameter makes the test's choice of handle, valid or not.
        let handle = (req.parameters.get("handle").cloned())
            .unwrap_or_else(|| format!("vol-{}", req.name.len() + volumes.len()));
        let mut volume = Volume::new(handle, size).with_context("origin", "memory");
        // The `zone` parameter makes the test's choice of where it is.
        if let Some(zone) = req.parameters.get("zone") {
            volume = volume.accessible_from([("zone".to_owned(), zone.clone())].into());
        }
        (self.attributes.lock().unwrap()).insert(volume.handle.clone(), req.mutable_parameters);
        volumes.insert(req.name, volume.clone());
        Ok(volume)
    }

    async fn exists(&self, id: &VolumeId) -> Result<bool> {
        self.record("exists");
        Ok(self
            .volumes
            .lock()
            .unwrap()
            .values()
            .any(|v| v.handle == *id))
    }
}

#[async_trait]
impl Delete for Memory {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        self.record("delete");
        self.volumes
            .lock()
            .unwrap()
            .retain(|_, v| v.handle != req.handle);
        Ok(())
    }
}

#[async_trait]
impl Stage for Memory {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        self.record("stage");
        self.stage_requests.lock().unwrap().push(req.clone());
        // A handle starting with `slow` takes a while, and says when done.
        if req.handle.starts_with("slow") {
            tokio::time::sleep(Duration::from_millis(500)).await;
            self.record("stage finished");
        }
        let failing = (self.failing_stages.lock().unwrap()).contains(&req.handle.to_string());
        if req.handle == "missing" || failing {
            return Err(Error::NotFound("no such volume".into()));
        }
        // `busy` is still being staged elsewhere: a retry finishes it.
        if req.handle == "busy" {
            return Err(Error::Unavailable("still staging".into()));
        }
        // A handle ending in `in-place` is mounted at the staging path by
        // the provisioner itself (nothing for pav-csi to bind, no root
        // needed); `vanishing` answers a path that does not exist.
        if req.handle.ends_with("in-place") {
            return Ok(Staged::at(req.target_path));
        }
        if req.handle == "vanishing" {
            return Ok(Staged::at(self.root.join("vanished")));
        }
        let path = self.root.join("backing").join(req.handle.path_component()?);
        match req.volume_mode {
            VolumeMode::Filesystem => std::fs::create_dir_all(&path)?,
            VolumeMode::Block => {
                std::fs::create_dir_all(path.parent().unwrap())?;
                // A regular file stands in for a device: bind mounts accept both.
                std::fs::File::create(&path)?.set_len(4096)?;
            }
        }
        Ok(Staged::at(path))
    }
}

#[async_trait]
impl Unstage for Memory {
    async fn unstage(&self, req: UnstageRequest) -> Result<()> {
        self.record("unstage");
        self.unstages.fetch_add(1, Ordering::SeqCst);
        let mounted = pav_csi::mount::is_mounted(&req.target_path)
            .await
            .unwrap_or(true);
        self.mounted_at_unstage.lock().unwrap().push(mounted);
        if (self.failing_unstages.lock().unwrap()).contains(&req.handle.to_string()) {
            return Err(Error::Internal("unstage failure requested by test".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl Stats for Memory {
    /// 42 bytes, of which 40 are used; inodes as measured; the volume
    /// `sick` is abnormal.
    async fn stats(&self, req: StatsRequest) -> Result<VolumeStats> {
        self.record("stats");
        (self.stats_staging_paths.lock().unwrap()).push(req.staging_path.clone());
        let mut stats = req.measured.unwrap_or_default();
        stats.bytes = Some(Usage {
            total: 42,
            available: 2,
            used: 40,
        });
        if req.handle == "sick" {
            stats.condition = Some(VolumeCondition::abnormal("test says so"));
        }
        Ok(stats)
    }
}

#[async_trait]
impl Expand for Memory {
    /// Grows the stored volume to the request rounded up to whole MiB,
    /// never shrinks it; asks for node expansion.
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded> {
        self.record("expand");
        let mut volumes = self.volumes.lock().unwrap();
        let volume = (volumes.values_mut().find(|v| v.handle == req.handle))
            .ok_or_else(|| Error::NotFound(req.handle.to_string()))?;
        let wanted = req.capacity.choose(volume.capacity_bytes, 1 << 20)?;
        volume.capacity_bytes = volume.capacity_bytes.max(wanted);
        Ok(Expanded::new(volume.capacity_bytes).with_node_expansion())
    }
}

#[async_trait]
impl Modify for Memory {
    /// Sets the volume's attributes (the keys named); the `error`
    /// parameter makes the test's choice of error, `slow` takes 500 ms.
    async fn modify(&self, req: ModifyRequest) -> Result<()> {
        self.record("modify");
        self.modify_claims.lock().unwrap().push(req.claim.clone());
        if let Some(err) = requested_error(&req.mutable_parameters) {
            return Err(err);
        }
        if req.mutable_parameters.contains_key("slow") {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let mut attributes = self.attributes.lock().unwrap();
        let volume = (attributes.get_mut(req.handle.as_str()))
            .ok_or_else(|| Error::NotFound(req.handle.to_string()))?;
        volume.extend(req.mutable_parameters);
        Ok(())
    }
}

#[async_trait]
impl NodeExpand for Memory {
    /// Answers the stored size of the volume, 0 for an unknown one.
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        self.record("node_expand");
        let volumes = self.volumes.lock().unwrap();
        let volume = volumes.values().find(|v| v.handle == req.handle);
        Ok(volume.map_or(0, |v| v.capacity_bytes))
    }
}

#[async_trait]
impl Capacity for Memory {
    /// 100 MiB less what the volumes hold, in zone `a` only; volumes of at
    /// most 64 MiB.
    async fn capacity(&self, req: CapacityRequest) -> Result<AvailableCapacity> {
        self.record("capacity");
        if req
            .topology
            .is_some_and(|t| t.get("zone").map(String::as_str) != Some("a"))
        {
            return Ok(AvailableCapacity::new(0));
        }
        let used: u64 = (self.volumes.lock().unwrap().values())
            .map(|v| v.capacity_bytes)
            .sum();
        Ok(AvailableCapacity::new((100 << 20) - used).with_maximum_volume_size(64 << 20))
    }
}

#[async_trait]
impl List for Memory {
    /// The stored volumes; those whose handle starts with `sick` are abnormal.
    async fn list(&self) -> Result<Vec<ListedVolume>> {
        self.record("list");
        let volumes = self.volumes.lock().unwrap();
        Ok(volumes
            .values()
            .map(|v| {
                let listed = ListedVolume::new(v.clone());
                // The listing knows nothing of `quiet` volumes: Health does.
                if v.handle.starts_with("quiet") {
                    return listed;
                }
                let condition = match v.handle.starts_with("sick") {
                    true => VolumeCondition::abnormal("test says so"),
                    false => VolumeCondition::healthy(),
                };
                listed.with_condition(condition)
            })
            .collect())
    }

    fn reports_condition(&self) -> bool {
        true
    }
}

#[async_trait]
impl Health for Memory {
    /// A volume whose handle contains `broken` is abnormal (as
    /// `VolumeCondition::abnormal` says: inaccessible), with a message
    /// naming it and, on the node, the path it was asked at; `degraded` is
    /// so too, `Degraded` (`SlowDisk`), and `lost` `DataLoss`
    /// (`DiskFailed`). The controller's question about an unknown volume
    /// is NOT_FOUND (on the node a published volume is there, whatever the
    /// store says).
    async fn condition(&self, req: HealthRequest) -> Result<VolumeCondition> {
        self.record("condition");
        let known = (self.volumes.lock().unwrap().values()).any(|v| v.handle == req.handle);
        if !known && !req.on_node() {
            return Err(Error::NotFound(format!("no volume {}", req.handle)));
        }
        let handle = req.handle.as_str();
        if !["broken", "degraded", "lost"]
            .iter()
            .any(|w| handle.contains(w))
        {
            return Ok(VolumeCondition::healthy());
        }
        let abnormal = VolumeCondition::abnormal(match &req.volume_path {
            Some(path) => format!("volume {handle} is broken at {}", path.display()),
            None => format!("volume {handle} is broken"),
        });
        Ok(match handle {
            h if h.contains("degraded") => abnormal.because(HealthProblem::Degraded, "SlowDisk"),
            h if h.contains("lost") => abnormal.because(HealthProblem::DataLoss, "DiskFailed"),
            _ => abnormal,
        })
    }
}

#[async_trait]
impl Snapshot for Memory {
    /// Snapshot `snap-<name>` of the volume, its size; a name taken for
    /// another volume is `AlreadyExists`.
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        self.record("create_snapshot");
        let size = (self.volumes.lock().unwrap().values())
            .find(|v| v.handle == req.source)
            .map(|v| v.capacity_bytes)
            .ok_or_else(|| Error::NotFound(req.source.to_string()))?;
        let mut snapshots = self.snapshots.lock().unwrap();
        if let Some(taken) = snapshots.get(&req.name) {
            return match taken.source == req.source.as_str() {
                true => Ok(taken.clone()),
                false => Err(Error::AlreadyExists(req.name)),
            };
        }
        let created = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let taken = SnapshotInfo::new(
            format!("snap-{}", req.name),
            req.source.as_str(),
            size,
            created,
        );
        snapshots.insert(req.name, taken.clone());
        Ok(taken)
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        self.record("delete_snapshot");
        self.snapshots
            .lock()
            .unwrap()
            .retain(|_, s| s.handle != req.handle);
        Ok(())
    }

    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.record("list_snapshots");
        Ok(self.snapshots.lock().unwrap().values().cloned().collect())
    }
}

/// A running driver and clients for it: pav-csi's own test harness
/// (`pav_csi::testing::Harness`, whose paths it derefs to), serving
/// [`Memory`] with the kubelet directory as its root. The clients are
/// fields of their own, so that a test borrows one while it reads paths.
pub struct Harness {
    inner: pav_csi::testing::Harness,
    pub identity: csi::identity_client::IdentityClient<Channel>,
    pub controller: csi::controller_client::ControllerClient<Channel>,
    pub node: csi::node_client::NodeClient<Channel>,
    /// The driver's socket.
    pub socket: PathBuf,
    /// The provisioner's value, to look at what it was asked.
    pub provisioner: std::sync::Arc<Memory>,
}

impl std::ops::Deref for Harness {
    type Target = pav_csi::testing::Harness;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

/// How a [`Harness`] driver is configured.
#[derive(Debug, Clone)]
pub struct Options {
    /// Validate, Create and Delete (else Stage and Unstage only).
    pub controller_ops: bool,
    /// With `controller_ops`: Validate too (else only Create and Delete).
    pub validate: bool,
    /// Stats (else pav-csi measures alone).
    pub stats: bool,
    /// Stage per client pod in NodePublishVolume.
    pub stage_on_publish: bool,
    /// Report node topology (and so advertise accessibility constraints).
    pub topology: bool,
    /// Serve Block volumes as well as Filesystem ones.
    pub block: bool,
    /// The access modes served (default: all).
    pub access_modes: Option<Vec<AccessMode>>,
    /// Expand and NodeExpand (online unless `offline_expansion`).
    pub expand: bool,
    /// With `expand`: only offline.
    pub offline_expansion: bool,
    /// Capacity.
    pub capacity: bool,
    /// List.
    pub list: bool,
    /// Snapshot and clones.
    pub snapshots: bool,
    /// Modify.
    pub modify: bool,
    /// Health.
    pub health: bool,
    /// CSI ephemeral inline volumes.
    pub ephemeral: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controller_ops: true,
            validate: true,
            stats: false,
            stage_on_publish: false,
            topology: true,
            block: true,
            access_modes: None,
            expand: false,
            offline_expansion: false,
            capacity: false,
            list: false,
            snapshots: false,
            modify: false,
            health: false,
            ephemeral: false,
        }
    }
}

impl Harness {
    /// Serves controller and node on one socket, with every touch point,
    /// both volume modes and node topology; the kubelet directory is the
    /// provisioner's root too.
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    /// Serves controller and node on one socket as `options` say.
    pub async fn start_with(options: Options) -> Self {
        let mut builder = pav_csi::testing::Harness::builder()
            .unwrap()
            .driver_name("test.pav.example.com")
            .version("9.9.9")
            .node_id("node-a");
        if options.topology {
            builder = builder.node_topology([("zone".to_owned(), "a".to_owned())].into());
        }
        let root = builder.kubelet_dir().to_owned();
        let mut provisioner = Provisioner::new(Memory::new(root));
        if options.controller_ops {
            provisioner = provisioner.with_create().with_delete();
        }
        if options.controller_ops && options.validate {
            provisioner = provisioner.with_validate();
        }
        provisioner = provisioner.with_stage().with_unstage();
        if options.stats {
            provisioner = provisioner.with_stats();
        }
        if options.stage_on_publish {
            provisioner = provisioner.stage_on_publish();
        }
        if options.block {
            provisioner = provisioner.volume_modes([VolumeMode::Filesystem, VolumeMode::Block]);
        }
        if options.expand {
            provisioner = provisioner.with_expand().with_node_expand();
        }
        if options.snapshots {
            provisioner = provisioner.with_snapshot().clones_volumes();
        }
        if options.list {
            provisioner = provisioner.with_list();
        }
        if options.modify {
            provisioner = provisioner.with_modify();
        }
        if options.health {
            provisioner = provisioner.with_health();
        }
        if options.ephemeral {
            provisioner = provisioner.ephemeral();
        }
        if options.capacity {
            provisioner = provisioner.with_capacity();
        }
        if options.offline_expansion {
            provisioner = provisioner.offline_expansion();
        }
        if let Some(modes) = options.access_modes {
            provisioner = provisioner.access_modes(modes);
        }
        let inner = provisioner.inner().clone();
        let harness = builder.start(provisioner).await.unwrap();
        Harness {
            identity: harness.identity.clone(),
            controller: harness.controller.clone(),
            node: harness.node.clone(),
            socket: harness.socket().to_owned(),
            provisioner: inner,
            inner: harness,
        }
    }

    /// Stops the driver and waits for it to finish.
    pub async fn stop(self) {
        let socket = self.socket.clone();
        self.inner.shutdown().await.unwrap();
        assert!(!socket.exists(), "socket removed on shutdown");
    }

    /// Stops the driver and waits until it has stopped; the returned
    /// harness keeps its directory (with the socket) until dropped.
    pub async fn stop_server(mut self) -> pav_csi::testing::Harness {
        self.inner.stop_driver().await.unwrap();
        self.inner
    }

    /// Restarts the driver on the same socket and directories (the
    /// provisioner's storage, here its memory, stays), as after a crash of
    /// its process, and connects the clients again.
    pub async fn restart(&mut self) {
        self.inner.restart().await.unwrap();
        self.identity = self.inner.identity.clone();
        self.controller = self.inner.controller.clone();
        self.node = self.inner.node.clone();
    }

    /// A path in the kubelet directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.inner.kubelet_path(name)
    }
}

/// A single-node-writer capability of the given mode.
pub fn capability(mode: VolumeMode) -> csi::VolumeCapability {
    pav_csi::testing::capability(mode, AccessMode::SingleNodeWriter)
}

/// A CreateVolume request for `name` with 1 MiB required.
pub fn create_request(name: &str) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 20,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![capability(VolumeMode::Filesystem)],
        ..Default::default()
    }
}

/// The controller RPC capabilities the driver advertises.
pub async fn controller_rpcs(h: &mut Harness) -> Vec<i32> {
    use csi::controller_service_capability::Type;
    let caps = h
        .controller
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    caps.iter()
        .filter_map(|c| c.r#type.as_ref().map(|Type::Rpc(r)| r.r#type))
        .collect()
}

/// NodeGetVolumeHealth of `volume_id` published at `path` ("": not
/// published): the health statuses answered for it, as (status, reason,
/// message); asserts the answer names the volume asked about.
pub async fn volume_health(
    h: &mut Harness,
    volume_id: &str,
    path: &str,
) -> std::result::Result<Vec<(csi::VolumeHealthErrorType, String, String)>, tonic::Status> {
    let request = csi::NodeGetVolumeHealthRequest {
        volume_id: volume_id.into(),
        volume_publish_path: path.into(),
        staging_target_path: String::new(),
    };
    let answer = h.node.node_get_volume_health(request).await?.into_inner();
    let health = answer.volume_health.expect("volume_health is required");
    assert_eq!(health.volume_id, volume_id);
    Ok(health
        .health_statuses
        .into_iter()
        .map(|entry| (entry.status(), entry.reason, entry.message))
        .collect())
}
