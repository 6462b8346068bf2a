//! Snapshot deletion (`spec.snapshotDeletion`): DeleteSnapshot deletes a
//! snapshot, known by its handle (and its source volume's, when
//! recorded). Its optional pod is named and labelled after the snapshot's
//! handle.

use pav_templates::phase;
use pav_templates::{OptionalPodPhase, Phase, SnapshotContext};

use super::example::Example;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, Planner};

impl Planner {
    /// The deletion of snapshot `handle`, taken of the volume `source`
    /// when that is known.
    pub fn snapshot_deletion(
        &self,
        handle: &str,
        source: Option<&str>,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context = SnapshotContext::deletion(handle, source).with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::SnapshotDeletion>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .snapshot_pod(Phase::SnapshotDeletion, template, evaluated.timeout, handle)
        });
        Ok(Plan { evaluated, pod })
    }
}

/// `pav render --phase snapshot-deletion`: the snapshot
/// `--snapshot-content` records, else a snapshot of the claim's volume
/// named after the claim's UID (its handle the name).
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    let (snapshot, source) = match objects.recorded_snapshot(Phase::SnapshotDeletion)? {
        Some(recorded) => recorded.members.first().cloned().unwrap_or_default(),
        None => (
            objects.snapshot_name("snapshot"),
            Some(example.handle.clone()),
        ),
    };
    let plan = planner.snapshot_deletion(&snapshot, source.as_deref());
    example.to_yaml(example.planned(plan)?)
}
