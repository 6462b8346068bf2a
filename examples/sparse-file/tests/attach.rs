//! Attach through the driver binary, over CSI: ControllerPublishVolume
//! attaches the image to a loop device and says which; NodeStageVolume
//! uses it only when it is backed by exactly that volume's image;
//! NodeUnstageVolume leaves it to ControllerUnpublishVolume, which
//! detaches it. Needs root and loop devices: `#[ignore]`d, and
//! `.ci/run` runs it as root. Everything it makes is in a temporary
//! directory; what the driver attached is detached at the end, also on
//! a panic (only devices backed by that directory's images).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use pav_csi::csi;
use pav_csi::csi::controller_client::ControllerClient;
use pav_csi::csi::node_client::NodeClient;
use tonic::Code;
use tonic::transport::Channel;

const BINARY: &str = env!("CARGO_BIN_EXE_sparse-file");
const NODE: &str = "attach-test-node";

/// The driver, killed when the test ends; then every loop device backed
/// by an image of its directory is detached.
struct Driver {
    child: Child,
    volumes: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let Ok(entries) = std::fs::read_dir(&self.volumes) else {
            return;
        };
        for image in entries.flatten().map(|e| e.path()) {
            for device in devices_of(&image) {
                let _ = Command::new("losetup").args(["--detach", &device]).status();
            }
        }
    }
}

/// Loop devices backed by `image` (`losetup --associated`).
fn devices_of(image: &Path) -> Vec<String> {
    let out = Command::new("losetup")
        .arg("--associated")
        .arg(image)
        .output()
        .unwrap();
    (String::from_utf8_lossy(&out.stdout).lines())
        .filter_map(|line| line.split(':').next())
        .map(str::to_owned)
        .collect()
}

struct Clients {
    controller: ControllerClient<Channel>,
    node: NodeClient<Channel>,
}

/// Loop devices attached now, by any program: the driver counts those
/// not backed by its images against its `--max-volumes-per-node`.
fn attached_loop_devices() -> usize {
    let devices = std::fs::read_dir("/sys/block").unwrap().flatten();
    (devices.map(|entry| entry.path().join("loop/backing_file")))
        .filter(|file| file.exists())
        .count()
}

/// The driver, with room for exactly two attached volumes besides the
/// loop devices other programs hold.
async fn start(dir: &Path) -> (Driver, Clients) {
    let others = attached_loop_devices();
    let socket = dir.join("csi.sock");
    let volumes = dir.join("volumes");
    let kubelet = dir.join("kubelet");
    std::fs::create_dir_all(&kubelet).unwrap();
    let child = Command::new(BINARY)
        .arg(format!("--endpoint={}", socket.display()))
        .arg(format!("--dir={}", volumes.display()))
        .arg(format!("--kubelet-dir={}", kubelet.display()))
        .arg(format!("--node-id={NODE}"))
        .arg(format!("--max-volumes-per-node={}", others + 2))
        .spawn()
        .unwrap();
    let driver = Driver { child, volumes };
    for _ in 0..500 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let channel = pav_csi::client::connect(&socket).await.unwrap();
    let clients = Clients {
        controller: ControllerClient::new(channel.clone()),
        node: NodeClient::new(channel),
    };
    (driver, clients)
}

fn block() -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, BlockVolume, access_mode::Mode};
    csi::VolumeCapability {
        access_type: Some(AccessType::Block(BlockVolume {})),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

async fn create(c: &mut Clients, name: &str) -> String {
    let request = csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 16 << 20,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![block()],
        ..Default::default()
    };
    let volume = c.controller.create_volume(request).await.unwrap();
    volume.into_inner().volume.unwrap().volume_id
}

fn publish(volume_id: &str, node_id: &str) -> csi::ControllerPublishVolumeRequest {
    csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        volume_capability: Some(block()),
        ..Default::default()
    }
}

fn stage(
    volume_id: &str,
    staging: &Path,
    context: &std::collections::HashMap<String, String>,
) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.to_string_lossy().into_owned(),
        volume_capability: Some(block()),
        publish_context: context.clone(),
        ..Default::default()
    }
}

fn backing_file(device: &str) -> Option<String> {
    let name = device.strip_prefix("/dev/")?;
    let file = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(file.trim_end().to_owned())
}

#[tokio::test]
#[ignore = "needs root and loop devices: .ci/run runs it as root"]
async fn the_attached_device_is_staged_only_when_it_backs_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let (driver, mut c) = start(dir.path()).await;
    let a = create(&mut c, "pvc-a").await;
    let b = create(&mut c, "pvc-b").await;
    let image_a = std::fs::canonicalize(driver.volumes.join(format!("{a}.img"))).unwrap();

    let other_node = c
        .controller
        .controller_publish_volume(publish(&a, "elsewhere"))
        .await;
    assert_eq!(other_node.unwrap_err().code(), Code::NotFound);
    let attached = c
        .controller
        .controller_publish_volume(publish(&a, NODE))
        .await;
    let context_a = attached.unwrap().into_inner().publish_context;
    let device_a = context_a["devicePath"].clone();
    assert_eq!(context_a["image"], image_a.to_string_lossy());
    assert_eq!(backing_file(&device_a).unwrap(), image_a.to_string_lossy());
    // A retry: the same device.
    let again = c
        .controller
        .controller_publish_volume(publish(&a, NODE))
        .await;
    assert_eq!(again.unwrap().into_inner().publish_context, context_a);
    let mut read_only = publish(&a, NODE);
    read_only.readonly = true;
    let other_flag = c.controller.controller_publish_volume(read_only).await;
    assert_eq!(other_flag.unwrap_err().code(), Code::AlreadyExists);

    let attached = c
        .controller
        .controller_publish_volume(publish(&b, NODE))
        .await;
    let context_b = attached.unwrap().into_inner().publish_context;
    let c3 = create(&mut c, "pvc-c").await;
    let full = c
        .controller
        .controller_publish_volume(publish(&c3, NODE))
        .await;
    assert_eq!(full.unwrap_err().code(), Code::ResourceExhausted);

    // Contexts that do not name this volume's device are refused.
    let staging = dir.path().join("kubelet/staging-a");
    let mut b_device = context_a.clone();
    b_device.insert("devicePath".into(), context_b["devicePath"].clone());
    let mut foreign_image = context_a.clone();
    foreign_image.insert("image".into(), context_b["image"].clone());
    let mut not_loop = context_a.clone();
    not_loop.insert("devicePath".into(), "/dev/sda".into());
    for forged in [b_device, foreign_image, not_loop] {
        let refused = c.node.node_stage_volume(stage(&a, &staging, &forged)).await;
        let refused = refused.unwrap_err();
        assert_eq!(
            refused.code(),
            Code::FailedPrecondition,
            "{forged:?}: {refused:?}"
        );
    }

    c.node
        .node_stage_volume(stage(&a, &staging, &context_a))
        .await
        .unwrap();
    assert_eq!(devices_of(&image_a), vec![device_a.clone()]);
    let unstage = csi::NodeUnstageVolumeRequest {
        volume_id: a.clone(),
        staging_target_path: staging.to_string_lossy().into_owned(),
    };
    c.node.node_unstage_volume(unstage).await.unwrap();
    // The controller's to detach: still attached.
    assert_eq!(devices_of(&image_a), vec![device_a.clone()]);
    let in_use = c
        .controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: a.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(in_use.unwrap_err().code(), Code::FailedPrecondition);
    for _ in 0..2 {
        let detach = csi::ControllerUnpublishVolumeRequest {
            volume_id: a.clone(),
            node_id: NODE.into(),
            ..Default::default()
        };
        c.controller
            .controller_unpublish_volume(detach)
            .await
            .unwrap();
    }
    assert!(devices_of(&image_a).is_empty());
    c.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: a,
            ..Default::default()
        })
        .await
        .unwrap();
    drop(driver);
}
