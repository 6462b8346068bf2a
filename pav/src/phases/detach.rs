//! Detach (`spec.volumeDetach`): ControllerUnpublishVolume detaches a
//! volume from a node after it was unstaged there. Its optional pod is
//! named and labelled after the volume handle and the node, and placed by
//! its template.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use pav_templates::phase;
use pav_templates::{OptionalPodPhase, Phase};

use super::example::Example;
use crate::pods::claim_name;
use crate::recipe::plan::{Result, handle_of};
use crate::recipe::{Plan, Planner};

impl Planner {
    /// The detachment of claim `pvc`'s volume `pv` from `node`.
    pub fn detach(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context = self.staging_context(pvc, pv, node, false)?;
        let evaluated = self.render::<phase::Detach>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().attachment_pod(
                Phase::Detach,
                template,
                evaluated.timeout,
                (
                    handle_of(pv),
                    node.metadata.name.as_deref().unwrap_or_default(),
                ),
                &claim_name(pvc),
            )
        });
        Ok(Plan { evaluated, pod })
    }
}

/// `pav render --phase detach`: the claim's volume detached from the node.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let plan = planner.detach(&objects.pvc, &objects.pv, &objects.node);
    example.to_yaml(example.planned(plan)?)
}
