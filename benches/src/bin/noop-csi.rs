//! A pav-sdk provisioner that does no storage work, served by pav-csi
//! (controller and node on one Unix socket), so that `csi-load` measures
//! what pav-csi itself costs per RPC.
//!
//! Per operation the provisioner does nothing: Create answers a handle
//! derived from the name, Delete and Unstage succeed, Stage answers one
//! shared, empty directory (`--dir`). pav-csi still does its own part:
//! request validation, the per-volume guard, the CreateVolume answer cache,
//! the bind mount of the staged directory on the staging path in
//! NodeStageVolume and of the staging path on the target in
//! NodePublishVolume, and their unmounts (it bind-mounts whatever Stage
//! returns; it has no mount-free mode). Needs root for those mounts.
//!
//! With `--per-volume-dirs` Create makes a directory per volume under
//! `--dir`, Delete removes it and Stage answers it: the same storage work as
//! the hostpath driver, for a like-for-like comparison.
//!
//! ```text
//! noop-csi --endpoint /tmp/noop.sock --dir /tmp/noop-data
//! ```

use std::path::PathBuf;

use clap::Parser;
use pav_sdk::{
    Create, CreateRequest, Delete, DeleteRequest, Provisioner, Result, Stage, StageRequest, Staged,
    Unstage, UnstageRequest, Volume,
};

/// Serve a no-op pav-sdk provisioner through pav-csi on a Unix socket.
#[derive(Debug, Parser)]
#[command(about)]
struct Cli {
    /// Unix socket to serve on (`unix://` prefix accepted).
    #[arg(long)]
    endpoint: String,
    /// Directory that Stage answers (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Node id reported by NodeGetInfo.
    #[arg(long, default_value = "n1")]
    node_id: String,
    /// Make a directory per volume in Create (removed by Delete) and stage
    /// that, as the hostpath driver does.
    #[arg(long)]
    per_volume_dirs: bool,
    /// Log level (`RUST_LOG` syntax). pav-csi logs every RPC at `info`;
    /// the default `warn` keeps logging out of the measurement.
    #[arg(long, default_value = "warn")]
    log: String,
}

/// The provisioner: storage work only with `per_volume_dirs`.
struct Noop {
    dir: PathBuf,
    per_volume_dirs: bool,
}

#[pav_sdk::async_trait]
impl Create for Noop {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let handle = format!("noop-{}", req.name);
        if self.per_volume_dirs {
            std::fs::create_dir_all(self.dir.join(&handle))?;
        }
        Ok(Volume::new(handle, req.capacity.min_bytes.unwrap_or(0)))
    }
}

#[pav_sdk::async_trait]
impl Delete for Noop {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        if self.per_volume_dirs {
            match std::fs::remove_dir_all(self.dir.join(&req.handle)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }
}

#[pav_sdk::async_trait]
impl Stage for Noop {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        Ok(Staged::at(if self.per_volume_dirs {
            self.dir.join(&req.handle)
        } else {
            self.dir.clone()
        }))
    }
}

#[pav_sdk::async_trait]
impl Unstage for Noop {
    async fn unstage(&self, _req: UnstageRequest) -> Result<()> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cli.log))
        .init();
    std::fs::create_dir_all(&cli.dir)?;
    let socket = PathBuf::from(cli.endpoint.trim_start_matches("unix://"));
    let provisioner = Provisioner::new(Noop {
        dir: cli.dir,
        per_volume_dirs: cli.per_volume_dirs,
    })
    .with_create()
    .with_delete()
    .with_stage()
    .with_unstage();
    pav_csi::Driver::builder("noop.bench.pav.example.com")
        .provisioner(provisioner)
        .serve_controller(&socket)
        .serve_node(&socket, cli.node_id)
        .run()
        .await?;
    Ok(())
}
