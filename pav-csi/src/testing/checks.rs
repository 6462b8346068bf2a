//! The conformance checks: each a sequence of CSI calls against one
//! [`Harness`](super::Harness), failing at the first answer that is not
//! what csi-sanity (or the spec, where csi-sanity has no such case)
//! expects. Each works with a [`Ctx`] and ends in an [`Outcome`];
//! [`Conformance`](super::Conformance) runs them.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use tonic::Code;

use super::context::{Ctx, Step, answered, call, expect_codes, expect_ok, int64, text};
use super::harness::DECOY;
use super::report::Outcome;
use crate::csi;

mod attach;
mod group;
mod modify_health;

pub(super) use attach::attach_detach_repeats;
pub(super) use group::group_snapshot_round_trip;
pub(super) use modify_health::{health, modify};

/// An id that names no volume and no snapshot.
pub(super) const UNKNOWN: &str = "pav-testing-never-created";
/// csi-sanity's invalid volume and snapshot ids.
const FAKE_VOLUME: &str = "reallyfakevolumeid";
const FAKE_SNAPSHOT: &str = "reallyfakesnapshotid";
/// The longest id or name CSI allows.
const MAX_NAME: usize = 128;

/// Why a check needing a volume is skipped without Create.
pub(super) const NO_CREATE: &str = "the controller does not advertise CREATE_DELETE_VOLUME \
                         (no Create): the check needs a volume it creates";

/// How many mounts are stacked on `path`.
fn mounts_at(path: &Path) -> Step<usize> {
    crate::mount::blocking::mounts_at(path)
        .map_err(|e| format!("reading the mount table: {}", crate::error_chain(&e)))
}

/// Fails unless exactly `expected` mounts are stacked on `path`.
fn expect_mounts(when: &str, path: &Path, expected: usize) -> Step<()> {
    let found = mounts_at(path)?;
    if found == expected {
        return Ok(());
    }
    let hint = match found > expected {
        true => {
            ": mounts stack up when Stage mounts again for a volume already \
                 staged (use pav_csi::mount::mount_once, or ask pav_csi::mount::is_mounted first)"
        }
        false => "",
    };
    Err(format!(
        "{when}: {found} mount(s) at {}, expected {expected}{hint}",
        path.display()
    ))
}

/// CreateVolume repeated answers the same volume, also from the
/// provisioner after a restart; an incompatible repeat is ALREADY_EXISTS.
pub(super) async fn repeated_create(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    let size = ctx.size();
    let name = "pav-testing-repeated-create";
    let req = ctx.create_request(name, size, size);
    let first = ctx.create_with("CreateVolume", req.clone()).await?;
    let same = |what: &str, again: &csi::Volume| -> Step<()> {
        if (&again.volume_id, again.capacity_bytes) != (&first.volume_id, first.capacity_bytes) {
            return Err(format!(
                "{what}: answered volume {:?} of {} bytes, the first answer was {:?} of {} bytes",
                again.volume_id, again.capacity_bytes, first.volume_id, first.capacity_bytes
            ));
        }
        Ok(())
    };
    let what = "CreateVolume repeated (same name and request)";
    same(what, &ctx.create_with(what, req.clone()).await?)?;
    ctx.restart().await?;
    let what = "CreateVolume repeated after a driver restart (answered by the provisioner, \
                not pav-csi's cache: Create must be idempotent by name)";
    same(what, &ctx.create_with(what, req.clone()).await?)?;

    // The repeat filled pav-csi's cache again, which would refuse the
    // next request itself.
    ctx.restart().await?;
    let what = "CreateVolume of the same name with twice the capacity, after a driver restart \
                (answered by the provisioner)";
    let bigger = ctx.create_request(name, 2 * size, 2 * size);
    match call(ctx.h.controller.create_volume(bigger)).await {
        Err(status) if status.code() == Code::AlreadyExists => {}
        Err(status) => {
            // pav-csi answers INTERNAL (and deletes the volume) when Create
            // returns a volume outside the range asked for.
            return Err(format!(
                "{what}: expected ALREADY_EXISTS, got {}; Create must refuse \
                 (Error::AlreadyExists) a request its existing volume does not meet",
                answered(&status)
            ));
        }
        Ok(answer) => {
            if let Some(volume) = &answer.volume {
                ctx.track_volume(volume);
            }
            return Err(format!(
                "{what}: expected ALREADY_EXISTS, got OK (volume {:?}); \
                 Create must refuse a request its existing volume does not meet",
                answer.volume.map(|v| v.volume_id).unwrap_or_default()
            ));
        }
    }

    let what = "ValidateVolumeCapabilities with the capability it was created with";
    let req = ctx.validate_request(&first.volume_id);
    let answer = expect_ok(
        what,
        call(ctx.h.controller.validate_volume_capabilities(req)).await,
    )?;
    if answer.confirmed.is_none() {
        return Err(format!("{what}: not confirmed ({:?})", answer.message));
    }

    let long = format!("pav-testing-maximum-length-{}", "n".repeat(MAX_NAME));
    let long = &long[..MAX_NAME];
    let volume = ctx.create(long).await?;
    ctx.delete("DeleteVolume of the 128-byte name", &volume.volume_id)
        .await?;

    ctx.delete("DeleteVolume", &first.volume_id).await?;
    let req = ctx.validate_request(&first.volume_id);
    expect_codes(
        "ValidateVolumeCapabilities of the deleted volume (Create::exists must read the storage)",
        call(ctx.h.controller.validate_volume_capabilities(req)).await,
        &[Code::NotFound],
    )?;
    Ok(Outcome::Passed)
}

/// DeleteVolume of what does not exist is OK; so is a repeat.
pub(super) async fn delete_unknown_volume(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    for id in [FAKE_VOLUME, UNKNOWN] {
        ctx.delete(
            format!("DeleteVolume of {id:?}, which was never created"),
            id,
        )
        .await?;
        let req = ctx.validate_request(id);
        expect_codes(
            format!("ValidateVolumeCapabilities of {id:?}, which was never created"),
            call(ctx.h.controller.validate_volume_capabilities(req)).await,
            &[Code::NotFound],
        )?;
    }
    let volume = ctx.create("pav-testing-deleted").await?;
    let id = volume.volume_id.as_str();
    ctx.delete("DeleteVolume", id).await?;
    ctx.delete("DeleteVolume of a volume deleted already", id)
        .await?;
    ctx.restart().await?;
    ctx.delete(
        "DeleteVolume of a volume deleted already, after a driver restart",
        id,
    )
    .await?;
    Ok(Outcome::Passed)
}

/// Why a node check that needs a volume and the node service is skipped.
fn node_check_skipped(ctx: &Ctx<'_>) -> Option<String> {
    if !ctx.caps.node {
        return Some(ctx.no_node());
    }
    if !ctx.caps.create {
        return Some(NO_CREATE.into());
    }
    None
}

/// NodeStageVolume three times, a restart, NodeUnstageVolume twice, and
/// staging again finds the data.
pub(super) async fn stage_unstage_repeats(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if let Some(why) = node_check_skipped(ctx) {
        return Ok(Outcome::Skipped(why));
    }
    if !ctx.caps.stage_unstage {
        return Ok(Outcome::Skipped(
            "the node does not advertise STAGE_UNSTAGE_VOLUME (the provisioner stages \
             on publish: publish_unpublish_repeats covers it)"
                .into(),
        ));
    }
    let volume = ctx.create("pav-testing-stage-repeats").await?;
    let id = volume.volume_id.as_str();
    let staging = ctx.h.staging_path("stage-repeats");
    let data = ctx.staged_data(&staging);
    for i in 1..=3 {
        ctx.stage(format!("NodeStageVolume #{i}"), id, &staging)
            .await?;
    }
    expect_mounts("after NodeStageVolume three times", &data, 1)?;
    ctx.write_marker(&data)?;
    // The CO may send DeleteVolume before the last NodeUnstageVolume (a
    // claim deleted together with its pod): refused while the volume is
    // staged, and the data kept (checked below).
    let delete = csi::DeleteVolumeRequest {
        volume_id: id.to_owned(),
        ..Default::default()
    };
    expect_codes(
        "DeleteVolume of the staged volume",
        call(ctx.h.controller.delete_volume(delete)).await,
        &[Code::FailedPrecondition],
    )?;
    ctx.restart().await?;
    ctx.stage("NodeStageVolume after a driver restart", id, &staging)
        .await?;
    expect_mounts("after NodeStageVolume after a driver restart", &data, 1)?;
    ctx.unstage("NodeUnstageVolume", id, &staging).await?;
    ctx.unstage("NodeUnstageVolume repeated", id, &staging)
        .await?;
    expect_mounts("after NodeUnstageVolume", &staging, 0)?;
    expect_mounts("after NodeUnstageVolume", &data, 0)?;
    ctx.stage("NodeStageVolume after unstaging", id, &staging)
        .await?;
    if !ctx.holds_marker(&data)? {
        return Err(format!(
            "staged again after NodeUnstageVolume, the volume at {} no longer holds what \
             was written into it (Unstage or Stage lost the data)",
            data.display()
        ));
    }
    ctx.unstage("NodeUnstageVolume", id, &staging).await?;
    ctx.delete("DeleteVolume", id).await?;
    ctx.nothing_mounted("with every volume unstaged")?;
    Ok(Outcome::Passed)
}

/// NodePublishVolume three times, NodeGetVolumeStats, NodeUnpublishVolume
/// twice (the target removed), and publishing again finds the data.
pub(super) async fn publish_unpublish_repeats(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if let Some(why) = node_check_skipped(ctx) {
        return Ok(Outcome::Skipped(why));
    }
    let volume = ctx.create("pav-testing-publish-repeats").await?;
    let id = volume.volume_id.as_str();
    let staging = match ctx.caps.stage_unstage {
        true => {
            let staging = ctx.h.staging_path("publish-repeats");
            ctx.stage("NodeStageVolume", id, &staging).await?;
            Some(staging)
        }
        false => None,
    };
    let target = ctx.h.target_path("pod-1", "publish-repeats");
    for i in 1..=3 {
        ctx.publish(
            format!("NodePublishVolume #{i}"),
            id,
            staging.as_deref(),
            &target,
        )
        .await?;
    }
    expect_mounts("after NodePublishVolume three times", &target, 1)?;
    let req = csi::NodeGetVolumeStatsRequest {
        volume_id: id.to_owned(),
        volume_path: text(&target),
        staging_target_path: staging.as_deref().map(text).unwrap_or_default(),
    };
    let what = "NodeGetVolumeStats of the published volume";
    let stats = expect_ok(what, call(ctx.h.node.node_get_volume_stats(req)).await)?;
    if stats.usage.is_empty() {
        return Err(format!("{what}: OK without usage"));
    }
    ctx.write_marker(&target)?;
    ctx.unpublish("NodeUnpublishVolume", id, &target).await?;
    ctx.unpublish("NodeUnpublishVolume repeated", id, &target)
        .await?;
    if std::fs::symlink_metadata(&target).is_ok() {
        return Err(format!(
            "after NodeUnpublishVolume, the target path {} still exists",
            target.display()
        ));
    }
    ctx.publish(
        "NodePublishVolume after unpublishing",
        id,
        staging.as_deref(),
        &target,
    )
    .await?;
    if !ctx.holds_marker(&target)? {
        return Err(format!(
            "published again after NodeUnpublishVolume, the volume at {} no longer holds \
             what was written into it",
            target.display()
        ));
    }
    ctx.unpublish("NodeUnpublishVolume", id, &target).await?;
    if let Some(staging) = &staging {
        ctx.unstage("NodeUnstageVolume", id, staging).await?;
    }
    ctx.delete("DeleteVolume", id).await?;
    ctx.nothing_mounted("with every volume unpublished and unstaged")?;
    Ok(Outcome::Passed)
}

/// ControllerExpandVolume grows, answers repeats and never shrinks;
/// NodeExpandVolume of the published volume succeeds, twice.
pub(super) async fn expand(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    let node_expands = ctx.caps.node && ctx.caps.node_expand;
    if !ctx.caps.controller_expand && !node_expands {
        return Ok(Outcome::Skipped(
            "neither the controller nor the node advertises EXPAND_VOLUME (no Expand, no NodeExpand)"
                .into(),
        ));
    }
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    let (size, grown) = (ctx.size(), ctx.expanded_size());
    let volume = ctx.create("pav-testing-expand").await?;
    let id = volume.volume_id.as_str();
    let mut current = size;
    let mut not_applying = Vec::new();
    if ctx.caps.controller_expand {
        let expand = |required: u64, volume_id: &str| csi::ControllerExpandVolumeRequest {
            volume_id: volume_id.to_owned(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: int64(required),
                limit_bytes: 0,
            }),
            volume_capability: Some(ctx.capability()),
            ..Default::default()
        };
        let (to_grown, to_size, unknown) =
            (expand(grown, id), expand(size, id), expand(grown, UNKNOWN));
        let what = format!("ControllerExpandVolume from {size} to {grown} bytes");
        let first = expect_ok(
            &what,
            call(ctx.h.controller.controller_expand_volume(to_grown.clone())).await,
        )?;
        if first.capacity_bytes < int64(grown) {
            return Err(format!(
                "{what}: answered {} bytes, less than required",
                first.capacity_bytes
            ));
        }
        let what = "ControllerExpandVolume repeated";
        let again = expect_ok(
            what,
            call(ctx.h.controller.controller_expand_volume(to_grown)).await,
        )?;
        if again.capacity_bytes != first.capacity_bytes {
            return Err(format!(
                "{what}: answered {} bytes, the first answer was {}",
                again.capacity_bytes, first.capacity_bytes
            ));
        }
        let what = format!(
            "ControllerExpandVolume to the original {size} bytes after growing it (a stale retry)"
        );
        let stale = expect_ok(
            &what,
            call(ctx.h.controller.controller_expand_volume(to_size)).await,
        )?;
        if stale.capacity_bytes < first.capacity_bytes {
            return Err(format!(
                "{what}: answered {} bytes: the volume shrank from {} (Expand must never shrink a volume)",
                stale.capacity_bytes, first.capacity_bytes
            ));
        }
        expect_codes(
            "ControllerExpandVolume of a volume that was never created",
            call(ctx.h.controller.controller_expand_volume(unknown)).await,
            &[Code::NotFound],
        )?;
        current = grown;
    } else {
        not_applying.push("controller expansion: the controller does not advertise EXPAND_VOLUME");
    }
    if node_expands {
        let mounted = ctx.mount_for_pod(id, "expand").await?;
        let (staging, target) = (&mounted.0, &mounted.1);
        let req = csi::NodeExpandVolumeRequest {
            volume_id: id.to_owned(),
            volume_path: text(target),
            staging_target_path: staging.as_deref().map(text).unwrap_or_default(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: int64(current),
                limit_bytes: 0,
            }),
            volume_capability: Some(ctx.capability()),
            ..Default::default()
        };
        for what in [
            "NodeExpandVolume of the published volume",
            "NodeExpandVolume repeated",
        ] {
            let answer = expect_ok(what, call(ctx.h.node.node_expand_volume(req.clone())).await)?;
            if answer.capacity_bytes != 0 && answer.capacity_bytes < int64(current) {
                return Err(format!(
                    "{what}: answered {} bytes, less than the volume's {current}",
                    answer.capacity_bytes
                ));
            }
        }
        let unknown = csi::NodeExpandVolumeRequest {
            volume_id: UNKNOWN.into(),
            volume_path: "some/path".into(),
            ..Default::default()
        };
        expect_codes(
            "NodeExpandVolume of a volume that was never created",
            call(ctx.h.node.node_expand_volume(unknown)).await,
            &[Code::NotFound],
        )?;
        ctx.unmount_for_pod(id, "expand", mounted).await?;
    } else if !ctx.caps.node {
        not_applying.push("node expansion: the node service is not served");
    } else {
        not_applying.push("node expansion: the node does not advertise EXPAND_VOLUME");
    }
    ctx.delete("DeleteVolume", id).await?;
    match not_applying.is_empty() {
        true => Ok(Outcome::Passed),
        false => Ok(Outcome::Partly(not_applying.join("; "))),
    }
}

/// Polls CreateSnapshot until the snapshot is ready to use (at most a
/// minute), checking each answer.
async fn take_snapshot(
    ctx: &mut Ctx<'_>,
    what: &str,
    req: &csi::CreateSnapshotRequest,
) -> Step<csi::Snapshot> {
    for _ in 0..120 {
        let answer = expect_ok(
            what,
            call(ctx.h.controller.create_snapshot(req.clone())).await,
        )?;
        let snapshot = answer
            .snapshot
            .ok_or_else(|| format!("{what}: OK without a snapshot"))?;
        if !snapshot.snapshot_id.is_empty() && !ctx.snapshots.contains(&snapshot.snapshot_id) {
            ctx.snapshots.push(snapshot.snapshot_id.clone());
        }
        if snapshot.snapshot_id.is_empty()
            || snapshot.source_volume_id != req.source_volume_id
            || snapshot.creation_time.is_none()
        {
            return Err(format!(
                "{what}: expected a snapshot id, the source volume id {:?} and a creation \
                 time, got {:?}, {:?} and {:?}",
                req.source_volume_id,
                snapshot.snapshot_id,
                snapshot.source_volume_id,
                snapshot.creation_time
            ));
        }
        if snapshot.ready_to_use {
            return Ok(snapshot);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "{what}: the snapshot was not ready_to_use within a minute"
    ))
}

/// ListSnapshots with a filter; the snapshot ids listed.
async fn list_snapshots(
    ctx: &mut Ctx<'_>,
    what: &str,
    req: csi::ListSnapshotsRequest,
) -> Step<Vec<csi::Snapshot>> {
    let answer = expect_ok(what, call(ctx.h.controller.list_snapshots(req)).await)?;
    Ok(answer
        .entries
        .into_iter()
        .filter_map(|e| e.snapshot)
        .collect())
}

/// A snapshot taken, answered again (also after a restart), listed,
/// refused for another volume, restored (with the data) and deleted.
pub(super) async fn snapshot_round_trip(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if !ctx.caps.snapshots {
        return Ok(Outcome::Skipped(
            "the controller does not advertise CREATE_DELETE_SNAPSHOT (no Snapshot)".into(),
        ));
    }
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    let mut not_applying = Vec::new();
    let source = ctx.create("pav-testing-snapshot-source").await?;
    let source_id = source.volume_id.as_str();
    let with_data = ctx.caps.node;
    if with_data {
        let mounted = ctx.mount_for_pod(source_id, "snapshot-source").await?;
        ctx.write_marker(&mounted.1)?;
        ctx.unmount_for_pod(source_id, "snapshot-source", mounted)
            .await?;
    } else {
        not_applying.push(format!("the data round trip: {}", ctx.no_node()));
    }
    let req = csi::CreateSnapshotRequest {
        name: "pav-testing-snapshot".into(),
        source_volume_id: source_id.to_owned(),
        ..Default::default()
    };
    let snapshot = take_snapshot(ctx, "CreateSnapshot", &req).await?;
    let same = |what: &str, again: &csi::Snapshot| -> Step<()> {
        match again.snapshot_id == snapshot.snapshot_id {
            true => Ok(()),
            false => Err(format!(
                "{what}: answered snapshot {:?}, the first answer was {:?}",
                again.snapshot_id, snapshot.snapshot_id
            )),
        }
    };
    let what = "CreateSnapshot repeated";
    same(what, &take_snapshot(ctx, what, &req).await?)?;
    ctx.restart().await?;
    let what = "CreateSnapshot repeated after a driver restart (answered by the provisioner, \
                not pav-csi's cache: create_snapshot must be idempotent by name)";
    same(what, &take_snapshot(ctx, what, &req).await?)?;

    if ctx.caps.list_snapshots {
        let what = "ListSnapshots by the snapshot's id";
        let req = csi::ListSnapshotsRequest {
            snapshot_id: snapshot.snapshot_id.clone(),
            ..Default::default()
        };
        let listed = list_snapshots(ctx, what, req).await?;
        if listed.len() != 1
            || listed[0].snapshot_id != snapshot.snapshot_id
            || listed[0].source_volume_id != source_id
        {
            return Err(format!(
                "{what}: expected that snapshot alone, got {listed:?}"
            ));
        }
        let what = "ListSnapshots by the source volume";
        let req = csi::ListSnapshotsRequest {
            source_volume_id: source_id.to_owned(),
            ..Default::default()
        };
        let listed = list_snapshots(ctx, what, req).await?;
        if !listed.iter().any(|s| s.snapshot_id == snapshot.snapshot_id) {
            return Err(format!("{what}: the snapshot is not listed: {listed:?}"));
        }
    } else {
        not_applying.push("listing: the controller does not advertise LIST_SNAPSHOTS".into());
    }

    let other = ctx.create("pav-testing-snapshot-other").await?;
    let from_other = csi::CreateSnapshotRequest {
        source_volume_id: other.volume_id.clone(),
        ..req.clone()
    };
    // The repeats filled pav-csi's cache again, which would refuse the
    // next request itself.
    ctx.restart().await?;
    let what = "CreateSnapshot of the same name from another volume, after a driver restart \
                (answered by the provisioner)";
    match call(ctx.h.controller.create_snapshot(from_other)).await {
        Err(status) if status.code() == Code::AlreadyExists => {}
        Err(status) => {
            return Err(format!(
                "{what}: expected ALREADY_EXISTS, got {}",
                answered(&status)
            ));
        }
        Ok(answer) => {
            if let Some(taken) = answer.snapshot {
                ctx.snapshots.push(taken.snapshot_id);
            }
            return Err(format!("{what}: expected ALREADY_EXISTS, got OK"));
        }
    }

    let snapshot_source = csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: snapshot.snapshot_id.clone(),
            },
        )),
    };
    let restore = csi::CreateVolumeRequest {
        volume_content_source: Some(snapshot_source.clone()),
        ..ctx.create_request("pav-testing-restored", ctx.size(), 0)
    };
    let what = "CreateVolume from the snapshot";
    let restored = ctx.create_with(what, restore).await?;
    if restored.content_source.as_ref() != Some(&snapshot_source) {
        return Err(format!(
            "{what}: the answer's content_source is {:?}, not the snapshot",
            restored.content_source
        ));
    }
    if with_data {
        let mounted = ctx.mount_for_pod(&restored.volume_id, "restored").await?;
        let holds = ctx.holds_marker(&mounted.1)?;
        ctx.unmount_for_pod(&restored.volume_id, "restored", mounted)
            .await?;
        if !holds {
            return Err(
                "the volume restored from the snapshot does not hold what was written into \
                 its source before the snapshot"
                    .into(),
            );
        }
    }
    ctx.delete("DeleteVolume of the restored volume", &restored.volume_id)
        .await?;
    let from_unknown = csi::CreateVolumeRequest {
        volume_content_source: Some(csi::VolumeContentSource {
            r#type: Some(csi::volume_content_source::Type::Snapshot(
                csi::volume_content_source::SnapshotSource {
                    snapshot_id: UNKNOWN.into(),
                },
            )),
        }),
        ..ctx.create_request("pav-testing-from-unknown-snapshot", ctx.size(), 0)
    };
    let answer = call(ctx.h.controller.create_volume(from_unknown)).await;
    if let Ok(csi::CreateVolumeResponse { volume: Some(v) }) = &answer {
        ctx.track_volume(v);
    }
    expect_codes(
        "CreateVolume from a snapshot that was never taken",
        answer,
        &[Code::NotFound],
    )?;

    for (what, id) in [
        ("DeleteSnapshot", snapshot.snapshot_id.as_str()),
        ("DeleteSnapshot repeated", snapshot.snapshot_id.as_str()),
        ("DeleteSnapshot of csi-sanity's invalid id", FAKE_SNAPSHOT),
    ] {
        let req = csi::DeleteSnapshotRequest {
            snapshot_id: id.to_owned(),
            ..Default::default()
        };
        expect_ok(what, call(ctx.h.controller.delete_snapshot(req)).await)?;
    }
    ctx.snapshots.retain(|s| *s != snapshot.snapshot_id);
    if ctx.caps.list_snapshots {
        let what = "ListSnapshots by the deleted snapshot's id";
        let req = csi::ListSnapshotsRequest {
            snapshot_id: snapshot.snapshot_id.clone(),
            ..Default::default()
        };
        let listed = list_snapshots(ctx, what, req).await?;
        if !listed.is_empty() {
            return Err(format!("{what}: still listed: {listed:?}"));
        }
    }
    ctx.delete("DeleteVolume of the other volume", &other.volume_id)
        .await?;
    ctx.delete("DeleteVolume of the source", source_id).await?;
    match not_applying.is_empty() {
        true => Ok(Outcome::Passed),
        false => Ok(Outcome::Partly(not_applying.join("; "))),
    }
}

/// Every file, directory and link below `dir` outside `skip`, with its
/// type, size and modification time.
fn listing(dir: &Path, skip: &[&Path]) -> Step<BTreeMap<PathBuf, (char, u64, i64, i64)>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        let entries =
            std::fs::read_dir(&at).map_err(|e| format!("listing {}: {e}", at.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("listing {}: {e}", at.display()))?;
            let path = entry.path();
            if skip.iter().any(|s| path.starts_with(s)) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            let kind = match meta.file_type() {
                t if t.is_dir() => 'd',
                t if t.is_symlink() => 'l',
                t if t.is_file() => 'f',
                _ => '?',
            };
            if kind == 'd' {
                stack.push(path.clone());
            }
            found.insert(path, (kind, meta.len(), meta.mtime(), meta.mtime_nsec()));
        }
    }
    Ok(found)
}

/// Ids a client may send that name no volume. With `climbing`, also ids
/// that climb out of the directory they are joined to
/// (`../pav-testing-victim` with one to four `..`, `a/../../...`, `.`,
/// `..`): joined to
/// the harness's storage directory, or to a directory below it, they reach
/// the decoys next to its ancestors, all inside the temporary directory.
/// Never `/` nor any absolute path: `Path::join` of one replaces the base,
/// so a provisioner removing `root.join(id)` would remove that path itself
/// (`/` is the whole filesystem). The last id is longer than CSI allows,
/// which pav-csi refuses itself.
fn hostile_ids(climbing: bool) -> Vec<String> {
    let mut ids: Vec<String> = ["-rf", "new\nline", "nul\0byte"]
        .into_iter()
        .map(String::from)
        .collect();
    if climbing {
        for up in 1..=4 {
            ids.push(format!("{}{DECOY}", "../".repeat(up)));
        }
        ids.push(format!("a/../../{DECOY}"));
        ids.push(format!("{DECOY}/../.."));
        // Last: a provisioner that removes what these name removes its
        // own directory, and the ids above would then lead nowhere.
        ids.extend([".".to_owned(), "..".to_owned()]);
    }
    ids.push("i".repeat(MAX_NAME));
    ids.push("o".repeat(MAX_NAME + 1));
    ids
}

/// Whether `id` joined to `base` (as `Path::join` does, `..` then taken
/// lexically, as the kernel does without symlinks) stays inside `dir` at
/// every step and ends strictly inside it.
fn lands_inside(base: &Path, id: &str, dir: &Path) -> bool {
    let mut at = base.to_path_buf();
    for component in Path::new(id).components() {
        match component {
            Component::Normal(name) => at.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop();
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
        if !at.starts_with(dir) {
            return false;
        }
    }
    at != dir
}

/// Why ids that climb are not sent to a provisioner given as a value.
const NO_CLIMBING: &str = "ids that climb (`.`, `..`, `../pav-testing-victim`, ...): not \
    sent, as the provisioner was given as a value (Conformance::new) and keeps its storage \
    outside the harness's temporary directory, where such an id joined to its directory \
    would reach that directory's parent; build it on the harness's directory with \
    Conformance::with_storage(|dir| ...) to send them";

/// Hostile ids and paths reach nothing outside the driver's directories.
pub(super) async fn hostile_ids_and_paths(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if !ctx.caps.create && !ctx.caps.node {
        return Ok(Outcome::Skipped(format!(
            "{NO_CREATE}, and {}",
            ctx.no_node()
        )));
    }
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_owned());
    let dir = canonical(ctx.h.dir());
    let kubelet = canonical(ctx.h.kubelet_dir());
    let storage = canonical(ctx.h.storage_dir());
    let socket = canonical(ctx.h.socket());
    let outside = dir.join("outside");
    std::fs::create_dir_all(outside.join("data"))
        .and_then(|()| std::fs::write(outside.join("data/file"), "must survive"))
        .and_then(|()| std::os::unix::fs::symlink(&outside, kubelet.join("escape")))
        .map_err(|e| format!("preparing {}: {e}", outside.display()))?;
    let skip = [kubelet.as_path(), storage.as_path(), socket.as_path()];
    let before = listing(&dir, &skip)?;
    let mut not_applying = Vec::new();

    // Ids that climb only where the provisioner's storage is the harness's
    // storage directory: joined to a real storage directory they would
    // reach its parent.
    let climbing = ctx.h.provisioner_in_storage_dir();
    if !climbing {
        not_applying.push(NO_CLIMBING.to_owned());
    }
    let ids = hostile_ids(climbing);
    // Whatever the provisioner joins an id to in the storage directory,
    // the result stays in the temporary directory (checked, not assumed).
    if let Some(id) = (ids.iter()).find(|id| !lands_inside(&storage, id, &dir)) {
        return Err(format!(
            "pav-csi's testing kit would send the id {id:?}, which leads out of the harness's \
             temporary directory {}: not sent (a bug of the kit)",
            dir.display()
        ));
    }

    for id in ids {
        let refused_by_pav_csi = id.len() > MAX_NAME;
        // What pav-csi answers an id longer than CSI allows, for every call.
        let or = |code: Code| match refused_by_pav_csi {
            true => vec![Code::InvalidArgument],
            false => vec![code],
        };
        if ctx.caps.create {
            let req = csi::DeleteVolumeRequest {
                volume_id: id.clone(),
                ..Default::default()
            };
            expect_codes(
                format!("DeleteVolume of {id:?}, which names no volume"),
                call(ctx.h.controller.delete_volume(req)).await,
                &or(Code::Ok),
            )?;
            let req = ctx.validate_request(&id);
            expect_codes(
                format!("ValidateVolumeCapabilities of {id:?}"),
                call(ctx.h.controller.validate_volume_capabilities(req)).await,
                &or(Code::NotFound),
            )?;
            if ctx.caps.controller_expand {
                let req = csi::ControllerExpandVolumeRequest {
                    volume_id: id.clone(),
                    capacity_range: Some(csi::CapacityRange {
                        required_bytes: int64(ctx.expanded_size()),
                        limit_bytes: 0,
                    }),
                    ..Default::default()
                };
                expect_codes(
                    format!("ControllerExpandVolume of {id:?}"),
                    call(ctx.h.controller.controller_expand_volume(req)).await,
                    &or(Code::NotFound),
                )?;
            }
            if ctx.caps.snapshots {
                let req = csi::CreateSnapshotRequest {
                    name: "pav-testing-hostile".into(),
                    source_volume_id: id.clone(),
                    ..Default::default()
                };
                let answer = call(ctx.h.controller.create_snapshot(req)).await;
                if let Ok(csi::CreateSnapshotResponse { snapshot: Some(s) }) = &answer {
                    ctx.snapshots.push(s.snapshot_id.clone());
                }
                expect_codes(
                    format!("CreateSnapshot of volume {id:?}"),
                    answer,
                    &or(Code::NotFound),
                )?;
                let req = csi::DeleteSnapshotRequest {
                    snapshot_id: id.clone(),
                    ..Default::default()
                };
                expect_codes(
                    format!("DeleteSnapshot of {id:?}"),
                    call(ctx.h.controller.delete_snapshot(req)).await,
                    &or(Code::Ok),
                )?;
                let req = csi::CreateVolumeRequest {
                    volume_content_source: Some(csi::VolumeContentSource {
                        r#type: Some(csi::volume_content_source::Type::Snapshot(
                            csi::volume_content_source::SnapshotSource {
                                snapshot_id: id.clone(),
                            },
                        )),
                    }),
                    ..ctx.create_request("pav-testing-hostile-restore", ctx.size(), 0)
                };
                let answer = call(ctx.h.controller.create_volume(req)).await;
                if let Ok(csi::CreateVolumeResponse { volume: Some(v) }) = &answer {
                    ctx.track_volume(v);
                }
                expect_codes(
                    format!("CreateVolume from snapshot {id:?}"),
                    answer,
                    &or(Code::NotFound),
                )?;
            }
            // As a name: refused, or a volume like any other.
            let req = ctx.create_request(&id, ctx.size(), 0);
            let what = format!("CreateVolume named {id:?}");
            match call(ctx.h.controller.create_volume(req)).await {
                Ok(answer) => {
                    let volume = answer
                        .volume
                        .ok_or_else(|| format!("{what}: OK without a volume"))?;
                    ctx.track_volume(&volume);
                    ctx.delete(
                        format!("DeleteVolume of the volume {what}"),
                        &volume.volume_id,
                    )
                    .await?;
                }
                Err(status) if status.code() == Code::InvalidArgument => {}
                Err(status) => {
                    return Err(format!(
                        "{what}: expected INVALID_ARGUMENT or OK, got {}",
                        answered(&status)
                    ));
                }
            }
        }
        if ctx.caps.node && ctx.caps.stage_unstage {
            let staging = ctx.h.staging_path("hostile");
            std::fs::create_dir_all(&staging)
                .map_err(|e| format!("creating {}: {e}", staging.display()))?;
            let req = ctx.stage_request(&id, &text(&staging));
            let answer = call(ctx.h.node.node_stage_volume(req)).await;
            if answer.is_ok() {
                ctx.staged.push((id.clone(), staging.clone()));
            }
            expect_codes(
                format!(
                    "NodeStageVolume of {id:?}, which names no volume \
                     (VolumeId::path_component's error is NOT_FOUND)"
                ),
                answer,
                &or(Code::NotFound),
            )?;
            for at in [staging.clone(), ctx.staged_data(&staging)] {
                expect_mounts(&format!("after NodeStageVolume of {id:?}"), &at, 0)?;
            }
            let req = csi::NodeUnstageVolumeRequest {
                volume_id: id.clone(),
                staging_target_path: text(&staging),
            };
            expect_codes(
                format!("NodeUnstageVolume of {id:?}"),
                call(ctx.h.node.node_unstage_volume(req)).await,
                &or(Code::Ok),
            )?;
        } else if ctx.caps.node {
            let target = ctx.h.target_path("hostile-pod", "hostile");
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("creating {}: {e}", parent.display()))?;
            }
            let req = ctx.publish_request(&id, "", &text(&target));
            let answer = call(ctx.h.node.node_publish_volume(req)).await;
            if answer.is_ok() {
                ctx.published.push((id.clone(), target.clone()));
            }
            expect_codes(
                format!("NodePublishVolume of {id:?}, which names no volume"),
                answer,
                &or(Code::NotFound),
            )?;
            expect_mounts(&format!("after NodePublishVolume of {id:?}"), &target, 0)?;
        }
    }
    if !ctx.caps.create {
        not_applying.push(format!("controller calls: {NO_CREATE}"));
    }

    if ctx.caps.node && ctx.caps.create {
        let volume = ctx.create("pav-testing-hostile-paths").await?;
        let id = volume.volume_id.as_str();
        let k = text(&kubelet);
        let state = kubelet.join("plugins").join(ctx.h.driver_name());
        let paths = [
            ("a relative path", "kubelet/pods/hostile".to_owned()),
            ("a path with ..", format!("{k}/pods/../../outside/data")),
            (
                "a path outside the kubelet directory",
                text(&outside.join("data")),
            ),
            (
                "a path through a symlink leading out",
                format!("{k}/escape/data"),
            ),
            ("a path with a NUL byte", format!("{k}/pods/nul\0byte")),
            (
                "a path of more than 4096 bytes",
                format!("{k}/{}", "p/".repeat(2100)),
            ),
            (
                "a path in the driver's state directory",
                text(&state.join("hostile")),
            ),
        ];
        let staging = match ctx.caps.stage_unstage {
            true => {
                for (what, path) in &paths {
                    let req = ctx.stage_request(id, path);
                    let answer = call(ctx.h.node.node_stage_volume(req)).await;
                    if answer.is_ok() {
                        ctx.staged.push((id.to_owned(), PathBuf::from(path)));
                    }
                    expect_codes(
                        format!("NodeStageVolume at {what} ({path:?})"),
                        answer,
                        &[Code::InvalidArgument],
                    )?;
                }
                let staging = ctx.h.staging_path("hostile-paths");
                ctx.stage("NodeStageVolume", id, &staging).await?;
                Some(staging)
            }
            false => None,
        };
        let staging_text = staging.as_deref().map(text).unwrap_or_default();
        for (what, path) in &paths {
            let req = ctx.publish_request(id, &staging_text, path);
            let answer = call(ctx.h.node.node_publish_volume(req)).await;
            if answer.is_ok() {
                ctx.published.push((id.to_owned(), PathBuf::from(path)));
            }
            expect_codes(
                format!("NodePublishVolume at {what} ({path:?})"),
                answer,
                &[Code::InvalidArgument],
            )?;
        }
        if let Some(staging) = &staging {
            ctx.unstage("NodeUnstageVolume", id, staging).await?;
        }
        ctx.delete("DeleteVolume", id).await?;
        ctx.nothing_mounted("with every volume unstaged")?;
    } else if !ctx.caps.node {
        not_applying.push(format!("node calls and paths: {}", ctx.no_node()));
    } else {
        not_applying.push(format!("paths: {NO_CREATE}"));
    }

    let after = listing(&dir, &skip)?;
    let mut changed: Vec<String> = Vec::new();
    for (path, was) in &before {
        match after.get(path) {
            None => changed.push(format!("removed {}", path.display())),
            Some(now) if now != was => changed.push(format!("changed {}", path.display())),
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        changed.push(format!("created {}", path.display()));
    }
    if !changed.is_empty() {
        return Err(format!(
            "hostile ids or paths reached outside the kubelet and storage directories: {}",
            changed.join(", ")
        ));
    }
    let mounted: Vec<PathBuf> = crate::mount::blocking::mounts_below(&dir)
        .map_err(|e| format!("reading the mount table: {}", crate::error_chain(&e)))?
        .into_iter()
        .filter(|p| !p.starts_with(&kubelet) && !p.starts_with(&storage))
        .collect();
    if !mounted.is_empty() {
        return Err(format!(
            "mounted outside the kubelet and storage directories: {mounted:?}"
        ));
    }
    match not_applying.is_empty() {
        true => Ok(Outcome::Passed),
        false => Ok(Outcome::Partly(not_applying.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hostile id, joined to the storage directory or below it,
    /// lands inside the temporary directory; none is absolute.
    #[test]
    fn hostile_ids_stay_in_the_temporary_directory() {
        let dir = Path::new("/tmp/.tmpXYZ");
        let storage = dir.join(super::super::harness::STORAGE);
        for climbing in [false, true] {
            for id in hostile_ids(climbing) {
                assert!(!id.starts_with('/'), "{id:?}");
                for base in [
                    storage.clone(),
                    storage.join("volumes"),
                    storage.join("a/b"),
                ] {
                    assert!(lands_inside(&base, &id, dir), "{id:?} from {base:?}");
                }
            }
        }
        let climbs = |id: &String| {
            Path::new(id)
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
                || id.split('/').any(|part| part == "." || part == "..")
        };
        assert!(!hostile_ids(false).iter().any(climbs));
        assert_eq!(hostile_ids(true).iter().filter(|id| climbs(id)).count(), 8);
    }

    #[test]
    fn ids_leading_out_are_told() {
        let dir = Path::new("/tmp/.tmpXYZ");
        let storage = dir.join("a/b/c/storage");
        for id in [
            "/",
            "/etc",
            "../../../../..",
            "../../../../../x",
            "../../../../../.tmpXYZ/x",
        ] {
            assert!(!lands_inside(&storage, id, dir), "{id:?}");
        }
        assert!(
            !lands_inside(&storage, "../../../..", dir),
            "the directory itself"
        );
        assert!(lands_inside(&storage, "../../../../x", dir));
    }
}
