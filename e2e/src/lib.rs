//! Shared helpers of the end-to-end suite: reaching the cluster (its tests
//! are `#[ignore = "needs a cluster"]`; `scripts/e2e` runs them); applying YAML;
//! waiting for conditions; reading events; and the leak check every
//! scenario ends with.
//!
//! The suite runs against `$KUBECONFIG` (set by `scripts/cluster-up`) with
//! pav installed from `pav manifests` and its image loaded into the node
//! (`scripts/e2e` does both). The tests run as root on the machine that
//! holds every node of the cluster ([`local_nodes`]), so they can read each
//! node's mount table and `/var/lib/pav/pods`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Debug;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ContainerStatus, Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

pub mod deleted_while_staged;
pub mod example_driver;
pub mod faults;
pub mod gate;
pub mod group_snapshots;
pub mod sparse_file;

/// Label on every pod PaV creates, holding its phase.
pub const LABEL_PHASE: &str = "pav.albertofaria.github.io/phase";
/// Label on every pod and object PaV creates for a provisioner.
pub const LABEL_PROVISIONER: &str = "pav.albertofaria.github.io/provisioner";
/// Namespace of pav's own objects and of PaV pods by default.
pub const PAV_NAMESPACE: &str = "pav";
/// Where each PaV pod's `/pav` lives on the node.
pub const PAV_PODS_DIR: &str = "/var/lib/pav/pods";
/// Field manager of everything the suite applies.
pub const FIELD_MANAGER: &str = "pav-e2e";

/// A client for the cluster named by `$KUBECONFIG`. Panics, saying why,
/// when there is none: every test that calls this is
/// `#[ignore = "needs a cluster"]` and run by `scripts/e2e`, which starts
/// from a running cluster.
pub async fn cluster() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!("KUBECONFIG is not set: run scripts/cluster-up, then scripts/e2e");
    }
    let client = Client::try_default()
        .await
        .unwrap_or_else(|err| panic!("no cluster client from $KUBECONFIG: {err}"));
    if let Err(err) = client.apiserver_version().await {
        panic!("the cluster of $KUBECONFIG does not answer: {err}");
    }
    client
}

/// Applies every document of a YAML stream (server-side apply, forced),
/// in order. Namespaced objects without a namespace go to `default`.
pub async fn apply(client: &Client, yaml: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let mut applied = Vec::new();
    for value in documents(yaml)? {
        let object: DynamicObject = serde_json::from_value(value)?;
        let (api, name) = dynamic_api(client, &object).await?;
        let done = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .with_context(|| format!("applying {name}"))?;
        applied.push(done);
    }
    Ok(applied)
}

/// The non-empty documents of a YAML stream as JSON, with `<<` merge keys
/// applied as kubectl applies them (examples/block-encryption and
/// examples/local-volumes share pod specs that way).
pub(crate) fn documents(yaml: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut found = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let mut value = <serde_yaml::Value as serde::Deserialize>::deserialize(document)?;
        if value.is_null() {
            continue;
        }
        value.apply_merge()?;
        found.push(serde_json::to_value(value)?);
    }
    Ok(found)
}

/// Deletes every object of a YAML stream (missing ones are fine), without
/// waiting.
pub async fn delete(client: &Client, yaml: &str) -> anyhow::Result<()> {
    for object in yaml_objects(yaml)? {
        delete_object(client, &object).await?;
    }
    Ok(())
}

/// The objects of a YAML stream, in order.
pub fn yaml_objects(yaml: &str) -> anyhow::Result<Vec<DynamicObject>> {
    documents(yaml)?
        .into_iter()
        .map(|value| Ok(serde_json::from_value(value)?))
        .collect()
}

/// Deletes one object (missing is fine), without waiting.
pub async fn delete_object(client: &Client, object: &DynamicObject) -> anyhow::Result<()> {
    let (api, name) = dynamic_api(client, object).await?;
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {name}")),
    }
}

async fn dynamic_api(
    client: &Client,
    object: &DynamicObject,
) -> anyhow::Result<(Api<DynamicObject>, String)> {
    let types = object
        .types
        .as_ref()
        .context("object without apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(types)?;
    let (resource, capabilities) = discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {gvk:?}"))?;
    let name = object.name_any();
    let api = match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.namespace().as_deref().unwrap_or("default"),
            &resource,
        ),
    };
    Ok((api, name))
}

/// The API of `kind` in `group`/v1 (a CRD's: VolumeSnapshot,
/// VolumeGroupSnapshotContent, ...), found by discovery: the objects of
/// `namespace` for a namespaced kind, all of them for a cluster-scoped one.
/// Panics when the cluster does not serve it.
pub async fn v1_api(
    client: &Client,
    namespace: &str,
    group: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    let (resource, capabilities) = discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("{group}/v1 {kind} is not served: {e}"));
    match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
    }
}

/// The VolumeSnapshot API of `namespace`.
pub async fn volume_snapshots(client: &Client, namespace: &str) -> Api<DynamicObject> {
    v1_api(
        client,
        namespace,
        "snapshot.storage.k8s.io",
        "VolumeSnapshot",
    )
    .await
}

/// Polls `check` every 500 ms until it returns `Some`, or fails after
/// `timeout` with `what` and the last answer's reason.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if start.elapsed() > timeout {
            match last_error {
                Some(e) => bail!("timed out after {timeout:?} waiting for {what}: {e:#}"),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until object `name` answers `ready`.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    ready: impl Fn(&K) -> bool,
) -> anyhow::Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    wait_until(&format!("{name}: {what}"), timeout, || async {
        Ok(api.get_opt(name).await?.filter(|o| ready(o)))
    })
    .await
}

/// Waits until object `name` no longer exists.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    wait_until(&format!("{name} to be deleted"), timeout, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// Deletes an object (missing is fine) and waits until it is gone.
pub async fn delete_and_wait<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("deleting {name}")),
    }
    wait_gone(api, name, timeout).await
}

/// A pod's phase (`Pending`, `Running`, `Succeeded`, `Failed`).
pub fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Running, every container ready, not being deleted.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod_phase(pod) == "Running"
        && !container_statuses(pod).is_empty()
        && container_statuses(pod).iter().all(|c| c.ready)
}

/// A claim's phase (`Pending`, `Bound`, `Lost`).
pub fn claim_phase(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The name of the volume a claim is bound to.
pub fn volume_name(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.spec.as_ref().and_then(|s| s.volume_name.clone())
}

/// Bytes of a whole-number quantity as the API server writes sizes
/// (`335544320`, `320Mi`, `36072068Ki`, `2G`).
pub fn quantity_bytes(quantity: &str) -> Option<u64> {
    const SUFFIXES: [(&str, u64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    let (digits, unit) = SUFFIXES
        .iter()
        .find_map(|(suffix, unit)| Some((quantity.strip_suffix(suffix)?, *unit)))
        .unwrap_or((quantity, 1));
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// A claim's size as its status reports it, in bytes.
pub fn status_capacity(claim: &PersistentVolumeClaim) -> Option<u64> {
    let quantity = claim.status.as_ref()?.capacity.as_ref()?.get("storage")?;
    quantity_bytes(&quantity.0)
}

/// Whether the controller's part of a claim's expansion is done and the
/// node's is pending (`FileSystemResizePending`, or the allocated size's
/// `NodeResizePending` of recoverable expansion).
pub fn node_resize_pending(claim: &PersistentVolumeClaim) -> bool {
    let Some(status) = claim.status.as_ref() else {
        return false;
    };
    let condition = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "FileSystemResizePending" && c.status == "True");
    let allocated = status
        .allocated_resource_statuses
        .as_ref()
        .and_then(|s| s.get("storage"))
        .is_some_and(|s| s == "NodeResizePending");
    condition || allocated
}

/// Whether external-resizer marked the claim's expansion infeasible
/// (`ControllerResizeInfeasible`: the driver answered that the size can
/// never be provided; the owner may lower the request).
pub fn resize_infeasible(claim: &PersistentVolumeClaim) -> bool {
    (claim.status.as_ref())
        .and_then(|s| s.allocated_resource_statuses.as_ref())
        .and_then(|s| s.get("storage"))
        .is_some_and(|s| s == "ControllerResizeInfeasible")
}

/// Sets claim `claim`'s storage request to `bytes`: how a user grows a
/// volume, or lowers a request that failed.
pub async fn request_size(
    claims: &Api<PersistentVolumeClaim>,
    claim: &str,
    bytes: u64,
) -> anyhow::Result<()> {
    let size =
        serde_json::json!({"spec": {"resources": {"requests": {"storage": bytes.to_string()}}}});
    claims
        .patch(claim, &PatchParams::default(), &Patch::Merge(&size))
        .await
        .with_context(|| format!("setting claim {claim}'s request to {bytes} bytes"))?;
    Ok(())
}

/// Asks claim `namespace/claim` for `bytes`, more than its driver can ever
/// provide, and waits until an event on the claim contains every one of
/// `needles` and external-resizer marks the expansion infeasible.
pub async fn request_infeasible(
    client: &Client,
    namespace: &str,
    claim: &str,
    bytes: u64,
    needles: &[&str],
) -> anyhow::Result<PersistentVolumeClaim> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    request_size(&claims, claim, bytes).await?;
    wait_event(client, namespace, claim, needles, STEP).await?;
    wait_for(
        &claims,
        claim,
        STEP,
        "ControllerResizeInfeasible",
        resize_infeasible,
    )
    .await
}

/// Grows claim `namespace/claim` to `bytes` while pod `pod` uses it, and
/// waits until the claim reports that size: the driver's controller, then
/// the kubelet's node expansion, are done.
///
/// The kubelet grows a mounted volume when it next syncs the pod, which
/// is about every minute (its `syncFrequency`) unless the pod changes. So
/// once the controller's part is done, an annotation on the pod makes
/// the kubelet sync it now, as any change to the pod would: the wait is
/// on the driver, not on the kubelet's period.
pub async fn grow_in_use(
    client: &Client,
    namespace: &str,
    claim: &str,
    pod: &str,
    bytes: u64,
) -> anyhow::Result<PersistentVolumeClaim> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    request_size(&claims, claim, bytes).await?;
    wait_for(
        &claims,
        claim,
        STEP,
        "its node expansion to be pending",
        |c| node_resize_pending(c) || status_capacity(c) == Some(bytes),
    )
    .await?;
    let nudge = serde_json::json!({"metadata": {"annotations": {
        "e2e.pav.albertofaria.github.io/grown-to": bytes.to_string()
    }}});
    Api::<Pod>::namespaced(client.clone(), namespace)
        .patch(pod, &PatchParams::default(), &Patch::Merge(&nudge))
        .await
        .with_context(|| format!("annotating pod {namespace}/{pod}"))?;
    wait_for(&claims, claim, STEP, "its new size", |c| {
        status_capacity(c) == Some(bytes)
    })
    .await
}

/// The log of a pod's (first) container.
pub async fn logs(client: &Client, namespace: &str, name: &str) -> anyhow::Result<String> {
    Ok(Api::<Pod>::namespaced(client.clone(), namespace)
        .logs(name, &LogParams::default())
        .await?)
}

/// Events (core/v1 view, which includes events.k8s.io ones) about the
/// object `name` in `namespace` (cluster-scoped objects: `default`).
pub async fn events(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await?
        .items)
}

/// `reason: message` lines of the events about `name`, for asserts and
/// failure messages.
pub async fn event_lines(client: &Client, namespace: &str, name: &str) -> Vec<String> {
    match events(client, namespace, name).await {
        Ok(events) => events
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or(""),
                    e.message.as_deref().unwrap_or("")
                )
            })
            .collect(),
        Err(e) => vec![format!("(cannot read events: {e})")],
    }
}

/// Waits for an event about `name` whose `reason: message` contains every
/// one of `needles`; returns that line.
pub async fn wait_event(
    client: &Client,
    namespace: &str,
    name: &str,
    needles: &[&str],
    timeout: Duration,
) -> anyhow::Result<String> {
    let found = wait_until(
        &format!("an event on {namespace}/{name} containing {needles:?}"),
        timeout,
        || async {
            Ok(event_lines(client, namespace, name)
                .await
                .into_iter()
                .find(|line| needles.iter().all(|n| line.contains(n))))
        },
    )
    .await;
    match found {
        Ok(line) => Ok(line),
        Err(e) => bail!(
            "{e}; events seen: {:#?}",
            event_lines(client, namespace, name).await
        ),
    }
}

/// The statuses of `pod`'s containers (none before the kubelet reports).
pub fn container_statuses(pod: &Pod) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default()
}

/// The last `most` lines of the file at `path` that contain `needle`, read
/// line by line so a large log costs no more memory than those lines
/// (none if it cannot be read).
fn last_lines_containing(path: &std::path::Path, needle: &str, most: usize) -> VecDeque<String> {
    let mut last = VecDeque::with_capacity(most);
    let Ok(file) = std::fs::File::open(path) else {
        return last;
    };
    for line in BufReader::new(file).split(b'\n').map_while(Result::ok) {
        let line = String::from_utf8_lossy(&line);
        if line.contains(needle) {
            if last.len() == most {
                last.pop_front();
            }
            last.push_back(line.into_owned());
        }
    }
    last
}

/// A line per `kind` object in `namespace`: its name, `state` and its
/// events (for [`diagnosis`]).
async fn with_events<K>(
    client: &Client,
    namespace: &str,
    kind: &str,
    state: impl Fn(&K) -> String,
) -> String
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(e) => return format!("(cannot list {kind}s: {e})\n"),
    };
    let mut out = String::new();
    for object in list {
        let name = object.name_any();
        out += &format!(
            "{kind} {namespace}/{name}: {}; events: {:#?}\n",
            state(&object),
            event_lines(client, namespace, &name).await
        );
    }
    out
}

/// What a failed wait in scenario `namespace` of `provisioner` prints so
/// the failure can be told apart after the cluster is gone: the claims,
/// pods and their events in `namespace`, and pav's own pods of
/// `provisioner` (restarts, last termination, each container's last log
/// lines, and those of its previous run), and the last lines about
/// `namespace` in each cluster component's log.
pub async fn diagnosis(client: &Client, namespace: &str, provisioner: &str) -> String {
    let mut out = String::new();
    let logs_dir = cluster_state_dir().join("logs");
    let mut component_logs: Vec<PathBuf> = std::fs::read_dir(&logs_dir)
        .map(|dir| dir.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    component_logs.sort();
    for path in component_logs {
        let last = last_lines_containing(&path, namespace, 20);
        if !last.is_empty() {
            out += &format!(
                "--- {} about {namespace}:\n{}\n",
                path.display(),
                Vec::from(last).join("\n")
            );
        }
    }
    out += &with_events(
        client,
        namespace,
        "claim",
        |claim: &PersistentVolumeClaim| {
            format!("{} volume {:?}", claim_phase(claim), volume_name(claim))
        },
    )
    .await;
    out += &with_events(client, namespace, "pod", |pod: &Pod| {
        format!(
            "{} on {:?}",
            pod_phase(pod),
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
        )
    })
    .await;
    // The driver's pods: the provisioner's label without a PaV phase.
    let own: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let selector = format!("{LABEL_PROVISIONER}={provisioner},!{LABEL_PHASE}");
    let list = match own.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(e) => return out + &format!("(cannot list pav's pods: {e})\n"),
    };
    for pod in &list {
        let name = pod.name_any();
        for status in container_statuses(pod) {
            let last = status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| {
                    format!(
                        "{:?} (exit {}) at {:?}",
                        t.reason, t.exit_code, t.finished_at
                    )
                });
            out += &format!(
                "pav pod {name} container {}: {} restarts, last terminated {last:?}\n",
                status.name, status.restart_count
            );
            let runs: &[bool] = if status.restart_count > 0 {
                &[true, false]
            } else {
                &[false]
            };
            for &previous in runs {
                let params = LogParams {
                    container: Some(status.name.clone()),
                    previous,
                    tail_lines: Some(40),
                    timestamps: true,
                    ..LogParams::default()
                };
                let text = own
                    .logs(&name, &params)
                    .await
                    .unwrap_or_else(|e| format!("(cannot read the log: {e})"));
                out += &format!(
                    "--- log of {name}/{} (previous run: {previous}):\n{text}\n",
                    status.name
                );
            }
        }
    }
    out
}

/// PaV pods (those with a phase label) of `provisioner`, any namespace.
pub async fn pav_pods(client: &Client, provisioner: &str) -> anyhow::Result<Vec<Pod>> {
    pods_selected(
        client,
        &format!("{LABEL_PROVISIONER}={provisioner},{LABEL_PHASE}"),
    )
    .await
}

/// Pods of any namespace that `selector` selects.
async fn pods_selected(client: &Client, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items)
}

/// Waits until no PaV pod of `provisioner` exists: volumes are unstaged
/// and cleaned up. Delete the provisioner only then: its node plugin is
/// what unstages (the provisioner's finalizer waits for volumes and
/// claims, not for staged volumes of terminated client pods).
pub async fn wait_no_pav_pods(
    client: &Client,
    provisioner: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_none_selected(
        client,
        &format!("no PaV pods of {provisioner}"),
        &format!("{LABEL_PROVISIONER}={provisioner},{LABEL_PHASE}"),
        timeout,
    )
    .await
}

/// Waits until no pod of `provisioner`'s `phase` exists: with `staging`,
/// until kubelet has unstaged the volumes of the pods that are gone (it
/// does so after their deletion, not before).
pub async fn wait_no_pav_pods_of_phase(
    client: &Client,
    provisioner: &str,
    phase: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_none_selected(
        client,
        &format!("no {phase} pods of {provisioner}"),
        &format!("{LABEL_PROVISIONER}={provisioner},{LABEL_PHASE}={phase}"),
        timeout,
    )
    .await
}

async fn wait_none_selected(
    client: &Client,
    what: &str,
    selector: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_until(what, timeout, || async {
        let pods = pods_selected(client, selector).await?;
        if pods.is_empty() {
            Ok(Some(()))
        } else {
            bail!(
                "left: {:?}",
                pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
            )
        }
    })
    .await
}

/// Deletes the running pods of `provisioner`'s pav `component`
/// (`csi-controller`, `csi-node`) at once and waits until a new one is
/// ready.
pub async fn kill_component(client: &Client, provisioner: &str, component: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let selector = ListParams::default().labels(&format!(
        "{LABEL_PROVISIONER}={provisioner},app.kubernetes.io/component={component}"
    ));
    let old: Vec<String> = (pods.list(&selector).await.unwrap().items)
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(!old.is_empty(), "no {component} pod of {provisioner}");
    for pod in &old {
        pods.delete(pod, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
        eprintln!("killed {component} pod {pod}");
    }
    wait_until(&format!("a new {component} pod ready"), STEP, || async {
        let ready = (pods.list(&selector).await?.items)
            .into_iter()
            .any(|p| !old.contains(&p.name_any()) && pod_ready(&p));
        Ok(ready.then_some(()))
    })
    .await
    .unwrap();
}

/// PersistentVolumes whose `spec.csi.driver` is `provisioner`.
pub async fn volumes_of(client: &Client, provisioner: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|c| c.driver == provisioner)
        })
        .map(|pv| pv.name_any())
        .collect())
}

/// The pav binary `scripts/e2e-image` built
/// (`$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/pav`), or
/// `$PAV_BINARY`.
pub fn pav_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("PAV_BINARY") {
        return binary.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("x86_64-unknown-linux-gnu/release/pav")
}

/// Where the test cluster (`scripts/cluster-up`) keeps its state.
pub fn cluster_state_dir() -> PathBuf {
    std::env::var_os("PAV_CLUSTER_STATE")
        .map_or_else(|| PathBuf::from("/var/run/pav-cluster"), PathBuf::from)
}

/// A node of the test cluster as this machine holds it: node 1
/// (`pav-node`) is this host; node K >= 2 (`pav-node-K`,
/// `scripts/cluster/node`) has a mount namespace of its own, in which the
/// kubelet dir and `/var/lib/pav` are its own directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalNode {
    /// The Node's name.
    pub name: String,
    /// The mount table as the node's processes see it.
    pub mountinfo: PathBuf,
    /// The node's `/var/lib/pav/pods`, as this host sees it.
    pub pods_dir: PathBuf,
    /// The node's root directory as this host sees it (`/`, or a
    /// `/proc/PID/root` of a process in the node's mount namespace), under
    /// which the node's own paths (kubelet's files) can be read.
    pub root: PathBuf,
}

/// The node on this host's own namespaces.
pub const FIRST_NODE: &str = "pav-node";

/// Every node of the test cluster, node 1 first.
pub fn local_nodes() -> anyhow::Result<Vec<LocalNode>> {
    let mut nodes = vec![LocalNode {
        name: FIRST_NODE.to_owned(),
        mountinfo: PathBuf::from("/proc/self/mountinfo"),
        pods_dir: PathBuf::from(PAV_PODS_DIR),
        root: PathBuf::from("/"),
    }];
    let extra = cluster_state_dir().join("nodes");
    if extra.exists() {
        let mut numbers: Vec<u32> = std::fs::read_dir(&extra)?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        numbers.sort_unstable();
        for k in numbers {
            let holder = cluster_state_dir().join(format!("pids/node-{k}-holder.pid"));
            let pid = std::fs::read_to_string(&holder)
                .with_context(|| format!("node {k}: {}", holder.display()))?;
            let pid = pid.trim();
            nodes.push(LocalNode {
                name: format!("{FIRST_NODE}-{k}"),
                mountinfo: PathBuf::from(format!("/proc/{pid}/mountinfo")),
                pods_dir: PathBuf::from(format!("/var/lib/pav-cluster-nodes/{k}/pav/pods")),
                root: PathBuf::from(format!("/proc/{pid}/root")),
            });
        }
    }
    Ok(nodes)
}

/// The names of the nodes a scenario needs three of: this host's and two
/// more (`scripts/cluster-up --nodes 3`).
pub fn three_nodes() -> Vec<String> {
    let nodes: Vec<String> = local_nodes()
        .expect("reading the cluster's nodes")
        .into_iter()
        .map(|node| node.name)
        .collect();
    assert!(
        nodes.len() >= 3,
        "these scenarios need 3 nodes, the cluster has {nodes:?}: run scripts/cluster-up --nodes 3"
    );
    nodes
}

/// Every mount point of `node`, as a path inside the node.
pub fn mount_points_of(node: &LocalNode) -> anyhow::Result<Vec<String>> {
    let table = std::fs::read_to_string(&node.mountinfo)
        .with_context(|| format!("{}: {}", node.name, node.mountinfo.display()))?;
    Ok(table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(str::to_owned)
        .collect())
}

/// Mount points of `node` that belong to CSI volumes of client pods
/// (published, or block volumes' global map paths) or to PaV pods' `/pav`
/// directories, as paths inside the node.
pub fn pav_mounts_of(node: &LocalNode) -> anyhow::Result<Vec<String>> {
    Ok(mount_points_of(node)?
        .into_iter()
        .filter(|p| {
            (p.starts_with("/var/lib/kubelet/pods/")
                && (p.contains("/volumes/kubernetes.io~csi/") || p.contains("/volumeDevices/")))
                || p.starts_with("/var/lib/kubelet/plugins/kubernetes.io/csi/")
                || p.starts_with(&format!("{PAV_PODS_DIR}/"))
        })
        .collect())
}

/// Directories left under `node`'s `/var/lib/pav/pods`.
pub fn pav_dirs_of(node: &LocalNode) -> anyhow::Result<Vec<String>> {
    if !node.pods_dir.exists() {
        return Ok(Vec::new());
    }
    Ok(std::fs::read_dir(&node.pods_dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?)
}

/// Whose a mount or a PaV pod's directory on a node is. Scenarios run side
/// by side on one cluster (scripts/e2e's lanes), so each leak check looks
/// only at what is its own; what nothing attributes is left to the suite's
/// last check, [`Leaks::anything`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    /// A CSI driver (a PaV provisioner's driver has its name).
    Driver(String),
    /// Nothing tells any more: kubelet's record and the objects are gone.
    Unknown,
}

/// Names of the PaV pods the [`PodObserver`]s of this process saw, by
/// provisioner: a pod's directory outlives the pod, and only the pod's
/// labels say whose it is.
static SEEN_PAV_PODS: Mutex<BTreeMap<String, BTreeSet<String>>> = Mutex::new(BTreeMap::new());

/// Where kubelet keeps the CSI plugin's global mounts and block volumes'
/// records on a node.
const KUBELET_CSI_PLUGINS: &str = "/var/lib/kubelet/plugins/kubernetes.io/csi/";

/// What tells whose a mount or directory is, read once per leak check.
struct Owners {
    /// Driver of each PersistentVolume that still exists.
    volumes: BTreeMap<String, String>,
    /// Provisioner of each PaV pod that still exists.
    pav_pods: BTreeMap<String, String>,
}

impl Owners {
    async fn read(client: &Client) -> anyhow::Result<Owners> {
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let volumes = pvs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|pv| {
                let driver = pv.spec.as_ref()?.csi.as_ref()?.driver.clone();
                Some((pv.name_any(), driver))
            })
            .collect();
        let pods: Api<Pod> = Api::all(client.clone());
        let pav_pods = pods
            .list(&ListParams::default().labels(&format!("{LABEL_PROVISIONER},{LABEL_PHASE}")))
            .await?
            .items
            .into_iter()
            .filter_map(|pod| Some((pod.name_any(), pod.labels().get(LABEL_PROVISIONER)?.clone())))
            .collect();
        Ok(Owners { volumes, pav_pods })
    }

    /// Whose the PaV pod directory `name` (under `/var/lib/pav/pods`) is.
    fn of_pav_pod(&self, name: &str) -> Owner {
        if let Some(provisioner) = self.pav_pods.get(name) {
            return Owner::Driver(provisioner.clone());
        }
        let seen = SEEN_PAV_PODS.lock().expect("not poisoned");
        seen.iter()
            .find(|(_, names)| names.contains(name))
            .map_or(Owner::Unknown, |(provisioner, _)| {
                Owner::Driver(provisioner.clone())
            })
    }

    /// Whose the mount at `path` (inside `node`) is: a PaV pod's, a
    /// driver's global mount, or a volume's (kubelet's `vol_data.json`
    /// names its driver from before the mount until after the unmount).
    fn of_mount(&self, node: &LocalNode, path: &str) -> Owner {
        if let Some(rest) = path.strip_prefix(&format!("{PAV_PODS_DIR}/")) {
            return self.of_pav_pod(rest.split('/').next().unwrap_or_default());
        }
        if let Some(rest) = path.strip_prefix(KUBELET_CSI_PLUGINS) {
            let mut parts = rest.split('/');
            return match parts.next() {
                // volumeDevices/NAME/..., volumeDevices/staging/NAME,
                // volumeDevices/publish/NAME/POD
                Some("volumeDevices") => {
                    let name = match parts.next() {
                        Some("staging" | "publish") => parts.next(),
                        name => name,
                    };
                    self.of_volume(node, name.unwrap_or_default())
                }
                // DRIVER/HASH/globalmount
                Some(driver) if !driver.is_empty() => Owner::Driver(driver.to_owned()),
                _ => Owner::Unknown,
            };
        }
        // pods/UID/volumes/kubernetes.io~csi/NAME/mount (a filesystem,
        // whose record is beside the mount) or
        // pods/UID/volumeDevices/kubernetes.io~csi/NAME (a block volume).
        if let Some((dir, rest)) = path.split_once("/kubernetes.io~csi/") {
            let name = rest.split('/').next().unwrap_or_default();
            if dir.ends_with("/volumes") {
                let record = format!("{dir}/kubernetes.io~csi/{name}/vol_data.json");
                if let Some(driver) = recorded_driver(node, &record) {
                    return Owner::Driver(driver);
                }
            }
            return self.of_volume(node, name);
        }
        Owner::Unknown
    }

    /// Whose volume `name` (a PersistentVolume's name, or an inline
    /// volume's) is, from kubelet's block-volume record or the
    /// PersistentVolume.
    fn of_volume(&self, node: &LocalNode, name: &str) -> Owner {
        let record = format!("{KUBELET_CSI_PLUGINS}volumeDevices/{name}/data/vol_data.json");
        recorded_driver(node, &record)
            .or_else(|| self.volumes.get(name).cloned())
            .map_or(Owner::Unknown, Owner::Driver)
    }
}

/// The `driverName` of kubelet's volume record at `record` (a path inside
/// `node`), if it is there.
fn recorded_driver(node: &LocalNode, record: &str) -> Option<String> {
    let text = std::fs::read_to_string(node.root.join(record.trim_start_matches('/'))).ok()?;
    let record: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(record.get("driverName")?.as_str()?.to_owned())
}

/// Attached loop devices whose backing file (`/sys/block/loopN/loop/backing_file`,
/// which the kernel marks `FILE (deleted)`) `matching` accepts, as
/// `/dev/loopN: FILE`, sorted. The path is the attaching process's view.
pub fn loop_devices(matching: impl Fn(&str) -> bool) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/sys/block")? {
        let entry = entry?;
        let Ok(backing) = std::fs::read_to_string(entry.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = backing.trim_end();
        if matching(backing) {
            found.push(format!(
                "/dev/{}: {backing}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found.sort();
    Ok(found)
}

/// Loop devices whose backing file was deleted: each holds a deleted
/// volume image's blocks until someone detaches it.
pub fn loop_devices_of_deleted_files() -> anyhow::Result<Vec<String>> {
    loop_devices(|backing| backing.ends_with(" (deleted)"))
}

/// What a scenario may leave behind, found now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leaks {
    /// PaV pods (`namespace/name phase`).
    pub pods: Vec<String>,
    /// PersistentVolumes.
    pub volumes: Vec<String>,
    /// Mounts of CSI volumes or under `/var/lib/pav/pods`, on any node
    /// (`node: path`).
    pub mounts: Vec<String>,
    /// Directories under `/var/lib/pav/pods`, on any node (`node: name`).
    pub dirs: Vec<String>,
    /// Loop devices of deleted files ([`loop_devices_of_deleted_files`]);
    /// only [`Leaks::anything`] looks, as nothing says whose they were.
    pub deleted_loop_devices: Vec<String>,
}

impl Leaks {
    /// Everything the scenario of `provisioner` (a PaV provisioner, or a
    /// CSI driver's name) left behind: its PaV pods and PersistentVolumes,
    /// and the mounts and PaV pod directories that are its own (`Owner`).
    pub async fn find(client: &Client, provisioner: &str) -> anyhow::Result<Leaks> {
        let ours = Owner::Driver(provisioner.to_owned());
        Leaks::gather(client, Some(provisioner), |owner| *owner == ours).await
    }

    /// Everything any scenario left behind, whoever's: the suite's last
    /// check, after every lane has finished (e2e/tests/leftovers.rs).
    pub async fn anything(client: &Client) -> anyhow::Result<Leaks> {
        let mut leaks = Leaks::gather(client, None, |_| true).await?;
        leaks.deleted_loop_devices = loop_devices_of_deleted_files()?;
        Ok(leaks)
    }

    async fn gather(
        client: &Client,
        provisioner: Option<&str>,
        counts: impl Fn(&Owner) -> bool,
    ) -> anyhow::Result<Leaks> {
        let pods: Api<Pod> = Api::all(client.clone());
        let selector = match provisioner {
            Some(provisioner) => format!("{LABEL_PROVISIONER}={provisioner},{LABEL_PHASE}"),
            None => LABEL_PHASE.to_owned(),
        };
        let pods = pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .map(|p| {
                format!(
                    "{}/{} {} {}",
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                    p.labels().get(LABEL_PHASE).cloned().unwrap_or_default(),
                    pod_phase(p)
                )
            })
            .collect();
        let owners = Owners::read(client).await?;
        let volumes = owners
            .volumes
            .iter()
            .filter(|(_, driver)| provisioner.is_none_or(|p| p == driver.as_str()))
            .map(|(name, _)| name.clone())
            .collect();
        let (mut mounts, mut dirs) = (Vec::new(), Vec::new());
        for node in local_nodes()? {
            let on_node = |path: &String| format!("{}: {path}", node.name);
            mounts.extend(
                pav_mounts_of(&node)?
                    .iter()
                    .filter(|path| counts(&owners.of_mount(&node, path)))
                    .map(on_node),
            );
            dirs.extend(
                pav_dirs_of(&node)?
                    .iter()
                    .filter(|name| counts(&owners.of_pav_pod(name)))
                    .map(on_node),
            );
        }
        Ok(Leaks {
            pods,
            volumes,
            mounts,
            dirs,
            deleted_loop_devices: Vec::new(),
        })
    }

    /// True when nothing is left.
    pub fn is_empty(&self) -> bool {
        *self == Leaks::default()
    }
}

/// Mounts of node 1 that are `driver`'s ([`pav_mounts_of`], attributed as
/// the leak check does): what a scenario may assert about its own volumes
/// while other scenarios mount theirs.
pub async fn mounts_of_driver(client: &Client, driver: &str) -> anyhow::Result<Vec<String>> {
    let owners = Owners::read(client).await?;
    let node = &local_nodes()?[0];
    let ours = Owner::Driver(driver.to_owned());
    Ok(pav_mounts_of(node)?
        .into_iter()
        .filter(|path| owners.of_mount(node, path) == ours)
        .collect())
}

/// The leak check every scenario ends with: nothing of `provisioner` left
/// ([`Leaks::find`]). Waits up to `timeout` for asynchronous cleanup to
/// finish.
pub async fn assert_no_leaks(client: &Client, provisioner: &str, timeout: Duration) {
    wait_no_leaks(provisioner, timeout, || Leaks::find(client, provisioner)).await;
}

/// Waits until `find` finds nothing, or panics after `timeout` with what
/// it found last.
pub async fn wait_no_leaks<F, Fut>(what: &str, timeout: Duration, find: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<Leaks>>,
{
    let start = Instant::now();
    loop {
        let leaks = find().await.expect("reading the cluster and node state");
        if leaks.is_empty() {
            eprintln!(
                "leak check: nothing left of {what} ({:.1}s)",
                start.elapsed().as_secs_f64()
            );
            return;
        }
        if start.elapsed() > timeout {
            panic!("leak check: {what} left {leaks:#?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Creates namespace `name` (fine if it exists) for a scenario's claims
/// and client pods, and waits for its `default` ServiceAccount, without
/// which the API server refuses the client pods. kube-controller-manager
/// creates it, normally within a second; after the fault tests restart
/// the API server its watches have lagged for minutes (in a CI run the
/// next scenario's client pod was refused: no `default` yet), hence the
/// long timeout.
pub async fn namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if let Some(ns) = api.get_opt(name).await?
        && ns.metadata.deletion_timestamp.is_some()
    {
        wait_gone(&api, name, Duration::from_secs(120)).await?;
    }
    apply(
        client,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{ name: {name} }}\n"),
    )
    .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_for(
        &accounts,
        "default",
        Duration::from_secs(600),
        "made by kube-controller-manager",
        |_| true,
    )
    .await?;
    Ok(())
}

/// Removes what an earlier, failed run of a scenario left: client pods and
/// claims in `namespace`, then the PavProvisioner `provisioner` and the
/// StorageClasses naming it, waiting until they are gone; and the events of
/// `namespace` and of the provisioner.
pub async fn reset(client: &Client, namespace: &str, provisioner: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for pod in pods.list(&ListParams::default()).await?.items {
        delete_and_wait(&pods, &pod.name_any(), Duration::from_secs(180)).await?;
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    for claim in claims.list(&ListParams::default()).await?.items {
        delete_and_wait(&claims, &claim.name_any(), Duration::from_secs(180)).await?;
    }
    let classes: Api<StorageClass> = Api::all(client.clone());
    for class in classes.list(&ListParams::default()).await?.items {
        if class.provisioner == provisioner {
            delete_and_wait(&classes, &class.name_any(), Duration::from_secs(30)).await?;
        }
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for pv in volumes_of(client, provisioner).await? {
        delete_and_wait(&pvs, &pv, Duration::from_secs(180)).await?;
    }
    delete_provisioner(client, provisioner, Duration::from_secs(180)).await?;
    // Old events would satisfy the next run's waits for events.
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    events
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let cluster_events: Api<Event> = Api::namespaced(client.clone(), "default");
    cluster_events
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().fields(&format!("involvedObject.name={provisioner}")),
        )
        .await?;
    Ok(())
}

/// The usual start of a scenario: removes what an earlier run left
/// ([`reset`]), creates `namespace`, starts observing the PaV pods of
/// `provisioner`, applies `objects` (the PavProvisioner and whatever goes
/// with it) and waits until the provisioner is ready.
pub async fn start_scenario(
    client: &Client,
    namespace_name: &str,
    provisioner: &str,
    objects: &str,
) -> PodObserver {
    reset(client, namespace_name, provisioner).await.unwrap();
    namespace(client, namespace_name).await.unwrap();
    let observer = PodObserver::start(client, provisioner);
    apply(client, objects).await.unwrap();
    wait_provisioner_ready(client, provisioner, STEP)
        .await
        .unwrap();
    observer
}

/// The PavProvisioner API (dynamic: the suite does not depend on pav's crates).
pub async fn provisioners(client: &Client) -> anyhow::Result<Api<DynamicObject>> {
    let gvk = GroupVersionKind::gvk("pav.albertofaria.github.io", "v1alpha1", "PavProvisioner");
    let (resource, _) = discovery::pinned_kind(client, &gvk).await?;
    Ok(Api::all_with(client.clone(), &resource))
}

/// Deletes a PavProvisioner and waits until it is gone.
pub async fn delete_provisioner(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api = provisioners(client).await?;
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    wait_until(
        &format!("PavProvisioner {name} to be deleted"),
        timeout,
        || {
            let api = api.clone();
            async move { Ok(api.get_opt(name).await?.is_none().then_some(())) }
        },
    )
    .await
}

/// Waits until PavProvisioner `name` reports `Ready=True` (driver deployed
/// and available on every node) for its current generation, and the node
/// plugin has registered with the kubelet (CSINode lists the driver).
pub async fn wait_provisioner_ready(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api = provisioners(client).await?;
    let start = Instant::now();
    wait_until(&format!("PavProvisioner {name} Ready"), timeout, || {
        let api = api.clone();
        async move {
            let Some(p) = api.get_opt(name).await? else {
                return Ok(None);
            };
            let generation = p.metadata.generation;
            let status = &p.data["status"];
            let observed = status["observedGeneration"].as_i64();
            let ready = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if !ready || observed != generation {
                bail!("status: {status}");
            }
            Ok(Some(()))
        }
    })
    .await?;
    wait_driver_registered(client, name, timeout.saturating_sub(start.elapsed())).await
}

/// Waits until every node's kubelet lists CSI driver `driver` in its
/// CSINode (its node-driver-registrar has registered the node plugin).
pub async fn wait_driver_registered(
    client: &Client,
    driver: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let csinodes: Api<k8s_openapi::api::storage::v1::CSINode> = Api::all(client.clone());
    wait_until(
        &format!("CSI driver {driver} registered on every node"),
        timeout,
        || async {
            let nodes = csinodes.list(&ListParams::default()).await?.items;
            let registered = !nodes.is_empty()
                && nodes
                    .iter()
                    .all(|n| n.spec.drivers.iter().any(|d| d.name == driver));
            Ok(registered.then_some(()))
        },
    )
    .await
}

/// The usual timeout of one step (a pod run, a claim binding, ...).
pub const STEP: Duration = Duration::from_secs(120);

/// Every PaV pod of a provisioner seen since [`PodObserver::start`], with
/// the phases (`Pending`, `Running`, `Succeeded`, ...) it went through.
#[derive(Debug, Clone)]
pub struct PodObserver {
    provisioner: String,
    seen: Arc<Mutex<Vec<SeenPod>>>,
    pods: Api<Pod>,
    selector: String,
}

/// A failed watch is retried after a second, always: it does not spin
/// while the API server is away (the fault tests restart it on a
/// two-core machine), and it is back within a second of the API server,
/// where kube's exponential default (up to 30 s) could miss a phase's pod
/// that starts and ends in the meantime.
struct EverySecond;

impl Iterator for EverySecond {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_secs(1))
    }
}

impl kube::runtime::utils::Backoff for EverySecond {
    fn reset(&mut self) {}
}

/// One state of a PaV pod seen by a [`PodObserver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenPod {
    /// Pod name. PaV derives it from provisioner, volume and node, so a
    /// pod PaV starts again has the same name and a new `uid`.
    pub name: String,
    /// Pod namespace (the template's, else the pav namespace).
    pub namespace: String,
    /// Pod UID: one per pod PaV started.
    pub uid: String,
    /// PaV phase label (`creation`, `staging`, ...).
    pub pav_phase: String,
    /// Pod phase.
    pub pod_phase: String,
}

impl PodObserver {
    /// Starts watching the PaV pods of `provisioner`.
    pub fn start(client: &Client, provisioner: &str) -> PodObserver {
        let observer = PodObserver {
            provisioner: provisioner.to_owned(),
            seen: Arc::new(Mutex::new(Vec::new())),
            pods: Api::all(client.clone()),
            selector: format!("{LABEL_PROVISIONER}={provisioner},{LABEL_PHASE}"),
        };
        let config = watcher::Config::default().labels(&observer.selector);
        let (api, watching) = (observer.pods.clone(), observer.clone());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config).backoff(EverySecond));
            while let Some(event) = stream.next().await {
                // A deleted pod's last state counts as seen: PaV deletes a
                // finished pod soon after it finishes.
                if let Ok(
                    watcher::Event::Apply(pod)
                    | watcher::Event::InitApply(pod)
                    | watcher::Event::Delete(pod),
                ) = event
                {
                    watching.record(&pod);
                }
            }
        });
        observer
    }

    fn record(&self, pod: &Pod) {
        let entry = SeenPod {
            name: pod.name_any(),
            namespace: pod.namespace().unwrap_or_default(),
            uid: pod.uid().unwrap_or_default(),
            pav_phase: pod.labels().get(LABEL_PHASE).cloned().unwrap_or_default(),
            pod_phase: pod_phase(pod).to_owned(),
        };
        SEEN_PAV_PODS
            .lock()
            .expect("not poisoned")
            .entry(self.provisioner.clone())
            .or_default()
            .insert(entry.name.clone());
        let mut seen = self.seen.lock().expect("not poisoned");
        if !seen.contains(&entry) {
            seen.push(entry);
        }
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<SeenPod> {
        self.seen.lock().expect("not poisoned").clone()
    }

    /// Names of the pods of `pav_phase` seen in pod phase `pod_phase`.
    pub fn pods(&self, pav_phase: &str, pod_phase: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .seen()
            .into_iter()
            .filter(|s| s.pav_phase == pav_phase && s.pod_phase == pod_phase)
            .map(|s| s.name)
            .collect();
        names.dedup();
        names
    }

    /// How many pods of `pav_phase` were seen (distinct UIDs): more than
    /// one means PaV started the phase's pod again. Unlike a pod's states,
    /// which a watch can miss while the API server restarts (the re-list
    /// shows only the present), a pod PaV starts is seen, unless it also
    /// finishes and goes while the API server is away.
    pub fn runs(&self, pav_phase: &str) -> usize {
        self.seen()
            .into_iter()
            .filter(|s| s.pav_phase == pav_phase)
            .map(|s| s.uid)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }

    /// Panics unless a pod of `pav_phase` was seen succeeding.
    pub fn assert_succeeded(&self, pav_phase: &str) {
        assert!(
            !self.pods(pav_phase, "Succeeded").is_empty(),
            "no {pav_phase} pod succeeded; seen: {:#?}",
            self.seen()
        );
    }

    /// Waits until a pod of `pav_phase` was seen in `pod_phase`. Besides
    /// the watch, each round lists the pods, so a state lasting a few
    /// seconds is seen even while the watch is behind (watches here have
    /// lagged for minutes after an API-server restart).
    pub async fn wait(
        &self,
        pav_phase: &str,
        pod_phase: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let found = wait_until(
            &format!("a {pav_phase} pod {pod_phase}"),
            timeout,
            || async {
                let listed = self
                    .pods
                    .list(&ListParams::default().labels(&self.selector))
                    .await;
                for pod in listed.iter().flat_map(|list| &list.items) {
                    self.record(pod);
                }
                Ok((!self.pods(pav_phase, pod_phase).is_empty()).then_some(()))
            },
        )
        .await;
        found.with_context(|| format!("seen: {:#?}", self.seen()))
    }
}

/// Sizes in bytes pod `namespace/name` printed (lines `size=<bytes>`),
/// last first.
pub async fn printed_sizes(client: &Client, namespace: &str, name: &str) -> Vec<u64> {
    let output = logs(client, namespace, name).await.unwrap_or_default();
    let mut sizes: Vec<u64> = output
        .lines()
        .filter_map(|l| l.strip_prefix("size=")?.trim().parse().ok())
        .collect();
    sizes.reverse();
    sizes
}

/// The kubelet's stats of volume `volume` of pod `namespace/pod` on
/// `node` (Summary API): (capacityBytes, usedBytes), once it has measured
/// them (it asks NodeGetVolumeStats every volumeStatsAggPeriod).
pub async fn kubelet_volume_stats(
    client: &Client,
    node: &str,
    namespace: &str,
    pod: &str,
    volume: &str,
) -> Option<(u64, u64)> {
    let request = http::Request::get(format!("/api/v1/nodes/{node}/proxy/stats/summary"))
        .body(Vec::new())
        .unwrap();
    let summary: serde_json::Value = client.request(request).await.ok()?;
    let pods = summary["pods"].as_array()?;
    let pod = pods
        .iter()
        .find(|p| p["podRef"]["name"] == pod && p["podRef"]["namespace"] == namespace)?;
    let stats = pod["volume"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == volume)?;
    Some((
        stats["capacityBytes"].as_u64()?,
        stats["usedBytes"].as_u64()?,
    ))
}

/// File `file` of examples/`example`/ in this repository, as shipped.
pub fn example_file(example: &str, file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(example)
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::documents;

    #[test]
    fn documents_apply_merge_keys_and_skip_empty_ones() {
        let yaml = "a: &base { x: 1, y: 2 }\nb: { <<: *base, y: 3 }\n---\n---\nc: 4\n";
        let found = documents(yaml).unwrap();
        assert_eq!(
            found,
            [
                serde_json::json!({"a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}}),
                serde_json::json!({"c": 4}),
            ]
        );
    }
}
