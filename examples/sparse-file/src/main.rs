//! A CSI driver whose volumes are sparse files under a directory, written
//! against pav-sdk only (MetalK8s' `sparseLoopDevice` idea).
//!
//! Creation makes and sizes the file; the controller attaches it to a loop
//! device (ControllerPublishVolume, src/attach.rs), and staging checks that
//! device and, for Filesystem volumes, formats it on first use and mounts
//! it; deletion removes it. Run it locally, as root, with no cluster:
//!
//! ```text
//! cargo run -p sparse-file -- --endpoint /tmp/sparse.sock --dir /tmp/sparse-volumes --node-id $(hostname)
//! ```
//!
//! Logs go to standard output, filtered by `RUST_LOG` (default `info`): text,
//! coloured only on a terminal, or with `--log-format json` one JSON object
//! per line, for log collectors.

mod attach;
mod provisioner;

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use pav_sdk::VolumeMode;

use crate::provisioner::SparseFiles;

/// Serve sparse-file volumes as a CSI driver on a Unix socket.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Unix socket to serve on (`unix://` prefix accepted, as CSI sidecars pass it).
    #[arg(long)]
    endpoint: String,
    /// Directory holding the volumes' sparse files.
    #[arg(long, default_value = "/var/lib/sparse-file")]
    dir: PathBuf,
    /// This node's id; without it only the controller service is served,
    /// and volumes are accessible from every node (the directory is shared).
    /// With it, volumes are accessible from this node only (topology key
    /// `topology.<driver name>/node`).
    #[arg(long)]
    node_id: Option<String>,
    /// Serve only the controller service even when a node id is given.
    #[arg(long)]
    controller_only: bool,
    /// CSI driver name (StorageClass `provisioner`).
    #[arg(long, default_value = "sparse-file.pav.example.com")]
    driver_name: String,
    /// Kubelet's root directory: the node service stages and publishes only
    /// at paths inside it.
    #[arg(long, default_value = pav_csi::DEFAULT_KUBELET_DIR)]
    kubelet_dir: PathBuf,
    /// Log format: text (coloured only on a terminal) or json (one object
    /// per line).
    #[arg(long, default_value_t)]
    log_format: pav_csi::logging::LogFormat,
    /// The loop devices a node may give this driver's volumes, shared
    /// with the node's other users of loop devices: the node reports this
    /// less the devices other programs attached (CSINode's allocatable
    /// count, which the scheduler counts, refreshed every
    /// nodeAllocatableUpdatePeriodSeconds of the CSIDriver) and the
    /// controller refuses to attach past it (RESOURCE_EXHAUSTED). 0: no
    /// limit. Give the controller and the nodes the same.
    #[arg(long, default_value_t = 0)]
    max_volumes_per_node: u32,
    /// Instead of serving, ask the driver serving `--endpoint` whether it
    /// answers (CSI `Probe`, within 3 s): exit 0 if it does, 1 if not. The
    /// command of the driver containers' exec liveness probe.
    #[arg(long)]
    probe: bool,
}

/// How long `--probe` waits for an answer: below the liveness probe's
/// `timeoutSeconds` (5) in deploy/driver.yaml, so a hung driver is told
/// from a slow probe.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    pav_csi::logging::init(cli.log_format);
    let socket = PathBuf::from(cli.endpoint.trim_start_matches("unix://"));
    if cli.probe {
        pav_csi::client::probe(&socket, PROBE_TIMEOUT)
            .await
            .with_context(|| format!("CSI socket {}", socket.display()))?;
        return Ok(());
    }
    std::fs::create_dir_all(&cli.dir)?;

    // Volumes are files on this node: accessible from it only, one
    // topology segment per node under a key named after the driver.
    let topology_key = format!("topology.{}/node", cli.driver_name);
    let mut files = SparseFiles::new(cli.dir).max_attached(cli.max_volumes_per_node);
    if let Some(node_id) = &cli.node_id {
        files = files.on_node(&topology_key, node_id);
    }
    // Every touch point SparseFiles implements (all fifteen), and cloning.
    // Ephemeral inline volumes: the node plugin creates each in its
    // node-local directory, beside the node's persistent volumes.
    let provisioner = pav_sdk::provisioner!(files)
        .max_volumes_per_node(cli.max_volumes_per_node)
        .ephemeral()
        .clones_volumes()
        .volume_modes([VolumeMode::Filesystem, VolumeMode::Block]);
    let mut driver = pav_csi::Driver::builder(cli.driver_name)
        .version(env!("CARGO_PKG_VERSION"))
        .provisioner(provisioner)
        .serve_controller(&socket);
    match cli.node_id {
        Some(node_id) if !cli.controller_only => {
            let topology = [(topology_key, node_id.clone())].into();
            driver = driver
                .serve_node(&socket, node_id)
                .node_topology(topology)
                .kubelet_dir(cli.kubelet_dir);
        }
        Some(_) => driver = driver.topology_aware(),
        None => {}
    }
    driver.run().await?;
    Ok(())
}
