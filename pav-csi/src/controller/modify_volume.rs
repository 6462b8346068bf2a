//! `ControllerModifyVolume`: change a volume's mutable attributes (its
//! VolumeAttributesClass).

use pav_sdk::{Claim, Parameters, Secrets};
use tonic::{Code, Status};

use super::{ControllerService, ExistsError, Unserved};
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};

/// Why a `ControllerModifyVolume` failed: one variant per step of
/// [`check`] and [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ModifyError {
    /// The provisioner does not modify volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Another call holds the volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The volume does not exist, or asking failed (its code).
    #[error(transparent)]
    Lookup(#[from] ExistsError),
    /// The provisioner's Modify failed (its code).
    #[error("{}", .0.message())]
    Modify(pav_sdk::Error),
}

impl From<ModifyError> for Status {
    fn from(err: ModifyError) -> Self {
        let code = match &err {
            ModifyError::Unserved(_) => Code::Unimplemented,
            ModifyError::Limit(e) => e.code(),
            ModifyError::Busy(e) => e.code(),
            ModifyError::Lookup(e) => e.code(),
            ModifyError::Modify(e) => provisioner_code(e),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `ControllerModifyVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    volume_id: String,
    /// The parameters to set, without the `csi.storage.k8s.io/` keys.
    mutable_parameters: Parameters,
    /// From external-resizer's `--extra-modify-metadata` keys.
    claim: Option<Claim>,
    secrets: Secrets,
}

/// The volume id is required; `mutable_parameters` and secrets within the
/// map limit. The `csi.storage.k8s.io/pvc/*` and `.../pv/name` keys
/// external-resizer adds with `--extra-modify-metadata` become the claim.
pub(crate) fn check(req: &csi::ControllerModifyVolumeRequest) -> Result<Checked, ModifyError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    limits::map("mutable_parameters", &req.mutable_parameters)?;
    let secrets = convert::secrets(&req.secrets)?;
    let (mutable_parameters, claim, _) = convert::split_parameters(&req.mutable_parameters);
    Ok(Checked {
        volume_id: volume_id.to_owned(),
        mutable_parameters,
        claim,
        secrets,
    })
}

/// Holds the volume, checks it exists, and asks the provisioner's Modify,
/// unless there is nothing to change (no parameters: the spec forbids
/// acting on absent keys). A cached `CreateVolume` answer is forgotten:
/// it describes the volume as it was created.
pub(crate) async fn run(
    service: &ControllerService,
    modifier: &dyn pav_sdk::Modify,
    checked: Checked,
) -> Result<csi::ControllerModifyVolumeResponse, ModifyError> {
    let Checked {
        volume_id,
        mutable_parameters,
        claim,
        secrets,
    } = checked;
    let volume_id = volume_id.as_str();
    let shared = &service.shared;
    let _guard = shared.in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    service.check_exists(volume_id).await?;
    if mutable_parameters.is_empty() {
        return Ok(csi::ControllerModifyVolumeResponse {});
    }
    tracing::info!(volume_id, ?mutable_parameters, "ControllerModifyVolume");
    let mut modify = pav_sdk::build::modify(volume_id, mutable_parameters);
    modify.claim = claim;
    modify.secrets = secrets;
    modifier.modify(modify).await.map_err(ModifyError::Modify)?;
    (shared.create_cache.lock())
        .unwrap_or_else(|e| e.into_inner())
        .forget_volume(volume_id);
    Ok(csi::ControllerModifyVolumeResponse {})
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn request(volume_id: &str, pairs: &[(&str, &str)]) -> csi::ControllerModifyVolumeRequest {
        csi::ControllerModifyVolumeRequest {
            volume_id: volume_id.into(),
            secrets: HashMap::new(),
            mutable_parameters: (pairs.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_volume_id_is_required_and_maps_are_limited() {
        let no_id = Status::from(check(&request("", &[])).unwrap_err());
        assert_eq!(no_id.code(), tonic::Code::InvalidArgument);
        assert!(no_id.message().contains("volume_id"), "{no_id:?}");
        let long = Status::from(check(&request(&"v".repeat(129), &[])).unwrap_err());
        assert!(long.message().contains("volume_id"), "{long:?}");
        let big = "x".repeat(5000);
        let params = Status::from(check(&request("vol-1", &[("tier", &big)])).unwrap_err());
        assert!(
            params.message().contains("mutable_parameters"),
            "{params:?}"
        );
        let mut secret = request("vol-1", &[]);
        secret.secrets.insert("token".into(), big);
        let secret = Status::from(check(&secret).unwrap_err());
        assert!(secret.message().contains("secrets"), "{secret:?}");
        assert!(
            check(&request("vol-1", &[]))
                .unwrap()
                .mutable_parameters
                .is_empty()
        );
    }

    /// external-resizer's `--extra-modify-metadata` keys are the claim,
    /// not parameters the provisioner would refuse as unknown.
    #[test]
    fn extra_modify_metadata_becomes_the_claim() {
        let checked = check(&request(
            "vol-1",
            &[
                ("tier", "gold"),
                ("csi.storage.k8s.io/pvc/name", "data"),
                ("csi.storage.k8s.io/pvc/namespace", "apps"),
                ("csi.storage.k8s.io/pv/name", "pvc-1"),
            ],
        ))
        .unwrap();
        assert_eq!(
            checked.mutable_parameters,
            Parameters::from([("tier".into(), "gold".into())])
        );
        let claim = checked.claim.unwrap();
        assert_eq!(
            (claim.namespace.as_str(), claim.name.as_str()),
            ("apps", "data")
        );
        assert_eq!(claim.pv_name.as_deref(), Some("pvc-1"));
    }
}
