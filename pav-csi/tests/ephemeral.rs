//! CSI ephemeral inline volumes (`Provisioner::ephemeral`) through a real
//! tonic client: refused without the option, naming the key; with it,
//! NodePublishVolume creates (name from the volume id, size and parameters
//! from the attributes) and stages, NodeUnpublishVolume unstages and
//! deletes, idempotently, and a driver restart anywhere in between
//! neither leaks nor loses the volume. Mounts: root, in the sandbox.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{Harness, Options, capability};
use pav_csi::csi;
use pav_sdk::VolumeMode;
use tonic::Code;

const EPHEMERAL: &str = "csi.storage.k8s.io/ephemeral";

/// The kubelet's publish of inline volume `id` of pod `pod`: no staging
/// path, the pod's attributes and the pod info.
fn inline_publish(
    h: &Harness,
    id: &str,
    pod: &str,
    attributes: &[(&str, &str)],
) -> csi::NodePublishVolumeRequest {
    let mut context: HashMap<String, String> = (attributes.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    context.insert(EPHEMERAL.into(), "true".into());
    context.insert("csi.storage.k8s.io/pod.name".into(), pod.into());
    context.insert("csi.storage.k8s.io/pod.namespace".into(), "apps".into());
    context.insert("csi.storage.k8s.io/pod.uid".into(), format!("uid-{pod}"));
    csi::NodePublishVolumeRequest {
        volume_id: id.into(),
        target_path: target(h, pod).to_string_lossy().into(),
        volume_capability: Some(capability(VolumeMode::Filesystem)),
        volume_context: context,
        ..Default::default()
    }
}

fn target(h: &Harness, pod: &str) -> std::path::PathBuf {
    h.path(&format!(
        "pods/{pod}/volumes/kubernetes.io~csi/scratch/mount"
    ))
}

fn unpublish(h: &Harness, id: &str, pod: &str) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: id.into(),
        target_path: target(h, pod).to_string_lossy().into(),
    }
}

fn is_mounted(path: &Path) -> bool {
    pav_csi::mount::blocking::is_mounted(path).unwrap()
}

/// The stored volume created under `name`, if any.
fn created(h: &Harness, name: &str) -> Option<pav_sdk::Volume> {
    h.provisioner.volumes.lock().unwrap().get(name).cloned()
}

#[tokio::test]
async fn ephemeral_volumes_are_refused_without_the_option() {
    let mut h = Harness::start().await;
    let refused = h
        .node
        .node_publish_volume(inline_publish(&h, "csi-1", "p", &[]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains(EPHEMERAL), "{refused:?}");
    assert_eq!(h.provisioner.count("create"), 0);
    h.stop().await;
}

#[tokio::test]
async fn ephemeral_requests_are_checked_like_every_publish() {
    let mut h = Harness::start_with(Options {
        ephemeral: true,
        ..Default::default()
    })
    .await;
    let mut no_id = inline_publish(&h, "csi-1", "p", &[]);
    no_id.volume_id.clear();
    let no_id = h.node.node_publish_volume(no_id).await.unwrap_err();
    assert!(no_id.message().contains("volume_id"), "{no_id:?}");
    let mut no_capability = inline_publish(&h, "csi-1", "p", &[]);
    no_capability.volume_capability = None;
    let no_capability = h.node.node_publish_volume(no_capability).await.unwrap_err();
    assert_eq!(no_capability.code(), Code::InvalidArgument);
    let mut outside = inline_publish(&h, "csi-1", "p", &[]);
    outside.target_path = "/etc/outside".into();
    let outside = h.node.node_publish_volume(outside).await.unwrap_err();
    assert_eq!(outside.code(), Code::InvalidArgument, "{outside:?}");
    let size = inline_publish(&h, "csi-1", "p", &[("size", "lots")]);
    let size = h.node.node_publish_volume(size).await.unwrap_err();
    assert_eq!(size.code(), Code::InvalidArgument);
    assert!(size.message().contains("size"), "{size:?}");
    assert_eq!(h.provisioner.count("create"), 0, "nothing created");
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn publish_creates_and_stages_and_unpublish_deletes() {
    let mut h = Harness::start_with(Options {
        ephemeral: true,
        ..Default::default()
    })
    .await;
    let publish = inline_publish(&h, "csi-abc", "p", &[("size", "2Mi"), ("zone", "a")]);
    for _ in 0..2 {
        h.node.node_publish_volume(publish.clone()).await.unwrap();
    }
    let volume = created(&h, "csi-abc").expect("created under the volume id");
    assert_eq!(volume.capacity_bytes, 2 << 20, "the size attribute");
    assert_ne!(volume.handle, "csi-abc", "the handle is the provisioner's");
    let zone = volume
        .accessible_topology
        .first()
        .and_then(|t| t.get("zone"));
    assert_eq!(
        zone.map(String::as_str),
        Some("a"),
        "attributes are parameters"
    );
    assert_eq!(
        h.provisioner
            .creates
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    let target = target(&h, "p");
    assert!(is_mounted(&target));
    std::fs::write(target.join("data"), "kept").unwrap();
    let backing = h.path("backing").join(volume.handle.as_str());
    assert_eq!(
        std::fs::read_to_string(backing.join("data")).unwrap(),
        "kept"
    );

    for _ in 0..2 {
        (h.node
            .node_unpublish_volume(unpublish(&h, "csi-abc", "p"))
            .await)
            .unwrap();
    }
    assert!(!target.exists(), "the target is removed");
    assert!(created(&h, "csi-abc").is_none(), "deleted");
    assert_eq!(h.provisioner.count("unstage"), 1);
    assert_eq!(h.provisioner.count("delete"), 1, "deleted once");
    assert_eq!(*h.provisioner.mounted_at_unstage.lock().unwrap(), [false]);
    h.stop().await;
}

/// A restart of the driver (and the node's mounts gone with a node
/// restart) between publish and unpublish: the repeated publish finds the
/// same volume with its data, and the unpublish deletes it.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_restart_neither_loses_nor_leaks_the_volume() {
    let mut h = Harness::start_with(Options {
        ephemeral: true,
        ..Default::default()
    })
    .await;
    let publish = inline_publish(&h, "csi-kept", "p", &[]);
    h.node.node_publish_volume(publish.clone()).await.unwrap();
    let target = target(&h, "p");
    std::fs::write(target.join("data"), "kept").unwrap();
    h.restart().await;
    pav_csi::mount::unmount(&target).await.unwrap();
    assert!(!is_mounted(&target));
    h.node.node_publish_volume(publish).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(target.join("data")).unwrap(),
        "kept"
    );
    assert_eq!(
        h.provisioner
            .creates
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    h.restart().await;
    (h.node
        .node_unpublish_volume(unpublish(&h, "csi-kept", "p"))
        .await)
        .unwrap();
    assert!(
        created(&h, "csi-kept").is_none(),
        "deleted after the restart"
    );
    h.stop().await;
}

/// A Stage that answers a code the kubelet takes as "maybe still going"
/// leaves the volume recorded: the kubelet's unpublish (after a restart
/// here) deletes it. One that fails for good is undone at once: the
/// kubelet will not unpublish what it saw fail.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn failed_stages_leave_nothing_behind() {
    let mut h = Harness::start_with(Options {
        ephemeral: true,
        ..Default::default()
    })
    .await;
    // The `handle` attribute is the test provisioner's choice of handle;
    // its Stage of `busy` is UNAVAILABLE, of `missing` NOT_FOUND.
    let busy = inline_publish(&h, "csi-busy", "p", &[("handle", "busy")]);
    let busy = h.node.node_publish_volume(busy).await.unwrap_err();
    assert_eq!(busy.code(), Code::Unavailable, "{busy:?}");
    assert!(created(&h, "csi-busy").is_some(), "kept for the retry");
    h.restart().await;
    (h.node
        .node_unpublish_volume(unpublish(&h, "csi-busy", "p"))
        .await)
        .unwrap();
    assert!(
        created(&h, "csi-busy").is_none(),
        "deleted by the unpublish"
    );

    let missing = inline_publish(&h, "csi-missing", "q", &[("handle", "missing")]);
    let missing = h.node.node_publish_volume(missing).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    assert!(created(&h, "csi-missing").is_none(), "undone at once");
    assert!(!target(&h, "q").exists());
    (h.node
        .node_unpublish_volume(unpublish(&h, "csi-missing", "q"))
        .await)
        .unwrap();
    h.stop().await;
}

/// The kubelet asks NodeGetVolumeStats of an inline volume by the id it
/// made up: pav-csi asks the provisioner by the handle Create answered.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn stats_of_an_ephemeral_volume_reach_the_provisioner_by_its_handle() {
    let mut h = Harness::start_with(Options {
        ephemeral: true,
        health: true,
        ..Default::default()
    })
    .await;
    let publish = inline_publish(&h, "csi-sick", "p", &[("handle", "eph-broken")]);
    h.node.node_publish_volume(publish).await.unwrap();
    let stats = csi::NodeGetVolumeStatsRequest {
        volume_id: "csi-sick".into(),
        volume_path: target(&h, "p").to_string_lossy().into(),
        staging_target_path: String::new(),
    };
    let answer = h.node.node_get_volume_stats(stats).await.unwrap();
    let condition = answer.into_inner().volume_condition.unwrap();
    assert!(condition.abnormal, "{condition:?}");
    assert!(
        condition.message.starts_with("volume eph-broken is broken"),
        "{condition:?}"
    );
    (h.node
        .node_unpublish_volume(unpublish(&h, "csi-sick", "p"))
        .await)
        .unwrap();
    h.stop().await;
}
