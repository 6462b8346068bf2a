//! The PavProvisioner a driver serves ([`ServedProvisioner`]): one watch
//! of the object, its compiled form per generation, and the planner of its
//! phases.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Api, Client, Resource};
use pav_templates::{CompiledProvisioner, PvcLookup};

use super::READY_TIMEOUT;
use crate::csi::provisioner_cache::ProvisionerCache;
use crate::driver_error::DriverError;
use crate::recipe::{PlanError, Planner};

/// The PavProvisioner one driver serves.
pub struct ServedProvisioner {
    client: Client,
    /// Its name (the CSI driver's).
    name: String,
    /// Namespace of pods whose template names none.
    namespace: String,
    /// Upper bound of the wait for the watch's first list.
    timeout: Duration,
    /// Started on first use or by [`ServedProvisioner::start_watch`].
    cache: OnceLock<ProvisionerCache>,
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

impl ServedProvisioner {
    pub(super) fn new(client: Client, name: String, namespace: String, timeout: Duration) -> Self {
        ServedProvisioner {
            client,
            name,
            namespace,
            timeout,
            cache: OnceLock::new(),
        }
    }

    /// Starts the watch of this driver's PavProvisioner unless it runs
    /// already (needs a tokio runtime); the first [`ServedProvisioner::compiled`]
    /// starts it otherwise.
    pub fn start_watch(&self) {
        self.cache
            .get_or_init(|| ProvisionerCache::start(self.client.clone(), &self.name));
    }

    /// The PavProvisioner, compiled, and an owner reference to it for the
    /// pods (so deleting the provisioner garbage-collects them). From the
    /// watch of the object (no request) and compiled once per generation.
    pub async fn compiled(
        &self,
    ) -> Result<(Arc<CompiledProvisioner>, Option<OwnerReference>), DriverError> {
        self.start_watch();
        let cache = self.cache.get().expect("started above");
        cache.ready(READY_TIMEOUT.min(self.timeout)).await?;
        let generation = cache.current()?;
        match &generation.compiled {
            Ok(compiled) => Ok((compiled.clone(), generation.owner.clone())),
            Err(problems) => Err(DriverError::InvalidProvisioner(problems.clone())),
        }
    }

    /// The PavProvisioner as its watch last saw it, valid or not (`None`
    /// when there is none): what the driver's manifests were made from.
    pub async fn object(&self) -> Result<Option<Arc<pav_templates::PavProvisioner>>, DriverError> {
        self.start_watch();
        let cache = self.cache.get().expect("started above");
        cache.ready(READY_TIMEOUT.min(self.timeout)).await?;
        Ok(cache.object())
    }

    /// How many times this driver compiled its PavProvisioner.
    pub fn compilations(&self) -> usize {
        self.cache.get().map_or(0, ProvisionerCache::compilations)
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

    /// The PavProvisioner, as events name it: with its uid, as `kubectl
    /// describe` finds events by it, when the object can be read.
    pub async fn reference(&self) -> ObjectReference {
        use pav_templates::PavProvisioner;
        match self.object().await {
            Ok(Some(object)) => object.object_ref(&()),
            _ => ObjectReference {
                api_version: Some(PavProvisioner::api_version(&()).into_owned()),
                kind: Some(PavProvisioner::kind(&()).into_owned()),
                name: Some(self.name.clone()),
                ..ObjectReference::default()
            },
        }
    }
}
