//! Staging pods of nodes that no longer exist.
//!
//! A staging pod keeps the finalizer [`FINALIZER_UNSTAGE`] until the node
//! plugin of its node has unstaged the volume. When that node is deleted
//! (its machine gone), no node plugin will ever do so: the pod would stay
//! forever, terminating, and with it the claim's record of a volume in use.
//! The CSI controller (one per provisioner, on a node that exists) releases
//! such pods: nothing is left to unstage on a machine that is gone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::{Api, ResourceExt};
use pav_templates::Phase;

use super::context::{DriverContext, DriverError, pod_ref};
use crate::pods::{ANNOTATION_PV, FINALIZER_UNSTAGE};

/// How often the CSI controller looks for staging pods of deleted nodes.
/// Nodes are deleted rarely, and each look costs a scan of the pod cache
/// plus one GET per node holding a staging pod.
pub const RELEASE_EVERY: Duration = Duration::from_secs(30);

/// Releases the staging pods of deleted nodes every [`RELEASE_EVERY`].
pub async fn release_periodically(driver: Arc<DriverContext>) {
    loop {
        if let Err(err) = release_once(&driver).await {
            tracing::warn!(error = %pav_csi::error_chain(&err), "looking for staging pods of deleted nodes");
        }
        tokio::time::sleep(RELEASE_EVERY).await;
    }
}

/// Removes [`FINALIZER_UNSTAGE`] from this provisioner's pods whose node
/// no longer exists, deletes them, and says so in a Warning event on their
/// volume; returns the names of the pods released.
pub async fn release_once(driver: &DriverContext) -> Result<Vec<String>, DriverError> {
    let nodes: Api<Node> = Api::all(driver.client.clone());
    let mut node_exists: HashMap<String, bool> = HashMap::new();
    let mut released = Vec::new();
    for pod in driver.pods.cached_all().await? {
        if !pod.finalizers().iter().any(|f| f == FINALIZER_UNSTAGE) {
            continue;
        }
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let exists = match node_exists.get(&node) {
            Some(exists) => *exists,
            None => {
                let exists = match nodes.get_opt(&node).await {
                    Ok(found) => found.is_some(),
                    // Unknown: keep the pod, look again next time.
                    Err(err) => {
                        tracing::warn!(%node, error = %err, "cannot read node");
                        true
                    }
                };
                node_exists.insert(node.clone(), exists);
                exists
            }
        };
        if !exists {
            release(driver, &pod, &node).await?;
            released.push(pod.name_any());
        }
    }
    Ok(released)
}

async fn release(driver: &DriverContext, pod: &Pod, node: &str) -> Result<(), DriverError> {
    let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    tracing::warn!(pod = %format!("{namespace}/{name}"), %node, "node deleted: releasing its staging pod without unstaging");
    driver.pods.remove_finalizer(pod, FINALIZER_UNSTAGE).await?;
    driver.pods.delete(&namespace, &name).await?;
    if let Some(volume) = pod.annotations().get(ANNOTATION_PV) {
        let message = format!(
            "node {node} was deleted while it had this volume staged: its staging pod {namespace}/{name} was released without unstaging (nothing is left to unstage on a node that is gone)"
        );
        // DriverContext-scoped: no namespace (the recorder files it in default).
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolume".into()),
            name: Some(volume.clone()),
            ..ObjectReference::default()
        };
        driver
            .events
            .warn(&regarding, Phase::Unstaging, &message, Some(pod_ref(pod)))
            .await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::{Value, json};

    use super::*;
    use crate::csi::fixtures::{ApiServer, status};
    use crate::pods::{LABEL_PHASE, LABEL_PROVISIONER};

    fn staging_pod(name: &str, node: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "pav",
                "uid": format!("uid-{name}"),
                "labels": { LABEL_PROVISIONER: "p", LABEL_PHASE: "staging" },
                "annotations": { ANNOTATION_PV: format!("pvc-{name}") },
                "finalizers": [FINALIZER_UNSTAGE],
            },
            "spec": { "nodeName": node, "containers": [] },
        })
    }

    /// Scenario: two staging pods on `gone` (deleted) and one on `alive`.
    /// Those of `gone` lose the finalizer and go, each with a Warning event
    /// on its volume; the one of `alive` is left alone; `gone` is read once.
    #[tokio::test]
    async fn staging_pods_of_a_deleted_node_are_released() {
        let (server, client) = ApiServer::start();
        server.serve_pods(|_| Vec::new());
        server.put_pod(staging_pod("on-gone-1", "gone"));
        server.put_pod(staging_pod("on-gone-2", "gone"));
        server.put_pod(staging_pod("on-alive", "alive"));
        server.route(
            Method::GET,
            "/api/v1/nodes/gone",
            status(404, "NotFound", "nodes \"gone\" not found"),
        );
        server.route(
            Method::GET,
            "/api/v1/nodes/alive",
            (
                200,
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "alive"}}),
            ),
        );
        server.on(|r| {
            (r.method == Method::POST && r.path.ends_with("/events"))
                .then(|| (201, r.body.clone().unwrap_or_default()))
        });
        let driver = crate::csi::fixtures::driver_context(client);

        let mut released = release_once(&driver).await.unwrap();
        released.sort();
        assert_eq!(released, ["on-gone-1", "on-gone-2"]);
        let left: Vec<String> = server
            .pods()
            .iter()
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(left, ["on-alive"]);
        let requests = server.requests();
        let mut node_reads: Vec<String> = requests
            .iter()
            .filter(|r| r.path.starts_with("/api/v1/nodes/"))
            .map(|r| r.path.clone())
            .collect();
        node_reads.sort();
        assert_eq!(node_reads, ["/api/v1/nodes/alive", "/api/v1/nodes/gone"]);
        let events: Vec<&Value> = requests
            .iter()
            .filter(|r| r.method == Method::POST && r.path.ends_with("/events"))
            .filter_map(|r| r.body.as_ref())
            .collect();
        assert_eq!(events.len(), 2, "{events:#?}");
        for event in events {
            assert_eq!(event["type"], "Warning");
            assert_eq!(event["regarding"]["kind"], "PersistentVolume");
            let note = event["note"].as_str().unwrap_or_default();
            assert!(note.contains("node gone was deleted"), "{note}");
        }

        // Nothing left to do the next time, once the pod cache has seen the
        // deletions.
        for _ in 0..500 {
            if driver.pods.cached_all().await.unwrap().len() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(release_once(&driver).await.unwrap(), Vec::<String>::new());
    }
}
