//! Node expansion (`spec.volumeNodeExpansion`): NodeExpandVolume grows a
//! staged volume on its node (its file system, say) once the storage
//! grew. Its pod is named and labelled after the staging pod and the new
//! size, runs on the staging pod's node and sees the staged volume at
//! `/pav/volume`.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use pav_templates::phase;
use pav_templates::{Phase, StagingPhase};

use super::example::Example;
use crate::pods::{PodOrigin, StagedVolume, claim_name};
use crate::recipe::plan::Result;
use crate::recipe::{Plan, Planner};

impl Planner {
    /// The node expansion of claim `pvc`'s volume `pv`, `staged` on
    /// `node`, grown to `capacity` bytes.
    pub fn node_expansion(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
        staged: &StagedVolume,
        capacity: u64,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context = self
            .staging_context(pvc, pv, node, read_only)?
            .expanded_to(capacity);
        let evaluated = self.render::<phase::NodeExpansion>(&context)?;
        let pod = self.origin().node_expansion_pod(
            &evaluated,
            staged,
            capacity,
            node.metadata.name.as_deref().unwrap_or_default(),
            &claim_name(pvc),
        );
        Ok(Plan { evaluated, pod })
    }
}

impl PodOrigin<'_> {
    /// The node expansion pod of the volume `staged` on `node`, grown to
    /// `capacity` bytes, for `claim`
    /// (`namespace/name`): it runs on that node and sees the staged volume
    /// at `/pav/volume`.
    pub fn node_expansion_pod(
        &self,
        phase: &StagingPhase,
        staged: &StagedVolume,
        capacity: u64,
        node: &str,
        claim: &str,
    ) -> Pod {
        // Named after the size too: a pod left by an earlier growth (its
        // deletion interrupted) is not this one.
        let key = format!("{}\n{capacity}", staged.staging_pod);
        let target = (Phase::NodeExpansion, key.as_str(), node);
        self.staged_volume_pod(&phase.pod_template, phase.timeout, target, staged, claim)
    }
}

/// `pav render --phase node-expansion`: the volume the client pod's
/// staging pod staged, grown to the claim's request.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let (capacity, _) = example.requested_capacity()?;
    let staged = StagedVolume::per_pod(&example.staging_pod());
    let plan = planner.node_expansion(
        &objects.pvc,
        &objects.pv,
        &objects.node,
        example.options.read_only,
        &staged,
        capacity,
    );
    example.to_yaml(example.planned(plan)?.optional())
}
