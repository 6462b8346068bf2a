//! `spec.volumeNodeExpansion` (pav): a staged volume grows on its node
//! (its filesystem, say), after `spec.volumeExpansion` grew it on the
//! storage side. Its pod, mandatory as the staging pod is, runs to
//! completion there with the staged volume at `/pav/volume`.

use super::fields::Fields;
use super::{Definition, Phase, Section, StagingPhase};
use crate::context::StagingContext;
use crate::error::Result;

/// `spec.volumeNodeExpansion` as a [`Section`], rendered with the
/// [`StagingContext`] of the staged volume, its capacity the new one
/// ([`StagingContext::expanded_to`]): its pod is mandatory.
#[derive(Debug, Clone, Copy)]
pub struct NodeExpansion;

impl Section for NodeExpansion {
    const DEFINITION: Definition = Definition {
        phase: Phase::NodeExpansion,
        field: "volumeNodeExpansion",
        required: false,
        name: "node-expansion",
        keys: super::POD_ONLY,
        needs_pod: true,
        requires: Some(Phase::Expansion),
        pod_on_volume_node: true,
        event_reason: "NodeExpansionFailed",
        description: "pav: how a staged volume grows on its node, while pods use it: the\n\
                      mandatory node expansion `podTemplate`, run on each node where the\n\
                      volume is staged, with the volume at `/pav/volume`. Needs\n\
                      volumeExpansion.",
    };
    type Context = StagingContext;
    type Evaluated = StagingPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<StagingPhase> {
        StagingPhase::decode(fields)
    }
}
