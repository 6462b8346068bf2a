//! Unstaging (`spec.volumeUnstaging`): the node plugin takes a staged
//! volume away from its client pod's node when kubelet unpublishes it,
//! after stopping the staging pod. Its optional pod is named and labelled
//! after the staging pod's volume label and the node it is pinned to.
//! When the claim or volume is gone by then, the node plugin builds it
//! from the template the staging pod recorded instead of planning it.

use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec,
};
use pav_templates::phase;
use pav_templates::{OptionalPodPhase, Phase};

use super::example::Example;
use crate::pods::{ANNOTATION_CLAIM, PodOrigin, PodParams, PodTarget, build_pod, claim_name};
use crate::recipe::plan::Result;
use crate::recipe::{Plan, Planner};

impl Planner {
    /// The unstaging of claim `pvc`'s volume `pv` on `node`, after the
    /// staging pod whose volume label is `staging_label`.
    pub fn unstaging(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
        staging_label: &str,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context = self.staging_context(pvc, pv, node, read_only)?;
        let evaluated = self.render::<phase::Unstaging>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().unstaging_pod(
                template,
                staging_label,
                node.metadata.name.as_deref().unwrap_or_default(),
                &claim_name(pvc),
            )
        });
        Ok(Plan { evaluated, pod })
    }
}

impl PodOrigin<'_> {
    /// The unstaging pod of the staging pod whose volume label is
    /// `staging_label` (the [`label_value`](crate::pods::label_value) of
    /// its [`staging_key`](crate::pods::staging_key)) on `node`, for
    /// `claim` (`namespace/name`). No timeout: the template recorded on
    /// the staging pod holds none, so a fresh render and the recorded one
    /// give the same pod.
    pub fn unstaging_pod(
        &self,
        template: &PodTemplateSpec,
        staging_label: &str,
        node: &str,
        claim: &str,
    ) -> Pod {
        build_pod(
            template,
            &PodParams {
                target: PodTarget {
                    provisioner: self.provisioner,
                    phase: Phase::Unstaging,
                    volume: staging_label,
                    node: Some(node),
                },
                owner: self.owner,
                default_namespace: self.default_namespace,
                timeout: None,
                annotations: vec![(ANNOTATION_CLAIM, claim.to_owned())],
                finalizers: Vec::new(),
                volume: None,
            },
        )
    }
}

/// `pav render --phase unstaging`: the claim's volume unstaged from the
/// node after the client pod's staging pod.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let staging_label = crate::pods::staging_label(&example.handle, &example.target_path);
    let plan = planner.unstaging(
        &objects.pvc,
        &objects.pv,
        &objects.node,
        example.options.read_only,
        &staging_label,
    );
    example.to_yaml(example.planned(plan)?)
}
