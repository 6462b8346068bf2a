//! Kubernetes' volume populator protocol (feature `populator`), for a
//! driver implementing [`pav_sdk::Populate`]: what the Go
//! `lib-volume-populator` does, for claims whose `dataSourceRef` names
//! one of the driver's [kinds](pav_sdk::Populate::data_source_kinds).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # async fn f(client: kube::Client, populate: Arc<dyn pav_sdk::Populate>) {
//! let populator = pav_csi::populator::Populator::new(client, "pop.example.com", "pop-system", populate);
//! tokio::spawn(populator.run());
//! # }
//! ```
//!
//! # The protocol
//!
//! A claim *C* is the populator's when its StorageClass's provisioner is
//! the driver and its `dataSourceRef` names one of the kinds, or it
//! carries [`FINALIZER`] (so that its deletion is cleaned up even if the
//! kinds changed). The finalizer is every driver's populator's, so it
//! does not say whose a claim is by itself: the class does, and once it
//! is deleted, the claim's `volume.kubernetes.io/storage-provisioner`
//! annotation. For such a claim, the populator
//!
//! 1. adds [`FINALIZER`] to C, before it creates anything;
//! 2. refuses a source in another namespace (Warning `PopulationRefused`);
//! 3. reads the source (discovery by group and kind); while it is missing
//!    or forbidden, retries with backoff (Warning `PopulationWaiting`,
//!    `PopulationForbidden`, the latter naming the permission to grant);
//! 4. with a `WaitForFirstConsumer` class, waits for the scheduler's
//!    `volume.kubernetes.io/selected-node` on C;
//! 5. creates the *prime claim* P, `prime-<C's uid>` in the driver's
//!    namespace: C's class, size, access and volume modes and selected
//!    node, no data source, labelled [`PRIME_OF_LABEL`] and annotated
//!    [`CLAIM_ANNOTATION`] (Normal `Provisioning`); the driver provisions
//!    it as any claim;
//! 6. once P is bound, runs [`Populate::populate`] on its volume in a task
//!    of its own (Normal `Populating`); a failure is a Warning
//!    `PopulationFailed` with the driver's message and is retried after 5
//!    s, doubling up to 5 minutes;
//! 7. once it succeeds, reads C again and, unless C is being deleted,
//!    points the volume's `claimRef` at C (labelling it
//!    [`POPULATED_FOR_LABEL`]) and deletes P: the PV controller binds C to
//!    the filled volume;
//! 8. once C is bound, removes [`FINALIZER`] (Normal `Populated`).
//!
//! Deleting C aborts its population, deletes P with foreground
//! propagation (a population pod P owns goes with it, and the volume with
//! P) and then removes [`FINALIZER`]. A volume is handed over only when
//! filled. Every other failing step is retried with the same backoff, as
//! a Warning `PopulationError` on C.
//!
//! # Permissions
//!
//! The client's ServiceAccount needs: `get`, `list`, `watch` and `patch`
//! on `persistentvolumeclaims` in every namespace, and `create` and
//! `delete` in the driver's; `get`, `list` and `patch` on
//! `persistentvolumes`; `get` on `storageclasses`; `create` and `patch` on
//! `events` of `events.k8s.io`; and `get` on each kind it populates from.
//!
//! Those kinds are of API groups other than the core one: the API server
//! refuses a `dataSourceRef` without `apiGroup` unless it names a
//! PersistentVolumeClaim (which external-provisioner clones), so a
//! ConfigMap, say, cannot be a claim's data source.

mod error;
mod objects;
mod plan;
mod quantity;
#[cfg(test)]
mod scenarios;
mod tasks;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::StreamExt as _;
use futures::channel::mpsc::{self, UnboundedSender};
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ApiResource, Patch, PatchParams};
use kube::discovery::ApiCapabilities;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource as _};
use pav_sdk::{DataSourceKind, ObjectName, Populate};
use serde_json::Value;
use tracing::Instrument as _;

use self::error::Error;
use self::plan::ClaimKey;
use self::tasks::{Outcome, State, Tasks};
use crate::error_chain;

/// The finalizer the populator keeps on a claim it works for, from
/// before it creates anything until the claim is bound or deleted.
pub const FINALIZER: &str = "pav.albertofaria.github.io/populator";

/// The label of a prime claim: the uid of the claim it is for. The
/// populator watches the claims that have it.
pub const PRIME_OF_LABEL: &str = "pav.albertofaria.github.io/prime-of";

/// The annotation of a prime claim: `<namespace>/<name>` of the claim it
/// is for.
pub const CLAIM_ANNOTATION: &str = "pav.albertofaria.github.io/claim";

/// The label of a filled volume handed over to a claim: the claim's uid.
/// It finds the volume between the handover (the prime claim deleted)
/// and the binding.
pub const POPULATED_FOR_LABEL: &str = "pav.albertofaria.github.io/populated-for";

/// The reasons of the events the populator puts on claims.
pub mod reason {
    /// Normal: the prime claim was created.
    pub const PROVISIONING: &str = "Provisioning";
    /// Normal: the driver is filling the volume.
    pub const POPULATING: &str = "Populating";
    /// Normal: the claim is bound to its filled volume.
    pub const POPULATED: &str = "Populated";
    /// Warning: the driver failed to fill the volume (its message); retried.
    pub const FAILED: &str = "PopulationFailed";
    /// Warning: the source or its kind does not exist (yet); retried.
    pub const WAITING: &str = "PopulationWaiting";
    /// Warning: the driver may not read the source; retried.
    pub const FORBIDDEN: &str = "PopulationForbidden";
    /// Warning: the source is in another namespace; not retried.
    pub const REFUSED: &str = "PopulationRefused";
    /// Warning: another step failed (its message); retried.
    pub const ERROR: &str = "PopulationError";
}

/// The events' `action`.
const ACTION: &str = "Populate";

/// Runs the volume populator protocol for one driver.
pub struct Populator {
    client: Client,
    driver: String,
    namespace: String,
    populate: Arc<dyn Populate>,
}

impl std::fmt::Debug for Populator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Populator")
            .field("driver", &self.driver)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Populator {
    /// A populator for the claims of `driver`'s StorageClasses (its CSI
    /// name, their `provisioner`), whose prime claims live in `namespace`
    /// (the driver's own), filled by `populate`.
    pub fn new(
        client: Client,
        driver: impl Into<String>,
        namespace: impl Into<String>,
        populate: Arc<dyn Populate>,
    ) -> Self {
        Self {
            client,
            driver: driver.into(),
            namespace: namespace.into(),
            populate,
        }
    }

    /// Runs until the future is dropped, which aborts the populations
    /// running (they start again, from the beginning, in the next run:
    /// [`Populate::populate`] is idempotent).
    pub async fn run(self) {
        let (context, triggers) = Context::new(self);
        let _abort = AbortOnDrop(Arc::clone(&context.tasks));
        let claims = Api::<PersistentVolumeClaim>::all(context.client.clone());
        let primes = context.primes();
        tracing::info!(driver = %context.driver, namespace = %context.namespace, "populator started");
        Controller::new(claims, watcher::Config::default())
            // A prime claim's changes (bound, lost, gone) are its claim's.
            .watches(
                primes,
                watcher::Config::default().labels(PRIME_OF_LABEL),
                |prime| plan::claim_of_prime(&prime),
            )
            // A population's end.
            .reconcile_on(triggers)
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                match result {
                    Ok((claim, _)) => tracing::trace!(%claim, "reconciled"),
                    // Its claims are not watched (RBAC?): nothing happens
                    // until that is fixed, so say it loudly.
                    Err(err @ controller::Error::QueueError(_)) => {
                        tracing::warn!(error = %error_chain(&err), "watching claims failed")
                    }
                    // Failed reconciles are logged by error_policy; a
                    // claim gone before its prime claim's change is
                    // reconciled is expected.
                    Err(err) => tracing::debug!(error = %error_chain(&err), "not reconciled"),
                }
            })
            .await;
    }
}

/// Aborts the populations when [`Populator::run`] ends or is dropped:
/// they are tokio tasks, which would outlive it.
struct AbortOnDrop(Arc<Tasks>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort_all();
    }
}

/// What every reconcile shares.
struct Context {
    client: Client,
    driver: String,
    namespace: String,
    populate: Arc<dyn Populate>,
    recorder: Recorder,
    tasks: Arc<Tasks>,
    /// Failed reconciles in a row, by claim uid, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Discovered resources by kind, so that a claim's every reconcile
    /// does not ask the API server's discovery again.
    resources: Mutex<HashMap<DataSourceKind, (ApiResource, ApiCapabilities)>>,
    /// Wakes a claim's reconcile when its population ends.
    trigger: UnboundedSender<ObjectRef<PersistentVolumeClaim>>,
}

async fn reconcile(
    claim: Arc<PersistentVolumeClaim>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let Some(key) = ClaimKey::of(&claim) else {
        return Ok(Action::await_change());
    };
    let span = tracing::info_span!("populator", namespace = %key.namespace, claim = %key.name);
    async {
        let result = context.sync(&claim, &key).await;
        match &result {
            Ok(_) => {
                context.failures().remove(&key.uid);
            }
            Err(err) => {
                if let Some(reason) = err.reason() {
                    context
                        .event(&claim, EventType::Warning, reason, err.note())
                        .await;
                }
            }
        }
        result
    }
    .instrument(span)
    .await
}

/// Retries a failed reconcile after [`plan::backoff`] of its claim's
/// failures in a row.
fn error_policy(claim: Arc<PersistentVolumeClaim>, err: &Error, context: Arc<Context>) -> Action {
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let failures = {
        let mut failures = context.failures();
        let count = failures.entry(uid).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let retry_in = plan::backoff(failures);
    tracing::warn!(
        namespace = claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim = claim.metadata.name.as_deref().unwrap_or_default(),
        ?retry_in,
        error = %error_chain(err),
        "population step failed",
    );
    Action::requeue(retry_in)
}

impl Context {
    /// The context of `populator`'s reconciles, and the stream of the
    /// claims its populations wake.
    fn new(
        populator: Populator,
    ) -> (
        Arc<Self>,
        mpsc::UnboundedReceiver<ObjectRef<PersistentVolumeClaim>>,
    ) {
        let (trigger, triggers) = mpsc::unbounded();
        let reporter = Reporter::from(populator.driver.as_str());
        let context = Context {
            recorder: Recorder::new(populator.client.clone(), reporter),
            client: populator.client,
            driver: populator.driver,
            namespace: populator.namespace,
            populate: populator.populate,
            tasks: Arc::default(),
            failures: Mutex::default(),
            resources: Mutex::default(),
            trigger,
        };
        (Arc::new(context), triggers)
    }

    fn failures(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn resources(&self) -> MutexGuard<'_, HashMap<DataSourceKind, (ApiResource, ApiCapabilities)>> {
        self.resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn claims(&self, namespace: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn primes(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// `namespace/name` of the prime claim of `key`.
    fn prime_of(&self, key: &ClaimKey) -> String {
        format!("{}/{}", self.namespace, plan::prime_name(&key.uid))
    }

    /// One pass of the protocol over `claim`: does the next thing it
    /// needs, or nothing until something changes.
    async fn sync(&self, claim: &PersistentVolumeClaim, key: &ClaimKey) -> Result<Action, Error> {
        let finalized = plan::has_finalizer(claim);
        let deleting = claim.metadata.deletion_timestamp.is_some();
        let spec = claim.spec.as_ref();
        // A claim bound (or pre-bound by its author) is not filled.
        let bound_to = spec.and_then(|s| s.volume_name.as_deref());
        if !finalized {
            // Nothing was created for it yet: only a pending claim the
            // populator would fill can be its. Cheap checks first, as
            // every claim of the cluster comes here.
            if deleting || bound_to.is_some() || spec.is_none_or(|s| s.data_source_ref.is_none()) {
                return Ok(Action::await_change());
            }
            let kinds = self.populate.data_source_kinds().await;
            if plan::claimed_kind(claim, &kinds).is_none() {
                return Ok(Action::await_change());
            }
        }
        // Held, the claim is the driver's whatever its kinds are now, so
        // that its deletion is cleaned up.
        let class = self.class_of(claim).await?;
        if !plan::owns(claim, class.as_ref(), &self.driver, finalized) {
            return Ok(Action::await_change());
        }
        if deleting {
            self.clean_up(claim, key).await?;
            return Ok(Action::await_change());
        }
        if let Some(volume) = bound_to {
            self.finish(claim, key, volume).await?;
            return Ok(Action::await_change());
        }
        if let Some(patch) = plan::finalizer_patch(claim, true) {
            self.patch_claim(key, &patch)
                .await
                .map_err(|source| Error::AddFinalizer {
                    claim: key.clone(),
                    source,
                })?;
            tracing::debug!("finalizer added");
        }
        self.fill(claim, key, class).await
    }

    /// The steps of a claim that holds the finalizer and is neither
    /// bound nor being deleted: from reading its source to the handover.
    /// `class` is its StorageClass (`None`: gone).
    async fn fill(
        &self,
        claim: &PersistentVolumeClaim,
        key: &ClaimKey,
        class: Option<StorageClass>,
    ) -> Result<Action, Error> {
        if let Some(namespace) = plan::foreign_source_namespace(claim) {
            let note = format!(
                "spec.dataSourceRef.namespace {namespace:?} is not the claim's namespace: \
                 this driver populates only from sources in the claim's own namespace"
            );
            self.event(claim, EventType::Warning, reason::REFUSED, note)
                .await;
            return Ok(Action::await_change());
        }
        // Immutable, and set on every claim that got this far.
        let Some(source_ref) = claim.spec.as_ref().and_then(|s| s.data_source_ref.clone()) else {
            return Ok(Action::await_change());
        };
        let kind = DataSourceKind::new(source_ref.api_group.unwrap_or_default(), source_ref.kind);
        let source = self
            .read_source(&key.namespace, &kind, &source_ref.name)
            .await?;
        let Some(class) = class else {
            return Err(Error::ClassMissing {
                claim: key.clone(),
                class: (claim.spec.as_ref())
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default(),
            });
        };
        if plan::waits_for_consumer(&class, claim) {
            tracing::debug!("waiting for the scheduler to select a node");
            return Ok(Action::await_change());
        }
        let prime =
            (self.primes().get_opt(&plan::prime_name(&key.uid)).await).map_err(|source| {
                Error::ReadPrime {
                    prime: self.prime_of(key),
                    source,
                }
            })?;
        let Some(prime) = prime else {
            if let Some(volume) = self.handed_over(key).await? {
                tracing::debug!(%volume, "volume handed over; waiting for the PV controller to bind the claim");
                return Ok(Action::await_change());
            }
            self.create_prime(claim, key).await?;
            return Ok(Action::await_change());
        };
        let Some(volume_name) = prime.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
            tracing::debug!("waiting for the prime claim to be bound");
            return Ok(Action::await_change());
        };
        let Some(volume) = self.read_volume(&volume_name).await? else {
            // Deleted by hand: the prime claim is Lost for good, and a
            // new one starts over.
            tracing::warn!(volume = %volume_name, "the prime claim's volume is gone; replacing the prime claim");
            self.tasks.remove(&key.uid);
            self.delete_prime(key, false).await?;
            return Ok(Action::await_change());
        };
        if plan::claimed_by(&volume, &key.uid) {
            // Handed over by an earlier pass that failed to delete P.
            self.delete_prime(key, false).await?;
            return Ok(Action::await_change());
        }
        let prime_uid = prime.metadata.uid.as_deref().unwrap_or_default();
        if !plan::claimed_by(&volume, prime_uid) {
            // Not P's (the PV controller sets P's volumeName after the
            // volume's claimRef): nothing to fill.
            tracing::warn!(volume = %volume_name, "the prime claim's volume is claimed by another claim");
            return Ok(Action::await_change());
        }
        if prime.metadata.deletion_timestamp.is_some() {
            tracing::debug!("waiting for the prime claim to go");
            return Ok(Action::await_change());
        }
        match self.tasks.state(&key.uid) {
            State::Running => Ok(Action::await_change()),
            State::RetryIn(wait) => Ok(Action::requeue(wait)),
            State::Idle => {
                self.start(claim, key, &volume, &class, (kind, source))
                    .await?;
                Ok(Action::await_change())
            }
            State::Succeeded => self.hand_over(key, &volume).await,
        }
    }

    /// The claim is being deleted: nothing of its population may stay.
    async fn clean_up(&self, claim: &PersistentVolumeClaim, key: &ClaimKey) -> Result<(), Error> {
        self.tasks.remove(&key.uid);
        self.delete_prime(key, true).await?;
        if self.remove_finalizer(claim, key).await? {
            tracing::info!("claim deleted: population stopped and prime claim deleted");
        }
        Ok(())
    }

    /// The claim names `volume`: once the volume names it back, the
    /// population is over.
    async fn finish(
        &self,
        claim: &PersistentVolumeClaim,
        key: &ClaimKey,
        volume: &str,
    ) -> Result<(), Error> {
        let bound = self.read_volume(volume).await?;
        if !bound.is_some_and(|v| plan::claimed_by(&v, &key.uid)) {
            tracing::debug!(%volume, "waiting for the PV controller to bind the claim");
            return Ok(());
        }
        self.delete_prime(key, false).await?;
        self.tasks.remove(&key.uid);
        if self.remove_finalizer(claim, key).await? {
            tracing::info!(%volume, "claim bound to its filled volume");
            let source = plan::source_description(claim);
            let note = format!("volume {volume} filled from {source}");
            self.event(claim, EventType::Normal, reason::POPULATED, note)
                .await;
        }
        Ok(())
    }

    /// Starts filling `volume`, the prime claim's.
    async fn start(
        &self,
        claim: &PersistentVolumeClaim,
        key: &ClaimKey,
        volume: &PersistentVolume,
        class: &StorageClass,
        (kind, source): (DataSourceKind, Value),
    ) -> Result<(), Error> {
        let volume_name = volume.metadata.name.clone().unwrap_or_default();
        let prime = ObjectName {
            namespace: self.namespace.clone(),
            name: plan::prime_name(&key.uid),
        };
        let request = plan::populate_request(
            volume,
            class,
            &self.driver,
            (key.object_name(), prime),
            (kind, source),
        )
        .map_err(|source| Error::Request {
            volume: volume_name.clone(),
            prime: self.prime_of(key),
            source,
        })?;
        let note = format!(
            "filling volume {volume_name} from {}",
            plan::source_description(claim)
        );
        tracing::info!(volume = %volume_name, "populating");
        self.event(claim, EventType::Normal, reason::POPULATING, note)
            .await;

        let populate = Arc::clone(&self.populate);
        let recorder = self.recorder.clone();
        let reference = claim.object_ref(&());
        let trigger = self.trigger.clone();
        let object = ObjectRef::new(&key.name).within(&key.namespace);
        let span = tracing::Span::current();
        let then = move |outcome| {
            async move {
                match outcome {
                    Outcome::Succeeded => tracing::info!(volume = %volume_name, "volume filled"),
                    Outcome::Failed { error, retry_in } => {
                        tracing::warn!(volume = %volume_name, ?retry_in, %error, "populating failed");
                        let event = event(EventType::Warning, reason::FAILED, error.to_string());
                        publish(&recorder, &event, &reference).await;
                    }
                }
                // Closed only when the controller stopped.
                let _ = trigger.unbounded_send(object);
            }
            .instrument(span)
        };
        let work =
            async move { populate.populate(request).await }.instrument(tracing::Span::current());
        self.tasks.spawn(&key.uid, work, then);
        Ok(())
    }

    /// The population succeeded: the volume goes to the claim, unless the
    /// claim is going.
    async fn hand_over(&self, key: &ClaimKey, volume: &PersistentVolume) -> Result<Action, Error> {
        let current = (self.claims(&key.namespace).get_opt(&key.name).await).map_err(|source| {
            Error::ReadClaim {
                claim: key.clone(),
                source,
            }
        })?;
        let current = current.filter(|c| c.metadata.uid.as_deref() == Some(key.uid.as_str()));
        match current {
            Some(claim) if claim.metadata.deletion_timestamp.is_none() => {
                let volume_name = volume.metadata.name.clone().unwrap_or_default();
                let patch = plan::handover_patch(volume, &claim);
                (self
                    .volumes()
                    .patch(&volume_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await)
                    .map_err(|source| Error::Handover {
                        volume: volume_name.clone(),
                        claim: key.clone(),
                        source,
                    })?;
                tracing::info!(volume = %volume_name, "filled volume handed over to the claim");
                self.delete_prime(key, false).await?;
                self.tasks.remove(&key.uid);
            }
            Some(claim) => self.clean_up(&claim, key).await?,
            // Gone with its finalizer (removed by hand): what is left is
            // P, and the volume with it.
            None => {
                self.tasks.remove(&key.uid);
                self.delete_prime(key, true).await?;
            }
        }
        Ok(Action::await_change())
    }

    /// Puts an event on `claim`.
    async fn event(
        &self,
        claim: &PersistentVolumeClaim,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        publish(
            &self.recorder,
            &event(type_, reason, note),
            &claim.object_ref(&()),
        )
        .await;
    }
}

/// An event of the populator.
fn event(type_: EventType, reason: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(plan::event_note(note)),
        action: ACTION.to_owned(),
        secondary: None,
    }
}

/// Publishes `event`: an event that cannot be written is logged, not a
/// reason to stop the protocol.
async fn publish(recorder: &Recorder, event: &Event, reference: &ObjectReference) {
    if let Err(err) = recorder.publish(event, reference).await {
        tracing::warn!(reason = %event.reason, error = %error_chain(&err), "publishing event failed");
    }
}
