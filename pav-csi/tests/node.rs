//! Node RPCs through a real tonic client over a Unix socket. Tests that
//! mount need root: they are `#[ignore]`d, and `.ci/run` runs them as root.

mod common;

use std::path::Path;
use std::sync::atomic::Ordering;

use common::{Harness, capability};
use pav_csi::csi;
use pav_sdk::VolumeMode;
use tonic::Code;

fn stage_request(h: &Harness, id: &str, mode: VolumeMode) -> csi::NodeStageVolumeRequest {
    let staging = h.path(&format!("staging-{id}"));
    std::fs::create_dir_all(&staging).unwrap(); // kubelet creates it
    csi::NodeStageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.to_string_lossy().into(),
        volume_capability: Some(capability(mode)),
        ..Default::default()
    }
}

fn publish_request(
    h: &Harness,
    id: &str,
    mode: VolumeMode,
    target: &str,
) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: id.into(),
        staging_target_path: h.path(&format!("staging-{id}")).to_string_lossy().into(),
        target_path: h.path(target).to_string_lossy().into(),
        volume_capability: Some(capability(mode)),
        ..Default::default()
    }
}

fn is_mounted(path: &Path) -> bool {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

#[tokio::test]
async fn node_info_and_capabilities() {
    let mut h = Harness::start().await;
    let info = h
        .node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, "node-a");
    assert_eq!(
        info.accessible_topology
            .unwrap()
            .segments
            .get("zone")
            .map(String::as_str),
        Some("a")
    );
    let caps = h
        .node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    use csi::node_service_capability::{Type, rpc};
    let rpcs: Vec<i32> = caps
        .iter()
        .filter_map(|c| c.r#type.as_ref().map(|Type::Rpc(r)| r.r#type))
        .collect();
    assert!(rpcs.contains(&(rpc::Type::StageUnstageVolume as i32)));
    assert!(rpcs.contains(&(rpc::Type::GetVolumeStats as i32)));
    // The default access modes tell ReadWriteOncePod from ReadWriteOnce.
    assert!(rpcs.contains(&(rpc::Type::SingleNodeMultiWriter as i32)));
    h.stop().await;
}

#[tokio::test]
async fn node_rpcs_name_missing_fields() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "v", VolumeMode::Filesystem);
    let publish = publish_request(&h, "v", VolumeMode::Filesystem, "target");
    let cases: Vec<(tonic::Status, &str)> = vec![
        (
            h.node
                .node_stage_volume(csi::NodeStageVolumeRequest {
                    volume_id: "".into(),
                    ..stage.clone()
                })
                .await
                .unwrap_err(),
            "volume_id",
        ),
        (
            h.node
                .node_stage_volume(csi::NodeStageVolumeRequest {
                    staging_target_path: "".into(),
                    ..stage.clone()
                })
                .await
                .unwrap_err(),
            "staging_target_path",
        ),
        (
            h.node
                .node_stage_volume(csi::NodeStageVolumeRequest {
                    volume_capability: None,
                    ..stage.clone()
                })
                .await
                .unwrap_err(),
            "volume_capability",
        ),
        (
            h.node
                .node_stage_volume(csi::NodeStageVolumeRequest {
                    volume_id: "x".repeat(129),
                    ..stage.clone()
                })
                .await
                .unwrap_err(),
            "volume_id",
        ),
        (
            h.node
                .node_unstage_volume(csi::NodeUnstageVolumeRequest {
                    volume_id: "v".into(),
                    staging_target_path: "".into(),
                })
                .await
                .unwrap_err(),
            "staging_target_path",
        ),
        (
            h.node
                .node_unstage_volume(csi::NodeUnstageVolumeRequest {
                    volume_id: "".into(),
                    staging_target_path: "/x".into(),
                })
                .await
                .unwrap_err(),
            "volume_id",
        ),
        (
            h.node
                .node_publish_volume(csi::NodePublishVolumeRequest {
                    volume_id: "".into(),
                    ..publish.clone()
                })
                .await
                .unwrap_err(),
            "volume_id",
        ),
        (
            h.node
                .node_publish_volume(csi::NodePublishVolumeRequest {
                    target_path: "".into(),
                    ..publish.clone()
                })
                .await
                .unwrap_err(),
            "target_path",
        ),
        (
            h.node
                .node_publish_volume(csi::NodePublishVolumeRequest {
                    volume_capability: None,
                    ..publish.clone()
                })
                .await
                .unwrap_err(),
            "volume_capability",
        ),
        (
            h.node
                .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                    volume_id: "".into(),
                    target_path: "/x".into(),
                })
                .await
                .unwrap_err(),
            "volume_id",
        ),
        (
            h.node
                .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                    volume_id: "v".into(),
                    target_path: "".into(),
                })
                .await
                .unwrap_err(),
            "target_path",
        ),
        (
            h.node
                .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                    volume_id: "".into(),
                    volume_path: "/x".into(),
                    staging_target_path: "".into(),
                })
                .await
                .unwrap_err(),
            "volume_id",
        ),
        (
            h.node
                .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                    volume_id: "v".into(),
                    volume_path: "".into(),
                    staging_target_path: "".into(),
                })
                .await
                .unwrap_err(),
            "volume_path",
        ),
    ];
    for (status, field) in cases {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(field),
            "{field} not in {status:?}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn node_errors_map_to_grpc_codes() {
    let mut h = Harness::start().await;
    let missing = h
        .node
        .node_stage_volume(stage_request(&h, "missing", VolumeMode::Filesystem))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let unstaged = publish_request(&h, "never-staged", VolumeMode::Filesystem, "t");
    let unstaged = h.node.node_publish_volume(unstaged).await.unwrap_err();
    assert_eq!(unstaged.code(), Code::FailedPrecondition);
    let stats = csi::NodeGetVolumeStatsRequest {
        volume_id: "v".into(),
        volume_path: "some/path".into(),
        staging_target_path: "".into(),
    };
    assert_eq!(
        h.node
            .node_get_volume_stats(stats)
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn concurrent_operation_on_one_volume_is_aborted() {
    let h = Harness::start().await;
    let slow = stage_request(&h, "slow", VolumeMode::Filesystem);
    let mut first = h.node.clone();
    let pending = tokio::spawn(async move { first.node_stage_volume(slow).await });
    // The first call holds the volume from before it asks the provisioner.
    h.provisioner.wait_for_calls("stage", 1).await;
    let mut second = h.node.clone();
    let unstage = csi::NodeUnstageVolumeRequest {
        volume_id: "slow".into(),
        staging_target_path: h.path("staging-slow").to_string_lossy().into(),
    };
    let status = second
        .node_unstage_volume(unstage.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Aborted);
    pending.await.unwrap().unwrap();
    second.node_unstage_volume(unstage).await.unwrap();
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn filesystem_lifecycle_is_idempotent() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "fs", VolumeMode::Filesystem);
    let staging = h.path("staging-fs");
    for _ in 0..2 {
        h.node.node_stage_volume(stage.clone()).await.unwrap();
    }
    assert!(is_mounted(&staging));
    std::fs::write(staging.join("hello"), "world").unwrap();
    // A Block volume's device is bound at `device` in its staging path; in
    // a Filesystem volume that name is the volume's own, left alone.
    std::fs::write(staging.join("device"), "data").unwrap();

    let publish = publish_request(&h, "fs", VolumeMode::Filesystem, "pods/a/target");
    for _ in 0..2 {
        h.node.node_publish_volume(publish.clone()).await.unwrap();
    }
    let target = h.path("pods/a/target");
    assert_eq!(
        std::fs::read_to_string(target.join("hello")).unwrap(),
        "world"
    );

    let read_only = csi::NodePublishVolumeRequest {
        readonly: true,
        ..publish_request(&h, "fs", VolumeMode::Filesystem, "pods/b/target")
    };
    h.node.node_publish_volume(read_only).await.unwrap();
    let denied = std::fs::write(h.path("pods/b/target/nope"), "x").unwrap_err();
    assert_eq!(
        denied.raw_os_error(),
        Some(30),
        "EROFS expected, got {denied}"
    );

    let stats = h
        .node
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: "fs".into(),
            volume_path: target.to_string_lossy().into(),
            staging_target_path: "".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.usage.len(), 2, "bytes and inodes");
    assert!(stats.usage[0].total > 0);

    for target in ["pods/a/target", "pods/b/target"] {
        for _ in 0..2 {
            h.node
                .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                    volume_id: "fs".into(),
                    target_path: h.path(target).to_string_lossy().into(),
                })
                .await
                .unwrap();
        }
        assert!(!h.path(target).exists(), "target removed");
    }
    let unstage = csi::NodeUnstageVolumeRequest {
        volume_id: "fs".into(),
        staging_target_path: staging.to_string_lossy().into(),
    };
    for _ in 0..2 {
        h.node.node_unstage_volume(unstage.clone()).await.unwrap();
    }
    assert!(!is_mounted(&staging));
    assert_eq!(
        std::fs::read_to_string(h.path("backing/fs/device")).unwrap(),
        "data",
        "unstaging keeps the volume's own files"
    );
    // The repeat finds no staging record: nothing is staged there any more,
    // so it succeeds without calling the provisioner again.
    assert_eq!(h.provisioner.unstages.load(Ordering::SeqCst), 1);
    assert_eq!(
        *h.provisioner.mounted_at_unstage.lock().unwrap(),
        [false],
        "Unstage runs after pav-csi unmounted the staging path (pav-sdk's Unstage docs)"
    );
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn block_lifecycle_is_idempotent() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "blk", VolumeMode::Block);
    for _ in 0..2 {
        h.node.node_stage_volume(stage.clone()).await.unwrap();
    }
    let publish = publish_request(&h, "blk", VolumeMode::Block, "pods/a/dev");
    for _ in 0..2 {
        h.node.node_publish_volume(publish.clone()).await.unwrap();
    }
    let target = h.path("pods/a/dev");
    assert!(
        target.is_file() && is_mounted(&target),
        "device bound onto a file"
    );
    let stats = h
        .node
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: "blk".into(),
            volume_path: target.to_string_lossy().into(),
            staging_target_path: "".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.usage[0].total, 4096);
    for _ in 0..2 {
        h.node
            .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                volume_id: "blk".into(),
                target_path: target.to_string_lossy().into(),
            })
            .await
            .unwrap();
    }
    assert!(!target.exists());
    let unstage = csi::NodeUnstageVolumeRequest {
        volume_id: "blk".into(),
        staging_target_path: h.path("staging-blk").to_string_lossy().into(),
    };
    for _ in 0..2 {
        h.node.node_unstage_volume(unstage.clone()).await.unwrap();
    }
    assert!(!h.path("staging-blk/device").exists());
    assert_eq!(
        *h.provisioner.mounted_at_unstage.lock().unwrap(),
        [false],
        "Unstage runs after pav-csi unmounted the staging path (pav-sdk's Unstage docs)"
    );
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn stats_come_from_the_provisioner_when_it_has_them() {
    let mut h = Harness::start_with(common::Options {
        stats: true,
        ..Default::default()
    })
    .await;
    let caps = h
        .node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    use csi::node_service_capability::{Type, rpc};
    let rpcs: Vec<i32> = caps
        .iter()
        .filter_map(|c| c.r#type.as_ref().map(|Type::Rpc(r)| r.r#type))
        .collect();
    assert!(rpcs.contains(&(rpc::Type::VolumeCondition as i32)));
    for (id, abnormal) in [("fine", false), ("sick", true)] {
        h.node
            .node_stage_volume(stage_request(&h, id, VolumeMode::Filesystem))
            .await
            .unwrap();
        let target = format!("pods/{id}/target");
        let publish = publish_request(&h, id, VolumeMode::Filesystem, &target);
        h.node.node_publish_volume(publish).await.unwrap();
        let stats = h
            .node
            .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                volume_id: id.into(),
                volume_path: h.path(&target).to_string_lossy().into(),
                staging_target_path: "".into(),
            })
            .await
            .unwrap()
            .into_inner();
        use csi::volume_usage::Unit;
        let bytes = stats.usage.iter().find(|u| u.unit == Unit::Bytes as i32);
        assert_eq!(bytes.map(|u| (u.total, u.used)), Some((42, 40)));
        let inodes = stats.usage.iter().find(|u| u.unit == Unit::Inodes as i32);
        assert!(inodes.is_some_and(|u| u.total > 0), "measured inodes kept");
        let condition = stats
            .volume_condition
            .expect("condition with VOLUME_CONDITION");
        assert_eq!(condition.abnormal, abnormal, "{id}");
        // kubelet names no staging path here: Stats gets the recorded one.
        let asked = h.provisioner.stats_staging_paths.lock().unwrap().pop();
        let staging = h.path(&format!("staging-{id}")).canonicalize().unwrap();
        assert_eq!(asked, Some(Some(staging)), "{id}");
    }
    h.stop().await;
}

/// A volume staged as `SINGLE_NODE_WRITER` (before pav-csi advertised
/// `SINGLE_NODE_MULTI_WRITER`) is asked again as `SINGLE_NODE_MULTI_WRITER`
/// after the upgrade: both are `ReadWriteOnce`, the same use. Another
/// access mode still is not.
#[tokio::test]
async fn a_volume_staged_before_single_node_multi_writer_stages_again_after() {
    use csi::volume_capability::access_mode::Mode;
    let mut h = Harness::start().await;
    let before = stage_request(&h, "rwo-in-place", VolumeMode::Filesystem);
    h.node.node_stage_volume(before.clone()).await.unwrap();
    let with_mode = |mode: Mode| {
        let mut request = before.clone();
        let capability = request.volume_capability.as_mut().unwrap();
        capability.access_mode = Some(csi::volume_capability::AccessMode { mode: mode as i32 });
        request
    };
    (h.node
        .node_stage_volume(with_mode(Mode::SingleNodeMultiWriter))
        .await)
        .unwrap();
    let other = h
        .node
        .node_stage_volume(with_mode(Mode::SingleNodeReaderOnly))
        .await;
    assert_eq!(other.unwrap_err().code(), Code::AlreadyExists);
    h.stop().await;
}

/// With Health, NodeGetVolumeStats asks it (with the published path) when
/// Stats gave no condition, or when there is no Stats at all; a condition
/// from Stats stands. The node's VOLUME_CONDITION is advertised either way.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn node_stats_carry_the_condition_health_reports() {
    for stats in [false, true] {
        let mut h = Harness::start_with(common::Options {
            stats,
            health: true,
            ..Default::default()
        })
        .await;
        for (id, abnormal) in [("fine", false), ("broken", true), ("sick", stats)] {
            h.node
                .node_stage_volume(stage_request(&h, id, VolumeMode::Filesystem))
                .await
                .unwrap();
            let target = format!("pods/{id}/target");
            let publish = publish_request(&h, id, VolumeMode::Filesystem, &target);
            h.node.node_publish_volume(publish).await.unwrap();
            let asked = h.provisioner.count("condition");
            let answer = h
                .node
                .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                    volume_id: id.into(),
                    volume_path: h.path(&target).to_string_lossy().into(),
                    staging_target_path: "".into(),
                })
                .await
                .unwrap()
                .into_inner();
            let condition = answer.volume_condition.expect("a condition");
            assert_eq!(condition.abnormal, abnormal, "{id}, stats {stats}");
            if id == "broken" {
                let published = h.path(&target);
                let expected = format!("volume broken is broken at {}", published.display());
                assert_eq!(condition.message, expected);
            }
            // Stats' own condition (`sick`) is not asked about again.
            let asked_health = h.provisioner.count("condition") > asked;
            assert_eq!(
                asked_health,
                !(stats && id == "sick"),
                "{id}, stats {stats}"
            );
        }
        h.stop().await;
    }
}

/// DeleteVolume of a volume this node still has staged is refused as in
/// use, without asking the provisioner, until NodeUnstageVolume: the CO
/// does not order the two (a claim deleted with its pod is deleted while
/// the kubelet unstages), and the process serving both services knows.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_volume_staged_on_this_node_is_not_deleted_until_unstaged() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "in-use", VolumeMode::Filesystem);
    let staging = h.path("staging-in-use");
    h.node.node_stage_volume(stage).await.unwrap();
    let delete = csi::DeleteVolumeRequest {
        volume_id: "in-use".into(),
        ..Default::default()
    };
    let refused = h
        .controller
        .delete_volume(delete.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("still staged on this node"),
        "{refused:?}"
    );
    let deletes = |h: &Harness| {
        let calls = h.provisioner.calls.lock().unwrap();
        calls.iter().filter(|c| **c == "delete").count()
    };
    assert_eq!(deletes(&h), 0, "the provisioner's Delete ran while staged");

    h.node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: "in-use".into(),
            staging_target_path: staging.to_string_lossy().into(),
        })
        .await
        .unwrap();
    h.controller.delete_volume(delete).await.unwrap();
    assert_eq!(deletes(&h), 1);
    h.stop().await;
}

/// NodeGetVolumeHealth (kubelet's from v1.37) of a volume published at the
/// path answers the condition NodeGetVolumeStats carries, Stats' when it
/// gave one (Health is not asked then), else Health's, as kubelet reads
/// it: no entry when healthy, one with the problem, reason and message
/// when not.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn node_volume_health_reports_the_condition_stats_carries() {
    use csi::VolumeHealthErrorType::{DataLoss, Degraded, Inaccessible};
    for (stats, health) in [(false, true), (true, true), (true, false)] {
        let mut h = Harness::start_with(common::Options {
            stats,
            health,
            ..Default::default()
        })
        .await;
        for id in ["fine", "broken", "degraded", "lost", "sick"] {
            h.node
                .node_stage_volume(stage_request(&h, id, VolumeMode::Filesystem))
                .await
                .unwrap();
            let target = format!("pods/{id}/target");
            let publish = publish_request(&h, id, VolumeMode::Filesystem, &target);
            h.node.node_publish_volume(publish).await.unwrap();
            let published = h.path(&target);
            let at = format!("volume {id} is broken at {}", published.display());
            let expected = match id {
                "broken" if health => vec![(Inaccessible, "VolumeAbnormal".into(), at)],
                "degraded" if health => vec![(Degraded, "SlowDisk".into(), at)],
                "lost" if health => vec![(DataLoss, "DiskFailed".into(), at)],
                "sick" if stats => {
                    vec![(Inaccessible, "VolumeAbnormal".into(), "test says so".into())]
                }
                _ => vec![],
            };
            let case = format!("{id}, stats {stats}, health {health}");
            let path = published.to_string_lossy().into_owned();
            let asked = h.provisioner.count("condition");
            let answer = common::volume_health(&mut h, id, &path).await.unwrap();
            assert_eq!(answer, expected, "{case}");
            let asked_health = h.provisioner.count("condition") > asked;
            assert_eq!(asked_health, health && !(stats && id == "sick"), "{case}");
            let condition = (h.node)
                .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                    volume_id: id.into(),
                    volume_path: path,
                    staging_target_path: "".into(),
                })
                .await
                .unwrap()
                .into_inner()
                .volume_condition
                .expect("a condition");
            assert_eq!(condition.abnormal, !expected.is_empty(), "{case}");
        }
        h.stop().await;
    }
}
