//! Creation (`spec.volumeCreation`): CreateVolume makes a claim's volume
//! (its handle, capacity and topology from the evaluated fields or the
//! pod's `/pav` files), on the nodes the scheduler prefers and from a
//! snapshot or volume when the claim names one. Its optional pod is named
//! and labelled after the claim's UID.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::phase;
use pav_templates::{CreationContext, CreationPhase, Phase, Source};

use super::example::Example;
use super::validation::check_claim;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, PlanError, Planner};

/// The creation phase planned, with the context it was evaluated in: a
/// creation that fails is undone by the deletion phase of that context.
#[derive(Debug, Clone)]
pub struct CreationPlan {
    /// Evaluated `spec.volumeCreation` and its pod.
    pub plan: Plan<CreationPhase>,
    /// The context of the evaluation.
    pub context: CreationContext,
}

impl Planner {
    /// The creation of claim `pvc`'s volume, of class `sc`, on one of
    /// `topology_nodes` (preferred first), from `source` if any, with the
    /// claim's VolumeAttributesClass parameters `mutable`.
    pub fn creation(
        &self,
        pvc: &PersistentVolumeClaim,
        sc: &StorageClass,
        topology_nodes: &[String],
        source: Option<&Source>,
        mutable: &BTreeMap<String, String>,
    ) -> Result<CreationPlan> {
        self.require_dynamic(Phase::Creation)?;
        let mut context = CreationContext::new(pvc, sc)
            .map_err(PlanError::Context)?
            .with_topology_nodes(topology_nodes)
            .with_mutable_parameters(mutable)
            .with_pvc_lookup(self.lookup());
        if let Some(source) = source {
            context = context.with_source(source);
        }
        let evaluated = self.render::<phase::Creation>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .claim_pod(Phase::Creation, template, evaluated.timeout, pvc)
        });
        Ok(CreationPlan {
            plan: Plan { evaluated, pod },
            context,
        })
    }
}

/// `pav render --phase creation`: the claim's volume, of no source, with
/// `--vac`'s parameters, once the claim passes validation (the driver
/// creates nothing its validation rules refuse).
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let (pvc, sc) = (&objects.pvc, &objects.sc);
    if planner.compiled().has_phase(Phase::Validation) {
        check_claim(
            &example.planned(planner.validation(pvc, sc))?.evaluated,
            example,
        )?;
    }
    let plan = planner.creation(pvc, sc, &[], None, &objects.mutable_parameters);
    example.to_yaml(example.planned(plan)?.plan)
}
