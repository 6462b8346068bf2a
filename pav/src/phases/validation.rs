//! Validation (`spec.volumeValidation`): whether PaV provisions a claim,
//! before CreateVolume creates its volume (a claim of a StorageClass) or
//! when a statically provisioned volume is bound to it. pav checks the
//! evaluated rules (volume modes, access modes, capacity) against the
//! claim; the optional pod, named and labelled after the claim's UID,
//! refuses the claim by failing.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::phase;
use pav_templates::{Phase, ValidationContext, ValidationPhase};

use super::example::Example;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, PlanError, Planner};

impl Planner {
    /// The validation of a dynamically provisioned claim `pvc` of class `sc`.
    pub fn validation(
        &self,
        pvc: &PersistentVolumeClaim,
        sc: &StorageClass,
    ) -> Result<Plan<ValidationPhase>> {
        // Dynamic validation belongs to creating a volume: that is what
        // a provisioner without Dynamic lacks.
        self.require_dynamic(Phase::Creation)?;
        let context = ValidationContext::dynamic(pvc, sc).map_err(PlanError::Context)?;
        self.validation_in(context, pvc)
    }

    /// The validation of the statically provisioned volume `pv`, for its
    /// claim `pvc`.
    pub fn static_validation(
        &self,
        pv: &PersistentVolume,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Plan<ValidationPhase>> {
        let context = ValidationContext::static_pv(pv).map_err(PlanError::Context)?;
        self.validation_in(context, pvc)
    }

    fn validation_in(
        &self,
        context: ValidationContext,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Plan<ValidationPhase>> {
        let context = context.with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::Validation>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .claim_pod(Phase::Validation, template, evaluated.timeout, pvc)
        });
        Ok(Plan { evaluated, pod })
    }
}

/// `pav render --phase validation`: dynamic provisioning's validation of
/// the claim and class, or, with `--static` or a provisioner that only
/// provisions statically, the volume's; the claim refused as the driver
/// refuses it.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let static_only = planner.require_dynamic(Phase::Validation).is_err();
    let plan = if example.options.static_provisioning || static_only {
        planner.static_validation(&objects.pv, &objects.pvc)
    } else {
        planner.validation(&objects.pvc, &objects.sc)
    };
    let plan = example.planned(plan)?;
    check_claim(&plan.evaluated, example)?;
    example.to_yaml(plan)
}

/// Refuses the example's claim where the driver's CreateVolume would: its
/// volume mode, access modes and requested capacity against the evaluated
/// validation `rules`.
pub(crate) fn check_claim(rules: &ValidationPhase, example: &Example<'_>) -> anyhow::Result<()> {
    let pvc = &example.objects.pvc;
    let volume_mode = match pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) {
        Some("Block") => pav_templates::VolumeMode::Block,
        _ => pav_templates::VolumeMode::Filesystem,
    };
    let access_modes = crate::recipe::claim_access_modes(pvc)?;
    let (min, max) = example.requested_capacity()?;
    rules.admits(volume_mode, &access_modes, min, max)?;
    Ok(())
}
