//! Scenario: group snapshots of examples/sparse-file on a real cluster,
//! with csi-snapshotter and the cluster's snapshot-controller of the same
//! release (scripts/cluster-up installs the controller and the
//! groupsnapshot.storage.k8s.io CRDs). Two claims with one label, one of
//! them mounted by a running pod, the other not:
//!
//! - a VolumeGroupSnapshot selecting the label becomes readyToUse, with one
//!   member VolumeSnapshot per claim, each naming the group;
//! - each member restores into a new claim holding its own claim's token
//!   (the mounted claim's too: the driver froze its filesystem while it
//!   copied);
//! - deleting the group deletes its members, and every snapshot copy goes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;
use pav_e2e::sparse_file::{self, DRIVER};
use pav_e2e::*;

const NS: &str = "e2e-group-snapshots";
/// The shipped Immediate ext4 class.
const CLASS: &str = "sparse-file";
const GROUP: &str = "pair";
const LABEL: &str = "e2e.pav.example.com/group";
const CLAIM_SIZE: &str = "64Mi";

const FILES: [&str; 4] = [
    "driver.yaml",
    "storageclass.yaml",
    "snapshotclass.yaml",
    "volumegroupsnapshotclass.yaml",
];

/// A claim of the ext4 class, labelled for the group, or restored from the
/// VolumeSnapshot `from`.
fn claim(name: &str, from: Option<&str>) -> String {
    let (labels, source) = match from {
        None => (format!("  labels: {{ {LABEL}: {GROUP} }}\n"), String::new()),
        Some(snapshot) => (
            String::new(),
            format!(
                "  dataSource: {{ apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: {snapshot} }}\n"
            ),
        ),
    };
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: {NS}
{labels}spec:
  storageClassName: {CLASS}
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: {CLAIM_SIZE}
{source}"#
    )
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn sparse_file_group_snapshot_restores_each_member_and_deletes_them() {
    let client = cluster().await;
    let started = Instant::now();
    reset(&client, NS, DRIVER).await.unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    namespace(&client, NS).await.unwrap();
    let files_before = sparse_file::files_on_node();
    sparse_file::install(&client, &FILES).await;

    // "mounted" stays mounted by a running pod through the group snapshot;
    // "idle" was written by a pod that has finished.
    for name in ["mounted", "idle"] {
        apply(&client, &claim(name, None)).await.unwrap();
    }
    sparse_file::run_client(
        &client,
        NS,
        "write-idle",
        "idle",
        "echo token-idle > /data/token && sync",
    )
    .await;
    // The writer's token is in its page cache, not necessarily on the
    // image yet: the group snapshot must freeze the mounted filesystem to
    // copy it.
    let writer = sparse_file::client_pod(
        NS,
        "writer",
        "mounted",
        "echo token-mounted > /data/token && echo written; sleep 100000",
    );
    apply(&client, &writer).await.unwrap();
    let written = wait_until("the writer to write its token", STEP, || async {
        let output = logs(&client, NS, "writer").await.unwrap_or_default();
        Ok(output.contains("written").then_some(()))
    })
    .await;
    if let Err(e) = written {
        panic!(
            "{e}; events: {:#?}",
            event_lines(&client, NS, "writer").await
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // The group snapshot: one member VolumeSnapshot per claim, each
    // naming the group.
    let (_, members) =
        group_snapshots::take(&client, NS, GROUP, "sparse-file", (LABEL, GROUP), 2).await;

    // Each member restores into a claim holding its own claim's token.
    let mut tokens = BTreeSet::new();
    for (i, member) in members.iter().enumerate() {
        let restored = format!("restored-{i}");
        apply(&client, &claim(&restored, Some(member)))
            .await
            .unwrap();
        let read = sparse_file::run_client(
            &client,
            NS,
            &format!("read-{i}"),
            &restored,
            "cat /data/token",
        )
        .await;
        tokens.insert(read.trim().to_string());
    }
    assert_eq!(
        tokens,
        BTreeSet::from(["token-idle".to_string(), "token-mounted".to_string()]),
        "each member holds its claim's data"
    );

    // Deleting the group deletes its members (deletionPolicy Delete).
    group_snapshots::delete_with_members(&client, NS, GROUP, &members).await;

    delete_and_wait(&pods, "writer", STEP).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    for name in ["mounted", "idle", "restored-0", "restored-1"] {
        delete_and_wait(&claims, name, STEP).await.unwrap();
    }
    wait_until("the images and snapshot copies to go", STEP, || async {
        Ok((sparse_file::files_on_node() == files_before).then_some(()))
    })
    .await
    .unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    assert_no_leaks(&client, DRIVER, Duration::from_secs(120)).await;
    eprintln!(
        "sparse_file_group_snapshot_restores_each_member_and_deletes_them: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
