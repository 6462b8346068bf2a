//! `NodePublishVolume`: bind the volume's recorded staging path onto the
//! target, or, for a provisioner that stages per client pod, stage at the
//! target and bind what it staged there.

use std::path::PathBuf;

use pav_sdk::{AccessMode, VolumeMode};
use tonic::Status;

use super::binds::{STAGED_DEVICE, bind_once, blocking, check_published_nowhere, published};
use super::ephemeral;
use super::{
    NodeConfig, NodeService, check_capability, required_capability, stage_request, stages_per_node,
};
use crate::convert::{self, Capability};
use crate::csi;
use crate::error::{internal, status};
use crate::guard::Key;
use crate::limits;
use crate::mount;
use crate::occupancy::check_free;
use crate::shared::Shared;

/// A `NodePublishVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) enum Checked {
    /// A provisioner that stages on publish: its Stage, at the target path
    /// with the client pod.
    StageOnPublish(Box<pav_sdk::StageRequest>),
    /// An ephemeral inline volume: created, then staged at the target.
    Ephemeral(Box<ephemeral::Checked>),
    /// A bind of the volume's staging path.
    Bind {
        volume_id: String,
        /// Resolved inside the kubelet directory, as is `staging`.
        target: PathBuf,
        staging: PathBuf,
        capability: Capability,
        read_only: bool,
    },
}

/// The volume id, the target path, a capability the provisioner serves,
/// limits, and (unless the provisioner stages on publish) a staging path
/// apart from the target.
pub(crate) fn check(
    req: &csi::NodePublishVolumeRequest,
    shared: &Shared,
    node: &NodeConfig,
) -> Result<Checked, Status> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let target = node.paths.path("target_path", &req.target_path)?;
    let capability = required_capability(req.volume_capability.as_ref())?;
    limits::map("publish_context", &req.publish_context)?;
    limits::map("volume_context", &req.volume_context)?;
    let secrets = convert::secrets(&req.secrets)?;
    check_capability(shared, &capability)?;
    let read_only = req.readonly || capability.access_mode.is_read_only();
    if ephemeral::is_ephemeral(&req.volume_context) {
        let serves = shared.provisioner.serves_ephemeral();
        let context = &req.volume_context;
        let checked = ephemeral::check(
            serves, volume_id, target, capability, read_only, context, secrets,
        )?;
        return Ok(Checked::Ephemeral(Box::new(checked)));
    }
    if shared.provisioner.stages_on_publish() {
        // staging_target_path is not ours to use: STAGE_UNSTAGE_VOLUME
        // is not advertised, so the CO leaves it unset.
        let (context, pod) = convert::split_pod_info(&req.volume_context);
        let mut stage = stage_request(&node.node_id, volume_id, target, capability, read_only);
        stage.context = context;
        stage.secrets = secrets;
        stage.pod = pod;
        stage.publish_context = convert::sorted(&req.publish_context);
        return Ok(Checked::StageOnPublish(Box::new(stage)));
    }
    stages_per_node(shared)?;
    if req.staging_target_path.is_empty() {
        return Err(Status::failed_precondition(
            "staging_target_path is required: this driver advertises STAGE_UNSTAGE_VOLUME",
        ));
    }
    let staging = node
        .paths
        .path("staging_target_path", &req.staging_target_path)?;
    if target.starts_with(&staging) || staging.starts_with(&target) {
        return Err(Status::invalid_argument(format!(
            "target_path {} and staging_target_path {} overlap",
            target.display(),
            staging.display()
        )));
    }
    Ok(Checked::Bind {
        volume_id: volume_id.to_owned(),
        target,
        staging,
        capability,
        read_only,
    })
}

/// Holds the volume and the target, and binds the staging path recorded
/// for this volume (never one the request alone names) onto the target,
/// unless it is published there already; or stages on publish.
pub(crate) async fn run(
    service: &NodeService,
    checked: Checked,
) -> Result<csi::NodePublishVolumeResponse, Status> {
    let (volume_id, target, staging, capability, read_only) = match checked {
        Checked::StageOnPublish(stage) => return stage_and_publish(service, *stage).await,
        Checked::Ephemeral(checked) => {
            ephemeral::publish(service, *checked).await?;
            return Ok(csi::NodePublishVolumeResponse {});
        }
        Checked::Bind {
            volume_id,
            target,
            staging,
            capability,
            read_only,
        } => (volume_id, target, staging, capability, read_only),
    };
    let volume_id = volume_id.as_str();
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    // Two volumes published at one target at once must not both find it free.
    let _target_guard = in_flight.claim(Key::TargetPath(target.clone()))?;
    tracing::info!(volume_id, target = ?target, read_only, "NodePublishVolume");
    let mode = capability.mode;
    let single_writer = capability.access_mode == AccessMode::SingleNodeSingleWriter;
    let kubelet_dir = service.node.paths.kubelet_dir.clone();
    let records = service.node.staged.clone();
    let id = volume_id.to_owned();
    blocking(move || {
        // The source is the staging path recorded when this volume was
        // staged, never a path the request alone names.
        let record = records
            .get(&id)
            .map_err(|e| internal("reading staging records", e))?
            .ok_or_else(|| {
                Status::failed_precondition(format!("volume {id} is not staged on this node"))
            })?;
        if record.staging != staging {
            return Err(Status::failed_precondition(format!(
                "volume {id} is staged at {}, not at {}",
                record.staging.display(),
                staging.display()
            )));
        }
        if record.capability.mode != mode {
            return Err(Status::failed_precondition(format!(
                "volume {id} is staged as {}; it cannot be published as {mode}",
                record.capability.mode
            )));
        }
        let source = match mode {
            VolumeMode::Filesystem => record.staging,
            VolumeMode::Block => record.staging.join(STAGED_DEVICE),
        };
        let source_read_only = mount::read_only(&source)
            .map_err(|e| internal("reading mounts", e))?
            .ok_or_else(|| {
                Status::failed_precondition(format!(
                    "volume {id} is not staged at {}",
                    source.display()
                ))
            })?;
        if published(&target, Some(&source), mode, read_only, source_read_only)? {
            return Ok(());
        }
        if single_writer {
            check_published_nowhere(&id, &source, &kubelet_dir)?;
        }
        check_free("target_path", &target, &records)?;
        bind_once(&source, &target, mode, read_only)
    })
    .await?;
    Ok(csi::NodePublishVolumeResponse {})
}

/// `NodePublishVolume` of a provisioner that stages per client pod:
/// Stage with the publish target path and the client pod, then
/// bind-mount what it returns onto the target path.
async fn stage_and_publish(
    service: &NodeService,
    stage: pav_sdk::StageRequest,
) -> Result<csi::NodePublishVolumeResponse, Status> {
    let Some(stager) = service.shared.provisioner.stage() else {
        return Err(Status::unimplemented(
            "this provisioner does not stage volumes",
        ));
    };
    let volume_id = stage.handle.to_string();
    let volume_id = volume_id.as_str();
    let target = stage.target_path.clone();
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    // Two volumes published at one target at once must not both find it free.
    let _target_guard = in_flight.claim(Key::TargetPath(target.clone()))?;
    let (path, mode, read_only) = (target.clone(), stage.volume_mode, stage.read_only);
    // What the provisioner stages is unknown until it runs: a read-only
    // mount there may be the provisioner's own choice.
    if blocking(move || published(&path, None, mode, read_only, true)).await? {
        return Ok(csi::NodePublishVolumeResponse {});
    }
    tracing::info!(volume_id, target = ?target, read_only, %mode, "NodePublishVolume: staging");
    let staged = stager.stage(stage).await.map_err(status)?;
    let records = service.node.staged.clone();
    let published_at = target.clone();
    blocking(move || {
        check_free("target_path", &target, &records)?;
        bind_once(&staged.path, &target, mode, read_only)
    })
    .await?;
    // With the "staging" line above, a volume's time in this call.
    tracing::info!(volume_id, target = ?published_at, "NodePublishVolume: published");
    Ok(csi::NodePublishVolumeResponse {})
}
