//! Prometheus metrics and health endpoints of `pav controller`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The driver is deployed (ready or not yet).
    Applied,
    /// The spec has problems; no driver is deployed.
    Invalid,
    /// Deletion refused: volumes or claims still exist.
    Blocked,
    /// The driver was removed and the finalizer released.
    Cleaned,
    /// An API call failed; retried with backoff.
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Invalid => "invalid",
            Outcome::Blocked => "blocked",
            Outcome::Cleaned => "cleaned",
            Outcome::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProvisionerLabels {
    provisioner: String,
}

/// The controller's metrics and readiness.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<OutcomeLabels, Counter>,
    duration: Histogram,
    volumes: Family<ProvisionerLabels, Gauge>,
    ready: AtomicBool,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("pav_controller");
        let reconciles = Family::<OutcomeLabels, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let volumes = Family::<ProvisionerLabels, Gauge>::default();
        registry.register(
            "reconciles",
            "PavProvisioner reconciles, by outcome",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time taken by one PavProvisioner reconcile",
            duration.clone(),
        );
        registry.register(
            "volumes",
            "PersistentVolumes of each PavProvisioner",
            volumes.clone(),
        );
        Self {
            registry,
            reconciles,
            duration,
            volumes,
            ready: AtomicBool::new(false),
        }
    }
}

impl Metrics {
    /// Counts one reconcile.
    pub fn reconciled(&self, outcome: Outcome, took: Duration) {
        self.reconciles
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
        if outcome != Outcome::Error {
            self.duration.observe(took.as_secs_f64());
        }
    }

    /// Records the number of volumes of a provisioner (`None`: forget it).
    pub fn set_volumes(&self, provisioner: &str, volumes: Option<i64>) {
        let labels = ProvisionerLabels {
            provisioner: provisioner.to_owned(),
        };
        match volumes {
            Some(n) => {
                self.volumes.get_or_create(&labels).set(n);
            }
            None => {
                self.volumes.remove(&labels);
            }
        }
    }

    /// Marks the controller ready (`/readyz` answers 200).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The metrics in Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// The HTTP routes: `/metrics`, `/healthz`, `/readyz`.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(self)
    }
}

async fn metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::telemetry::METRICS_CONTENT_TYPE)],
        metrics.encode(),
    )
}

async fn readyz(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_outcomes_and_volumes() {
        let metrics = Metrics::default();
        metrics.reconciled(Outcome::Applied, Duration::from_millis(3));
        metrics.reconciled(Outcome::Invalid, Duration::from_millis(3));
        metrics.reconciled(Outcome::Invalid, Duration::from_millis(3));
        metrics.set_volumes("hello", Some(2));
        let text = metrics.encode();
        assert!(
            text.contains("pav_controller_reconciles_total{outcome=\"invalid\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("pav_controller_reconciles_total{outcome=\"applied\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("pav_controller_volumes{provisioner=\"hello\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("pav_controller_reconcile_duration_seconds_count 3"),
            "{text}"
        );
        metrics.set_volumes("hello", None);
        assert!(!metrics.encode().contains("provisioner=\"hello\""));
    }
}
