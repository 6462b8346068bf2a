//! A complete CSI driver: the Tmpfs provisioner (a tmpfs per volume, in
//! memory on the node) served by pav-csi, with pav-sdk keeping its records.
//! Run it as root, with no cluster, and talk CSI to its socket
//! (scripts/csi-sanity.sh does):
//!
//! ```text
//! cargo run -p tmpfs -- --endpoint /tmp/tmpfs.sock --dir /tmp/tmpfs --node-id $(hostname)
//! ```

mod provisioner;

use std::path::PathBuf;

use clap::Parser;
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
    // creates, unknown deletes, listing, capacity and the controller's
    // side of growth from its records, and gives Stage and NodeExpand
    // their volume's.
    let records = Records::in_dir(cli.dir.join("records")).budget(cli.budget);
    let tmpfs = Tmpfs {
        snapshots: cli.dir.join("snapshots"),
        node: node.clone(),
    };
    let provisioner = pav_sdk::provisioner!(tmpfs).keep_records(records);
    pav_csi::Driver::builder(DRIVER)
        .provisioner(provisioner)
        .serve_controller(&socket)
        .serve_node(&socket, cli.node_id)
        .node_topology(node)
        .kubelet_dir(cli.kubelet_dir)
        .run() // until SIGTERM or SIGINT
        .await?;
    Ok(())
}
