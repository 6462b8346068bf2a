//! A fake API server for tests, in the manner of kube-rs's controller-rs
//! fixtures: kube's [`Client`] over a service that logs every request and
//! answers from the canned answers a scenario sets up. Watch requests get a
//! stream that stays open and carries the events the test (or the fake's
//! own pod store) sends.
//!
//! With [`ApiServer::serve_pods`], the fake keeps pods as an API server
//! does: created, read, listed (by label and field selector: equality on
//! `metadata.name`, `metadata.namespace` and `spec.nodeName`),
//! merge-patched (a patch naming a stale `metadata.resourceVersion` is 409
//! Conflict) and deleted (a pod with finalizers is only marked deleted
//! until they are removed), each change a watch event to the watches whose
//! selectors match, and a watch opened after a list gets the changes since
//! that list's resourceVersion. [`ApiServer::expire_watches`] ends every
//! watch with 410 Gone, as an API server does when its watch cache moves
//! on, so the client must list again. A kubelet function of the test moves
//! each new pod on (running, terminated, files written). Interceptors
//! ([`ApiServer::intercept`]) are asked before the pod store, so a
//! scenario can make any request fail; handlers ([`ApiServer::on`]) after
//! it.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt;
use futures::channel::mpsc;
use http::{Method, Request, Response};
use http_body::Frame;
use kube::Client;
use serde_json::{Value, json};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Logged {
    /// `GET`, `POST`, ...
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query string (empty without one).
    pub query: String,
    /// The JSON body, if any.
    pub body: Option<Value>,
}

impl Logged {
    /// Whether this is a watch request.
    pub fn is_watch(&self) -> bool {
        self.query.split('&').any(|p| p == "watch=true")
    }

    /// `METHOD path`, for comparing with a scenario's expected requests.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// A canned answer: status code and JSON body.
pub type Answer = (u16, Value);

type Handler = Box<dyn Fn(&Logged) -> Option<Answer> + Send>;

/// What the kubelet does with a new pod: the merge patches it applies one
/// after the other (each one a `MODIFIED` event), e.g. `Running`, then
/// `Succeeded` with the annotations the node plugin collects.
type Kubelet = Box<dyn Fn(&Value) -> Vec<Value> + Send>;

#[derive(Default)]
struct State {
    log: Vec<Logged>,
    /// Tried newest first; the first to answer wins. Interceptors come
    /// before the pod store, handlers after it.
    interceptors: Vec<Handler>,
    handlers: Vec<Handler>,
    /// Open watches.
    watches: Vec<Watch>,
    /// The pod store, once [`ApiServer::serve_pods`] is called.
    pods: Option<Pods>,
    /// Merge patches another client applies to a pod (by namespace and
    /// name) just before the next PATCH of it is handled.
    concurrent_changes: Vec<((String, String), Value)>,
}

/// An open watch: what it watches and the sender of its stream.
struct Watch {
    path: String,
    /// Its `labelSelector` and `fieldSelector` (empty: everything).
    labels: String,
    fields: String,
    sender: mpsc::UnboundedSender<Bytes>,
}

impl Watch {
    /// Sends `line` (one watch event of `object`) if the watch selects it.
    fn send(&self, path: &str, object: &Value, line: &str) {
        if self.path == path
            && matches_labels(object, &self.labels)
            && matches_fields(object, &self.fields)
        {
            let _ = self.sender.unbounded_send(Bytes::from(line.to_owned()));
        }
    }
}

/// The pods of [`ApiServer::serve_pods`].
struct Pods {
    /// By namespace and name.
    objects: BTreeMap<(String, String), Value>,
    /// The last resourceVersion given out.
    version: u64,
    /// Every change since the last expiry: its resourceVersion, the pod
    /// and its watch line.
    history: Vec<(u64, Value, String)>,
    /// The oldest resourceVersion a watch may start from (410 Gone before).
    oldest: u64,
    kubelet: Kubelet,
}

/// Where every pod watch is: `Api::<Pod>::all`.
const PODS: &str = "/api/v1/pods";

/// The fake API server; clones share it.
#[derive(Clone, Default)]
pub struct ApiServer {
    state: Arc<Mutex<State>>,
}

/// A response body fed by a channel: one chunk per send, ends when every
/// sender is dropped.
struct ChannelBody(mpsc::UnboundedReceiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_next_unpin(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

impl ApiServer {
    /// A fake server and a client talking to it.
    pub fn start() -> (ApiServer, Client) {
        let server = ApiServer::default();
        let serving = server.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let server = serving.clone();
            async move { Ok::<_, Infallible>(server.answer(request).await) }
        });
        (server, Client::new(service, "default"))
    }

    async fn answer(&self, request: Request<kube::client::Body>) -> Response<ChannelBody> {
        use http_body_util_free::collect;
        let (parts, body) = request.into_parts();
        let bytes = collect(body).await;
        let logged = Logged {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body: serde_json::from_slice(&bytes).ok(),
        };
        let (sender, receiver) = mpsc::unbounded();
        let mut state = self.state.lock().unwrap();
        state.log.push(logged.clone());
        if logged.is_watch() {
            let watch = Watch {
                path: logged.path.clone(),
                labels: query_param(&logged.query, "labelSelector").unwrap_or_default(),
                fields: query_param(&logged.query, "fieldSelector").unwrap_or_default(),
                sender,
            };
            if logged.path == PODS
                && let Some(pods) = &state.pods
            {
                let since = query_param(&logged.query, "resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if since != 0 && since < pods.oldest {
                    let gone = gone_event(since);
                    let _ = watch.sender.unbounded_send(Bytes::from(gone));
                    return Response::new(ChannelBody(receiver));
                }
                for (version, pod, line) in &pods.history {
                    if *version > since {
                        watch.send(PODS, pod, line);
                    }
                }
            }
            state.watches.push(watch);
            return Response::new(ChannelBody(receiver));
        }
        let answer = (state.interceptors.iter().rev().find_map(|h| h(&logged)))
            .or_else(|| state.answer_pods(&logged))
            .or_else(|| state.handlers.iter().rev().find_map(|h| h(&logged)));
        let (status, body) = answer.unwrap_or_else(|| not_found(&logged.path));
        let _ = sender.unbounded_send(Bytes::from(body.to_string()));
        drop(sender);
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(ChannelBody(receiver))
            .expect("a valid response")
    }

    /// Answers requests `handler` answers (`None`: not this one); later
    /// handlers are asked first.
    pub fn on(&self, handler: impl Fn(&Logged) -> Option<Answer> + Send + 'static) {
        self.state.lock().unwrap().handlers.push(Box::new(handler));
    }

    /// Like [`on`](Self::on), but asked before the pod store too: a
    /// scenario's way to make a pod request fail (409, 500, ...).
    pub fn intercept(&self, handler: impl Fn(&Logged) -> Option<Answer> + Send + 'static) {
        (self.state.lock().unwrap().interceptors).push(Box::new(handler));
    }

    /// Answers `method path` with `answer` every time.
    pub fn route(&self, method: Method, path: &str, answer: Answer) {
        let path = path.to_owned();
        self.on(move |r| (r.method == method && r.path == path).then(|| answer.clone()));
    }

    /// Sends a watch event (`ADDED`, `MODIFIED`, `DELETED`) of `object` to
    /// every open watch of `path`.
    pub fn send(&self, path: &str, kind: &str, object: &Value) {
        let line = format!("{}\n", json!({"type": kind, "object": object}));
        let state = self.state.lock().unwrap();
        for watch in &state.watches {
            watch.send(path, object, &line);
        }
    }

    /// Ends every open watch with a 410 Gone error event, and forgets the
    /// pod history: a watch from a resourceVersion before now is 410 too,
    /// so clients must list again (an API server whose watch cache moved
    /// on, or that restarted).
    pub fn expire_watches(&self) {
        let mut state = self.state.lock().unwrap();
        for watch in state.watches.drain(..) {
            let _ = (watch.sender).unbounded_send(Bytes::from(gone_event(0)));
        }
        if let Some(pods) = state.pods.as_mut() {
            pods.history.clear();
            pods.oldest = pods.version + 1;
        }
    }

    /// How many watches are open now.
    pub fn open_watches(&self) -> usize {
        self.state.lock().unwrap().watches.len()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    /// Keeps pods from now on (see the module's documentation); `kubelet`
    /// gives the merge patches each new pod goes through.
    pub fn serve_pods(&self, kubelet: impl Fn(&Value) -> Vec<Value> + Send + 'static) {
        self.state.lock().unwrap().pods = Some(Pods {
            objects: BTreeMap::new(),
            version: 1,
            history: Vec::new(),
            oldest: 0,
            kubelet: Box::new(kubelet),
        });
    }

    /// Puts `pod` (with its namespace and name) in the pod store as it is,
    /// as if created earlier: no kubelet.
    pub fn put_pod(&self, pod: Value) {
        let mut state = self.state.lock().unwrap();
        let pods = state.pods.as_mut().expect("serve_pods first");
        let key = (
            pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        pods.put(key, pod, "ADDED", &mut Vec::new());
    }

    /// Another client's write: `change` (a merge patch) is applied to pod
    /// `namespace/name`, with a new resourceVersion, just before the next
    /// PATCH of that pod is handled, as if it came between the patching
    /// client's read and its write.
    pub fn change_before_next_patch(&self, namespace: &str, name: &str, change: Value) {
        let key = (namespace.to_owned(), name.to_owned());
        (self.state.lock().unwrap().concurrent_changes).push((key, change));
    }

    /// The pods the store holds now.
    pub fn pods(&self) -> Vec<Value> {
        let state = self.state.lock().unwrap();
        state
            .pods
            .as_ref()
            .map(|p| p.objects.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The bodies of the pods created so far, in order.
    pub fn created_pods(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == Method::POST && r.path.ends_with("/pods"))
            .filter_map(|r| r.body)
            .collect()
    }
}

impl State {
    /// The pod store's answer to `request`, if it is about pods.
    fn answer_pods(&mut self, request: &Logged) -> Option<Answer> {
        let pods = self.pods.as_mut()?;
        let segments: Vec<&str> = request.path.split('/').collect();
        let (namespace, name) = match segments.as_slice() {
            ["", "api", "v1", "pods"] => (None, None),
            ["", "api", "v1", "namespaces", ns, "pods"] => (Some(*ns), None),
            ["", "api", "v1", "namespaces", ns, "pods", name] => (Some(*ns), Some(*name)),
            _ => return None,
        };
        let key = |name: &str| (namespace.unwrap_or_default().to_owned(), name.to_owned());
        let mut events = Vec::new();
        let answer = match (&request.method, name) {
            (&Method::GET, None) => {
                let selector = query_param(&request.query, "labelSelector").unwrap_or_default();
                let fields = query_param(&request.query, "fieldSelector").unwrap_or_default();
                let items = pods
                    .objects
                    .values()
                    .filter(|pod| namespace.is_none_or(|ns| pod["metadata"]["namespace"] == ns))
                    .filter(|pod| matches_labels(pod, &selector))
                    .filter(|pod| matches_fields(pod, &fields))
                    .cloned()
                    .collect();
                let (status, mut body) = list("Pod", items);
                body["metadata"]["resourceVersion"] = json!(pods.version.to_string());
                (status, body)
            }
            (&Method::GET, Some(name)) => match pods.objects.get(&key(name)) {
                Some(pod) => (200, pod.clone()),
                None => not_found(&request.path),
            },
            (&Method::POST, None) => {
                let mut pod = request.body.clone().unwrap_or_default();
                let name = pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if pods.objects.contains_key(&key(&name)) {
                    return Some(status(409, "AlreadyExists", "pod exists"));
                }
                pod["metadata"]["namespace"] = json!(namespace);
                pod["metadata"]["uid"] = json!(format!("uid-{name}"));
                let created = pods.put(key(&name), pod, "ADDED", &mut events);
                for patch in (pods.kubelet)(&created) {
                    let mut pod = pods.objects[&key(&name)].clone();
                    merge(&mut pod, &patch);
                    pods.put(key(&name), pod, "MODIFIED", &mut events);
                }
                (201, created)
            }
            (&Method::PATCH, Some(name)) => {
                let (changes, others) = std::mem::take(&mut self.concurrent_changes)
                    .into_iter()
                    .partition(|(changed, _)| *changed == key(name));
                self.concurrent_changes = others;
                for (_, change) in changes {
                    if let Some(mut pod) = pods.objects.get(&key(name)).cloned() {
                        merge(&mut pod, &change);
                        pods.put(key(name), pod, "MODIFIED", &mut events);
                    }
                }
                match pods.objects.get(&key(name)).cloned() {
                    Some(mut pod) => {
                        let patch = request.body.clone().unwrap_or_default();
                        // Optimistic concurrency: a patch naming a version is
                        // applied only to that version.
                        let wanted = &patch["metadata"]["resourceVersion"];
                        if !wanted.is_null() && *wanted != pod["metadata"]["resourceVersion"] {
                            return Some(status(409, "Conflict", "the object has been modified"));
                        }
                        merge(&mut pod, &patch);
                        (200, pods.put_or_release(key(name), pod, &mut events))
                    }
                    None => not_found(&request.path),
                }
            }
            (&Method::DELETE, Some(name)) => match pods.objects.get(&key(name)).cloned() {
                Some(mut pod) => {
                    if pod["metadata"]["deletionTimestamp"].is_null() {
                        pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                    }
                    (200, pods.put_or_release(key(name), pod, &mut events))
                }
                None => not_found(&request.path),
            },
            _ => return None,
        };
        for (pod, line) in events {
            for watch in &self.watches {
                watch.send(PODS, &pod, &line);
            }
        }
        Some(answer)
    }
}

impl Pods {
    /// Stores `pod` with a new resourceVersion and records the event.
    fn put(
        &mut self,
        key: (String, String),
        mut pod: Value,
        kind: &str,
        events: &mut Vec<(Value, String)>,
    ) -> Value {
        self.version += 1;
        pod["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.record(kind, &pod, events);
        if kind == "DELETED" {
            self.objects.remove(&key);
        } else {
            self.objects.insert(key, pod.clone());
        }
        pod
    }

    /// Stores `pod`, or removes it when it is marked deleted and has no
    /// finalizers left.
    fn put_or_release(
        &mut self,
        key: (String, String),
        pod: Value,
        events: &mut Vec<(Value, String)>,
    ) -> Value {
        let finalizers = pod["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        let gone = !pod["metadata"]["deletionTimestamp"].is_null() && !finalizers;
        self.put(key, pod, if gone { "DELETED" } else { "MODIFIED" }, events)
    }

    fn record(&mut self, kind: &str, pod: &Value, events: &mut Vec<(Value, String)>) {
        let line = format!("{}\n", json!({"type": kind, "object": pod}));
        self.history.push((self.version, pod.clone(), line.clone()));
        events.push((pod.clone(), line));
    }
}

/// A JSON merge patch (RFC 7386) of `patch` onto `target`.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// Whether `pod` has every `key=value` of an equality label selector.
fn matches_labels(pod: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let (key, value) = term.split_once('=').unwrap_or((term, ""));
        match pod["metadata"]["labels"].get(key) {
            Some(label) => value.is_empty() || label == value,
            None => false,
        }
    })
}

/// Whether `object` has every `field=value` (or `field==value`) of a field
/// selector, for the fields the API server selects pods by.
fn matches_fields(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let (field, value) = match term.split_once("==") {
            Some(pair) => pair,
            None => term.split_once('=').unwrap_or((term, "")),
        };
        let actual = match field {
            "metadata.name" => &object["metadata"]["name"],
            "metadata.namespace" => &object["metadata"]["namespace"],
            "spec.nodeName" => &object["spec"]["nodeName"],
            other => panic!("the fake API server cannot select by field {other:?}"),
        };
        actual.as_str().unwrap_or_default() == value
    })
}

/// The watch line of a 410 Gone error event.
fn gone_event(since: u64) -> String {
    let (_, status) = status(
        410,
        "Expired",
        &format!("too old resource version: {since}"),
    );
    format!("{}\n", json!({"type": "ERROR", "object": status}))
}

/// The decoded value of `name` in a query string.
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| percent_decode(value))
    })
}

/// `%XX` and `+` of a form-encoded value.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `List` answer of `items`.
pub fn list(kind: &str, items: Vec<Value>) -> Answer {
    (
        200,
        json!({
            "apiVersion": "v1",
            "kind": format!("{kind}List"),
            "metadata": {"resourceVersion": "1"},
            "items": items,
        }),
    )
}

/// A `Status` answer of `code`.
pub fn status(code: u16, reason: &str, message: &str) -> Answer {
    (
        code,
        json!({
            "apiVersion": "v1", "kind": "Status", "status": "Failure",
            "code": code, "reason": reason, "message": message,
            "metadata": {},
        }),
    )
}

fn not_found(path: &str) -> Answer {
    status(404, "NotFound", &format!("{path} not found"))
}

/// Asserts that `actual` is the object in the golden file `path` (relative
/// to the pav crate): an object written out and checked by hand once, so a
/// scenario compares what the code builds with a literal, not with what
/// the same code builds again. `PAV_BLESS=1` rewrites the file instead;
/// review its diff before committing it.
pub fn assert_golden(path: &str, actual: &Value) {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("PAV_BLESS").is_some() {
        let text = serde_json::to_string_pretty(actual).expect("JSON") + "\n";
        std::fs::write(&file, text).expect("writing the golden file");
        return;
    }
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (PAV_BLESS=1 writes it)", file.display()));
    let expected: Value = serde_json::from_str(&text).expect("the golden file holds JSON");
    assert!(
        *actual == expected,
        "{} differs from what was built:\n{}\n(if the change is meant, PAV_BLESS=1 rewrites it; review the diff)",
        file.display(),
        serde_json::to_string_pretty(actual).expect("JSON")
    );
}

/// The driver context of provisioner `p` in namespace `pav` over
/// `client`, as the scenarios use it (30 s phase timeout, no pods
/// directory).
pub fn driver_context(client: Client) -> super::context::DriverContext {
    super::context::DriverContext::new(
        client,
        "p".into(),
        "pav".into(),
        std::time::Duration::from_secs(30),
        Arc::new(super::metrics::Metrics::default()),
        None,
    )
}

/// Labels of an object as a map, for building fixtures.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Reading a request body without another crate.
mod http_body_util_free {
    use std::future::poll_fn;
    use std::pin::Pin;

    use bytes::Bytes;
    use http_body::Body;

    /// All of `body`'s data.
    pub async fn collect(mut body: kube::client::Body) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            if let Ok(data) = frame.map(|f| f.into_data().unwrap_or_else(|_| Bytes::new())) {
                out.extend_from_slice(&data);
            } else {
                break;
            }
        }
        out
    }
}

/// The kubelet and node plugin of a scenario, for
/// [`ApiServer::serve_pods`]: every pod runs, then ends as `end` says for
/// its phase label.
pub fn pods_ending(
    end: impl Fn(&str) -> Value + Send + 'static,
) -> impl Fn(&Value) -> Vec<Value> + Send + 'static {
    move |pod| {
        let phase = pod["metadata"]["labels"][crate::pods::LABEL_PHASE]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        vec![
            serde_json::json!({"status": {"phase": "Running"}}),
            end(&phase),
        ]
    }
}
