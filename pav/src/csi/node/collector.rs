//! The collection of `/pav` files of the validation, creation and deletion
//! pods on this node, and the sweep of their directories.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use pav_templates::Phase;

use crate::csi::context::DriverContext;
use crate::pods::LABEL_PHASE;
use crate::pods::dir::remove_pod_dir;
use crate::pods::results::{Collected, PodState};

/// Every 30 s, removes the `/pav` directories of validation, creation and
/// deletion pods (of any provisioner) that no longer exist on this node and
/// are older than a minute: the collector removes them when it sees the
/// pod terminate or go, but misses pods whose events fell into a watch
/// gap or came while no node plugin ran.
pub async fn sweep_dirs(driver: Arc<DriverContext>, node: String, pods_dir: PathBuf) {
    let api: Api<Pod> = Api::all(driver.client.clone());
    let params = kube::api::ListParams::default()
        .labels(LABEL_PHASE)
        .fields(&format!("spec.nodeName={node}"));
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
    loop {
        tick.tick().await;
        let Ok(entries) = std::fs::read_dir(&pods_dir) else {
            continue;
        };
        let candidates: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                collected_phases().any(|phase| name.starts_with(&format!("pav-{}-", phase.name())))
                    && e.metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > std::time::Duration::from_secs(60))
            })
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let pods = match api.list(&params).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "sweeping pod directories: cannot list PaV pods");
                continue;
            }
        };
        for (name, dir) in candidates {
            if pods.iter().any(|p| p.name_any() == name) {
                continue;
            }
            match remove_pod_dir(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "removed the directory of a finished PaV pod")
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %pav_csi::error_chain(&e), "cannot remove pod directory")
                }
            }
        }
    }
}

/// The phases whose pods' `/pav` files the node plugin collects (and whose
/// directories, named after the pods, it removes): those whose pods run on
/// any node, not on the node of the volume ([`Phase::pod_on_volume_node`]),
/// whose node plugin reads their files itself.
fn collected_phases() -> impl Iterator<Item = Phase> {
    Phase::ALL
        .into_iter()
        .filter(|phase| !phase.pod_on_volume_node())
}

/// Whether `pod` is a pod of one of the [`collected_phases`].
pub(super) fn is_collectable(pod: &Pod) -> bool {
    let label = pod.labels().get(LABEL_PHASE).map(String::as_str);
    collected_phases().any(|phase| label == Some(phase.name()))
}

/// What the collector remembers between two scans of the pod cache.
#[derive(Debug, Default)]
pub(super) struct Collection {
    /// Collectable pods of the last scan, name to uid.
    pub(super) present: HashMap<String, String>,
    /// Pods (by uid) this process has collected. The cache may still show
    /// such a pod without its annotations for a moment, and collecting it
    /// again, with its directory gone, would erase them.
    pub(super) collected: HashSet<String>,
}

/// What one scan found to do.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Scan {
    /// Terminated collectable pods not yet collected.
    pub(super) to_collect: Vec<Arc<Pod>>,
    /// Names of collectable pods gone since the last scan, whose
    /// directories go too.
    pub(super) gone: Vec<String>,
}

impl Collection {
    pub(super) fn scan(&mut self, pods: &[Arc<Pod>]) -> Scan {
        let mut present = HashMap::new();
        let mut to_collect = Vec::new();
        for pod in pods.iter().filter(|pod| is_collectable(pod)) {
            let uid = pod.uid().unwrap_or_default();
            if PodState::of(pod).is_terminated()
                && Collected::of(pod).is_none()
                && !self.collected.contains(&uid)
            {
                to_collect.push(pod.clone());
            }
            present.insert(pod.name_any(), uid);
        }
        let mut gone: Vec<String> = self
            .present
            .keys()
            .filter(|name| !present.contains_key(*name))
            .cloned()
            .collect();
        gone.sort();
        let uids: HashSet<&String> = present.values().collect();
        self.collected.retain(|uid| uids.contains(uid));
        self.present = present;
        Scan { to_collect, gone }
    }

    pub(super) fn mark_collected(&mut self, pod: &Pod) {
        self.collected.insert(pod.uid().unwrap_or_default());
    }
}

/// Copies `/pav/handle`, `/pav/capacity` and `/pav/error` of terminated
/// validation, creation and deletion pods on this node into their status
/// (the condition [`CONDITION_COLLECTED`](crate::pods::CONDITION_COLLECTED)),
/// which marks them collected, and removes their directories, and
/// removes the directories of such pods once they are gone. Reads the pod
/// cache (no watch of its own): scans it after each change, and every 5 s
/// to retry what failed.
pub async fn collect(driver: Arc<DriverContext>, pods_dir: PathBuf) {
    let (store, mut changed) = driver.pods.updates();
    let mut retry = tokio::time::interval(std::time::Duration::from_secs(5));
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut collection = Collection::default();
    loop {
        tokio::select! {
            update = changed.changed() => if update.is_err() {
                tracing::error!("the pod cache stopped: no more /pav files are collected");
                return;
            },
            _ = retry.tick() => {}
        }
        let scan = collection.scan(&store.state());
        for name in scan.gone {
            let _ = remove_pod_dir(&pods_dir.join(name));
        }
        // Concurrently: pods terminate in bursts (a StorageClass' worth of
        // claims at once) and each PATCH waits on the API server.
        let collected: Vec<Arc<Pod>> = futures::stream::iter(scan.to_collect)
            .map(|pod| {
                let (driver, pods_dir) = (&driver, &pods_dir);
                async move { collect_pod(driver, pods_dir, &pod).await.then_some(pod) }
            })
            .buffer_unordered(COLLECT_CONCURRENCY)
            .filter_map(std::future::ready)
            .collect()
            .await;
        for pod in &collected {
            collection.mark_collected(pod);
        }
    }
}

/// How many pods the collector annotates at once; the client's rate limit
/// (`--kube-api-qps`, `--kube-api-burst`) still applies to them together.
const COLLECT_CONCURRENCY: usize = 16;

/// Records `pod`'s `/pav` files in its status and removes its directory;
/// false if that failed (the files stay for the next try).
pub(super) async fn collect_pod(driver: &DriverContext, pods_dir: &Path, pod: &Pod) -> bool {
    let dir = pods_dir.join(pod.name_any());
    let files = Collected::read(&dir);
    // Strategic: merged into the pod's conditions by type, beside the
    // kubelet's.
    let patch = serde_json::json!({"status": {"conditions": [files.condition()]}});
    let namespace = pod.namespace().unwrap_or_default();
    let (api, name) = (driver.pods.api(&namespace), pod.name_any());
    let params = PatchParams::default();
    let mut patched = (api
        .patch_status(&name, &params, &Patch::Strategic(&patch))
        .await)
        .map(drop);
    if let Err(kube::Error::Api(status)) = &patched
        && status.code == 403
    {
        // RBAC older than this image (no `pods/status`, `patch` on pods
        // everywhere still): where node plugins of its time wrote them.
        let patch = serde_json::json!({"metadata": {"annotations": files.annotations()}});
        patched = (api.patch(&name, &params, &Patch::Merge(&patch)).await).map(drop);
    }
    match patched {
        Ok(_) => {
            tracing::info!(pod = %pod.name_any(), namespace, "collected /pav files");
            if let Err(e) = remove_pod_dir(&dir) {
                tracing::warn!(dir = %dir.display(), error = %pav_csi::error_chain(&e), "cannot remove pod directory");
            }
            true
        }
        // Gone meanwhile: nobody waits for its files any more.
        Err(kube::Error::Api(status)) if status.code == 404 => {
            let _ = remove_pod_dir(&dir);
            true
        }
        Err(e) => {
            tracing::warn!(pod = %pod.name_any(), error = %e, "cannot record the /pav files in the pod's status");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase_label: &str, pod_phase: &str, collected: bool) -> Arc<Pod> {
        let conditions = if collected {
            serde_json::json!([Collected::default().condition()])
        } else {
            serde_json::json!([])
        };
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "namespace": "pav",
                    "uid": format!("uid-{name}"),
                    "labels": { LABEL_PHASE: phase_label },
                },
                "status": { "phase": pod_phase, "conditions": conditions },
            }))
            .unwrap(),
        )
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn collects_each_finished_pod_once() {
        let mut collection = Collection::default();
        let pods = [
            pod("pav-creation-a", "creation", "Succeeded", false),
            pod("pav-deletion-b", "deletion", "Failed", false),
            pod("pav-validation-c", "validation", "Running", false),
            pod("pav-creation-d", "creation", "Succeeded", true),
            pod("pav-staging-e", "staging", "Succeeded", false),
        ];
        let scan = collection.scan(&pods);
        assert_eq!(
            names(&scan.to_collect),
            ["pav-creation-a", "pav-deletion-b"]
        );
        assert!(scan.gone.is_empty());

        // Collected, but the cache still shows the pod as before the patch.
        collection.mark_collected(&scan.to_collect[0]);
        let scan = collection.scan(&pods);
        assert_eq!(
            names(&scan.to_collect),
            ["pav-deletion-b"],
            "collected twice"
        );

        // Once it terminates, the running one is due too.
        let mut pods = pods.to_vec();
        pods[2] = pod("pav-validation-c", "validation", "Succeeded", false);
        let scan = collection.scan(&pods);
        assert_eq!(
            names(&scan.to_collect),
            ["pav-deletion-b", "pav-validation-c"]
        );
    }

    #[test]
    fn gone_pods_lose_their_directories_and_are_forgotten() {
        let mut collection = Collection::default();
        let finished = pod("pav-creation-a", "creation", "Succeeded", false);
        let staging = pod("pav-staging-b", "staging", "Running", false);
        collection.scan(&[finished.clone(), staging.clone()]);
        collection.mark_collected(&finished);

        let scan = collection.scan(&[staging]);
        assert_eq!(scan.gone, ["pav-creation-a"]);
        assert!(scan.to_collect.is_empty());
        assert!(collection.collected.is_empty(), "uid of a gone pod kept");

        // A pod of the same name created again is a new pod.
        let again = pod("pav-creation-a", "creation", "Succeeded", false);
        let scan = collection.scan(&[again]);
        assert_eq!(names(&scan.to_collect), ["pav-creation-a"]);
        assert!(scan.gone.is_empty(), "staging pods have no directory here");
    }
}
