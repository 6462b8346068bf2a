//! The `modify` and `health` conformance checks (see
//! [`Conformance::modify`](crate::testing::Conformance::modify) and
//! [`Conformance::health`](crate::testing::Conformance::health)).

use tonic::Code;

use super::{NO_CREATE, UNKNOWN};
use crate::csi;
use crate::testing::context::{Ctx, Step, call, expect_codes, expect_ok, text};
use crate::testing::report::Outcome;

/// ControllerModifyVolume applies, answers repeats, refuses unknown
/// volumes, and what it set survives a restart.
pub(in crate::testing) async fn modify(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if !ctx.caps.modify {
        return Ok(Outcome::Skipped(
            "the controller does not advertise MODIFY_VOLUME (no Modify)".into(),
        ));
    }
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    let parameters = ctx.conf.mutable_parameters.clone();
    let request = |volume_id: &str| csi::ControllerModifyVolumeRequest {
        volume_id: volume_id.to_owned(),
        mutable_parameters: parameters.clone(),
        ..Default::default()
    };
    expect_codes(
        "ControllerModifyVolume of a volume that was never created",
        call(ctx.h.controller.controller_modify_volume(request(UNKNOWN))).await,
        &[Code::NotFound],
    )?;
    if parameters.is_empty() {
        return Ok(Outcome::Partly(
            "modifying a volume: no mutable parameters given \
             (Conformance::mutable_parameters, csi-sanity's --csi.testvolumemutableparameters)"
                .into(),
        ));
    }
    let name = "pav-testing-modify";
    let created = ctx.create(name).await?;
    let id = created.volume_id.as_str();
    for what in ["ControllerModifyVolume", "ControllerModifyVolume repeated"] {
        let answer = call(ctx.h.controller.controller_modify_volume(request(id))).await;
        expect_ok(what, answer)?;
    }
    ctx.restart().await?;
    let what = "CreateVolume repeated after a driver restart, with the mutable parameters \
                the volume was modified to (Modify must keep them where a restarted \
                provisioner finds them: a repeated Create compares them)";
    let mut again = ctx.create_request(name, ctx.size(), 0);
    again.mutable_parameters = parameters.clone();
    let same = ctx.create_with(what, again).await?;
    if same.volume_id != created.volume_id {
        return Err(format!(
            "{what}: answered volume {:?}, the volume is {:?}",
            same.volume_id, created.volume_id
        ));
    }
    let what = "ControllerModifyVolume repeated after a driver restart";
    expect_ok(
        what,
        call(ctx.h.controller.controller_modify_volume(request(id))).await,
    )?;
    ctx.delete("DeleteVolume", id).await?;
    Ok(Outcome::Passed)
}

/// What the controller and the node say of a volume's condition.
pub(in crate::testing) async fn health(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if ctx.h.provisioner().health().is_none() {
        return Ok(Outcome::Skipped("the provisioner has no Health".into()));
    }
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    let mut not_applying = Vec::new();
    let volume = ctx.create("pav-testing-health").await?;
    let id = volume.volume_id.clone();
    if ctx.caps.get_volume {
        expect_codes(
            "ControllerGetVolume without a volume id",
            call(ctx.h.controller.controller_get_volume(get(""))).await,
            &[Code::InvalidArgument],
        )?;
        expect_codes(
            "ControllerGetVolume of a volume that was never created",
            call(ctx.h.controller.controller_get_volume(get(UNKNOWN))).await,
            &[Code::NotFound],
        )?;
        let condition = controller_condition(ctx, &id, "a volume just created").await?;
        if condition.abnormal {
            return Err(format!(
                "ControllerGetVolume of a volume just created: abnormal ({:?})",
                condition.message
            ));
        }
    } else {
        not_applying.push("the controller: GET_VOLUME is not advertised (Health needs a listing: List or records)");
    }
    let mounted = match ctx.caps.node {
        true => {
            let mounted = ctx.mount_for_pod(&id, "health").await?;
            let condition = node_condition(ctx, &id, &mounted.1, "a volume just created").await?;
            if condition.abnormal {
                return Err(format!(
                    "NodeGetVolumeStats of a volume just created: abnormal ({:?})",
                    condition.message
                ));
            }
            Some(mounted)
        }
        false => {
            not_applying.push("the node: the node service is not served");
            None
        }
    };
    match &ctx.conf.damage {
        Some(damage) => {
            damage(ctx.h.storage_dir(), &id)
                .map_err(|e| format!("Conformance::damage of volume {id:?} failed: {e}"))?;
            let after = "a volume Conformance::damage damaged";
            if ctx.caps.get_volume {
                let condition = controller_condition(ctx, &id, after).await?;
                expect_abnormal("ControllerGetVolume", after, &condition)?;
            }
            if let Some(mounted) = &mounted {
                let condition = node_condition(ctx, &id, &mounted.1, after).await?;
                expect_abnormal("NodeGetVolumeStats", after, &condition)?;
            }
        }
        None => not_applying.push("a damaged volume: no Conformance::damage given"),
    }
    if let Some(mounted) = mounted {
        ctx.unmount_for_pod(&id, "health", mounted).await?;
    }
    ctx.delete("DeleteVolume", &id).await?;
    match not_applying.is_empty() {
        true => Ok(Outcome::Passed),
        false => Ok(Outcome::Partly(not_applying.join("; "))),
    }
}

fn get(volume_id: &str) -> csi::ControllerGetVolumeRequest {
    csi::ControllerGetVolumeRequest {
        volume_id: volume_id.to_owned(),
    }
}

/// The condition ControllerGetVolume answers for `id` (of `which`).
async fn controller_condition(
    ctx: &mut Ctx<'_>,
    id: &str,
    which: &str,
) -> Step<csi::VolumeCondition> {
    let what = format!("ControllerGetVolume of {which}");
    let answer = expect_ok(
        &what,
        call(ctx.h.controller.controller_get_volume(get(id))).await,
    )?;
    let answered = answer.volume.as_ref().map(|v| v.volume_id.as_str());
    if answered != Some(id) {
        return Err(format!("{what}: answered volume {answered:?}, not {id:?}"));
    }
    let status = answer.status.and_then(|s| s.volume_condition);
    status.ok_or_else(|| {
        format!("{what}: no volume_condition, though VOLUME_CONDITION is advertised")
    })
}

/// The condition NodeGetVolumeStats answers for `id` published at `target`.
async fn node_condition(
    ctx: &mut Ctx<'_>,
    id: &str,
    target: &std::path::Path,
    which: &str,
) -> Step<csi::VolumeCondition> {
    let what = format!("NodeGetVolumeStats of {which}");
    let req = csi::NodeGetVolumeStatsRequest {
        volume_id: id.to_owned(),
        volume_path: text(target),
        staging_target_path: String::new(),
    };
    let answer = expect_ok(&what, call(ctx.h.node.node_get_volume_stats(req)).await)?;
    (answer.volume_condition).ok_or_else(|| {
        format!("{what}: no volume_condition, though VOLUME_CONDITION is advertised")
    })
}

fn expect_abnormal(rpc: &str, which: &str, condition: &csi::VolumeCondition) -> Step<()> {
    if !condition.abnormal {
        return Err(format!(
            "{rpc} of {which}: healthy ({:?}); Health must report what is wrong with the volume",
            condition.message
        ));
    }
    if condition.message.is_empty() {
        return Err(format!(
            "{rpc} of {which}: abnormal without a message saying what is wrong"
        ));
    }
    Ok(())
}
