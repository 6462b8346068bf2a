//! The driver's PavProvisioner: one watch of the object, and its compiled
//! form per generation (see [`ServedProvisioner::compiled`]).

use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use pav_templates::{CompiledProvisioner, PavProvisioner};
use tokio::sync::watch;

#[cfg(doc)]
use super::context::ServedProvisioner;
use crate::driver_error::DriverError;

/// One PavProvisioner as one watch sees it, and the compiled form of its
/// latest generation: compiled when a request first needs that
/// generation, then reused by every request until the object changes.
pub(super) struct ProvisionerCache {
    name: String,
    store: Store<PavProvisioner>,
    /// True once the store holds the first complete list. Not the store's
    /// own `wait_until_ready`: it wakes only the last of several waiters
    /// (one oneshot receiver), so a burst of first RPCs waited for the
    /// timeout.
    listed: watch::Receiver<bool>,
    /// The latest generation compiled.
    latest: Mutex<Option<Arc<Generation>>>,
    /// How many compilations ran (for tests and logs).
    compilations: AtomicUsize,
}

/// One generation of the PavProvisioner, compiled.
pub(super) struct Generation {
    /// The object's UID and `metadata.generation` (its resourceVersion
    /// when it has none): a new object of the same name, or a new spec,
    /// is compiled again.
    key: (String, String),
    /// The compiled templates, or the problems found.
    pub(super) compiled: Result<Arc<CompiledProvisioner>, String>,
    /// The owner reference of the pods.
    pub(super) owner: Option<OwnerReference>,
}

impl ProvisionerCache {
    /// Watches PavProvisioner `name` (a field selector on its name) in a
    /// task of its own that retries with backoff for the process' life.
    pub(super) fn start(client: Client, name: &str) -> ProvisionerCache {
        let api: Api<PavProvisioner> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (store, writer) = reflector::store();
        let (listed_tx, listed) = watch::channel(false);
        let stream = watcher(api, config)
            .default_backoff()
            .modify(crate::cached::without_managed_fields)
            .reflect(writer);
        tokio::spawn(async move {
            let mut stream = pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    // Applied to the store before it is passed on.
                    Ok(watcher::Event::InitDone) => {
                        listed_tx.send_replace(true);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "watching the PavProvisioner"),
                }
            }
        });
        ProvisionerCache {
            name: name.to_owned(),
            store,
            listed,
            latest: Mutex::new(None),
            compilations: AtomicUsize::new(0),
        }
    }

    /// How many compilations ran.
    pub(super) fn compilations(&self) -> usize {
        self.compilations.load(Ordering::Relaxed)
    }

    /// Waits for the first complete list, at most `within`.
    pub(super) async fn ready(&self, within: Duration) -> Result<(), DriverError> {
        let mut listed = self.listed.clone();
        match tokio::time::timeout(within, listed.wait_for(|listed| *listed)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(DriverError::Watch(
                "the watch of the PavProvisioner stopped".into(),
            )),
            Err(_) => Err(DriverError::Watch(format!(
                "PavProvisioner {}: no list from the API server within {}s",
                self.name,
                within.as_secs()
            ))),
        }
    }

    /// The object as the watch last saw it, not compiled.
    pub(super) fn object(&self) -> Option<Arc<PavProvisioner>> {
        self.store.get(&ObjectRef::new(&self.name))
    }

    /// The object's current generation, compiled now if it is new.
    pub(super) fn current(&self) -> Result<Arc<Generation>, DriverError> {
        let Some(object) = self.store.get(&ObjectRef::new(&self.name)) else {
            return Err(DriverError::NoProvisioner(self.name.clone()));
        };
        let key = (
            object.uid().unwrap_or_default(),
            match object.metadata.generation {
                Some(generation) => generation.to_string(),
                None => object.resource_version().unwrap_or_default(),
            },
        );
        // Held while compiling: concurrent requests for a new generation
        // wait for one compilation instead of each running their own.
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(generation) = latest.as_ref()
            && generation.key == key
        {
            return Ok(generation.clone());
        }
        self.compilations.fetch_add(1, Ordering::Relaxed);
        let compiled = CompiledProvisioner::new(&object)
            .map(Arc::new)
            .map_err(|problems| problems.to_string());
        tracing::info!(
            provisioner = %self.name,
            generation = %key.1,
            valid = compiled.is_ok(),
            "compiled the PavProvisioner"
        );
        let generation = Arc::new(Generation {
            key,
            compiled,
            owner: object.owner_ref(&()),
        });
        *latest = Some(generation.clone());
        Ok(generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::context::DriverContext;
    use crate::csi::metrics::Metrics;

    const PROVISIONERS: &str = "/apis/pav.albertofaria.github.io/v1alpha1/pavprovisioners";

    fn provisioner_object(
        generation: i64,
        resource_version: &str,
        image: &str,
    ) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "pav.albertofaria.github.io/v1alpha1",
            "kind": "PavProvisioner",
            "metadata": {
                "name": "p", "uid": "u-p", "generation": generation,
                "resourceVersion": resource_version,
            },
            "spec": {
                "provisioningModes": ["Dynamic"],
                "volumeCreation": {"capacity": "{{ requestedMinCapacity }}"},
                "volumeStaging": {"podTemplate": {"spec": {"containers": [
                    {"name": "c", "image": image}
                ]}}},
            },
        })
    }

    fn fake_driver() -> (super::super::fixtures::ApiServer, DriverContext) {
        use super::super::fixtures::{ApiServer, list};
        let (server, client) = ApiServer::start();
        server.route(
            http::Method::GET,
            PROVISIONERS,
            list(
                "PavProvisioner",
                vec![provisioner_object(1, "1", "busybox:1")],
            ),
        );
        let driver = DriverContext::new(
            client,
            "p".into(),
            "pav".into(),
            Duration::from_secs(30),
            Arc::new(Metrics::default()),
            None,
        );
        (server, driver)
    }

    /// The image of the compiled staging pod, to tell generations apart.
    fn staging_image(compiled: &CompiledProvisioner) -> String {
        let staging = compiled
            .render::<pav_templates::phase::Staging>(&pav_templates::samples::staging_context())
            .unwrap();
        staging.pod_template.spec.unwrap().containers[0]
            .image
            .clone()
            .unwrap()
    }

    /// The driver GOT and compiled the PavProvisioner on every RPC: now a
    /// burst of RPCs reads the watched object and compiles it once; a new
    /// generation is compiled once more, a status change not at all.
    #[tokio::test]
    async fn the_provisioner_is_watched_and_compiled_once_per_generation() {
        let (server, driver) = fake_driver();
        let driver = Arc::new(driver);
        let burst: Vec<_> = (0..50)
            .map(|_| {
                let driver = driver.clone();
                tokio::spawn(async move { driver.served.compiled().await })
            })
            .collect();
        for rpc in burst {
            let (compiled, owner) = rpc.await.unwrap().unwrap();
            assert_eq!(staging_image(&compiled), "busybox:1");
            assert_eq!(owner.unwrap().uid, "u-p");
        }
        assert_eq!(driver.served.compilations(), 1);
        let requests = server.requests();
        let gets = requests
            .iter()
            .filter(|r| r.method == http::Method::GET && r.path == format!("{PROVISIONERS}/p"))
            .count();
        assert_eq!(gets, 0, "{requests:#?}");
        let lists = requests
            .iter()
            .filter(|r| r.path == PROVISIONERS && !r.is_watch())
            .count();
        assert_eq!(lists, 1, "{requests:#?}");
        assert!(
            requests
                .iter()
                .all(|r| r.query.contains("fieldSelector=metadata.name%3Dp")),
            "{requests:#?}"
        );

        // A new generation: compiled once, on the first RPC that needs it.
        wait_for_watch(&server).await;
        server.send(
            PROVISIONERS,
            "MODIFIED",
            &provisioner_object(2, "2", "busybox:2"),
        );
        let compiled = wait_for_image(&driver, "busybox:2").await;
        for _ in 0..20 {
            let (again, _) = driver.served.compiled().await.unwrap();
            assert!(Arc::ptr_eq(&compiled, &again));
        }
        assert_eq!(driver.served.compilations(), 2);

        // A change that leaves the generation (a status update): no compilation.
        server.send(
            PROVISIONERS,
            "MODIFIED",
            &provisioner_object(2, "3", "busybox:2"),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        driver.served.compiled().await.unwrap();
        assert_eq!(driver.served.compilations(), 2);

        // Gone: NotFound, as a GET answered.
        server.send(
            PROVISIONERS,
            "DELETED",
            &provisioner_object(2, "4", "busybox:2"),
        );
        let err = loop {
            match driver.served.compiled().await {
                Err(e) => break e,
                Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        assert!(matches!(err, DriverError::NoProvisioner(_)), "{err:?}");
        assert!(
            server
                .requests()
                .iter()
                .all(|r| r.path != format!("{PROVISIONERS}/p"))
        );
    }

    async fn wait_for_watch(server: &super::super::fixtures::ApiServer) {
        for _ in 0..500 {
            if server.requests().iter().any(|r| r.is_watch()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no watch request");
    }

    async fn wait_for_image(driver: &DriverContext, image: &str) -> Arc<CompiledProvisioner> {
        for _ in 0..500 {
            let (compiled, _) = driver.served.compiled().await.unwrap();
            if staging_image(&compiled) == image {
                return compiled;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the watch never delivered {image}");
    }
}
