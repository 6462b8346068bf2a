//! `ValidateVolumeCapabilities`: whether an existing volume serves the
//! capabilities asked for; "not confirmed" is an answer, not an error.

use pav_sdk::ValidateRequest;
use tonic::Status;

use super::{ControllerService, ExistsError, check_modes};
use crate::convert::{self, CapabilityError};
use crate::csi;
use crate::csi::validate_volume_capabilities_response::Confirmed;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::shared::Shared;

/// Why a `ValidateVolumeCapabilities` failed ("not confirmed" is an
/// answer, not one of these): one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ValidateError {
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The capabilities cannot be converted (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The volume does not exist, or asking failed (its code).
    #[error(transparent)]
    Lookup(#[from] ExistsError),
    /// The provisioner's Validate failed other than by refusing (its code).
    #[error("{}", .0.message())]
    Validate(pav_sdk::Error),
}

impl From<ValidateError> for Status {
    fn from(err: ValidateError) -> Self {
        let code = match &err {
            ValidateError::Limit(e) => e.code(),
            ValidateError::Capability(e) => e.code(),
            ValidateError::Busy(e) => e.code(),
            ValidateError::Lookup(e) => e.code(),
            ValidateError::Validate(e) => provisioner_code(e),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `ValidateVolumeCapabilitiesRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) enum Checked {
    /// Capabilities no volume can have (two volume modes, or modes the
    /// provisioner does not serve): answered unconfirmed, with why.
    Unconfirmed(String),
    /// A question for the provisioner about one volume.
    Ask {
        volume_id: String,
        validate: Box<ValidateRequest>,
        /// What a confirmation repeats.
        confirmed: Confirmed,
    },
}

/// The volume id, limits and capabilities; the PV's attributes (volume
/// context) join the StorageClass parameters, as for a static volume they
/// play their role. Mutable parameters are a question only for a
/// provisioner that modifies volumes.
pub(crate) fn check(
    req: &csi::ValidateVolumeCapabilitiesRequest,
    shared: &Shared,
) -> Result<Checked, ValidateError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    limits::map("volume_context", &req.volume_context)?;
    limits::map("parameters", &req.parameters)?;
    limits::map("mutable_parameters", &req.mutable_parameters)?;
    let secrets = convert::secrets(&req.secrets)?;
    let capabilities = convert::capability_list("volume_capabilities", &req.volume_capabilities)?;
    // A volume is either a filesystem or a block device: asking for both
    // is a valid question whose answer is "not confirmed".
    let (volume_mode, access_modes, mount) =
        match convert::one_mode("volume_capabilities", &capabilities) {
            Ok(one) => one,
            Err(mixed) => return Ok(Checked::Unconfirmed(mixed.to_string())),
        };
    let mut validate = pav_sdk::build::validate_existing(volume_id, volume_mode);
    validate.access_modes = access_modes;
    // For a static volume the PV attributes play the StorageClass parameters' role.
    let (mut parameters, claim, _) = convert::split_parameters(&req.parameters);
    parameters.extend(convert::sorted(&req.volume_context));
    validate.parameters = parameters;
    validate.claim = claim;
    validate.mount = mount;
    validate.secrets = secrets;
    if let Err(unserved) = check_modes(shared, volume_mode, &validate.access_modes) {
        return Ok(Checked::Unconfirmed(unserved.to_string()));
    }
    if !req.mutable_parameters.is_empty() && shared.provisioner.modify().is_none() {
        return Ok(Checked::Unconfirmed(
            "mutable_parameters: this driver does not modify volumes (MODIFY_VOLUME is not advertised)"
                .to_owned(),
        ));
    }
    (validate.mutable_parameters, _, _) = convert::split_parameters(&req.mutable_parameters);
    Ok(Checked::Ask {
        volume_id: volume_id.to_owned(),
        validate: Box::new(validate),
        confirmed: Confirmed {
            volume_context: req.volume_context.clone(),
            volume_capabilities: req.volume_capabilities.clone(),
            parameters: req.parameters.clone(),
            mutable_parameters: req.mutable_parameters.clone(),
        },
    })
}

/// Holds the volume, checks it exists, and asks the provisioner's
/// Validate (if it has one): its `INVALID_ARGUMENT` or `OUT_OF_RANGE` is
/// "not confirmed".
pub(crate) async fn run(
    service: &ControllerService,
    checked: Checked,
) -> Result<csi::ValidateVolumeCapabilitiesResponse, ValidateError> {
    let unconfirmed = |message: String| csi::ValidateVolumeCapabilitiesResponse {
        confirmed: None,
        message,
    };
    let (volume_id, validate, confirmed) = match checked {
        Checked::Unconfirmed(message) => return Ok(unconfirmed(message)),
        Checked::Ask {
            volume_id,
            validate,
            confirmed,
        } => (volume_id, *validate, confirmed),
    };
    let volume_id = volume_id.as_str();
    let _guard = (service.shared.in_flight).claim(Key::Volume(volume_id.to_owned()))?;
    // A provisioner that creates volumes knows which exist; one that
    // does not (static provisioning only) leaves it to Validate.
    service.check_exists(volume_id).await?;
    if let Some(validator) = service.shared.provisioner.validate() {
        match validator.validate(validate).await {
            Ok(()) => {}
            Err(pav_sdk::Error::InvalidArgument(message) | pav_sdk::Error::OutOfRange(message)) => {
                return Ok(unconfirmed(message));
            }
            Err(e) => return Err(ValidateError::Validate(e)),
        }
    }
    Ok(csi::ValidateVolumeCapabilitiesResponse {
        confirmed: Some(confirmed),
        message: String::new(),
    })
}
