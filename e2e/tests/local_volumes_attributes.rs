//! examples/local-volumes' storage capacity and mutable attributes, with
//! the real sidecars (external-provisioner with `--enable-capacity`,
//! external-resizer with VolumeAttributesClass support):
//!
//! - capacity: a CSIStorageCapacity object of the example's class appears
//!   for each node, in the pav namespace, with a plausible capacity (more
//!   than nothing, no more than the filesystem of the volumes' directory)
//!   and owned by the driver's Deployment; the CSIDriver says
//!   `storageCapacity: true`;
//! - modification: a claim created with a `mode: rw` class is written; moved
//!   to a `mode: ro` class, its class becomes current, the volume records
//!   the mode, and the next pod finds the volume read-only (the data still
//!   there); moved to a class with an unknown mode, the change is
//!   infeasible and nothing changes; moved back, pods write again.
//!
//! Each ends with the leak check, and no PaV pod of the provisioner left.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity, StorageClass};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use pav_e2e::sparse_file::client_pod;
use pav_e2e::*;

const NAME: &str = "local-volumes";
const NS: &str = "e2e-local-attributes";
/// The example's StorageClass.
const CLASS: &str = "local-volumes";
/// A class of the example's provisioner that binds at once (the example's
/// own waits for the first consumer).
const IMMEDIATE_CLASS: &str = "e2e-local-immediate";
/// Where the example keeps images on each node.
const VOLUMES_DIR: &str = "/var/lib/pav-local-volumes";
/// The label every pav node plugin reports its node under.
const TOPOLOGY_KEY: &str = "topology.pav.albertofaria.github.io/node";
/// Where pav records a volume's mutable parameters once modified.
const MUTABLE_PARAMETERS_KEY: &str = "pav.albertofaria.github.io/mutable-parameters";
/// The VolumeAttributesClasses of the scenario: the example's two modes
/// and one it refuses.
const RW: &str = "e2e-local-rw";
const RO: &str = "e2e-local-ro";
const BAD: &str = "e2e-local-bad";
const MIB: u64 = 1 << 20;

fn example(file: &str) -> String {
    example_file("local-volumes", file)
}

/// The example's provisioner and classes (its own and an `Immediate`
/// one), and three VolumeAttributesClasses.
fn objects() -> String {
    let class = |name: &str, mode: &str| {
        format!(
            "apiVersion: storage.k8s.io/v1\nkind: VolumeAttributesClass\nmetadata:\n  name: {name}\ndriverName: {NAME}\nparameters:\n  mode: {mode}\n"
        )
    };
    [
        example("provisioner.yaml"),
        example("storageclass.yaml"),
        format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {IMMEDIATE_CLASS}\nprovisioner: {NAME}\nvolumeBindingMode: Immediate\n"
        ),
        class(RW, "rw"),
        class(RO, "ro"),
        class(BAD, "rx"),
    ]
    .join("\n---\n")
}

/// Runs a client pod with `claim` at /data to completion; returns what it
/// printed, once it is deleted again.
async fn run_pod(client: &Client, name: &str, claim: &str, script: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    apply(client, &client_pod(NS, name, claim, script))
        .await
        .unwrap();
    let pod = match wait_for(&pods, name, STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await
    {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{e}; pod events: {:#?}; claim events: {:#?}",
            event_lines(client, NS, name).await,
            event_lines(client, NS, claim).await
        ),
    };
    let output = logs(client, NS, name).await.unwrap();
    assert_eq!(pod_phase(&pod), "Succeeded", "{name}: {output}");
    delete_and_wait(&pods, name, STEP).await.unwrap();
    output
}

/// The end of every scenario: claims deleted, their volumes gone, no PaV
/// pod of the provisioner, the provisioner removed, no leaks.
async fn finish(client: &Client, claims: &[&str]) {
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
    wait_no_pav_pods(client, NAME, STEP).await.unwrap();
    delete(client, &objects()).await.unwrap();
    delete_provisioner(client, NAME, STEP).await.unwrap();
    assert_no_leaks(client, NAME, Duration::from_secs(120)).await;
}

/// Free and total bytes of the filesystem holding `dir` on this host (the
/// first node of the one-node scenarios), as `df` reports them.
fn filesystem_bytes(dir: &str) -> (u64, u64) {
    std::fs::create_dir_all(dir).unwrap();
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=avail,size", dir])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<u64> = text
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 2, "df {dir}: {text}");
    (numbers[0], numbers[1])
}

/// The bytes the sparse images in `dir` and `dir`/inline may still
/// allocate (their size less their allocated blocks), as
/// examples/local-volumes' capacity step counts them.
fn promised_bytes(dir: &str) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let images = |dir: &Path| -> Vec<std::fs::Metadata> {
        std::fs::read_dir(dir)
            .map(|entries| entries.flatten().collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
            .filter_map(|e| e.metadata().ok())
            .collect()
    };
    let dir = Path::new(dir);
    (images(dir).into_iter().chain(images(&dir.join("inline"))))
        .map(|m| m.len().saturating_sub(m.blocks() * 512))
        .sum()
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volumes_publish_each_nodes_capacity() {
    let client = cluster().await;
    let started = Instant::now();
    let _observer = start_scenario(&client, NS, NAME, &objects()).await;

    let driver = Api::<CSIDriver>::all(client.clone())
        .get(NAME)
        .await
        .unwrap();
    assert_eq!(
        driver.spec.storage_capacity,
        Some(true),
        "the CSIDriver of a provisioner with storageCapacity"
    );

    // Nodes whose kubelet knows the driver's topology key.
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|n| n.labels().contains_key(TOPOLOGY_KEY))
        .map(|n| n.labels()[TOPOLOGY_KEY].clone())
        .collect();
    assert!(nodes.contains(&FIRST_NODE.to_owned()), "nodes: {nodes:?}");
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    // One per node for each class, whatever its binding mode (the
    // scheduler reads only WaitForFirstConsumer classes' objects, but a
    // user or a tool reads any).
    let per_node = wait_until(
        "a CSIStorageCapacity of each node and class",
        STEP * 2,
        || async {
            let found: Vec<(String, u64, CSIStorageCapacity)> = capacities
                .list(
                    &ListParams::default().labels(&format!("csi.storage.k8s.io/drivername={NAME}")),
                )
                .await?
                .items
                .into_iter()
                .filter_map(|c| {
                    let node = c
                        .node_topology
                        .as_ref()?
                        .match_labels
                        .as_ref()?
                        .get(TOPOLOGY_KEY)?
                        .clone();
                    let bytes = quantity_bytes(&c.capacity.as_ref()?.0)?;
                    Some((node, bytes, c))
                })
                .collect();
            let all = [CLASS, IMMEDIATE_CLASS].iter().all(|class| {
                nodes.iter().all(|n| {
                    (found.iter()).any(|(node, _, c)| node == n && c.storage_class_name == *class)
                })
            });
            Ok(all.then_some(found))
        },
    )
    .await;
    let per_node = match per_node {
        Ok(found) => found,
        Err(e) => panic!("{e}; {}", diagnosis(&client, NS, NAME).await),
    };
    let (_, total) = filesystem_bytes(VOLUMES_DIR);
    for (node, bytes, object) in &per_node {
        assert!(
            *bytes > 0 && *bytes <= total,
            "node {node}: {bytes} bytes, the filesystem has {total}"
        );
        let owner = object.owner_references();
        assert!(
            owner.iter().any(|o| o.kind == "Deployment"),
            "owned by the driver's Deployment: {owner:?}"
        );
    }
    // This host's answer is close to what df sees less what the sparse
    // images there may still take, as the example counts (pods and images
    // come and go meanwhile: within 10%, or 256 MiB).
    let here = per_node
        .iter()
        .find(|(node, _, _)| node == FIRST_NODE)
        .map(|(_, bytes, _)| *bytes)
        .unwrap();
    let (free, _) = filesystem_bytes(VOLUMES_DIR);
    let room = free.saturating_sub(promised_bytes(VOLUMES_DIR));
    assert!(
        here.abs_diff(room) <= (room / 10).max(256 * MIB),
        "{FIRST_NODE}: published {here} bytes; df says {free} free, {room} once the images there fill up"
    );

    let classes: Api<StorageClass> = Api::all(client.clone());
    delete_and_wait(&classes, IMMEDIATE_CLASS, STEP)
        .await
        .unwrap();
    finish(&client, &[]).await;
    eprintln!(
        "local_volumes_publish_each_nodes_capacity: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// A claim of the example's class with the VolumeAttributesClass `vac`.
fn claim(name: &str, vac: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: {NS}
spec:
  storageClassName: {CLASS}
  volumeAttributesClassName: {vac}
  accessModes: [ReadWriteOnce]
  resources: {{ requests: {{ storage: {} }} }}
"#,
        64 * MIB
    )
}

/// Moves claim `name` to the VolumeAttributesClass `vac`.
async fn move_to_class(claims: &Api<PersistentVolumeClaim>, name: &str, vac: &str) {
    let patch = serde_json::json!({ "spec": { "volumeAttributesClassName": vac } });
    claims
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The claim's current VolumeAttributesClass and its modification status.
fn class_status(pvc: &PersistentVolumeClaim) -> (Option<String>, Option<String>) {
    let status = pvc.status.as_ref();
    (
        status.and_then(|s| s.current_volume_attributes_class_name.clone()),
        status
            .and_then(|s| s.modify_volume_status.as_ref())
            .map(|m| m.status.clone()),
    )
}

/// The mode the volume of claim `name` records (pav's annotation once
/// modified, else its volume context).
async fn recorded_mode(client: &Client, claims: &Api<PersistentVolumeClaim>, name: &str) -> String {
    let pv_name = volume_name(&claims.get(name).await.unwrap()).expect("the claim is bound");
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&pv_name)
        .await
        .unwrap();
    let recorded = pv
        .annotations()
        .get(MUTABLE_PARAMETERS_KEY)
        .cloned()
        .or_else(|| {
            pv.spec
                .as_ref()?
                .csi
                .as_ref()?
                .volume_attributes
                .as_ref()?
                .get(MUTABLE_PARAMETERS_KEY)
                .cloned()
        })
        .unwrap_or_else(|| panic!("volume {pv_name} records no mutable parameters"));
    let parameters: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    parameters["mode"].as_str().unwrap_or_default().to_owned()
}

/// A pod's script: reads the token, then tries to write.
/// The write's redirection runs in a subshell whose stderr is /tmp/err:
/// the shell reports a redirection it cannot open on its own stderr,
/// before any redirection that follows it.
const READ_AND_WRITE: &str = "cat /data/token; if (echo more > /data/more) 2>/tmp/err; \
     then echo write=ok; else echo write=refused; cat /tmp/err; fi";

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volume_changes_mode_with_its_attributes_class() {
    let client = cluster().await;
    let started = Instant::now();
    let _observer = start_scenario(&client, NS, NAME, &objects()).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);

    apply(&client, &claim("data", RW)).await.unwrap();
    let output = run_pod(
        &client,
        "writer",
        "data",
        "echo kept-token > /data/token; sync",
    )
    .await;
    assert!(output.trim().is_empty(), "{output}");
    assert_eq!(recorded_mode(&client, &claims, "data").await, "rw");

    // Read-only: the class becomes current, the volume records it, and the
    // next staging mounts the volume read-only.
    move_to_class(&claims, "data", RO).await;
    let moved = wait_for(&claims, "data", STEP, "the ro class current", |pvc| {
        class_status(pvc).0.as_deref() == Some(RO)
    })
    .await;
    if let Err(e) = moved {
        panic!(
            "{e}; claim events: {:#?}",
            event_lines(&client, NS, "data").await
        );
    }
    assert_eq!(recorded_mode(&client, &claims, "data").await, "ro");
    let output = run_pod(&client, "reader", "data", READ_AND_WRITE).await;
    assert!(
        output.contains("kept-token")
            && output.contains("write=refused")
            && output.contains("Read-only file system"),
        "a volume in mode ro: {output}"
    );

    // An unknown mode is infeasible: refused before anything changed.
    move_to_class(&claims, "data", BAD).await;
    let refused = wait_for(&claims, "data", STEP, "the bad class infeasible", |pvc| {
        class_status(pvc).1.as_deref() == Some("Infeasible")
    })
    .await
    .unwrap();
    assert_eq!(class_status(&refused).0.as_deref(), Some(RO));
    assert_eq!(recorded_mode(&client, &claims, "data").await, "ro");

    // Back to rw: pods write again.
    move_to_class(&claims, "data", RW).await;
    wait_for(&claims, "data", STEP, "the rw class current", |pvc| {
        class_status(pvc) == (Some(RW.to_owned()), None)
    })
    .await
    .unwrap();
    assert_eq!(recorded_mode(&client, &claims, "data").await, "rw");
    let output = run_pod(&client, "rewriter", "data", READ_AND_WRITE).await;
    assert!(
        output.contains("kept-token") && output.contains("write=ok"),
        "a volume back in mode rw: {output}"
    );

    finish(&client, &["data"]).await;
    eprintln!(
        "local_volume_changes_mode_with_its_attributes_class: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
