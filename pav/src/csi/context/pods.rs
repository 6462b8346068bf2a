//! This driver's PaV pods ([`PavPods`]): the API, and one process-wide
//! cache of them (a reflector store kept by a single watch, see
//! [`PavPods::start_cache`]), so waiting for a pod costs no request of its
//! own.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use pav_templates::Phase;
use tokio::sync::watch;

use super::READY_TIMEOUT;
use crate::csi::pod_cache::{PodCache, PodWait, Timing, provisioner_selector};
use crate::driver_error::{DriverError, api_error};
use crate::pods::label_value;
use crate::pods::results::{self, PodState};

/// How long a terminated pod may stay uncollected before its status alone
/// is used.
const COLLECT_GRACE: Duration = Duration::from_secs(30);

/// The PaV pods of one provisioner's driver: created, waited for, deleted.
pub struct PavPods {
    client: Client,
    /// The PavProvisioner whose pods these are.
    provisioner: String,
    /// Upper bound of every wait for a pod.
    timeout: Duration,
    /// Started on first use or by [`PavPods::start_cache`].
    cache: OnceLock<PodCache>,
}

/// How a pod run ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The pod as last seen.
    pub pod: Pod,
    /// Its terminal (or ready) state.
    pub state: PodState,
}

impl PavPods {
    pub(super) fn new(client: Client, provisioner: String, timeout: Duration) -> Self {
        PavPods {
            client,
            provisioner,
            timeout,
            cache: OnceLock::new(),
        }
    }

    /// Starts the process-wide cache of this provisioner's pods (one watch)
    /// unless it runs already; every pod wait reads it. With `node`, only
    /// pods with `spec.nodeName` = `node` are cached: right for the node
    /// plugin, which waits only for the staging and unstaging pods that
    /// [`build_pod`](crate::pods::build_pod) pins to its node. Without a
    /// call, the first wait starts it for every node's pods. Needs a tokio
    /// runtime.
    pub fn start_cache(&self, node: Option<&str>) {
        self.cache
            .get_or_init(|| PodCache::start(self.client.clone(), &self.provisioner, node));
    }

    /// The pod cache's store and a receiver marked changed after every
    /// update of it, starting the cache if need be: for work that scans
    /// the pods rather than waiting for one (the node plugin's collector).
    pub fn updates(&self) -> (Store<Pod>, watch::Receiver<()>) {
        self.start_cache(None);
        let cache = self.cache.get().expect("started above");
        (cache.store.clone(), cache.changed.clone())
    }

    /// The pod cache, started if need be, once it has listed the pods.
    async fn cache(&self) -> Result<&PodCache, DriverError> {
        self.start_cache(None);
        let cache = self.cache.get().expect("started above");
        cache.ready(READY_TIMEOUT.min(self.timeout)).await?;
        Ok(cache)
    }

    /// Pod `namespace/name` as the pod cache last saw it (no request).
    pub async fn cached(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, DriverError> {
        Ok(self.cache().await?.get(namespace, name))
    }

    /// Every pod the pod cache holds now, once it has listed them (no
    /// request).
    pub async fn cached_all(&self) -> Result<Vec<Arc<Pod>>, DriverError> {
        Ok(self.cache().await?.store.state())
    }

    /// Pods API of `namespace`.
    pub fn api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Pods of this provisioner (any namespace) matching extra `labels`.
    pub async fn list(&self, labels: &[(&str, String)]) -> Result<Vec<Pod>, DriverError> {
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
    pub async fn ensure(&self, pod: &Pod) -> Result<bool, DriverError> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api = self.api(&namespace);
        // From the cache: a pod missing from it only because it is very new
        // makes the creation below answer 409, which means the same.
        if let Some(existing) = self.cached(&namespace, &name).await? {
            if existing.metadata.deletion_timestamp.is_none() {
                return Ok(false);
            }
            self.wait_gone(&namespace, &name).await?;
        }
        let mut waited = std::time::Duration::ZERO;
        loop {
            match api.create(&PostParams::default(), pod).await {
                Ok(_) => {
                    tracing::info!(pod = %name, namespace, "created PaV pod");
                    return Ok(true);
                }
                Err(kube::Error::Api(status)) if status.code == 409 => return Ok(false),
                Err(kube::Error::Api(status))
                    if not_bound_yet(&status) && waited < NOT_BOUND_GRACE =>
                {
                    let pause =
                        (waited + std::time::Duration::from_secs(1)).min(NOT_BOUND_GRACE - waited);
                    tracing::info!(pod = %name, namespace, "not allowed to create pods here yet (the controller binds a node plugin where a new volume's pods go); retrying");
                    tokio::time::sleep(pause).await;
                    waited += pause;
                }
                Err(e) => return Err(api_error(&format!("creating pod {namespace}/{name}"), e)),
            }
        }
    }

    /// Waits until `check` answers for pod `namespace/name`, the pod
    /// disappears, or the phase timeout passes (the pod's own, see
    /// [`timeout_of`](crate::pods::timeout_of), else `--phase-timeout`).
    /// `check` is asked on every change of the pod and once a second, for
    /// conditions that involve files. Reads the pod cache: no request,
    /// except one read every 10 s while the pod is not in the cache (it may
    /// be gone already).
    pub async fn wait<T>(
        &self,
        phase: Phase,
        namespace: &str,
        name: &str,
        check: impl FnMut(&Pod) -> Option<T>,
    ) -> Result<T, DriverError> {
        let api = self.api(namespace);
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
        self.cache()
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
        self.wait(phase, namespace, name, |pod| {
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

    /// Stops a pod that may keep running (a staging pod): asks for its
    /// deletion unless it was asked already, and waits until none of its
    /// containers runs, or it is gone. A finalizer may keep the object (a
    /// staging pod's keeps it until its volume is unstaged).
    pub async fn stop(&self, phase: Phase, pod: &Pod) -> Result<(), DriverError> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        if pod.metadata.deletion_timestamp.is_none() {
            match self
                .api(&namespace)
                .delete(&name, &Default::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(api_error(&format!("stopping pod {namespace}/{name}"), e)),
            }
        }
        let stopped = self
            .wait(phase, &namespace, &name, |pod| {
                let stopped = PodState::of(pod).is_terminated()
                    || pod
                        .status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .is_none_or(|statuses| {
                            statuses
                                .iter()
                                .all(|c| c.state.as_ref().is_none_or(|s| s.running.is_none()))
                        });
                stopped.then_some(())
            })
            .await;
        match stopped {
            Ok(()) | Err(DriverError::PodDeleted(_)) => Ok(()), // stopped, or gone already
            Err(e) => Err(e),
        }
    }

    /// Deletes a pod (gone already is fine) and waits until it is gone.
    pub async fn delete(&self, namespace: &str, name: &str) -> Result<(), DriverError> {
        match self
            .api(namespace)
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
        self.cache()
            .await?
            .wait_gone(namespace, name, self.timeout)
            .await
    }

    /// Removes `finalizer` from a pod, if it is there.
    pub async fn remove_finalizer(&self, pod: &Pod, finalizer: &str) -> Result<(), DriverError> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api = self.api(&namespace);
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
}
/// How long a pod creation refused by RBAC is retried: a node plugin is
/// bound to create pods in a namespace a template chose for a volume once
/// the controller has seen the volume, which kubelet may stage first.
const NOT_BOUND_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether `status` is RBAC's refusal to create a pod (not admission's,
/// such as Pod Security's, which no waiting mends).
fn not_bound_yet(status: &kube::core::Status) -> bool {
    status.code == 403 && status.message.contains("cannot create resource")
}
