//! How many connections a driver serves at once.
//!
//! Kubelet opens a connection per operation and the sidecars keep one or
//! two for as long as they run. A connection is never closed by the
//! driver: the Kubernetes CSI sidecars (csi-lib-utils) exit when their
//! connection is lost, by design, so a driver that closes idle or old
//! connections restarts every sidecar (and costs it its leader lease).
//! An idle connection costs memory (about 20 KiB), so their number is
//! bounded instead.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::Connected;

/// Connections served at once per socket; further ones wait in the
/// listener's backlog until one closes.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// A connection holding one of its socket's slots until it closes.
#[derive(Debug)]
pub(crate) struct Slot {
    stream: UnixStream,
    _permit: OwnedSemaphorePermit,
}

/// Accepts connections from `listener`, at most `max` open at once: the
/// next one is accepted only when a slot is free.
pub(crate) fn incoming(
    listener: UnixListener,
    max: usize,
) -> impl Stream<Item = io::Result<Slot>> + Send + 'static {
    let slots = Arc::new(Semaphore::new(max));
    futures::stream::unfold((listener, slots), |(listener, slots)| async move {
        // The semaphore is never closed.
        let permit = slots.clone().acquire_owned().await.ok()?;
        let accepted = listener.accept().await.map(|(stream, _)| Slot {
            stream,
            _permit: permit,
        });
        Some((accepted, (listener, slots)))
    })
}

impl Connected for Slot {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Slot {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Slot {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{FutureExt, StreamExt};

    #[tokio::test]
    async fn a_connection_beyond_the_limit_waits_for_a_free_slot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("csi.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let mut accepted = std::pin::pin!(incoming(listener, 2));
        let _clients: Vec<UnixStream> =
            futures::future::join_all((0..3).map(|_| UnixStream::connect(&path)))
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
        let first = accepted.next().await.unwrap().unwrap();
        let _second = accepted.next().await.unwrap().unwrap();
        assert!(
            accepted.next().now_or_never().is_none(),
            "a third connection served while two hold the slots"
        );
        drop(first);
        accepted.next().await.unwrap().unwrap();
    }
}
