//! What every pav component shares to be observed: the log set-up, the
//! HTTP server of `/metrics` and the health endpoints, and the bound on
//! messages shown in events and gRPC statuses.

use std::net::SocketAddr;

/// Content type of the Prometheus text format served at `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Logs to stderr, filtered by `RUST_LOG` (default `info`). A second call
/// (tests running several components) keeps the first set-up.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
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
