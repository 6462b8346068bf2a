//! The attach check: ControllerPublishVolume and ControllerUnpublishVolume
//! repeated, as external-attacher retries them.

use tonic::Code;

use super::{NO_CREATE, UNKNOWN};
use crate::csi;
use crate::testing::context::{Ctx, Step, call, expect_codes, expect_ok};
use crate::testing::report::Outcome;

/// Attaches a volume twice (the same publish context both times), an
/// unknown volume (`NOT_FOUND`), detaches it twice (`OK`) and attaches
/// it again; the volume is detached at the end, also when a step fails.
pub(in crate::testing) async fn attach_detach_repeats(ctx: &mut Ctx<'_>) -> Step<Outcome> {
    if !ctx.caps.attach {
        return Ok(Outcome::Skipped(
            "the controller does not advertise PUBLISH_UNPUBLISH_VOLUME (no Attach)".into(),
        ));
    }
    if !ctx.caps.create {
        return Ok(Outcome::Skipped(NO_CREATE.into()));
    }
    // The node the node service reports, else the one the harness would
    // serve (controller_only).
    let node_id = match ctx.caps.node {
        true => {
            let info = call(ctx.h.node.node_get_info(csi::NodeGetInfoRequest {})).await;
            expect_ok("NodeGetInfo", info)?.node_id
        }
        false => ctx.h.node_id().to_owned(),
    };
    let volume = ctx.create("pav-testing-attach").await?;
    let publish = csi::ControllerPublishVolumeRequest {
        volume_id: volume.volume_id.clone(),
        node_id: node_id.clone(),
        volume_capability: Some(ctx.capability()),
        volume_context: volume.volume_context.clone(),
        ..Default::default()
    };
    let unpublish = csi::ControllerUnpublishVolumeRequest {
        volume_id: volume.volume_id.clone(),
        node_id,
        ..Default::default()
    };
    let result = repeats(ctx, &publish, &unpublish).await;
    // Attached volumes cannot be deleted: detached whatever happened.
    let _ = call(ctx.h.controller.controller_unpublish_volume(unpublish)).await;
    result
}

async fn repeats(
    ctx: &mut Ctx<'_>,
    publish: &csi::ControllerPublishVolumeRequest,
    unpublish: &csi::ControllerUnpublishVolumeRequest,
) -> Step<Outcome> {
    let c = &mut ctx.h.controller;
    let what = "ControllerPublishVolume";
    let first = expect_ok(
        what,
        call(c.controller_publish_volume(publish.clone())).await,
    )?;
    let what = "ControllerPublishVolume repeated (external-attacher retries it)";
    let again = expect_ok(
        what,
        call(c.controller_publish_volume(publish.clone())).await,
    )?;
    if again.publish_context != first.publish_context {
        return Err(format!(
            "{what}: answered the publish context {:?}, not {:?} as the first time: \
             a node staging with the first would find another attachment \
             (Attach must answer a repeat with what it attached)",
            again.publish_context, first.publish_context
        ));
    }
    let unknown = csi::ControllerPublishVolumeRequest {
        volume_id: UNKNOWN.into(),
        ..publish.clone()
    };
    expect_codes(
        format!("ControllerPublishVolume of {UNKNOWN:?}, which was never created"),
        call(c.controller_publish_volume(unknown)).await,
        &[Code::NotFound],
    )?;
    for what in [
        "ControllerUnpublishVolume",
        "ControllerUnpublishVolume repeated (detached already)",
    ] {
        expect_ok(
            what,
            call(c.controller_unpublish_volume(unpublish.clone())).await,
        )?;
    }
    let what = "ControllerPublishVolume after ControllerUnpublishVolume";
    expect_ok(
        what,
        call(c.controller_publish_volume(publish.clone())).await,
    )?;
    Ok(Outcome::Passed)
}
