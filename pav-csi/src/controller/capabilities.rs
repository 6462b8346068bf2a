//! `ControllerGetCapabilities`: what the provisioner's touch points serve.

use crate::csi;
use crate::csi::controller_service_capability::rpc::Type as RpcType;
use crate::shared::Shared;

/// The RPCs advertised, from the touch points the provisioner was given.
pub(crate) fn answer(shared: &Shared) -> csi::ControllerGetCapabilitiesResponse {
    let provisioner = &shared.provisioner;
    let mut rpcs = Vec::new();
    if provisioner.create().is_some() {
        rpcs.push(RpcType::CreateDeleteVolume);
    }
    if provisioner.expand().is_some() {
        rpcs.push(RpcType::ExpandVolume);
    }
    if provisioner.modify().is_some() {
        rpcs.push(RpcType::ModifyVolume);
    }
    if let Some(attacher) = provisioner.attach() {
        rpcs.push(RpcType::PublishUnpublishVolume);
        if attacher.attaches_read_only() {
            rpcs.push(RpcType::PublishReadonly);
        }
    }
    if provisioner.capacity().is_some() {
        rpcs.push(RpcType::GetCapacity);
    }
    if provisioner.snapshot().is_some() {
        rpcs.push(RpcType::CreateDeleteSnapshot);
        rpcs.push(RpcType::ListSnapshots);
    }
    if provisioner.clones() {
        rpcs.push(RpcType::CloneVolume);
    }
    if provisioner.tells_single_node_writers_apart() {
        rpcs.push(RpcType::SingleNodeMultiWriter);
    }
    if let Some(lister) = provisioner.list() {
        rpcs.push(RpcType::ListVolumes);
        // ControllerGetVolume finds the volume in the listing.
        let checks_health = provisioner.health().is_some();
        if checks_health {
            rpcs.push(RpcType::GetVolume);
        }
        if lister.reports_condition() || checks_health {
            rpcs.push(RpcType::VolumeCondition);
        }
    }
    let capabilities = rpcs
        .into_iter()
        .map(|rpc| csi::ControllerServiceCapability {
            r#type: Some(csi::controller_service_capability::Type::Rpc(
                csi::controller_service_capability::Rpc { r#type: rpc as i32 },
            )),
        })
        .collect();
    csi::ControllerGetCapabilitiesResponse { capabilities }
}
