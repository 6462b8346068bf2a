//! ControllerExpandVolume: `spec.volumeExpansion`, its optional expansion
//! pod, and whether the nodes must grow the volume too
//! (`spec.volumeNodeExpansion`).

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::{Api, Resource, ResourceExt};
use pav_sdk::{Error, Expand, ExpandRequest, Expanded, Result};
use pav_templates::Phase;
use pav_templates::quantity::Rounding;

use super::PodController;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding};
use crate::driver_error::api_error;
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
    /// Reading the volume's claim or its StorageClass.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// `volumeValidation`'s `maxCapacity` is below the request: no
    /// expansion pod runs.
    #[error("PersistentVolume {pv}: {refusal}")]
    Refused {
        /// The volume's PersistentVolume.
        pv: String,
        /// The rule that refused.
        refusal: pav_templates::phase::Refusal,
    },
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
    /// The volume did not grow to what was asked: the most it can hold.
    #[error("{said_by}")]
    TooSmall {
        /// Where the capacity came from: the `capacity` key, or the pod's
        /// `/pav/capacity` (naming the pod).
        said_by: String,
        #[source]
        source: TooSmall,
    },
}

impl From<ExpandError> for Error {
    /// An unknown volume is `NOT_FOUND`; a provisioner without expansion
    /// `FAILED_PRECONDITION` (external-resizer retries with backoff, so
    /// adding the section later takes effect); a size past `maxCapacity`
    /// or past what the volume could grow to is `OUT_OF_RANGE`, which
    /// external-resizer reports as infeasible (`ControllerResizeInfeasible`
    /// on the claim, retried only every few minutes) and which the user
    /// recovers from by lowering the request; a failed pod `INTERNAL`; the
    /// API, render and pod-run steps keep the code of the driver's error.
    fn from(error: ExpandError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            ExpandError::NoVolume { .. } => Error::NotFound(message),
            ExpandError::NotExpandable { .. } => Error::FailedPrecondition(message),
            ExpandError::Refused { .. } | ExpandError::TooSmall { .. } => {
                Error::OutOfRange(message)
            }
            ExpandError::Plan(PlanError::Context(_))
            | ExpandError::ExpansionPod(PhaseError::Failed(_))
            | ExpandError::Capacity { .. } => Error::Internal(message),
            ExpandError::Plan(e) => e.into(),
            ExpandError::ReadObjects(e) | ExpandError::ExpansionPod(PhaseError::Run(e)) => e.into(),
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
            .map_err(ExpandError::ReadObjects)?;
        let sc = self
            .provisioning_class(&pv)
            .await
            .map_err(ExpandError::ReadObjects)?;
        // Events go to the claim, where the user asked for more room.
        let regarding = match &pvc {
            Some(pvc) => pvc.object_ref(&()),
            None => pv.object_ref(&()),
        };
        let requested = req.capacity.min_bytes.unwrap_or(0);
        let (limit, volume, claim) = (req.capacity.max_bytes, pv.clone(), pvc.clone());
        let (refusal, expansion) = planner
            .blocking(move |p| {
                let refusal =
                    p.expansion_refusal(&volume, claim.as_ref(), sc.as_ref(), requested)?;
                let expansion = p.expansion(&volume, claim.as_ref(), requested, limit)?;
                Ok((refusal, expansion))
            })
            .await
            .map_err(ExpandError::Plan)?;
        if let Some(refusal) = refusal {
            let pv = pv.name_any();
            return Err(self
                .warned(&regarding, ExpandError::Refused { pv, refusal })
                .await);
        }
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
            pod: pod.clone().unwrap_or_default(),
            source,
        })?
        .unwrap_or(requested);
        let capacity = match grown(capacity, requested) {
            Ok(capacity) => capacity,
            Err(source) => {
                let said_by = match (expansion.evaluated.capacity, pod) {
                    (None, Some(pod)) => format!("expansion pod {pod}: /pav/capacity"),
                    _ => "spec.volumeExpansion.capacity".to_owned(),
                };
                let error = ExpandError::TooSmall { said_by, source };
                return Err(self.warned(&regarding, error).await);
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

    /// The StorageClass of volume `pv`, `None` for a volume without one or
    /// whose class is gone.
    async fn provisioning_class(
        &self,
        pv: &PersistentVolume,
    ) -> std::result::Result<Option<StorageClass>, DriverError> {
        let class = pv
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref());
        let Some(name) = class.filter(|name| !name.is_empty()) else {
            return Ok(None);
        };
        Api::<StorageClass>::all(self.driver.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| api_error(&format!("StorageClass {name:?}"), e))
    }

    /// `error`, once a Warning event on `regarding` says it.
    async fn warned(&self, regarding: &ObjectReference, error: ExpandError) -> ExpandError {
        let message = pav_csi::error_chain(&error);
        (self.driver.events)
            .warn(regarding, Phase::Expansion, &message, None)
            .await;
        error
    }
}
