//! Faults put around a provisioner's methods, for tests of what slow,
//! failing or crashing storage does to a driver, without a hand-written
//! wrapper that delegates every method: a call that outlasts its client's
//! deadline, an error at a chosen call, a crash after the storage did its
//! work but before its answer was recorded or sent.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pav_sdk::group_snapshot::{
    DeleteGroupSnapshotRequest, GetGroupSnapshotRequest, GroupSnapshot, GroupSnapshotInfo,
    GroupSnapshotRequest,
};
use pav_sdk::{
    Attach, AttachRequest, Attached, AvailableCapacity, Capacity, CapacityRequest, Create,
    CreateRequest, Delete, DeleteRequest, DeleteSnapshotRequest, DetachRequest, Error, Expand,
    ExpandRequest, Expanded, Health, HealthRequest, List, ListedVolume, Modify, ModifyRequest,
    NodeCleanUpRequest, NodeExpand, NodeExpandRequest, Result, Snapshot, SnapshotInfo,
    SnapshotRequest, Stage, StageRequest, Staged, Stats, StatsRequest, Unstage, UnstageRequest,
    Validate, ValidateRequest, Volume, VolumeCondition, VolumeId, VolumeStats, async_trait,
};

/// A provisioner method a [`Fault`] can be put around: one per async
/// method of the touch points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Method {
    /// [`Validate::validate`].
    Validate,
    /// [`Create::create`].
    Create,
    /// [`Create::exists`].
    Exists,
    /// [`Delete::delete`].
    Delete,
    /// [`Stage::stage`].
    Stage,
    /// [`Unstage::unstage`].
    Unstage,
    /// [`Stats::stats`].
    Stats,
    /// [`Expand::expand`].
    Expand,
    /// [`NodeExpand::node_expand`].
    NodeExpand,
    /// [`Modify::modify`].
    Modify,
    /// [`Attach::attach`].
    Attach,
    /// [`Attach::detach`].
    Detach,
    /// [`Health::condition`].
    Health,
    /// [`Capacity::capacity`].
    Capacity,
    /// [`List::list`].
    List,
    /// [`Snapshot::create_snapshot`].
    CreateSnapshot,
    /// [`Snapshot::delete_snapshot`].
    DeleteSnapshot,
    /// [`Snapshot::list_snapshots`].
    ListSnapshots,
    /// [`GroupSnapshot::create_group_snapshot`].
    CreateGroupSnapshot,
    /// [`GroupSnapshot::delete_group_snapshot`].
    DeleteGroupSnapshot,
    /// [`GroupSnapshot::get_group_snapshot`].
    GetGroupSnapshot,
}

/// What happens around one call of a method.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The call starts this much later: slow storage, or a client's
    /// deadline passing while it runs.
    Delay(Duration),
    /// The call is not made; it fails with this error at once: storage
    /// that refuses or is unreachable.
    Fail(Error),
    /// The call is made, then its answer is lost and this error returned
    /// instead: a crash after the storage did the work, before pav-sdk
    /// recorded it or pav-csi answered it. The retry that follows must
    /// succeed over what the call left.
    FailAfter(Error),
}

/// The faults each method meets, and how many calls reached the
/// provisioner: shared by a test and the [`Faulty`] value it serves
/// (clones share them), so that the test can change them while the
/// driver runs, and after a restart that builds the provisioner anew.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// # struct Mine;
/// # #[pav_sdk::async_trait]
/// # impl pav_sdk::Create for Mine {
/// #     async fn create(&self, r: pav_sdk::CreateRequest) -> pav_sdk::Result<pav_sdk::Volume> { Ok(pav_sdk::Volume::new(r.name, 1)) }
/// # }
/// use pav_csi::testing::{Fault, Faults, Harness, Method};
/// use pav_sdk::Error;
///
/// let faults = Faults::new();
/// // The first Create does its work, then "crashes"; the second runs as usual.
/// faults.next(Method::Create, Fault::FailAfter(Error::Unavailable("crashed".into())));
/// let h = Harness::start(pav_sdk::provisioner!(faults.around(Mine))).await?;
/// // ... CreateVolume is UNAVAILABLE, then its repeat succeeds ...
/// assert_eq!(faults.calls(Method::Create), 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<Plan>>);

/// What [`Faults`] holds.
#[derive(Debug, Default)]
struct Plan {
    /// Faults for the next calls, in order.
    next: BTreeMap<Method, VecDeque<Fault>>,
    /// The fault of every call once `next` has none left.
    every: BTreeMap<Method, Fault>,
    /// Calls that reached the provisioner.
    calls: BTreeMap<Method, usize>,
}

impl Faults {
    /// No fault yet: every call runs as usual.
    pub fn new() -> Self {
        Self::default()
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next call of `method` meets `fault`, after the faults queued
    /// for it before; the calls after those meet [`every`](Self::every)'s
    /// fault, or none.
    pub fn next(&self, method: Method, fault: Fault) -> &Self {
        self.plan().next.entry(method).or_default().push_back(fault);
        self
    }

    /// Every call of `method` meets `fault` (once the faults of
    /// [`next`](Self::next) are met), until [`clear`](Self::clear).
    pub fn every(&self, method: Method, fault: Fault) -> &Self {
        self.plan().every.insert(method, fault);
        self
    }

    /// `method`'s calls meet no fault from now on.
    pub fn clear(&self, method: Method) -> &Self {
        let mut plan = self.plan();
        plan.next.remove(&method);
        plan.every.remove(&method);
        self
    }

    /// How many calls of `method` reached the provisioner: those a
    /// [`Fault::Fail`] stopped did not.
    pub fn calls(&self, method: Method) -> usize {
        self.plan().calls.get(&method).copied().unwrap_or(0)
    }

    /// `value` with these faults around its methods, to serve with
    /// [`provisioner!`](pav_sdk::provisioner!) as `value` would be.
    pub fn around<P>(&self, value: P) -> Faulty<P> {
        Faulty {
            inner: value,
            faults: self.clone(),
        }
    }

    /// The fault the call of `method` starting now meets, if any.
    fn take(&self, method: Method) -> Option<Fault> {
        let mut plan = self.plan();
        let queued = plan.next.get_mut(&method).and_then(VecDeque::pop_front);
        queued.or_else(|| plan.every.get(&method).cloned())
    }

    fn count(&self, method: Method) {
        *self.plan().calls.entry(method).or_default() += 1;
    }

    /// Runs `call`, a call of `method`, with the fault it meets.
    async fn run<T>(&self, method: Method, call: impl Future<Output = Result<T>>) -> Result<T> {
        match self.take(method) {
            None => {
                self.count(method);
                call.await
            }
            Some(Fault::Delay(delay)) => {
                tokio::time::sleep(delay).await;
                self.count(method);
                call.await
            }
            Some(Fault::Fail(error)) => Err(error),
            Some(Fault::FailAfter(error)) => {
                self.count(method);
                let _lost = call.await;
                Err(error)
            }
        }
    }
}

/// A provisioner value with [`Faults`] around its methods
/// ([`Faults::around`]). It implements each touch point its value
/// implements, by calling the value's method within the fault it meets,
/// so that `provisioner!(faults.around(value))` serves what
/// `provisioner!(value)` does, and records and pav-csi wrap it alike.
#[derive(Debug)]
pub struct Faulty<P> {
    inner: P,
    faults: Faults,
}

impl<P> Faulty<P> {
    /// The value inside.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

/// The touch points of one async method: each runs the value's method
/// within its fault.
macro_rules! one_method {
    ($($touch_point:ident::$method:ident($request:ty) -> $answer:ty, $name:ident;)*) => {$(
        #[async_trait]
        impl<P: $touch_point> $touch_point for Faulty<P> {
            async fn $method(&self, req: $request) -> Result<$answer> {
                self.faults.run(Method::$name, self.inner.$method(req)).await
            }
        }
    )*};
}

one_method! {
    Validate::validate(ValidateRequest) -> (), Validate;
    Delete::delete(DeleteRequest) -> (), Delete;
    Unstage::unstage(UnstageRequest) -> (), Unstage;
    Stats::stats(StatsRequest) -> VolumeStats, Stats;
    Expand::expand(ExpandRequest) -> Expanded, Expand;
    NodeExpand::node_expand(NodeExpandRequest) -> u64, NodeExpand;
    Modify::modify(ModifyRequest) -> (), Modify;
    Health::condition(HealthRequest) -> VolumeCondition, Health;
    Capacity::capacity(CapacityRequest) -> AvailableCapacity, Capacity;
}

/// Stage within its fault; the node clean-up passed on as it is.
#[async_trait]
impl<P: Stage> Stage for Faulty<P> {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        self.faults.run(Method::Stage, self.inner.stage(req)).await
    }

    async fn clean_up(&self, req: NodeCleanUpRequest) -> Result<()> {
        self.inner.clean_up(req).await
    }
}

#[async_trait]
impl<P: Create> Create for Faulty<P> {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        self.faults
            .run(Method::Create, self.inner.create(req))
            .await
    }

    async fn exists(&self, volume: &VolumeId) -> Result<bool> {
        self.faults
            .run(Method::Exists, self.inner.exists(volume))
            .await
    }
}

#[async_trait]
impl<P: Attach> Attach for Faulty<P> {
    async fn attach(&self, req: AttachRequest) -> Result<Attached> {
        self.faults
            .run(Method::Attach, self.inner.attach(req))
            .await
    }

    async fn detach(&self, req: DetachRequest) -> Result<()> {
        self.faults
            .run(Method::Detach, self.inner.detach(req))
            .await
    }

    fn attaches_read_only(&self) -> bool {
        self.inner.attaches_read_only()
    }
}

#[async_trait]
impl<P: List> List for Faulty<P> {
    async fn list(&self) -> Result<Vec<ListedVolume>> {
        self.faults.run(Method::List, self.inner.list()).await
    }

    fn reports_condition(&self) -> bool {
        self.inner.reports_condition()
    }
}

#[async_trait]
impl<P: Snapshot> Snapshot for Faulty<P> {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        let call = self.inner.create_snapshot(req);
        self.faults.run(Method::CreateSnapshot, call).await
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        let call = self.inner.delete_snapshot(req);
        self.faults.run(Method::DeleteSnapshot, call).await
    }

    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let call = self.inner.list_snapshots();
        self.faults.run(Method::ListSnapshots, call).await
    }
}

#[async_trait]
impl<P: GroupSnapshot> GroupSnapshot for Faulty<P> {
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let call = self.inner.create_group_snapshot(req);
        self.faults.run(Method::CreateGroupSnapshot, call).await
    }

    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()> {
        let call = self.inner.delete_group_snapshot(req);
        self.faults.run(Method::DeleteGroupSnapshot, call).await
    }

    async fn get_group_snapshot(&self, req: GetGroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let call = self.inner.get_group_snapshot(req);
        self.faults.run(Method::GetGroupSnapshot, call).await
    }
}
