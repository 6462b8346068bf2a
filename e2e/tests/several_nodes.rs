//! Scenarios only several nodes can show (`scripts/cluster-up --nodes 3`;
//! `scripts/e2e` adds the nodes before it runs these):
//!
//! - a creation pod on a node other than the CSI controller's: the node
//!   plugin of the creation pod's node collects what it wrote (`/pav/handle`),
//!   not the controller's;
//! - a ReadWriteMany claim used at once by client pods on two nodes: one
//!   staging pod on each node, each client sees its own node's staging, and
//!   each node unstages its own.
//!
//! Each ends with the leak check, on every node.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use pav_e2e::*;

/// The node the pod named `name` in `namespace` runs on, once scheduled.
async fn node_of(client: &Client, namespace: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = wait_for(&pods, name, STEP, "scheduled", |p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
    })
    .await
    .unwrap();
    pod.spec.and_then(|s| s.node_name).expect("scheduled")
}

/// The node of the running CSI controller pod of `provisioner`.
async fn controller_node(client: &Client, provisioner: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let listed = pods
        .list(&ListParams::default().labels(&format!("{LABEL_PROVISIONER}={provisioner}")))
        .await
        .unwrap();
    listed
        .items
        .iter()
        .filter(|p| {
            p.name_any()
                .starts_with(&format!("pav-{provisioner}-controller-"))
        })
        .find(|p| pod_phase(p) == "Running")
        .and_then(|p| p.spec.as_ref()?.node_name.clone())
        .unwrap_or_else(|| panic!("no running CSI controller pod of {provisioner}"))
}

/// A client pod on `node` that reads `/data/greeting` of claim `claim`
/// and keeps running until deleted.
fn client_pod(namespace: &str, name: &str, node: &str, claim: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: {name}, namespace: {namespace} }}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
    - name: read
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "cat /data/greeting; exec sleep 3600"]
      volumeMounts: [{{ name: data, mountPath: /data }}]
  volumes:
    - name: data
      persistentVolumeClaim: {{ claimName: {claim} }}
"#
    )
}

fn claim(namespace: &str, name: &str, class: &str, access_mode: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{ name: {name}, namespace: {namespace} }}
spec:
  storageClassName: {class}
  accessModes: [{access_mode}]
  resources: {{ requests: {{ storage: 1Mi }} }}
"#
    )
}

/// Creates claim `name` of `class` with `access_mode` and waits until it
/// is bound; returns its volume's name.
async fn bound_claim(
    client: &Client,
    namespace: &str,
    name: &str,
    class: &str,
    access_mode: &str,
) -> String {
    apply(client, &claim(namespace, name, class, access_mode))
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    match wait_for(&claims, name, STEP, "Bound", |c| claim_phase(c) == "Bound").await {
        Ok(pvc) => volume_name(&pvc).expect("a bound claim names its volume"),
        Err(e) => panic!(
            "{e}; claim events: {:#?}",
            event_lines(client, namespace, name).await
        ),
    }
}

/// Waits until the first line of pod `name`'s log is there; returns it.
async fn first_line(client: &Client, namespace: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    if let Err(e) = wait_for(&pods, name, STEP, "Running", |p| pod_phase(p) == "Running").await {
        panic!(
            "{e}; pod events: {:#?}",
            event_lines(client, namespace, name).await
        );
    }
    wait_until(&format!("a line in {name}'s log"), STEP, || async {
        let log = logs(client, namespace, name).await?;
        Ok(log.lines().next().map(str::to_owned))
    })
    .await
    .unwrap()
}

/// The end of every scenario here: once no PaV pod of `provisioner` is
/// left, its StorageClass (named after it) and the provisioner go, then
/// the leak check on every node.
async fn end_scenario(client: &Client, provisioner: &str) {
    wait_no_pav_pods(client, provisioner, STEP).await.unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    delete_and_wait(&classes, provisioner, STEP).await.unwrap();
    delete_provisioner(client, provisioner, STEP).await.unwrap();
    assert_no_leaks(client, provisioner, Duration::from_secs(120)).await;
}

/// Deletes the claim `name` and waits until its volume `volume` is gone.
async fn delete_claim(client: &Client, namespace: &str, name: &str, volume: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    delete_and_wait(&claims, name, STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    if let Err(e) = wait_gone(&pvs, volume, STEP).await {
        panic!(
            "{e}; volume events: {:#?}",
            event_lines(client, "default", volume).await
        );
    }
}

const CREATION: &str = "e2e-creation-elsewhere";

/// The creation pod runs on the node the StorageClass names and writes
/// that node's name into the handle it exports; staging writes a greeting.
const CREATION_OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-creation-elsewhere
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
    podTemplate:
      spec:
        nodeSelector: { kubernetes.io/hostname: "{{ params.creationNode }}" }
        containers:
          - name: create
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            env:
              - name: NODE
                valueFrom: { fieldRef: { fieldPath: spec.nodeName } }
            command: [sh, -c, 'printf "made-on-%s-%s" "$NODE" {{ pvc.metadata.uid | tobash }} > /pav/handle']
  volumeStaging:
    podTemplate:
      spec:
        restartPolicy: Never
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, 'mkdir -p /pav/volume && echo {{ handle | tobash }} > /pav/volume/greeting']
"#;

const SHARED: &str = "e2e-shared-across-nodes";

/// Each staging pod writes the name of the node it runs on.
const SHARED_OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-shared-across-nodes
spec:
  provisioningModes: [Dynamic]
  volumeValidation:
    accessModes: [ReadWriteMany]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeStaging:
    podTemplate:
      spec:
        restartPolicy: Never
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            env:
              - name: NODE
                valueFrom: { fieldRef: { fieldPath: spec.nodeName } }
            command: [sh, -c, 'mkdir -p /pav/volume && echo "staged on $NODE" > /pav/volume/greeting']
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-shared-across-nodes
provisioner: e2e-shared-across-nodes
"#;

const STALLED: &str = "e2e-node-stopped-mid-staging";

/// Staging on the node the StorageClass names never finishes; elsewhere it
/// writes `ok`.
const STALLED_OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-node-stopped-mid-staging
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeStaging:
    podTemplate:
      spec:
        restartPolicy: Never
        terminationGracePeriodSeconds: 1
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            env:
              - name: NODE
                valueFrom: { fieldRef: { fieldPath: spec.nodeName } }
            command:
              - sh
              - -c
              - |
                if [ "$NODE" = {{ params.stallOn | tobash }} ]; then exec sleep 3600; fi
                mkdir -p /pav/volume && echo ok > /pav/volume/greeting
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-node-stopped-mid-staging
provisioner: e2e-node-stopped-mid-staging
parameters:
  stallOn: pav-node-3
"#;

const DELETED: &str = "e2e-node-deleted";

/// Staging writes `ok`.
const DELETED_OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-node-deleted
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeStaging:
    podTemplate:
      spec:
        restartPolicy: Never
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "mkdir -p /pav/volume && echo ok > /pav/volume/greeting"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-node-deleted
provisioner: e2e-node-deleted
"#;

const TAINTED: &str = "e2e-tainted-node";

/// Staging writes `ok`; the StorageClass is the same as [`DELETED`]'s.
fn tainted_objects() -> String {
    DELETED_OBJECTS.replace(DELETED, TAINTED)
}

/// Starts extra node K again when dropped, so a failing scenario does not
/// leave it stopped for the next.
struct StartAgain(u32);

impl Drop for StartAgain {
    fn drop(&mut self) {
        if let Err(err) = faults::node("start", self.0) {
            eprintln!("starting node {} again: {err:#}", self.0);
        }
    }
}

/// Uncordons and untaints node `.0` when dropped, even when the scenario
/// fails.
struct Untaint(String);

impl Drop for Untaint {
    fn drop(&mut self) {
        let node = self.0.clone();
        let patch = serde_json::json!({ "spec": { "unschedulable": null, "taints": null } });
        // Drop is synchronous and the test's runtime is busy running it: a
        // client of its own, on a runtime of its own.
        let done = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(async move {
                    Api::<Node>::all(cluster().await)
                        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                })
        })
        .join();
        if !matches!(done, Ok(Ok(_))) {
            eprintln!("untainting {}: {done:?}", self.0);
        }
    }
}

/// Named so that `--skip several_nodes::` leaves them out of a one-node run.
mod several_nodes {
    use super::*;
    use pav_e2e::deleted_while_staged::{
        local_volumes_deleted_at_once, sparse_file_deleted_at_once, tmpfs_deleted_at_once,
    };

    /// deleted_while_staged.rs's scenarios on three nodes: local-volumes
    /// with each claim's pod on its own node, so that each node unstages
    /// one volume while the claims are deleted; sparse-file with each pod
    /// on its volume's node, wherever the driver made it.
    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn local_volumes_claims_on_three_nodes_deleted_with_their_pods_leave_nothing() {
        three_nodes();
        let started = Instant::now();
        let nodes = local_nodes().expect("reading the cluster's nodes");
        local_volumes_deleted_at_once("e2e-deleted-staged-local-3", &nodes).await;
        eprintln!(
            "local_volumes_claims_on_three_nodes_deleted_with_their_pods_leave_nothing: {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn sparse_file_claims_on_three_nodes_deleted_with_their_pods_leave_nothing() {
        three_nodes();
        let started = Instant::now();
        let nodes = local_nodes().expect("reading the cluster's nodes");
        sparse_file_deleted_at_once("e2e-deleted-staged-sparse-3", &nodes).await;
        eprintln!(
            "sparse_file_claims_on_three_nodes_deleted_with_their_pods_leave_nothing: {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    /// examples/tmpfs deployed split: a controller Deployment and a node
    /// plugin on each node, sharing records in ConfigMaps; each claim's
    /// volume a tmpfs on its pod's node, all deleted at once.
    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn tmpfs_split_claims_on_three_nodes_deleted_with_their_pods_leave_nothing() {
        three_nodes();
        let started = Instant::now();
        let nodes = local_nodes().expect("reading the cluster's nodes");
        tmpfs_deleted_at_once("e2e-deleted-staged-tmpfs-3", &nodes).await;
        eprintln!(
            "tmpfs_split_claims_on_three_nodes_deleted_with_their_pods_leave_nothing: {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn creation_pod_on_another_node_than_the_csi_controller() {
        let nodes = three_nodes();
        let client = cluster().await;
        let started = Instant::now();
        let ns = CREATION;
        let observer = start_scenario(&client, ns, CREATION, CREATION_OBJECTS).await;

        let controller = controller_node(&client, CREATION).await;
        let elsewhere = nodes
            .iter()
            .find(|node| **node != controller)
            .expect("three nodes")
            .clone();
        apply(
            &client,
            &format!(
                "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{ name: {CREATION} }}\n\
                 provisioner: {CREATION}\nparameters: {{ creationNode: {elsewhere} }}\n"
            ),
        )
        .await
        .unwrap();
        let volume = bound_claim(&client, ns, "data", CREATION, "ReadWriteOnce").await;
        observer.assert_succeeded("creation");

        // The handle came from the creation pod's node, through its node plugin.
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let handle = pvs
            .get(&volume)
            .await
            .unwrap()
            .spec
            .and_then(|s| s.csi)
            .map(|csi| csi.volume_handle)
            .expect("a CSI volume");
        assert!(
            handle.starts_with(&format!("made-on-{elsewhere}-")),
            "handle {handle:?}: made on {elsewhere}, the controller runs on {controller}"
        );

        // And the volume is usable on the controller's node.
        apply(&client, &client_pod(ns, "reader", &controller, "data"))
            .await
            .unwrap();
        assert_eq!(first_line(&client, ns, "reader").await, handle);
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        delete_and_wait(&pods, "reader", STEP).await.unwrap();
        delete_claim(&client, ns, "data", &volume).await;

        end_scenario(&client, CREATION).await;
        eprintln!(
            "creation_pod_on_another_node_than_the_csi_controller: created on {elsewhere}, controller on {controller}, {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn read_write_many_claim_on_two_nodes_at_once() {
        let nodes = three_nodes();
        let client = cluster().await;
        let started = Instant::now();
        let ns = SHARED;
        let observer = start_scenario(&client, ns, SHARED, SHARED_OBJECTS).await;

        let volume = bound_claim(&client, ns, "shared", SHARED, "ReadWriteMany").await;
        let (first, second) = (&nodes[1], &nodes[2]);
        apply(&client, &client_pod(ns, "reader-a", first, "shared"))
            .await
            .unwrap();
        apply(&client, &client_pod(ns, "reader-b", second, "shared"))
            .await
            .unwrap();
        assert_eq!(node_of(&client, ns, "reader-a").await, *first);
        // Both run at once, each on the staging of its own node.
        assert_eq!(
            first_line(&client, ns, "reader-a").await,
            format!("staged on {first}")
        );
        assert_eq!(
            first_line(&client, ns, "reader-b").await,
            format!("staged on {second}")
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        for reader in ["reader-a", "reader-b"] {
            let pod = pods.get(reader).await.unwrap();
            assert_eq!(pod_phase(&pod), "Running", "{reader} still runs");
        }
        let staged = observer.pods("staging", "Succeeded");
        assert_eq!(staged.len(), 2, "one staging pod per node: {staged:?}");

        // Each node unstages its own when its client goes; the other keeps it.
        delete_and_wait(&pods, "reader-a", STEP).await.unwrap();
        let on_second = local_nodes()
            .unwrap()
            .into_iter()
            .find(|node| node.name == *second)
            .expect("the second node");
        let mounts = pav_mounts_of(&on_second).unwrap();
        assert!(
            mounts.iter().any(|m| m.contains(&volume)),
            "{second} still publishes {volume} while reader-b runs: {mounts:#?}"
        );
        delete_and_wait(&pods, "reader-b", STEP).await.unwrap();
        delete_claim(&client, ns, "shared", &volume).await;

        end_scenario(&client, SHARED).await;
        eprintln!(
            "read_write_many_claim_on_two_nodes_at_once: {first} and {second}, {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn node_stopped_while_its_staging_pod_runs() {
        let nodes = three_nodes();
        let client = cluster().await;
        let started = Instant::now();
        let ns = STALLED;
        let observer = start_scenario(&client, ns, STALLED, STALLED_OBJECTS).await;
        let (healthy, stopped) = (&nodes[1], &nodes[2]);
        assert_eq!(
            stopped, "pav-node-3",
            "the StorageClass stalls staging there"
        );

        let volume = bound_claim(&client, ns, "data", STALLED, "ReadWriteOnce").await;
        apply(&client, &client_pod(ns, "reader", stopped, "data"))
            .await
            .unwrap();
        observer.wait("staging", "Running", STEP).await.unwrap();

        // The node's kubelet and containerd die mid-staging; the client pod
        // is deleted by force (its node cannot confirm) and comes back on
        // another node, where the volume is staged and usable.
        faults::node("stop", 3).unwrap();
        let stopped_node_back = StartAgain(3);
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        pods.delete("reader", &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
        wait_gone(&pods, "reader", STEP).await.unwrap();
        apply(&client, &client_pod(ns, "reader-again", healthy, "data"))
            .await
            .unwrap();
        assert_eq!(first_line(&client, ns, "reader-again").await, "ok");
        delete_and_wait(&pods, "reader-again", STEP).await.unwrap();

        // Once the node is back, what it was doing for the deleted client
        // pod is undone: no staging pod left, nothing mounted, and the
        // claim's volume can go.
        drop(stopped_node_back);
        wait_no_pav_pods(&client, STALLED, STEP).await.unwrap();
        delete_claim(&client, ns, "data", &volume).await;
        end_scenario(&client, STALLED).await;
        eprintln!(
            "node_stopped_while_its_staging_pod_runs: {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn node_deleted_while_it_holds_a_volume() {
        let nodes = three_nodes();
        let client = cluster().await;
        let started = Instant::now();
        let ns = DELETED;
        start_scenario(&client, ns, DELETED, DELETED_OBJECTS).await;
        let gone = &nodes[2];
        assert_eq!(gone, "pav-node-3");

        let volume = bound_claim(&client, ns, "data", DELETED, "ReadWriteOnce").await;
        apply(&client, &client_pod(ns, "reader", gone, "data"))
            .await
            .unwrap();
        assert_eq!(first_line(&client, ns, "reader").await, "ok");

        // The machine goes away, then its Node object: the cluster forgets
        // the pods bound to it, and the volume can be deleted.
        faults::node("stop", 3).unwrap();
        let machines = Api::<Node>::all(client.clone());
        machines
            .delete(gone, &DeleteParams::default())
            .await
            .unwrap();
        // The machine is gone for good: its containers and mounts with it.
        faults::node("remove", 3).unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        if let Err(e) = wait_gone(&pods, "reader", Duration::from_secs(180)).await {
            panic!("{e}: the client pod of a deleted node stays");
        }
        wait_no_pav_pods(&client, DELETED, STEP).await.unwrap();
        delete_claim(&client, ns, "data", &volume).await;
        let plugins: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
        let on_gone_node: Vec<String> = plugins
            .list(&ListParams::default().fields(&format!("spec.nodeName={gone}")))
            .await
            .unwrap()
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        assert!(
            on_gone_node.is_empty(),
            "pav's pods of the deleted node stay: {on_gone_node:?}"
        );
        end_scenario(&client, DELETED).await;

        // A new machine of the same name joins, for the scenarios after.
        faults::node("add", 3).unwrap();
        eprintln!(
            "node_deleted_while_it_holds_a_volume: {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn cordoned_and_tainted_node() {
        let nodes = three_nodes();
        let client = cluster().await;
        let started = Instant::now();
        let ns = TAINTED;
        let observer = start_scenario(&client, ns, TAINTED, &tainted_objects()).await;
        let tainted = nodes[1].clone();

        // Nothing new may be scheduled there, and what runs there without
        // tolerating `e2e=tainted:NoExecute` is evicted.
        let machines = Api::<Node>::all(client.clone());
        let taint = serde_json::json!({
            "spec": {
                "unschedulable": true,
                "taints": [{ "key": "e2e", "value": "tainted", "effect": "NoExecute" }]
            }
        });
        machines
            .patch(&tainted, &PatchParams::default(), &Patch::Merge(&taint))
            .await
            .unwrap();
        let untaint = Untaint(tainted.clone());

        let volume = bound_claim(&client, ns, "data", TAINTED, "ReadWriteOnce").await;
        // A client pod that tolerates the taint runs there: its staging pod
        // must run there too.
        let tolerating = client_pod(ns, "reader", &tainted, "data").replace(
            "  terminationGracePeriodSeconds: 1\n",
            "  terminationGracePeriodSeconds: 1\n  tolerations: [{ key: e2e, operator: Exists }]\n",
        );
        apply(&client, &tolerating).await.unwrap();
        assert_eq!(first_line(&client, ns, "reader").await, "ok");
        observer.assert_succeeded("staging");
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        delete_and_wait(&pods, "reader", STEP).await.unwrap();
        delete_claim(&client, ns, "data", &volume).await;
        wait_no_pav_pods(&client, TAINTED, STEP).await.unwrap();
        drop(untaint);
        end_scenario(&client, TAINTED).await;
        eprintln!(
            "cordoned_and_tainted_node: {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
}
