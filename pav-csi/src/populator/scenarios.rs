//! The protocol against a fake API server: what each pass over a claim
//! reads and writes, with this test playing the external-provisioner and
//! the PV controller between passes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use pav_sdk::PopulateRequest;
use serde_json::json;

use super::*;

const DRIVER: &str = "pop.example.com";
const CLAIM: &str = "/api/v1/namespaces/apps/persistentvolumeclaims/data";
const PRIME: &str = "/api/v1/namespaces/pav/persistentvolumeclaims/prime-u-1";
const PRIMES: &str = "/api/v1/namespaces/pav/persistentvolumeclaims";
const CLASS: &str = "/apis/storage.k8s.io/v1/storageclasses/fast";
const SEED: &str = "/apis/example.com/v1/namespaces/apps/seeds/seed";
const VOLUME: &str = "/api/v1/persistentvolumes/pvc-9";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/apps/events";

/// A request the fake answered.
#[derive(Debug, Clone)]
struct Logged {
    method: Method,
    path: String,
    query: String,
    body: Option<Value>,
}

impl Logged {
    fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

#[derive(Debug, Default)]
struct Store {
    /// Objects by path.
    objects: BTreeMap<String, Value>,
    /// Paths answered 403.
    forbidden: Vec<String>,
    log: Vec<Logged>,
    version: u64,
}

/// A REST store: GET, list by label, POST, merge PATCH (409 on a stale
/// `resourceVersion`) and DELETE of JSON objects by path.
#[derive(Debug, Clone, Default)]
struct Fake(Arc<Mutex<Store>>);

fn status(code: StatusCode, reason: &str) -> (StatusCode, Value) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "code": code.as_u16(), "message": format!("{reason} here"),
    });
    (code, body)
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

impl Fake {
    fn client(&self) -> Client {
        let fake = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let fake = fake.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let logged = Logged {
                    method: parts.method,
                    path: parts.uri.path().to_owned(),
                    query: parts.uri.query().unwrap_or_default().to_owned(),
                    body: serde_json::from_slice(&bytes).ok(),
                };
                let (code, body) = fake.answer(logged);
                let mut response = Response::new(Body::from(body.to_string().into_bytes()));
                *response.status_mut() = code;
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        Client::new(service, "default")
    }

    fn state(&self) -> MutexGuard<'_, Store> {
        self.0.lock().unwrap()
    }

    fn answer(&self, request: Logged) -> (StatusCode, Value) {
        let mut state = self.state();
        state.log.push(request.clone());
        if state.forbidden.contains(&request.path) {
            return status(StatusCode::FORBIDDEN, "Forbidden");
        }
        state.version += 1;
        let version = state.version.to_string();
        let path = request.path;
        match request.method {
            Method::GET if request.query.contains("labelSelector") => {
                let selector = (request.query.split('&'))
                    .find_map(|p| p.strip_prefix("labelSelector="))
                    .unwrap_or_default()
                    .replace("%2F", "/")
                    .replace("%3D", "=");
                let (key, value) = selector.split_once('=').unwrap();
                let items: Vec<Value> = (state.objects.iter())
                    .filter(|(at, _)| at.rsplit_once('/').is_some_and(|(c, _)| c == path))
                    .map(|(_, object)| object)
                    .filter(|object| object["metadata"]["labels"][key] == value)
                    .cloned()
                    .collect();
                let list =
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items});
                (StatusCode::OK, list)
            }
            Method::GET => match state.objects.get(&path) {
                Some(object) => (StatusCode::OK, object.clone()),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            Method::POST => {
                let mut object = request.body.unwrap();
                let name = object["metadata"]["name"].as_str().unwrap().to_owned();
                let at = format!("{path}/{name}");
                if state.objects.contains_key(&at) {
                    return status(StatusCode::CONFLICT, "AlreadyExists");
                }
                object["metadata"]["uid"] = json!(format!("uid-{name}"));
                object["metadata"]["resourceVersion"] = json!(version);
                state.objects.insert(at, object.clone());
                (StatusCode::CREATED, object)
            }
            Method::PATCH => {
                let patch = request.body.unwrap();
                let Some(object) = state.objects.get_mut(&path) else {
                    return status(StatusCode::NOT_FOUND, "NotFound");
                };
                let expected = &patch["metadata"]["resourceVersion"];
                if expected.is_string() && *expected != object["metadata"]["resourceVersion"] {
                    return status(StatusCode::CONFLICT, "Conflict");
                }
                merge(object, &patch);
                object["metadata"]["resourceVersion"] = json!(version);
                (StatusCode::OK, object.clone())
            }
            Method::DELETE => match state.objects.remove(&path) {
                Some(object) => (StatusCode::OK, object),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }

    fn put(&self, path: &str, object: Value) {
        self.state().objects.insert(path.to_owned(), object);
    }

    fn get(&self, path: &str) -> Option<Value> {
        self.state().objects.get(path).cloned()
    }

    fn change(&self, path: &str, patch: Value) {
        merge(self.state().objects.get_mut(path).unwrap(), &patch);
    }

    fn forbid(&self, path: &str) {
        self.state().forbidden.push(path.to_owned());
    }

    /// The requests since the last call.
    fn take(&self) -> Vec<Logged> {
        std::mem::take(&mut self.state().log)
    }

    /// `(type, reason, note)` of the events posted on the claim.
    fn events(&self) -> Vec<(String, String, String)> {
        let state = self.state();
        let mut events: Vec<&Value> = (state.objects.iter())
            .filter(|(at, _)| at.starts_with(EVENTS))
            .map(|(_, event)| event)
            .collect();
        events.sort_by_key(|event| {
            let version = event["metadata"]["resourceVersion"].as_str();
            version.and_then(|v| v.parse::<u64>().ok())
        });
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        (events.into_iter())
            .map(|e| (text(&e["type"]), text(&e["reason"]), text(&e["note"])))
            .collect()
    }
}

/// Writes made by `requests` (events aside), as `METHOD path` lines.
fn writes(requests: &[Logged]) -> Vec<String> {
    (requests.iter())
        .filter(|r| r.method != Method::GET && !r.path.starts_with(EVENTS))
        .map(Logged::line)
        .collect()
}

/// A driver that fills volumes from Seeds (its custom resource), ending as `result` says
/// (or never, with `hang`).
#[derive(Default)]
struct Filler {
    requests: Mutex<Vec<PopulateRequest>>,
    result: Mutex<Option<pav_sdk::Error>>,
    hang: AtomicBool,
    /// Set when a hanging population is dropped (aborted).
    dropped: Arc<AtomicBool>,
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl Populate for Filler {
    async fn data_source_kinds(&self) -> Vec<DataSourceKind> {
        vec![DataSourceKind::new("example.com", "Seed")]
    }

    async fn populate(&self, req: PopulateRequest) -> pav_sdk::Result<()> {
        self.requests.lock().unwrap().push(req);
        if self.hang.load(Ordering::SeqCst) {
            let _guard = SetOnDrop(Arc::clone(&self.dropped));
            std::future::pending::<()>().await;
        }
        match self.result.lock().unwrap().take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

struct Scenario {
    fake: Fake,
    filler: Arc<Filler>,
    context: Arc<Context>,
    triggers: mpsc::UnboundedReceiver<ObjectRef<PersistentVolumeClaim>>,
}

/// A cluster with StorageClass `fast` of the driver (binding `mode`),
/// Seed apps/seed (a custom resource) and claim apps/data of `fast` from
/// it.
fn scenario(mode: &str, claim_changes: Value) -> Scenario {
    let fake = Fake::default();
    fake.put(
        CLASS,
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "fast"},
            "provisioner": DRIVER, "volumeBindingMode": mode, "parameters": {"tier": "gold"},
        }),
    );
    fake.put(
        "/apis",
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
            "name": "example.com",
            "versions": [{"groupVersion": "example.com/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "example.com/v1", "version": "v1"},
        }]}),
    );
    fake.put(
        "/apis/example.com/v1",
        json!({"kind": "APIResourceList", "groupVersion": "example.com/v1", "resources": [
            {"name": "seeds", "singularName": "seed", "namespaced": true,
             "kind": "Seed", "verbs": ["get", "list"]},
        ]}),
    );
    fake.put(
        SEED,
        json!({"apiVersion": "example.com/v1", "kind": "Seed",
               "metadata": {"namespace": "apps", "name": "seed"}, "data": {"a": "1"}}),
    );
    let mut claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"namespace": "apps", "name": "data", "uid": "u-1", "resourceVersion": "1",
                     "finalizers": ["kubernetes.io/pvc-protection"]},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "fast",
            "dataSourceRef": {"apiGroup": "example.com", "kind": "Seed", "name": "seed"},
        },
    });
    merge(&mut claim, &claim_changes);
    fake.put(CLAIM, claim);
    let filler = Arc::new(Filler::default());
    let populate: Arc<dyn Populate> = filler.clone();
    let (context, triggers) = Context::new(Populator::new(fake.client(), DRIVER, "pav", populate));
    Scenario {
        fake,
        filler,
        context,
        triggers,
    }
}

impl Scenario {
    fn claim(&self) -> PersistentVolumeClaim {
        serde_json::from_value(self.fake.get(CLAIM).unwrap()).unwrap()
    }

    /// One pass over the claim as it is now.
    async fn sync(&self) -> Result<Action, Error> {
        let claim = self.claim();
        self.context
            .sync(&claim, &ClaimKey::of(&claim).unwrap())
            .await
    }

    /// One pass as the controller runs it, events of failures included.
    async fn reconcile(&self) -> Result<Action, Error> {
        reconcile(Arc::new(self.claim()), Arc::clone(&self.context)).await
    }

    /// What external-provisioner and the PV controller do: a volume for
    /// the prime claim, bound to it.
    fn provision_prime(&self) {
        let prime_uid = self.fake.get(PRIME).unwrap()["metadata"]["uid"].clone();
        self.fake.put(
            VOLUME,
            json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "pvc-9", "resourceVersion": "5"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "csi": {"driver": DRIVER, "volumeHandle": "vol-9"},
                    "claimRef": {"namespace": "pav", "name": "prime-u-1", "uid": prime_uid},
                },
            }),
        );
        self.fake
            .change(PRIME, json!({"spec": {"volumeName": "pvc-9"}}));
    }

    /// Waits for the population's end to wake the claim.
    async fn woken(&mut self) {
        let woken = self.triggers.next().await.unwrap();
        assert_eq!(woken, ObjectRef::new("data").within("apps"));
    }

    fn finalizers(&self) -> Value {
        self.fake.get(CLAIM).unwrap()["metadata"]["finalizers"].clone()
    }
}

fn normal(reason: &str, note: &str) -> (String, String, String) {
    ("Normal".into(), reason.into(), note.into())
}

#[tokio::test]
async fn a_claim_of_another_driver_is_never_touched() {
    let s = scenario("Immediate", json!({}));
    s.fake
        .change(CLASS, json!({"provisioner": "other.example.com"}));
    assert_eq!(s.sync().await.unwrap(), Action::await_change());
    let other_kind = scenario(
        "Immediate",
        json!({"spec": {"dataSourceRef": {"kind": "Secret"}}}),
    );
    assert_eq!(other_kind.sync().await.unwrap(), Action::await_change());
    for s in [s, other_kind] {
        assert_eq!(writes(&s.fake.take()), Vec::<String>::new());
        assert!(s.fake.events().is_empty());
    }
}

#[tokio::test]
async fn a_claim_another_drivers_populator_holds_is_left_to_it() {
    // Every populator shares the finalizer: the class says whose it is.
    let held = json!({"metadata": {"finalizers": [FINALIZER],
                                   "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    let s = scenario("Immediate", held.clone());
    s.fake
        .change(CLASS, json!({"provisioner": "other.example.com"}));
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take()), Vec::<String>::new());

    // Its class gone, the provisioner the PV controller annotated says it.
    let annotated = |driver: &str| {
        let mut changes = held.clone();
        merge(
            &mut changes,
            &json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-provisioner": driver}}}),
        );
        changes
    };
    let s = scenario("Immediate", annotated("other.example.com"));
    s.fake.state().objects.remove(CLASS);
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take()), Vec::<String>::new());
    let s = scenario("Immediate", annotated(DRIVER));
    s.fake.state().objects.remove(CLASS);
    s.sync().await.unwrap();
    assert_eq!(
        writes(&s.fake.take()),
        [format!("DELETE {PRIME}"), format!("PATCH {CLAIM}")]
    );
}

#[tokio::test]
async fn a_bound_or_plain_claim_costs_no_request() {
    for changes in [
        json!({"spec": {"volumeName": "pvc-1"}}),
        json!({"spec": {"dataSourceRef": null}}),
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    ] {
        let s = scenario("Immediate", changes);
        assert_eq!(s.sync().await.unwrap(), Action::await_change());
        assert!(s.fake.take().is_empty());
    }
}

#[tokio::test]
async fn a_prime_claim_whose_volume_went_is_replaced() {
    let s = scenario("Immediate", json!({}));
    s.sync().await.unwrap();
    s.provision_prime();
    s.fake.state().objects.remove(VOLUME);
    s.fake.take();
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take()), [format!("DELETE {PRIME}")]);
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take()), [format!("POST {PRIMES}")]);
}

#[tokio::test]
async fn a_claim_is_filled_handed_over_and_released() {
    let mut s = scenario("Immediate", json!({}));

    // The finalizer first, then the prime claim.
    s.sync().await.unwrap();
    assert_eq!(
        writes(&s.fake.take()),
        [format!("PATCH {CLAIM}"), format!("POST {PRIMES}")]
    );
    assert_eq!(
        s.finalizers(),
        json!(["kubernetes.io/pvc-protection", FINALIZER])
    );
    let prime = s.fake.get(PRIME).unwrap();
    assert_eq!(prime["metadata"]["labels"], json!({PRIME_OF_LABEL: "u-1"}));
    assert_eq!(
        prime["metadata"]["annotations"],
        json!({CLAIM_ANNOTATION: "apps/data"})
    );
    assert_eq!(
        prime["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
               "storageClassName": "fast"})
    );

    // Not bound yet: nothing more.
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take()), Vec::<String>::new());

    s.provision_prime();
    s.sync().await.unwrap();
    s.woken().await;
    let request = s.filler.requests.lock().unwrap().pop().unwrap();
    assert_eq!(request.handle.as_str(), "vol-9");
    assert_eq!(request.capacity, 1 << 30);
    assert_eq!(
        request.parameters.get("tier").map(String::as_str),
        Some("gold")
    );
    assert_eq!(request.claim.to_string(), "apps/data");
    assert_eq!(request.prime_claim.to_string(), "pav/prime-u-1");
    assert_eq!(request.source["data"], json!({"a": "1"}));
    s.fake.take();

    // The handover: the volume names the claim, the prime claim goes.
    s.sync().await.unwrap();
    assert_eq!(
        writes(&s.fake.take()),
        [format!("PATCH {VOLUME}"), format!("DELETE {PRIME}")]
    );
    let volume = s.fake.get(VOLUME).unwrap();
    assert_eq!(
        volume["metadata"]["labels"],
        json!({POPULATED_FOR_LABEL: "u-1"})
    );
    let claim_ref = &volume["spec"]["claimRef"];
    assert_eq!(
        (
            &claim_ref["namespace"],
            &claim_ref["name"],
            &claim_ref["uid"],
            &claim_ref["kind"]
        ),
        (
            &json!("apps"),
            &json!("data"),
            &json!("u-1"),
            &json!("PersistentVolumeClaim")
        )
    );

    // Before the PV controller binds the claim, no second prime claim.
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take()), Vec::<String>::new());

    s.fake
        .change(CLAIM, json!({"spec": {"volumeName": "pvc-9"}}));
    s.sync().await.unwrap();
    assert_eq!(
        writes(&s.fake.take()),
        [format!("DELETE {PRIME}"), format!("PATCH {CLAIM}")]
    );
    assert_eq!(s.finalizers(), json!(["kubernetes.io/pvc-protection"]));
    // Bound and released: nothing more, and no second event.
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take()), Vec::<String>::new());
    assert_eq!(
        s.fake.events(),
        [
            normal(
                "Provisioning",
                "provisioning an empty volume for pav/prime-u-1"
            ),
            normal(
                "Populating",
                "filling volume pvc-9 from Seed.example.com seed"
            ),
            normal(
                "Populated",
                "volume pvc-9 filled from Seed.example.com seed"
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_population_is_retried_with_backoff_and_a_warning() {
    let mut s = scenario("Immediate", json!({}));
    s.sync().await.unwrap();
    s.provision_prime();
    *s.filler.result.lock().unwrap() = Some(pav_sdk::Error::Unavailable("tape jammed".into()));
    s.sync().await.unwrap();
    s.woken().await;
    let (kind, reason, note) = s.fake.events().pop().unwrap();
    assert_eq!(
        (kind.as_str(), reason.as_str()),
        ("Warning", reason::FAILED)
    );
    assert_eq!(note, "unavailable: tape jammed");

    // Not before its time, and no handover.
    s.fake.take();
    assert_eq!(
        s.sync().await.unwrap(),
        Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(writes(&s.fake.take()), Vec::<String>::new());
    tokio::time::advance(Duration::from_secs(5)).await;
    s.sync().await.unwrap();
    s.woken().await;
    assert_eq!(s.filler.requests.lock().unwrap().len(), 2);
    s.sync().await.unwrap();
    assert_eq!(writes(&s.fake.take())[0], format!("PATCH {VOLUME}"));
}

#[tokio::test]
async fn deleting_the_claim_aborts_the_population_and_deletes_the_prime_claim() {
    let s = scenario("Immediate", json!({}));
    s.sync().await.unwrap();
    s.provision_prime();
    s.filler.hang.store(true, Ordering::SeqCst);
    s.sync().await.unwrap();
    while s.filler.requests.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    s.fake.take();

    s.fake.change(
        CLAIM,
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    );
    s.sync().await.unwrap();
    let requests = s.fake.take();
    assert_eq!(
        writes(&requests),
        [format!("DELETE {PRIME}"), format!("PATCH {CLAIM}")]
    );
    let delete = requests
        .iter()
        .find(|r| r.method == Method::DELETE)
        .unwrap();
    assert_eq!(
        delete.body.as_ref().unwrap()["propagationPolicy"],
        "Foreground"
    );
    assert_eq!(s.finalizers(), json!(["kubernetes.io/pvc-protection"]));
    assert_eq!(s.context.tasks.state("u-1"), State::Idle);
    while !s.filler.dropped.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    // The volume was never handed over.
    assert_eq!(
        s.fake.get(VOLUME).unwrap()["spec"]["claimRef"]["name"],
        "prime-u-1"
    );
}

#[tokio::test]
async fn a_claim_deleted_during_a_successful_population_gets_no_volume() {
    let mut s = scenario("Immediate", json!({}));
    s.sync().await.unwrap();
    s.provision_prime();
    s.sync().await.unwrap();
    s.woken().await;
    s.fake.take();
    // Deleted after the controller's copy was taken, as the handover
    // reads the claim again.
    let stale = s.claim();
    s.fake.change(
        CLAIM,
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    );
    s.context
        .sync(&stale, &ClaimKey::of(&stale).unwrap())
        .await
        .unwrap();
    assert_eq!(
        writes(&s.fake.take()),
        [format!("DELETE {PRIME}"), format!("PATCH {CLAIM}")]
    );
    assert_eq!(
        s.fake.get(VOLUME).unwrap()["spec"]["claimRef"]["name"],
        "prime-u-1"
    );
}

#[tokio::test]
async fn a_missing_or_forbidden_source_waits_with_a_warning() {
    let s = scenario(
        "Immediate",
        json!({"spec": {"dataSourceRef": {"name": "later"}}}),
    );
    let err = s.reconcile().await.unwrap_err();
    assert!(matches!(err, Error::SourceMissing { .. }), "{err}");
    assert_eq!(
        writes(&s.fake.take()),
        [format!("PATCH {CLAIM}")],
        "the finalizer only"
    );
    assert_eq!(
        s.fake.events(),
        [(
            "Warning".into(),
            reason::WAITING.into(),
            "Seed.example.com apps/later not found".into()
        )]
    );

    let s = scenario("Immediate", json!({}));
    s.fake.forbid(SEED);
    let err = s.reconcile().await.unwrap_err();
    assert!(matches!(err, Error::SourceForbidden { .. }), "{err}");
    let (_, reason, note) = s.fake.events().pop().unwrap();
    assert_eq!(reason, reason::FORBIDDEN);
    assert_eq!(
        note,
        "reading Seed.example.com apps/seed is forbidden: grant get on seeds.example.com to \
         this driver's controller: Forbidden here"
    );
    assert!(s.fake.get(PRIME).is_none());
}

#[tokio::test]
async fn a_source_in_another_namespace_is_refused() {
    let s = scenario(
        "Immediate",
        json!({"spec": {"dataSourceRef": {"namespace": "vault"}}}),
    );
    assert_eq!(s.sync().await.unwrap(), Action::await_change());
    assert_eq!(writes(&s.fake.take()), [format!("PATCH {CLAIM}")]);
    let (kind, reason, note) = s.fake.events().pop().unwrap();
    assert_eq!(
        (kind.as_str(), reason.as_str()),
        ("Warning", reason::REFUSED)
    );
    assert!(
        note.starts_with("spec.dataSourceRef.namespace \"vault\""),
        "{note}"
    );
}

#[tokio::test]
async fn a_late_binding_claim_waits_for_the_scheduler() {
    let s = scenario("WaitForFirstConsumer", json!({}));
    s.sync().await.unwrap();
    assert!(s.fake.get(PRIME).is_none());
    s.fake.change(
        CLAIM,
        json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-3"}}}),
    );
    s.sync().await.unwrap();
    let prime = s.fake.get(PRIME).unwrap();
    assert_eq!(
        prime["metadata"]["annotations"]["volume.kubernetes.io/selected-node"],
        "node-3"
    );
}

#[tokio::test]
async fn a_stale_claim_conflicts_without_an_event() {
    let s = scenario("Immediate", json!({}));
    let stale = s.claim();
    s.fake
        .change(CLAIM, json!({"metadata": {"resourceVersion": "2"}}));
    let err = reconcile(Arc::new(stale), Arc::clone(&s.context))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AddFinalizer { .. }), "{err}");
    assert!(s.fake.events().is_empty());
    assert_eq!(s.finalizers(), json!(["kubernetes.io/pvc-protection"]));
}
