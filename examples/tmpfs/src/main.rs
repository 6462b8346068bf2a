//! A complete CSI driver: the Tmpfs provisioner (a tmpfs per volume, in
//! memory on the node) served by pav-csi, with pav-sdk keeping its records.
//! Run it as root, with no cluster, and talk CSI to its socket
//! (scripts/csi-sanity.sh does):
//!
//! ```text
//! cargo run -p tmpfs -- --endpoint /tmp/tmpfs.sock --dir /tmp/tmpfs --node-id $(hostname)
//! ```
//!
//! In a cluster, as a controller Deployment (`--controller-only`) and a
//! node plugin DaemonSet (`--node-only`) sharing records in ConfigMaps
//! (`--records-namespace`): examples/tmpfs/deploy/driver.yaml.

mod provisioner;

use std::path::PathBuf;

use clap::Parser;
use pav_csi::config_map_store::ConfigMapStore;
use pav_sdk::records::Records;

use crate::provisioner::Tmpfs;

/// Serve Tmpfs volumes as a CSI driver on a Unix socket.
#[derive(Debug, Parser)]
struct Cli {
    /// Unix socket to serve on (`unix://` prefix accepted, as CSI sidecars pass it).
    #[arg(long)]
    endpoint: String,
    /// Directory holding the snapshots and the records (the volumes are
    /// mounted in pav-csi's node directories, under kubelet's).
    #[arg(long, default_value = "/var/lib/tmpfs-csi")]
    dir: PathBuf,
    /// Bytes of memory all volumes together may take.
    #[arg(long, default_value_t = 1 << 30)]
    budget: u64,
    /// This node's id, for the node service (CSI `NodeGetInfo`) and the
    /// volumes' topology.
    #[arg(long)]
    node_id: String,
    /// Serve the controller only (a Deployment with the controller sidecars).
    #[arg(long, conflicts_with = "node_only", requires = "records_namespace")]
    controller_only: bool,
    /// Serve the node only (a DaemonSet with node-driver-registrar).
    #[arg(long, requires = "records_namespace")]
    node_only: bool,
    /// Keep the records in ConfigMaps of this namespace (in-cluster
    /// credentials), where a controller and node plugins deployed apart
    /// share them: each node plugin finds there the volumes the controller
    /// deleted, and removes what it kept of them. Default: files in
    /// `<dir>/records`, for one process serving both.
    #[arg(long)]
    records_namespace: Option<String>,
    /// Kubelet's root directory: volumes are staged and published only inside it.
    #[arg(long, default_value = pav_csi::DEFAULT_KUBELET_DIR)]
    kubelet_dir: PathBuf,
    /// Log format: text (coloured only on a terminal) or json.
    #[arg(long, default_value_t)]
    log_format: pav_csi::logging::LogFormat,
}

const DRIVER: &str = "tmpfs.example.com";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    pav_csi::logging::init(cli.log_format);
    let socket = PathBuf::from(cli.endpoint.trim_start_matches("unix://"));
    let node = pav_sdk::Topology::from([(format!("topology.{DRIVER}/node"), cli.node_id.clone())]);

    // Every touch point Tmpfs implements; pav-sdk answers repeated
    // creates, deletes, listing, capacity and the controller's side of
    // growth from its records, and gives Stage and NodeExpand their
    // volume's.
    let records = match &cli.records_namespace {
        Some(namespace) => {
            let client = kube::Client::try_default().await?;
            Records::in_store(ConfigMapStore::new(client, namespace, DRIVER))
        }
        None => Records::in_dir(cli.dir.join("records")),
    };
    let tmpfs = Tmpfs {
        snapshots: cli.dir.join("snapshots"),
        node: node.clone(),
    };
    let provisioner = pav_sdk::provisioner!(tmpfs).keep_records(records.budget(cli.budget));
    let mut driver = pav_csi::Driver::builder(DRIVER)
        .provisioner(provisioner)
        .kubelet_dir(cli.kubelet_dir);
    if !cli.node_only {
        // Volumes go where the CO chooses, on the nodes' topology.
        driver = driver.serve_controller(&socket).topology_aware();
    }
    if !cli.controller_only {
        driver = driver.serve_node(&socket, cli.node_id).node_topology(node);
    }
    driver.run().await?; // until SIGTERM or SIGINT
    Ok(())
}
