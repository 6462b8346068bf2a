//! What every pav component shares to be observed: the log flag, the
//! HTTP server of `/metrics` and the health endpoints, and the bound on
//! messages shown in events and gRPC statuses.

use std::net::SocketAddr;

pub use pav_csi::logging::LogFormat;

/// Content type of the Prometheus text format served at `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `--log-format`, of every command that serves and of `pav manifests`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args)]
pub struct Logging {
    /// Log lines as `text` (coloured only when stdout is a terminal) or
    /// `json` (one object per line). `pav controller` deploys its drivers
    /// with the same format, their CSI sidecars included.
    #[arg(
        long = "log-format",
        env = "PAV_LOG_FORMAT",
        default_value_t,
        value_name = "text|json"
    )]
    pub format: LogFormat,
}

impl Logging {
    /// Logs to stdout in this format, filtered by `RUST_LOG` (default
    /// `info`). A second call (tests running several components) keeps the
    /// first set-up.
    pub fn init(self) {
        pav_csi::logging::init(self.format);
    }
}

/// Serves `router` (the component's `/metrics` and health endpoints) on
/// `addr` until the process ends.
pub async fn serve(addr: SocketAddr, router: axum::Router) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving metrics and health endpoints");
    axum::serve(listener, router).await?;
    Ok(())
}

/// Keeps messages within what events and gRPC statuses show (1 KiB): cut
/// at a character boundary at most 1,000 bytes in, marked with `…`.
///
/// ```
/// let long = "é".repeat(600);
/// let cut = pav::telemetry::truncate(long);
/// assert!(cut.len() <= 1003 && cut.ends_with('…'));
/// assert_eq!(pav::telemetry::truncate("short".into()), "short");
/// ```
pub fn truncate(mut message: String) -> String {
    const MAX: usize = 1000;
    if message.len() > MAX {
        let mut end = MAX;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}
