//! examples/local-volumes as a user installs it (its provisioner,
//! StorageClass, VolumeSnapshotClass and VolumeGroupSnapshotClass, plus an
//! xfs class), with the image
//! `pav-local-tools:dev` that scripts/e2e-image loads:
//!
//! - local-path's job with an enforced size: a WaitForFirstConsumer claim
//!   gets a volume on its pod's node (node affinity on pav's topology key),
//!   a pod cannot write more than the claim asked for, the data outlives the
//!   pod, two pods use it at once through one staging pod (`stagingPer:
//!   Node`), and deleting the claim removes the image file;
//! - online expansion: an xfs claim grows while its pod runs, and the pod
//!   sees the larger filesystem (a mounted ext4 would need
//!   CAP_SYS_RESOURCE, which this cluster's containers lack:
//!   docs/cluster.md);
//! - snapshots: a VolumeSnapshot restored into a larger claim, and a clone
//!   of the claim, both hold the data; then no image, snapshot copy or
//!   VolumeSnapshotContent is left.
//! - group snapshots: a VolumeGroupSnapshot of two claims one pod wrote
//!   is ready with one member per claim, each a copy on their node named
//!   after the group; a member restores into a claim holding its own
//!   claim's data; deleting the group removes every member's copy.
//! - inline volumes: a pod's own CSI volume of the driver (a CSI
//!   ephemeral inline volume) is an image of its size attribute made for
//!   the pod, holds what the pod writes, and goes with the pod.
//!
//! Each ends with the leak check, and no PaV pod of the provisioner left.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use pav_e2e::sparse_file::{client_pod, client_pod_with};
use pav_e2e::*;

const NAME: &str = "local-volumes";
const NS: &str = "e2e-local-volumes";
/// The example's StorageClass (ext4) and the xfs one this test adds.
const CLASS: &str = "local-volumes";
const XFS_CLASS: &str = "local-volumes-xfs";
/// A StorageClass that binds at once, for claims no pod uses yet.
const IMMEDIATE_CLASS: &str = "local-volumes-immediate";
/// Where the example keeps images (and `snapshots/`) on each node.
const VOLUMES_DIR: &str = "/var/lib/pav-local-volumes";
/// The label every pav node plugin reports its node under.
const TOPOLOGY_KEY: &str = "topology.pav.albertofaria.github.io/node";
const MIB: u64 = 1 << 20;

fn example(file: &str) -> String {
    example_file("local-volumes", file)
}

/// The example's objects, an xfs StorageClass and an Immediate one, the
/// VolumeFiles CRD and the example's grant to read the VolumeFiles of the
/// test's namespace.
fn objects() -> String {
    let xfs_class = format!(
        r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {XFS_CLASS}
provisioner: {NAME}
parameters: {{ fsType: xfs }}
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
reclaimPolicy: Delete
"#
    );
    [
        example("provisioner.yaml"),
        example("storageclass.yaml"),
        example("snapshotclass.yaml"),
        example("groupsnapshotclass.yaml"),
        xfs_class,
        format!(
            r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {IMMEDIATE_CLASS}
provisioner: {NAME}
volumeBindingMode: Immediate
reclaimPolicy: Delete
"#
        ),
        example("volumefiles.yaml"),
        example("population-rbac.yaml").replace("namespace: default", &format!("namespace: {NS}")),
    ]
    .join("\n---\n")
}

/// A claim of `class`, optionally restored or cloned from `source`
/// (`(kind, name)`).
fn claim(name: &str, class: &str, bytes: u64, source: Option<(&str, &str)>) -> String {
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
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: "{bytes}"
{source}"#
    )
}

/// Runs a client pod with `claim` at /data to completion; returns what it
/// printed and the node it ran on, once it is deleted again.
async fn run_pod(client: &Client, name: &str, claim: &str, script: &str) -> (String, String) {
    run_pod_with(client, name, &[(claim, "/data")], script).await
}

/// Runs a client pod with the claims of `mounts` (`(claim, path)`) to
/// completion; returns what it printed and the node it ran on, once it is
/// deleted again.
async fn run_pod_with(
    client: &Client,
    name: &str,
    mounts: &[(&str, &str)],
    script: &str,
) -> (String, String) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    apply(client, &client_pod_with(NS, name, mounts, script))
        .await
        .unwrap();
    let pod = match wait_for(&pods, name, STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await
    {
        Ok(pod) => pod,
        Err(e) => {
            let mut claim_events = Vec::new();
            for (claim, _) in mounts {
                claim_events.push((*claim, event_lines(client, NS, claim).await));
            }
            panic!(
                "{e}; pod events: {:#?}; claim events: {claim_events:#?}",
                event_lines(client, NS, name).await,
            )
        }
    };
    let output = logs(client, NS, name).await.unwrap();
    assert_eq!(pod_phase(&pod), "Succeeded", "{name}: {output}");
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a pod that ran has a node");
    delete_and_wait(&pods, name, STEP).await.unwrap();
    (output, node)
}

/// Image files on node 1 (volumes and `snapshots/`), by path under
/// [`VOLUMES_DIR`].
fn image_files() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for dir in ["", "snapshots/"] {
        let Ok(entries) = std::fs::read_dir(format!("{VOLUMES_DIR}/{dir}")) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".img") || name.ends_with(".img.new") {
                found.insert(format!("{dir}{name}"));
            }
        }
    }
    found
}

/// Waits until the image files are those of `before`.
async fn wait_images(before: &BTreeSet<String>) {
    let back = wait_until("the images and snapshot copies to go", STEP, || async {
        Ok((image_files() == *before).then_some(()))
    })
    .await;
    if let Err(e) = back {
        panic!(
            "{e}; left: {:?}",
            image_files().difference(before).collect::<Vec<_>>()
        );
    }
}

/// The volume a claim is bound to.
async fn bound_volume(client: &Client, claim: &str) -> PersistentVolume {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let name = volume_name(&claims.get(claim).await.unwrap()).expect("the claim is bound");
    Api::<PersistentVolume>::all(client.clone())
        .get(&name)
        .await
        .unwrap()
}

fn volume_handle(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.volume_handle.clone())
        .expect("a CSI volume")
}

/// The VolumeSnapshot API (namespaced) and the VolumeSnapshotContent API.
async fn snapshot_apis(client: &Client) -> (Api<DynamicObject>, Api<DynamicObject>) {
    (
        volume_snapshots(client, NS).await,
        v1_api(
            client,
            NS,
            "snapshot.storage.k8s.io",
            "VolumeSnapshotContent",
        )
        .await,
    )
}

/// VolumeSnapshotContents of the provisioner.
async fn snapshot_contents(contents: &Api<DynamicObject>) -> Vec<String> {
    contents
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.data["spec"]["driver"] == NAME)
        .map(|c| c.name_any())
        .collect()
}

/// Removes what an earlier, failed run left that [`start_scenario`] does
/// not: VolumeGroupSnapshots, then VolumeSnapshots of the namespace (their
/// contents and copies go with them while the provisioner still runs).
async fn remove_snapshots(client: &Client) {
    if Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .get_opt(NS)
        .await
        .unwrap()
        .is_none()
    {
        return;
    }
    let groups = group_snapshots::groups(client, NS).await;
    for group in groups.list(&ListParams::default()).await.unwrap().items {
        delete_and_wait(&groups, &group.name_any(), STEP)
            .await
            .unwrap();
    }
    let (snapshots, _) = snapshot_apis(client).await;
    for snapshot in snapshots.list(&ListParams::default()).await.unwrap().items {
        delete_and_wait(&snapshots, &snapshot.name_any(), STEP)
            .await
            .unwrap();
    }
}

/// The end of every scenario: claims deleted, their volumes and images
/// gone, no PaV pod of the provisioner, the provisioner removed, no leaks.
async fn finish(client: &Client, claims: &[&str], images_before: &BTreeSet<String>) {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    for claim in claims {
        delete_and_wait(&api, claim, STEP).await.unwrap();
    }
    wait_until("the provisioner's volumes to go", STEP, || async {
        let left = volumes_of(client, NAME).await?;
        Ok(left.is_empty().then_some(()))
    })
    .await
    .unwrap();
    wait_images(images_before).await;
    wait_no_pav_pods(client, NAME, STEP).await.unwrap();
    delete(client, &objects()).await.unwrap();
    delete_provisioner(client, NAME, STEP).await.unwrap();
    assert_no_leaks(client, NAME, Duration::from_secs(120)).await;
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volume_is_on_its_node_holds_its_size_and_is_deleted() {
    let client = cluster().await;
    let started = Instant::now();
    remove_snapshots(&client).await;
    let observer = start_scenario(&client, NS, NAME, &objects()).await;
    let images_before = image_files();

    const SIZE: u64 = 64 * MIB;
    apply(&client, &claim("data", CLASS, SIZE, None))
        .await
        .unwrap();
    // Writing 16 MiB more than the claim asked for fails for want of space.
    let script = format!(
        "set -e; echo kept-token > /data/token; \
         if dd if=/dev/zero of=/data/fill bs=1M count={} 2>/tmp/dd.err; then echo fill=written; \
         else echo fill=refused; cat /tmp/dd.err; fi; rm -f /data/fill; sync",
        SIZE / MIB + 16
    );
    let (output, node) = run_pod(&client, "writer", "data", &script).await;
    assert!(
        output.contains("fill=refused") && output.contains("No space left on device"),
        "a pod cannot write more than the claim's size: {output}"
    );

    // The volume is on the node the scheduler picked for the pod.
    let pv = bound_volume(&client, "data").await;
    let affinity = serde_json::to_value(&pv.spec.as_ref().unwrap().node_affinity).unwrap();
    let term = &affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(
        (
            term["key"].as_str(),
            term["values"].as_array().map(Vec::len)
        ),
        (Some(TOPOLOGY_KEY), Some(1)),
        "node affinity: {affinity}"
    );
    assert_eq!(
        term["values"][0],
        node.as_str(),
        "node affinity: {affinity}"
    );
    let handle = volume_handle(&pv);
    assert_eq!(handle.split_once('.').map(|(_, n)| n), Some(node.as_str()));
    // One-node scenarios: the image is on this host.
    assert_eq!(node, FIRST_NODE);
    let image = std::fs::metadata(format!("{VOLUMES_DIR}/{handle}.img")).unwrap();
    assert_eq!(image.len(), SIZE, "the image has the claim's size");

    // Two new pods read what the first wrote, each waiting until it sees
    // the other's file: the volume is theirs at once, through one staging
    // pod (stagingPer: Node), where the writer had one of its own. Kubelet
    // unstages the writer's volume after the writer is gone: readers
    // started before that would use the writer's staging pod.
    wait_no_pav_pods_of_phase(&client, NAME, "staging", STEP)
        .await
        .unwrap();
    let reader = |me: &str, other: &str| {
        format!(
            "echo > /data/from-{me}; i=0; \
             while [ ! -e /data/from-{other} ] && [ $i -lt 500 ]; do sleep 0.2; i=$((i+1)); done; \
             [ -e /data/from-{other} ] && echo met; cat /data/token"
        )
    };
    let (script_a, script_b) = (reader("a", "b"), reader("b", "a"));
    let ((output_a, node_a), (output_b, node_b)) = tokio::join!(
        run_pod(&client, "reader-a", "data", &script_a),
        run_pod(&client, "reader-b", "data", &script_b),
    );
    for output in [&output_a, &output_b] {
        assert_eq!(
            output.split_whitespace().collect::<Vec<_>>(),
            ["met", "kept-token"]
        );
    }
    assert_eq!((node_a.as_str(), node_b.as_str()), (FIRST_NODE, FIRST_NODE));
    assert_eq!(
        observer.runs("staging"),
        2,
        "one staging pod for the writer, one shared by the readers: {:#?}",
        observer.seen()
    );

    finish(&client, &["data"], &images_before).await;
    eprintln!(
        "local_volume_is_on_its_node_holds_its_size_and_is_deleted: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volume_grows_while_its_pod_runs() {
    let client = cluster().await;
    let started = Instant::now();
    remove_snapshots(&client).await;
    let _observer = start_scenario(&client, NS, NAME, &objects()).await;
    let images_before = image_files();

    // mkfs.xfs makes no filesystem under 300 MB.
    const FIRST: u64 = 320 * MIB;
    const GROWN: u64 = 480 * MIB;
    apply(&client, &claim("growing", XFS_CLASS, FIRST, None))
        .await
        .unwrap();
    let script = "set -e; grep ' /data xfs ' /proc/mounts; \
                  while true; do echo size=$(( $(stat -f -c %b /data) * $(stat -f -c %S /data) )); sleep 1; done";
    apply(&client, &client_pod(NS, "user", "growing", script))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    if let Err(e) = wait_for(&pods, "user", STEP, "Running", |p| {
        pod_phase(p) == "Running"
    })
    .await
    {
        panic!(
            "{e}; pod events: {:#?}; claim events: {:#?}",
            event_lines(&client, NS, "user").await,
            event_lines(&client, NS, "growing").await
        );
    }
    let first = wait_until("the pod to print its size", STEP, || async {
        Ok(printed_sizes(&client, NS, "user").await.first().copied())
    })
    .await
    .unwrap();
    assert!(first <= FIRST && first > FIRST / 2, "{first}");

    // Stats: the kubelet measures the volume's own filesystem (pav-csi's
    // statvfs of the published /pav/volume), not the node's.
    let node = pods
        .get("user")
        .await
        .unwrap()
        .spec
        .unwrap()
        .node_name
        .unwrap();
    let (capacity, used) = wait_until("the kubelet's stats of the volume", STEP, || async {
        Ok(kubelet_volume_stats(&client, &node, NS, "user", "data").await)
    })
    .await
    .unwrap();
    assert!(
        capacity <= FIRST && capacity > FIRST / 2 && used < capacity,
        "the volume's size, not the node's: capacity {capacity}, used {used}"
    );

    if let Err(e) = grow_in_use(&client, NS, "growing", "user", GROWN).await {
        panic!(
            "{e}; claim events: {:#?}; pod events: {:#?}",
            event_lines(&client, NS, "growing").await,
            event_lines(&client, NS, "user").await
        );
    }
    let seen = wait_until("the pod to see the new size", STEP, || async {
        let last = printed_sizes(&client, NS, "user").await.first().copied();
        Ok(last.filter(|&size| size > FIRST))
    })
    .await
    .unwrap();
    assert!(seen <= GROWN, "{first} -> {seen}");
    let pv = bound_volume(&client, "growing").await;
    let image = std::fs::metadata(format!("{VOLUMES_DIR}/{}.img", volume_handle(&pv))).unwrap();
    assert_eq!(image.len(), GROWN, "the image grew to the claim's size");

    delete_and_wait(&pods, "user", STEP).await.unwrap();
    finish(&client, &["growing"], &images_before).await;
    eprintln!(
        "local_volume_grows_while_its_pod_runs: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volume_snapshot_restores_and_clones() {
    let client = cluster().await;
    let started = Instant::now();
    remove_snapshots(&client).await;
    let _observer = start_scenario(&client, NS, NAME, &objects()).await;
    let images_before = image_files();
    let (snapshots, contents) = snapshot_apis(&client).await;
    let contents_before = snapshot_contents(&contents).await;

    const SIZE: u64 = 64 * MIB;
    const LARGER: u64 = 96 * MIB;
    apply(&client, &claim("source", CLASS, SIZE, None))
        .await
        .unwrap();
    run_pod(
        &client,
        "writer",
        "source",
        "set -e; echo kept-token > /data/token; sync",
    )
    .await;

    let snapshot_yaml = format!(
        r#"
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: source-snapshot
  namespace: {NS}
spec:
  volumeSnapshotClassName: {NAME}
  source:
    persistentVolumeClaimName: source
"#
    );
    apply(&client, &snapshot_yaml).await.unwrap();
    let ready = wait_for(&snapshots, "source-snapshot", STEP, "readyToUse", |s| {
        s.data["status"]["readyToUse"] == true
    })
    .await;
    if let Err(e) = ready {
        panic!(
            "{e}; events: {:#?}",
            event_lines(&client, NS, "source-snapshot").await
        );
    }

    // Restored and cloned into larger claims: each holds the data and a
    // filesystem grown past the source's size.
    apply(
        &client,
        &claim(
            "restored",
            CLASS,
            LARGER,
            Some(("VolumeSnapshot", "source-snapshot")),
        ),
    )
    .await
    .unwrap();
    apply(
        &client,
        &claim(
            "cloned",
            CLASS,
            LARGER,
            Some(("PersistentVolumeClaim", "source")),
        ),
    )
    .await
    .unwrap();
    let read = "cat /data/token; echo size=$(( $(stat -f -c %b /data) * $(stat -f -c %S /data) ))";
    for (pod, claim) in [("read-restored", "restored"), ("read-clone", "cloned")] {
        let (output, _) = run_pod(&client, pod, claim, read).await;
        let mut lines = output.lines();
        assert_eq!(lines.next(), Some("kept-token"), "{claim}: {output}");
        let size: u64 = lines
            .next()
            .and_then(|l| l.strip_prefix("size="))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{claim}: {output}"));
        assert!(size > SIZE && size <= LARGER, "{claim}: {size} bytes");
    }

    delete_and_wait(&snapshots, "source-snapshot", STEP)
        .await
        .unwrap();
    wait_until("the snapshot's content to go", STEP, || async {
        Ok((snapshot_contents(&contents).await == contents_before).then_some(()))
    })
    .await
    .unwrap();
    finish(&client, &["restored", "cloned", "source"], &images_before).await;
    eprintln!(
        "local_volume_snapshot_restores_and_clones: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// The group snapshot scenario's claim label, and the example's
/// VolumeGroupSnapshotClass (groupsnapshotclass.yaml).
const GROUP_LABEL: &str = "e2e.pav.example.com/group";
const GROUP_CLASS: &str = "local-volumes-group";

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volumes_take_group_snapshots_of_several_claims() {
    let client = cluster().await;
    let started = Instant::now();
    remove_snapshots(&client).await;
    let observer = start_scenario(&client, NS, NAME, &objects()).await;
    let images_before = image_files();
    let (snapshots, contents) = snapshot_apis(&client).await;
    let contents_before = snapshot_contents(&contents).await;

    // Two claims labelled for the group, written by one pod: both on its
    // node, as a local-volumes group must be.
    const SIZE: u64 = 64 * MIB;
    const GROUP: &str = "pair";
    const CLAIMS: [&str; 2] = ["first", "second"];
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let label = serde_json::json!({"metadata": {"labels": {GROUP_LABEL: GROUP}}});
    for name in CLAIMS {
        apply(&client, &claim(name, CLASS, SIZE, None))
            .await
            .unwrap();
        claims
            .patch(name, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .unwrap();
    }
    let (_, node) = run_pod_with(
        &client,
        "writer",
        &[("first", "/first"), ("second", "/second")],
        "set -e; echo token-first > /first/token; echo token-second > /second/token; sync",
    )
    .await;
    // One-node scenarios: the images are on this host.
    assert_eq!(node, FIRST_NODE);
    let mut claim_of = BTreeMap::new();
    for name in CLAIMS {
        claim_of.insert(volume_handle(&bound_volume(&client, name).await), name);
    }

    let (group, members) =
        group_snapshots::take(&client, NS, GROUP, GROUP_CLASS, (GROUP_LABEL, GROUP), 2).await;
    observer.assert_succeeded("group-snapshot-creation");

    // The group's content: the handle the pod wrote,
    // groupsnapshot-<uid>.<node> (the CO names a group after its
    // VolumeGroupSnapshot's uid), and each claim's volume mapped to its
    // member snapshot-<uid>-<i>.<node>, of the claim's size.
    let uid = group.uid().expect("a stored object has a uid");
    let group_contents = v1_api(
        &client,
        NS,
        group_snapshots::API_GROUP,
        "VolumeGroupSnapshotContent",
    )
    .await;
    let group_content_name = group.data["status"]["boundVolumeGroupSnapshotContentName"]
        .as_str()
        .unwrap_or_else(|| panic!("a ready group names its content: {:#?}", group.data))
        .to_string();
    let group_content = group_contents.get(&group_content_name).await.unwrap();
    let status = &group_content.data["status"];
    assert_eq!(
        status["volumeGroupSnapshotHandle"],
        format!("groupsnapshot-{uid}.{FIRST_NODE}").as_str(),
        "{status:#}"
    );
    let mut member_of = BTreeMap::new();
    for info in status["volumeSnapshotInfoList"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let volume = info["volumeHandle"].as_str().unwrap_or_default();
        let claim = claim_of
            .get(volume)
            .unwrap_or_else(|| panic!("{volume:?} is no claim's volume: {status:#}"));
        assert_eq!(info["restoreSize"].as_u64(), Some(SIZE), "{info:#}");
        let snapshot = info["snapshotHandle"].as_str().unwrap_or_default();
        member_of.insert(*claim, snapshot.to_string());
    }
    let handles: BTreeSet<String> = (0..CLAIMS.len())
        .map(|i| format!("snapshot-{uid}-{i}.{FIRST_NODE}"))
        .collect();
    assert_eq!(
        (member_of.len(), member_of.values().cloned().collect()),
        (CLAIMS.len(), handles.clone()),
        "one member per claim: {status:#}"
    );
    // Each member a copy on the node.
    let member_images: BTreeSet<String> = handles
        .iter()
        .map(|h| format!("snapshots/{h}.img"))
        .collect();
    let images = image_files();
    assert!(
        images.is_superset(&member_images),
        "{member_images:?} not all in {images:?}"
    );

    // The member VolumeSnapshots, by their handles; each of its source's
    // size.
    let mut snapshot_named = BTreeMap::new();
    for member in &members {
        let snapshot = snapshots.get(member).await.unwrap();
        let size = snapshot.data["status"]["restoreSize"]
            .as_str()
            .and_then(quantity_bytes);
        assert_eq!(size, Some(SIZE), "{member}: {:#}", snapshot.data);
        let content = snapshot.data["status"]["boundVolumeSnapshotContentName"]
            .as_str()
            .unwrap_or_else(|| panic!("{member} is bound: {:#}", snapshot.data));
        let content = contents.get(content).await.unwrap();
        let handle = content.data["status"]["snapshotHandle"]
            .as_str()
            .unwrap_or_else(|| panic!("{member}'s content has a handle: {:#}", content.data));
        snapshot_named.insert(handle.to_string(), member.clone());
    }
    assert_eq!(
        snapshot_named.keys().cloned().collect::<BTreeSet<_>>(),
        handles
    );

    // The second claim's member restores into a claim holding its data.
    let second = &snapshot_named[&member_of["second"]];
    apply(
        &client,
        &claim("restored", CLASS, SIZE, Some(("VolumeSnapshot", second))),
    )
    .await
    .unwrap();
    let (output, _) = run_pod(&client, "read-restored", "restored", "cat /data/token").await;
    assert_eq!(output.trim(), "token-second");

    // Deleting the group deletes its members, their contents and copies.
    group_snapshots::delete_with_members(&client, NS, GROUP, &members).await;
    wait_gone(&group_contents, &group_content_name, STEP)
        .await
        .unwrap();
    observer
        .wait("group-snapshot-deletion", "Succeeded", STEP)
        .await
        .unwrap();
    wait_until("the members' contents to go", STEP, || async {
        Ok((snapshot_contents(&contents).await == contents_before).then_some(()))
    })
    .await
    .unwrap();
    wait_until("the members' copies to go", STEP, || async {
        Ok(image_files().is_disjoint(&member_images).then_some(()))
    })
    .await
    .unwrap();
    finish(&client, &["restored", "first", "second"], &images_before).await;
    eprintln!(
        "local_volumes_take_group_snapshots_of_several_claims: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// A pod with a 32 MiB inline volume of the driver at /data, running
/// `script`.
fn inline_pod(name: &str, script: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {NS}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [sh, -c, {script:?}]
      volumeMounts:
        - {{ name: scratch, mountPath: /data }}
  volumes:
    - name: scratch
      csi:
        driver: {NAME}
        volumeAttributes: {{ size: 32Mi }}
"#
    )
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volumes_serve_inline_volumes_with_their_pods() {
    let client = cluster().await;
    let started = Instant::now();
    let seen = start_scenario(&client, NS, NAME, &objects()).await;
    let driver = Api::<k8s_openapi::api::storage::v1::CSIDriver>::all(client.clone())
        .get(NAME)
        .await
        .unwrap();
    let modes = driver.spec.volume_lifecycle_modes.unwrap_or_default();
    assert_eq!(modes, ["Persistent", "Ephemeral"]);
    let inline_dir = Path::new(VOLUMES_DIR).join("inline");
    let inline_images = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&inline_dir)
            .map(|dir| dir.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    assert_eq!(inline_images(), Vec::<std::path::PathBuf>::new());

    let script = "echo token > /data/token && sync && cat /data/token && sleep 3600";
    apply(&client, &inline_pod("scratch", script))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let running = wait_for(&pods, "scratch", STEP, "Running", |p| {
        pod_phase(p) == "Running"
    })
    .await;
    if let Err(e) = running {
        panic!(
            "{e}; pod events: {:#?}; PaV pods: {:#?}",
            event_lines(&client, NS, "scratch").await,
            seen.seen()
        );
    }
    wait_until("the pod to write its token", STEP, || async {
        let output = logs(&client, NS, "scratch").await.unwrap_or_default();
        Ok((output.trim() == "token").then_some(()))
    })
    .await
    .unwrap();
    let images = inline_images();
    assert_eq!(images.len(), 1, "{images:?}");
    let name = images[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("csi-") && name.ends_with(".img"), "{name}");
    assert_eq!(std::fs::metadata(&images[0]).unwrap().len(), 32 * MIB);

    // The pod gone, so is its volume.
    delete_and_wait(&pods, "scratch", STEP).await.unwrap();
    wait_until("the inline image to go", STEP, || async {
        Ok(inline_images().is_empty().then_some(()))
    })
    .await
    .unwrap();
    seen.assert_succeeded("unstaging");
    finish(&client, &[], &image_files()).await;
    eprintln!(
        "local_volumes_serve_inline_volumes_with_their_pods: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// A VolumeFiles of the test's namespace holding `files` (`name: text`).
fn volume_files(name: &str, files: &[(&str, &str)]) -> String {
    let files: serde_json::Map<_, _> = (files.iter())
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
        .collect();
    serde_json::json!({
        "apiVersion": "examples.pav.albertofaria.github.io/v1",
        "kind": "VolumeFiles",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"files": files},
    })
    .to_string()
}

/// Applies `yaml` once the API server serves its kind (a CRD applied
/// with the scenario's objects is established a moment later).
async fn apply_when_served(client: &Client, yaml: &str) {
    wait_until("the VolumeFiles kind served", STEP, || async {
        Ok(apply(client, yaml).await.ok().map(|_| ()))
    })
    .await
    .unwrap();
}

/// A claim of `class` filled from VolumeFiles `source`.
fn populated_claim(name: &str, class: &str, bytes: u64, source: &str) -> String {
    claim(name, class, bytes, None)
        + &format!(
            "  dataSourceRef: {{ apiGroup: examples.pav.albertofaria.github.io, kind: VolumeFiles, name: {source} }}\n"
        )
}

/// The prime claims and population pods the populator left in pav's
/// namespace.
async fn population_leftovers(client: &Client) -> Vec<String> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let mut left: Vec<String> = (claims.list(&ListParams::default()).await.unwrap().items)
        .iter()
        .map(|c| format!("claim {}", c.name_any()))
        .collect();
    let pods = pav_pods(client, NAME).await.unwrap();
    left.extend(
        pods.iter()
            .filter(|p| p.labels().get(LABEL_PHASE).map(String::as_str) == Some("population"))
            .map(|p| format!("pod {}", p.name_any())),
    );
    left
}

/// An Immediate 1 MiB claim filled from VolumeFiles `source` holding
/// `files`, once its population failed (`PopulationFailed`).
async fn failing_claim(client: &Client, claim: &str, source: &str, files: &[(&str, &str)]) {
    apply(client, &volume_files(source, files)).await.unwrap();
    apply(
        client,
        &populated_claim(claim, IMMEDIATE_CLASS, MIB, source),
    )
    .await
    .unwrap();
    wait_event(client, NS, claim, &["PopulationFailed"], STEP)
        .await
        .unwrap();
}

/// Claims filled from VolumeFiles (`populatedFrom`, `volumePopulation`):
/// a WaitForFirstConsumer claim is filled, then bound, and its pod reads
/// the files; files that do not fit fail the population, which is
/// retried while the claim stays Pending and unbound, and deleting that
/// claim leaves no volume, image, prime claim or pod; a failing
/// population goes on across a restart of the CSI controller and succeeds
/// once the VolumeFiles is fixed (Immediate class).
#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volumes_fill_claims_from_volume_files() {
    let started = std::time::Instant::now();
    let client = cluster().await;
    remove_snapshots(&client).await;
    let _observer = start_scenario(&client, NS, NAME, &objects()).await;
    let images_before = image_files();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);

    // Filled, then bound: the pod reads the files.
    // A text with what Kubernetes expands in arguments ($(NAME), $$)
    // reaches the volume as written.
    let files = [
        ("hello", "world"),
        ("lines", "a\nb\n"),
        ("dollars", "$(HOME) $$ $x"),
    ];
    apply_when_served(&client, &volume_files("greeting", &files)).await;
    apply(
        &client,
        &populated_claim("filled", CLASS, 64 * MIB, "greeting"),
    )
    .await
    .unwrap();
    let script = "cat /data/hello; echo; cat /data/lines /data/dollars";
    let (output, _) = run_pod(&client, "reader", "filled", script).await;
    assert_eq!(
        output, "world\na\nb\n$(HOME) $$ $x",
        "the volume holds the files"
    );
    for reason in ["Provisioning", "Populating", "Populated"] {
        wait_event(&client, NS, "filled", &[reason], STEP)
            .await
            .unwrap();
    }

    // Files larger than the volume: the population fails and is retried,
    // the claim stays unbound; deleting it leaves nothing.
    // Eight files of 125,000 bytes (each one argument of at most 128 KiB)
    // in a 1 MiB ext4 volume, which has 966 KiB free.
    let chunk = "x".repeat(125_000);
    let names: Vec<String> = (0..8).map(|i| format!("part-{i}")).collect();
    let big: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), chunk.as_str())).collect();
    failing_claim(&client, "too-big", "big", &big).await;
    let claim = claims.get("too-big").await.unwrap();
    assert_eq!(
        (claim_phase(&claim), volume_name(&claim)),
        ("Pending", None),
        "a volume that was not filled is not bound"
    );
    delete_and_wait(&claims, "too-big", STEP).await.unwrap();

    // Failing, then the CSI controller restarts, then the VolumeFiles is
    // fixed: the population started over succeeds.
    failing_claim(&client, "retried", "later", &big).await;
    kill_component(&client, NAME, "csi-controller").await;
    apply(&client, &volume_files("later", &[("small", "fits")]))
        .await
        .unwrap();
    // The killed leader's populator Lease expires first.
    wait_for(&claims, "retried", 2 * STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    .unwrap();
    let (output, _) = run_pod(&client, "later-reader", "retried", "cat /data/small").await;
    assert_eq!(output, "fits");

    finish(&client, &["filled", "retried"], &images_before).await;
    wait_until("no prime claim or population pod", STEP, || async {
        let left = population_leftovers(&client).await;
        Ok(left.is_empty().then_some(()))
    })
    .await
    .unwrap();
    eprintln!(
        "local_volumes_fill_claims_from_volume_files: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
