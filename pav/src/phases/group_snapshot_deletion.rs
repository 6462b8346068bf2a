//! Group snapshot deletion (`spec.groupSnapshotDeletion`):
//! DeleteVolumeGroupSnapshot deletes a group snapshot and its members,
//! known by their handles (and their source volumes', when recorded). Its
//! optional pod is named and labelled after the group's handle.

use pav_templates::phase;
use pav_templates::{GroupSnapshotContext, OptionalPodPhase, Phase};

use super::example::Example;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, Planner};

impl Planner {
    /// The deletion of group snapshot `handle` and its members
    /// `snapshots` (each snapshot's handle, and its source's when known).
    pub fn group_snapshot_deletion(
        &self,
        handle: &str,
        snapshots: &[(String, Option<String>)],
    ) -> Result<Plan<OptionalPodPhase>> {
        let context =
            GroupSnapshotContext::deletion(handle, snapshots).with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::GroupSnapshotDeletion>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().snapshot_pod(
                Phase::GroupSnapshotDeletion,
                template,
                evaluated.timeout,
                handle,
            )
        });
        Ok(Plan { evaluated, pod })
    }
}

/// `pav render --phase group-snapshot-deletion`: the group
/// `--snapshot-content` records, else a group of one snapshot of the
/// claim's volume, each named after the claim's UID (their handles the
/// names).
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let (group, members) = match objects.recorded_snapshot(Phase::GroupSnapshotDeletion)? {
        Some(recorded) => (
            recorded.handle.clone().unwrap_or_default(),
            recorded.members.clone(),
        ),
        None => (
            objects.snapshot_name("groupsnapshot"),
            vec![(
                objects.snapshot_name("snapshot"),
                Some(example.handle.clone()),
            )],
        ),
    };
    let plan = planner.group_snapshot_deletion(&group, &members);
    example.to_yaml(example.planned(plan)?)
}
