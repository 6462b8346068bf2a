//! Snapshot creation (`spec.snapshotCreation`): CreateSnapshot takes a
//! snapshot of a volume, with the VolumeSnapshotClass's parameters. Its
//! optional pod is named and labelled after the snapshot's name (the one
//! csi-snapshotter gives it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use pav_templates::phase;
use pav_templates::{Phase, SnapshotContext, SnapshotCreationPhase};

use super::example::Example;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, PlanError, Planner};

impl Planner {
    /// The snapshot named `name` of volume `pv` (of claim `pvc`, if it
    /// still has one), with the VolumeSnapshotClass's `parameters`.
    pub fn snapshot_creation(
        &self,
        name: &str,
        parameters: &BTreeMap<String, String>,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
    ) -> Result<Plan<SnapshotCreationPhase>> {
        let context = SnapshotContext::creation(name, parameters, pv, pvc)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::SnapshotCreation>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .snapshot_pod(Phase::SnapshotCreation, template, evaluated.timeout, name)
        });
        Ok(Plan { evaluated, pod })
    }
}

/// `pav render --phase snapshot-creation`: a snapshot of the claim's
/// volume, named as `--snapshot-content` records it (else after the
/// claim's UID), with `--snapshot-class`'s parameters.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let objects = example.objects;
    objects.recorded_snapshot(Phase::SnapshotCreation)?;
    let snapshot = objects.snapshot_name("snapshot");
    let plan = planner.snapshot_creation(
        &snapshot,
        &objects.snapshot_parameters,
        &objects.pv,
        Some(&objects.pvc),
    );
    example.to_yaml(example.planned(plan)?)
}
