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

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::{Api, Client};
use pav_e2e::sparse_file::{self, DRIVER, VOLUMES_DIR};
use pav_e2e::*;

const NS: &str = "e2e-native";
const FILES: [&str; 2] = ["driver.yaml", "storageclass.yaml"];

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

/// Runs a client pod of claim `sparse` to completion; its output.
async fn run_pod(client: &Client, name: &str, script: &str) -> String {
    sparse_file::run_client(client, NS, name, "sparse", script).await
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

#[tokio::test]
#[ignore = "needs a cluster"]
async fn sparse_file_driver_keeps_data_across_pod_restart() {
    let client = cluster().await;
    let started = Instant::now();
    reset(&client, NS, DRIVER).await.unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    namespace(&client, NS).await.unwrap();
    sparse_file::install(&client, &FILES).await;

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
        let mounts = mounts_of_driver(&client, DRIVER).await?;
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

    sparse_file::uninstall(&client, &FILES).await;
    assert_no_leaks(&client, DRIVER, Duration::from_secs(120)).await;
    eprintln!(
        "sparse_file_driver_keeps_data_across_pod_restart: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
