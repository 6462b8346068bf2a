//! ControllerModifyVolume: `spec.volumeModification`, its optional
//! modification pod, and the new mutable parameters recorded on the
//! volume's PersistentVolume for staging (`mutableParams`).

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use pav_sdk::{Error, Modify, ModifyRequest, Result};
use pav_templates::Phase;
use pav_templates::context::MUTABLE_PARAMETERS_KEY;

use super::PodController;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding, api_error};
use crate::recipe::{ParametersRefused, PlanError};

/// Why ControllerModifyVolume failed: one variant per step;
/// `From<ModifyError> for pav_sdk::Error` is the one mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
enum ModifyError {
    /// No PersistentVolume of this driver has the handle.
    #[error("no PersistentVolume of driver {provisioner} has volume handle {handle:?}")]
    NoVolume {
        /// The driver.
        provisioner: String,
        /// The handle asked about.
        handle: String,
    },
    /// The PavProvisioner lost `spec.volumeModification` since the driver
    /// started.
    #[error(
        "PavProvisioner {provisioner} has no spec.volumeModification: its volumes' attributes do not change"
    )]
    NoSection {
        /// Its name.
        provisioner: String,
    },
    /// Reading the volume's claim.
    #[error(transparent)]
    ReadClaim(DriverError),
    /// Planning the modification phase (a template that fails refuses
    /// the parameters).
    #[error(transparent)]
    Plan(PlanError),
    /// The `refusal` template refused the parameters.
    #[error(transparent)]
    Refused(ParametersRefused),
    /// The modification pod failed or did not finish.
    #[error(transparent)]
    ModificationPod(PhaseError),
    /// Recording the new parameters on the PersistentVolume.
    #[error(transparent)]
    Record(DriverError),
}

impl From<ModifyError> for Error {
    /// An unknown volume is `NOT_FOUND`; templates refusing the parameters
    /// (a `refusal`, or a failing template)
    /// `INVALID_ARGUMENT` (nothing changed: external-resizer marks the
    /// class infeasible); a section gone `FAILED_PRECONDITION`; a
    /// context the volume's records cannot make or a failed pod
    /// `INTERNAL`; the API and pod-run steps keep the code of the driver's
    /// error.
    fn from(error: ModifyError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            ModifyError::NoVolume { .. } => Error::NotFound(message),
            ModifyError::Refused(_) => Error::InvalidArgument(message),
            ModifyError::NoSection { .. } => Error::FailedPrecondition(message),
            ModifyError::Plan(PlanError::Context(_))
            | ModifyError::ModificationPod(PhaseError::Failed(_)) => Error::Internal(message),
            ModifyError::Plan(e) => e.into(),
            ModifyError::ReadClaim(e)
            | ModifyError::Record(e)
            | ModifyError::ModificationPod(PhaseError::Run(e)) => e.into(),
        }
    }
}

#[pav_sdk::async_trait]
impl Modify for PodController {
    async fn modify(&self, req: ModifyRequest) -> Result<()> {
        self.modify_volume(&req).await.map_err(Error::from)
    }
}

impl PodController {
    async fn modify_volume(&self, req: &ModifyRequest) -> std::result::Result<(), ModifyError> {
        let provisioner = &self.driver.provisioner;
        let pv = self
            .records
            .volume(&req.handle)
            .await
            .ok_or_else(|| ModifyError::NoVolume {
                provisioner: provisioner.clone(),
                handle: req.handle.to_string(),
            })?;
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(ModifyError::Plan)?;
        if !planner.compiled().has_phase(Phase::Modification) {
            return Err(ModifyError::NoSection {
                provisioner: provisioner.clone(),
            });
        }
        let pvc = self
            .records
            .claim_of(&pv)
            .await
            .map_err(ModifyError::ReadClaim)?;
        let (volume, claim) = (pv.clone(), pvc.clone());
        let requested = req.mutable_parameters.clone();
        let modification = planner
            .blocking(move |p| p.modification(&volume, claim.as_ref(), &requested))
            .await
            .map_err(ModifyError::Plan)?;
        modification
            .check_refusal(provisioner, &req.mutable_parameters)
            .map_err(ModifyError::Refused)?;
        // Events go to the claim, whose class changed.
        let regarding = match &pvc {
            Some(pvc) => pvc.object_ref(&()),
            None => pv.object_ref(&()),
        };
        if let Some(pod) = &modification.plan.pod {
            (self.driver)
                .run(
                    (Phase::Modification, pod),
                    PodFiles::Collected,
                    Regarding::Objects(std::slice::from_ref(&regarding)),
                )
                .await
                .map_err(ModifyError::ModificationPod)?;
        }
        self.record_mutable_parameters(&pv, &modification.after)
            .await
            .map_err(ModifyError::Record)?;
        tracing::info!(handle = %req.handle, parameters = ?modification.after, "volume modified");
        Ok(())
    }

    /// Records `parameters` on `pv` as [`MUTABLE_PARAMETERS_KEY`], where
    /// staging reads them (`mutableParams`).
    async fn record_mutable_parameters(
        &self,
        pv: &PersistentVolume,
        parameters: &std::collections::BTreeMap<String, String>,
    ) -> std::result::Result<(), DriverError> {
        let name = pv.name_any();
        let patch = serde_json::json!({
            "metadata": { "annotations": {
                MUTABLE_PARAMETERS_KEY: serde_json::to_string(parameters).unwrap_or_default(),
            }}
        });
        Api::<PersistentVolume>::all(self.driver.client.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| api_error(&format!("PersistentVolume {name}"), e))?;
        Ok(())
    }
}
