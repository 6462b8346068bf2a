//! Talking to the API server: the PavProvisioner, `get_pvc`, running PaV
//! pods to completion by watch, deleting them, and events.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher::watch_object;
use kube::{Api, Client, Resource, ResourceExt};
use pav_templates::{CompiledProvisioner, PavProvisioner, Phase, PvcLookup};

use super::metrics::Metrics;
use super::state::{self, PodState};
use crate::pods::{LABEL_PROVISIONER, label_value};

/// How long a terminated pod may stay uncollected before its status alone
/// is used.
const COLLECT_GRACE: Duration = Duration::from_secs(30);

/// The API client and what every operation of one provisioner shares.
pub struct Cluster {
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
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("provisioner", &self.provisioner)
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A [`PvcLookup`] reading through the API server; blocks, so templates are
/// rendered on a blocking thread (see [`Cluster::render`]).
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

/// A kube error as a pav-sdk error: not found stays not found, the rest is
/// worth retrying.
pub fn api_error(what: &str, err: kube::Error) -> pav_sdk::Error {
    match &err {
        kube::Error::Api(status) if status.code == 404 => {
            pav_sdk::Error::NotFound(format!("{what}: not found"))
        }
        kube::Error::Api(status) if status.code == 403 => {
            pav_sdk::Error::FailedPrecondition(format!("{what}: forbidden: {}", status.message))
        }
        _ => pav_sdk::Error::Unavailable(format!("{what}: {err}")),
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

impl Cluster {
    /// A cluster handle for `provisioner`; events are reported as
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
        Cluster {
            client,
            provisioner,
            namespace,
            timeout,
            metrics,
            recorder,
        }
    }

    /// The PavProvisioner, compiled, and an owner reference to it for the
    /// pods (so deleting the provisioner garbage-collects them).
    pub async fn compiled(
        &self,
    ) -> pav_sdk::Result<(Arc<CompiledProvisioner>, Option<OwnerReference>)> {
        let api: Api<PavProvisioner> = Api::all(self.client.clone());
        let object = api
            .get(&self.provisioner)
            .await
            .map_err(|e| api_error(&format!("PavProvisioner {}", self.provisioner), e))?;
        let owner = object.owner_ref(&());
        let compiled = CompiledProvisioner::new(&object)
            .map_err(|problems| pav_sdk::Error::FailedPrecondition(problems.to_string()))?;
        Ok((Arc::new(compiled), owner))
    }

    /// The `get_pvc` answering from the API server.
    pub fn lookup(&self) -> Arc<dyn PvcLookup> {
        Arc::new(KubeLookup {
            client: self.client.clone(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// Renders templates on a blocking thread, where `get_pvc` may block.
    pub async fn render<T: Send + 'static>(
        render: impl FnOnce() -> pav_templates::Result<T> + Send + 'static,
    ) -> pav_sdk::Result<T> {
        tokio::task::spawn_blocking(render)
            .await
            .map_err(pav_sdk::Error::internal)?
            .map_err(|e| pav_sdk::Error::InvalidArgument(state::truncate(e.to_string())))
    }

    /// Adds what every pod of this provisioner carries besides
    /// [`build_pod`](crate::pods::build_pod): the owner reference, the
    /// default namespace, extra annotations and finalizers.
    pub fn decorate(
        &self,
        pod: &mut Pod,
        owner: Option<&OwnerReference>,
        template_namespace: bool,
        annotations: &[(&str, String)],
    ) {
        if !template_namespace {
            pod.metadata.namespace = Some(self.namespace.clone());
        }
        if let Some(owner) = owner {
            pod.metadata
                .owner_references
                .get_or_insert_with(Vec::new)
                .push(owner.clone());
        }
        let map = pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (key, value) in annotations {
            map.insert((*key).to_owned(), value.clone());
        }
    }

    /// Pods API of `namespace`.
    pub fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Pods of this provisioner (any namespace) matching extra `labels`.
    pub async fn list_pods(&self, labels: &[(&str, &str)]) -> pav_sdk::Result<Vec<Pod>> {
        let mut selector = format!("{LABEL_PROVISIONER}={}", label_value(&self.provisioner));
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
    pub async fn ensure_pod(&self, pod: &Pod) -> pav_sdk::Result<bool> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api = self.pods(&namespace);
        let existing = api
            .get_opt(&name)
            .await
            .map_err(|e| api_error(&format!("pod {namespace}/{name}"), e))?;
        if let Some(existing) = existing {
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

    /// Watches pod `namespace/name` until `check` answers, the pod
    /// disappears, or the phase timeout passes. `check` is also asked once a
    /// second, for conditions that involve files.
    pub async fn wait_pod<T>(
        &self,
        phase: Phase,
        namespace: &str,
        name: &str,
        mut check: impl FnMut(&Pod) -> Option<T>,
    ) -> pav_sdk::Result<T> {
        let started = tokio::time::Instant::now();
        let mut timeout = self.timeout;
        let mut deadline = started + timeout;
        let mut stream = pin!(watch_object(self.pods(namespace), name));
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut last: Option<Pod> = None;
        let mut seen = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    let state = last.as_ref().map(PodState::of);
                    return Err(pav_sdk::Error::Unavailable(state::pod_timeout(
                        phase, namespace, name, timeout, state.as_ref(),
                    )));
                }
                item = stream.next() => match item {
                    Some(Ok(pod)) => {
                        // The phase's own `timeout`, recorded on the pod.
                        if let Some(own) = pod.as_ref().and_then(crate::pods::timeout_of) {
                            timeout = own;
                            deadline = started + own;
                        }
                        last = pod;
                        seen = true;
                    }
                    Some(Err(e)) => {
                        tracing::warn!(pod = name, namespace, error = %e, "watching pod");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    None => return Err(pav_sdk::Error::Unavailable("pod watch ended".into())),
                },
                _ = tick.tick() => {}
            }
            if !seen {
                continue;
            }
            match &last {
                None => {
                    return Err(pav_sdk::Error::Aborted(format!(
                        "{phase} pod {namespace}/{name} was deleted before it finished"
                    )));
                }
                Some(pod) => {
                    if let Some(result) = check(pod) {
                        return Ok(result);
                    }
                }
            }
        }
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
    ) -> pav_sdk::Result<Finished> {
        let mut terminated_at: Option<Instant> = None;
        self.wait_pod(phase, namespace, name, |pod| {
            let state = PodState::of(pod);
            if !state.is_terminated() {
                return None;
            }
            let since = *terminated_at.get_or_insert_with(Instant::now);
            let done = !collected
                || state::Collected::of(pod).is_some()
                || since.elapsed() > COLLECT_GRACE;
            done.then(|| Finished {
                pod: pod.clone(),
                state,
            })
        })
        .await
    }

    /// Deletes a pod (gone already is fine) and waits until it is gone.
    pub async fn delete_pod(&self, namespace: &str, name: &str) -> pav_sdk::Result<()> {
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

    /// Waits until pod `namespace/name` no longer exists.
    pub async fn wait_gone(&self, namespace: &str, name: &str) -> pav_sdk::Result<()> {
        let gone = kube::runtime::wait::await_condition(
            self.pods(namespace),
            name,
            kube::runtime::wait::conditions::is_deleted(""),
        );
        match tokio::time::timeout(self.timeout, gone).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(pav_sdk::Error::Unavailable(format!(
                "waiting for pod {namespace}/{name} to be deleted: {e}"
            ))),
            Err(_) => Err(pav_sdk::Error::Unavailable(format!(
                "pod {namespace}/{name} was not deleted within {}s",
                self.timeout.as_secs()
            ))),
        }
    }

    /// Removes `finalizer` from a pod, if it is there.
    pub async fn remove_finalizer(&self, pod: &Pod, finalizer: &str) -> pav_sdk::Result<()> {
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

    /// Reports a failure as a Warning event on `regarding` (a PVC, PV or
    /// client pod), naming the phase and the pod in `message`.
    pub async fn warn(
        &self,
        regarding: &ObjectReference,
        phase: Phase,
        message: &str,
        pod: Option<ObjectReference>,
    ) {
        let reason = match phase {
            Phase::Validation => "ValidationFailed",
            Phase::Creation => "CreationFailed",
            Phase::Deletion => "DeletionFailed",
            Phase::Staging => "StagingFailed",
            Phase::Unstaging => "UnstagingFailed",
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            note: Some(state::truncate(message.to_owned())),
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
