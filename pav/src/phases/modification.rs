//! Modification (`spec.volumeModification`): ControllerModifyVolume gives
//! a volume the mutable parameters of the VolumeAttributesClass its claim
//! moved to, unless the `refusal` template refuses them. Its optional pod
//! is named and labelled after the volume handle and the parameters
//! asked for.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec};
use pav_templates::phase;
use pav_templates::{ModificationContext, ModificationPhase, Phase};

use super::example::Example;
use crate::pods::{ANNOTATION_PV, PodOrigin};
use crate::recipe::plan::{Result, handle_of};
use crate::recipe::{ParametersRefused, Plan, PlanError, Planner};

/// A modification planned, with the parameters the volume has once it
/// succeeds (what is recorded on it then).
#[derive(Debug, Clone)]
pub struct ModificationPlan {
    /// Evaluated `spec.volumeModification` and its pod.
    pub plan: Plan<ModificationPhase>,
    /// The recorded parameters with the class's on top.
    pub after: BTreeMap<String, String>,
}

impl ModificationPlan {
    /// Refuses the change when the `refusal` template evaluated to a
    /// reason.
    pub fn check_refusal(
        &self,
        provisioner: &str,
        requested: &BTreeMap<String, String>,
    ) -> std::result::Result<(), ParametersRefused> {
        match &self.plan.evaluated.refusal {
            Some(refusal) => Err(ParametersRefused {
                provisioner: provisioner.to_owned(),
                requested: requested.clone(),
                refusal: refusal.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Planner {
    /// Setting `requested` (a VolumeAttributesClass's parameters) on the
    /// volume `pv`, bound to `pvc` when it is.
    pub fn modification(
        &self,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
        requested: &BTreeMap<String, String>,
    ) -> Result<ModificationPlan> {
        let context = ModificationContext::new(pv, pvc, requested)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::Modification>(&context)?;
        // Named after the parameters too: a pod left by an earlier change
        // (its deletion interrupted) is not this one.
        let key = serde_json::json!([handle_of(pv), requested]).to_string();
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().modification_pod(
                template,
                evaluated.timeout,
                &key,
                pv.metadata.name.as_deref().unwrap_or_default(),
            )
        });
        Ok(ModificationPlan {
            plan: Plan { evaluated, pod },
            after: context.mutable_parameters_after().clone(),
        })
    }
}

impl PodOrigin<'_> {
    /// The modification pod giving the volume `handle` (PersistentVolume
    /// `pv`) the mutable parameters `key` stands for.
    pub fn modification_pod(
        &self,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        key: &str,
        pv: &str,
    ) -> Pod {
        self.phase_pod(
            template,
            timeout,
            Phase::Modification,
            key,
            None,
            vec![(ANNOTATION_PV, pv.to_owned())],
        )
    }
}

/// `pav render --phase modification`: the claim's volume given `--vac`'s
/// parameters (a sample `mode: ro` without it), refused as the driver
/// refuses it.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let sample = BTreeMap::from([("mode".to_owned(), "ro".to_owned())]);
    let requested = if objects.vac_given {
        &objects.mutable_parameters
    } else {
        &sample
    };
    let plan = example.planned(planner.modification(&objects.pv, Some(&objects.pvc), requested))?;
    plan.check_refusal(example.provisioner, requested)?;
    example.to_yaml(plan.plan)
}
