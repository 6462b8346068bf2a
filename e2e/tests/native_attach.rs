//! Scenario: attaching, with the real external-attacher. examples/sparse-file
//! is deployed from examples/sparse-file/deploy/ (CSIDriver
//! `attachRequired: true`, the csi-attacher sidecar). A claim of the
//! shipped ext4 class used by a running pod has a VolumeAttachment to the
//! node, attached, whose metadata names the loop device the controller
//! attached and the image it backs; the kernel agrees
//! (`/sys/block/loopN/loop/backing_file`); the node reports its volume
//! limit in CSINode. Once the pod is gone the VolumeAttachment is deleted
//! and the device no longer backs the image; the claim's deletion leaves
//! no image behind.
//!
//! The node's limit follows its loop devices (the CSIDriver's
//! `nodeAllocatableUpdatePeriodSeconds`: v1.35 on, or the test cluster's
//! v1.34 with its `MutableCSINodeAllocatableCount` gate on): loop devices
//! another program attaches lower CSINode's count within the period, and
//! detaching them raises it again.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, VolumeAttachment};
use kube::Api;
use kube::api::ListParams;
use pav_e2e::sparse_file::{self, DRIVER, VOLUMES_DIR};
use pav_e2e::*;

const NS: &str = "e2e-native-attach";
const FILES: [&str; 2] = ["driver.yaml", "storageclass.yaml"];

fn claim() -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: attached
  namespace: {NS}
spec:
  storageClassName: sparse-file
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 64Mi
"#
    )
}

/// The file backing loop device `device` (`/dev/loopN`), if attached.
fn backing_file(device: &str) -> Option<String> {
    let name = device.strip_prefix("/dev/")?;
    let file = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(file.trim_end().to_owned())
}

/// The deploy's `--max-volumes-per-node`.
const BUDGET: i32 = 64;
/// Loop devices the scenario attaches, more than the other scenarios hold
/// at once.
const TAKEN: i32 = 16;

/// Waits until the driver's allocatable count in the node's CSINode
/// satisfies `wanted`; returns it.
async fn driver_limit(client: &kube::Client, what: &str, wanted: impl Fn(i32) -> bool) -> i32 {
    let csinodes: Api<CSINode> = Api::all(client.clone());
    wait_until(what, STEP, || async {
        let node = csinodes.get(FIRST_NODE).await?;
        let count = (node.spec.drivers.iter())
            .find(|d| d.name == DRIVER)
            .and_then(|d| d.allocatable.as_ref()?.count);
        Ok(count.filter(|count| wanted(*count)))
    })
    .await
    .unwrap()
}

/// Loop devices another program holds on the node, detached on drop.
struct TakenLoopDevices {
    _file: tempfile::NamedTempFile,
    devices: Vec<String>,
}

impl TakenLoopDevices {
    fn attach(count: i32) -> Self {
        let file = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
        file.as_file().set_len(1 << 20).unwrap();
        let devices = (0..count)
            .map(|_| {
                let output = std::process::Command::new("losetup")
                    .args(["--find", "--show"])
                    .arg(file.path())
                    .output()
                    .unwrap();
                assert!(output.status.success(), "{output:?}");
                String::from_utf8(output.stdout).unwrap().trim().to_owned()
            })
            .collect();
        TakenLoopDevices {
            _file: file,
            devices,
        }
    }
}

impl Drop for TakenLoopDevices {
    fn drop(&mut self) {
        for device in &self.devices {
            let _ = std::process::Command::new("losetup")
                .args(["--detach", device])
                .status();
        }
    }
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn sparse_file_attaches_its_image_to_a_loop_device_for_the_pod() {
    let client = cluster().await;
    reset(&client, NS, DRIVER).await.unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    namespace(&client, NS).await.unwrap();
    sparse_file::install(&client, &FILES).await;

    // The node plugin reports its limit, the deploy's 64 loop devices less
    // those other programs (other scenarios' drivers) attached: kubelet
    // puts it in CSINode, and asks again every 10 s.
    let limit = driver_limit(&client, "CSINode's count", |count| count <= BUDGET).await;
    eprintln!("CSINode's allocatable count: {limit}");
    let taken = TakenLoopDevices::attach(TAKEN);
    driver_limit(&client, "the count lowered", |count| {
        count <= BUDGET - TAKEN
    })
    .await;
    drop(taken);
    driver_limit(&client, "the count raised", |count| count > BUDGET - TAKEN).await;

    apply(&client, &claim()).await.unwrap();
    let pod = sparse_file::client_pod(NS, "user", "attached", "echo used > /data/f; sleep 3600");
    apply(&client, &pod).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    if let Err(e) = wait_for(&pods, "user", STEP, "running", |p| {
        pod_phase(p) == "Running"
    })
    .await
    {
        panic!("{e}; events: {:#?}", event_lines(&client, NS, "user").await);
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pv = volume_name(&claims.get("attached").await.unwrap()).unwrap();

    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let of_pv = |a: &VolumeAttachment| a.spec.source.persistent_volume_name.as_deref() == Some(&pv);
    let attachment = (attachments
        .list(&ListParams::default())
        .await
        .unwrap()
        .items)
        .into_iter()
        .find(|a| of_pv(a))
        .expect("a VolumeAttachment of the claim's volume");
    assert_eq!(attachment.spec.attacher, DRIVER);
    assert_eq!(attachment.spec.node_name, FIRST_NODE);
    let status = attachment.status.clone().expect("an attached status");
    assert!(status.attached, "{status:?}");
    let metadata = status.attachment_metadata.unwrap_or_default();
    let device = metadata["devicePath"].clone();
    let image = metadata["image"].clone();
    assert!(device.starts_with("/dev/loop"), "{metadata:?}");
    assert!(
        image.starts_with(VOLUMES_DIR) && image.ends_with(".img"),
        "{metadata:?}"
    );
    assert_eq!(backing_file(&device).as_deref(), Some(image.as_str()));

    // The pod gone, the volume is unstaged and detached.
    delete_and_wait(&pods, "user", STEP).await.unwrap();
    let name = attachment.metadata.name.clone().unwrap();
    wait_gone(&attachments, &name, STEP).await.unwrap();
    assert_ne!(backing_file(&device).as_deref(), Some(image.as_str()));

    delete_and_wait(&claims, "attached", STEP).await.unwrap();
    wait_until("the image removed", STEP, || async {
        Ok((!std::path::Path::new(&image).exists()).then_some(()))
    })
    .await
    .unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    assert_no_leaks(&client, DRIVER, STEP).await;
}
