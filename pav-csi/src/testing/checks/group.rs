//! The `group_snapshot_round_trip` check: group snapshots through the
//! GroupController service, as csi-snapshotter uses them.

use std::time::Duration;

use tonic::Code;

use super::{NO_CREATE, list_snapshots};
use crate::csi;
use crate::testing::context::{Ctx, Step, answered, call, expect_codes, expect_ok};
use crate::testing::report::Outcome;

/// The name of the check's group snapshot.
const GROUP: &str = "pav-testing-group";

/// Whether the plugin advertises `GROUP_CONTROLLER_SERVICE` and the group
/// controller `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT`.
async fn advertised(ctx: &mut Ctx<'_>) -> Step<bool> {
    use csi::group_controller_service_capability::Type as GroupType;
    use csi::group_controller_service_capability::rpc::Type as GroupRpc;
    use csi::plugin_capability::Type as PluginType;
    use csi::plugin_capability::service::Type as Service;
    let answer = call(
        ctx.h
            .identity
            .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {}),
    )
    .await;
    let service = (expect_ok("GetPluginCapabilities", answer)?.capabilities.iter())
        .any(|c| matches!(&c.r#type, Some(PluginType::Service(s)) if s.r#type() == Service::GroupControllerService));
    if !service {
        return Ok(false);
    }
    let answer = call(
        ctx.h
            .group_controller
            .group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest {}),
    )
    .await;
    Ok((expect_ok("GroupControllerGetCapabilities", answer)?.capabilities.iter())
        .any(|c| matches!(&c.r#type, Some(GroupType::Rpc(r)) if r.r#type() == GroupRpc::CreateDeleteGetVolumeGroupSnapshot)))
}

/// CreateVolumeGroupSnapshot, asked again until `ready_to_use`; checks
/// the answer's shape: an id, one member per source, each with the
/// group's id and a creation time.
async fn take_group(
    ctx: &mut Ctx<'_>,
    what: &str,
    req: &csi::CreateVolumeGroupSnapshotRequest,
) -> Step<csi::VolumeGroupSnapshot> {
    for _ in 0..120 {
        let answer = call(
            ctx.h
                .group_controller
                .create_volume_group_snapshot(req.clone()),
        )
        .await;
        let group = (expect_ok(what, answer)?.group_snapshot)
            .ok_or_else(|| format!("{what}: OK without a group snapshot"))?;
        if !group.group_snapshot_id.is_empty()
            && !ctx
                .groups
                .iter()
                .any(|(id, _)| *id == group.group_snapshot_id)
        {
            let members = group
                .snapshots
                .iter()
                .map(|s| s.snapshot_id.clone())
                .collect();
            ctx.groups.push((group.group_snapshot_id.clone(), members));
        }
        let mut sources: Vec<&str> = (group.snapshots.iter())
            .map(|s| s.source_volume_id.as_str())
            .collect();
        sources.sort_unstable();
        let mut requested: Vec<&str> = req.source_volume_ids.iter().map(String::as_str).collect();
        requested.sort_unstable();
        if group.group_snapshot_id.is_empty()
            || group.creation_time.is_none()
            || sources != requested
        {
            return Err(format!(
                "{what}: expected a group snapshot id, a creation time and one member per source \
                 {requested:?}, got {:?}, {:?} and members of {sources:?}",
                group.group_snapshot_id, group.creation_time
            ));
        }
        if let Some(member) = (group.snapshots.iter())
            .find(|s| s.group_snapshot_id != group.group_snapshot_id || s.snapshot_id.is_empty())
        {
            return Err(format!(
                "{what}: member {member:?} does not carry the group's id {:?}",
                group.group_snapshot_id
            ));
        }
        if group.ready_to_use {
            return Ok(group);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "{what}: the group snapshot was not ready_to_use within a minute"
    ))
}

/// The member ids of `group`, sorted.
fn member_ids(group: &csi::VolumeGroupSnapshot) -> Vec<String> {
    let mut ids: Vec<String> = group
        .snapshots
        .iter()
        .map(|s| s.snapshot_id.clone())
        .collect();
    ids.sort();
    ids
}

/// See [`Conformance::group_snapshot_round_trip`](crate::testing::Conformance::group_snapshot_round_trip).
pub(in crate::testing) async fn group_snapshot_round_trip(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if !advertised(ctx).await? {
        return Ok(Outcome::Skipped(
            "the plugin does not advertise GROUP_CONTROLLER_SERVICE with \
             CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT (no GroupSnapshot)"
                .into(),
        ));
    }
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    let mut not_applying = Vec::new();
    let first = ctx.create("pav-testing-group-first").await?.volume_id;
    let second = ctx.create("pav-testing-group-second").await?.volume_id;
    let with_data = ctx.caps.node;
    if with_data {
        for id in [&first, &second] {
            let mounted = ctx.mount_for_pod(id, "group-member").await?;
            ctx.write_marker(&mounted.1)?;
            ctx.unmount_for_pod(id, "group-member", mounted).await?;
        }
    } else {
        not_applying.push(format!("the data round trip: {}", ctx.no_node()));
    }
    let req = csi::CreateVolumeGroupSnapshotRequest {
        name: GROUP.into(),
        source_volume_ids: vec![first.clone(), second.clone()],
        ..Default::default()
    };
    let group = take_group(ctx, "CreateVolumeGroupSnapshot", &req).await?;
    let same = |what: &str, again: &csi::VolumeGroupSnapshot| -> Step<()> {
        match again.group_snapshot_id == group.group_snapshot_id
            && member_ids(again) == member_ids(&group)
        {
            true => Ok(()),
            false => Err(format!(
                "{what}: answered group {:?} of {:?}, the first answer was {:?} of {:?}",
                again.group_snapshot_id,
                member_ids(again),
                group.group_snapshot_id,
                member_ids(&group)
            )),
        }
    };
    let what = "CreateVolumeGroupSnapshot repeated";
    same(what, &take_group(ctx, what, &req).await?)?;
    ctx.restart().await?;
    let what = "CreateVolumeGroupSnapshot repeated after a driver restart \
                (create_group_snapshot must be idempotent by name)";
    same(what, &take_group(ctx, what, &req).await?)?;
    let fewer = csi::CreateVolumeGroupSnapshotRequest {
        source_volume_ids: vec![first.clone()],
        ..req.clone()
    };
    let answer = call(ctx.h.group_controller.create_volume_group_snapshot(fewer)).await;
    if let Ok(csi::CreateVolumeGroupSnapshotResponse {
        group_snapshot: Some(g),
    }) = &answer
        && g.group_snapshot_id != group.group_snapshot_id
    {
        let members = g.snapshots.iter().map(|s| s.snapshot_id.clone()).collect();
        ctx.groups.push((g.group_snapshot_id.clone(), members));
    }
    expect_codes(
        "CreateVolumeGroupSnapshot of the same name with fewer volumes",
        answer,
        &[Code::AlreadyExists],
    )?;

    let ids = member_ids(&group);
    let get = |id: &str, ids: &[String]| csi::GetVolumeGroupSnapshotRequest {
        group_snapshot_id: id.to_owned(),
        snapshot_ids: ids.to_vec(),
        ..Default::default()
    };
    let what = "GetVolumeGroupSnapshot";
    let answer = call(
        ctx.h
            .group_controller
            .get_volume_group_snapshot(get(&group.group_snapshot_id, &ids)),
    )
    .await;
    let got = (expect_ok(what, answer)?.group_snapshot)
        .ok_or_else(|| format!("{what}: OK without a group snapshot"))?;
    same(what, &got)?;
    let answer = call(
        ctx.h
            .group_controller
            .get_volume_group_snapshot(get(super::UNKNOWN, &[])),
    )
    .await;
    expect_codes(
        "GetVolumeGroupSnapshot of a group never taken",
        answer,
        &[Code::NotFound],
    )?;

    if ctx.caps.list_snapshots {
        for member in &ids {
            let what = "ListSnapshots by a member's id";
            let req = csi::ListSnapshotsRequest {
                snapshot_id: member.clone(),
                ..Default::default()
            };
            let listed = list_snapshots(ctx, what, req).await?;
            if listed.len() != 1 || listed[0].group_snapshot_id != group.group_snapshot_id {
                return Err(format!(
                    "{what}: expected the member alone, with group_snapshot_id {:?}, got {listed:?}",
                    group.group_snapshot_id
                ));
            }
        }
    } else {
        not_applying.push("listing: the controller does not advertise LIST_SNAPSHOTS".into());
    }

    for member in &group.snapshots {
        let source = csi::VolumeContentSource {
            r#type: Some(csi::volume_content_source::Type::Snapshot(
                csi::volume_content_source::SnapshotSource {
                    snapshot_id: member.snapshot_id.clone(),
                },
            )),
        };
        let restore = csi::CreateVolumeRequest {
            volume_content_source: Some(source),
            ..ctx.create_request("pav-testing-group-restored", ctx.size(), 0)
        };
        let what = "CreateVolume from a group snapshot's member";
        let restored = ctx.create_with(what, restore).await?;
        if with_data {
            let mounted = ctx
                .mount_for_pod(&restored.volume_id, "group-restored")
                .await?;
            let holds = ctx.holds_marker(&mounted.1)?;
            ctx.unmount_for_pod(&restored.volume_id, "group-restored", mounted)
                .await?;
            if !holds {
                return Err(format!(
                    "the volume restored from member {:?} does not hold what was written into \
                     its source before the group snapshot",
                    member.snapshot_id
                ));
            }
        }
        ctx.delete("DeleteVolume of a restored member", &restored.volume_id)
            .await?;
    }

    let delete = csi::DeleteVolumeGroupSnapshotRequest {
        group_snapshot_id: group.group_snapshot_id.clone(),
        snapshot_ids: ids.clone(),
        ..Default::default()
    };
    for what in [
        "DeleteVolumeGroupSnapshot",
        "DeleteVolumeGroupSnapshot repeated",
    ] {
        let answer = call(
            ctx.h
                .group_controller
                .delete_volume_group_snapshot(delete.clone()),
        )
        .await;
        expect_ok(what, answer)?;
    }
    ctx.groups.retain(|(id, _)| *id != group.group_snapshot_id);
    let what = "GetVolumeGroupSnapshot of the deleted group";
    match call(
        ctx.h
            .group_controller
            .get_volume_group_snapshot(get(&group.group_snapshot_id, &[])),
    )
    .await
    {
        Err(status) if status.code() == Code::NotFound => {}
        Err(status) => {
            return Err(format!(
                "{what}: expected NOT_FOUND, got {}",
                answered(&status)
            ));
        }
        Ok(_) => return Err(format!("{what}: expected NOT_FOUND, got OK")),
    }
    if ctx.caps.list_snapshots {
        for member in &ids {
            let what = "ListSnapshots by a deleted member's id";
            let req = csi::ListSnapshotsRequest {
                snapshot_id: member.clone(),
                ..Default::default()
            };
            let listed = list_snapshots(ctx, what, req).await?;
            if !listed.is_empty() {
                return Err(format!("{what}: still listed: {listed:?}"));
            }
        }
    }
    ctx.delete("DeleteVolume of the second member's source", &second)
        .await?;
    ctx.delete("DeleteVolume of the first member's source", &first)
        .await?;
    match not_applying.is_empty() {
        true => Ok(Outcome::Passed),
        false => Ok(Outcome::Partly(not_applying.join("; "))),
    }
}
