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
//! It runs as root, so no request string becomes a path: a handle is
//! `noop-` and a digest of the volume name, and a handle of any other shape
//! is a volume that does not exist (Stage: NOT_FOUND; Delete: success, as
//! CSI asks of an unknown id). Neither `../../etc` nor `/etc` can name a
//! directory outside `--dir`.
//!
//! ```text
//! noop-csi --endpoint /tmp/noop.sock --dir /tmp/noop-data
//! ```

use std::path::PathBuf;

use clap::Parser;
use pav_sdk::{
    Create, CreateRequest, Delete, DeleteRequest, Error, Provisioner, Result, Stage, StageRequest,
    Staged, Unstage, UnstageRequest, Volume,
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

/// Prefix of every handle Create answers.
const HANDLE_PREFIX: &str = "noop-";

impl Noop {
    /// The handle of a volume name: the prefix and 16 hex digits of its
    /// FNV-1a digest, so the name (any string CSI allows) never reaches the
    /// file system. Deterministic across runs, unlike std's hasher; not
    /// collision-proof against chosen names, which a benchmark does not need.
    fn handle_for(name: &str) -> String {
        let digest = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{HANDLE_PREFIX}{digest:016x}")
    }

    /// The directory of a handle Create answered, `NotFound` for any other
    /// string: only the exact shape `handle_for` makes is joined to `--dir`.
    fn volume_dir(&self, handle: &str) -> Result<PathBuf> {
        let digest = handle.strip_prefix(HANDLE_PREFIX).unwrap_or_default();
        let issued = digest.len() == 16
            && digest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match issued {
            true => Ok(self.dir.join(handle)),
            false => Err(Error::NotFound(format!(
                "{handle:?} is not a noop-csi volume handle"
            ))),
        }
    }
}

#[pav_sdk::async_trait]
impl Create for Noop {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let handle = Self::handle_for(&req.name);
        if self.per_volume_dirs {
            // create_dir, not create_dir_all: --dir exists, and nothing but
            // the one directory may be made.
            match std::fs::create_dir(self.volume_dir(&handle)?) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
                _ => {}
            }
        }
        Ok(Volume::new(handle, req.capacity.min_bytes.unwrap_or(0)))
    }

    /// With per-volume directories, a volume exists while its directory
    /// does; without, noop-csi keeps nothing, so every handle of the shape
    /// it issues names a volume.
    async fn exists(&self, volume: &pav_sdk::VolumeId) -> Result<bool> {
        let dir = self.volume_dir(volume)?;
        Ok(!self.per_volume_dirs || dir.is_dir())
    }
}

#[pav_sdk::async_trait]
impl Delete for Noop {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        if !self.per_volume_dirs {
            return Ok(());
        }
        // CSI: deleting a volume that does not exist succeeds, and a handle
        // we never issued names none.
        let Ok(dir) = self.volume_dir(&req.handle) else {
            return Ok(());
        };
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[pav_sdk::async_trait]
impl Stage for Noop {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        let dir = self.volume_dir(&req.handle)?;
        if !self.per_volume_dirs {
            return Ok(Staged::at(self.dir.clone()));
        }
        // symlink_metadata: a symlink planted in --dir is not followed.
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(Staged::at(dir)),
            _ => Err(Error::NotFound(format!(
                "volume {:?} does not exist",
                req.handle
            ))),
        }
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

#[cfg(test)]
mod tests {
    use pav_sdk::VolumeMode;

    use super::*;

    /// A directory removed on drop (the benches crate has no tempfile).
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(test: &str) -> Self {
            let path = std::env::temp_dir().join(format!("noop-csi-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir(&path).unwrap();
            Self(path)
        }

        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn noop(dir: &std::path::Path) -> Noop {
        Noop {
            dir: dir.to_owned(),
            per_volume_dirs: true,
        }
    }

    /// Names from the hostile-input review: each must make exactly one
    /// directory, inside `--dir`.
    #[tokio::test]
    async fn names_never_become_paths() {
        let root = TempDir::new("names");
        let dir = root.path().join("volumes");
        std::fs::create_dir(&dir).unwrap();
        let noop = noop(&dir);
        for name in [
            "../../../../etc/passwd",
            "../escape",
            "/x",
            ".",
            "..",
            "a/b",
        ] {
            let volume = noop
                .create(pav_sdk::build::create(name, VolumeMode::Filesystem))
                .await
                .unwrap();
            assert!(
                volume.handle.starts_with("noop-"),
                "{name}: {}",
                volume.handle
            );
            assert!(dir.join(&volume.handle).is_dir(), "{name}");
            noop.delete(pav_sdk::build::delete(volume.handle.clone()))
                .await
                .unwrap();
            assert!(!dir.join(&volume.handle).exists(), "{name}");
        }
        // Only --dir's own entries came and went; nothing beside it.
        let beside: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
        assert_eq!(beside.len(), 1);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    /// Delete of `/x` removed `/x`; of a handle we never issued it must
    /// succeed (CSI: an unknown id is already deleted) and touch nothing.
    #[tokio::test]
    async fn foreign_handles_delete_nothing() {
        let root = TempDir::new("delete");
        let dir = root.path().join("volumes");
        let victim = root.path().join("victim");
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&victim).unwrap();
        let noop = noop(&dir);
        let absolute = victim.to_str().unwrap().to_owned();
        for handle in [absolute.as_str(), "../victim", "noop-../../victim", "noop-"] {
            noop.delete(pav_sdk::build::delete(handle)).await.unwrap();
            assert!(victim.is_dir(), "{handle}");
        }
    }

    /// NodeStage of `/etc` bind-mounted the host's /etc: a handle we never
    /// issued, or one whose volume is gone, is NOT_FOUND.
    #[tokio::test]
    async fn foreign_or_deleted_handles_do_not_stage() {
        let dir = TempDir::new("stage");
        let noop = noop(dir.path());
        let stage =
            |handle: &str| pav_sdk::build::stage(handle, "n1", "/staging", VolumeMode::Filesystem);
        let deleted = Noop::handle_for("deleted");
        for handle in [
            "/etc",
            "../../etc",
            "noop-/etc",
            "noop-0123456789ABCDEF",
            &deleted,
        ] {
            assert!(
                matches!(noop.stage(stage(handle)).await, Err(Error::NotFound(_))),
                "{handle}"
            );
        }
        let volume = noop
            .create(pav_sdk::build::create("pvc-1", VolumeMode::Filesystem))
            .await
            .unwrap();
        let staged = noop.stage(stage(&volume.handle)).await.unwrap();
        assert_eq!(staged, Staged::at(dir.path().join(&volume.handle)));
    }
}
