//! `pav controller`: each PavProvisioner becomes a CSI driver.

/// Flags of `pav controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs the controller until SIGTERM.
pub async fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("pav controller is not implemented yet")
}
