//! `spec.volumeUnstaging`: a staged volume is released on its node once
//! its client pod is done with it, by an optional pod that runs there.

use super::fields::Fields;
use super::{Definition, OptionalPodPhase, Phase, Section};
use crate::context::StagingContext;
use crate::error::Result;

/// `spec.volumeUnstaging` as a [`Section`], rendered with the
/// [`StagingContext`] the volume was staged with.
#[derive(Debug, Clone, Copy)]
pub struct Unstaging;

impl Section for Unstaging {
    const DEFINITION: Definition = Definition {
        phase: Phase::Unstaging,
        field: "volumeUnstaging",
        required: false,
        name: "unstaging",
        keys: super::POD_ONLY,
        needs_pod: false,
        requires: None,
        pod_on_volume_node: true,
        event_reason: "UnstagingFailed",
        description: "How staging is undone on a node: an optional unstaging `podTemplate`.",
    };
    type Context = StagingContext;
    type Evaluated = OptionalPodPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<OptionalPodPhase> {
        OptionalPodPhase::decode(fields)
    }
}
