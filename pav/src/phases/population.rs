//! Population (`spec.volumePopulation`): a new volume is filled from the
//! object its claim's `dataSourceRef` names before the claim gets it
//! (pav-csi's populator runs Kubernetes' protocol; this is the pod that
//! fills). The pod runs in the prime claim's namespace, mounts the volume
//! through it at `/pav/volume` and is owned by it, so that deleting the
//! prime claim (the user's claim deleted mid-way) deletes the pod first.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use pav_templates::{Phase, PopulationContext, StagingPhase, phase};

use super::example::Example;
use crate::pods::{ANNOTATION_CLAIM, PodOrigin, PodParams, PodTarget, PodVolume, build_pod};
use crate::recipe::plan::{Result, handle_of};
use crate::recipe::{Plan, PlanError, Planner};

/// The empty copy of a claim that its volume is bound to while it is
/// filled (pav-csi's populator makes it).
#[derive(Debug, Clone, Copy)]
pub struct PrimeClaim<'a> {
    /// Its namespace: the driver's.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its UID, for the pod's owner reference.
    pub uid: &'a str,
}

impl Planner {
    /// The population of volume `pv`, bound to `prime`, for claim `pvc`
    /// from `source` (the object `pvc`'s `dataSourceRef` names).
    pub fn population(
        &self,
        pv: &PersistentVolume,
        pvc: &PersistentVolumeClaim,
        source: &serde_json::Value,
        prime: PrimeClaim<'_>,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context = PopulationContext::new(pv, pvc, source)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::Population>(&context)?;
        let block = pv.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block");
        let pod = self.origin().population_pod(
            &evaluated.pod_template,
            evaluated.timeout,
            (handle_of(pv), block),
            prime,
            &crate::pods::claim_name(pvc),
        );
        Ok(Plan { evaluated, pod })
    }
}

impl PodOrigin<'_> {
    /// The population pod of volume `handle` (a block device when
    /// `block`), bound to `prime`, for `claim` (`namespace/name`): in the
    /// prime claim's namespace whatever its template says, owned by it,
    /// the volume at `/pav/volume`.
    pub fn population_pod(
        &self,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        (handle, block): (&str, bool),
        prime: PrimeClaim<'_>,
        claim: &str,
    ) -> Pod {
        // A claim is mounted only by pods of its namespace.
        let mut template = template.clone();
        if let Some(metadata) = &mut template.metadata {
            metadata.namespace = None;
        }
        let owner = OwnerReference {
            api_version: "v1".to_owned(),
            kind: "PersistentVolumeClaim".to_owned(),
            name: prime.name.to_owned(),
            uid: prime.uid.to_owned(),
            block_owner_deletion: Some(true),
            controller: Some(true),
        };
        build_pod(
            &template,
            &PodParams {
                target: PodTarget {
                    provisioner: self.provisioner,
                    phase: Phase::Population,
                    volume: handle,
                    node: None,
                },
                owner: Some(&owner),
                default_namespace: prime.namespace,
                timeout,
                annotations: vec![(ANNOTATION_CLAIM, claim.to_owned())],
                finalizers: Vec::new(),
                volume: Some(PodVolume::Claim {
                    name: prime.name.to_owned(),
                    block,
                }),
            },
        )
    }
}

/// `pav render --phase population`: the claim's volume filled from
/// `--data-source`, else from an object with only a name, of the kind the
/// claim's `dataSourceRef` names (the sample claim names none: then the
/// provisioner's first `populatedFrom` kind).
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let pvc = &objects.pvc;
    let source = match &objects.data_source {
        Some(source) => source.clone(),
        None => named_source(pvc, planner)?,
    };
    let uid = pvc.metadata.uid.as_deref().unwrap_or_default();
    let prime_name = format!("prime-{uid}");
    let prime = PrimeClaim {
        namespace: &example.options.namespace,
        name: &prime_name,
        uid: "",
    };
    let plan = planner.population(&objects.pv, pvc, &source, prime);
    example.to_yaml(example.planned(plan)?.optional())
}

/// An object of the kind `pvc`'s `dataSourceRef` names (else of the
/// provisioner's first `populatedFrom` kind), with a name only.
fn named_source(
    pvc: &PersistentVolumeClaim,
    planner: &Planner,
) -> anyhow::Result<serde_json::Value> {
    let reference = pvc.spec.as_ref().and_then(|s| s.data_source_ref.as_ref());
    let first = planner.compiled().populated_from().first();
    let (group, kind, name) = match (reference, first) {
        (Some(r), _) => (
            r.api_group.clone().unwrap_or_default(),
            r.kind.clone(),
            r.name.clone(),
        ),
        (None, Some(k)) => (k.api_group.clone(), k.kind.clone(), "source".to_owned()),
        (None, None) => anyhow::bail!(
            "PavProvisioner {} has no spec.populatedFrom: nothing to fill a volume from",
            planner.compiled().name()
        ),
    };
    let api_version = match group.as_str() {
        "" => "v1".to_owned(),
        group => format!("{group}/v1"),
    };
    Ok(serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": pvc.metadata.namespace},
    }))
}
