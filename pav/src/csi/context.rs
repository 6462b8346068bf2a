//! The per-driver context ([`DriverContext`]): what every operation of one
//! PavProvisioner's driver shares. The API client, the watched and compiled
//! PavProvisioner, `get_pvc`, running PaV pods to completion, deleting
//! them, and events.
//!
//! Every wait for a pod reads one process-wide cache of this provisioner's
//! pods (a reflector store kept by a single watch, see
//! [`DriverContext::start_pod_cache`]), so waiting costs no request of its own.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use pav_templates::{CompiledProvisioner, Phase, PvcLookup};
use tokio::sync::watch;

use super::metrics::Metrics;
use super::pod_cache::{PodCache, PodWait, Timing, provisioner_selector};
use super::provisioner_cache::ProvisionerCache;
use crate::pods::label_value;
use crate::pods::results::{self, PodState};
use crate::recipe::{PlanError, Planner};

mod run;

pub use self::run::{PhaseError, PodFiles, Ran, Regarding};
pub use crate::driver_error::{DriverError, api_error};

/// How long a terminated pod may stay uncollected before its status alone
/// is used.
const COLLECT_GRACE: Duration = Duration::from_secs(30);

/// Longest wait for the pod cache's first list before an operation gives
/// up with `Unavailable` (the CO retries).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The API client and what every operation of one provisioner's driver
/// shares (one per `pav csi-controller` or `pav csi-node` process).
pub struct DriverContext {
    /// The API client.
    pub client: Client,
    /// The PavProvisioner's name (the CSI driver name).
    pub provisioner: String,
    /// Namespace of pods whose template names none.
    pub namespace: String,
    /// Upper bound of every wait for a pod.
    pub timeout: Duration,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    recorder: Recorder,
    /// This provisioner's pods, started on first use or by
    /// [`DriverContext::start_pod_cache`].
    pod_cache: OnceLock<PodCache>,
    /// This provisioner's PavProvisioner and its compiled form, started on
    /// first use or by [`DriverContext::start_provisioner_watch`].
    provisioner_cache: OnceLock<ProvisionerCache>,
}

impl std::fmt::Debug for DriverContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverContext")
            .field("provisioner", &self.provisioner)
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A [`PvcLookup`] reading through the API server; blocks, so templates are
/// rendered on a blocking thread (see [`Planner::blocking`]).
struct KubeLookup {
    client: Client,
    runtime: tokio::runtime::Handle,
}

impl PvcLookup for KubeLookup {
    fn get_pvc(
        &self,
        name: &str,
        namespace: &str,
    ) -> Result<Option<PersistentVolumeClaim>, String> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        self.runtime
            .block_on(api.get_opt(name))
            .map_err(|e| format!("cannot read PersistentVolumeClaim {namespace}/{name}: {e}"))
    }
}

/// How a pod run ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The pod as last seen.
    pub pod: Pod,
    /// Its terminal (or ready) state.
    pub state: PodState,
}

impl DriverContext {
    /// The context of `provisioner`'s driver; events are reported as
    /// `pav-<provisioner>` by `instance` (the pod name).
    pub fn new(
        client: Client,
        provisioner: String,
        namespace: String,
        timeout: Duration,
        metrics: Arc<Metrics>,
        instance: Option<String>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: format!("pav-{provisioner}"),
                instance,
            },
        );
        DriverContext {
            client,
            provisioner,
            namespace,
            timeout,
            metrics,
            recorder,
            pod_cache: OnceLock::new(),
            provisioner_cache: OnceLock::new(),
        }
    }

    /// Starts the process-wide cache of this provisioner's pods (one watch)
    /// unless it runs already; every pod wait reads it. With `node`, only
    /// pods with `spec.nodeName` = `node` are cached: right for the node
    /// plugin, which waits only for the staging and unstaging pods that
    /// [`build_pod`](crate::pods::build_pod) pins to its node. Without a
    /// call, the first wait starts it for every node's pods. Needs a tokio
    /// runtime.
    pub fn start_pod_cache(&self, node: Option<&str>) {
        self.pod_cache
            .get_or_init(|| PodCache::start(self.client.clone(), &self.provisioner, node));
    }

    /// The pod cache's store and a receiver marked changed after every
    /// update of it, starting the cache if need be: for work that scans
    /// the pods rather than waiting for one (the node plugin's collector).
    pub fn pod_updates(&self) -> (Store<Pod>, watch::Receiver<()>) {
        self.start_pod_cache(None);
        let cache = self.pod_cache.get().expect("started above");
        (cache.store.clone(), cache.changed.clone())
    }

    /// The pod cache, started if need be, once it has listed the pods.
    async fn pod_cache(&self) -> Result<&PodCache, DriverError> {
        self.start_pod_cache(None);
        let cache = self.pod_cache.get().expect("started above");
        cache.ready(READY_TIMEOUT.min(self.timeout)).await?;
        Ok(cache)
    }

    /// Pod `namespace/name` as the pod cache last saw it (no request).
    pub async fn cached_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, DriverError> {
        Ok(self.pod_cache().await?.get(namespace, name))
    }

    /// Every pod the pod cache holds now, once it has listed them (no
    /// request).
    pub async fn cached_pods(&self) -> Result<Vec<Arc<Pod>>, DriverError> {
        Ok(self.pod_cache().await?.store.state())
    }

    /// Starts the watch of this driver's PavProvisioner unless it runs
    /// already (needs a tokio runtime); the first [`DriverContext::compiled`]
    /// starts it otherwise.
    pub fn start_provisioner_watch(&self) {
        self.provisioner_cache
            .get_or_init(|| ProvisionerCache::start(self.client.clone(), &self.provisioner));
    }

    /// The PavProvisioner, compiled, and an owner reference to it for the
    /// pods (so deleting the provisioner garbage-collects them). From the
    /// watch of the object (no request) and compiled once per generation.
    pub async fn compiled(
        &self,
    ) -> Result<(Arc<CompiledProvisioner>, Option<OwnerReference>), DriverError> {
        self.start_provisioner_watch();
        let cache = self.provisioner_cache.get().expect("started above");
        cache.ready(READY_TIMEOUT.min(self.timeout)).await?;
        let generation = cache.current()?;
        match &generation.compiled {
            Ok(compiled) => Ok((compiled.clone(), generation.owner.clone())),
            Err(problems) => Err(DriverError::InvalidProvisioner(problems.clone())),
        }
    }

    /// The PavProvisioner as its watch last saw it, valid or not (`None`
    /// when there is none): what the driver's manifests were made from.
    pub async fn provisioner_object(
        &self,
    ) -> Result<Option<Arc<pav_templates::PavProvisioner>>, DriverError> {
        self.start_provisioner_watch();
        let cache = self.provisioner_cache.get().expect("started above");
        cache.ready(READY_TIMEOUT.min(self.timeout)).await?;
        Ok(cache.object())
    }

    /// How many times this driver compiled its PavProvisioner.
    pub fn compilations(&self) -> usize {
        self.provisioner_cache
            .get()
            .map_or(0, ProvisionerCache::compilations)
    }

    /// The `get_pvc` answering from the API server.
    fn lookup(&self) -> Arc<dyn PvcLookup> {
        Arc::new(KubeLookup {
            client: self.client.clone(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// The planner of this driver's phases: the PavProvisioner compiled
    /// (from its watch), its owner reference for the pods, this driver's
    /// namespace and `get_pvc` through the API server.
    pub async fn planner(&self) -> Result<Planner, PlanError> {
        let (compiled, owner) = self.compiled().await.map_err(PlanError::Provisioner)?;
        Ok(Planner::new(
            compiled,
            owner,
            self.namespace.clone(),
            self.lookup(),
        ))
    }

    /// Pods API of `namespace`.
    pub fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Pods of this provisioner (any namespace) matching extra `labels`.
    pub async fn list_pods(&self, labels: &[(&str, String)]) -> Result<Vec<Pod>, DriverError> {
        let mut selector = provisioner_selector(&self.provisioner);
        for (key, value) in labels {
            selector.push_str(&format!(",{key}={}", label_value(value)));
        }
        let api: Api<Pod> = Api::all(self.client.clone());
        Ok(api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| api_error("listing PaV pods", e))?
            .items)
    }

    /// Creates `pod` unless a pod of that name exists (a restarted component
    /// picks up its earlier pod); waits for a pod still being deleted to go
    /// first. Returns true when it created the pod.
    pub async fn ensure_pod(&self, pod: &Pod) -> Result<bool, DriverError> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api = self.pods(&namespace);
        // From the cache: a pod missing from it only because it is very new
        // makes the creation below answer 409, which means the same.
        if let Some(existing) = self.cached_pod(&namespace, &name).await? {
            if existing.metadata.deletion_timestamp.is_none() {
                return Ok(false);
            }
            self.wait_gone(&namespace, &name).await?;
        }
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => {
                tracing::info!(pod = %name, namespace, "created PaV pod");
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(api_error(&format!("creating pod {namespace}/{name}"), e)),
        }
    }

    /// Waits until `check` answers for pod `namespace/name`, the pod
    /// disappears, or the phase timeout passes (the pod's own, see
    /// [`timeout_of`](crate::pods::timeout_of), else `--phase-timeout`).
    /// `check` is asked on every change of the pod and once a second, for
    /// conditions that involve files. Reads the pod cache: no request,
    /// except one read every 10 s while the pod is not in the cache (it may
    /// be gone already).
    pub async fn wait_pod<T>(
        &self,
        phase: Phase,
        namespace: &str,
        name: &str,
        check: impl FnMut(&Pod) -> Option<T>,
    ) -> Result<T, DriverError> {
        let api = self.pods(namespace);
        let absent = || {
            let (api, what) = (api.clone(), format!("pod {namespace}/{name}"));
            let name = name.to_owned();
            async move {
                match api.get_opt(&name).await {
                    Ok(pod) => Ok(pod.is_none()),
                    Err(e) => Err(api_error(&what, e)),
                }
            }
        };
        self.pod_cache()
            .await?
            .wait_pod(
                PodWait {
                    phase,
                    namespace,
                    name,
                    timeout: self.timeout,
                    timing: Timing::DEFAULT,
                },
                check,
                absent,
            )
            .await
    }

    /// Waits until a pod has terminated and (if `collected`) the node
    /// plugin copied its files into annotations; a pod the node plugin does
    /// not collect within 30 s is taken as it is.
    pub async fn wait_terminated(
        &self,
        phase: Phase,
        namespace: &str,
        name: &str,
        collected: bool,
    ) -> Result<Finished, DriverError> {
        let mut terminated_at: Option<Instant> = None;
        self.wait_pod(phase, namespace, name, |pod| {
            let state = PodState::of(pod);
            if !state.is_terminated() {
                return None;
            }
            let since = *terminated_at.get_or_insert_with(Instant::now);
            let done = !collected
                || results::Collected::of(pod).is_some()
                || since.elapsed() > COLLECT_GRACE;
            done.then(|| Finished {
                pod: pod.clone(),
                state,
            })
        })
        .await
    }

    /// Deletes a pod (gone already is fine) and waits until it is gone.
    pub async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), DriverError> {
        match self
            .pods(namespace)
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(e) => return Err(api_error(&format!("deleting pod {namespace}/{name}"), e)),
        }
        self.wait_gone(namespace, name).await
    }

    /// Waits until pod `namespace/name` no longer exists (in the pod
    /// cache: a pod it does not hold counts as gone).
    pub async fn wait_gone(&self, namespace: &str, name: &str) -> Result<(), DriverError> {
        self.pod_cache()
            .await?
            .wait_gone(namespace, name, self.timeout)
            .await
    }

    /// Removes `finalizer` from a pod, if it is there.
    pub async fn remove_finalizer(&self, pod: &Pod, finalizer: &str) -> Result<(), DriverError> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api = self.pods(&namespace);
        let Some(current) = api
            .get_opt(&name)
            .await
            .map_err(|e| api_error(&format!("pod {namespace}/{name}"), e))?
        else {
            return Ok(());
        };
        let finalizers = current.finalizers();
        if !finalizers.iter().any(|f| f == finalizer) {
            return Ok(());
        }
        let kept: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
        let patch = serde_json::json!({
            "metadata": {"finalizers": kept, "resourceVersion": current.resource_version()}
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(api_error(
                &format!("removing the finalizer of pod {namespace}/{name}"),
                e,
            )),
        }
    }

    /// The PavProvisioner, as events name it: with its uid, as `kubectl
    /// describe` finds events by it, when the object can be read.
    pub async fn provisioner_ref(&self) -> ObjectReference {
        use pav_templates::PavProvisioner;
        match self.provisioner_object().await {
            Ok(Some(object)) => object.object_ref(&()),
            _ => ObjectReference {
                api_version: Some(PavProvisioner::api_version(&()).into_owned()),
                kind: Some(PavProvisioner::kind(&()).into_owned()),
                name: Some(self.provisioner.clone()),
                ..ObjectReference::default()
            },
        }
    }

    /// Reports a failure as a Warning event on `regarding` (a PVC, PV,
    /// client pod or the PavProvisioner), naming the phase and the pod in
    /// `message`.
    pub async fn warn(
        &self,
        regarding: &ObjectReference,
        phase: Phase,
        message: &str,
        pod: Option<ObjectReference>,
    ) {
        self.publish(
            EventType::Warning,
            phase.event_reason(),
            regarding,
            phase,
            message,
            pod,
        )
        .await;
    }

    /// Reports, as a Normal event with `reason` on `regarding`, that
    /// `phase` waits for something (nothing failed), related to `pod`.
    pub async fn note_waiting(
        &self,
        regarding: &ObjectReference,
        (phase, reason): (Phase, &str),
        message: &str,
        pod: Option<ObjectReference>,
    ) {
        self.publish(EventType::Normal, reason, regarding, phase, message, pod)
            .await;
    }

    async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        regarding: &ObjectReference,
        phase: Phase,
        message: &str,
        pod: Option<ObjectReference>,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(results::truncate(message.to_owned())),
            action: phase.field().to_owned(),
            secondary: pod,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %e, "cannot publish event");
        }
    }
}

/// An object reference to a pod, for the `related` field of events.
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    pod.object_ref(&())
}

/// A reference to a core/v1 object known only by name (and maybe uid), as
/// PaV pods' annotations record their claim and client pod: what events
/// about an object that may already be gone are about.
pub fn core_ref(kind: &str, namespace: &str, name: &str, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some(kind.into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: uid.map(Into::into),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use http::Method;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use crate::csi::fixtures::{ApiServer, driver_context, status};

    /// A pod the cache has not seen yet but the API server has: creating
    /// it again answers 409, which means it exists, not a failure.
    #[tokio::test]
    async fn a_pod_created_meanwhile_is_picked_up_not_failed() {
        let (server, client) = ApiServer::start();
        server.serve_pods(|_| Vec::new());
        server.intercept(|r| {
            (r.method == Method::POST && r.path == "/api/v1/namespaces/pav/pods")
                .then(|| status(409, "AlreadyExists", "pods \"x\" already exists"))
        });
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "pav"},
            "spec": {"containers": []},
        }))
        .unwrap();
        let created = (driver_context(client).ensure_pod(&pod).await).unwrap();
        assert!(!created, "a 409 was taken as a pod this call created");
        let posts = (server.requests().iter())
            .filter(|r| r.method == Method::POST)
            .count();
        assert_eq!(posts, 1);
    }

    /// Another client changes the pod's finalizers between
    /// `remove_finalizer`'s read and its patch: the patch names the version
    /// it read, so it is refused instead of writing back a stale list and
    /// dropping the other client's finalizer; the caller's retry (kubelet
    /// repeats NodeUnstageVolume) then removes only its own.
    #[tokio::test]
    async fn a_finalizer_is_removed_without_losing_a_concurrent_change() {
        let (server, client) = ApiServer::start();
        server.serve_pods(|_| Vec::new());
        server.put_pod(json!({
            "metadata": {"name": "x", "namespace": "pav", "finalizers": ["pav/ours", "other/kept"]},
            "spec": {"containers": []},
        }));
        let finalizers = |server: &ApiServer| server.pods()[0]["metadata"]["finalizers"].clone();
        let pod: Pod = serde_json::from_value(server.pods()[0].clone()).unwrap();
        let driver = driver_context(client);
        server.change_before_next_patch(
            "pav",
            "x",
            json!({"metadata": {"finalizers": ["pav/ours", "other/kept", "other/late"]}}),
        );

        let refused = driver.remove_finalizer(&pod, "pav/ours").await;
        assert!(refused.is_err(), "a stale patch was applied");
        assert_eq!(
            finalizers(&server),
            json!(["pav/ours", "other/kept", "other/late"])
        );

        (driver.remove_finalizer(&pod, "pav/ours").await).unwrap();
        assert_eq!(finalizers(&server), json!(["other/kept", "other/late"]));
    }
}
