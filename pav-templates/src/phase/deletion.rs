//! `spec.volumeDeletion`: a volume is deleted, by its optional pod, in
//! the context of its creation (the same that undoes a creation that
//! failed).

use super::fields::Fields;
use super::{Definition, OptionalPodPhase, Phase, Section};
use crate::context::CreationContext;
use crate::error::Result;

/// `spec.volumeDeletion` as a [`Section`], rendered with the
/// [`CreationContext`] of the volume deleted.
#[derive(Debug, Clone, Copy)]
pub struct Deletion;

impl Section for Deletion {
    const DEFINITION: Definition = Definition {
        phase: Phase::Deletion,
        field: "volumeDeletion",
        required: false,
        name: "deletion",
        keys: super::POD_ONLY,
        needs_pod: false,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "DeletionFailed",
        description: "How a volume is deleted (dynamic provisioning only): an optional\n\
                      deletion `podTemplate`.",
    };
    type Context = CreationContext;
    type Evaluated = OptionalPodPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<OptionalPodPhase> {
        OptionalPodPhase::decode(fields)
    }
}
