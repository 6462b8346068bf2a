//! Volume population (`spec.volumePopulation`): pav-csi's populator asks
//! to fill a new volume, bound to its prime claim, from the object the
//! user's claim names; the population pod does it.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::{Api, ResourceExt};
use pav_sdk::{DataSourceKind, Error, Populate, PopulateRequest, Result};
use pav_templates::Phase;

use super::PodController;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding};
use crate::driver_error::api_error;
use crate::phases::population::PrimeClaim;
use crate::recipe::PlanError;

/// Why a population failed: one variant per step; `From<PopulateError>
/// for pav_sdk::Error` is the one mapping to the codes the populator
/// retries on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PopulateError {
    /// The volume is not in the driver's cache of PersistentVolumes yet.
    #[error("no PersistentVolume of driver {provisioner} has volume handle {handle:?} yet")]
    NoVolume {
        /// The driver.
        provisioner: String,
        /// The handle asked about.
        handle: String,
    },
    /// Planning the population phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The PavProvisioner has no `spec.volumePopulation` (any more).
    #[error("PavProvisioner {provisioner} has no spec.volumePopulation: it fills no volume")]
    NotPopulating {
        /// Its name.
        provisioner: String,
    },
    /// Reading the user's claim or the prime claim.
    #[error(transparent)]
    ReadClaim(DriverError),
    /// The population pod failed or did not finish.
    #[error(transparent)]
    PopulationPod(PhaseError),
}

impl From<PopulateError> for Error {
    /// A volume not seen yet and an API or pod run that did not end are
    /// unavailable (retried soon); a provisioner without the section a
    /// precondition; a failed pod or templates that fail on the claim are
    /// internal: each is retried with the populator's backoff, and its
    /// message is the claim's Warning event.
    fn from(error: PopulateError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            PopulateError::NoVolume { .. } => Error::Unavailable(message),
            PopulateError::NotPopulating { .. } => Error::FailedPrecondition(message),
            PopulateError::Plan(PlanError::Context(_))
            | PopulateError::PopulationPod(PhaseError::Failed(_)) => Error::Internal(message),
            PopulateError::Plan(e) => e.into(),
            PopulateError::ReadClaim(e) | PopulateError::PopulationPod(PhaseError::Run(e)) => {
                e.into()
            }
        }
    }
}

#[pav_sdk::async_trait]
impl Populate for PodController {
    async fn data_source_kinds(&self) -> Vec<DataSourceKind> {
        match self.driver.served.compiled().await {
            Ok((compiled, _)) => (compiled.populated_from().iter())
                .map(|k| DataSourceKind::new(k.api_group.clone(), k.kind.clone()))
                .collect(),
            // No provisioner yet (or an invalid one): no kind, until its
            // watch sees one.
            Err(_) => Vec::new(),
        }
    }

    async fn populate(&self, req: PopulateRequest) -> Result<()> {
        self.populate_volume(&req).await.map_err(Error::from)
    }
}

impl PodController {
    async fn populate_volume(
        &self,
        req: &PopulateRequest,
    ) -> std::result::Result<(), PopulateError> {
        let provisioner = &self.driver.provisioner;
        let pv = self
            .records
            .volume(&req.handle)
            .await
            .ok_or_else(|| PopulateError::NoVolume {
                provisioner: provisioner.clone(),
                handle: req.handle.to_string(),
            })?;
        let planner = (self.driver.served.planner().await).map_err(PopulateError::Plan)?;
        if !planner.compiled().has_phase(Phase::Population) {
            return Err(PopulateError::NotPopulating {
                provisioner: provisioner.clone(),
            });
        }
        let pvc = self.live_claim(&req.claim).await?;
        let prime = self.live_claim(&req.prime_claim).await?;
        let (prime_uid, source) = (prime.uid().unwrap_or_default(), req.source.clone());
        let prime_claim = (
            req.prime_claim.namespace.clone(),
            req.prime_claim.name.clone(),
        );
        let plan = planner
            .blocking(move |p| {
                let prime = PrimeClaim {
                    namespace: &prime_claim.0,
                    name: &prime_claim.1,
                    uid: &prime_uid,
                };
                p.population(&pv, &pvc, &source, prime)
            })
            .await
            .map_err(PopulateError::Plan)?;
        // The populator reports the failure on the claim, with its retry.
        (self.driver)
            .run(
                (Phase::Population, &plan.pod),
                PodFiles::Collected,
                Regarding::Objects(&[]),
            )
            .await
            .map_err(PopulateError::PopulationPod)?;
        Ok(())
    }

    /// The claim `name`, as it is now.
    async fn live_claim(
        &self,
        name: &pav_sdk::ObjectName,
    ) -> std::result::Result<PersistentVolumeClaim, PopulateError> {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.driver.client.clone(), &name.namespace);
        claims.get(&name.name).await.map_err(|e| {
            PopulateError::ReadClaim(api_error(&format!("PersistentVolumeClaim {name}"), e))
        })
    }
}
