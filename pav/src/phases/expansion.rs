//! Expansion (`spec.volumeExpansion`): ControllerExpandVolume grows a
//! volume on the storage side to the size its claim asks for. Its
//! optional pod is named and labelled after the volume handle and the
//! requested size.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec};
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::phase::{self, Refusal};
use pav_templates::{ExpansionContext, ExpansionPhase, Phase, ValidationContext};

use super::example::Example;
use crate::pods::{ANNOTATION_PV, PodOrigin};
use crate::recipe::plan::{Result, handle_of};
use crate::recipe::{Plan, PlanError, Planner};

impl Planner {
    /// The expansion of volume `pv` (of claim `pvc`, if it still has one)
    /// to at least `requested` bytes and at most `limit`.
    pub fn expansion(
        &self,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
        requested: u64,
        limit: Option<u64>,
    ) -> Result<Plan<ExpansionPhase>> {
        let context = ExpansionContext::new(pv, pvc, requested, limit)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::Expansion>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().expansion_pod(
                template,
                evaluated.timeout,
                handle_of(pv),
                requested,
                pv.metadata.name.as_deref().unwrap_or_default(),
            )
        });
        Ok(Plan { evaluated, pod })
    }

    /// Refuses growing volume `pv` to `requested` bytes past
    /// `volumeValidation`'s `maxCapacity`, the most a volume of this
    /// provisioner may hold, evaluated as it was when the volume was
    /// provisioned: with its claim and class `sc`, or, without either
    /// (a static volume, a deleted class), from the volume alone.
    pub fn expansion_refusal(
        &self,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
        sc: Option<&StorageClass>,
        requested: u64,
    ) -> Result<Option<Refusal>> {
        if !self.compiled().has_phase(Phase::Validation) {
            return Ok(None);
        }
        let context = match (pvc, sc) {
            (Some(pvc), Some(sc)) => ValidationContext::dynamic(pvc, sc),
            _ => ValidationContext::static_pv(pv),
        }
        .map_err(PlanError::Context)?
        .with_pvc_lookup(self.lookup());
        let rules = self.render::<phase::Validation>(&context)?;
        Ok(rules
            .max_capacity
            .filter(|maximum| requested > *maximum)
            .map(|maximum| Refusal::AboveMaximum { requested, maximum }))
    }
}

impl PodOrigin<'_> {
    /// The expansion pod growing the volume `handle` (PersistentVolume
    /// `pv`) to `requested` bytes.
    pub fn expansion_pod(
        &self,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        handle: &str,
        requested: u64,
        pv: &str,
    ) -> Pod {
        // Named after the size too: a pod left by an earlier growth (its
        // deletion interrupted) is not this one.
        let key = format!("{handle}\n{requested}");
        self.phase_pod(
            template,
            timeout,
            Phase::Expansion,
            &key,
            None,
            vec![(ANNOTATION_PV, pv.to_owned())],
        )
    }
}

/// `pav render --phase expansion`: the volume grown to the claim's
/// request (raising it is how a user grows a volume), a request past
/// `volumeValidation`'s `maxCapacity` or an evaluated capacity below it
/// refused as the driver refuses them.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let (min, max) = example.requested_capacity()?;
    let refusal = example.planned(planner.expansion_refusal(
        &objects.pv,
        Some(&objects.pvc),
        Some(&objects.sc),
        min,
    ))?;
    if let Some(refusal) = refusal {
        anyhow::bail!("{refusal}");
    }
    let plan = example.planned(planner.expansion(&objects.pv, Some(&objects.pvc), min, max))?;
    plan.check_capacity(min)?;
    example.to_yaml(plan)
}
