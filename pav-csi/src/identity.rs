//! The CSI Identity service: who the plugin is and what it serves.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::csi;
use crate::csi::plugin_capability::service::Type as ServiceType;
use crate::shared::Shared;

/// Identity service of one socket.
#[derive(Debug)]
pub(crate) struct IdentityService {
    pub(crate) shared: Arc<Shared>,
    /// Whether this socket also serves the Controller service.
    pub(crate) controller: bool,
}

fn service(kind: ServiceType) -> csi::PluginCapability {
    csi::PluginCapability {
        r#type: Some(csi::plugin_capability::Type::Service(
            csi::plugin_capability::Service {
                r#type: kind as i32,
            },
        )),
    }
}

#[tonic::async_trait]
impl csi::identity_server::Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.shared.name.clone(),
            vendor_version: self.shared.version.clone(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        let mut capabilities = Vec::new();
        if self.controller {
            capabilities.push(service(ServiceType::ControllerService));
        }
        if self.controller && self.shared.provisioner.group_snapshot().is_some() {
            capabilities.push(service(ServiceType::GroupControllerService));
        }
        if self.shared.topology_aware {
            capabilities.push(service(ServiceType::VolumeAccessibilityConstraints));
        }
        if self.shared.provisioner.expand().is_some() {
            use csi::plugin_capability::volume_expansion::Type as ExpansionType;
            let kind = match self.shared.provisioner.expansion() {
                pav_sdk::Expansion::Online => ExpansionType::Online,
                pav_sdk::Expansion::Offline => ExpansionType::Offline,
            };
            capabilities.push(csi::PluginCapability {
                r#type: Some(csi::plugin_capability::Type::VolumeExpansion(
                    csi::plugin_capability::VolumeExpansion {
                        r#type: kind as i32,
                    },
                )),
            });
        }
        Ok(Response::new(csi::GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(
        &self,
        _request: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}
