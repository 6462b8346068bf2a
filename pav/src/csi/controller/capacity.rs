//! GetCapacity: `spec.storageCapacity`, from its templates or a capacity
//! pod on the segment's node, whose answer is reused for `cacheFor` so
//! that external-provisioner's polling does not start a pod each time.

use kube::ResourceExt;
use pav_sdk::{AvailableCapacity, Capacity, CapacityRequest, Error, Result};
use pav_templates::Phase;
use pav_templates::phase::DEFAULT_CAPACITY_CACHE;
use pav_templates::quantity::{Rounding, parse_bytes};

use super::PodController;
use crate::csi::TOPOLOGY_KEY;
use crate::csi::context::{PhaseError, PodFiles, Regarding};
use crate::phases::CapacityFor;
use crate::recipe::PlanError;

/// Why GetCapacity failed: one variant per step; `From<CapacityError> for
/// pav_sdk::Error` is the one mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CapacityError {
    /// Planning the capacity phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The PavProvisioner lost `spec.storageCapacity` since the driver
    /// started.
    #[error("PavProvisioner {provisioner} has no spec.storageCapacity")]
    NoSection {
        /// Its name.
        provisioner: String,
    },
    /// The capacity pod failed or did not finish.
    #[error(transparent)]
    CapacityPod(PhaseError),
    /// The pod wrote no `/pav/capacity`.
    #[error("capacity pod {pod} wrote no /pav/capacity")]
    NoResult {
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// The pod's `/pav/capacity` is no quantity.
    #[error("capacity pod {pod}: /pav/capacity")]
    Quantity {
        /// The pod, `namespace/name`.
        pod: String,
        #[source]
        source: pav_templates::quantity::QuantityError,
    },
}

impl From<CapacityError> for Error {
    /// A section gone `FAILED_PRECONDITION`; a failed pod or a result that
    /// is none `INTERNAL`; the plan and pod-run steps keep the code of the
    /// driver's error. external-provisioner keeps the last
    /// CSIStorageCapacity after any error and asks again at its next poll.
    fn from(error: CapacityError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            CapacityError::NoSection { .. } => Error::FailedPrecondition(message),
            CapacityError::CapacityPod(PhaseError::Failed(_))
            | CapacityError::NoResult { .. }
            | CapacityError::Quantity { .. } => Error::Internal(message),
            CapacityError::Plan(e) => e.into(),
            CapacityError::CapacityPod(PhaseError::Run(e)) => e.into(),
        }
    }
}

#[pav_sdk::async_trait]
impl Capacity for PodController {
    async fn capacity(&self, req: CapacityRequest) -> Result<AvailableCapacity> {
        self.segment_capacity(&req).await.map_err(|error| {
            tracing::warn!(error = %pav_csi::error_chain(&error), topology = ?req.topology, "GetCapacity failed");
            Error::from(error)
        })
    }
}

impl PodController {
    async fn segment_capacity(
        &self,
        req: &CapacityRequest,
    ) -> std::result::Result<AvailableCapacity, CapacityError> {
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(CapacityError::Plan)?;
        if !planner.compiled().has_phase(Phase::Capacity) {
            return Err(CapacityError::NoSection {
                provisioner: self.driver.provisioner.clone(),
            });
        }
        let (topology, params) = (req.topology.clone(), req.parameters.clone());
        let plan = planner
            .blocking(move |p| {
                let node = topology.as_ref().and_then(|t| t.get(TOPOLOGY_KEY));
                let segment = CapacityFor {
                    topology: topology.as_ref(),
                    node: node.map(String::as_str),
                    params: &params,
                };
                Ok((p.capacity(&segment)?, segment.key()))
            })
            .await
            .map_err(CapacityError::Plan)?;
        let (plan, key) = plan;
        let available = match (plan.evaluated.available_capacity, &plan.pod) {
            (Some(bytes), _) => bytes,
            (None, None) => unreachable!("rendering requires availableCapacity or podTemplate"),
            (None, Some(pod)) => match self.capacities.fresh(&key) {
                Some(bytes) => bytes,
                None => {
                    let bytes = self.measure(pod).await?;
                    let stands_for = plan.evaluated.cache_for.unwrap_or(DEFAULT_CAPACITY_CACHE);
                    self.capacities.record(key, bytes, stands_for);
                    bytes
                }
            },
        };
        let answer = AvailableCapacity::new(available);
        Ok(match plan.evaluated.maximum_volume_size {
            Some(bytes) => answer.with_maximum_volume_size(bytes.min(available)),
            None => answer,
        })
    }

    /// Runs the capacity pod and reads its `/pav/capacity`.
    async fn measure(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
    ) -> std::result::Result<u64, CapacityError> {
        let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let collected = (self.driver)
            .run(
                (Phase::Capacity, pod),
                PodFiles::Collected,
                Regarding::Provisioner,
            )
            .await
            .map_err(CapacityError::CapacityPod)?;
        let text = collected
            .and_then(|c| c.capacity)
            .ok_or_else(|| CapacityError::NoResult { pod: name.clone() })?;
        parse_bytes(&text, Rounding::Down)
            .map_err(|source| CapacityError::Quantity { pod: name, source })
    }
}
