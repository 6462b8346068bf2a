//! Scenario: what pav-sdk's optional touch points give a driver on a real
//! cluster, with the real sidecars. examples/sparse-file is deployed from
//! examples/sparse-file/deploy/ with external-provisioner (capacity
//! tracking on), external-resizer and external-snapshotter; the cluster runs
//! snapshot-controller (scripts/cluster-up installs it). One xfs claim,
//! bound where its pod runs, then:
//!
//! - capacity: CSIStorageCapacity objects appear for the node, and a claim
//!   larger than the node's free space keeps its pod Pending with the
//!   scheduler's reason, and no volume is made for it;
//! - stats: the kubelet's volume stats for the claim report the volume's
//!   size, not the host filesystem's;
//! - expansion: a request past what the node's filesystem can hold is
//!   infeasible (an event with the limit), and a lower one grows the claim
//!   while its pod runs; the pod sees the new size;
//! - snapshots: a VolumeSnapshot restored into a new claim holds the data;
//! - clones: a claim cloned from the first holds the data;
//!
//! and after deleting everything, no image or snapshot file is left.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::ListParams;
use kube::{Api, Client};
use pav_e2e::sparse_file::{self, DRIVER, DRIVER_NS};
use pav_e2e::*;

const NS: &str = "e2e-native-features";
const CLASS: &str = "sparse-file-xfs";
const TOPOLOGY_KEY: &str = "topology.sparse-file.pav.example.com/node";
const MIB: u64 = 1 << 20;
/// mkfs.xfs makes no filesystem under 300 MB.
const FIRST_SIZE: u64 = 320 * MIB;
const GROWN_SIZE: u64 = 480 * MIB;

const FILES: [&str; 3] = ["driver.yaml", "storageclass-xfs.yaml", "snapshotclass.yaml"];

/// A claim of the xfs class, optionally restored or cloned from `source`
/// (`(kind, name)`).
fn claim(name: &str, bytes: u64, source: Option<(&str, &str)>) -> String {
    let source = match source {
        Some(("VolumeSnapshot", from)) => format!(
            "  dataSource: {{ apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: {from} }}\n"
        ),
        Some((kind, from)) => format!("  dataSource: {{ kind: {kind}, name: {from} }}\n"),
        None => String::new(),
    };
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: {NS}
spec:
  storageClassName: {CLASS}
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: "{bytes}"
{source}"#
    )
}

fn pod(name: &str, claim: &str, script: &str) -> String {
    sparse_file::client_pod(NS, name, claim, script)
}

/// Runs a pod on `claim` to completion and returns its output.
async fn run_pod(client: &Client, name: &str, claim: &str, script: &str) -> String {
    sparse_file::run_client(client, NS, name, claim, script).await
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn sparse_file_grows_snapshots_clones_and_reports_capacity_and_stats() {
    let client = cluster().await;
    let started = Instant::now();
    reset(&client, NS, DRIVER).await.unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    namespace(&client, NS).await.unwrap();
    let files_before = sparse_file::files_on_node();
    sparse_file::install(&client, &FILES).await;

    // Capacity: external-provisioner asks GetCapacity for the node's
    // segment and publishes the answer for the scheduler.
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), DRIVER_NS);
    let free = wait_until("a CSIStorageCapacity for the node", STEP, || async {
        let list = capacities.list(&ListParams::default()).await?;
        Ok(list.items.into_iter().find_map(|c| {
            let for_node = c
                .node_topology
                .as_ref()?
                .match_labels
                .as_ref()?
                .get(TOPOLOGY_KEY)
                .is_some_and(|node| node == FIRST_NODE);
            let bytes = quantity_bytes(&c.capacity?.0)?;
            (for_node && c.storage_class_name == CLASS && bytes > 0).then_some(bytes)
        }))
    })
    .await
    .unwrap();

    // A claim larger than the node's free space: its pod stays Pending with
    // the scheduler's reason, and no volume is made.
    let too_large = (free + (1 << 40)).to_string();
    apply(
        &client,
        &claim("too-large", too_large.parse().unwrap(), None),
    )
    .await
    .unwrap();
    apply(&client, &pod("too-large", "too-large", "true"))
        .await
        .unwrap();
    let reason = wait_until("the scheduler to refuse too-large", STEP, || async {
        let lines = event_lines(&client, NS, "too-large").await;
        Ok(lines
            .into_iter()
            .find(|l| l.contains("FailedScheduling") && l.contains("enough free storage")))
    })
    .await;
    if let Err(e) = reason {
        panic!(
            "{e}; events: {:#?}",
            event_lines(&client, NS, "too-large").await
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    assert_eq!(pod_phase(&pods.get("too-large").await.unwrap()), "Pending");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    assert_eq!(
        claim_phase(&claims.get("too-large").await.unwrap()),
        "Pending"
    );
    delete_and_wait(&pods, "too-large", STEP).await.unwrap();
    delete_and_wait(&claims, "too-large", STEP).await.unwrap();

    // The claim the rest uses, with a pod that writes a token and then
    // prints the size of its filesystem every second.
    apply(&client, &claim("data", FIRST_SIZE, None))
        .await
        .unwrap();
    let script = "set -e; grep ' /data xfs ' /proc/mounts; echo kept-token > /data/token; sync; \
                  while true; do echo size=$(( $(stat -f -c %b /data) * $(stat -f -c %S /data) )); sleep 1; done";
    apply(&client, &pod("user", "data", script)).await.unwrap();
    let running = wait_for(&pods, "user", STEP, "Running", |p| {
        pod_phase(p) == "Running"
    })
    .await;
    if let Err(e) = running {
        panic!("{e}; events: {:#?}", event_lines(&client, NS, "user").await);
    }
    let bound = claims.get("data").await.unwrap();
    let volume = volume_name(&bound).expect("a bound claim names its volume");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let affinity = serde_json::to_string(&pv.spec.as_ref().unwrap().node_affinity).unwrap();
    assert!(
        affinity.contains(TOPOLOGY_KEY) && affinity.contains(FIRST_NODE),
        "the volume is on the node: {affinity}"
    );
    let first = wait_until("the pod to print its size", STEP, || async {
        Ok(printed_sizes(&client, NS, "user").await.first().copied())
    })
    .await
    .unwrap();
    assert!(
        first <= FIRST_SIZE && first > FIRST_SIZE / 2,
        "the pod sees the volume's size: {first}"
    );

    // Stats: the kubelet asks NodeGetVolumeStats of the mounted volume.
    let (capacity, used) = wait_until("the kubelet's stats of the volume", STEP, || async {
        Ok(kubelet_volume_stats(&client, FIRST_NODE, NS, "user", "data").await)
    })
    .await
    .unwrap();
    assert!(
        capacity <= FIRST_SIZE && capacity > FIRST_SIZE / 2 && used < capacity,
        "the volume's size, not the host's: capacity {capacity}, used {used}"
    );

    // Recovery from an infeasible expansion: more than the node's
    // filesystem can ever hold is OUT_OF_RANGE naming its size, which
    // external-resizer reports as infeasible; the lower request below is
    // then grown at once.
    let needles = ["filesystem holding", "can ever provide"];
    request_infeasible(&client, NS, "data", 1 << 50, &needles)
        .await
        .unwrap();

    // Expansion while the pod runs: the resizer grows the image, the
    // kubelet the mounted filesystem; the pod sees it.
    if let Err(e) = grow_in_use(&client, NS, "data", "user", GROWN_SIZE).await {
        panic!("{e}; events: {:#?}", event_lines(&client, NS, "data").await);
    }
    let seen = wait_until("the pod to see the new size", STEP, || async {
        let last = printed_sizes(&client, NS, "user").await.first().copied();
        Ok(last.filter(|&size| size > FIRST_SIZE))
    })
    .await
    .unwrap();
    assert!(seen <= GROWN_SIZE, "{first} -> {seen}");

    // Snapshot, then restore into a new claim.
    let snapshot_yaml = format!(
        r#"
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: data-snapshot
  namespace: {NS}
spec:
  volumeSnapshotClassName: sparse-file
  source:
    persistentVolumeClaimName: data
"#
    );
    apply(&client, &snapshot_yaml).await.unwrap();
    let snapshots = volume_snapshots(&client, NS).await;
    let ready = wait_for(&snapshots, "data-snapshot", STEP, "readyToUse", |s| {
        s.data["status"]["readyToUse"] == true
    })
    .await;
    if let Err(e) = ready {
        panic!(
            "{e}; events: {:#?}",
            event_lines(&client, NS, "data-snapshot").await
        );
    }
    apply(
        &client,
        &claim(
            "restored",
            GROWN_SIZE,
            Some(("VolumeSnapshot", "data-snapshot")),
        ),
    )
    .await
    .unwrap();
    let read = run_pod(&client, "read-restored", "restored", "cat /data/token").await;
    assert_eq!(
        read.trim(),
        "kept-token",
        "the restored claim holds the data"
    );

    // Clone of the claim in use.
    apply(
        &client,
        &claim(
            "cloned",
            GROWN_SIZE,
            Some(("PersistentVolumeClaim", "data")),
        ),
    )
    .await
    .unwrap();
    let read = run_pod(&client, "read-clone", "cloned", "cat /data/token").await;
    assert_eq!(read.trim(), "kept-token", "the clone holds the data");

    // Everything goes, and so do the files.
    delete_and_wait(&pods, "user", STEP).await.unwrap();
    delete_and_wait(&snapshots, "data-snapshot", STEP)
        .await
        .unwrap();
    for name in ["data", "restored", "cloned"] {
        delete_and_wait(&claims, name, STEP).await.unwrap();
    }
    wait_until("the volumes' PVs to go", STEP, || async {
        let left = pvs.list(&ListParams::default()).await?;
        let ours = left.items.iter().any(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|csi| csi.driver == DRIVER)
        });
        Ok((!ours).then_some(()))
    })
    .await
    .unwrap();
    wait_until("the images and snapshot copies to go", STEP, || async {
        Ok((sparse_file::files_on_node() == files_before).then_some(()))
    })
    .await
    .unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    assert_no_leaks(&client, DRIVER, Duration::from_secs(120)).await;
    eprintln!(
        "sparse_file_grows_snapshots_clones_and_reports_capacity_and_stats: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
