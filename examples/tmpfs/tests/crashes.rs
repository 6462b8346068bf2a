//! Tmpfs after a crash between its storage work and pav-sdk's record of
//! it: the CO calls again, and the call must succeed over what the first
//! one left. pav_csi::testing's faults crash it right there (the call
//! runs, its answer is lost), without root: the controller's side only.
//! A Delete has nothing to crash in: Tmpfs has none (pav-sdk forgets
//! the volume, pav-csi removes its node directory).

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
        snapshots: dir.join("snapshots"),
        node: Default::default(),
    };
    let records = Records::in_dir(dir.join("records")).budget(1 << 30);
    pav_sdk::provisioner!(faults.around(tmpfs)).keep_records(records)
}

async fn harness(faults: &Faults) -> Harness {
    let faults = faults.clone();
    // The node service too (not called: it mounts, which needs root), so
    // that a snapshot finds its volume's node directory.
    let builder = Harness::builder().unwrap();
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
