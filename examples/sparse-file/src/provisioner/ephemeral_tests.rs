//! sparse-file serving a CSI ephemeral inline volume through pav-csi, as
//! the kubelet asks for one: created in the node's directory, an ext4
//! staged at the pod's target (its health reported through
//! NodeGetVolumeStats, abnormal once its superblock is overwritten),
//! deleted with the pod, also across a restart of the driver. Needs root, loop devices and e2fsprogs; every
//! path it touches is in the harness's temporary directory.

use std::collections::HashMap;

use pav_csi::csi;
use pav_csi::testing::Harness;
use pav_sdk::{AccessMode, VolumeMode};

use super::SparseFiles;

/// The kubelet's NodePublishVolume of inline volume `id` of pod `pod`.
fn inline_publish(h: &Harness, id: &str, pod: &str) -> csi::NodePublishVolumeRequest {
    let context: HashMap<String, String> = [
        ("csi.storage.k8s.io/ephemeral", "true"),
        ("csi.storage.k8s.io/pod.name", pod),
        ("csi.storage.k8s.io/pod.namespace", "apps"),
        ("csi.storage.k8s.io/pod.uid", "uid-1"),
        ("size", "32Mi"),
        ("provisioning", "thick"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut capability =
        pav_csi::testing::capability(VolumeMode::Filesystem, AccessMode::SingleNodeWriter);
    if let Some(csi::volume_capability::AccessType::Mount(mount)) = &mut capability.access_type {
        mount.fs_type = "ext4".into();
    }
    csi::NodePublishVolumeRequest {
        volume_id: id.into(),
        target_path: h.target_path(pod, "scratch").to_string_lossy().into(),
        volume_capability: Some(capability),
        volume_context: context,
        ..Default::default()
    }
}

/// The images in the storage directory.
fn images(h: &Harness) -> Vec<String> {
    let mut names: Vec<String> = (std::fs::read_dir(h.storage_dir()).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".img"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
#[ignore = "needs root and loop devices: .ci/run runs it as root"]
async fn ephemeral_inline_volumes_are_made_staged_and_deleted_with_the_pod() {
    let builder = Harness::builder().unwrap().node_id("node-a");
    let mut h = builder
        .start_with(|dir| {
            pav_sdk::provisioner!(SparseFiles::new(dir.to_owned()).on_node("node", "node-a"))
                .ephemeral()
        })
        .await
        .unwrap();
    let publish = inline_publish(&h, "csi-0123abcd", "app");
    let target = h.target_path("app", "scratch");
    let _cleanup = super::tests::Staging(
        &target,
        h.storage_dir()
            .join(SparseFiles::handle_for("csi-0123abcd") + ".img"),
    );
    for _ in 0..2 {
        h.node.node_publish_volume(publish.clone()).await.unwrap();
    }
    let handle = SparseFiles::handle_for("csi-0123abcd");
    assert_eq!(images(&h), [format!("{handle}.img")]);
    let image = h.storage_dir().join(format!("{handle}.img"));
    assert_eq!(
        std::fs::metadata(&image).unwrap().len(),
        32 << 20,
        "the size attribute"
    );
    let file = std::fs::File::open(&image).unwrap();
    assert_eq!(
        super::Recorded::of(&file).unwrap(),
        super::Recorded::Thick,
        "attributes are parameters"
    );
    assert!(pav_csi::mount::is_mounted(&target).await.unwrap());
    std::fs::write(target.join("token"), "kept").unwrap();

    // Health through NodeGetVolumeStats: the ext4 Stage made is intact;
    // its superblock magic overwritten in the image, abnormal, naming it.
    let stats = csi::NodeGetVolumeStatsRequest {
        volume_id: "csi-0123abcd".into(),
        volume_path: target.to_string_lossy().into(),
        staging_target_path: String::new(),
    };
    let condition = |answer: csi::NodeGetVolumeStatsResponse| answer.volume_condition.unwrap();
    let healthy = h.node.node_get_volume_stats(stats.clone()).await.unwrap();
    assert!(!condition(healthy.into_inner()).abnormal);
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap();
    use std::os::unix::fs::FileExt as _;
    writable.write_all_at(&[0, 0], 1080).unwrap();
    let damaged = h.node.node_get_volume_stats(stats.clone()).await.unwrap();
    let damaged = condition(damaged.into_inner());
    assert!(damaged.abnormal, "{damaged:?}");
    let named = format!("image {} has no ext4 superblock", image.display());
    assert!(damaged.message.starts_with(&named), "{damaged:?}");
    writable.write_all_at(&[0x53, 0xEF], 1080).unwrap();
    let repaired = h.node.node_get_volume_stats(stats).await.unwrap();
    assert!(!condition(repaired.into_inner()).abnormal);

    // A restart of the driver: the repeated publish finds the volume,
    // the unpublish deletes it.
    h.restart().await.unwrap();
    h.node.node_publish_volume(publish).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(target.join("token")).unwrap(),
        "kept"
    );
    h.restart().await.unwrap();
    let unpublish = csi::NodeUnpublishVolumeRequest {
        volume_id: "csi-0123abcd".into(),
        target_path: target.to_string_lossy().into(),
    };
    for _ in 0..2 {
        h.node
            .node_unpublish_volume(unpublish.clone())
            .await
            .unwrap();
    }
    assert!(images(&h).is_empty(), "the image is deleted with the pod");
    assert!(!target.exists());
    assert!(
        super::loop_devices(&image).await.unwrap().is_empty(),
        "detached"
    );
    h.shutdown().await.unwrap();
}
