//! `NodeGetCapabilities`: what the provisioner's touch points serve.

use crate::csi;
use crate::csi::node_service_capability::rpc::Type as RpcType;
use crate::node::published::reports_condition;
use crate::shared::Shared;

/// The RPCs advertised: stats always, the rest from the touch points the
/// provisioner was given. Conditions go both ways: `VOLUME_CONDITION`
/// (in `NodeGetVolumeStats`, for kubelets before v1.37) and
/// `GET_VOLUME_HEALTH` (`NodeGetVolumeHealth`, for kubelets from v1.37 on).
pub(crate) fn answer(shared: &Shared) -> csi::NodeGetCapabilitiesResponse {
    let provisioner = &shared.provisioner;
    let mut rpcs = vec![RpcType::GetVolumeStats];
    if reports_condition(provisioner) {
        rpcs.extend([RpcType::VolumeCondition, RpcType::GetVolumeHealth]);
    }
    if provisioner.stage().is_some() && !provisioner.stages_on_publish() {
        rpcs.push(RpcType::StageUnstageVolume);
    }
    if provisioner.node_expand().is_some() {
        rpcs.push(RpcType::ExpandVolume);
    }
    if provisioner.tells_single_node_writers_apart() {
        rpcs.push(RpcType::SingleNodeMultiWriter);
    }
    let capabilities = rpcs
        .into_iter()
        .map(|rpc| csi::NodeServiceCapability {
            r#type: Some(csi::node_service_capability::Type::Rpc(
                csi::node_service_capability::Rpc { r#type: rpc as i32 },
            )),
        })
        .collect();
    csi::NodeGetCapabilitiesResponse { capabilities }
}
