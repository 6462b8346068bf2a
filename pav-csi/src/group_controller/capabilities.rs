//! `GroupControllerGetCapabilities`: what the group controller serves.

use tonic::{Code, Status};

use super::{Unserved, grouper};
use crate::csi;
use crate::error::error_chain;
use crate::shared::Shared;

/// Why a `GroupControllerGetCapabilities` failed, mapped to its code in
/// [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum CapabilitiesError {
    /// The provisioner takes no group snapshots (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
}

impl From<CapabilitiesError> for Status {
    fn from(err: CapabilitiesError) -> Self {
        let code = match &err {
            CapabilitiesError::Unserved(_) => Code::Unimplemented,
        };
        Status::new(code, error_chain(&err))
    }
}

/// `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT`, for a provisioner with
/// [`pav_sdk::GroupSnapshot`].
pub(crate) fn answer(
    shared: &Shared,
) -> Result<csi::GroupControllerGetCapabilitiesResponse, CapabilitiesError> {
    use csi::group_controller_service_capability::{Rpc, Type, rpc::Type as RpcType};
    grouper(shared)?;
    let capability = csi::GroupControllerServiceCapability {
        r#type: Some(Type::Rpc(Rpc {
            r#type: RpcType::CreateDeleteGetVolumeGroupSnapshot as i32,
        })),
    };
    Ok(csi::GroupControllerGetCapabilitiesResponse {
        capabilities: vec![capability],
    })
}
