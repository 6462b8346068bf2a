//! Every call runs to completion, whatever its client does.
//!
//! tonic drops a handler's future when the client's deadline passes or the
//! client cancels (`grpc-timeout`, `RST_STREAM`), and with it whatever the
//! handler was awaiting: a provisioner's Stage would stop half-way while a
//! child process it started keeps writing, and the per-volume guard would
//! be released, letting a NodeUnstageVolume run alongside it. Kubelet and
//! the sidecars retry with the same request after a deadline, so the
//! repeat must find the first call still holding its volume (`ABORTED`)
//! and, once it ends, its outcome.
//!
//! [`RunToCompletionLayer`] polls each call where tonic polls it, so an
//! answer costs no hand-off to another task (on a 2-vCPU machine each
//! hand-off between tasks on different threads costs tens of µs); a call
//! dropped unfinished moves, as it is, to a task of its own that finishes
//! it. A handler that panics is answered `INTERNAL`.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service};

/// Runs every call of the wrapped service to completion (see the module).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunToCompletionLayer;

impl<S> Layer<S> for RunToCompletionLayer {
    type Service = RunToCompletion<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RunToCompletion { inner }
    }
}

/// See [`RunToCompletionLayer`].
#[derive(Debug, Clone)]
pub(crate) struct RunToCompletion<S> {
    inner: S,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, Request> Service<Request> for RunToCompletion<S>
where
    S: Service<Request>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let call = Completing {
            call: Some(Box::pin(self.inner.call(request))),
        };
        Box::pin(async move {
            match call.await {
                Ok(answer) => answer.map_err(Into::into),
                // tonic's error recovery turns a Status error into an
                // answer with its code.
                Err(panic) => Err(Box::new(crate::error::panicked(&*panic)) as BoxError),
            }
        })
    }
}

/// A call polled in place that, dropped before it ends, goes on in a task
/// of its own; a panic of the call is its output.
struct Completing<F: Future<Output: Send + 'static> + Send + 'static> {
    /// `None` once it ended.
    call: Option<Pin<Box<F>>>,
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Future for Completing<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let call = (self.call.as_mut()).expect("a call polled after it ended");
        let answer = match std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(answer)) => Ok(answer),
            Err(panic) => Err(panic),
        };
        // Ended, or panicked: a call is never resumed from the state a
        // panic left it in.
        self.call = None;
        Poll::Ready(answer)
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Drop for Completing<F> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            // Outside a runtime (it is shutting down) nothing could run
            // the rest.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(call);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::sync::{Notify, oneshot};

    use super::*;

    /// A service whose call waits for `go`, then reports on `done`: only
    /// the call holds the sender, so `done` fails once the call is dropped
    /// unfinished.
    struct Gated {
        go: Arc<Notify>,
        done: Mutex<Option<oneshot::Sender<()>>>,
    }

    impl Service<()> for Gated {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<(), Self::Error>> + Send>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _request: ()) -> Self::Future {
            let (go, done) = (self.go.clone(), self.done.lock().unwrap().take());
            Box::pin(async move {
                go.notified().await;
                if let Some(done) = done {
                    let _ = done.send(());
                }
                Ok(())
            })
        }
    }

    /// A call of a [`Gated`] service through the layer, the gate to open
    /// and the receiver of its end. The service itself is dropped.
    fn gated_call() -> (
        <RunToCompletion<Gated> as Service<()>>::Future,
        Arc<Notify>,
        oneshot::Receiver<()>,
    ) {
        let (go, (done, finished)) = (Arc::new(Notify::new()), oneshot::channel());
        let mut service = RunToCompletionLayer.layer(Gated {
            go: go.clone(),
            done: Mutex::new(Some(done)),
        });
        (service.call(()), go, finished)
    }

    #[tokio::test]
    async fn a_call_whose_caller_gives_up_at_once_still_finishes() {
        let (call, go, finished) = gated_call();
        // The caller gives up before polling, as tonic does when a
        // deadline has passed.
        drop(call);
        go.notify_one();
        assert!(finished.await.is_ok(), "the call never ran");
    }

    #[tokio::test]
    async fn a_call_whose_caller_gives_up_half_way_still_finishes() {
        let (mut call, go, finished) = gated_call();
        // Polled once (it waits at the gate), then given up.
        let waker = futures::task::noop_waker();
        let polled = Pin::new(&mut call).poll(&mut Context::from_waker(&waker));
        assert!(
            polled.is_pending(),
            "the call ended before its caller gave up"
        );
        drop(call);
        go.notify_one();
        assert!(finished.await.is_ok(), "the call stopped half-way");
    }

    /// A call that ends without waiting answers in its caller's poll: no
    /// task of its own, so no hand-off.
    #[tokio::test]
    async fn a_call_that_is_ready_answers_in_place() {
        let mut service = RunToCompletionLayer.layer(tower::service_fn(|n: u32| async move {
            Ok::<_, std::convert::Infallible>(n + 1)
        }));
        let mut call = service.call(41);
        let waker = futures::task::noop_waker();
        let answer = Pin::new(&mut call).poll(&mut Context::from_waker(&waker));
        assert!(matches!(answer, Poll::Ready(Ok(42))), "{answer:?}");
    }

    #[tokio::test]
    async fn a_handler_that_panics_is_answered_internal() {
        let mut service = RunToCompletionLayer.layer(tower::service_fn(|_: ()| async {
            if true {
                panic!("the provisioner's bug");
            }
            Ok::<(), std::convert::Infallible>(())
        }));
        let failed = service.call(()).await.unwrap_err();
        let status = failed.downcast::<tonic::Status>().unwrap();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(
            status.message().contains("the provisioner's bug"),
            "{status:?}"
        );
    }
}
