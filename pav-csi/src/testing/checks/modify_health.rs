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
            let fresh = "a volume just created";
            let condition = node_condition(ctx, &id, &mounted.1, fresh).await?;
            if condition.abnormal {
                return Err(format!(
                    "NodeGetVolumeStats of {fresh}: abnormal ({:?})",
                    condition.message
                ));
            }
            match ctx.caps.volume_health {
                // As kubelet asks, and as csi-sanity does (no path).
                true => {
                    for path in [Some(mounted.1.as_path()), None] {
                        expect_healthy(ctx, &id, path, fresh).await?;
                    }
                }
                false => {
                    not_applying.push("NodeGetVolumeHealth: GET_VOLUME_HEALTH is not advertised")
                }
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
                if ctx.caps.volume_health {
                    expect_unhealthy(ctx, &id, &mounted.1, after).await?;
                }
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

/// The health statuses NodeGetVolumeHealth answers for `id` (of `which`)
/// published at `path`, or asked without a path (a volume the CO could
/// not publish; csi-sanity asks so); the answer must name the volume.
async fn node_volume_health(
    ctx: &mut Ctx<'_>,
    id: &str,
    path: Option<&std::path::Path>,
    which: &str,
) -> Step<(String, Vec<csi::volume_health::VolumeHealthEntry>)> {
    let what = match path {
        Some(_) => format!("NodeGetVolumeHealth of {which}"),
        None => format!("NodeGetVolumeHealth of {which}, without a publish path"),
    };
    let req = csi::NodeGetVolumeHealthRequest {
        volume_id: id.to_owned(),
        volume_publish_path: path.map(text).unwrap_or_default(),
        staging_target_path: String::new(),
    };
    let answer = expect_ok(&what, call(ctx.h.node.node_get_volume_health(req)).await)?;
    let health = (answer.volume_health)
        .ok_or_else(|| format!("{what}: no volume_health, which CSI requires"))?;
    if health.volume_id != id {
        return Err(format!(
            "{what}: answered volume {:?}, not {id:?}",
            health.volume_id
        ));
    }
    Ok((what, health.health_statuses))
}

/// NodeGetVolumeHealth of `id` lists no problem.
async fn expect_healthy(
    ctx: &mut Ctx<'_>,
    id: &str,
    path: Option<&std::path::Path>,
    which: &str,
) -> Step<()> {
    let (what, statuses) = node_volume_health(ctx, id, path, which).await?;
    match statuses.is_empty() {
        true => Ok(()),
        false => Err(format!("{what}: unhealthy ({statuses:?})")),
    }
}

/// NodeGetVolumeHealth of `id` published at `path` lists its problem as
/// kubelet reads it: a status it knows, a CamelCase reason and a message.
async fn expect_unhealthy(
    ctx: &mut Ctx<'_>,
    id: &str,
    path: &std::path::Path,
    which: &str,
) -> Step<()> {
    let (what, statuses) = node_volume_health(ctx, id, Some(path), which).await?;
    let [entry] = statuses.as_slice() else {
        return Err(format!(
            "{what}: {} health statuses ({statuses:?}), not the one problem Health reports",
            statuses.len()
        ));
    };
    if entry.status() == csi::VolumeHealthErrorType::UnknownVolumeHealthType {
        return Err(format!("{what}: status UNKNOWN, which kubelet drops"));
    }
    if !is_camel_case(&entry.reason) {
        return Err(format!(
            "{what}: reason {:?} is not one CamelCase word \
             (VolumeCondition::because's reason, e.g. \"ImageMissing\")",
            entry.reason
        ));
    }
    if entry.message.is_empty() {
        return Err(format!("{what}: no message saying what is wrong"));
    }
    Ok(())
}

/// One word of ASCII letters and digits starting with a capital letter,
/// as CSI asks of a health reason.
fn is_camel_case(reason: &str) -> bool {
    reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.chars().all(|c| c.is_ascii_alphanumeric())
}
