//! The per-driver context ([`DriverContext`]): what every operation of one
//! PavProvisioner's driver shares, one module per concept: its PaV pods
//! ([`pods`]: the API and one watch-fed cache, so a wait costs no request),
//! the PavProvisioner it serves ([`served`]: watched, compiled once per
//! generation, the planner of its phases), its events ([`events`]), and
//! the run of a phase pod that uses them all ([`run`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};

use super::metrics::Metrics;

pub mod events;
pub mod pods;
pub mod run;
pub mod served;

pub use self::events::Events;
pub use self::pods::{Finished, PavPods};
pub use self::run::{Lifetime, PhaseError, PodFiles, Regarding, RunFailure};
pub use self::served::ServedProvisioner;
pub use crate::driver_error::{DriverError, api_error};

/// Longest wait for the pod cache's first list before an operation gives
/// up with `Unavailable` (the CO retries).
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What every operation of one provisioner's driver shares (one per `pav
/// csi-controller` or `pav csi-node` process), by concept: its PaV pods,
/// the PavProvisioner it serves, its events and metrics.
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
    /// This provisioner's PaV pods: the API and the cache.
    pub pods: PavPods,
    /// The PavProvisioner served: its watch, compiled form and planner.
    pub served: ServedProvisioner,
    /// Events on claims, volumes, pods and the PavProvisioner.
    pub events: Events,
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

impl DriverContext {
    /// The claim `pv` is bound to, as it is now; `None` when the volume
    /// has no claim or the claim is gone.
    pub async fn claim_of(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<PersistentVolumeClaim>, DriverError> {
        let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            return Ok(None);
        };
        let (namespace, name) = (
            claim_ref.namespace.as_deref().unwrap_or_default(),
            claim_ref.name.as_deref().unwrap_or_default(),
        );
        let live = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| api_error(&format!("PersistentVolumeClaim {namespace}/{name}"), e))?;
        Ok(live.filter(|pvc| pvc.uid() == claim_ref.uid))
    }

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
            pods: PavPods::new(client.clone(), provisioner.clone(), timeout),
            served: ServedProvisioner::new(
                client.clone(),
                provisioner.clone(),
                namespace.clone(),
                timeout,
            ),
            events: Events::new(recorder),
            client,
            provisioner,
            namespace,
            timeout,
            metrics,
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
    use std::sync::atomic::Ordering;

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
        let created = (driver_context(client).pods.ensure(&pod).await).unwrap();
        assert!(!created, "a 409 was taken as a pod this call created");
        let posts = (server.requests().iter())
            .filter(|r| r.method == Method::POST)
            .count();
        assert_eq!(posts, 1);
    }

    /// A node plugin not bound yet where a new volume's pod goes (the
    /// controller binds it once it sees the volume, which kubelet may
    /// stage first): RBAC's refusal is retried until the binding is there,
    /// so the user sees no error; admission's refusal (Pod Security) is
    /// not, as no waiting mends it.
    #[tokio::test(start_paused = true)]
    async fn a_pod_refused_by_rbac_is_retried_until_bound_and_admission_is_not() {
        let (server, client) = ApiServer::start();
        server.serve_pods(|_| Vec::new());
        let refusals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(2));
        let left = refusals.clone();
        server.intercept(move |r| {
            let refuse = r.method == Method::POST
                && r.path == "/api/v1/namespaces/apps/pods"
                && left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            refuse.then(|| status(403, "Forbidden", "pods is forbidden: User \"system:serviceaccount:pav:pav-p-node\" cannot create resource \"pods\" in API group \"\" in the namespace \"apps\""))
        });
        server.intercept(|r| {
            (r.method == Method::POST && r.path == "/api/v1/namespaces/restricted/pods").then(
                || {
                    status(
                        403,
                        "Forbidden",
                        "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\"",
                    )
                },
            )
        });
        let pod = |namespace: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "x", "namespace": namespace},
                "spec": {"containers": []},
            }))
            .unwrap()
        };
        let driver = driver_context(client);
        assert!(
            driver.pods.ensure(&pod("apps")).await.unwrap(),
            "created once bound"
        );
        assert_eq!(refusals.load(Ordering::SeqCst), 0, "both refusals seen");
        let refused = driver.pods.ensure(&pod("restricted")).await.unwrap_err();
        assert!(refused.to_string().contains("PodSecurity"), "{refused}");
        let posts = |ns: &str| {
            let path = format!("/api/v1/namespaces/{ns}/pods");
            (server.requests().iter())
                .filter(|r| r.method == Method::POST && r.path == path)
                .count()
        };
        assert_eq!((posts("apps"), posts("restricted")), (3, 1));
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

        let refused = driver.pods.remove_finalizer(&pod, "pav/ours").await;
        assert!(refused.is_err(), "a stale patch was applied");
        assert_eq!(
            finalizers(&server),
            json!(["pav/ours", "other/kept", "other/late"])
        );

        (driver.pods.remove_finalizer(&pod, "pav/ours").await).unwrap();
        assert_eq!(finalizers(&server), json!(["other/kept", "other/late"]));
    }
}
