//! Claims deleted together with the pods that use them, as users do with
//! one command (`kubectl delete namespace`, `kubectl delete -f app.yaml`,
//! or a pod and its claim with `--wait=false`): once the pods are gone the
//! claims are released, and external-provisioner calls DeleteVolume while
//! kubelet is still unstaging the volumes. Kubernetes does not order the
//! two for a driver without attach, so the driver must: PaV answers
//! DeleteVolume of a volume still staged FAILED_PRECONDITION (event
//! `DeletionWaitsForUnstaging` on the volume) until its unstaging pod has
//! run. Afterwards nothing is left: no volume, no image, no loop device
//! (of a deleted image neither), no mount, no PaV pod or directory.
//!
//! For examples/local-volumes (a PavProvisioner, whose deletion pod once
//! removed images still attached to a loop device, and whose unstaging
//! then left the device: every claim leaked one), examples/sparse-file
//! (a native driver) and examples/tmpfs deployed split (a controller
//! Deployment apart from the node plugins: each node removes its tmpfs
//! once it finds the volume deleted in the records).
//!
//! A PaV driver unstages in NodeUnpublishVolume (staging per client pod),
//! and the kubelet keeps a pod's object until its volumes are
//! unpublished, so the claim of a pod deleted gracefully is released only
//! once unstaging is done. A pod deleted with force (`kubectl delete
//! --force`, a node's pods garbage-collected) goes at once, while the
//! kubelet still unpublishes. The local-volumes scenario deletes its first
//! pod so, with its claim, and holds the unstaging pods at a [`Gate`]
//! until that volume's DeleteVolume has been refused: the deletion always
//! comes while the volume is staged, which a race on an idle node would
//! leave to chance.

use std::time::Duration;

use crate::example_driver::ExampleDriver;
use crate::gate::Gate;
use crate::*;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolume, PersistentVolumeClaim, Pod,
};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};

/// Claims in use when everything is deleted.
pub const CLAIMS: usize = 3;

/// One driver of the scenario: its name (a PaV provisioner's, or a CSI
/// driver's), StorageClass and what it keeps of a volume on its node.
struct Driver {
    name: &'static str,
    class: &'static str,
    on_node: OnNode,
    /// Whether the class waits for the first consumer, so that pinning
    /// each pod to a node puts its volume there. With an Immediate class
    /// the volume is made on the node the driver picks, and the pod is
    /// left to follow it.
    pods_choose_nodes: bool,
}

const LOCAL_VOLUMES: Driver = Driver {
    name: "local-volumes",
    class: "local-volumes",
    on_node: OnNode::Image("/var/lib/pav-local-volumes"),
    pods_choose_nodes: true,
};

/// sparse-file with its shipped Immediate class. (Its WaitForFirstConsumer
/// class cannot spread volumes over nodes: its one controller measures
/// only its own node's capacity and publishes 0 for the others.)
const SPARSE_FILE: Driver = Driver {
    name: sparse_file::DRIVER,
    class: "sparse-file",
    on_node: OnNode::Image(sparse_file::VOLUMES_DIR),
    pods_choose_nodes: false,
};

/// tmpfs split: its WaitForFirstConsumer class puts each volume on its
/// pod's node.
const TMPFS: Driver = Driver {
    name: TMPFS_EXAMPLE.driver,
    class: "tmpfs",
    on_node: OnNode::NodeDir(TMPFS_EXAMPLE.driver),
    pods_choose_nodes: true,
};

/// examples/tmpfs as its deploy directory installs it.
const TMPFS_EXAMPLE: ExampleDriver = ExampleDriver {
    example: "tmpfs",
    driver: "tmpfs.example.com",
    namespace: "tmpfs",
};

/// What a driver keeps of a volume on its node.
#[derive(Debug, Clone, Copy)]
enum OnNode {
    /// An image file `<dir>/<handle>.img`, attached to a loop device
    /// while staged.
    Image(&'static str),
    /// pav-csi's node directory of the volume (driver `<name>`'s default
    /// state directory), with the volume's tmpfs mounted on it.
    NodeDir(&'static str),
}

/// A volume's storage on its node: a path inside the node.
#[derive(Debug, Clone)]
struct Kept {
    node: LocalNode,
    path: String,
}

impl Kept {
    /// The path as this host sees it.
    fn host_path(&self) -> std::path::PathBuf {
        self.node.root.join(self.path.trim_start_matches('/'))
    }

    /// Whether something is mounted at the path in the node.
    fn mounted(&self) -> bool {
        let points = mount_points_of(&self.node).expect("the node's mount table");
        points.contains(&self.path)
    }
}

impl OnNode {
    /// Where volume `handle` is kept on `node`.
    fn kept(self, node: &LocalNode, handle: &str) -> Kept {
        let path = match self {
            OnNode::Image(dir) => format!("{dir}/{handle}.img"),
            OnNode::NodeDir(driver) => {
                format!("/var/lib/kubelet/plugins/{driver}/node-dirs/{handle}")
            }
        };
        Kept {
            node: node.clone(),
            path,
        }
    }

    /// What of `kept` is there: the file or directory, and its loop
    /// devices or its mount.
    fn left(self, kept: &Kept) -> Vec<String> {
        let path = kept.host_path();
        let mut left = Vec::new();
        if path.exists() {
            left.push(path.display().to_string());
        }
        match self {
            OnNode::Image(_) => left.extend(loop_devices_of(&path.display().to_string())),
            OnNode::NodeDir(_) if kept.mounted() => left.push(format!("{} (mounted)", kept.path)),
            OnNode::NodeDir(_) => {}
        }
        left
    }
}

fn claim(namespace: &str, name: &str, class: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: {namespace}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources: {{ requests: {{ storage: 64Mi }} }}
"#
    )
}

/// Loop devices of node 1 whose backing file is `image`, deleted or not
/// (`/sys/block/loopN/loop/backing_file`, which the kernel marks
/// `FILE (deleted)`). The path is the attaching process's: a staging pod
/// sees the images' directory elsewhere, so the file's name (a volume
/// handle, unique) is what is compared.
fn loop_devices_of(image: &str) -> Vec<String> {
    let name = format!("/{}", image.rsplit('/').next().unwrap_or(image));
    loop_devices(|backing| {
        let file = backing.strip_suffix(" (deleted)").unwrap_or(backing);
        file.ends_with(&name)
    })
    .expect("reading /sys/block")
}

/// What is left of the volumes `kept` on their nodes.
fn left_on_nodes(on_node: OnNode, kept: &[Kept]) -> Vec<String> {
    kept.iter().flat_map(|kept| on_node.left(kept)).collect()
}

/// A pod that keeps claim `claim` in use until deleted: on `node` when
/// given, else where the scheduler puts it (its volume's node).
fn user_pod(namespace: &str, name: &str, node: Option<&str>, claim: &str) -> String {
    // Scheduled, not bound by nodeName: a WaitForFirstConsumer claim gets
    // its volume on the node the scheduler picks.
    let affinity = node.map_or(String::new(), |node| {
        format!(
            "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchFields: [{{ key: metadata.name, operator: In, values: [{node}] }}]\n"
        )
    });
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: {name}, namespace: {namespace} }}
spec:
{affinity}  terminationGracePeriodSeconds: 1
  containers:
    - name: user
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "echo in use > /data/mark; exec sleep 3600"]
      volumeMounts: [{{ name: data, mountPath: /data }}]
  volumes:
    - name: data
      persistentVolumeClaim: {{ claimName: {claim} }}
"#
    )
}

/// Starts [`CLAIMS`] claims of `driver` in namespace `ns`, each used by a
/// running pod, the pods spread over `nodes` in turn (or following their
/// volumes, see [`Driver::pods_choose_nodes`]); returns their volumes'
/// names and what their nodes keep of them once all pods run.
async fn claims_in_use(
    client: &Client,
    ns: &str,
    driver: &Driver,
    nodes: &[LocalNode],
) -> (Vec<String>, Vec<Kept>) {
    for i in 0..CLAIMS {
        let (pod, claim_name) = (format!("user-{i}"), format!("data-{i}"));
        let node = (driver.pods_choose_nodes).then(|| nodes[i % nodes.len()].name.as_str());
        apply(client, &claim(ns, &claim_name, driver.class))
            .await
            .unwrap();
        apply(client, &user_pod(ns, &pod, node, &claim_name))
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let (mut volumes, mut kept_on_nodes) = (Vec::new(), Vec::new());
    for i in 0..CLAIMS {
        let (pod, claim) = (format!("user-{i}"), format!("data-{i}"));
        if let Err(e) = wait_for(&pods, &pod, STEP, "Running", |p| pod_phase(p) == "Running").await
        {
            panic!("{e}; events: {:#?}", event_lines(client, ns, &pod).await);
        }
        let volume = volume_name(&claims.get(&claim).await.unwrap()).expect("a bound claim");
        let pv = pvs.get(&volume).await.unwrap();
        let running = pods.get(&pod).await.unwrap();
        let on = running
            .spec
            .and_then(|s| s.node_name)
            .expect("a running pod's node");
        let node = nodes
            .iter()
            .find(|n| n.name == on)
            .unwrap_or_else(|| panic!("{pod} runs on {on}, none of {nodes:?}"));
        let handle = pv
            .spec
            .and_then(|s| s.csi)
            .expect("a CSI volume")
            .volume_handle;
        let kept = driver.on_node.kept(node, &handle);
        let held = driver.on_node.left(&kept);
        assert!(
            held.len() >= 2,
            "{kept:?}: the staged volume's storage, attached or mounted: {held:?}"
        );
        volumes.push(volume);
        kept_on_nodes.push(kept);
    }
    (volumes, kept_on_nodes)
}

/// The PaV unstaging pods' phase at the [`Gate`].
const UNSTAGING: &str = "unstaging";

/// `objects` with the PavProvisioner's unstaging pods first waiting at
/// the gate of scenario `name`: an init container of the pod's own image
/// that runs [`Gate::script`].
fn with_gated_unstaging(objects: &str, name: &str) -> String {
    let mut documents = crate::documents(objects).expect("the scenario's objects");
    for document in &mut documents {
        if document["kind"] != "PavProvisioner" {
            continue;
        }
        let pod = &mut document["spec"]["volumeUnstaging"]["podTemplate"]["spec"];
        let image = pod["containers"][0]["image"].clone();
        pod["initContainers"] = serde_json::json!([{
            "name": "gate",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", Gate::script(UNSTAGING)],
            "volumeMounts": [Gate::volume_mount()],
        }]);
        pod["volumes"]
            .as_array_mut()
            .expect("the unstaging pod's volumes")
            .push(Gate::volume(name));
    }
    documents
        .iter()
        .map(|document| serde_yaml::to_string(document).expect("YAML of JSON"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Waits until each of `volumes` has been refused deletion while staged
/// (event `DeletionWaitsForUnstaging` on the PV).
async fn wait_deletion_refused(client: &Client, volumes: &[String]) {
    for volume in volumes {
        if let Err(e) = wait_event(
            client,
            "default",
            volume,
            &["DeletionWaitsForUnstaging"],
            STEP,
        )
        .await
        {
            let events = event_lines(client, "default", volume).await;
            panic!(
                "{e}: DeleteVolume of {volume} was not refused while its unstaging pod was held; \
                 volume events: {events:#?}"
            );
        }
    }
}

/// Deletes one claim with its pod at once, then the namespace with the
/// others (their pods on `nodes` in turn), and waits until nothing of the
/// volumes is left. With `held_unstaging`, the first pod is deleted with
/// force and the unstaging pods wait at the gate until its volume's
/// deletion has been refused.
async fn delete_everything_at_once(
    client: &Client,
    ns: &str,
    driver: &Driver,
    nodes: &[LocalNode],
    held_unstaging: Option<&Gate>,
) {
    let (volumes, kept) = claims_in_use(client, ns, driver, nodes).await;

    // `kubectl delete pod,pvc --wait=false` (with the gate, `--force`):
    // both requests at once.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let background = DeleteParams::background();
    let pod_deletion = match held_unstaging {
        Some(_) => background.clone().grace_period(0),
        None => background.clone(),
    };
    let (pod, claim) = futures::join!(
        pods.delete("user-0", &pod_deletion),
        claims.delete("data-0", &background),
    );
    pod.unwrap();
    claim.unwrap();
    if let Some(gate) = held_unstaging {
        gate.wait_started(UNSTAGING, 1, STEP).await.unwrap();
        wait_deletion_refused(client, &volumes[..1]).await;
    }
    // `kubectl delete namespace`: its pods and claims go together.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.delete(ns, &background).await.unwrap();
    if let Some(gate) = held_unstaging {
        gate.release(UNSTAGING);
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for volume in &volumes {
        // external-provisioner retries a refused DeleteVolume with
        // backoff: a few rounds while the unstaging pods run.
        if let Err(e) = wait_gone(&pvs, volume, Duration::from_secs(300)).await {
            let events = event_lines(client, "default", volume).await;
            panic!("{e}; volume events: {events:#?}");
        }
    }
    wait_gone(&namespaces, ns, STEP).await.unwrap();
    wait_until("nothing of the volumes on their nodes", STEP, || async {
        let left = left_on_nodes(driver.on_node, &kept);
        if left.is_empty() {
            Ok(Some(()))
        } else {
            anyhow::bail!("left: {left:?}")
        }
    })
    .await
    .unwrap();
    assert_no_leaks(client, driver.name, STEP).await;
}

/// The local-volumes scenario in namespace `ns` with its pods on `nodes`
/// in turn: everything deleted at once, the deletion of a volume whose
/// unstaging waits refused, every volume deleted by one deletion pod after
/// its unstaging, nothing left.
pub async fn local_volumes_deleted_at_once(ns: &str, nodes: &[LocalNode]) {
    let client = cluster().await;
    let objects = [
        example_file("local-volumes", "provisioner.yaml"),
        example_file("local-volumes", "storageclass.yaml"),
    ]
    .join("\n---\n");
    let objects = with_gated_unstaging(&objects, ns);
    let observer = start_scenario(&client, ns, LOCAL_VOLUMES.name, &objects).await;
    // Closed only now: what an earlier run left is unstaged through the
    // open gate it left while start_scenario resets the namespace.
    let gate = Gate::on_nodes(ns, nodes);

    delete_everything_at_once(&client, ns, &LOCAL_VOLUMES, nodes, Some(&gate)).await;
    assert_eq!(observer.runs("deletion"), CLAIMS, "{:#?}", observer.seen());
    observer.assert_succeeded("unstaging");

    wait_no_pav_pods(&client, LOCAL_VOLUMES.name, STEP)
        .await
        .unwrap();
    delete(&client, &objects).await.unwrap();
    delete_provisioner(&client, LOCAL_VOLUMES.name, STEP)
        .await
        .unwrap();
    assert_no_leaks(&client, LOCAL_VOLUMES.name, STEP).await;
}

/// The sparse-file scenario in namespace `ns` on `nodes`: its Immediate
/// class puts each volume on a node of the driver's choosing, and its pod
/// follows.
pub async fn sparse_file_deleted_at_once(ns: &str, nodes: &[LocalNode]) {
    const FILES: [&str; 2] = ["driver.yaml", "storageclass.yaml"];
    let client = cluster().await;
    reset(&client, ns, SPARSE_FILE.name).await.unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    namespace(&client, ns).await.unwrap();
    sparse_file::install(&client, &FILES).await;

    delete_everything_at_once(&client, ns, &SPARSE_FILE, nodes, None).await;

    sparse_file::uninstall(&client, &FILES).await;
    assert_no_leaks(&client, SPARSE_FILE.name, STEP).await;
}

/// The tmpfs scenario in namespace `ns` with its pods on `nodes` in turn:
/// the driver deployed split, each node plugin unmounting and removing
/// the tmpfs of the volumes the controller deleted, whether it learns so
/// at an Unstage or later, from the records.
pub async fn tmpfs_deleted_at_once(ns: &str, nodes: &[LocalNode]) {
    const FILES: [&str; 2] = ["driver.yaml", "storageclass.yaml"];
    let client = cluster().await;
    reset(&client, ns, TMPFS.name).await.unwrap();
    TMPFS_EXAMPLE.uninstall(&client, &FILES).await;
    namespace(&client, ns).await.unwrap();
    TMPFS_EXAMPLE.install(&client, &FILES).await;

    delete_everything_at_once(&client, ns, &TMPFS, nodes, None).await;
    // The controller's records of the volumes went with them.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), TMPFS_EXAMPLE.namespace);
    let records = ListParams::default().labels("records.pav.albertofaria.github.io/kind=volume");
    let left = config_maps.list(&records).await.unwrap().items;
    assert!(left.is_empty(), "volume records left: {left:#?}");

    TMPFS_EXAMPLE.uninstall(&client, &FILES).await;
    assert_no_leaks(&client, TMPFS.name, STEP).await;
}
