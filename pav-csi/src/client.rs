//! Connecting to a CSI socket, for tests and tools.

use std::path::PathBuf;

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
