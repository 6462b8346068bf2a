//! Records kept by pav-sdk: what the author no longer writes.

mod common;

use pav_sdk::records::{DirStore, RecordStore, Recorded, Records, SnapshotRecord, VolumeRecord};
use pav_sdk::*;

use common::Calls;

const MIB: u64 = 1 << 20;

/// Storage that remembers nothing: every call is counted, and creating a
/// name twice would make a second volume.
#[derive(Default)]
struct Forgetful {
    calls: Calls,
}

#[async_trait]
impl Create for Forgetful {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        self.calls.record(format!("create {}", req.name));
        let size = req.capacity.choose(MIB, MIB)?;
        Ok(Volume::new(format!("vol-{}", req.name), size))
    }
}

#[async_trait]
impl Delete for Forgetful {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        self.calls.record(format!("delete {}", req.handle.as_str()));
        Ok(())
    }
}

#[async_trait]
impl Expand for Forgetful {
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded> {
        self.calls.record(format!("expand {}", req.handle.as_str()));
        Ok(Expanded::new(req.capacity.min_bytes.unwrap_or(0)))
    }
}

#[async_trait]
impl Modify for Forgetful {
    async fn modify(&self, req: ModifyRequest) -> Result<()> {
        self.calls.record(format!("modify {}", req.handle.as_str()));
        if req.mutable_parameters.contains_key("refused") {
            return Err(Error::InvalidArgument("refused by test".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl Snapshot for Forgetful {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        self.calls.record(format!("snapshot {}", req.name));
        Ok(SnapshotInfo::new(
            format!("snap-{}", req.name),
            req.source.as_str(),
            MIB,
            std::time::SystemTime::UNIX_EPOCH,
        ))
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        self.calls
            .record(format!("delete snapshot {}", req.handle.as_str()));
        Ok(())
    }
}

fn request(name: &str, bytes: u64) -> CreateRequest {
    let mut req = build::create(name, VolumeMode::Filesystem);
    req.capacity.min_bytes = Some(bytes);
    req
}

fn author(provisioner: &Provisioner<Forgetful>) -> &Forgetful {
    provisioner.inner()
}

#[tokio::test]
async fn a_repeated_create_is_answered_from_the_records_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let keep = || Records::in_dir(dir.path());
    let p = provisioner!(Forgetful::default()).keep_records(keep());
    let create = p.create().unwrap();
    let volume = create.create(request("pvc-1", MIB)).await.unwrap();
    assert_eq!(create.create(request("pvc-1", MIB)).await.unwrap(), volume);
    let other = create.create(request("pvc-1", 4 * MIB)).await.unwrap_err();
    assert!(matches!(other, Error::AlreadyExists(_)), "{other:?}");
    let mut params = request("pvc-1", MIB);
    params.parameters.insert("tier".into(), "fast".into());
    let other = create.create(params).await.unwrap_err();
    assert!(matches!(other, Error::AlreadyExists(_)), "{other:?}");
    assert_eq!(author(&p).calls.all(), ["create pvc-1"]);

    let restarted = provisioner!(Forgetful::default()).keep_records(keep());
    let again = restarted.create().unwrap();
    assert_eq!(again.create(request("pvc-1", MIB)).await.unwrap(), volume);
    assert!(again.exists(&VolumeId::new("vol-pvc-1")).await.unwrap());
    assert!(!again.exists(&VolumeId::new("vol-pvc-2")).await.unwrap());
    let listed = restarted.list().unwrap().list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].volume, volume);
    assert!(
        author(&restarted).calls.all().is_empty(),
        "the author was asked"
    );
}

#[tokio::test]
async fn deleting_an_unknown_volume_asks_nobody_and_a_deleted_one_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let p = provisioner!(Forgetful::default()).keep_records(Records::in_dir(dir.path()));
    let delete = p.delete().unwrap();
    delete.delete(build::delete("vol-never")).await.unwrap();
    assert!(author(&p).calls.all().is_empty());
    p.create()
        .unwrap()
        .create(request("pvc-1", MIB))
        .await
        .unwrap();
    delete.delete(build::delete("vol-pvc-1")).await.unwrap();
    delete.delete(build::delete("vol-pvc-1")).await.unwrap();
    assert_eq!(author(&p).calls.all(), ["create pvc-1", "delete vol-pvc-1"]);
    assert!(p.list().unwrap().list().await.unwrap().is_empty());
    assert_eq!(
        DirStore::new(dir.path()).load().await.unwrap(),
        Recorded::default()
    );
}

#[tokio::test]
async fn the_budget_bounds_creation_and_growth_and_is_the_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let records = Records::in_dir(dir.path()).budget(4 * MIB);
    let p = provisioner!(Forgetful::default()).keep_records(records);
    let capacity = || async {
        (p.capacity().unwrap())
            .capacity(build::capacity())
            .await
            .unwrap()
            .available_bytes
    };
    assert_eq!(capacity().await, 4 * MIB);
    p.create()
        .unwrap()
        .create(request("pvc-1", 3 * MIB))
        .await
        .unwrap();
    assert_eq!(capacity().await, MIB);
    let full = p
        .create()
        .unwrap()
        .create(request("pvc-2", 2 * MIB))
        .await
        .unwrap_err();
    assert!(matches!(full, Error::ResourceExhausted(_)), "{full:?}");
    let mut grow = build::expand("vol-pvc-1", 4 * MIB);
    let grown = p.expand().unwrap().expand(grow.clone()).await.unwrap();
    assert_eq!(grown.capacity_bytes, 4 * MIB);
    assert_eq!(capacity().await, 0);
    let mut stale = build::expand("vol-pvc-1", 3 * MIB);
    stale.capacity.max_bytes = None;
    let kept = p.expand().unwrap().expand(stale).await.unwrap();
    assert_eq!(
        kept.capacity_bytes,
        4 * MIB,
        "a stale retry shrank the volume"
    );
    grow.capacity.min_bytes = Some(5 * MIB);
    let full = p.expand().unwrap().expand(grow).await.unwrap_err();
    assert!(matches!(full, Error::ResourceExhausted(_)), "{full:?}");
    assert_eq!(
        author(&p).calls.all(),
        ["create pvc-1", "expand vol-pvc-1"],
        "refused calls reached the author"
    );
}

/// A store whose writes fail, as a full disk's.
struct Full;

#[async_trait]
impl RecordStore for Full {
    async fn load(&self) -> Result<Recorded> {
        Ok(Recorded::default())
    }
    async fn put_volume(&self, _: &VolumeRecord) -> Result<()> {
        Err(Error::Unavailable("no space left on device".into()))
    }
    async fn remove_volume(&self, _: &str) -> Result<()> {
        Ok(())
    }
    async fn put_snapshot(&self, _: &SnapshotRecord) -> Result<()> {
        Err(Error::Unavailable("no space left on device".into()))
    }
    async fn remove_snapshot(&self, _: &str) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_volume_that_cannot_be_recorded_is_deleted_not_leaked() {
    let p = provisioner!(Forgetful::default()).keep_records(Records::in_store(Full));
    let error = p
        .create()
        .unwrap()
        .create(request("pvc-1", MIB))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Unavailable(m) if m.contains("no space left") && m.contains("it was deleted")),
        "{error:?}"
    );
    assert_eq!(author(&p).calls.all(), ["create pvc-1", "delete vol-pvc-1"]);
}

#[tokio::test]
async fn snapshots_are_recorded_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = provisioner!(Forgetful::default()).keep_records(Records::in_dir(dir.path()));
    let snapshots = p.snapshot().unwrap();
    let take = |source: &str| build::snapshot("snapshot-1", source);
    let taken = snapshots.create_snapshot(take("vol-a")).await.unwrap();
    assert_eq!(
        snapshots.create_snapshot(take("vol-a")).await.unwrap(),
        taken
    );
    let other = snapshots.create_snapshot(take("vol-b")).await.unwrap_err();
    assert!(matches!(other, Error::AlreadyExists(_)), "{other:?}");
    assert_eq!(
        snapshots.list_snapshots().await.unwrap(),
        std::slice::from_ref(&taken)
    );
    let delete = |handle: &str| build::delete_snapshot(handle);
    snapshots
        .delete_snapshot(delete("snap-never"))
        .await
        .unwrap();
    snapshots
        .delete_snapshot(delete(&taken.handle))
        .await
        .unwrap();
    assert!(snapshots.list_snapshots().await.unwrap().is_empty());
    assert_eq!(
        author(&p).calls.all(),
        ["snapshot snapshot-1", "delete snapshot snap-snapshot-1"]
    );
}

#[tokio::test]
async fn records_wrap_touch_points_added_after_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = Provisioner::new(Forgetful::default())
        .keep_records(Records::in_dir(dir.path()))
        .with_create();
    p.create()
        .unwrap()
        .create(request("pvc-1", MIB))
        .await
        .unwrap();
    p.create()
        .unwrap()
        .create(request("pvc-1", MIB))
        .await
        .unwrap();
    assert_eq!(author(&p).calls.all(), ["create pvc-1"]);
}

fn params(pairs: &[(&str, &str)]) -> Parameters {
    (pairs.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Mutable parameters are recorded at creation and updated by each Modify
/// that succeeds (the keys it names only); a repeated Create compares them.
#[tokio::test]
async fn mutable_parameters_are_recorded_and_modified() {
    let dir = tempfile::tempdir().unwrap();
    let keep = || Records::in_dir(dir.path());
    let p = provisioner!(Forgetful::default()).keep_records(keep());
    let (create, modify) = (p.create().unwrap(), p.modify().unwrap());
    let mut gold = request("pvc-1", MIB);
    gold.mutable_parameters = params(&[("tier", "gold"), ("iops", "100")]);
    let volume = create.create(gold.clone()).await.unwrap();
    assert_eq!(create.create(gold.clone()).await.unwrap(), volume);
    let other = create.create(request("pvc-1", MIB)).await.unwrap_err();
    assert!(matches!(other, Error::AlreadyExists(_)), "{other:?}");

    let unknown = modify
        .modify(build::modify("vol-never", params(&[("tier", "silver")])))
        .await
        .unwrap_err();
    assert!(matches!(unknown, Error::NotFound(_)), "{unknown:?}");
    let refused = build::modify("vol-pvc-1", params(&[("tier", "x"), ("refused", "1")]));
    let refused = modify.modify(refused).await.unwrap_err();
    assert!(matches!(refused, Error::InvalidArgument(_)), "{refused:?}");
    modify
        .modify(build::modify("vol-pvc-1", params(&[("tier", "silver")])))
        .await
        .unwrap();
    assert_eq!(
        author(&p).calls.all(),
        ["create pvc-1", "modify vol-pvc-1", "modify vol-pvc-1"]
    );

    // After a restart: the last values, the untouched key kept.
    let restarted = provisioner!(Forgetful::default()).keep_records(keep());
    let again = restarted.create().unwrap();
    let stale = again.create(gold.clone()).await.unwrap_err();
    assert!(matches!(stale, Error::AlreadyExists(_)), "{stale:?}");
    gold.mutable_parameters = params(&[("tier", "silver"), ("iops", "100")]);
    assert_eq!(again.create(gold).await.unwrap(), volume);
    let recorded = DirStore::new(dir.path()).load().await.unwrap().volumes;
    assert_eq!(
        recorded[0].mutable_parameters,
        params(&[("tier", "silver"), ("iops", "100")])
    );
    assert!(author(&restarted).calls.all().is_empty());
}

#[tokio::test]
async fn without_modify_records_serve_no_modify() {
    struct CreateOnly;
    #[async_trait]
    impl Create for CreateOnly {
        async fn create(&self, req: CreateRequest) -> Result<Volume> {
            Ok(Volume::new(req.name, MIB))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let p = provisioner!(CreateOnly).keep_records(Records::in_dir(dir.path()));
    assert!(p.create().is_some() && p.modify().is_none());
}

/// Node-local storage whose node calls say what record they were given:
/// what Create chose reaches them only that way.
#[derive(Default)]
struct Local {
    calls: Calls,
}

impl Local {
    /// Notes `call` of `handle` with what its record says.
    fn note(&self, call: &str, handle: &VolumeId, record: Option<&VolumeRecord>) {
        let seen = match record {
            Some(r) => format!(
                "{} bytes, tier {:?}",
                r.capacity_bytes,
                r.parameters.get("tier")
            ),
            None => "no record".to_owned(),
        };
        self.calls
            .record(format!("{call} {}: {seen}", handle.as_str()));
    }
}

#[async_trait]
impl Create for Local {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(Volume::new(
            format!("vol-{}", req.name),
            req.capacity.choose(MIB, MIB)?,
        ))
    }
}

#[async_trait]
impl Expand for Local {
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded> {
        Ok(Expanded::new(req.capacity.min_bytes.unwrap_or(0)).with_node_expansion())
    }
}

#[async_trait]
impl Stage for Local {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        self.note("stage", &req.handle, req.record.as_ref());
        req.recorded()?;
        Ok(Staged::at(req.target_path))
    }
}

#[async_trait]
impl Unstage for Local {
    async fn unstage(&self, req: UnstageRequest) -> Result<()> {
        self.note("unstage", &req.handle, req.record.as_ref());
        Ok(())
    }
}

#[async_trait]
impl NodeExpand for Local {
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        self.note("node_expand", &req.handle, req.record.as_ref());
        Ok(req.recorded()?.capacity_bytes)
    }
}

fn stage(handle: &str) -> StageRequest {
    build::stage(handle, "n1", "/staging", VolumeMode::Filesystem)
}

/// Stage, NodeExpand and Unstage get the volume's record: its size as
/// created, then as grown; none once it is deleted, and none for a
/// volume never created (`recorded` is NOT_FOUND).
#[tokio::test]
async fn node_calls_get_the_volumes_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = provisioner!(Local::default()).keep_records(Records::in_dir(dir.path()));
    let mut create = request("pvc-1", MIB);
    create.parameters = params(&[("tier", "fast")]);
    p.create().unwrap().create(create).await.unwrap();
    p.stage().unwrap().stage(stage("vol-pvc-1")).await.unwrap();
    let grow = build::expand("vol-pvc-1", 3 * MIB);
    p.expand().unwrap().expand(grow).await.unwrap();
    let mut node_expand = build::node_expand("vol-pvc-1", "/staging", VolumeMode::Filesystem);
    node_expand.capacity.min_bytes = Some(3 * MIB);
    let grown = p.node_expand().unwrap().node_expand(node_expand).await;
    assert_eq!(grown.unwrap(), 3 * MIB);
    let unstage = || build::unstage("vol-pvc-1", "n1", "/staging");
    p.unstage().unwrap().unstage(unstage()).await.unwrap();
    p.delete()
        .unwrap()
        .delete(build::delete("vol-pvc-1"))
        .await
        .unwrap();
    p.unstage().unwrap().unstage(unstage()).await.unwrap();
    let unknown = p.stage().unwrap().stage(stage("vol-never")).await;
    assert!(matches!(unknown, Err(Error::NotFound(_))), "{unknown:?}");
    assert_eq!(
        p.inner().calls.all(),
        [
            "stage vol-pvc-1: 1048576 bytes, tier Some(\"fast\")",
            "node_expand vol-pvc-1: 3145728 bytes, tier Some(\"fast\")",
            "unstage vol-pvc-1: 3145728 bytes, tier Some(\"fast\")",
            "unstage vol-pvc-1: no record",
            "stage vol-never: no record",
        ]
    );
}

/// A node plugin apart from the controller, sharing its record store,
/// sees the volumes created and grown after its first call: the record
/// is read from the store, not from what the node loaded then.
#[tokio::test]
async fn a_node_sharing_the_store_sees_what_the_controller_recorded_since() {
    let dir = tempfile::tempdir().unwrap();
    let keep = || Records::in_dir(dir.path());
    let controller = provisioner!(Local::default()).keep_records(keep());
    let node = provisioner!(Local::default()).keep_records(keep());
    let early = node.stage().unwrap().stage(stage("vol-pvc-1")).await;
    assert!(matches!(early, Err(Error::NotFound(_))), "{early:?}");
    let create = request("pvc-1", 2 * MIB);
    controller.create().unwrap().create(create).await.unwrap();
    node.stage()
        .unwrap()
        .stage(stage("vol-pvc-1"))
        .await
        .unwrap();
    let grow = build::expand("vol-pvc-1", 3 * MIB);
    controller.expand().unwrap().expand(grow).await.unwrap();
    let node_expand = build::node_expand("vol-pvc-1", "/staging", VolumeMode::Filesystem);
    let grown = node.node_expand().unwrap().node_expand(node_expand).await;
    assert_eq!(grown.unwrap(), 3 * MIB);
    assert_eq!(
        node.inner().calls.all(),
        [
            "stage vol-pvc-1: no record",
            "stage vol-pvc-1: 2097152 bytes, tier None",
            "node_expand vol-pvc-1: 3145728 bytes, tier None",
        ]
    );
}

/// Without records there is no record to give: Stage gets none.
#[tokio::test]
async fn without_records_node_calls_get_no_record() {
    let p = provisioner!(Local::default());
    let unrecorded = p.stage().unwrap().stage(stage("vol-pvc-1")).await;
    assert!(
        matches!(unrecorded, Err(Error::NotFound(_))),
        "{unrecorded:?}"
    );
    assert_eq!(p.inner().calls.all(), ["stage vol-pvc-1: no record"]);
}

/// Storage that grows on its node only: no Expand, its size is what
/// the record says.
struct GrowsOnNode;

#[async_trait]
impl Create for GrowsOnNode {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(Volume::new(
            format!("vol-{}", req.name),
            req.capacity.choose(MIB, MIB)?,
        ))
    }
}

#[async_trait]
impl NodeExpand for GrowsOnNode {
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        Ok(req.recorded()?.capacity_bytes)
    }
}

/// With records, storage that grows on its node is expanded by pav-sdk
/// alone: the size asked recorded within the budget, node expansion
/// asked for, a stale request answered with the recorded size.
#[tokio::test]
async fn storage_that_grows_on_its_node_is_expanded_from_the_records() {
    assert!(provisioner!(GrowsOnNode).expand().is_none(), "no records");
    let dir = tempfile::tempdir().unwrap();
    let records = Records::in_dir(dir.path()).budget(4 * MIB);
    let p = provisioner!(GrowsOnNode).keep_records(records);
    let expander = p.expand().expect("records serve Expand");
    p.create()
        .unwrap()
        .create(request("pvc-1", MIB))
        .await
        .unwrap();
    let grown = expander.expand(build::expand("vol-pvc-1", 3 * MIB)).await;
    assert_eq!(grown.unwrap(), Expanded::new(3 * MIB).with_node_expansion());
    let node_expand = build::node_expand("vol-pvc-1", "/staging", VolumeMode::Filesystem);
    let on_node = p.node_expand().unwrap().node_expand(node_expand).await;
    assert_eq!(on_node.unwrap(), 3 * MIB);
    let stale = expander.expand(build::expand("vol-pvc-1", 2 * MIB)).await;
    assert_eq!(stale.unwrap(), Expanded::new(3 * MIB).with_node_expansion());
    let too_big = expander.expand(build::expand("vol-pvc-1", 5 * MIB)).await;
    assert!(
        matches!(too_big, Err(Error::ResourceExhausted(_))),
        "{too_big:?}"
    );
    let unknown = expander.expand(build::expand("vol-never", 2 * MIB)).await;
    assert!(matches!(unknown, Err(Error::NotFound(_))), "{unknown:?}");
    let left = p.capacity().unwrap().capacity(build::capacity()).await;
    assert_eq!(left.unwrap().available_bytes, MIB);
}
