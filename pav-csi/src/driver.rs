//! The driver builder and the Unix-socket servers.

use std::collections::HashMap;
use std::future::Future;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pav_sdk::{Provisioner, Topology};
use tokio::net::UnixListener;
use tonic::transport::Server;

use crate::Error;
use crate::completion::RunToCompletionLayer;
use crate::connections;
use crate::controller::ControllerService;
use crate::csi::controller_server::ControllerServer;
use crate::csi::group_controller_server::GroupControllerServer;
use crate::csi::identity_server::IdentityServer;
use crate::csi::node_server::NodeServer;
use crate::group_controller::GroupControllerService;
use crate::guard::InFlight;
use crate::identity::IdentityService;
use crate::node::clean_up::{DEFAULT_CLEAN_UP_PERIOD, keep_clean};
use crate::node::{NodeConfig, NodeService};
use crate::node_dirs::NodeDirs;
use crate::paths::Confinement;
use crate::shared::Shared;
use crate::staged::Records;

/// A CSI driver serving one [`Provisioner`].
#[derive(Debug)]
pub struct Driver;

impl Driver {
    /// Starts building the driver named `name`: the StorageClass
    /// `provisioner`, the CSIDriver object's name and the PV's
    /// `spec.csi.driver`. CSI requires domain name notation: at most 63
    /// characters, letters, digits, `-` and `.`, beginning and ending with
    /// a letter or digit, e.g. `hostdir.example.com` (`example.com/hostdir`
    /// is refused). [`DriverBuilder::run`] checks it
    /// ([`Error::DriverName`]).
    pub fn builder(name: impl Into<String>) -> DriverBuilder {
        DriverBuilder {
            name: name.into(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            provisioner: None,
            controller: None,
            node: None,
            node_topology: Topology::new(),
            topology_aware: false,
            max_volumes_per_node: 0,
            node_clean_up_period: DEFAULT_CLEAN_UP_PERIOD,
            kubelet_dir: PathBuf::from(crate::DEFAULT_KUBELET_DIR),
            state_dir: None,
            #[cfg(feature = "kube")]
            claims: None,
        }
    }
}

/// Configures and runs a [`Driver`]; see [`Driver::builder`].
///
/// ```no_run
/// # async fn f(provisioner: pav_sdk::Provisioner) -> Result<(), pav_csi::Error> {
/// pav_csi::Driver::builder("hostdir.example.com")
///     .provisioner(provisioner)
///     .serve_controller("/csi/csi.sock")
///     .serve_node("/csi/csi.sock", "node-1")
///     .run()
///     .await
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until run"]
pub struct DriverBuilder {
    name: String,
    version: String,
    provisioner: Option<Provisioner>,
    controller: Option<PathBuf>,
    node: Option<(PathBuf, String)>,
    node_topology: Topology,
    topology_aware: bool,
    max_volumes_per_node: i64,
    node_clean_up_period: Duration,
    kubelet_dir: PathBuf,
    state_dir: Option<PathBuf>,
    #[cfg(feature = "kube")]
    claims: Option<crate::claims::ClaimLookup>,
}

impl DriverBuilder {
    /// The version reported by `GetPluginInfo` (default: pav-csi's).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// The provisioner to serve.
    pub fn provisioner<P: Send + Sync + 'static>(mut self, provisioner: Provisioner<P>) -> Self {
        self.provisioner = Some(provisioner.erase());
        self
    }

    /// Serves the Identity and Controller services on `socket`.
    pub fn serve_controller(mut self, socket: impl Into<PathBuf>) -> Self {
        self.controller = Some(socket.into());
        self
    }

    /// Serves the Identity and Node services on `socket` for node `node_id`.
    /// The same socket as the controller's serves all three services.
    pub fn serve_node(mut self, socket: impl Into<PathBuf>, node_id: impl Into<String>) -> Self {
        self.node = Some((socket.into(), node_id.into()));
        self
    }

    /// Topology segments of this node, reported by `NodeGetInfo`; setting any
    /// advertises the `VOLUME_ACCESSIBILITY_CONSTRAINTS` plugin capability.
    pub fn node_topology(mut self, topology: Topology) -> Self {
        self.topology_aware |= !topology.is_empty();
        self.node_topology = topology;
        self
    }

    /// Advertises volume accessibility constraints without node topology
    /// (for a controller-only process whose nodes report topology).
    pub fn topology_aware(mut self) -> Self {
        self.topology_aware = true;
        self
    }

    /// How many volumes this node can publish; 0 (default) means the
    /// provisioner's [`max_volumes_per_node`](pav_sdk::Provisioner::max_volumes_per_node),
    /// or no limit.
    pub fn max_volumes_per_node(mut self, max: i64) -> Self {
        self.max_volumes_per_node = max;
        self
    }

    /// How often the node service looks for volumes deleted elsewhere (a
    /// controller on another node) to remove their node directories
    /// ([`pav_sdk::StageRequest::node_dir`]); default one minute, at
    /// least a second (each look lists the records). An Unstage starts a
    /// look at once; a DeleteVolume in this process removes the directory
    /// itself.
    pub fn node_clean_up_period(mut self, period: Duration) -> Self {
        self.node_clean_up_period = period.max(Duration::from_secs(1));
        self
    }

    /// Kubelet's root directory on this node (its `--root-dir`; default
    /// [`DEFAULT_KUBELET_DIR`](crate::DEFAULT_KUBELET_DIR), `/var/lib/kubelet`).
    /// The node service stages and publishes only at paths inside it:
    /// a `staging_target_path` or `target_path` that is relative, contains
    /// `..`, or resolves (following symlinks) outside it is `INVALID_ARGUMENT`.
    pub fn kubelet_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.kubelet_dir = dir.into();
        self
    }

    /// Where the node service keeps which volume it staged where (one small
    /// file per staged volume in `staged/`), so that publishing binds only
    /// what it staged itself, also after a restart, and, for a provisioner
    /// that keeps records, each volume's node directory (`node-dirs/`,
    /// [`pav_sdk::StageRequest::node_dir`]). Default:
    /// `<kubelet dir>/plugins/<driver name>`, kubelet's conventional
    /// per-driver directory.
    ///
    /// No staging or target path may lie in it, nor may one contain it:
    /// this directory is the only part of kubelet's directory that pav-csi
    /// keeps mounts away from. It is therefore also the place for the
    /// provisioner's own data (volumes, records) if that must live inside
    /// kubelet's directory: a subdirectory other than `staged/`, such as
    /// `<state dir>/volumes`. Anywhere else in kubelet's directory, a
    /// staging or target path may lie over it, and a mount there (a
    /// staged volume, a tmpfs) hides the data from the provisioner, which
    /// then finds its records gone. Better still, keep the data outside
    /// kubelet's directory altogether (`/var/lib/<driver>` on the node).
    ///
    /// ```no_run
    /// # async fn f(provisioner: pav_sdk::Provisioner) -> Result<(), pav_csi::Error> {
    /// // The provisioner (built with this directory) keeps its volumes in
    /// // `volumes/`, beside pav-csi's `staged/`.
    /// let state = "/var/lib/kubelet/plugins/hostdir.example.com";
    /// let volumes = std::path::Path::new(state).join("volumes");
    /// # let _ = volumes;
    /// pav_csi::Driver::builder("hostdir.example.com")
    ///     .provisioner(provisioner)
    ///     .serve_node("/csi/csi.sock", "node-1")
    ///     .state_dir(state)
    ///     .run()
    ///     .await
    /// # }
    /// ```
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Reads the claim behind each `CreateVolume` from the API server with
    /// `client`, so that [`pav_sdk::Claim`] carries its labels,
    /// annotations and selected node (feature `kube`). Needs
    /// external-provisioner's `--extra-create-metadata` (which names the
    /// claim) and RBAC to get PersistentVolumeClaims. An API server that
    /// cannot be reached is `UNAVAILABLE` (retried); a claim that is gone
    /// is `FAILED_PRECONDITION`.
    #[cfg(feature = "kube")]
    pub fn claim_lookup(mut self, client: kube::Client) -> Self {
        self.claims = Some(crate::claims::ClaimLookup(client));
        self
    }

    /// Serves until SIGTERM or SIGINT, then removes the sockets.
    pub async fn run(self) -> Result<(), Error> {
        self.run_until(shutdown_signal()).await
    }

    /// Serves until `shutdown` completes, then removes the sockets.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        check_driver_name(&self.name)?;
        let Some(provisioner) = self.provisioner else {
            return Err(Error::Config("no provisioner given".into()));
        };
        if self.node.is_some() && provisioner.stage().is_none() {
            return Err(Error::Config(
                "serving the node service needs a provisioner with Stage".into(),
            ));
        }
        if let Some((_, node_id)) = &self.node
            && (node_id.is_empty() || node_id.len() > crate::limits::MAX_STRING)
        {
            return Err(Error::Config(format!(
                "node id {node_id:?} must be 1 to 128 bytes"
            )));
        }
        if !self.kubelet_dir.is_absolute() {
            return Err(Error::Config(format!(
                "kubelet directory {} must be an absolute path",
                self.kubelet_dir.display()
            )));
        }
        let state_dir = self.state_dir.unwrap_or_else(|| {
            self.kubelet_dir
                .join("plugins")
                .join(self.name.replace('/', "_"))
        });
        if !state_dir.is_absolute() {
            return Err(Error::Config(format!(
                "state directory {} must be an absolute path",
                state_dir.display()
            )));
        }
        // A trait implemented but not added with its `with_*` call is not
        // served: say what is.
        tracing::info!(driver = %self.name, ?provisioner, "touch points");
        // pav-csi learns from the records that a volume is gone.
        let node_dirs = (self.node.is_some() && provisioner.records().is_some())
            .then(|| NodeDirs::new(&state_dir));
        let shared = Arc::new(Shared {
            name: self.name,
            version: self.version,
            provisioner,
            in_flight: InFlight::default(),
            create_cache: Mutex::default(),
            snapshot_cache: Mutex::default(),
            topology_aware: self.topology_aware,
            serves_node: self.node.is_some(),
            staged: self.node.as_ref().map(|_| Records::new(&state_dir)),
            node_dirs,
            node_dirs_stale: tokio::sync::Notify::new(),
            #[cfg(feature = "kube")]
            claims: self.claims,
        });

        // One server per distinct socket, each with the services meant for it.
        let mut sockets: HashMap<PathBuf, (bool, Option<NodeConfig>)> = HashMap::new();
        if let Some(path) = self.controller {
            sockets.entry(path).or_default().0 = true;
        }
        if let Some((path, node_id)) = self.node {
            sockets.entry(path).or_default().1 = Some(NodeConfig {
                node_id,
                topology: self.node_topology,
                // The builder's; else the provisioner's, asked at each
                // NodeGetInfo (it may change).
                max_volumes: self.max_volumes_per_node,
                staged: Records::new(&state_dir),
                paths: Confinement {
                    kubelet_dir: self.kubelet_dir,
                    state_dir,
                },
            });
        }
        if sockets.is_empty() {
            return Err(Error::Config(
                "call serve_controller and/or serve_node before run".into(),
            ));
        }

        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let period = self.node_clean_up_period;
        tokio::spawn(keep_clean(shared.clone(), period, stop_rx.clone()));
        let mut servers = Vec::new();
        for (path, (controller, node)) in sockets {
            let (listener, socket) = bind(&path)?;
            let mut router =
                Server::builder()
                    .layer(RunToCompletionLayer)
                    .add_service(IdentityServer::new(IdentityService {
                        shared: shared.clone(),
                        controller,
                    }));
            if controller {
                router = router.add_service(ControllerServer::new(ControllerService {
                    shared: shared.clone(),
                }));
                // Answers UNIMPLEMENTED unless the provisioner takes group
                // snapshots (and only then is it advertised).
                router = router.add_service(GroupControllerServer::new(GroupControllerService {
                    shared: shared.clone(),
                }));
            }
            if let Some(node) = node {
                router = router.add_service(NodeServer::new(NodeService {
                    shared: shared.clone(),
                    node: Arc::new(node),
                }));
            }
            tracing::info!(driver = %shared.name, socket = %path.display(), controller, "serving CSI");
            let mut stop = stop_rx.clone();
            servers.push(tokio::spawn(async move {
                let result = router
                    .serve_with_incoming_shutdown(
                        connections::incoming(listener, connections::MAX_CONNECTIONS),
                        async move {
                            let _ = stop.wait_for(|stopped| *stopped).await;
                        },
                    )
                    .await;
                socket.remove_if_ours(&path);
                result
            }));
        }

        shutdown.await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
        for server in servers {
            server
                .await
                .map_err(|e| Error::Config(format!("server task failed: {e}")))??;
        }
        Ok(())
    }
}

/// Checks `name` as the CSI spec requires of `GetPluginInfoResponse.name`
/// (and Kubernetes of a CSIDriver's name): domain name notation, at most
/// 63 characters, beginning and ending with an alphanumeric character with
/// dashes, dots and alphanumerics between.
fn check_driver_name(name: &str) -> Result<(), Error> {
    let refuse = |problem: String| {
        Err(Error::DriverName {
            name: name.to_owned(),
            problem,
        })
    };
    if name.is_empty() || name.len() > 63 {
        return refuse(format!("it has {} characters, not 1 to 63", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '.'))
    {
        return refuse(format!(
            "{c:?} is not allowed: only letters, digits, '-' and '.' (e.g. hostdir.example.com)"
        ));
    }
    let ends = [name.chars().next(), name.chars().last()];
    if !ends.iter().flatten().all(char::is_ascii_alphanumeric) {
        return refuse("it must begin and end with a letter or digit".to_owned());
    }
    Ok(())
}

/// The socket file this instance created, by device and inode.
struct OwnSocket {
    dev: u64,
    ino: u64,
}

impl OwnSocket {
    /// Removes the socket at `path` once this instance has stopped
    /// listening, unless another instance has bound it since. A
    /// DaemonSet's pod deleted with no grace period is replaced while its
    /// old containers still stop, and the new instance binds its own
    /// socket at the same path: removing that one would leave kubelet and
    /// the sidecars with nothing to connect to. The file is another
    /// instance's if its inode differs, or (inode numbers are reused at
    /// once) if something answers a connection on it.
    fn remove_if_ours(&self, path: &Path) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        let same_file = meta.dev() == self.dev && meta.ino() == self.ino;
        if same_file && std::os::unix::net::UnixStream::connect(path).is_err() {
            let _ = std::fs::remove_file(path);
        } else {
            tracing::info!(
                socket = %path.display(),
                "leaving the socket: another instance has bound it since"
            );
        }
    }
}

/// Binds `path`, replacing a stale socket, readable and writable by owner only.
fn bind(path: &Path) -> Result<(UnixListener, OwnSocket), Error> {
    let socket_error = |source| Error::Socket {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(socket_error)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            // A previous instance died without cleaning up.
            std::fs::remove_file(path).map_err(socket_error)?;
        }
        Ok(_) => {
            return Err(socket_error(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(socket_error(e)),
    }
    let listener = UnixListener::bind(path).map_err(socket_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(socket_error)?;
    let meta = std::fs::symlink_metadata(path).map_err(socket_error)?;
    let own = OwnSocket {
        dev: meta.dev(),
        ino: meta.ino(),
    };
    Ok((listener, own))
}

/// Completes on SIGTERM (how kubelet stops pods) or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            tracing::warn!("cannot install signal handlers; waiting for Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_names_follow_the_csi_spec() {
        for good in [
            "hostdir.example.com",
            "a",
            "x1",
            "my-driver.io",
            &"a".repeat(63),
        ] {
            assert!(check_driver_name(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "example.com/hostdir",
            "-a.example.com",
            "a.example.com.",
            "a_b",
            "hostdir.exämple.com",
            &"a".repeat(64),
        ] {
            let err = check_driver_name(bad).unwrap_err();
            assert!(
                matches!(&err, Error::DriverName { name, .. } if name == bad),
                "{bad:?}: {err}"
            );
        }
        let err = check_driver_name("example.com/hostdir").unwrap_err();
        assert!(err.to_string().contains("'/'"), "{err}");
    }
}
