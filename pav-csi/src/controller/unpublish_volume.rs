//! `ControllerUnpublishVolume`: detach a volume from a node, or from every
//! node; what is not attached is detached.

use pav_sdk::Secrets;
use tonic::{Code, Status};

use super::{ControllerService, Unserved};
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};

/// A `ControllerUnpublishVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    /// `None`: from every node (the spec's empty `node_id`).
    node_id: Option<String>,
    secrets: Secrets,
}

/// Why a `ControllerUnpublishVolume` failed: one variant per step of
/// [`check`] and [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnpublishError {
    /// The provisioner does not attach volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The provisioner's detach failed, with its code.
    #[error("detaching")]
    Detach(#[source] pav_sdk::Error),
}

impl From<UnpublishError> for Status {
    /// The provisioner's error keeps its code, its message after the
    /// step's (without its category: the code says it).
    fn from(failed: UnpublishError) -> Status {
        let code = match &failed {
            UnpublishError::Unserved(_) => Code::Unimplemented,
            UnpublishError::Limit(e) => e.code(),
            UnpublishError::Busy(e) => e.code(),
            UnpublishError::Detach(source) => provisioner_code(source),
        };
        let message = match &failed {
            UnpublishError::Detach(source) => format!("{failed}: {}", source.message()),
            _ => error_chain(&failed),
        };
        Status::new(code, message)
    }
}

/// The volume id is required; the node id optional (empty: every node);
/// secrets within the map limit.
pub(crate) fn check(
    req: &csi::ControllerUnpublishVolumeRequest,
) -> Result<Checked, UnpublishError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let node_id = limits::limited("node_id", &req.node_id)?;
    let secrets = convert::secrets(&req.secrets)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        node_id: (!node_id.is_empty()).then(|| node_id.to_owned()),
        secrets,
    })
}

/// Holds the volume and detaches it. A volume or node the provisioner
/// does not know (`NOT_FOUND`) is detached: the spec lets a plugin answer
/// `OK` for a volume that can be regarded as unpublished, and
/// external-attacher would otherwise keep the VolumeAttachment forever.
pub(crate) async fn run(
    service: &ControllerService,
    attacher: &dyn pav_sdk::Attach,
    checked: Checked,
) -> Result<csi::ControllerUnpublishVolumeResponse, UnpublishError> {
    let Checked {
        volume_id,
        node_id,
        secrets,
    } = checked;
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.clone()))?;
    tracing::info!(volume_id, ?node_id, "ControllerUnpublishVolume");
    let mut detach = pav_sdk::build::detach(volume_id.as_str(), node_id);
    detach.secrets = secrets;
    match attacher.detach(detach).await {
        Ok(()) | Err(pav_sdk::Error::NotFound(_)) => Ok(csi::ControllerUnpublishVolumeResponse {}),
        Err(e) => Err(UnpublishError::Detach(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn the_volume_id_is_required_and_the_node_optional() {
        let request = |volume_id: &str, node_id: &str| csi::ControllerUnpublishVolumeRequest {
            volume_id: volume_id.into(),
            node_id: node_id.into(),
            secrets: HashMap::new(),
        };
        let no_id = Status::from(check(&request("", "n1")).unwrap_err());
        assert!(no_id.message().contains("volume_id"), "{no_id:?}");
        let long = Status::from(check(&request("vol-1", &"n".repeat(129))).unwrap_err());
        assert!(long.message().contains("node_id"), "{long:?}");
        assert_eq!(check(&request("vol-1", "")).unwrap().node_id, None);
        let one = check(&request("vol-1", "n1")).unwrap();
        assert_eq!(one.node_id.as_deref(), Some("n1"));
    }
}
