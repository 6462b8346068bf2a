//! `pav csi-controller` and `pav csi-node`: the pav-sdk touch points of one
//! PavProvisioner, carried out by pods.
//!
//! | module | role |
//! |---|---|
//! | [`controller`] | Create (validation + creation pods, from a source), Delete (deletion pod), Expand (expansion pod), Snapshot (snapshot pods) |
//! | [`node`] | Stage / Unstage per client pod (staging and unstaging pods), node expansion pods, volume stats, collection of `/pav` files |
//! | [`context`] | the per-driver context, a part per concept: its PaV pods (API and cache), the PavProvisioner served (watch, compiled form, planner, `get_pvc`), events, and the run of a phase pod |
//! | `pod_cache` | the one watch of this provisioner's pods, and waits on it |
//! | `provisioner_cache` | the watch of the PavProvisioner, compiled once per generation |
//!
//! Every phase is planned by its module of [`crate::phases`] (pure:
//! context, evaluated fields, pod; through [`crate::recipe`]'s `Planner`)
//! and its pod run by [`context::DriverContext::run`].
//! | [`metrics`] | Prometheus `/metrics` and `/healthz` |

mod answers;
pub mod context;
pub mod controller;
pub mod deleted_nodes;
#[cfg(test)]
pub mod fixtures;
pub mod metrics;
pub mod node;
mod pod_cache;
mod provisioner_cache;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use pav_templates::Phase;

use self::context::DriverContext;
use self::metrics::Metrics;

/// Flags shared by both commands.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// The PavProvisioner served (its name is the CSI driver name).
    #[arg(long, env = "PAV_PROVISIONER")]
    pub provisioner: String,
    /// The CSI Unix socket to serve on.
    #[arg(long, env = "CSI_ENDPOINT", default_value = "/csi/csi.sock")]
    pub endpoint: PathBuf,
    /// Namespace of PaV pods whose template names none.
    #[arg(long, env = "POD_NAMESPACE", default_value = crate::pods::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// How long any one phase (a pod's run, a deletion) may take, e.g. 300s
    /// or 5m (at most 24h, as a phase's own `timeout`).
    #[arg(long, env = "PAV_PHASE_TIMEOUT", default_value = "300s", value_parser = pav_templates::duration::parse_timeout)]
    pub phase_timeout: Duration,
    /// Address of the HTTP server with /metrics and /healthz (which
    /// answers 503 while the CSI socket does not answer Probe).
    #[arg(long, env = "PAV_METRICS_ADDR", default_value_t = SocketAddr::from(([0, 0, 0, 0], METRICS_PORT)))]
    pub metrics_addr: SocketAddr,
    /// Log format.
    #[command(flatten)]
    pub logging: crate::telemetry::Logging,
    /// Client-side API rate limit.
    #[command(flatten)]
    pub api: crate::client::ApiLimits,
}

/// Flags of `pav csi-controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Flags of `pav csi-node`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
    /// This node's name.
    #[arg(long, env = "NODE_NAME")]
    pub node_id: String,
    /// Where this process sees the nodes' /var/lib/pav/pods (mounted with
    /// bidirectional propagation).
    #[arg(long, env = "PAV_PODS_DIR", default_value = crate::pods::HOST_POD_DIR)]
    pub pods_dir: PathBuf,
    /// Kubelet's root directory (mounted at the same path): target paths
    /// outside it are refused.
    #[arg(long, env = "PAV_KUBELET_DIR", default_value = pav_csi::DEFAULT_KUBELET_DIR)]
    pub kubelet_dir: PathBuf,
    /// Serve CSI ephemeral inline volumes (the PavProvisioner lists
    /// `Ephemeral` in `spec.volumeLifecycleModes`; its manifests pass it).
    #[arg(long)]
    pub ephemeral: bool,
    /// Stage each volume once per node, in NodeStageVolume, for all the
    /// node's client pods of it (the PavProvisioner says `stagingPer:
    /// Node`; its manifests pass it); without it, once per client pod in
    /// NodePublishVolume.
    #[arg(long)]
    pub staging_per_node: bool,
}

/// Port of the drivers' `/metrics` and `/healthz` (their `--metrics-addr`
/// listens on it on every address unless told otherwise; the manifests'
/// probes and container ports name it).
pub const METRICS_PORT: u16 = 9808;

pub use crate::recipe::TOPOLOGY_KEY;

/// The topology segment of one node.
pub fn node_topology(node: &str) -> pav_sdk::Topology {
    pav_sdk::Topology::from([(TOPOLOGY_KEY.to_owned(), node.to_owned())])
}

async fn driver_context(
    common: &CommonArgs,
    component: &str,
) -> anyhow::Result<Arc<DriverContext>> {
    let client = crate::client::client(common.api, component).await?;
    let metrics = Arc::new(Metrics::default());
    let addr = common.metrics_addr;
    let router = metrics.clone().router(common.endpoint.clone());
    tokio::spawn(async move {
        if let Err(e) = crate::telemetry::serve(addr, router).await {
            tracing::error!(error = %e, "metrics server failed");
        }
    });
    Ok(Arc::new(DriverContext::new(
        client,
        common.provisioner.clone(),
        common.namespace.clone(),
        common.phase_timeout,
        metrics,
        std::env::var("POD_NAME").ok(),
    )))
}

/// The pav-sdk provisioner of the controller: Create and Delete by pods.
pub fn controller_provisioner(
    driver: Arc<DriverContext>,
) -> pav_sdk::Provisioner<controller::PodController> {
    let store = watch_volumes(&driver);
    // Expansion, snapshots and clones are served whatever the spec says
    // now: the spec may gain them at any time, and a request the spec
    // cannot serve is answered with an error naming the missing section.
    pav_sdk::provisioner!(controller::PodController::new(driver, store))
        .clones_volumes()
        .volume_modes([pav_sdk::VolumeMode::Filesystem, pav_sdk::VolumeMode::Block])
        .access_modes(access_modes())
}

/// A store of the PersistentVolumes, kept by a watch from now on: the
/// driver's own whole (but for managedFields), the others' slim.
fn watch_volumes(driver: &DriverContext) -> reflector::Store<PersistentVolume> {
    let (store, writer) = reflector::store();
    let pvs: Api<PersistentVolume> = Api::all(driver.client.clone());
    let stream = watcher(pvs, watcher::Config::default())
        .default_backoff()
        .modify(crate::cached::volume_of(&driver.provisioner))
        .reflect(writer)
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                tracing::warn!(error = %e, "watching PersistentVolumes");
            }
        }
    });
    store
}

/// `provisioner` serving what `spec` has when the driver starts:
/// GetCapacity only with `spec.storageCapacity`, ControllerModifyVolume
/// (and claims with a VolumeAttributesClass) only with
/// `spec.volumeModification`, ControllerPublishVolume only with
/// `spec.volumeAttach`, the GroupController service only with
/// `spec.groupSnapshotCreation`. The driver's manifests enable
/// external-provisioner's capacity tracking, external-resizer's
/// VolumeAttributesClass support, external-attacher and csi-snapshotter's
/// group snapshots exactly then, so adding or removing a section rolls the
/// controller and this is read again.
pub fn served_sections(
    provisioner: pav_sdk::Provisioner<controller::PodController>,
    spec: Option<&pav_templates::PavProvisionerSpec>,
) -> pav_sdk::Provisioner<controller::PodController> {
    let provisioner = if spec.is_some_and(|s| s.has(Phase::Capacity)) {
        provisioner
    } else {
        provisioner.without_capacity()
    };
    let provisioner = if spec.is_some_and(|s| s.has(Phase::Modification)) {
        provisioner
    } else {
        provisioner.without_modify()
    };
    let provisioner = if spec.is_some_and(|s| s.has(Phase::GroupSnapshotCreation)) {
        provisioner
    } else {
        provisioner.without_group_snapshot()
    };
    if spec.is_some_and(|s| s.has(Phase::Attach)) {
        provisioner
    } else {
        provisioner.without_attach()
    }
}

/// The CSI access modes a PaV driver accepts: all of them, as each
/// PavProvisioner checks its claims' modes itself
/// (`volumeValidation.accessModes`, the guide's three by default;
/// `ReadWriteOncePod` only when named). With both single-node writer modes
/// pav-csi advertises `SINGLE_NODE_MULTI_WRITER`, without which Kubernetes
/// refuses `ReadWriteOncePod` claims.
fn access_modes() -> [pav_sdk::AccessMode; 7] {
    pav_sdk::AccessMode::ALL
}

/// Serves the CSI controller service until SIGTERM.
pub async fn run_controller(args: ControllerArgs) -> anyhow::Result<()> {
    args.common.logging.init();
    let driver = driver_context(&args.common, "csi-controller").await?;
    // Listed at startup, so the first CreateVolume does not wait for them.
    driver.pods.start_cache(None);
    driver.served.start_watch();
    tokio::spawn(controller::sweep(driver.clone()));
    tokio::spawn(deleted_nodes::release_periodically(driver.clone()));
    let object = driver.served.object().await?;
    let provisioner = served_sections(
        controller_provisioner(driver.clone()),
        object.as_ref().map(|p| &p.spec),
    );
    let leadership = Arc::new(tokio::sync::OnceCell::new());
    tokio::spawn(populate_as_leader(
        driver,
        provisioner.inner().clone(),
        leadership.clone(),
    ));
    let served = pav_csi::Driver::builder(args.common.provisioner.clone())
        .version(env!("CARGO_PKG_VERSION"))
        .provisioner(provisioner)
        .topology_aware()
        .serve_controller(&args.common.endpoint)
        .run()
        .await;
    // A successor need not wait for the Lease to expire.
    if let Some(leadership) = leadership.get() {
        leadership.release().await;
    }
    Ok(served?)
}

/// Runs the volume populator (`spec.volumePopulation`) in one replica of
/// the CSI controller at a time: the holder of Lease
/// `pav-populator-<driver>`, kept in `leadership` for its release. Always,
/// whatever the spec says now: a claim is filled only for the kinds the
/// spec names when the populator sees it.
async fn populate_as_leader(
    driver: Arc<DriverContext>,
    populate: Arc<controller::PodController>,
    leadership: Arc<tokio::sync::OnceCell<Arc<crate::leader::Leadership>>>,
) {
    let lease = crate::manifests::driver::populator_lease_name(&driver.provisioner);
    let identity = crate::leader::identity("pav-csi-controller");
    let held = Arc::new(
        crate::leader::Leadership::acquire(
            driver.client.clone(),
            &driver.namespace,
            &lease,
            &identity,
        )
        .await,
    );
    let _ = leadership.set(held.clone());
    tokio::spawn(async move { held.keep().await });
    pav_csi::populator::Populator::new(
        driver.client.clone(),
        driver.provisioner.clone(),
        driver.namespace.clone(),
        populate,
    )
    .run()
    .await;
}

/// Serves the CSI node service until SIGTERM.
pub async fn run_node(args: NodeArgs) -> anyhow::Result<()> {
    args.common.logging.init();
    let driver = driver_context(&args.common, "csi-node").await?;
    // Only this node's staging and unstaging pods.
    driver.pods.start_cache(Some(&args.node_id));
    driver.served.start_watch();
    tokio::spawn(node::collect(driver.clone(), args.pods_dir.clone()));
    tokio::spawn(node::sweep_dirs(
        driver.clone(),
        args.node_id.clone(),
        args.pods_dir.clone(),
    ));
    // Staged per node, NodeStageVolume names no pod: the volume is found
    // by its handle among the PersistentVolumes, watched only then.
    let staging = match args.staging_per_node {
        true => node::Staging::PerNode(watch_volumes(&driver)),
        false => node::Staging::PerPod,
    };
    let per_pod = matches!(staging, node::Staging::PerPod);
    let provisioner = pav_sdk::provisioner!(node::PodNode::new(
        driver,
        args.node_id.clone(),
        args.pods_dir,
        staging,
    ))
    .volume_modes([pav_sdk::VolumeMode::Filesystem, pav_sdk::VolumeMode::Block])
    .access_modes(access_modes());
    let provisioner = match per_pod {
        true => provisioner.stage_on_publish(),
        false => provisioner,
    };
    let provisioner = match args.ephemeral {
        true => provisioner.ephemeral(),
        false => provisioner,
    };
    pav_csi::Driver::builder(args.common.provisioner.clone())
        .version(env!("CARGO_PKG_VERSION"))
        .provisioner(provisioner)
        .node_topology(node_topology(&args.node_id))
        .serve_node(&args.common.endpoint, args.node_id)
        .kubelet_dir(args.kubelet_dir)
        .run()
        .await?;
    Ok(())
}
