//! `NodeGetInfo`: this node's id, volume limit and topology.

use tonic::{Code, Status};

use super::NodeConfig;
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::shared::Shared;

/// Why `NodeGetInfo` failed: one variant per step; `From<InfoError> for
/// Status` is its mapping to codes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InfoError {
    /// The provisioner's [`pav_sdk::Stage::max_volumes_now`] failed (its
    /// code).
    #[error("the node's volume limit: {}", .0.message())]
    Limit(pav_sdk::Error),
}

impl InfoError {
    fn code(&self) -> Code {
        match self {
            InfoError::Limit(e) => provisioner_code(e),
        }
    }
}

impl From<InfoError> for Status {
    fn from(err: InfoError) -> Self {
        Status::new(err.code(), error_chain(&err))
    }
}

/// What the builder configured for this node, with the provisioner's
/// volume limit as it is now: the builder's limit when set, else
/// [`pav_sdk::Stage::max_volumes_now`], else the provisioner's fixed
/// [`max_volumes_per_node`](pav_sdk::Provisioner::max_volumes_per_node).
pub(crate) async fn answer(
    node: &NodeConfig,
    shared: &Shared,
) -> Result<csi::NodeGetInfoResponse, InfoError> {
    let accessible_topology =
        (!node.topology.is_empty()).then(|| convert::topology(&node.topology));
    Ok(csi::NodeGetInfoResponse {
        node_id: node.node_id.clone(),
        max_volumes_per_node: max_volumes(node, shared).await?,
        accessible_topology,
    })
}

/// The node's volume limit, 0 for none.
async fn max_volumes(node: &NodeConfig, shared: &Shared) -> Result<i64, InfoError> {
    if node.max_volumes != 0 {
        return Ok(node.max_volumes);
    }
    let provisioner = &shared.provisioner;
    let now = match provisioner.stage() {
        Some(stager) => stager.max_volumes_now().await.map_err(InfoError::Limit)?,
        None => None,
    };
    Ok(now
        .or_else(|| provisioner.volumes_per_node_limit())
        .map_or(0, i64::from))
}
