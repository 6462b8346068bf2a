//! `NodeStageVolume`: record the volume at its staging path, run the
//! provisioner's Stage and bind what it staged there; a failure is undone.

use std::path::PathBuf;

use pav_sdk::{AccessMode, Parameters, Secrets, VolumeMode};
use tonic::{Code, Status};

use super::binds::{BindError, STAGED_DEVICE, bind_once, blocking};
use super::{
    CapabilityError, NodeConfig, NodeService, RecordError, Unserved, check_capability,
    required_capability, stage_request,
};
use crate::convert::{self, Capability};
use crate::error::{error_chain, is_final, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::mount;
use crate::occupancy::{OccupancyError, check_free};
use crate::paths::PathError;
use crate::shared::Shared;
use crate::staged::{Record, Records};
use crate::{csi, staged};

/// Why a `NodeStageVolume` failed: one variant per step of [`check`] and
/// [`run`], each given its code once, in [`StageError::code`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum StageError {
    /// The node service does not stage per node (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The staging path is refused (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Path(#[from] PathError),
    /// The capability is missing, malformed or not served
    /// (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// Another call holds the volume or the staging path (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The staging records could not be read or written (`INTERNAL`).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The volume is staged at another path (`FAILED_PRECONDITION`).
    #[error(
        "volume {volume_id} is staged at {}, not at {}: unstage it there first",
        recorded.display(),
        staging.display()
    )]
    StagedElsewhere {
        volume_id: String,
        recorded: PathBuf,
        staging: PathBuf,
    },
    /// The volume is staged here with an incompatible capability
    /// (`ALREADY_EXISTS`).
    #[error(
        "volume {volume_id} is staged at {} as {recorded}, incompatible with {wanted}",
        staging.display()
    )]
    Incompatible {
        volume_id: String,
        staging: PathBuf,
        /// The recorded capability, in words.
        recorded: String,
        /// The capability asked for, in words.
        wanted: String,
    },
    /// Another volume is staged at the path (`FAILED_PRECONDITION`).
    #[error("staging_target_path {} holds volume {other}", staging.display())]
    OtherVolume { staging: PathBuf, other: String },
    /// Something this driver did not stage is mounted there
    /// (`FAILED_PRECONDITION`).
    #[error("{} is a mount point this driver did not stage", path.display())]
    ForeignMount { path: PathBuf },
    /// The staging path is not free for a new mount (its code).
    #[error(transparent)]
    Occupancy(#[from] OccupancyError),
    /// The provisioner's Stage failed (its code).
    #[error("{}", .0.message())]
    Stage(pav_sdk::Error),
    /// Binding what it staged failed (its code).
    #[error(transparent)]
    Bind(#[from] BindError),
}

impl StageError {
    /// The code the call is answered with; whether it is final for
    /// kubelet decides whether a new stage is undone.
    pub(crate) fn code(&self) -> Code {
        match self {
            StageError::Unserved(_) => Code::Unimplemented,
            StageError::Limit(e) => e.code(),
            StageError::Path(e) => e.code(),
            StageError::Capability(e) => e.code(),
            StageError::Busy(e) => e.code(),
            StageError::Record(_) => Code::Internal,
            StageError::StagedElsewhere { .. }
            | StageError::OtherVolume { .. }
            | StageError::ForeignMount { .. } => Code::FailedPrecondition,
            StageError::Incompatible { .. } => Code::AlreadyExists,
            StageError::Occupancy(e) => e.code(),
            StageError::Stage(e) => provisioner_code(e),
            StageError::Bind(e) => e.code(),
        }
    }
}

impl From<StageError> for Status {
    fn from(err: StageError) -> Self {
        Status::new(err.code(), error_chain(&err))
    }
}

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
) -> Result<Checked, StageError> {
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
) -> Result<csi::NodeStageVolumeResponse, StageError> {
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
    stage.node_dir = service.node_dir(volume_id);
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
fn record_stage(records: &Records, wanted: &Record) -> Result<bool, StageError> {
    let id = &wanted.volume_id;
    let staging = &wanted.staging;
    if let Some(record) = records.get(id).map_err(RecordError::Read)? {
        if record.staging != *staging {
            return Err(StageError::StagedElsewhere {
                volume_id: id.clone(),
                recorded: record.staging,
                staging: staging.clone(),
            });
        }
        if !same_use(&record.capability, &wanted.capability) {
            return Err(StageError::Incompatible {
                volume_id: id.clone(),
                staging: staging.clone(),
                recorded: describe(&record.capability),
                wanted: describe(&wanted.capability),
            });
        }
        return Ok(false);
    }
    if let Some(other) = records.at(staging).map_err(RecordError::Read)? {
        return Err(StageError::OtherVolume {
            staging: staging.clone(),
            other: other.volume_id,
        });
    }
    for path in [staging.clone(), staging.join(STAGED_DEVICE)] {
        if mount::blocking::is_mounted(&path).map_err(BindError::MountTable)? {
            return Err(StageError::ForeignMount { path });
        }
    }
    check_free("staging_target_path", staging, records)?;
    records.put(wanted).map_err(RecordError::Write)?;
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
) -> Result<(), StageError> {
    let (staging, mode, read_only) = (
        stage.target_path.clone(),
        stage.volume_mode,
        stage.read_only,
    );
    let staged = stager.stage(stage).await.map_err(StageError::Stage)?;
    blocking(move || {
        let (source, target) = match mode {
            VolumeMode::Filesystem if staged.path == staging => return Ok(()),
            VolumeMode::Filesystem => (staged.path, staging),
            VolumeMode::Block => (staged.path, staging.join(STAGED_DEVICE)),
        };
        Ok(bind_once(&source, &target, mode, read_only)?)
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
            error = error_chain(&failed).as_str(),
            "NodeStageVolume: undoing the failed stage failed; the next NodeUnstageVolume tries again"
        );
    }
}
