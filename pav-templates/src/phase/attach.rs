//! `spec.volumeAttach` (pav): a volume is attached to a node before it is
//! staged there. Its pod, mandatory, runs to completion; its
//! `/pav/publish-context` reaches staging.

use super::fields::Fields;
use super::{Definition, Phase, Section, StagingPhase};
use crate::context::StagingContext;
use crate::error::Result;

/// `spec.volumeAttach` as a [`Section`], rendered with the
/// [`StagingContext`] of the volume and the node it is attached to: its
/// pod is mandatory.
#[derive(Debug, Clone, Copy)]
pub struct Attach;

impl Section for Attach {
    const DEFINITION: Definition = Definition {
        phase: Phase::Attach,
        field: "volumeAttach",
        required: false,
        name: "attach",
        keys: super::POD_ONLY,
        needs_pod: true,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "AttachFailed",
        description: "pav: how a volume is attached to a node before it is staged there\n\
                      (Kubernetes VolumeAttachments; the CSIDriver then has\n\
                      `attachRequired: true`): the mandatory attach `podTemplate`, whose\n\
                      `/pav/publish-context` (a map of strings) staging sees as\n\
                      `publishContext`.",
    };
    type Context = StagingContext;
    type Evaluated = StagingPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<StagingPhase> {
        StagingPhase::decode(fields)
    }
}
