//! `spec.volumeStaging`, the one section every provisioner has: a volume
//! is made available to a client pod on that pod's node. Its pod,
//! mandatory, exposes the volume at `/pav/volume`, then either completes
//! or creates `/pav/ready` and keeps running; pav then bind-mounts it
//! onto the kubelet's target path.

use super::fields::Fields;
use super::{Definition, Phase, Section, StagingPhase};
use crate::context::StagingContext;
use crate::error::Result;

/// `spec.volumeStaging` as a [`Section`], rendered with a
/// [`StagingContext`]: its pod is mandatory.
#[derive(Debug, Clone, Copy)]
pub struct Staging;

impl Section for Staging {
    const DEFINITION: Definition = Definition {
        phase: Phase::Staging,
        field: "volumeStaging",
        required: true,
        name: "staging",
        keys: super::POD_ONLY,
        needs_pod: true,
        requires: None,
        pod_on_volume_node: true,
        event_reason: "StagingFailed",
        description: "How a volume is made available on a node: the mandatory staging\n\
                      `podTemplate`, whose pod exposes the volume at `/pav/volume`.",
    };
    type Context = StagingContext;
    type Evaluated = StagingPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<StagingPhase> {
        StagingPhase::decode(fields)
    }
}
