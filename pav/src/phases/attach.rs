//! Attach (`spec.volumeAttach`): ControllerPublishVolume attaches a
//! volume to a node before it is staged there; the pod's
//! `/pav/publish-context` reaches staging. Its pod is named and labelled
//! after the volume handle and the node, and placed by its template.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use pav_templates::phase;
use pav_templates::{Phase, StagingPhase};

use super::example::Example;
use crate::pods::claim_name;
use crate::recipe::plan::{Result, handle_of};
use crate::recipe::{Plan, Planner};

impl Planner {
    /// The attachment of claim `pvc`'s volume `pv` to `node`.
    pub fn attach(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context = self.staging_context(pvc, pv, node, read_only)?;
        let evaluated = self.render::<phase::Attach>(&context)?;
        let pod = self.origin().attachment_pod(
            Phase::Attach,
            &evaluated.pod_template,
            evaluated.timeout,
            (
                handle_of(pv),
                node.metadata.name.as_deref().unwrap_or_default(),
            ),
            &claim_name(pvc),
        );
        Ok(Plan { evaluated, pod })
    }
}

/// `pav render --phase attach`: the claim's volume attached to the node.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let plan = planner.attach(
        &objects.pvc,
        &objects.pv,
        &objects.node,
        example.options.read_only,
    );
    example.to_yaml(example.planned(plan)?.optional())
}
