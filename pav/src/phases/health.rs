//! Health (`spec.volumeHealth`): a staged volume's periodic check, whose
//! `/pav/condition` kubelet reports (NodeGetVolumeStats). Its pod is named
//! and labelled after the staging pod and the check's round (the time in
//! units of `every`), runs on the staging pod's node and sees the staged
//! volume at `/pav/volume`.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use pav_templates::phase;
use pav_templates::{HealthPhase, Phase};
use phase::DEFAULT_HEALTH_CHECK_EVERY;

use super::example::Example;
use crate::pods::{ANNOTATION_HEALTH_ROUND, PodOrigin, StagedVolume, claim_name};
use crate::recipe::plan::Result;
use crate::recipe::{Plan, Planner};

impl Planner {
    /// The health check of claim `pvc`'s volume `pv`, `staged` on `node`,
    /// at `now`: its pod is named after the
    /// check's round (`now` in units of `every`), which the calls of one
    /// round share.
    pub fn health(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
        staged: &StagedVolume,
        now: std::time::SystemTime,
    ) -> Result<Plan<HealthPhase, Pod>> {
        let context = self.staging_context(pvc, pv, node, read_only)?;
        let evaluated = self.render::<phase::Health>(&context)?;
        let every = evaluated.every.unwrap_or(DEFAULT_HEALTH_CHECK_EVERY);
        let since_epoch = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let every = every.as_secs().max(1);
        let round = since_epoch.as_secs() / every;
        let pod = self.origin().health_pod(
            &evaluated,
            staged,
            (round, every),
            node.metadata.name.as_deref().unwrap_or_default(),
            &claim_name(pvc),
        );
        Ok(Plan { evaluated, pod })
    }
}

impl PodOrigin<'_> {
    /// The health check pod of the volume `staged` on `node`, for `claim`
    /// (`namespace/name`): it runs on
    /// that node and sees the staged volume at `/pav/volume`. `round`
    /// numbers the check (the time in units of `every` seconds), so that a
    /// pod left by an earlier one (its deletion interrupted) is not this
    /// one, and the calls of one round share its pod; the pod says when its
    /// round began ([`ANNOTATION_HEALTH_ROUND`]).
    pub fn health_pod(
        &self,
        phase: &HealthPhase,
        staged: &StagedVolume,
        (round, every): (u64, u64),
        node: &str,
        claim: &str,
    ) -> Pod {
        let key = format!("{}\n{round}", staged.staging_pod);
        let target = (Phase::Health, key.as_str(), node);
        let mut pod =
            self.staged_volume_pod(&phase.pod_template, phase.timeout, target, staged, claim);
        let began = i64::try_from(round.saturating_mul(every)).unwrap_or(i64::MAX);
        let began = (k8s_openapi::jiff::Timestamp::from_second(began))
            .map(|t| t.to_string())
            .unwrap_or_default();
        (pod.metadata.annotations.get_or_insert_default())
            .insert(ANNOTATION_HEALTH_ROUND.to_owned(), began);
        pod
    }
}

/// `pav render --phase health`: the check of the volume the client pod's
/// staging pod staged, at `--time`.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let staged = StagedVolume::per_pod(&example.staging_pod());
    let plan = planner.health(
        &objects.pvc,
        &objects.pv,
        &objects.node,
        example.options.read_only,
        &staged,
        example.options.time,
    );
    example.to_yaml(example.planned(plan)?.optional())
}
