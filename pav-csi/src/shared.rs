//! What every service of one driver shares. Services and the driver
//! builder depend on this module; it depends on none of them.

use std::sync::Mutex;

use pav_sdk::Provisioner;

use crate::create_cache::{CreateCache, SnapshotCache};
use crate::guard::InFlight;

/// State shared by all services of one driver.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) provisioner: Provisioner,
    pub(crate) in_flight: InFlight,
    pub(crate) create_cache: Mutex<CreateCache>,
    pub(crate) snapshot_cache: Mutex<SnapshotCache>,
    pub(crate) topology_aware: bool,
    /// Whether this process serves the node service too; a controller-only
    /// process leaves node expansion to the node plugins.
    pub(crate) serves_node: bool,
    /// The node service's staging records, when this process serves the
    /// node service too: DeleteVolume refuses a volume they say is staged
    /// on this node.
    pub(crate) staged: Option<crate::staged::Records>,
    /// The volumes' node directories, when this process serves the node
    /// service for a provisioner that keeps records.
    pub(crate) node_dirs: Option<crate::node_dirs::NodeDirs>,
    /// Told when an Unstage may have left the node directory of a deleted
    /// volume ([`crate::node_dirs`]).
    pub(crate) node_dirs_stale: tokio::sync::Notify,
    /// Where Create's claim is completed from (feature `kube`).
    #[cfg(feature = "kube")]
    pub(crate) claims: Option<crate::claims::ClaimLookup>,
}
