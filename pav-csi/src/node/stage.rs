//! `NodeStageVolume`: record the volume at its staging path, run the
//! provisioner's Stage and bind what it staged there; a failure is undone.

use std::path::PathBuf;

use pav_sdk::{AccessMode, Parameters, Secrets, VolumeMode};
use tonic::Status;

use super::binds::{STAGED_DEVICE, bind_once, blocking};
use super::{NodeConfig, NodeService, check_capability, required_capability, stage_request};
use crate::convert::{self, Capability};
use crate::error::{internal, is_final, status};
use crate::guard::Key;
use crate::limits;
use crate::mount;
use crate::occupancy::check_free;
use crate::shared::Shared;
use crate::staged::{Record, Records};
use crate::{csi, staged};

/// A `NodeStageVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    /// Resolved inside the kubelet directory.
    staging: PathBuf,
    capability: Capability,
    context: Parameters,
    /// What the controller's Attach answered for this node.
    publish_context: Parameters,
    secrets: Secrets,
}

/// The volume id, the staging path, a capability the provisioner serves,
/// and limits.
pub(crate) fn check(
    req: &csi::NodeStageVolumeRequest,
    shared: &Shared,
    node: &NodeConfig,
) -> Result<Checked, Status> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let staging = node
        .paths
        .path("staging_target_path", &req.staging_target_path)?;
    let capability = required_capability(req.volume_capability.as_ref())?;
    limits::map("publish_context", &req.publish_context)?;
    limits::map("volume_context", &req.volume_context)?;
    let secrets = convert::secrets(&req.secrets)?;
    check_capability(shared, &capability)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        staging,
        capability,
        context: convert::sorted(&req.volume_context),
        publish_context: convert::sorted(&req.publish_context),
        secrets,
    })
}

/// Holds the volume and the staging path, records the stage (or finds it
/// recorded compatibly), then stages and binds; a stage this call recorded
/// that fails is undone, since kubelet does not unstage it.
pub(crate) async fn run(
    service: &NodeService,
    stager: &dyn pav_sdk::Stage,
    checked: Checked,
) -> Result<csi::NodeStageVolumeResponse, Status> {
    let Checked {
        volume_id,
        staging,
        capability,
        context,
        publish_context,
        secrets,
    } = checked;
    let volume_id = volume_id.as_str();
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    // Two volumes staged at one path at once must not both find it free.
    let _path_guard = in_flight.claim(Key::StagingPath(staging.clone()))?;
    let record = Record {
        volume_id: volume_id.to_owned(),
        staging: staging.clone(),
        capability: capability.clone(),
    };
    let records = service.node.staged.clone();
    let recorded_now = blocking(move || record_stage(&records, &record)).await?;
    tracing::info!(volume_id, staging = ?staging, mode = %capability.mode, "NodeStageVolume");
    let mode = capability.mode;
    let read_only = capability.access_mode.is_read_only();
    let node_id = &service.node.node_id;
    let mut stage = stage_request(node_id, volume_id, staging.clone(), capability, read_only);
    stage.context = context;
    stage.publish_context = publish_context;
    stage.secrets = secrets;
    if let Err(failed) = stage_and_bind(stager, stage).await {
        // Kubelet does not unstage a volume whose stage failed for
        // good: what this call did is undone here. An answer kubelet
        // takes as "maybe still in progress" leaves the stage to its
        // retry or to the NodeUnstageVolume it sends once the volume is
        // not needed; undoing it would throw away work the retry picks
        // up (a PaV staging pod). A stage recorded earlier may be in
        // use, and stays.
        if recorded_now && is_final(failed.code()) {
            undo_failed_stage(service, volume_id, staging, mode).await;
        }
        return Err(failed);
    }
    Ok(csi::NodeStageVolumeResponse {})
}

/// Checks that the volume's record allows staging it at `wanted.staging`
/// with `wanted.capability`, and records it before anything is mounted;
/// true when the record is new (this call made it).
fn record_stage(records: &Records, wanted: &Record) -> Result<bool, Status> {
    let io = |e| internal("reading staging records", e);
    let id = &wanted.volume_id;
    let staging = &wanted.staging;
    if let Some(record) = records.get(id).map_err(io)? {
        if record.staging != *staging {
            return Err(Status::failed_precondition(format!(
                "volume {id} is staged at {}, not at {}: unstage it there first",
                record.staging.display(),
                staging.display()
            )));
        }
        if !same_use(&record.capability, &wanted.capability) {
            return Err(Status::already_exists(format!(
                "volume {id} is staged at {} as {}, incompatible with {}",
                staging.display(),
                describe(&record.capability),
                describe(&wanted.capability)
            )));
        }
        return Ok(false);
    }
    if let Some(other) = records.at(staging).map_err(io)? {
        return Err(Status::failed_precondition(format!(
            "staging_target_path {} holds volume {}",
            staging.display(),
            other.volume_id
        )));
    }
    for path in [staging.clone(), staging.join(STAGED_DEVICE)] {
        if mount::is_mounted(&path).map_err(|e| internal("reading mounts", e))? {
            return Err(Status::failed_precondition(format!(
                "{} is a mount point this driver did not stage",
                path.display()
            )));
        }
    }
    check_free("staging_target_path", staging, records)?;
    records
        .put(wanted)
        .map_err(|e| internal("writing the staging record", e))?;
    Ok(true)
}

/// Whether a volume staged with capability `a` serves a request for `b`.
/// `SINGLE_NODE_WRITER` and `SINGLE_NODE_MULTI_WRITER` are both
/// Kubernetes' `ReadWriteOnce`: which one kubelet sends depends only on
/// whether the driver advertises `SINGLE_NODE_MULTI_WRITER`, so a volume
/// staged before an upgrade that started advertising it is asked again
/// with the other.
fn same_use(a: &Capability, b: &Capability) -> bool {
    let read_write_once = |mode: AccessMode| match mode {
        AccessMode::SingleNodeMultiWriter => AccessMode::SingleNodeWriter,
        other => other,
    };
    a.mode == b.mode
        && a.mount == b.mount
        && read_write_once(a.access_mode) == read_write_once(b.access_mode)
}

/// A capability in words, for messages.
fn describe(c: &Capability) -> String {
    let mut text = format!("{} {}", c.mode, staged::access_mode_name(c.access_mode));
    if let Some(fs_type) = &c.mount.fs_type {
        text.push_str(&format!(" {fs_type}"));
    }
    if !c.mount.mount_flags.is_empty() {
        text.push_str(&format!(" ({})", c.mount.mount_flags.join(",")));
    }
    text
}

/// Runs the provisioner's Stage, then binds what it staged at the staging
/// path (a Block volume's device at `<staging>/device`) unless it mounted
/// the volume there itself.
async fn stage_and_bind(
    stager: &dyn pav_sdk::Stage,
    stage: pav_sdk::StageRequest,
) -> Result<(), Status> {
    let (staging, mode, read_only) = (
        stage.target_path.clone(),
        stage.volume_mode,
        stage.read_only,
    );
    let staged = stager.stage(stage).await.map_err(status)?;
    blocking(move || {
        let (source, target) = match mode {
            VolumeMode::Filesystem if staged.path == staging => return Ok(()),
            VolumeMode::Filesystem => (staged.path, staging),
            VolumeMode::Block => (staged.path, staging.join(STAGED_DEVICE)),
        };
        bind_once(&source, &target, mode, read_only)
    })
    .await
}

/// [`NodeService::unstage_recorded`] for a stage that failed; its own
/// failure is logged (the stage's is what the caller answers).
async fn undo_failed_stage(
    service: &NodeService,
    volume_id: &str,
    staging: PathBuf,
    mode: VolumeMode,
) {
    if let Err(failed) = service.unstage_recorded(volume_id, staging, mode).await {
        tracing::warn!(
            volume_id,
            error = failed.message(),
            "NodeStageVolume: undoing the failed stage failed; the next NodeUnstageVolume tries again"
        );
    }
}
