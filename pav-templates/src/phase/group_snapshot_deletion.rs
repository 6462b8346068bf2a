//! `spec.groupSnapshotDeletion` (pav): a group snapshot and its members
//! are deleted, by an optional pod; only a provisioner that takes group
//! snapshots deletes them.

use super::fields::Fields;
use super::{Definition, OptionalPodPhase, Phase, Section};
use crate::context::GroupSnapshotContext;
use crate::error::Result;

/// `spec.groupSnapshotDeletion` as a [`Section`], rendered with a
/// [`GroupSnapshotContext::deletion`].
#[derive(Debug, Clone, Copy)]
pub struct GroupSnapshotDeletion;

impl Section for GroupSnapshotDeletion {
    const DEFINITION: Definition = Definition {
        phase: Phase::GroupSnapshotDeletion,
        field: "groupSnapshotDeletion",
        required: false,
        name: "group-snapshot-deletion",
        keys: super::POD_ONLY,
        needs_pod: false,
        requires: Some(Phase::GroupSnapshotCreation),
        pod_on_volume_node: false,
        event_reason: "GroupSnapshotDeletionFailed",
        description: "pav: how a group snapshot and its members are deleted: an optional\n\
                      group snapshot deletion `podTemplate`. Needs groupSnapshotCreation.",
    };
    type Context = GroupSnapshotContext;
    type Evaluated = OptionalPodPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<OptionalPodPhase> {
        OptionalPodPhase::decode(fields)
    }
}
