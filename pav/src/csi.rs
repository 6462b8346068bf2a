//! `pav csi-controller` and `pav csi-node`: the pav-sdk touch points of one
//! PavProvisioner, carried out by pods.

/// Flags of `pav csi-controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {}

/// Flags of `pav csi-node`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {}

/// Serves the CSI controller service until SIGTERM.
pub async fn run_controller(_args: ControllerArgs) -> anyhow::Result<()> {
    anyhow::bail!("pav csi-controller is not implemented yet")
}

/// Serves the CSI node service until SIGTERM.
pub async fn run_node(_args: NodeArgs) -> anyhow::Result<()> {
    anyhow::bail!("pav csi-node is not implemented yet")
}
