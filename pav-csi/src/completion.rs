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
//! [`RunToCompletionLayer`] runs each call on a task of its own; the
//! connection only awaits that task, so giving up drops the wait, never
//! the call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service};

/// Runs every call of the wrapped service on a task of its own.
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
        let call = tokio::spawn(self.inner.call(request));
        Box::pin(async move {
            match call.await {
                Ok(answer) => answer.map_err(Into::into),
                // A handler that panicked: tonic's error recovery turns a
                // Status error into an answer with its code.
                Err(failed) => Err(Box::new(crate::error::panicked(failed)) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    /// A service whose calls take a while and then set `finished`.
    #[derive(Clone)]
    struct Slow {
        finished: Arc<AtomicBool>,
    }

    impl Service<()> for Slow {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<(), Self::Error>> + Send>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _request: ()) -> Self::Future {
            let finished = self.finished.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                finished.store(true, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    #[tokio::test]
    async fn a_call_whose_caller_gives_up_still_finishes() {
        let finished = Arc::new(AtomicBool::new(false));
        let mut service = RunToCompletionLayer.layer(Slow {
            finished: finished.clone(),
        });
        let call = service.call(());
        // The caller gives up at once, as tonic does when a deadline passes.
        drop(call);
        for _ in 0..200 {
            if finished.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the call stopped when its caller gave up");
    }
}
