//! A complete CSI driver: the HostDir provisioner (a directory per volume
//! within a capacity budget) served by pav-csi. Run it as root, with no
//! cluster, and talk CSI to its socket (scripts/csi-sanity.sh does):
//!
//! ```text
//! cargo run -p hostdir -- --endpoint /tmp/hostdir.sock --dir /tmp/hostdir --node-id $(hostname)
//! ```
//!
//! `--log-format json` logs one JSON object per line, for log collectors.

mod provisioner;

use std::path::PathBuf;

use clap::Parser;

use crate::provisioner::HostDir;

/// Serve HostDir volumes as a CSI driver on a Unix socket.
#[derive(Debug, Parser)]
struct Cli {
    /// Unix socket to serve on (`unix://` prefix accepted, as CSI sidecars pass it).
    #[arg(long)]
    endpoint: String,
    /// Directory holding the volumes.
    #[arg(long, default_value = "/var/lib/hostdir")]
    dir: PathBuf,
    /// Bytes all volumes together may reserve.
    #[arg(long, default_value_t = 16 << 30)]
    budget: u64,
    /// This node's id, for the node service (CSI `NodeGetInfo`).
    #[arg(long)]
    node_id: String,
    /// Kubelet's root directory: volumes are staged and published only inside it.
    #[arg(long, default_value = pav_csi::DEFAULT_KUBELET_DIR)]
    kubelet_dir: PathBuf,
    /// Log format: text (coloured only on a terminal) or json.
    #[arg(long, default_value_t)]
    log_format: pav_csi::logging::LogFormat,
}

// #[tokio::main] needs tokio's "macros" and "rt-multi-thread" features;
// pav-csi enables what it needs itself.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    // pav-csi logs each call through `tracing`: without a subscriber, a
    // driver logs nothing. RUST_LOG=debug shows more.
    pav_csi::logging::init(cli.log_format);
    let socket = PathBuf::from(cli.endpoint.trim_start_matches("unix://"));

    // Every touch point HostDir implements: Create, Delete, Stage, Stats.
    let provisioner = pav_sdk::provisioner!(HostDir::new(cli.dir, cli.budget)?);
    // Controller and node on one socket; a cluster runs one controller
    // (with the external-provisioner sidecar) and a node plugin per node.
    pav_csi::Driver::builder("hostdir.example.com")
        .provisioner(provisioner)
        .serve_controller(&socket)
        .serve_node(&socket, cli.node_id)
        .kubelet_dir(cli.kubelet_dir)
        .run() // until SIGTERM or SIGINT
        .await?;
    Ok(())
}
