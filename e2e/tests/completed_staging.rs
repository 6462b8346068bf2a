//! Staging pods that run to completion and leave a mount at `/pav/volume`
//! (the PaV user guide allows a staging pod to exit once the volume is in
//! place): a bind mount of a node directory, a tmpfs, and a Block volume's
//! loop device bind-mounted onto a file. For each, the client pod reads what
//! was staged and, once deleted, goes within the grace period; the node
//! plugin then unmounts what the staging pod left, with system calls (the
//! pav image holds no `umount`), and leaves nothing behind.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::{Api, Client};
use pav_e2e::*;

const NAME: &str = "e2e-completed-staging";
const NS: &str = "e2e-completed-staging";
/// The node directory the `bind` style's staging pods bind-mount from.
const NODE_DATA: &str = "/var/lib/pav-e2e-completed-staging";

/// One provisioner; the StorageClass parameter `style` picks what its
/// staging pod mounts at `/pav/volume` before exiting 0.
const OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-completed-staging
spec:
  provisioningModes: [Dynamic]
  volumeValidation:
    volumeModes: [Filesystem, Block]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            securityContext: { privileged: true }
            command:
              - sh
              - -c
              - |
                set -e
                {% if params.style == "bind" %}
                mkdir -p /node-data/{{ handle }} /pav/volume
                echo "staged by a bind mount" > /node-data/{{ handle }}/staged
                mount -o bind /node-data/{{ handle }} /pav/volume
                {% elif params.style == "tmpfs" %}
                mkdir /pav/volume
                mount -t tmpfs -o size=8m tmpfs /pav/volume
                echo "staged on a tmpfs" > /pav/volume/staged
                {% else %}
                img=/pav/{{ handle }}.img
                printf 'staged on a loop device' > "$img"
                truncate -s {{ capacity }} "$img"
                dev=$(losetup -f)
                losetup "$dev" "$img"
                touch /pav/volume
                mount -o bind "$dev" /pav/volume
                {% endif %}
            volumeMounts: [{ name: node-data, mountPath: /node-data }]
        volumes:
          - name: node-data
            hostPath: { path: /var/lib/pav-e2e-completed-staging, type: DirectoryOrCreate }
  volumeUnstaging:
    podTemplate:
      spec:
        containers:
          - name: detach
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            securityContext: { privileged: true }
            command:
              - sh
              - -c
              - |
                for dev in $(losetup -a | grep '{{ handle }}.img' | cut -d: -f1); do
                  losetup -d "$dev"
                done
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-completed-bind
provisioner: e2e-completed-staging
parameters: { style: bind }
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-completed-tmpfs
provisioner: e2e-completed-staging
parameters: { style: tmpfs }
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-completed-loop
provisioner: e2e-completed-staging
parameters: { style: loop }
"#;

/// A staging style: its StorageClass parameter, the claim's volume mode,
/// and what the client pod must read from the volume.
struct Style {
    name: &'static str,
    block: bool,
    staged: &'static str,
}

const STYLES: [Style; 3] = [
    Style {
        name: "bind",
        block: false,
        staged: "staged by a bind mount",
    },
    Style {
        name: "tmpfs",
        block: false,
        staged: "staged on a tmpfs",
    },
    Style {
        name: "loop",
        block: true,
        staged: "staged on a loop device",
    },
];

/// The claim and the client pod that prints what was staged.
fn claim_and_client(style: &Style) -> String {
    let (mode, use_volume, read) = if style.block {
        (
            "Block",
            "volumeDevices: [{ name: data, devicePath: /dev/xvda }]",
            format!("[head, -c, \"{}\", /dev/xvda]", style.staged.len()),
        )
    } else {
        (
            "Filesystem",
            "volumeMounts: [{ name: data, mountPath: /data }]",
            "[cat, /data/staged]".to_owned(),
        )
    };
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: {NS}
spec:
  storageClassName: e2e-completed-{name}
  volumeMode: {mode}
  accessModes: [ReadWriteOnce]
  resources: {{ requests: {{ storage: 8Mi }} }}
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}-client
  namespace: {NS}
spec:
  restartPolicy: Never
  containers:
    - name: reader
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: {read}
      {use_volume}
  volumes:
    - name: data
      persistentVolumeClaim: {{ claimName: {name} }}
"#,
        name = style.name,
    )
}

/// Runs one style from claim to leak check.
async fn run_style(client: &Client, observer: &PodObserver, style: &Style) {
    let started = Instant::now();
    apply(client, &claim_and_client(style)).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let client_pod = format!("{}-client", style.name);
    let pod = match wait_for(&pods, &client_pod, STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await
    {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{}: {e}; client events: {:#?}",
            style.name,
            event_lines(client, NS, &client_pod).await
        ),
    };
    assert_eq!(
        pod_phase(&pod),
        "Succeeded",
        "{}: {:?}",
        style.name,
        pod.status
    );
    let read = logs(client, NS, &client_pod).await.unwrap();
    assert_eq!(read.trim_end(), style.staged, "{}", style.name);
    let volume = volume_name(&claims.get(style.name).await.unwrap()).unwrap();
    // The staging pod has exited; what it mounted at /pav/volume stays
    // mounted on the node (propagated from the pod), for unstaging to undo.
    let left_mounted: Vec<String> = mounts_of_driver(client, NAME)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.starts_with(PAV_PODS_DIR) && m.ends_with("/volume"))
        .collect();
    assert_eq!(
        left_mounted.len(),
        1,
        "{}: the completed staging pod's mount at /pav/volume: {left_mounted:?}",
        style.name
    );
    observer.wait("staging", "Succeeded", STEP).await.unwrap();

    // Deleting the client pod unpublishes and unstages; the pod goes
    // within the default grace period.
    let deleted = Instant::now();
    if let Err(e) = delete_and_wait(&pods, &client_pod, Duration::from_secs(30)).await {
        panic!(
            "{}: client pod not gone 30 s after deletion: {e}; claim events: {:#?}",
            style.name,
            event_lines(client, NS, style.name).await
        );
    }
    if let Err(e) = wait_no_pav_pods(client, NAME, STEP).await {
        panic!(
            "{}: not unstaged: {e}; claim events: {:#?}; client events: {:#?}",
            style.name,
            event_lines(client, NS, style.name).await,
            event_lines(client, NS, &client_pod).await
        );
    }
    eprintln!(
        "{}: client pod gone and volume unstaged {:.1}s after deletion",
        style.name,
        deleted.elapsed().as_secs_f64()
    );
    observer.wait("unstaging", "Succeeded", STEP).await.unwrap();

    delete_and_wait(&claims, style.name, STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    assert_no_leaks(client, NAME, Duration::from_secs(60)).await;
    eprintln!(
        "completed staging pod, {}: {:.1}s",
        style.name,
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn completed_staging_pods_leave_nothing_mounted() {
    let client = cluster().await;
    let started = Instant::now();
    let observer = start_scenario(&client, NS, NAME, OBJECTS).await;
    for style in &STYLES {
        run_style(&client, &observer, style).await;
    }
    delete(&client, OBJECTS).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    // What the bind style's pods put on the node: the test's, not PaV's.
    let _ = std::fs::remove_dir_all(NODE_DATA);
    eprintln!(
        "completed_staging_pods_leave_nothing_mounted: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
