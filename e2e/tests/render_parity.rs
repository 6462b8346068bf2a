//! `pav render` previews the pods that run: for a real claim and client
//! pod, every pod the driver created (validation, creation, staging,
//! unstaging, deletion) equals what `pav render` prints for the same objects (the
//! PavProvisioner, claim, StorageClass, PersistentVolume, Node and client
//! pod read back from the cluster, and the target path kubelet uses), once
//! the API server has filled in its defaults: the rendered pod goes through
//! a server-side dry run, and the two whole pods are compared, with only
//! what the API server decides per object (uid, timestamps, the token
//! volume's random suffix) set aside.
//!
//! Runs the pav binary that `scripts/e2e-image` built
//! (`$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/pav`), or
//! `$PAV_BINARY`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use pav_e2e::*;
use serde_json::Value;

const PROVISIONER: &str = "e2e-render-parity";
const NAMESPACE: &str = "e2e-render-parity";

const OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-render-parity
spec:
  provisioningModes: [Dynamic]
  volumeValidation:
    podTemplate:
      spec:
        containers:
          - name: validate
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "test {{ params.greeting | tobash }} != ''"]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
    timeout: 90s
    podTemplate:
      metadata:
        labels:
          e2e: render-parity
        annotations:
          e2e/claim: "{{ pvc.metadata.name }}"
      spec:
        containers:
          - name: create
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo creating {{ pvc.metadata.name | tobash }}"]
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command:
              - sh
              - -c
              - |
                mkdir -p /pav/volume
                printf '%s\n' {{ params.greeting | tobash }} > /pav/volume/greeting
  volumeDeletion:
    podTemplate:
      spec:
        containers:
          - name: delete
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo deleting {{ defaultHandle | tobash }}"]
  volumeUnstaging:
    podTemplate:
      spec:
        containers:
          - name: unstage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo unstaging {{ pvc.metadata.name | tobash }}"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-render-parity
provisioner: e2e-render-parity
parameters:
  greeting: "rendered as run"
"#;

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: e2e-render-parity
spec:
  storageClassName: e2e-render-parity
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Mi
"#;

const CLIENT: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: reader
  namespace: e2e-render-parity
spec:
  restartPolicy: Never
  containers:
    - name: reader
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [cat, /data/greeting]
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: data
"#;

/// The first version seen of every PaV pod of the provisioner: the pod as
/// the driver created it, before the node plugin annotates it.
#[derive(Clone, Default)]
struct FirstSeen(Arc<Mutex<HashMap<String, Pod>>>);

impl FirstSeen {
    fn start(client: &Client) -> FirstSeen {
        FirstSeen::start_for(client, PROVISIONER)
    }

    /// The first version of every PaV pod of `provisioner`.
    fn start_for(client: &Client, provisioner: &str) -> FirstSeen {
        let seen = FirstSeen::default();
        let record = seen.clone();
        let api: Api<Pod> = Api::all(client.clone());
        let config = watcher::Config::default()
            .labels(&format!("{LABEL_PROVISIONER}={provisioner},{LABEL_PHASE}"));
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config));
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                    let mut seen = record.0.lock().expect("not poisoned");
                    seen.entry(pod.name_any()).or_insert(pod);
                }
            }
        });
        seen
    }

    fn of_phase(&self, phase: &str) -> Vec<Pod> {
        let seen = self.0.lock().expect("not poisoned");
        seen.values()
            .filter(|pod| pod.labels().get(LABEL_PHASE).map(String::as_str) == Some(phase))
            .cloned()
            .collect()
    }
}

/// Writes `object` as YAML to `dir/name`, without what only the API server
/// keeps (managed fields), and returns the path.
fn object_file<T: serde::Serialize>(dir: &Path, name: &str, object: &T) -> String {
    let mut json = serde_json::to_value(object).unwrap();
    if let Some(meta) = json["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    let path = dir.join(name);
    std::fs::write(&path, serde_yaml::to_string(&json).unwrap()).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `pav render FILE --phase PHASE ARGS...`: its one pod.
fn rendered_pod(provisioner: &str, phase: &str, args: &[&str]) -> Value {
    let binary = pav_binary();
    let output = std::process::Command::new(&binary)
        .args(["render", provisioner, "--phase", phase])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", binary.display()));
    assert!(
        output.status.success(),
        "pav render --phase {phase}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Value = serde_yaml::from_slice(&output.stdout).unwrap();
    let pods = printed["pods"].as_array().expect("pods").clone();
    assert_eq!(pods.len(), 1, "{phase}: {printed:#}");
    pods[0].clone()
}

/// `pod` after a server-side dry run of its creation: with the defaults
/// and admission changes (the service account token volume) the API
/// server applies to a pod it creates. The live pod of that name is gone
/// by now, so the name is free.
async fn dry_run(client: &Client, pod: &Value) -> Value {
    let pod: Pod = serde_json::from_value(pod.clone()).unwrap();
    let namespace = pod.namespace().expect("rendered pods name their namespace");
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let created = api
        .create(
            &kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod,
        )
        .await
        .unwrap_or_else(|e| panic!("dry run of {}: {e}", pod.name_any()));
    serde_json::to_value(created).unwrap()
}

/// What the API server decides for each object on its own, set aside: its
/// identity and times, status, and the random suffix of the service
/// account token volume (`kube-api-access-xxxxx`).
fn comparable(mut pod: Value) -> Value {
    let meta = pod["metadata"].as_object_mut().expect("metadata");
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
    ] {
        meta.remove(field);
    }
    pod.as_object_mut().expect("a pod").remove("status");
    let is_token_volume = |name: &str| {
        name.strip_prefix("kube-api-access-").is_some_and(|suffix| {
            suffix.len() == 5
                && suffix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
    };
    let rename = |name: &mut Value| {
        if name.as_str().is_some_and(is_token_volume) {
            *name = Value::from("kube-api-access");
        }
    };
    for volume in pod["spec"]["volumes"].as_array_mut().into_iter().flatten() {
        rename(&mut volume["name"]);
    }
    for kind in ["initContainers", "containers"] {
        for container in pod["spec"][kind].as_array_mut().into_iter().flatten() {
            for mount in container["volumeMounts"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                rename(&mut mount["name"]);
            }
        }
    }
    pod
}

/// The live pod of `phase` (as first created) equals the rendered one
/// after a dry run: the whole pod, so an extra container, volume, env
/// entry, toleration or privilege on either side fails.
async fn assert_same_pod(client: &Client, phase: &str, rendered: &Value, live: &Pod) {
    let expected = comparable(dry_run(client, rendered).await);
    let live = comparable(serde_json::to_value(live).unwrap());
    if expected != live {
        panic!(
            "{phase} pod: rendered (after a dry run) and live differ\nrendered:\n{}\nlive:\n{}",
            serde_yaml::to_string(&expected).unwrap(),
            serde_yaml::to_string(&live).unwrap()
        );
    }
}

/// The one pod of `phase` the driver created.
fn the_pod_of(first_seen: &FirstSeen, phase: &str) -> Pod {
    let pods = first_seen.of_phase(phase);
    assert_eq!(pods.len(), 1, "{phase} pods seen: {pods:#?}");
    pods.into_iter().next().unwrap()
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn render_prints_the_pods_the_driver_creates() {
    let client = cluster().await;
    reset(&client, NAMESPACE, PROVISIONER).await.unwrap();
    namespace(&client, NAMESPACE).await.unwrap();
    let first_seen = FirstSeen::start(&client);
    let observer = PodObserver::start(&client, PROVISIONER);
    apply(&client, OBJECTS).await.unwrap();
    wait_provisioner_ready(&client, PROVISIONER, STEP)
        .await
        .unwrap();

    apply(&client, CLAIM).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let pvc = wait_for(&claims, "data", STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    .unwrap();
    apply(&client, CLIENT).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let reader = wait_for(&pods, "reader", STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await
    .unwrap();
    assert_eq!(pod_phase(&reader), "Succeeded", "{:?}", reader.status);
    observer.assert_succeeded("creation");
    observer.assert_succeeded("staging");

    // The objects as they are now, as `pav render` reads them.
    let dir = tempfile_dir();
    let provisioner = provisioners(&client)
        .await
        .unwrap()
        .get(PROVISIONER)
        .await
        .unwrap();
    let provisioner_file = object_file(&dir, "provisioner.yaml", &provisioner);
    let sc: StorageClass = Api::all(client.clone()).get(PROVISIONER).await.unwrap();
    let pv_name = volume_name(&pvc).unwrap();
    let pv: PersistentVolume = Api::all(client.clone()).get(&pv_name).await.unwrap();
    let pvc_file = object_file(&dir, "pvc.yaml", &claims.get("data").await.unwrap());
    let sc_file = object_file(&dir, "sc.yaml", &sc);
    let pv_file = object_file(&dir, "pv.yaml", &pv);
    let client_file = object_file(&dir, "client.yaml", &reader);

    // The staging pod is pinned to the client's node; kubelet publishes a
    // CSI volume for a pod at this path (its own rule, not pav's).
    let staging = the_pod_of(&first_seen, "staging");
    let node_name = staging
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a staging pod is pinned to its node");
    let node: Node = Api::all(client.clone()).get(&node_name).await.unwrap();
    let node_file = object_file(&dir, "node.yaml", &node);
    let target_path = format!(
        "/var/lib/kubelet/pods/{}/volumes/kubernetes.io~csi/{pv_name}/mount",
        reader.uid().unwrap()
    );

    // Unstaging and deletion pods run once the client and the claim go;
    // every pod is gone afterwards, so the dry runs can take their names.
    // The volume going says the deletion pod has run: PaV runs it only
    // once the volume is unstaged, on external-provisioner's next retry,
    // so between the two no PaV pod may exist for a while.
    delete_and_wait(&pods, "reader", STEP).await.unwrap();
    delete_and_wait(&claims, "data", STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    wait_gone(&pvs, &pv_name, std::time::Duration::from_secs(300))
        .await
        .unwrap();
    wait_no_pav_pods(&client, PROVISIONER, STEP).await.unwrap();

    let volume_args = ["--pvc", &pvc_file, "--sc", &sc_file, "--pv", &pv_file];
    let publication_args = [
        "--pvc",
        &pvc_file,
        "--pv",
        &pv_file,
        "--node",
        &node_file,
        "--client-pod",
        &client_file,
        "--target-path",
        &target_path,
    ];
    for (phase, args) in [
        ("validation", &volume_args[..4]),
        ("creation", &volume_args[..4]),
        ("staging", &publication_args[..]),
        ("unstaging", &publication_args[..]),
        ("deletion", &volume_args[..]),
    ] {
        let rendered = rendered_pod(&provisioner_file, phase, args);
        assert_same_pod(&client, phase, &rendered, &the_pod_of(&first_seen, phase)).await;
    }

    delete(&client, OBJECTS).await.unwrap();
    delete_provisioner(&client, PROVISIONER, STEP)
        .await
        .unwrap();
    assert_no_leaks(&client, PROVISIONER, std::time::Duration::from_secs(120)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory for the object files.
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pav-e2e-render-parity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The provisioner of the second scenario: every phase that runs a pod
/// besides the five above, each pod naming what its context gave it.
const EVERY_PHASE: &str = "e2e-render-phases";

const EVERY_PHASE_NAMESPACE: &str = "e2e-render-phases";

const EVERY_PHASE_OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-render-phases
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeAttach:
    podTemplate:
      spec:
        nodeName: "{{ node.metadata.name }}"
        restartPolicy: Never
        containers:
          - name: attach
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo attaching {{ handle | tobash }} to {{ node.metadata.name | tobash }}"]
  volumeDetach:
    podTemplate:
      spec:
        nodeName: "{{ node.metadata.name }}"
        restartPolicy: Never
        containers:
          - name: detach
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo detaching {{ handle | tobash }}"]
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "mkdir -p /pav/volume"]
  volumeExpansion:
    capacity: "{{ requestedMinCapacity }}"
    podTemplate:
      spec:
        containers:
          - name: expand
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo growing {{ handle | tobash }} to {{ requestedMinCapacity }}"]
  volumeNodeExpansion:
    podTemplate:
      spec:
        containers:
          - name: node-expand
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo growing {{ pvc.metadata.name | tobash }} on its node to {{ capacity }}"]
  volumeModification:
    podTemplate:
      spec:
        containers:
          - name: modify
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo mode {{ requestedMutableParams.mode | tobash }}"]
  snapshotCreation:
    podTemplate:
      spec:
        containers:
          - name: snapshot
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo {{ snapshotName | tobash }} of {{ sourceHandle | tobash }}, {{ params.note | tobash }}"]
  snapshotDeletion:
    podTemplate:
      spec:
        containers:
          - name: delete-snapshot
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo deleting {{ snapshotHandle | tobash }} of {{ sourceHandle | tobash }}"]
  groupSnapshotCreation:
    podTemplate:
      spec:
        containers:
          - name: group-snapshot
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command:
              - sh
              - -c
              - |
                echo {{ params.note | tobash }}
                {% for source in sourceHandles %}
                echo {{ (source ~ ': member-' ~ loop.index ~ '-' ~ groupSnapshotName) | tobash }} >> /pav/snapshots
                {% endfor %}
  groupSnapshotDeletion:
    podTemplate:
      spec:
        containers:
          - name: delete-group-snapshot
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo deleting {{ groupSnapshotHandle | tobash }}: {{ snapshotHandles | join(' ') | tobash }}"]
  storageCapacity:
    podTemplate:
      spec:
        containers:
          - name: capacity
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo 1Gi > /pav/capacity # {{ nodeName | tobash }} {{ params.tier | tobash }}"]
  volumeHealth:
    # One round for the whole scenario: its checks share one pod.
    every: 1h
    podTemplate:
      spec:
        containers:
          - name: health
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo checking {{ handle | tobash }}"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-render-phases
provisioner: e2e-render-phases
allowVolumeExpansion: true
parameters:
  tier: gold
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttributesClass
metadata:
  name: e2e-render-phases
driverName: e2e-render-phases
parameters:
  mode: ro
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: e2e-render-phases
driver: e2e-render-phases
deletionPolicy: Delete
parameters:
  note: "a snapshot as rendered"
---
apiVersion: groupsnapshot.storage.k8s.io/v1
kind: VolumeGroupSnapshotClass
metadata:
  name: e2e-render-phases
driver: e2e-render-phases
deletionPolicy: Delete
parameters:
  note: "a group as rendered"
"#;

const EVERY_PHASE_CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: e2e-render-phases
  labels:
    e2e-group: members
spec:
  storageClassName: e2e-render-phases
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Mi
"#;

const EVERY_PHASE_CLIENT: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: user
  namespace: e2e-render-phases
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - name: user
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [sleep, "3600"]
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: data
"#;

impl FirstSeen {
    /// Waits until a pod of `phase` for which `which` holds was seen, and
    /// returns it: it must be the only one.
    async fn wait_one(&self, phase: &str, which: impl Fn(&Pod) -> bool) -> Pod {
        let pods = wait_until(&format!("a {phase} pod"), STEP, || async {
            let pods: Vec<Pod> = self.of_phase(phase).into_iter().filter(&which).collect();
            Ok((!pods.is_empty()).then_some(pods))
        })
        .await
        .unwrap();
        assert_eq!(pods.len(), 1, "{phase} pods seen: {pods:#?}");
        pods.into_iter().next().unwrap()
    }
}

/// The annotation on a snapshot or group snapshot pod naming the snapshot
/// (pav's `pods::ANNOTATION_SNAPSHOT`).
const ANNOTATION_SNAPSHOT: &str = "pav.albertofaria.github.io/snapshot";

/// Whether `pod` was made for snapshot (or group) `handle`.
fn for_snapshot(handle: &str) -> impl Fn(&Pod) -> bool + '_ {
    move |pod| {
        pod.annotations()
            .get(ANNOTATION_SNAPSHOT)
            .map(String::as_str)
            == Some(handle)
    }
}

/// The content a VolumeSnapshot or VolumeGroupSnapshot is bound to.
async fn bound_content(
    client: &Client,
    namespace: &str,
    (group, kind): (&str, &str),
    snapshot: &DynamicObject,
) -> DynamicObject {
    let field = if kind == "VolumeSnapshotContent" {
        "boundVolumeSnapshotContentName"
    } else {
        "boundVolumeGroupSnapshotContentName"
    };
    let name = snapshot.data["status"][field]
        .as_str()
        .unwrap_or_else(|| panic!("{} is bound: {:#}", snapshot.name_any(), snapshot.data));
    v1_api(client, namespace, group, kind)
        .await
        .get(name)
        .await
        .unwrap()
}

/// `pav render` prints the pods of every other phase as the driver runs
/// them: attach and detach, capacity, health, expansion and node
/// expansion, modification, snapshot and group snapshot creation and
/// deletion, each rendered from the objects read back from the cluster
/// (the claim as it ends, the snapshot contents and classes, the health
/// check's time) and compared whole with the live pod after a dry run.
#[tokio::test]
#[ignore = "needs a cluster"]
async fn render_prints_the_pods_of_every_other_phase() {
    const NAMESPACE: &str = EVERY_PHASE_NAMESPACE;
    let client = cluster().await;
    reset(&client, NAMESPACE, EVERY_PHASE).await.unwrap();
    namespace(&client, NAMESPACE).await.unwrap();
    let first_seen = FirstSeen::start_for(&client, EVERY_PHASE);
    apply(&client, EVERY_PHASE_OBJECTS).await.unwrap();
    wait_provisioner_ready(&client, EVERY_PHASE, STEP)
        .await
        .unwrap();

    // A claim in use: attached, staged, measured and checked.
    apply(&client, EVERY_PHASE_CLAIM).await.unwrap();
    apply(&client, EVERY_PHASE_CLIENT).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let user = wait_for(&pods, "user", STEP, "Running", |p| {
        pod_phase(p) == "Running"
    })
    .await
    .unwrap();
    let node_name = user
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap();
    let on_node =
        |pod: &Pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node_name);
    let attach = first_seen.wait_one("attach", |_| true).await;
    // The kubelet asks for the volume's condition with its stats, about
    // every minute; one check per hour (`every`) makes this its only one.
    let health = first_seen.wait_one("health", |_| true).await;
    let capacity = first_seen.wait_one("capacity", on_node).await;

    // Grown while in use: controller, then node expansion.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    grow_in_use(&client, NAMESPACE, "data", "user", 2 << 20)
        .await
        .unwrap();
    let expansion = first_seen.wait_one("expansion", |_| true).await;
    let node_expansion = first_seen.wait_one("node-expansion", |_| true).await;

    // Moved to another VolumeAttributesClass.
    let modify = serde_json::json!({"spec": {"volumeAttributesClassName": EVERY_PHASE}});
    claims
        .patch("data", &PatchParams::default(), &Patch::Merge(&modify))
        .await
        .unwrap();
    wait_for(&claims, "data", STEP, "modified", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.current_volume_attributes_class_name.as_deref())
            == Some(EVERY_PHASE)
    })
    .await
    .unwrap();
    let modification = first_seen.wait_one("modification", |_| true).await;

    // A snapshot, taken and deleted; its content kept for render.
    let dir = tempfile_dir();
    apply(
        &client,
        &format!(
            "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: snap\n  namespace: {NAMESPACE}\nspec:\n  volumeSnapshotClassName: {EVERY_PHASE}\n  source:\n    persistentVolumeClaimName: data\n"
        ),
    )
    .await
    .unwrap();
    let snapshots = volume_snapshots(&client, NAMESPACE).await;
    let snapshot = wait_for(&snapshots, "snap", STEP, "readyToUse", |s| {
        s.data["status"]["readyToUse"] == true
    })
    .await
    .unwrap();
    let content = bound_content(
        &client,
        NAMESPACE,
        ("snapshot.storage.k8s.io", "VolumeSnapshotContent"),
        &snapshot,
    )
    .await;
    let snapshot_handle = content.data["status"]["snapshotHandle"]
        .as_str()
        .unwrap()
        .to_owned();
    let snapshot_creation = first_seen.wait_one("snapshot-creation", |_| true).await;
    delete_and_wait(&snapshots, "snap", STEP).await.unwrap();
    let snapshot_deletion = first_seen
        .wait_one("snapshot-deletion", for_snapshot(&snapshot_handle))
        .await;

    // A group of the one claim, taken and deleted with its member.
    let (group, members) = pav_e2e::group_snapshots::take(
        &client,
        NAMESPACE,
        "group",
        EVERY_PHASE,
        ("e2e-group", "members"),
        1,
    )
    .await;
    let group_content = bound_content(
        &client,
        NAMESPACE,
        (
            pav_e2e::group_snapshots::API_GROUP,
            "VolumeGroupSnapshotContent",
        ),
        &group,
    )
    .await;
    let group_handle = group_content.data["status"]["volumeGroupSnapshotHandle"]
        .as_str()
        .unwrap()
        .to_owned();
    let group_creation = first_seen
        .wait_one("group-snapshot-creation", |_| true)
        .await;
    pav_e2e::group_snapshots::delete_with_members(&client, NAMESPACE, "group", &members).await;
    let group_deletion = first_seen
        .wait_one("group-snapshot-deletion", for_snapshot(&group_handle))
        .await;

    // The objects as they are now, as `pav render` reads them.
    let provisioner = provisioners(&client)
        .await
        .unwrap()
        .get(EVERY_PHASE)
        .await
        .unwrap();
    let provisioner_file = object_file(&dir, "provisioner.yaml", &provisioner);
    let pvc = claims.get("data").await.unwrap();
    let pv_name = volume_name(&pvc).unwrap();
    let pv: PersistentVolume = Api::all(client.clone()).get(&pv_name).await.unwrap();
    let sc: StorageClass = Api::all(client.clone()).get(EVERY_PHASE).await.unwrap();
    let vac: VolumeAttributesClass = Api::all(client.clone()).get(EVERY_PHASE).await.unwrap();
    let node: Node = Api::all(client.clone()).get(&node_name).await.unwrap();
    let snapshot_class = v1_api(
        &client,
        NAMESPACE,
        "snapshot.storage.k8s.io",
        "VolumeSnapshotClass",
    )
    .await
    .get(EVERY_PHASE)
    .await
    .unwrap();
    let group_class = v1_api(
        &client,
        NAMESPACE,
        pav_e2e::group_snapshots::API_GROUP,
        "VolumeGroupSnapshotClass",
    )
    .await
    .get(EVERY_PHASE)
    .await
    .unwrap();
    let [pvc_file, pv_file, sc_file, vac_file, node_file, client_file] = [
        object_file(&dir, "pvc.yaml", &pvc),
        object_file(&dir, "pv.yaml", &pv),
        object_file(&dir, "sc.yaml", &sc),
        object_file(&dir, "vac.yaml", &vac),
        object_file(&dir, "node.yaml", &node),
        object_file(&dir, "client.yaml", &user),
    ];
    let [
        content_file,
        snapshot_class_file,
        group_content_file,
        group_class_file,
    ] = [
        object_file(&dir, "content.yaml", &content),
        object_file(&dir, "snapshot-class.yaml", &snapshot_class),
        object_file(&dir, "group-content.yaml", &group_content),
        object_file(&dir, "group-class.yaml", &group_class),
    ];
    let target_path = format!(
        "/var/lib/kubelet/pods/{}/volumes/kubernetes.io~csi/{pv_name}/mount",
        user.uid().unwrap()
    );
    // When the check's round began, as its pod says: render at that time
    // names the same round (its pod is named after it).
    let checked_at = (health.annotations())
        .get("pav.albertofaria.github.io/health-round")
        .cloned()
        .expect("the health pod says when its round began");

    // Detach, unstaging and deletion once the user and the claim go;
    // every pod is gone afterwards, so the dry runs can take their names.
    delete_and_wait(&pods, "user", STEP).await.unwrap();
    let detach = first_seen.wait_one("detach", |_| true).await;
    delete_and_wait(&claims, "data", STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    wait_gone(&pvs, &pv_name, std::time::Duration::from_secs(300))
        .await
        .unwrap();
    wait_no_pav_pods(&client, EVERY_PHASE, STEP).await.unwrap();

    let volume = ["--pvc", &pvc_file, "--pv", &pv_file];
    let on_node = ["--pvc", &pvc_file, "--pv", &pv_file, "--node", &node_file];
    let published = [
        &on_node[..],
        &["--client-pod", &client_file, "--target-path", &target_path],
    ]
    .concat();
    let cases: [(&str, Vec<&str>, &Pod); 11] = [
        ("attach", on_node.to_vec(), &attach),
        ("detach", on_node.to_vec(), &detach),
        (
            "capacity",
            vec!["--node", &node_file, "--sc", &sc_file],
            &capacity,
        ),
        (
            "health",
            [&published[..], &["--time", &checked_at]].concat(),
            &health,
        ),
        ("expansion", volume.to_vec(), &expansion),
        ("node-expansion", published.clone(), &node_expansion),
        (
            "modification",
            [&volume[..], &["--vac", &vac_file]].concat(),
            &modification,
        ),
        (
            "snapshot-creation",
            [
                &volume[..],
                &[
                    "--snapshot-content",
                    &content_file,
                    "--snapshot-class",
                    &snapshot_class_file,
                ],
            ]
            .concat(),
            &snapshot_creation,
        ),
        (
            "snapshot-deletion",
            vec!["--snapshot-content", &content_file],
            &snapshot_deletion,
        ),
        (
            "group-snapshot-creation",
            [
                &volume[..],
                &[
                    "--snapshot-content",
                    &group_content_file,
                    "--snapshot-class",
                    &group_class_file,
                ],
            ]
            .concat(),
            &group_creation,
        ),
        (
            "group-snapshot-deletion",
            vec!["--snapshot-content", &group_content_file],
            &group_deletion,
        ),
    ];
    for (phase, args, live) in cases {
        let rendered = rendered_pod(&provisioner_file, phase, &args);
        assert_same_pod(&client, phase, &rendered, live).await;
    }

    delete(&client, EVERY_PHASE_OBJECTS).await.unwrap();
    delete_provisioner(&client, EVERY_PHASE, STEP)
        .await
        .unwrap();
    assert_no_leaks(&client, EVERY_PHASE, std::time::Duration::from_secs(120)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
