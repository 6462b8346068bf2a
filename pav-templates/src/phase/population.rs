//! `spec.volumePopulation` (pav): a new volume is filled from the object
//! its claim's `dataSourceRef` names (a kind in `spec.populatedFrom`),
//! before the claim gets it. Its pod mounts the volume at `/pav/volume`
//! (a block volume's device is there) and succeeds once the data is
//! written.

use super::fields::Fields;
use super::{Definition, Phase, Section, StagingPhase};
use crate::context::PopulationContext;
use crate::error::Result;

/// `spec.volumePopulation` as a [`Section`], rendered with a
/// [`PopulationContext`].
#[derive(Debug, Clone, Copy)]
pub struct Population;

impl Section for Population {
    const DEFINITION: Definition = Definition {
        phase: Phase::Population,
        field: "volumePopulation",
        required: false,
        name: "population",
        keys: super::POD_ONLY,
        needs_pod: true,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "PopulationFailed",
        description: "pav: how a new volume is filled from the object its claim's\n\
                      `dataSourceRef` names (one of `populatedFrom`'s kinds), before the\n\
                      claim gets it: a population `podTemplate`, whose containers see the\n\
                      volume at `/pav/volume`, run to completion. Needs populatedFrom.",
    };
    type Context = PopulationContext;
    type Evaluated = StagingPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<StagingPhase> {
        StagingPhase::decode(fields)
    }
}
