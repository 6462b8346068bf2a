//! A fake API server for tests, in the manner of kube-rs's controller-rs
//! fixtures: kube's [`Client`] over a service that logs every request and
//! answers from the canned answers a scenario sets up. Watch requests get a
//! stream that stays open and carries the events the test (or the fake's
//! own pod store) sends.

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

#[derive(Default)]
struct State {
    log: Vec<Logged>,
    /// Tried newest first; the first to answer wins.
    handlers: Vec<Handler>,
    /// Open watches: path and the sender of their stream.
    watches: Vec<(String, mpsc::UnboundedSender<Bytes>)>,
}

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
            state.watches.push((logged.path.clone(), sender));
            return Response::new(ChannelBody(receiver));
        }
        let answer = state.handlers.iter().rev().find_map(|h| h(&logged));
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
        for (watched, sender) in &state.watches {
            if watched == path {
                let _ = sender.unbounded_send(Bytes::from(line.clone()));
            }
        }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }
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
