//! What every pav component shares to be observed: the log flag, the
//! HTTP server of `/metrics` and the health endpoints, and the bound on
//! messages shown in events and gRPC statuses.

use std::net::SocketAddr;

pub use pav_csi::logging::LogFormat;

/// Content type of the Prometheus text format served at `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `--log-format` and `--log-level`, of every command that serves and of
/// `pav manifests`.
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
    /// The least severe log lines written. `pav controller` deploys its
    /// drivers with the same level, and their CSI sidecars with the klog
    /// verbosity that matches it (`--v`: 0 for error and warn, 2 for info,
    /// 4 for debug, 5 for trace). `RUST_LOG`, when set, refines pav's own
    /// filter per module.
    #[arg(long = "log-level", env = "PAV_LOG_LEVEL", default_value_t, value_enum)]
    pub level: LogLevel,
}

/// `--log-level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    /// Failures only.
    Error,
    /// Failures and what may become one.
    Warn,
    /// Besides, every phase and object changed.
    #[default]
    Info,
    /// Besides, each step and request.
    Debug,
    /// Everything, the dependencies' internals included.
    Trace,
}

impl LogLevel {
    /// Its name on command lines and in the chart's `logLevel`.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }

    /// The Kubernetes sidecars' `--v` for this level: klog always writes
    /// warnings and errors, and its info lines up to `--v`; 2 is what
    /// Kubernetes recommends for production, 4 is debug and 5 trace.
    pub fn klog_verbosity(self) -> u8 {
        match self {
            LogLevel::Error | LogLevel::Warn => 0,
            LogLevel::Info => 2,
            LogLevel::Debug => 4,
            LogLevel::Trace => 5,
        }
    }

    fn tracing_level(self) -> tracing::Level {
        match self {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Trace => tracing::Level::TRACE,
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Logging {
    /// Logs to stdout in this format, filtered by `RUST_LOG`, else by the
    /// level. A second call (tests running several components) keeps the
    /// first set-up.
    pub fn init(self) {
        pav_csi::logging::init_at(self.format, self.level.tracing_level());
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
