//! ControllerExpandVolume: `spec.volumeExpansion`, its optional expansion
//! pod, and whether the nodes must grow the volume too
//! (`spec.volumeNodeExpansion`).

use kube::{Resource, ResourceExt};
use pav_sdk::{Error, Expand, ExpandRequest, Expanded, Result};
use pav_templates::Phase;
use pav_templates::quantity::Rounding;

use super::PodController;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding};
use crate::pods::results::evaluated_else_exported;
use crate::recipe::{PlanError, TooSmall, grown};

/// Why ControllerExpandVolume failed: one variant per step;
/// `From<ExpandError> for pav_sdk::Error` is the one mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExpandError {
    /// No PersistentVolume of this driver has the handle.
    #[error("no PersistentVolume of driver {provisioner} has volume handle {handle:?}")]
    NoVolume {
        /// The driver.
        provisioner: String,
        /// The handle asked about.
        handle: String,
    },
    /// Planning the expansion phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The PavProvisioner has no `spec.volumeExpansion`.
    #[error("PavProvisioner {provisioner} has no spec.volumeExpansion: its volumes do not grow")]
    NotExpandable {
        /// Its name.
        provisioner: String,
    },
    /// Reading the volume's claim.
    #[error(transparent)]
    ReadClaim(DriverError),
    /// The expansion pod failed or did not finish.
    #[error(transparent)]
    ExpansionPod(PhaseError),
    /// The pod's `/pav/capacity` is no quantity.
    #[error("expansion pod {pod}: /pav/capacity")]
    Capacity {
        /// The pod, `namespace/name`.
        pod: String,
        #[source]
        source: pav_templates::quantity::QuantityError,
    },
    /// The volume did not grow to what was asked.
    #[error(transparent)]
    TooSmall(TooSmall),
}

impl From<ExpandError> for Error {
    /// An unknown volume is `NOT_FOUND`; a provisioner without expansion
    /// `FAILED_PRECONDITION` (external-resizer retries with backoff, so
    /// adding the section later takes effect); a failed pod or a volume
    /// that did not grow enough `INTERNAL`; the API, render and pod-run
    /// steps keep the code of the driver's error.
    fn from(error: ExpandError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            ExpandError::NoVolume { .. } => Error::NotFound(message),
            ExpandError::NotExpandable { .. } => Error::FailedPrecondition(message),
            ExpandError::Plan(PlanError::Context(_))
            | ExpandError::ExpansionPod(PhaseError::Failed(_))
            | ExpandError::Capacity { .. }
            | ExpandError::TooSmall(_) => Error::Internal(message),
            ExpandError::Plan(e) => e.into(),
            ExpandError::ReadClaim(e) | ExpandError::ExpansionPod(PhaseError::Run(e)) => e.into(),
        }
    }
}

#[pav_sdk::async_trait]
impl Expand for PodController {
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded> {
        self.expand_volume(&req).await.map_err(Error::from)
    }
}

impl PodController {
    async fn expand_volume(
        &self,
        req: &ExpandRequest,
    ) -> std::result::Result<Expanded, ExpandError> {
        let provisioner = &self.driver.provisioner;
        let pv = self
            .records
            .volume(&req.handle)
            .await
            .ok_or_else(|| ExpandError::NoVolume {
                provisioner: provisioner.clone(),
                handle: req.handle.to_string(),
            })?;
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(ExpandError::Plan)?;
        if !planner.compiled().has_phase(Phase::Expansion) {
            return Err(ExpandError::NotExpandable {
                provisioner: provisioner.clone(),
            });
        }
        let node_expansion = planner.compiled().has_phase(Phase::NodeExpansion);
        let pvc = self
            .records
            .claim_of(&pv)
            .await
            .map_err(ExpandError::ReadClaim)?;
        let requested = req.capacity.min_bytes.unwrap_or(0);
        let (limit, volume, claim) = (req.capacity.max_bytes, pv.clone(), pvc.clone());
        let expansion = planner
            .blocking(move |p| p.expansion(&volume, claim.as_ref(), requested, limit))
            .await
            .map_err(ExpandError::Plan)?;
        // Events go to the claim, where the user asked for more room.
        let regarding = match &pvc {
            Some(pvc) => pvc.object_ref(&()),
            None => pv.object_ref(&()),
        };
        let exported = match &expansion.pod {
            None => None,
            Some(pod) => {
                let collected = (self.driver)
                    .run(
                        (Phase::Expansion, pod),
                        PodFiles::Collected,
                        Regarding::Objects(std::slice::from_ref(&regarding)),
                    )
                    .await
                    .map_err(ExpandError::ExpansionPod)?;
                let pod_name =
                    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
                Some((pod_name, collected.and_then(|c| c.capacity)))
            }
        };
        let (pod, text) = exported.unzip();
        let capacity = (evaluated_else_exported(
            expansion.evaluated.capacity,
            text.flatten().as_deref(),
            Rounding::Down,
        ))
        .map_err(|source| ExpandError::Capacity {
            pod: pod.unwrap_or_default(),
            source,
        })?
        .unwrap_or(requested);
        let capacity = match grown(capacity, requested) {
            Ok(capacity) => capacity,
            Err(too_small) => {
                let error = ExpandError::TooSmall(too_small);
                self.driver
                    .events
                    .warn(
                        &regarding,
                        Phase::Expansion,
                        &pav_csi::error_chain(&error),
                        None,
                    )
                    .await;
                return Err(error);
            }
        };
        tracing::info!(handle = %req.handle, capacity, node_expansion, "volume expanded");
        let expanded = Expanded::new(capacity);
        Ok(if node_expansion {
            expanded.with_node_expansion()
        } else {
            expanded
        })
    }
}
