//! Prometheus metrics and the `/metrics` and `/healthz` endpoints.

use std::sync::Arc;
use std::time::Instant;

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

    /// The HTTP routes: `/metrics` and `/healthz` (see
    /// [`telemetry::serve`](crate::telemetry::serve)).
    pub fn router(self: Arc<Self>) -> axum::Router {
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
            .route("/healthz", get(|| async { "ok" }))
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
}
