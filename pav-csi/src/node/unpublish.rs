//! `NodeUnpublishVolume`: unmount the target and remove what publishing
//! made there; a provisioner that stages on publish unstages it.

use std::path::PathBuf;

use tonic::Status;

use super::binds::{BindError, blocking, unmount_and_remove};
use super::ephemeral::{self, EphemeralError};
use super::{NodeConfig, NodeService};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::paths::PathError;

/// Why a `NodeUnpublishVolume` failed: one variant per step of [`check`]
/// and [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnpublishError {
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The target path is refused (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Path(#[from] PathError),
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// Looking up or undoing an ephemeral volume failed (its code).
    #[error(transparent)]
    Ephemeral(#[from] EphemeralError),
    /// Unmounting or removing the target failed (its code).
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The provisioner's Unstage failed (its code).
    #[error("{}", .0.message())]
    Unstage(pav_sdk::Error),
}

impl From<UnpublishError> for Status {
    fn from(err: UnpublishError) -> Self {
        let code = match &err {
            UnpublishError::Limit(e) => e.code(),
            UnpublishError::Path(e) => e.code(),
            UnpublishError::Busy(e) => e.code(),
            UnpublishError::Ephemeral(e) => e.code(),
            UnpublishError::Bind(e) => e.code(),
            UnpublishError::Unstage(e) => provisioner_code(e),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `NodeUnpublishVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    /// Resolved inside the kubelet directory.
    target: PathBuf,
}

/// The volume id and the target path.
pub(crate) fn check(
    req: &csi::NodeUnpublishVolumeRequest,
    node: &NodeConfig,
) -> Result<Checked, UnpublishError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let target = node.paths.path("target_path", &req.target_path)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        target,
    })
}

/// Holds the volume, unmounts and removes the target (gone already is
/// success), and runs the Unstage of a provisioner that stages on publish;
/// an ephemeral inline volume recorded at the target is unstaged and
/// deleted too.
pub(crate) async fn run(
    service: &NodeService,
    checked: Checked,
) -> Result<csi::NodeUnpublishVolumeResponse, UnpublishError> {
    let Checked { volume_id, target } = checked;
    let volume_id = volume_id.as_str();
    let shared = &service.shared;
    let _guard = shared.in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    // Looked up whether or not the option is on: a volume recorded before
    // it was turned off is still deleted.
    if let Some(record) = service.ephemeral_at(volume_id, &target).await? {
        tracing::info!(volume_id, target = ?target, "NodeUnpublishVolume: ephemeral volume");
        ephemeral::unpublish(service, record).await?;
        return Ok(csi::NodeUnpublishVolumeResponse {});
    }
    tracing::info!(volume_id, target = ?target, "NodeUnpublishVolume");
    let path = target.clone();
    blocking::<_, BindError>(move || unmount_and_remove(&path)).await?;
    if shared.provisioner.stages_on_publish()
        && let Some(unstager) = shared.provisioner.unstage()
    {
        (service.unstage(unstager, volume_id, target).await).map_err(UnpublishError::Unstage)?;
    }
    Ok(csi::NodeUnpublishVolumeResponse {})
}
