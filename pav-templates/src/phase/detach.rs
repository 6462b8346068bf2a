//! `spec.volumeDetach` (pav): a volume is detached from a node after it
//! was unstaged there, by an optional pod; only a provisioner that
//! attaches volumes detaches them.

use super::fields::Fields;
use super::{Definition, OptionalPodPhase, Phase, Section};
use crate::context::StagingContext;
use crate::error::Result;

/// `spec.volumeDetach` as a [`Section`], rendered with the
/// [`StagingContext`] of the volume and the node it is detached from.
#[derive(Debug, Clone, Copy)]
pub struct Detach;

impl Section for Detach {
    const DEFINITION: Definition = Definition {
        phase: Phase::Detach,
        field: "volumeDetach",
        required: false,
        name: "detach",
        keys: super::POD_ONLY,
        needs_pod: false,
        requires: Some(Phase::Attach),
        pod_on_volume_node: false,
        event_reason: "DetachFailed",
        description: "pav: how a volume is detached from a node once no pod there uses\n\
                      it: an optional detach `podTemplate`. Needs volumeAttach.",
    };
    type Context = StagingContext;
    type Evaluated = OptionalPodPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<OptionalPodPhase> {
        OptionalPodPhase::decode(fields)
    }
}
