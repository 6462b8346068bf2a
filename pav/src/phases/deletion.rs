//! Deletion (`spec.volumeDeletion`): DeleteVolume removes a volume, and a
//! creation that failed is undone in its own context. Its optional pod is
//! named and labelled after the claim's UID.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::phase;
use pav_templates::{CreationContext, OptionalPodPhase, Phase};

use super::example::Example;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, PlanError, Planner};

impl Planner {
    /// The deletion of claim `pvc`'s volume in `context`: the creation's
    /// (undoing a failed creation) or one naming the volume's handle.
    pub fn deletion(
        &self,
        context: &CreationContext,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Plan<OptionalPodPhase>> {
        let evaluated = self.render::<phase::Deletion>(context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .claim_pod(Phase::Deletion, template, evaluated.timeout, pvc)
        });
        Ok(Plan { evaluated, pod })
    }

    /// The deletion of the volume `handle` of claim `pvc` and class `sc`
    /// (as the volume's records keep them), as DeleteVolume asks for it.
    pub fn volume_deletion(
        &self,
        pvc: &PersistentVolumeClaim,
        sc: &StorageClass,
        handle: &str,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context = CreationContext::new(pvc, sc)
            .map_err(PlanError::Context)?
            .with_handle(handle)
            .with_pvc_lookup(self.lookup());
        self.deletion(&context, pvc)
    }
}

/// `pav render --phase deletion`: as DeleteVolume plans it, the volume
/// existing and its handle known.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    example.planned(planner.require_dynamic(Phase::Deletion))?;
    let plan = planner.volume_deletion(&objects.pvc, &objects.sc, &example.handle);
    example.to_yaml(example.planned(plan)?)
}
