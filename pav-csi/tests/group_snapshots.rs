//! The GroupController service through a real tonic client: advertised
//! only when the provisioner takes group snapshots, pav-csi's checks and
//! codes, the calls held while one runs, and idempotency (from records).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use pav_csi::csi;
use pav_csi::testing::Harness;
use pav_sdk::records::Records;
use pav_sdk::*;
use tonic::Code;

/// Volumes and group snapshots in memory. A group asked with the
/// parameter `wait` waits until `release` is notified; with `drop-member`
/// it answers one member too few.
#[derive(Default)]
struct Groups {
    volumes: Mutex<Vec<String>>,
    groups: Mutex<HashMap<String, GroupSnapshotInfo>>,
    calls: Mutex<Vec<String>>,
    release: tokio::sync::Notify,
}

impl Groups {
    fn called(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Create for Groups {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let handle = format!("vol-{}", req.name);
        self.volumes.lock().unwrap().push(handle.clone());
        Ok(Volume::new(handle, 1 << 20))
    }

    async fn exists(&self, id: &VolumeId) -> Result<bool> {
        Ok(self
            .volumes
            .lock()
            .unwrap()
            .iter()
            .any(|v| v == id.as_str()))
    }
}

#[async_trait]
impl Snapshot for Groups {
    async fn create_snapshot(&self, _: SnapshotRequest) -> Result<SnapshotInfo> {
        Err(Error::Internal("not in this test".into()))
    }

    async fn delete_snapshot(&self, _: DeleteSnapshotRequest) -> Result<()> {
        Ok(())
    }

    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let groups = self.groups.lock().unwrap();
        Ok(groups.values().flat_map(|g| g.snapshots.clone()).collect())
    }
}

#[async_trait]
impl GroupSnapshot for Groups {
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        self.called(format!("group {}", req.name));
        if req.parameters.contains_key("wait") {
            self.release.notified().await;
        }
        let mut sources = req.sources.clone();
        if req.parameters.contains_key("drop-member") {
            sources.pop();
        }
        let created = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let members = sources.iter().map(|source| {
            SnapshotInfo::new(
                format!("snap-{}-{}", req.name, source.as_str()),
                source.as_str(),
                1 << 20,
                created,
            )
        });
        let group = GroupSnapshotInfo::new(format!("group-{}", req.name), members, created);
        let mut groups = self.groups.lock().unwrap();
        Ok(groups.entry(req.name).or_insert(group).clone())
    }

    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()> {
        self.called(format!("delete group {}", req.handle.as_str()));
        (self.groups.lock().unwrap()).retain(|_, g| g.handle != req.handle.as_str());
        Ok(())
    }

    async fn get_group_snapshot(&self, req: GetGroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let groups = self.groups.lock().unwrap();
        (groups
            .values()
            .find(|g| g.handle == req.handle.as_str())
            .cloned())
        .ok_or_else(|| Error::NotFound(format!("no group {:?}", req.handle.as_str())))
    }
}

/// Serves `provisioner` (controller only); its value, to read its calls.
async fn start<P: Send + Sync + 'static>(provisioner: Provisioner<P>) -> (Harness, Arc<P>) {
    let value = provisioner.inner().clone();
    let builder = Harness::builder().unwrap().controller_only();
    (builder.start(provisioner).await.unwrap(), value)
}

/// Two volumes, `vol-a` and `vol-b`.
async fn with_volumes(h: &mut Harness) {
    for name in ["a", "b"] {
        let req = csi::CreateVolumeRequest {
            name: name.into(),
            volume_capabilities: vec![pav_csi::testing::capability(
                VolumeMode::Filesystem,
                AccessMode::SingleNodeWriter,
            )],
            ..Default::default()
        };
        h.controller.create_volume(req).await.unwrap();
    }
}

fn create(name: &str, sources: &[&str]) -> csi::CreateVolumeGroupSnapshotRequest {
    csi::CreateVolumeGroupSnapshotRequest {
        name: name.into(),
        source_volume_ids: sources.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn delete(id: &str, members: &[&str]) -> csi::DeleteVolumeGroupSnapshotRequest {
    csi::DeleteVolumeGroupSnapshotRequest {
        group_snapshot_id: id.into(),
        snapshot_ids: members.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn get(id: &str, members: &[&str]) -> csi::GetVolumeGroupSnapshotRequest {
    csi::GetVolumeGroupSnapshotRequest {
        group_snapshot_id: id.into(),
        snapshot_ids: members.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// The plugin's service capabilities.
async fn services(h: &mut Harness) -> Vec<i32> {
    use csi::plugin_capability::Type;
    let caps = (h.identity)
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    caps.iter()
        .filter_map(|c| match &c.r#type {
            Some(Type::Service(s)) => Some(s.r#type),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_group_controller_is_advertised_only_when_implemented() {
    use csi::group_controller_service_capability::rpc::Type as Rpc;
    use csi::plugin_capability::service::Type as Service;
    let group_service = Service::GroupControllerService as i32;

    let (mut plain, _) = start(
        Provisioner::new(Groups::default())
            .with_create()
            .with_snapshot(),
    )
    .await;
    assert!(!services(&mut plain).await.contains(&group_service));
    let gc = &mut plain.group_controller;
    let answers = [
        (gc.group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest {}))
            .await
            .map(|_| ()),
        gc.create_volume_group_snapshot(create("g", &["vol-a"]))
            .await
            .map(|_| ()),
        gc.delete_volume_group_snapshot(delete("g", &[]))
            .await
            .map(|_| ()),
        gc.get_volume_group_snapshot(get("g", &[]))
            .await
            .map(|_| ()),
    ];
    for answer in answers {
        let refused = answer.unwrap_err();
        assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
        assert!(refused.message().contains("GROUP_CONTROLLER_SERVICE"));
    }
    plain.shutdown().await.unwrap();

    let (mut grouping, _) = start(provisioner!(Groups::default())).await;
    assert!(services(&mut grouping).await.contains(&group_service));
    let caps = (grouping.group_controller)
        .group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let rpcs: Vec<i32> = (caps.iter())
        .filter_map(|c| c.r#type.as_ref())
        .map(|csi::group_controller_service_capability::Type::Rpc(r)| r.r#type)
        .collect();
    assert_eq!(rpcs, [Rpc::CreateDeleteGetVolumeGroupSnapshot as i32]);
    grouping.shutdown().await.unwrap();
}

#[tokio::test]
async fn requests_are_checked_before_the_provisioner_is_asked() {
    let (mut h, groups) = start(provisioner!(Groups::default())).await;
    with_volumes(&mut h).await;
    let gc = &mut h.group_controller;
    fn code<T>(answer: std::result::Result<tonic::Response<T>, tonic::Status>) -> Code {
        answer.map(|_| ()).unwrap_err().code()
    }
    assert_eq!(
        code(
            gc.create_volume_group_snapshot(create("", &["vol-a"]))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(gc.create_volume_group_snapshot(create("g", &[])).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            gc.create_volume_group_snapshot(create("g", &["vol-a", "vol-a"]))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            gc.create_volume_group_snapshot(create("g", &["vol-a", "vol-nope"]))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(gc.get_volume_group_snapshot(get("", &[])).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(gc.get_volume_group_snapshot(get("group-never", &[])).await),
        Code::NotFound
    );
    assert_eq!(
        code(gc.delete_volume_group_snapshot(delete("", &[])).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            gc.delete_volume_group_snapshot(delete("group-g", &[""]))
                .await
        ),
        Code::InvalidArgument
    );
    // A group that does not exist is deleted already (the author's
    // NOT_FOUND, or nothing to do).
    gc.delete_volume_group_snapshot(delete("group-never", &[]))
        .await
        .unwrap();
    let calls = groups.calls();
    assert!(calls.iter().all(|c| !c.starts_with("group ")), "{calls:?}");
    h.shutdown().await.unwrap();
}

/// The group's member ids, as the answer gives them.
fn members(group: &csi::VolumeGroupSnapshot) -> Vec<&str> {
    group
        .snapshots
        .iter()
        .map(|s| s.snapshot_id.as_str())
        .collect()
}

#[tokio::test]
async fn a_group_is_taken_got_listed_and_deleted() {
    let (mut h, groups) = start(provisioner!(Groups::default())).await;
    with_volumes(&mut h).await;
    let taken = (h.group_controller)
        .create_volume_group_snapshot(create("g", &["vol-a", "vol-b"]))
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert_eq!(taken.group_snapshot_id, "group-g");
    assert!(taken.ready_to_use && taken.creation_time.is_some());
    let sources: Vec<&str> = (taken.snapshots.iter())
        .map(|s| s.source_volume_id.as_str())
        .collect();
    assert_eq!(sources, ["vol-a", "vol-b"]);
    assert!(
        (taken.snapshots.iter()).all(|s| s.group_snapshot_id == "group-g" && s.ready_to_use),
        "{:?}",
        taken.snapshots
    );
    let again = (h.group_controller)
        .create_volume_group_snapshot(create("g", &["vol-a", "vol-b"]))
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert_eq!(again, taken, "a repeat");

    let listed = (h.controller)
        .list_snapshots(csi::ListSnapshotsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(listed.len(), 2);
    assert!((listed.iter()).all(|e| e.snapshot.as_ref().unwrap().group_snapshot_id == "group-g"));

    let ids = members(&taken);
    let got = (h.group_controller)
        .get_volume_group_snapshot(get("group-g", &[ids[1], ids[0]]))
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert_eq!(got, taken);
    let mismatch = (h.group_controller)
        .get_volume_group_snapshot(get("group-g", &[ids[0]]))
        .await
        .unwrap_err();
    assert_eq!(mismatch.code(), Code::InvalidArgument, "{mismatch:?}");

    (h.group_controller)
        .delete_volume_group_snapshot(delete("group-g", &ids))
        .await
        .unwrap();
    let gone = (h.group_controller)
        .get_volume_group_snapshot(get("group-g", &[]))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(
        groups.calls(),
        ["group g", "group g", "delete group group-g"]
    );
    h.shutdown().await.unwrap();
}

/// With records: a repeat is not asked of the author, another list of
/// sources under the name is ALREADY_EXISTS, and a group the records do
/// not know is deleted without the author.
#[tokio::test]
async fn with_records_repeats_and_conflicts_are_answered_from_them() {
    let records = tempfile::tempdir().unwrap();
    let provisioner = provisioner!(Groups::default()).keep_records(Records::in_dir(records.path()));
    let (mut h, groups) = start(provisioner).await;
    with_volumes(&mut h).await;
    let gc = &mut h.group_controller;
    let taken = gc
        .create_volume_group_snapshot(create("g", &["vol-a", "vol-b"]))
        .await
        .unwrap()
        .into_inner();
    let repeat = gc
        .create_volume_group_snapshot(create("g", &["vol-b", "vol-a"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(repeat, taken);
    let conflict = gc
        .create_volume_group_snapshot(create("g", &["vol-a"]))
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), Code::AlreadyExists, "{conflict:?}");
    gc.delete_volume_group_snapshot(delete("group-unknown", &[]))
        .await
        .unwrap();
    // A member is deleted with its group only (CSI: INVALID_ARGUMENT).
    let member = taken.group_snapshot.unwrap().snapshots[0]
        .snapshot_id
        .clone();
    let alone = (h.controller)
        .delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: member,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(alone.code(), Code::InvalidArgument, "{alone:?}");
    assert_eq!(groups.calls(), ["group g"]);
    h.shutdown().await.unwrap();
}

/// While a group is being taken, another call on its name or on a source
/// volume is ABORTED; an answer without a member per source is INTERNAL.
#[tokio::test]
async fn calls_on_the_name_or_a_source_are_aborted_while_one_runs() {
    let (mut h, groups) = start(provisioner!(Groups::default())).await;
    with_volumes(&mut h).await;
    let mut waiting = create("slow", &["vol-a", "vol-b"]);
    waiting.parameters.insert("wait".into(), "yes".into());
    let mut client = h.group_controller.clone();
    let running = tokio::spawn(async move { client.create_volume_group_snapshot(waiting).await });
    while groups.calls().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let same_name = (h.group_controller)
        .create_volume_group_snapshot(create("slow", &["vol-a"]))
        .await
        .unwrap_err();
    assert_eq!(same_name.code(), Code::Aborted, "{same_name:?}");
    let source_busy = (h.controller)
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: "vol-b".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(source_busy.code(), Code::Aborted, "{source_busy:?}");
    groups.release.notify_one();
    running.await.unwrap().unwrap();

    let mut short = create("short", &["vol-a", "vol-b"]);
    short.parameters.insert("drop-member".into(), "yes".into());
    let wrong = (h.group_controller)
        .create_volume_group_snapshot(short)
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Internal, "{wrong:?}");
    assert!(wrong.message().contains("vol-b"), "{wrong:?}");
    h.shutdown().await.unwrap();
}
