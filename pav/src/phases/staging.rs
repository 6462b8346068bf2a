//! Staging (`spec.volumeStaging`): the node plugin exposes a volume to a
//! client pod on its node, through the pod's `/pav/volume`, when kubelet
//! publishes it (an ephemeral inline volume as well as a claim's). Its
//! pod is named and labelled after the staging key (the volume handle and
//! the kubelet target path, so one per client pod) and the node it is
//! pinned to; it records what unstaging needs and is kept, by its
//! finalizer, until the volume is unstaged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use pav_templates::phase;
use pav_templates::{OptionalPodPhase, Phase, StagingContext, StagingPhase};

use super::example::Example;
use crate::pods::{
    ANNOTATION_CLAIM, ANNOTATION_CLIENT, ANNOTATION_PV, ANNOTATION_READ_ONLY, ANNOTATION_STAGED_AT,
    ANNOTATION_TARGET, ANNOTATION_UNSTAGING, FINALIZER_UNSTAGE, PodOrigin, PodParams, PodTarget,
    Publication, build_pod, claim_name, client_annotation, staging_key,
};
use crate::recipe::plan::Result;
use crate::recipe::{Plan, Planner};

/// A client pod's use of a volume, as staging is asked for it.
#[derive(Debug, Clone, Copy)]
pub struct StagingFor<'a> {
    /// The volume handle.
    pub handle: &'a str,
    /// The kubelet target path the volume is published at (staged per
    /// node: its staging path).
    pub target_path: &'a str,
    /// The client pod's namespace, name and UID; `None` when the volume
    /// is staged once for all the node's client pods (`stagingPer: Node`).
    pub client: Option<(&'a str, &'a str, &'a str)>,
    /// Whether the volume is staged read-only.
    pub read_only: bool,
    /// What the attach pod wrote (`publishContext`); empty without one.
    pub publish_context: &'a BTreeMap<String, String>,
    /// Where the node plugin moves the volume from the pod's
    /// `/pav/volume` once staged ([`Publication::moved_to`]).
    pub moved_to: Option<&'a str>,
}

impl Planner {
    /// The staging of claim `pvc`'s volume `pv` on `node` for a client
    /// pod. The unstaging phase is evaluated now too and recorded on the
    /// staging pod, for unstaging after the claim or volume is gone.
    pub fn staging(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        staging: &StagingFor<'_>,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context = self
            .staging_context(pvc, pv, node, staging.read_only)?
            .attached_with(staging.publish_context);
        let claim = claim_name(pvc);
        let pv = pv.metadata.name.as_deref().unwrap_or_default();
        self.staging_in(context, node, staging, (&claim, pv))
    }

    /// The staging of an ephemeral inline volume with the pod's
    /// `attributes` and `size` on `node` for a client pod.
    pub fn ephemeral_staging(
        &self,
        attributes: &BTreeMap<String, String>,
        size: Option<u64>,
        node: &Node,
        staging: &StagingFor<'_>,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context =
            StagingContext::ephemeral(staging.handle, attributes, size, node, staging.read_only);
        // An inline volume has neither claim nor PersistentVolume.
        self.staging_in(context, node, staging, ("", ""))
    }

    /// Staging in `context`, for `staging` on `node`, of the claim and
    /// PersistentVolume named `claim` and `pv` (empty for an inline
    /// volume). The unstaging phase is evaluated in the same context and
    /// recorded on the staging pod when it evaluates.
    fn staging_in(
        &self,
        context: StagingContext,
        node: &Node,
        staging: &StagingFor<'_>,
        (claim, pv): (&str, &str),
    ) -> Result<Plan<StagingPhase, Pod>> {
        let evaluated = self.render::<phase::Staging>(&context)?;
        let unstaging = self.compiled().render::<phase::Unstaging>(&context).ok();
        let pod = self.origin().staging_pod(
            &evaluated,
            unstaging.as_ref(),
            &Publication {
                handle: staging.handle,
                target_path: staging.target_path,
                node: node.metadata.name.as_deref().unwrap_or_default(),
                claim,
                pv,
                client: staging.client,
                read_only: staging.read_only,
                moved_to: staging.moved_to,
            },
        );
        Ok(Plan { evaluated, pod })
    }
}

impl PodOrigin<'_> {
    /// The staging pod of `publication`. It records what unstaging needs
    /// when the claim or volume is gone by then: the `unstaging` phase as
    /// rendered now (when it rendered), claim, volume, client pod, target
    /// path, read-only; its finalizer keeps it until unstaging is done.
    pub fn staging_pod(
        &self,
        staging: &StagingPhase,
        unstaging: Option<&OptionalPodPhase>,
        publication: &Publication<'_>,
    ) -> Pod {
        let key = staging_key(publication.handle, publication.target_path);
        let mut annotations = vec![
            (ANNOTATION_CLAIM, publication.claim.to_owned()),
            (ANNOTATION_PV, publication.pv.to_owned()),
            (ANNOTATION_TARGET, publication.target_path.to_owned()),
            (ANNOTATION_READ_ONLY, publication.read_only.to_string()),
        ];
        if let Some(path) = publication.moved_to {
            annotations.push((ANNOTATION_STAGED_AT, path.to_owned()));
        }
        if let Some((namespace, name, uid)) = publication.client {
            annotations.push((ANNOTATION_CLIENT, client_annotation(namespace, name, uid)));
        }
        if let Some(json) = unstaging.and_then(|u| serde_json::to_string(&u.pod_template).ok()) {
            annotations.push((ANNOTATION_UNSTAGING, json));
        }
        build_pod(
            &staging.pod_template,
            &PodParams {
                target: PodTarget {
                    provisioner: self.provisioner,
                    phase: Phase::Staging,
                    volume: &key,
                    node: Some(publication.node),
                },
                owner: self.owner,
                default_namespace: self.default_namespace,
                timeout: staging.timeout,
                annotations,
                finalizers: vec![FINALIZER_UNSTAGE],
                volume: None,
            },
        )
    }
}

/// `pav render --phase staging`: the claim's volume staged on the node for
/// the client pod (staged per node: for none), at its target path, as it
/// is not attached (no publish context).
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let staging = StagingFor {
        handle: &example.handle,
        target_path: &example.target_path,
        // Staged per node, for no client pod in particular.
        client: (planner.compiled().staging_per() == pav_templates::StagingPer::Pod)
            .then_some(example.client),
        read_only: example.options.read_only,
        publish_context: &Default::default(),
        moved_to: None,
    };
    let plan = planner.staging(&objects.pvc, &objects.pv, &objects.node, &staging);
    example.to_yaml(example.planned(plan)?.optional())
}
