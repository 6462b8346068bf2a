//! `pav manifests`: the installation, generated from Rust types.

/// Flags of `pav manifests`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// The manifests as a multi-document YAML stream.
pub fn render(_args: &Args) -> anyhow::Result<String> {
    anyhow::bail!("pav manifests is not implemented yet")
}
