//! `pav controller`: each PavProvisioner becomes a CSI driver.
//!
//! For every PavProvisioner the controller
//!
//! 1. adds the finalizer [`FINALIZER`];
//! 2. checks the object with [`CompiledProvisioner::new`]; problems go to
//!    the `Ready` condition (reason `InvalidSpec`, one problem per line,
//!    each naming its field) and to a Warning event, and nothing is
//!    deployed;
//! 3. server-side applies the objects of [`crate::manifests::driver`]
//!    (field manager `pav-controller`);
//! 4. writes the status: `Ready` (deployment and node plugin available),
//!    `observedGeneration`, `volumes`.
//!
//! Deleting a PavProvisioner is refused, with a Warning event and the
//! `Ready` condition saying why, while PersistentVolumes of its driver,
//! claims of one of its StorageClasses, its staged volumes or
//! VolumeSnapshotContents of its driver exist ([`InUse`]); then the
//! driver's objects are deleted and the finalizer released.
//!
//! Deployments, DaemonSets, CSIDrivers (by the provisioner label) and
//! PersistentVolumes (by `spec.csi.driver`, when one appears or goes) trigger
//! reconciles of their provisioner, so status and volume counts follow them.
//! Their watches fill the controller's [`Stores`], which answer reconciles
//! without further requests: a driver whose objects have not changed is
//! re-applied only every [`REAPPLY_AFTER`] (so a deleted ServiceAccount or
//! binding comes back), not on each of its volumes' events.

mod apply;
mod in_use;
pub mod metrics;
mod node_namespaces;
mod status;

use self::apply::{Applied, apply_driver, delete_driver, delete_named};
pub use self::in_use::{InUse, claims_in, volumes_in};
use self::in_use::{claims_of, snapshots_of, staging_pods_of, volume_ids_in, volumes_of};
use self::status::update_status;
pub use self::status::{condition, next_status, readiness};

use std::collections::{HashMap, HashSet};
use std::hash::{Hash as _, Hasher as _};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt as _, controller, watcher};
use kube::{Api, Client, Resource, ResourceExt as _};
use pav_templates::{CompiledProvisioner, PavProvisioner};
use serde::de::DeserializeOwned;

use crate::leader;
use crate::manifests::driver::{self, DriverObjects};
use crate::manifests::{DEFAULT_METRICS_ADDR, FIELD_MANAGER, LABEL_PROVISIONER, Settings};
use metrics::{Metrics, Outcome};

/// Finalizer that keeps a PavProvisioner until its driver is removed.
pub const FINALIZER: &str = "pav.albertofaria.github.io/cleanup";

/// Condition type of the one condition pav writes.
pub const READY: &str = "Ready";

/// Reasons of the `Ready` condition.
pub mod reason {
    /// The spec has problems (message: one per line, each naming its field).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The CSI controller and node plugin are available.
    pub const DRIVER_READY: &str = "DriverReady";
    /// The driver is deployed but not available yet.
    pub const DRIVER_NOT_READY: &str = "DriverNotReady";
    /// The driver is deployed without objects the controller's RBAC does
    /// not grant yet (a newer image under older roles): its message names
    /// them.
    pub const OBJECTS_FORBIDDEN: &str = "ObjectsForbidden";
    /// Deletion is refused while volumes, claims, staged volumes or
    /// snapshots exist ([`InUse`](super::InUse)).
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
}

/// Flags of `pav controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Namespace and images of the drivers.
    #[command(flatten)]
    pub settings: Settings,
    /// Address of the metrics (`/metrics`) and health (`/healthz`, `/readyz`) endpoints.
    #[arg(long, env = "PAV_METRICS_ADDR", default_value = DEFAULT_METRICS_ADDR)]
    pub metrics_addr: SocketAddr,
    /// Only reconcile PavProvisioners matching this label selector (for
    /// tests and canaries; default: all).
    #[arg(long, env = "PAV_SELECTOR")]
    pub selector: Option<String>,
    /// Reconcile only while holding the Lease `pav-controller` in the pav
    /// namespace (so replicas and rolling updates never run two controllers).
    #[arg(long, env = "PAV_LEADER_ELECTION")]
    pub leader_election: bool,
    /// Client-side API rate limit.
    #[command(flatten)]
    pub api: crate::client::ApiLimits,
}

/// How long an unchanged driver goes without being applied again.
pub const REAPPLY_AFTER: Duration = Duration::from_secs(240);

/// Name of the controller's leader-election Lease.
pub const LEASE: &str = "pav-controller";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("Kubernetes API request")]
    Kube(#[from] kube::Error),
    /// Deletion refused: the provisioner still has volumes, claims,
    /// staged volumes or snapshots.
    #[error(transparent)]
    InUse(InUse),
    /// Deletion goes on once the driver's pods have stopped.
    #[error("{0}")]
    Stopping(String),
}

/// What every reconcile shares.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Namespace and images of the drivers.
    pub settings: Settings,
    /// Event recorder (reporting controller `pav-controller`).
    pub recorder: Recorder,
    /// Metrics and readiness.
    pub metrics: Arc<Metrics>,
    /// What the controller's watches have seen.
    pub stores: Stores,
    /// Consecutive failures per provisioner, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The driver objects last applied, per provisioner.
    applied: Mutex<HashMap<String, LastApplied>>,
    /// Where templates put node phases' pods, per volume.
    node_namespaces: node_namespaces::Evaluations,
}

/// A driver's objects as last applied.
struct LastApplied {
    /// Their [`fingerprint`].
    fingerprint: u64,
    /// When.
    at: Instant,
    /// Those the controller was forbidden to apply.
    forbidden: Vec<String>,
}

/// The objects the controller watches, as last seen.
#[derive(Clone)]
pub struct Stores {
    /// The drivers' CSI controller Deployments.
    pub deployments: Store<Deployment>,
    /// The drivers' node DaemonSets.
    pub daemon_sets: Store<DaemonSet>,
    /// The drivers' CSIDrivers.
    pub csi_drivers: Store<CSIDriver>,
    /// Every PersistentVolume, cut down to its name and CSI driver.
    pub volumes: Store<PersistentVolume>,
}

impl Stores {
    /// The driver of provisioner `name` as the watches see it: its
    /// Deployment and DaemonSet, if its CSIDriver exists too.
    fn driver(&self, ns: &str, name: &str) -> Option<(Deployment, DaemonSet)> {
        self.csi_drivers.get(&ObjectRef::new(name))?;
        let deployment = self
            .deployments
            .get(&ObjectRef::new(&driver::controller_name(name)).within(ns))?;
        let daemon_set = self
            .daemon_sets
            .get(&ObjectRef::new(&driver::node_name(name)).within(ns))?;
        Some((deployment.as_ref().clone(), daemon_set.as_ref().clone()))
    }

    /// How many PersistentVolumes provisioner `name`'s driver serves.
    async fn volume_count(&self, name: &str) -> usize {
        // Only before the first list; the watch then keeps it current.
        let _ = self.volumes.wait_until_ready().await;
        volumes_in(&self.volumes.state(), name).len()
    }
}

/// A hash of everything a driver is made of: equal hashes, nothing to apply.
fn fingerprint(objects: &DriverObjects) -> u64 {
    let json = serde_json::to_string(&(
        &objects.csi_driver,
        &objects.service_accounts,
        &objects.cluster_role_bindings,
        &objects.role_bindings,
        &objects.deployment,
        &objects.daemon_set,
        &objects.disruption_budget,
    ))
    .unwrap_or_default();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    json.hash(&mut hasher);
    hasher.finish()
}

impl Context {
    /// A context for `client`.
    pub fn new(client: Client, settings: Settings, metrics: Arc<Metrics>, stores: Stores) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            metrics,
            stores,
            failures: Mutex::default(),
            applied: Mutex::default(),
            node_namespaces: Default::default(),
        }
    }

    fn applied(&self) -> std::sync::MutexGuard<'_, HashMap<String, LastApplied>> {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs the controller until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    args.settings.logging.init();
    let client = crate::client::client(args.api, "controller").await?;
    run_with(client, args).await
}

/// Runs the controller with `client` until SIGTERM (or until the future is
/// dropped).
pub async fn run_with(client: Client, args: Args) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::default());
    let server = tokio::spawn(crate::telemetry::serve(
        args.metrics_addr,
        metrics.clone().router(),
    ));

    // Ready once PavProvisioners can be listed (CRD installed, RBAC in place).
    let provisioners: Api<PavProvisioner> = Api::all(client.clone());
    while let Err(err) = provisioners.list(&ListParams::default().limit(1)).await {
        tracing::warn!(error = %err, "cannot list PavProvisioners yet; retrying in 5s");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    metrics.set_ready(true);
    tracing::info!(namespace = %args.settings.namespace, image = %args.settings.image, "pav controller started");

    let ns = args.settings.namespace.clone();
    let leadership = if args.leader_election {
        let identity = leader::identity("pav-controller");
        let leadership =
            Arc::new(leader::Leadership::acquire(client.clone(), &ns, LEASE, &identity).await);
        let keeper = leadership.clone();
        tokio::spawn(async move { keeper.keep().await });
        Some(leadership)
    } else {
        None
    };
    let owned = watcher::Config::default().labels(LABEL_PROVISIONER);
    let (deployments, deployment_events) = reflected(
        Api::<Deployment>::namespaced(client.clone(), &ns),
        owned.clone(),
    );
    let (daemon_sets, daemon_set_events) = reflected(
        Api::<DaemonSet>::namespaced(client.clone(), &ns),
        owned.clone(),
    );
    let (csi_drivers, csi_driver_events) = reflected(Api::<CSIDriver>::all(client.clone()), owned);
    let (volumes, writer) = reflector::store();
    // A volume's status changes do not change its provisioner's count:
    // only a volume appearing or going triggers a reconcile.
    let mut known = HashSet::new();
    let volume_events = watcher(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(crate::cached::slim_volume)
    .reflect(writer)
    .filter_map(move |event| {
        let trigger = match event {
            Ok(watcher::Event::Apply(pv) | watcher::Event::InitApply(pv)) => {
                known.insert(pv.name_any()).then_some(Ok(pv))
            }
            Ok(watcher::Event::Delete(pv)) => {
                known.remove(&pv.name_any());
                Some(Ok(pv))
            }
            // A relist (after a watch error) may have missed deletions:
            // let every listed volume trigger once more.
            Ok(watcher::Event::Init) => {
                known.clear();
                None
            }
            Ok(watcher::Event::InitDone) => None,
            Err(e) => Some(Err(e)),
        };
        std::future::ready(trigger)
    });
    let stores = Stores {
        deployments,
        daemon_sets,
        csi_drivers,
        volumes,
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        args.settings.clone(),
        metrics,
        stores,
    ));
    let mut selected = watcher::Config::default();
    if let Some(selector) = &args.selector {
        selected = selected.labels(selector);
    }
    Controller::new(provisioners, selected)
        // Bursts of volume events become one reconcile.
        .with_config(controller::Config::default().debounce(Duration::from_secs(1)))
        .watches_stream(deployment_events, by_label)
        .watches_stream(daemon_set_events, by_label)
        .watches_stream(csi_driver_events, by_label)
        .watches_stream(volume_events, |pv: PersistentVolume| {
            pv.spec
                .and_then(|s| s.csi)
                .map(|csi| ObjectRef::new(&csi.driver))
        })
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(%object, "reconciled"),
                Err(err) => {
                    tracing::debug!(error = %pav_csi::error_chain(&err), "reconcile failed")
                }
            }
        })
        .await;
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    server.abort();
    Ok(())
}

/// A store of the objects of `api` matching `config`, and the stream of
/// their changes (deletions included) that keeps it current, to be polled.
fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, config)
        .default_backoff()
        .modify(crate::cached::without_managed_fields)
        .reflect(writer)
        .touched_objects();
    (store, events)
}

/// The provisioner an object pav deployed belongs to.
fn by_label<K: Resource>(object: K) -> Option<ObjectRef<PavProvisioner>> {
    object
        .meta()
        .labels
        .as_ref()?
        .get(LABEL_PROVISIONER)
        .map(|name| ObjectRef::new(name))
}

/// Reconciles one PavProvisioner.
pub async fn reconcile(
    provisioner: Arc<PavProvisioner>,
    ctx: Arc<Context>,
) -> Result<Action, finalizer::Error<Error>> {
    let api: Api<PavProvisioner> = Api::all(ctx.client.clone());
    let name = provisioner.name_any();
    let result = finalizer(&api, FINALIZER, provisioner, |event| async {
        let start = Instant::now();
        let (action, outcome) = match event {
            finalizer::Event::Apply(p) => apply(&p, &ctx).await?,
            finalizer::Event::Cleanup(p) => cleanup(&p, &ctx).await?,
        };
        ctx.metrics.reconciled(outcome, start.elapsed());
        Ok(action)
    })
    .await;
    if result.is_ok() {
        ctx.failures().remove(&name);
    }
    result
}

/// Retries failed reconciles with exponential backoff per provisioner
/// (5 s doubling up to 5 min).
pub fn error_policy(
    provisioner: Arc<PavProvisioner>,
    err: &finalizer::Error<Error>,
    ctx: Arc<Context>,
) -> Action {
    let name = provisioner.name_any();
    let failures = {
        let mut map = ctx.failures();
        let count = map.entry(name.clone()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let delay = backoff(failures);
    match err {
        finalizer::Error::CleanupFailed(Error::InUse(in_use)) => {
            ctx.metrics.reconciled(Outcome::Blocked, Duration::ZERO);
            tracing::info!(provisioner = %name, retry_in = ?delay, "{in_use}");
        }
        finalizer::Error::CleanupFailed(Error::Stopping(message)) => {
            ctx.metrics.reconciled(Outcome::Blocked, Duration::ZERO);
            tracing::info!(provisioner = %name, retry_in = ?delay, "{message}");
        }
        err => {
            ctx.metrics.reconciled(Outcome::Error, Duration::ZERO);
            tracing::warn!(provisioner = %name, retry_in = ?delay, error = %pav_csi::error_chain(&err), "reconcile failed");
        }
    }
    Action::requeue(delay)
}

/// Delay before retry number `failures` (1-based): 5 s, 10 s, 20 s, ... 5 min.
pub fn backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(10);
    Duration::from_secs((5u64 << exponent).min(300))
}

async fn apply(p: &PavProvisioner, ctx: &Context) -> Result<(Action, Outcome), Error> {
    let name = p.name_any();
    let volumes = ctx.stores.volume_count(&name).await;
    ctx.metrics.set_volumes(&name, Some(volumes as i64));
    if let Err(problems) = CompiledProvisioner::new(p) {
        let message = problems.to_string();
        tracing::info!(provisioner = %name, "invalid spec:\n{message}");
        let condition = condition(false, reason::INVALID_SPEC, &message);
        update_status(p, ctx, condition, volumes, EventType::Warning).await?;
        return Ok((Action::requeue(Duration::from_secs(600)), Outcome::Invalid));
    }

    let applied = apply_if_changed(ctx, &name, &driver_objects(p, ctx).await?).await?;
    let (ready, mut message) = readiness(&name, &applied.deployment, &applied.daemon_set);
    let reason = if !applied.forbidden.is_empty() {
        message.push_str(&format!(
            "; not applied, forbidden by the controller's RBAC (upgrade pav's chart or apply `pav manifests` again): {}",
            applied.forbidden.join(", ")
        ));
        reason::OBJECTS_FORBIDDEN
    } else if ready {
        reason::DRIVER_READY
    } else {
        reason::DRIVER_NOT_READY
    };
    let kind = if applied.forbidden.is_empty() {
        EventType::Normal
    } else {
        EventType::Warning
    };
    update_status(p, ctx, condition(ready, reason, &message), volumes, kind).await?;
    Ok((Action::requeue(Duration::from_secs(300)), Outcome::Applied))
}

/// Every object of `p`'s driver, its node plugin bound wherever its node
/// phases' pods go: where the spec says, where its templates say for each
/// of its volumes, and where its staged volumes' pods are.
async fn driver_objects(p: &PavProvisioner, ctx: &Context) -> Result<DriverObjects, Error> {
    let settings = &ctx.settings;
    let mut objects = driver::objects(p, settings);
    let volumes = volume_ids_in(&ctx.stores.volumes.state(), &p.name_any());
    let evaluated = (ctx.node_namespaces)
        .namespaces(
            &ctx.client,
            p,
            &objects.node_pods,
            &volumes,
            &settings.namespace,
        )
        .await?;
    for namespace in evaluated.difference(&objects.node_pods.fixed) {
        (objects.role_bindings).push(driver::node_pods_binding(p, settings, namespace));
    }
    Ok(objects)
}

/// Applies a driver unless the same objects were applied less than
/// [`REAPPLY_AFTER`] ago and the watches still see them.
async fn apply_if_changed(
    ctx: &Context,
    name: &str,
    objects: &DriverObjects,
) -> Result<Applied, Error> {
    let ns = &ctx.settings.namespace;
    let fingerprint = fingerprint(objects);
    let recent = ctx
        .applied()
        .get(name)
        .filter(|last| last.fingerprint == fingerprint && last.at.elapsed() < REAPPLY_AFTER)
        .map(|last| last.forbidden.clone());
    if let Some(forbidden) = recent
        && let Some((deployment, daemon_set)) = ctx.stores.driver(ns, name)
    {
        return Ok(Applied {
            deployment,
            daemon_set,
            forbidden,
        });
    }
    let applied = apply_driver(&ctx.client, ns, objects).await?;
    let last = LastApplied {
        fingerprint,
        at: Instant::now(),
        forbidden: applied.forbidden.clone(),
    };
    ctx.applied().insert(name.to_owned(), last);
    Ok(applied)
}

async fn cleanup(p: &PavProvisioner, ctx: &Context) -> Result<(Action, Outcome), Error> {
    let name = p.name_any();
    ctx.applied().remove(&name);
    let volumes = volumes_of(&ctx.client, &name).await?;
    let claims = claims_of(&ctx.client, &name).await?;
    let staged = staging_pods_of(&ctx.client, &name).await?;
    let snapshots = snapshots_of(&ctx.client, &name).await?;
    let in_use = InUse {
        provisioner: name.clone(),
        volumes: volumes.len(),
        claims: claims.len(),
        staged,
        snapshots,
    };
    if in_use.blocks() {
        let message = in_use.to_string();
        let condition = condition(false, reason::DELETION_BLOCKED, &message);
        // Always tell, not only on change: the user is waiting for deletion.
        publish(
            ctx,
            p,
            EventType::Warning,
            reason::DELETION_BLOCKED,
            &message,
        )
        .await;
        update_status(p, ctx, condition, volumes.len(), EventType::Warning).await?;
        return Err(Error::InUse(in_use));
    }
    let ns = &ctx.settings.namespace;
    delete_driver(&ctx.client, ns, &name).await?;
    // The Leases of the driver's sidecars and populator, else a
    // provisioner re-created under the same name waits for them to expire
    // before it provisions (resizes, snapshots, populates). Only once the
    // CSI controller pod is gone: a running one would re-create them.
    let selector = format!(
        "{LABEL_PROVISIONER}={name},{}=csi-controller",
        crate::manifests::LABEL_COMPONENT
    );
    let running = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(ctx.client.clone(), ns)
        .list_metadata(&ListParams::default().labels(&selector))
        .await?;
    if !running.items.is_empty() {
        return Err(Error::Stopping(format!(
            "waiting for the CSI controller of {name} to stop before deleting its Leases"
        )));
    }
    let leases = Api::<Lease>::namespaced(ctx.client.clone(), ns);
    for lease in driver::lease_names(&name) {
        delete_named(&leases, &lease).await?;
    }
    ctx.metrics.set_volumes(&name, None);
    tracing::info!(provisioner = %name, "driver removed");
    Ok((Action::await_change(), Outcome::Cleaned))
}

/// Records an event on the provisioner; failures are only logged.
async fn publish(ctx: &Context, p: &PavProvisioner, kind: EventType, reason: &str, message: &str) {
    let note = crate::telemetry::truncate(message.to_owned());
    let event = Event {
        type_: kind,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &p.object_ref(&())).await {
        tracing::warn!(provisioner = %p.name_any(), error = %err, "cannot record event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff(u32::MAX).as_secs(), 300);
    }

    #[test]
    fn slim_volumes_still_count_for_their_driver() {
        let mut pvs: Vec<PersistentVolume> = serde_yaml::from_str(
            "- metadata: { name: a, uid: u1, annotations: { x: y }, labels: { l: v } }\n  \
               spec: { csi: { driver: hello, volumeHandle: h1, volumeAttributes: { k: v } }, capacity: { storage: 1Gi } }\n  \
               status: { phase: Bound }\n\
             - metadata: { name: c }\n  spec: { hostPath: { path: /x } }\n",
        )
        .unwrap();
        pvs.iter_mut().for_each(crate::cached::slim_volume);
        assert_eq!(volumes_in(&pvs, "hello"), ["a"]);
    }

    #[test]
    fn invalid_spec_problems_name_the_field() {
        let p: PavProvisioner = serde_yaml::from_str(
            "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata: { name: broken }\n\
             spec:\n  provisioningModes: [Dynamic]\n  volumeStaging:\n    podTemplate:\n      spec:\n        containers:\n          - name: c\n            image: \"{{ oops\"\n",
        )
        .unwrap();
        let problems = CompiledProvisioner::new(&p).unwrap_err().to_string();
        assert!(
            problems.contains("spec.volumeStaging.podTemplate.spec.containers[0].image"),
            "{problems}"
        );
    }
}

#[cfg(test)]
mod scenarios;
