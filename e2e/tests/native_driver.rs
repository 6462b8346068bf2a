//! Scenario 6: examples/sparse-file, a provisioner written against pav-sdk
//! and served by pav-csi with no templates and no pav controller, deployed
//! as a CSI driver with the standard sidecars (external-provisioner,
//! node-driver-registrar) from examples/sparse-file/deploy/. A claim is
//! provisioned dynamically; one client pod writes a token and exits; a
//! second pod, started after the first is gone (so the volume was unstaged:
//! loop device detached, filesystem unmounted), reads the same token back.
//! Deleting the claim removes the backing file.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::{Api, Client};
use pav_e2e::*;

const DRIVER: &str = "sparse-file.pav.example.com";
const DRIVER_NS: &str = "sparse-file";
const NS: &str = "e2e-native";
/// Where the DaemonSet and Deployment keep the volumes' files on the node.
const VOLUMES_DIR: &str = "/var/lib/sparse-file";

fn deploy_file(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/sparse-file/deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: sparse
  namespace: e2e-native
spec:
  storageClassName: sparse-file
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 64Mi
"#;

fn client_pod(name: &str, script: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {NS}
spec:
  restartPolicy: Never
  containers:
    - name: client
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [sh, -c, {script:?}]
      volumeMounts:
        - {{ name: data, mountPath: /data }}
  volumes:
    - name: data
      persistentVolumeClaim: {{ claimName: sparse }}
"#
    )
}

/// Runs a client pod to completion and returns its output.
async fn run_pod(client: &Client, name: &str, script: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    apply(client, &client_pod(name, script)).await.unwrap();
    let done = wait_for(&pods, name, STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await;
    let pod = match done {
        Ok(pod) => pod,
        Err(e) => panic!("{e}; events: {:#?}", event_lines(client, NS, name).await),
    };
    let output = logs(client, NS, name).await.unwrap();
    assert_eq!(
        pod_phase(&pod),
        "Succeeded",
        "{name}: {output}; events: {:#?}",
        event_lines(client, NS, name).await
    );
    delete_and_wait(&pods, name, STEP).await.unwrap();
    output
}

/// Loop devices on this node backed by `file` (`losetup --associated`).
fn loop_devices_of(file: &str) -> String {
    let out = std::process::Command::new("losetup")
        .args(["--associated", file])
        .output()
        .expect("running losetup");
    assert!(out.status.success(), "losetup: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the driver (its namespace with its pods, the CSIDriver, RBAC),
/// waiting until its pods are gone, so the next install runs the image just
/// loaded under the same name.
async fn remove_driver(client: &Client) {
    delete(client, &deploy_file("driver.yaml")).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_gone(&namespaces, DRIVER_NS, STEP).await.unwrap();
}

async fn wait_driver_deployed(client: &Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), DRIVER_NS);
    wait_for(
        &deployments,
        "sparse-file-controller",
        STEP,
        "available",
        |d| {
            d.status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
                >= 1
        },
    )
    .await
    .unwrap();
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), DRIVER_NS);
    wait_for(&daemon_sets, "sparse-file-node", STEP, "ready", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.desired_number_scheduled > 0 && s.number_ready == s.desired_number_scheduled
        })
    })
    .await
    .unwrap();
    wait_driver_registered(client, DRIVER, STEP).await.unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn sparse_file_driver_keeps_data_across_pod_restart() {
    let client = cluster().await;
    let started = Instant::now();
    reset(&client, NS, DRIVER).await.unwrap();
    remove_driver(&client).await;
    namespace(&client, NS).await.unwrap();

    apply(&client, &deploy_file("driver.yaml")).await.unwrap();
    apply(&client, &deploy_file("storageclass.yaml"))
        .await
        .unwrap();
    wait_driver_deployed(&client).await;

    apply(&client, CLAIM).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let bound = wait_for(&claims, "sparse", STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await;
    let claim = match bound {
        Ok(claim) => claim,
        Err(e) => panic!(
            "{e}; events: {:#?}",
            event_lines(&client, NS, "sparse").await
        ),
    };
    let volume = volume_name(&claim).expect("a bound claim names its volume");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let csi = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .expect("a CSI volume");
    assert_eq!(csi.driver, DRIVER);
    let backing_file = format!("{VOLUMES_DIR}/{}.img", csi.volume_handle);
    let size = std::fs::metadata(&backing_file)
        .unwrap_or_else(|e| panic!("{backing_file}: {e}"))
        .len();
    assert_eq!(size, 64 << 20, "{backing_file} has the requested size");

    let token = format!(
        "written-{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let written = run_pod(
        &client,
        "writer",
        &format!("set -e; grep ' /data ext4 ' /proc/mounts; printf %s {token} > /data/token; sync; cat /data/token"),
    )
    .await;
    assert!(written.ends_with(&token), "writer printed {written:?}");

    // The only client pod is gone: the kubelet unstages the volume, so the
    // second pod gets a freshly attached loop device and mount.
    wait_until("the volume to be unstaged", STEP, || async {
        let mounts = pav_mounts()?;
        let devices = loop_devices_of(&backing_file);
        Ok((mounts.is_empty() && devices.is_empty()).then_some(()))
    })
    .await
    .unwrap();

    let read = run_pod(&client, "reader", "cat /data/token").await;
    assert_eq!(read, token, "the second pod reads what the first wrote");

    delete_and_wait(&claims, "sparse", STEP).await.unwrap();
    if let Err(e) = wait_gone(&pvs, &volume, STEP).await {
        panic!(
            "{e}; events: {:#?}",
            event_lines(&client, "default", &volume).await
        );
    }
    assert!(
        !Path::new(&backing_file).exists(),
        "{backing_file} is removed with its volume"
    );
    assert_eq!(loop_devices_of(&backing_file), "");

    delete(&client, &deploy_file("storageclass.yaml"))
        .await
        .unwrap();
    remove_driver(&client).await;
    assert_no_leaks(&client, DRIVER, Duration::from_secs(120)).await;
    eprintln!(
        "sparse_file_driver_keeps_data_across_pod_restart: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
