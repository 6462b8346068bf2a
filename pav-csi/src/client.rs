//! Connecting to a CSI socket, for tests, tools and health checks.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::Error;

/// A gRPC channel to the CSI driver listening on the Unix socket `socket`.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use pav_csi::csi::identity_client::IdentityClient;
/// let channel = pav_csi::client::connect("/csi/csi.sock").await?;
/// let info = IdentityClient::new(channel)
///     .get_plugin_info(pav_csi::csi::GetPluginInfoRequest {})
///     .await?;
/// println!("{}", info.get_ref().name);
/// # Ok(()) }
/// ```
pub async fn connect(socket: impl Into<PathBuf>) -> Result<Channel, Error> {
    let socket = socket.into();
    // The URI is required by the API but unused: the connector picks the socket.
    let channel = Endpoint::from_static("http://[::1]:50051")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await?;
    Ok(channel)
}

/// Why [`probe`] found a driver not serving.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Nothing accepts connections on the socket (or the socket is missing).
    #[error("cannot connect to the CSI socket")]
    Connect(#[source] Error),
    /// The driver answered Probe with an error.
    #[error("Probe failed: {}: {}", .0.code(), .0.message())]
    Call(tonic::Status),
    /// The driver answered that it is not ready.
    #[error("the driver answered Probe with ready: false")]
    NotReady,
    /// No answer within the time allowed: connecting and the call together.
    #[error("no answer to Probe within {0:?}")]
    TimedOut(Duration),
}

/// Asks the driver on `socket` whether it serves: connects and calls
/// Identity `Probe`, all within `timeout`. An answer without `ready` means
/// ready, as the CSI spec says.
///
/// ```no_run
/// # async fn f() {
/// use std::time::Duration;
/// if let Err(e) = pav_csi::client::probe("/csi/csi.sock", Duration::from_secs(3)).await {
///     eprintln!("not serving: {e}");
/// }
/// # }
/// ```
pub async fn probe(socket: impl Into<PathBuf>, timeout: Duration) -> Result<(), ProbeError> {
    use crate::csi::identity_client::IdentityClient;
    let socket = socket.into();
    let asked = async {
        let channel = connect(socket).await.map_err(ProbeError::Connect)?;
        let answer = IdentityClient::new(channel)
            .probe(crate::csi::ProbeRequest {})
            .await
            .map_err(ProbeError::Call)?;
        match answer.into_inner().ready {
            Some(false) => Err(ProbeError::NotReady),
            Some(true) | None => Ok(()),
        }
    };
    tokio::time::timeout(timeout, asked)
        .await
        .unwrap_or(Err(ProbeError::TimedOut(timeout)))
}
