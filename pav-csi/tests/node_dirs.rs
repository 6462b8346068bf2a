//! Node directories: pav-csi removes a volume's once the records no
//! longer hold it, whether the Delete ran in this process or in a
//! controller elsewhere, and leaves those of volumes that exist. Without
//! root: the directories are made as a Stage leaves them (Stage mounts),
//! with a file inside.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use pav_csi::csi;
use pav_csi::testing::Harness;
use pav_sdk::prelude::*;
use pav_sdk::records::Records;
use pav_sdk::{Provisioner, VolumeMode};

/// Creates volumes of any size; stages by handing out the node directory;
/// notes each node clean-up, with whether the directory was still there.
#[derive(Clone, Default)]
struct NodeLocal {
    cleaned_up: Arc<Mutex<Vec<(String, bool)>>>,
}

impl NodeLocal {
    fn cleaned_up(&self) -> Vec<(String, bool)> {
        self.cleaned_up.lock().unwrap().clone()
    }
}

#[async_trait]
impl Create for NodeLocal {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(Volume::new(req.name, req.capacity.choose(1 << 20, 1)?))
    }
}

#[async_trait]
impl Stage for NodeLocal {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        Ok(Staged::at(req.node_dir()?))
    }

    async fn clean_up(&self, req: NodeCleanUpRequest) -> Result<()> {
        let noted = (req.handle.to_string(), req.node_dir.join("data").exists());
        self.cleaned_up.lock().unwrap().push(noted);
        Ok(())
    }
}

/// `value` keeping its records in `records`.
fn node_local(value: &NodeLocal, records: &Path) -> Provisioner<NodeLocal> {
    pav_sdk::provisioner!(value.clone()).keep_records(Records::in_dir(records))
}

async fn create(h: &mut Harness, name: &str) -> String {
    let req = common::create_request(name);
    let created = h.controller.create_volume(req).await.unwrap().into_inner();
    created.volume.unwrap().volume_id
}

async fn delete(h: &mut Harness, volume_id: &str) {
    let req = csi::DeleteVolumeRequest {
        volume_id: volume_id.into(),
        ..Default::default()
    };
    h.controller.delete_volume(req).await.unwrap();
}

/// What a Stage leaves in `dir`: the directory, with data in it.
fn staged_once(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("data"), "kept on the node").unwrap();
}

/// Waits until `dir` is gone, for the clean-up the Delete started.
async fn gone(dir: &Path) {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while dir.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    waited
        .await
        .unwrap_or_else(|_| panic!("{} is still there", dir.display()));
}

#[tokio::test]
async fn a_volume_deleted_here_loses_its_node_directory_and_no_other_does() {
    let value = NodeLocal::default();
    let serving = value.clone();
    let builder = Harness::builder().unwrap();
    let mut h = builder
        .start_with(move |dir| node_local(&serving, &dir.join("records")))
        .await
        .unwrap();
    let (deleted, kept) = (create(&mut h, "pvc-1").await, create(&mut h, "pvc-2").await);
    let (deleted_dir, kept_dir) = (h.node_dir(&deleted), h.node_dir(&kept));
    staged_once(&deleted_dir);
    staged_once(&kept_dir);

    delete(&mut h, &deleted).await;
    gone(&deleted_dir).await;
    assert!(
        kept_dir.join("data").exists(),
        "a volume that exists keeps its directory"
    );
    // Its node clean-up ran first, on the directory as it was.
    assert_eq!(value.cleaned_up(), [(deleted, true)]);
    h.shutdown().await.unwrap();
}

/// A controller and a node plugin apart, sharing the records in
/// `records`; the node plugin serves `value`.
async fn deployed_apart(records: &Path, value: &NodeLocal) -> (Harness, Harness) {
    let (shared, serving) = (records.to_owned(), NodeLocal::default());
    let controller = Harness::builder().unwrap().controller_only();
    let controller = controller
        .start_with(move |_| node_local(&serving, &shared))
        .await
        .unwrap();
    let (shared, serving) = (records.to_owned(), value.clone());
    let node = Harness::builder().unwrap();
    let node = node
        .start_with(move |_| node_local(&serving, &shared))
        .await
        .unwrap();
    (controller, node)
}

#[tokio::test]
async fn a_volume_deleted_by_a_controller_elsewhere_loses_its_node_directory() {
    let records = tempfile::tempdir().unwrap();
    let value = NodeLocal::default();
    let (mut controller, mut node) = deployed_apart(records.path(), &value).await;
    assert!(node.serves_node() && !controller.serves_node());
    let volume = create(&mut controller, "pvc-1").await;
    let dir = node.node_dir(&volume);
    staged_once(&dir);
    // The node plugin looks again at its start, on an Unstage and
    // periodically; a restart is the look a test can wait on.
    node.restart().await.unwrap();
    assert!(dir.join("data").exists(), "the volume still exists");

    delete(&mut controller, &volume).await;
    node.restart().await.unwrap();
    gone(&dir).await;
    assert_eq!(
        value.cleaned_up(),
        [(volume, true)],
        "the node's clean-up, once"
    );
    controller.shutdown().await.unwrap();
    node.shutdown().await.unwrap();
}

/// Kubelet's NodeStageVolume of `volume_id` at `staging`.
fn stage_request(volume_id: &str, staging: &Path) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(common::capability(VolumeMode::Filesystem)),
        ..Default::default()
    }
}

/// A claim deleted with its pod: the controller (elsewhere) deletes the
/// volume while this node still has it staged. The node keeps the
/// directory, with what the pod wrote, until kubelet unstages it, and
/// removes it then.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_volume_deleted_while_staged_keeps_its_node_directory_until_unstaged() {
    let records = tempfile::tempdir().unwrap();
    let value = NodeLocal::default();
    let (mut controller, mut node) = deployed_apart(records.path(), &value).await;
    let volume = create(&mut controller, "pvc-1").await;
    let staging = node.staging_path("pvc-1");
    let stage = stage_request(&volume, &staging);
    node.node.node_stage_volume(stage).await.unwrap();
    let dir = node.node_dir(&volume);
    assert!(dir.is_dir(), "made for the recorded volume's Stage");
    std::fs::write(staging.join("data"), "written by the pod").unwrap();

    delete(&mut controller, &volume).await;
    node.restart().await.unwrap(); // a look at the records: deleted
    assert!(dir.join("data").exists(), "staged: kept until unstaged");

    let unstage = csi::NodeUnstageVolumeRequest {
        volume_id: volume.clone(),
        staging_target_path: staging.display().to_string(),
    };
    node.node.node_unstage_volume(unstage).await.unwrap();
    gone(&dir).await;
    assert_eq!(
        value.cleaned_up(),
        [(volume, true)],
        "after the unstaging only"
    );
    controller.shutdown().await.unwrap();
    node.shutdown().await.unwrap();
}
