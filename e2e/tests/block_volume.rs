//! Scenario 5: Block mode. The staging pod (privileged busybox) backs the
//! volume with a sparse file on a loop device and places the device node at
//! /pav/volume; the unstaging pod detaches it; the client pod sees a block
//! device of the requested size.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use pav_e2e::*;

const NAME: &str = "e2e-block";
const NS: &str = "e2e-block";

const OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-block
spec:
  provisioningModes: [Dynamic]
  volumeValidation:
    volumeModes: [Block]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: loop
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            securityContext: { privileged: true }
            command:
              - sh
              - -c
              - |
                set -e
                img=/pav/{{ handle }}.img
                truncate -s {{ capacity }} "$img"
                dev=$(losetup -f)
                losetup "$dev" "$img"
                set -- $(stat -c '%t %T' "$dev")
                mknod /pav/volume b $((0x$1)) $((0x$2))
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
                  echo "detaching $dev"
                  losetup -d "$dev"
                done
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-block
provisioner: e2e-block
"#;

const CLAIM_AND_CLIENT: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: disk
  namespace: e2e-block
spec:
  storageClassName: e2e-block
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 8Mi } }
---
apiVersion: v1
kind: Pod
metadata:
  name: sizer
  namespace: e2e-block
spec:
  restartPolicy: Never
  containers:
    - name: sizer
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [blockdev, --getsize64, /dev/xvda]
      volumeDevices: [{ name: disk, devicePath: /dev/xvda }]
  volumes:
    - name: disk
      persistentVolumeClaim: { claimName: disk }
"#;

/// Loop devices backed by the staging pod's file of `handle` (not kubelet's
/// own loop device that pins the published device while a pod maps it).
fn loops_of(handle: &str) -> Vec<String> {
    let out = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .expect("losetup");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("{handle}.img")))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn block_volume_is_a_loop_device() {
    let client = cluster().await;
    let started = Instant::now();
    let observer = start_scenario(&client, NS, NAME, OBJECTS).await;
    apply(&client, CLAIM_AND_CLIENT).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = match wait_for(&pods, "sizer", STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await
    {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{e}; events: {:#?}",
            event_lines(&client, NS, "sizer").await
        ),
    };
    assert_eq!(pod_phase(&pod), "Succeeded", "{:?}", pod.status);
    let output = logs(&client, NS, "sizer").await.unwrap();
    assert_eq!(output.trim(), "8388608");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let volume = volume_name(&claims.get("disk").await.unwrap()).unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let handle = pvs
        .get(&volume)
        .await
        .unwrap()
        .spec
        .unwrap()
        .csi
        .unwrap()
        .volume_handle;
    assert_eq!(loops_of(&handle).len(), 1, "{:?}", loops_of(&handle));

    delete_and_wait(&pods, "sizer", STEP).await.unwrap();
    observer.wait("unstaging", "Succeeded", STEP).await.unwrap();
    wait_until("the loop device to be detached", STEP, || async {
        Ok(loops_of(&handle).is_empty().then_some(()))
    })
    .await
    .unwrap();
    delete_and_wait(&claims, "disk", STEP).await.unwrap();
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    // The node plugin unstages: only then may the provisioner go.
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();
    delete(&client, OBJECTS).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    eprintln!(
        "block_volume_is_a_loop_device: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
