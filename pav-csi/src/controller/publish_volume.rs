//! `ControllerPublishVolume`: attach a volume to a node (the provisioner's
//! [`pav_sdk::Attach`]), answering the publish context the node's Stage
//! gets.

use std::collections::HashMap;

use pav_sdk::{Parameters, Secrets};
use tonic::{Code, Status};

use super::{ControllerService, ExistsError, ModeError, Unserved, check_modes};
use crate::convert::{self, Capability, CapabilityError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::shared::Shared;

/// A `ControllerPublishVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    node_id: String,
    capability: Capability,
    read_only: bool,
    context: Parameters,
    secrets: Secrets,
}

/// Why a `ControllerPublishVolume` failed: one variant per step of
/// [`check`] and [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    /// The provisioner does not attach volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// No capability (`INVALID_ARGUMENT`).
    #[error("volume_capability is required")]
    NoCapability,
    /// The capability cannot be converted (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// Modes the provisioner does not serve (`INVALID_ARGUMENT`).
    #[error("volume_capability")]
    Mode(#[source] ModeError),
    /// A read-only attach the provisioner does not make
    /// (`INVALID_ARGUMENT`).
    #[error(
        "readonly: this provisioner does not attach read-only (PUBLISH_READONLY is not advertised)"
    )]
    ReadOnly,
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The volume does not exist (`NOT_FOUND`), or asking failed.
    #[error(transparent)]
    Lookup(#[from] ExistsError),
    /// The provisioner's Attach failed, with its code.
    #[error("attaching to node {node_id:?}")]
    Attach {
        node_id: String,
        #[source]
        source: pav_sdk::Error,
    },
    /// Attach answered a publish context CSI cannot carry (`INTERNAL`).
    #[error("the provisioner's publish context cannot be sent")]
    Context(#[source] ContextError),
}

impl From<PublishError> for Status {
    /// The provisioner's error keeps its code, its message after the
    /// step's (without its category: the code says it).
    fn from(failed: PublishError) -> Status {
        let code = match &failed {
            PublishError::Unserved(_) => Code::Unimplemented,
            PublishError::Limit(e) => e.code(),
            PublishError::Capability(e) => e.code(),
            PublishError::NoCapability | PublishError::Mode(_) | PublishError::ReadOnly => {
                Code::InvalidArgument
            }
            PublishError::Busy(e) => e.code(),
            PublishError::Lookup(e) => e.code(),
            PublishError::Attach { source, .. } => provisioner_code(source),
            PublishError::Context(_) => Code::Internal,
        };
        let message = match &failed {
            PublishError::Attach { source, .. } => format!("{failed}: {}", source.message()),
            _ => error_chain(&failed),
        };
        Status::new(code, message)
    }
}

/// Why a publish context cannot be carried by CSI.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ContextError {
    /// Too large, or a key or value breaks the string limits.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// A key or value with a control character.
    #[error("publish_context[{key:?}] holds a control character")]
    Control { key: String },
}

/// Volume id, node id and capability required, the capability's modes
/// served, secrets and the volume context within the map limit; a
/// read-only attach only when the provisioner attaches read-only
/// (`PUBLISH_READONLY` advertised).
pub(crate) fn check(
    req: &csi::ControllerPublishVolumeRequest,
    shared: &Shared,
    attacher: &dyn pav_sdk::Attach,
) -> Result<Checked, PublishError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let node_id = limits::required("node_id", &req.node_id)?;
    let capability = (req.volume_capability.as_ref()).ok_or(PublishError::NoCapability)?;
    let capability = convert::capability("volume_capability", capability)?;
    check_modes(shared, capability.mode, &[capability.access_mode]).map_err(PublishError::Mode)?;
    if req.readonly && !attacher.attaches_read_only() {
        return Err(PublishError::ReadOnly);
    }
    limits::map("volume_context", &req.volume_context)?;
    let secrets = convert::secrets(&req.secrets)?;
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        node_id: node_id.to_owned(),
        capability,
        read_only: req.readonly,
        context: convert::sorted(&req.volume_context),
        secrets,
    })
}

/// Holds the volume, checks it exists, and attaches it.
pub(crate) async fn run(
    service: &ControllerService,
    attacher: &dyn pav_sdk::Attach,
    checked: Checked,
) -> Result<csi::ControllerPublishVolumeResponse, PublishError> {
    let Checked {
        volume_id,
        node_id,
        capability,
        read_only,
        context,
        secrets,
    } = checked;
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.clone()))?;
    service.check_exists(&volume_id).await?;
    tracing::info!(volume_id, node_id, mode = %capability.mode, read_only, "ControllerPublishVolume");
    let mut attach = pav_sdk::build::attach(volume_id.as_str(), node_id.as_str(), capability.mode);
    attach.access_mode = capability.access_mode;
    attach.read_only = read_only;
    attach.context = context;
    attach.secrets = secrets;
    let attached = (attacher.attach(attach).await)
        .map_err(|source| PublishError::Attach { node_id, source })?;
    let publish_context = answerable(&attached.publish_context).map_err(PublishError::Context)?;
    Ok(csi::ControllerPublishVolumeResponse { publish_context })
}

/// The publish context as CSI carries it: within the map limit, keys and
/// values strings of at most 128 bytes with no control characters.
fn answerable(context: &Parameters) -> Result<HashMap<String, String>, ContextError> {
    let context = convert::unsorted(context);
    limits::map("publish_context", &context)?;
    for (key, value) in &context {
        limits::required("publish_context key", key)?;
        limits::limited(&format!("publish_context[{key:?}]"), value)?;
        if key.chars().chain(value.chars()).any(char::is_control) {
            return Err(ContextError::Control { key: key.clone() });
        }
    }
    Ok(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_context_csi_cannot_carry_is_refused() {
        let fine = Parameters::from([("devicePath".into(), "/dev/loop3".into())]);
        assert_eq!(answerable(&fine).unwrap()["devicePath"], "/dev/loop3");
        for bad in [
            Parameters::from([("devicePath".into(), "x".repeat(5000))]),
            Parameters::from([(String::new(), "v".into())]),
            Parameters::from([("k".into(), "line\nforged".into())]),
        ] {
            assert!(answerable(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_failure_keeps_its_code() {
        let attach = PublishError::Attach {
            node_id: "n1".into(),
            source: pav_sdk::Error::FailedPrecondition("attached elsewhere".into()),
        };
        let attach = Status::from(attach);
        assert_eq!(attach.code(), Code::FailedPrecondition);
        assert_eq!(
            attach.message(),
            "attaching to node \"n1\": attached elsewhere",
            "{attach:?}"
        );
        let big = ContextError::Control { key: "big".into() };
        let context = Status::from(PublishError::Context(big));
        assert_eq!(context.code(), Code::Internal);
        let gone = ExistsError::Missing {
            volume_id: "gone".into(),
        };
        let lookup = Status::from(PublishError::Lookup(gone));
        assert_eq!(lookup.code(), Code::NotFound);
    }
}
