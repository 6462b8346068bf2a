//! Tmpfs after a crash between its storage work and pav-sdk's record of
//! it: the CO calls again, and the call must succeed over what the first
//! one left. pav_csi::testing's faults crash it right there (the call
//! runs, its answer is lost), without root: the controller's side only.

#[allow(dead_code)]
#[path = "../src/provisioner.rs"]
mod provisioner;

use std::path::Path;

use pav_csi::csi;
use pav_csi::testing::{Fault, Faults, Harness, Method, capability};
use pav_sdk::records::Records;
use pav_sdk::{AccessMode, Error, Provisioner, VolumeMode};
use provisioner::Tmpfs;

/// Tmpfs on `dir` as `main` serves it, with `faults` around it.
fn tmpfs(dir: &Path, faults: &Faults) -> Provisioner<pav_csi::testing::Faulty<Tmpfs>> {
    let tmpfs = Tmpfs {
        root: dir.to_owned(),
        node: Default::default(),
    };
    let records = Records::in_dir(dir.join("records")).budget(1 << 30);
    pav_sdk::provisioner!(faults.around(tmpfs)).keep_records(records)
}

async fn harness(faults: &Faults) -> Harness {
    let faults = faults.clone();
    let builder = Harness::builder().unwrap().controller_only();
    builder
        .start_with(move |dir| tmpfs(dir, &faults))
        .await
        .unwrap()
}

fn crashed() -> Fault {
    Fault::FailAfter(Error::Unavailable("crashed before the record".into()))
}

async fn create_volume(h: &mut Harness, name: &str) -> String {
    let req = csi::CreateVolumeRequest {
        name: name.into(),
        volume_capabilities: vec![capability(
            VolumeMode::Filesystem,
            AccessMode::SingleNodeWriter,
        )],
        ..Default::default()
    };
    let created = h.controller.create_volume(req).await.unwrap().into_inner();
    created.volume.unwrap().volume_id
}

/// A snapshot whose copy was made but not recorded is taken again: the
/// copy left behind is replaced, not merged into (a file deleted from
/// the volume since must not reappear in the snapshot).
#[tokio::test]
async fn a_snapshot_copied_but_not_recorded_is_taken_anew() {
    let faults = Faults::new();
    let mut h = harness(&faults).await;
    let volume = create_volume(&mut h, "pvc-1").await;
    let req = csi::CreateSnapshotRequest {
        name: "snap-1".into(),
        source_volume_id: volume,
        ..Default::default()
    };
    faults.next(Method::CreateSnapshot, crashed());
    let lost = h.controller.create_snapshot(req.clone()).await.unwrap_err();
    assert!(lost.message().contains("crashed"), "{lost:?}");
    let left = h.storage_dir().join("snapshots/snap-1");
    std::fs::write(left.join("deleted-since"), "stale").unwrap();

    h.controller.create_snapshot(req).await.unwrap();
    assert!(left.is_dir() && !left.join("deleted-since").exists());
    let listed = h
        .controller
        .list_snapshots(csi::ListSnapshotsRequest::default());
    assert_eq!(listed.await.unwrap().into_inner().entries.len(), 1);
    assert_eq!(faults.calls(Method::CreateSnapshot), 2);
    h.shutdown().await.unwrap();
}

/// A volume deleted but still recorded is deleted again: its directory
/// already gone is success.
#[tokio::test]
async fn a_volume_deleted_but_still_recorded_is_deleted_again() {
    let faults = Faults::new();
    let mut h = harness(&faults).await;
    let volume = create_volume(&mut h, "pvc-1").await;
    // What a Stage leaves once its tmpfs is unmounted: the mount point.
    let dir = h.storage_dir().join("volumes").join(&volume);
    std::fs::create_dir_all(&dir).unwrap();
    let delete = csi::DeleteVolumeRequest {
        volume_id: volume,
        ..Default::default()
    };
    faults.next(Method::Delete, crashed());
    let lost = h
        .controller
        .delete_volume(delete.clone())
        .await
        .unwrap_err();
    assert!(lost.message().contains("crashed"), "{lost:?}");
    assert!(!dir.exists(), "the first Delete did its work");

    h.controller.delete_volume(delete).await.unwrap();
    let listed = h
        .controller
        .list_volumes(csi::ListVolumesRequest::default());
    assert!(listed.await.unwrap().into_inner().entries.is_empty());
    assert_eq!(faults.calls(Method::Delete), 2);
    h.shutdown().await.unwrap();
}
