//! `spec.snapshotDeletion` (pav): a snapshot is deleted, by an optional
//! pod; only a provisioner that takes snapshots deletes them.

use super::fields::Fields;
use super::{Definition, OptionalPodPhase, Phase, Section};
use crate::context::SnapshotContext;
use crate::error::Result;

/// `spec.snapshotDeletion` as a [`Section`], rendered with a
/// [`SnapshotContext::deletion`].
#[derive(Debug, Clone, Copy)]
pub struct SnapshotDeletion;

impl Section for SnapshotDeletion {
    const DEFINITION: Definition = Definition {
        phase: Phase::SnapshotDeletion,
        field: "snapshotDeletion",
        required: false,
        name: "snapshot-deletion",
        keys: super::POD_ONLY,
        needs_pod: false,
        requires: Some(Phase::SnapshotCreation),
        pod_on_volume_node: false,
        event_reason: "SnapshotDeletionFailed",
        description: "pav: how a snapshot is deleted: an optional snapshot deletion\n\
                      `podTemplate`. Needs snapshotCreation.",
    };
    type Context = SnapshotContext;
    type Evaluated = OptionalPodPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<OptionalPodPhase> {
        OptionalPodPhase::decode(fields)
    }
}
