//! Group snapshot creation (`spec.groupSnapshotCreation`):
//! CreateVolumeGroupSnapshot takes snapshots of several volumes together,
//! with the VolumeGroupSnapshotClass's parameters; the pod's
//! `/pav/snapshots` names each member's. Its pod is named and labelled
//! after the group's name (the one csi-snapshotter gives it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use pav_templates::phase;
use pav_templates::{GroupMember, GroupSnapshotContext, GroupSnapshotCreationPhase, Phase};

use super::example::Example;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, PlanError, Planner};

impl Planner {
    /// The group snapshot named `name` of `members`, with the
    /// VolumeGroupSnapshotClass's `parameters`.
    pub fn group_snapshot_creation(
        &self,
        name: &str,
        parameters: &BTreeMap<String, String>,
        members: &[GroupMember<'_>],
    ) -> Result<Plan<GroupSnapshotCreationPhase, Pod>> {
        let context = GroupSnapshotContext::creation(name, parameters, members)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::GroupSnapshotCreation>(&context)?;
        let pod = self.origin().snapshot_pod(
            Phase::GroupSnapshotCreation,
            &evaluated.pod_template,
            evaluated.timeout,
            name,
        );
        Ok(Plan { evaluated, pod })
    }
}

/// `pav render --phase group-snapshot-creation`: a group of the one volume
/// given, named as `--snapshot-content` records it (else after the claim's
/// UID), with `--snapshot-class`'s parameters.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    objects.recorded_snapshot(Phase::GroupSnapshotCreation)?;
    let member = GroupMember {
        pv: &objects.pv,
        pvc: Some(&objects.pvc),
    };
    let plan = planner.group_snapshot_creation(
        &objects.snapshot_name("groupsnapshot"),
        &objects.snapshot_parameters,
        &[member],
    );
    example.to_yaml(example.planned(plan)?.optional())
}
