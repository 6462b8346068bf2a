//! Group snapshots over records kept by pav-sdk: repeats, deletes and gets
//! answered without the author, members listed with their group.

mod common;

use std::time::SystemTime;

use pav_sdk::group_snapshot::build;
use pav_sdk::records::Records;
use pav_sdk::*;

use common::Calls;

/// Storage that remembers nothing: every call is counted, and taking a
/// group twice would take it twice.
#[derive(Default)]
struct Forgetful {
    calls: Calls,
}

#[async_trait]
impl Create for Forgetful {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(Volume::new(format!("vol-{}", req.name), 1 << 20))
    }
}

#[async_trait]
impl Snapshot for Forgetful {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        Ok(SnapshotInfo::new(
            format!("snap-{}", req.name),
            req.source.as_str(),
            1 << 20,
            SystemTime::UNIX_EPOCH,
        ))
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        self.calls
            .record(format!("delete snapshot {}", req.handle.as_str()));
        Ok(())
    }
}

#[async_trait]
impl GroupSnapshot for Forgetful {
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        self.calls.record(format!("group {}", req.name));
        let members = (req.sources.iter()).map(|source| {
            SnapshotInfo::new(
                format!("member-{}-{}", req.name, source.as_str()),
                source.as_str(),
                1 << 20,
                SystemTime::UNIX_EPOCH,
            )
        });
        Ok(GroupSnapshotInfo::new(
            format!("group-{}", req.name),
            members,
            SystemTime::UNIX_EPOCH,
        ))
    }

    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()> {
        self.calls
            .record(format!("delete group {}", req.handle.as_str()));
        Ok(())
    }
}

fn recorded(dir: &std::path::Path) -> Provisioner<Forgetful> {
    provisioner!(Forgetful::default()).keep_records(Records::in_dir(dir))
}

#[tokio::test]
async fn a_repeated_group_is_answered_from_the_records_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let provisioner = recorded(dir.path());
    let groups = provisioner.group_snapshot().unwrap();
    let ask = build::group_snapshot("gs-1", ["vol-a", "vol-b"]);
    let taken = groups.create_group_snapshot(ask.clone()).await.unwrap();
    assert_eq!(taken.snapshots.len(), 2);
    assert!(taken.ready());
    assert_eq!(groups.create_group_snapshot(ask).await.unwrap(), taken);
    // The same sources in another order are the same group.
    let reordered = build::group_snapshot("gs-1", ["vol-b", "vol-a"]);
    assert_eq!(
        groups.create_group_snapshot(reordered).await.unwrap(),
        taken
    );
    assert_eq!(provisioner.inner().calls.all(), ["group gs-1"]);

    let restarted = recorded(dir.path());
    let again = restarted.group_snapshot().unwrap();
    let repeat = build::group_snapshot("gs-1", ["vol-a", "vol-b"]);
    assert_eq!(again.create_group_snapshot(repeat).await.unwrap(), taken);
    assert!(
        restarted.inner().calls.all().is_empty(),
        "answered from records"
    );
    let got = again
        .get_group_snapshot(build::get_group_snapshot(
            taken.handle.as_str(),
            Vec::<String>::new(),
        ))
        .await
        .unwrap();
    assert_eq!(got, taken);
}

#[tokio::test]
async fn other_sources_or_parameters_under_the_same_name_already_exist() {
    let dir = tempfile::tempdir().unwrap();
    let provisioner = recorded(dir.path());
    let groups = provisioner.group_snapshot().unwrap();
    (groups.create_group_snapshot(build::group_snapshot("gs-1", ["vol-a", "vol-b"])))
        .await
        .unwrap();
    let fewer = build::group_snapshot("gs-1", ["vol-a"]);
    let mut other_parameters = build::group_snapshot("gs-1", ["vol-a", "vol-b"]);
    other_parameters
        .parameters
        .insert("tier".into(), "gold".into());
    for refused in [fewer, other_parameters] {
        let answer = groups.create_group_snapshot(refused.clone()).await;
        assert!(
            matches!(answer, Err(Error::AlreadyExists(_))),
            "{refused:?}: {answer:?}"
        );
    }
    assert_eq!(provisioner.inner().calls.all(), ["group gs-1"]);
}

#[tokio::test]
async fn members_are_listed_with_their_group_and_deleted_only_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let provisioner = recorded(dir.path());
    let groups = provisioner.group_snapshot().unwrap();
    let snapshots = provisioner.snapshot().unwrap();
    let taken = (groups.create_group_snapshot(build::group_snapshot("gs-1", ["vol-a", "vol-b"])))
        .await
        .unwrap();
    let listed = snapshots.list_snapshots().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(
        (listed.iter()).all(|s| s.group.as_deref() == Some(taken.handle.as_str())),
        "{listed:?}"
    );
    let member = taken.snapshots[0].handle.as_str();
    let alone = snapshots
        .delete_snapshot(pav_sdk::build::delete_snapshot(member))
        .await;
    assert!(matches!(alone, Err(Error::InvalidArgument(_))), "{alone:?}");

    // snapshot_ids that are not the members: INVALID_ARGUMENT, nothing deleted.
    let wrong = build::delete_group_snapshot(taken.handle.as_str(), [member]);
    let answer = groups.delete_group_snapshot(wrong).await;
    assert!(
        matches!(answer, Err(Error::InvalidArgument(_))),
        "{answer:?}"
    );
    let get_wrong = build::get_group_snapshot(taken.handle.as_str(), ["other"]);
    let answer = groups.get_group_snapshot(get_wrong).await;
    assert!(
        matches!(answer, Err(Error::InvalidArgument(_))),
        "{answer:?}"
    );

    let ids: Vec<String> = taken.snapshots.iter().map(|s| s.handle.clone()).collect();
    let delete = build::delete_group_snapshot(taken.handle.as_str(), ids.iter().rev().cloned());
    groups.delete_group_snapshot(delete.clone()).await.unwrap();
    assert!(snapshots.list_snapshots().await.unwrap().is_empty());
    let get = build::get_group_snapshot(taken.handle.as_str(), ids);
    let gone = groups.get_group_snapshot(get).await;
    assert!(matches!(gone, Err(Error::NotFound(_))), "{gone:?}");
    // Deleted again, and a group never taken: success, the author not called.
    groups.delete_group_snapshot(delete).await.unwrap();
    let never = build::delete_group_snapshot("group-never", Vec::<String>::new());
    groups.delete_group_snapshot(never).await.unwrap();
    assert_eq!(
        provisioner.inner().calls.all(),
        ["group gs-1", "delete group group-gs-1"]
    );
    // Nothing recorded is left after a restart either.
    let restarted = recorded(dir.path());
    assert!(
        (restarted.snapshot().unwrap().list_snapshots())
            .await
            .unwrap()
            .is_empty()
    );
}
