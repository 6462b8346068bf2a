//! `NodeGetInfo`: this node's id, volume limit and topology.

use super::NodeConfig;
use crate::convert;
use crate::csi;

/// What the builder configured for this node.
pub(crate) fn answer(node: &NodeConfig) -> csi::NodeGetInfoResponse {
    let accessible_topology =
        (!node.topology.is_empty()).then(|| convert::topology(&node.topology));
    csi::NodeGetInfoResponse {
        node_id: node.node_id.clone(),
        max_volumes_per_node: node.max_volumes,
        accessible_topology,
    }
}
