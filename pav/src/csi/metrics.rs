//! Prometheus metrics and the `/metrics` and `/healthz` endpoints.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use pav_templates::Phase;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of an operation counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    phase: String,
    outcome: String,
}

/// Labels of per-phase metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

type HistogramFamily = Family<PhaseLabels, Histogram, fn() -> Histogram>;

/// The metrics of one `pav csi-controller` or `pav csi-node`.
pub struct Metrics {
    registry: Registry,
    operations: Family<OperationLabels, Counter>,
    durations: HistogramFamily,
    in_flight: Family<PhaseLabels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("pav");
        let operations = Family::<OperationLabels, Counter>::default();
        let durations: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.25, 2.0, 14)));
        let in_flight = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "phase_operations",
            "Phase operations by phase and outcome (success, failure)",
            operations.clone(),
        );
        registry.register(
            "phase_duration_seconds",
            "Duration of phase operations, pods included",
            durations.clone(),
        );
        registry.register(
            "phase_in_flight",
            "Phase operations (and their pods) in progress",
            in_flight.clone(),
        );
        Metrics {
            registry,
            operations,
            durations,
            in_flight,
        }
    }
}

/// Counts one operation while alive; [`Operation::finish`] records its outcome.
#[derive(Debug)]
pub struct Operation {
    metrics: Arc<Metrics>,
    phase: Phase,
    start: Instant,
}

impl Operation {
    /// Records the outcome and duration.
    pub fn finish<T, E>(self, result: &Result<T, E>) {
        let outcome = if result.is_ok() { "success" } else { "failure" };
        self.metrics
            .operations
            .get_or_create(&OperationLabels {
                phase: self.phase.name().to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.metrics
            .durations
            .get_or_create(&phase_labels(self.phase))
            .observe(self.start.elapsed().as_secs_f64());
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        self.metrics
            .in_flight
            .get_or_create(&phase_labels(self.phase))
            .dec();
    }
}

fn phase_labels(phase: Phase) -> PhaseLabels {
    PhaseLabels {
        phase: phase.name().to_owned(),
    }
}

impl Metrics {
    /// Starts counting an operation of `phase`.
    pub fn start(self: &Arc<Self>, phase: Phase) -> Operation {
        self.in_flight.get_or_create(&phase_labels(phase)).inc();
        Operation {
            metrics: self.clone(),
            phase,
            start: Instant::now(),
        }
    }

    /// The HTTP routes: `/metrics`, and `/healthz` answering whether the
    /// CSI `socket` serves ([`health`]); see
    /// [`telemetry::serve`](crate::telemetry::serve).
    pub fn router(self: Arc<Self>, socket: PathBuf) -> axum::Router {
        self.routes(socket, HEALTH_TIMEOUT)
    }

    fn routes(self: Arc<Self>, socket: PathBuf, health_timeout: Duration) -> axum::Router {
        use axum::routing::get;
        axum::Router::new()
            .route(
                "/metrics",
                get(move || {
                    let metrics = self.clone();
                    async move {
                        (
                            [("content-type", crate::telemetry::METRICS_CONTENT_TYPE)],
                            metrics.encode(),
                        )
                    }
                }),
            )
            .route(
                "/healthz",
                get(move || async move { health(&socket, health_timeout).await }),
            )
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        text
    }
}

/// How long `/healthz` waits for the CSI socket to answer: less than the
/// liveness probe's `timeoutSeconds`, so the kubelet records the reason
/// (the 503's body) rather than its own timeout.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

const _: () = assert!(
    HEALTH_TIMEOUT.as_secs() < crate::manifests::driver::LIVENESS_TIMEOUT_SECONDS as u64,
    "/healthz must answer before the kubelet gives up on it"
);

/// `/healthz` of a driver: 200 while its CSI socket answers Identity
/// `Probe` within `timeout`, 503 with the reason otherwise. The liveness
/// probe of the manifests restarts a driver whose socket stopped serving
/// (its server failed, or hangs) while the process and this HTTP server
/// live on; the CSI sidecars cannot reach such a driver either.
pub async fn health(socket: &Path, timeout: Duration) -> (StatusCode, String) {
    match pav_csi::client::probe(socket, timeout).await {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(error) => {
            // The innermost cause says why (no such file, connection
            // refused); the transport layers between only repeat
            // "transport error".
            let cause = std::iter::successors(std::error::Error::source(&error), |e| e.source())
                .last()
                .map(|cause| format!(": {cause}"))
                .unwrap_or_default();
            let reason = format!("{error}{cause}");
            tracing::warn!(socket = %socket.display(), %reason, "CSI socket does not answer Probe: unhealthy");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("CSI socket {}: {reason}", socket.display()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_counted_by_phase_and_outcome() {
        let metrics = Arc::new(Metrics::default());
        let op = metrics.start(Phase::Creation);
        assert!(
            metrics
                .encode()
                .contains("pav_phase_in_flight{phase=\"creation\"} 1")
        );
        op.finish(&Ok::<(), pav_sdk::Error>(()));
        let op = metrics.start(Phase::Creation);
        op.finish(&Err::<(), _>(pav_sdk::Error::Internal("x".into())));
        let text = metrics.encode();
        assert!(
            text.contains("pav_phase_operations_total{phase=\"creation\",outcome=\"success\"} 1")
        );
        assert!(
            text.contains("pav_phase_operations_total{phase=\"creation\",outcome=\"failure\"} 1")
        );
        assert!(text.contains("pav_phase_in_flight{phase=\"creation\"} 0"));
        assert!(text.contains("pav_phase_duration_seconds_count{phase=\"creation\"} 2"));
    }

    /// `GET /healthz` of `routes`: status and body.
    async fn healthz(router: &axum::Router) -> (StatusCode, String) {
        use tower::ServiceExt as _;
        let request = axum::http::Request::get("/healthz")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// `/healthz` answered "ok" whatever the CSI socket did, so a driver
    /// whose gRPC server had stopped was never restarted.
    #[tokio::test]
    async fn healthz_answers_whether_the_csi_socket_serves() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("csi.sock");
        let timeout = Duration::from_millis(500);
        let router = Arc::new(Metrics::default()).routes(socket.clone(), timeout);

        // Nothing serves yet (the driver is starting, or gone).
        let (status, body) = healthz(&router).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(
            body,
            format!(
                "CSI socket {}: cannot connect to the CSI socket: No such file or directory (os error 2)",
                socket.display()
            )
        );

        // A pav-csi driver serves.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let driver = tokio::spawn(
            pav_csi::Driver::builder("health.example.com")
                .provisioner(pav_sdk::Provisioner::new(()))
                .serve_controller(&socket)
                .run_until(async {
                    let _ = stopped.await;
                }),
        );
        let mut answer = healthz(&router).await;
        for _ in 0..100 {
            if answer.0 == StatusCode::OK {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            answer = healthz(&router).await;
        }
        assert_eq!(answer, (StatusCode::OK, "ok".to_owned()));

        // It stopped serving.
        let _ = stop.send(());
        driver.await.unwrap().unwrap();
        assert_eq!(healthz(&router).await.0, StatusCode::SERVICE_UNAVAILABLE);

        // Something holds the socket but never answers (a hung server).
        let _listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (status, body) = healthz(&router).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(
            body,
            format!(
                "CSI socket {}: no answer to Probe within 500ms",
                socket.display()
            )
        );
    }
}
