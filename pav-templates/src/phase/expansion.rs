//! `spec.volumeExpansion` (pav): a volume grows on the storage side, to
//! the capacity the spec fixes, else its pod's `/pav/capacity`, else the
//! one requested.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::ExpansionContext;
use crate::error::Result;

/// `spec.volumeExpansion` as a [`Section`], rendered with an
/// [`ExpansionContext`].
#[derive(Debug, Clone, Copy)]
pub struct Expansion;

impl Section for Expansion {
    const DEFINITION: Definition = Definition {
        phase: Phase::Expansion,
        field: "volumeExpansion",
        required: false,
        name: "expansion",
        keys: &["capacity", "podTemplate", "timeout"],
        needs_pod: false,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "ExpansionFailed",
        description: "pav: how a volume grows when its claim asks for more (the\n\
                      StorageClass needs `allowVolumeExpansion: true`): the new\n\
                      `capacity` and an optional expansion `podTemplate`. Without it,\n\
                      volumes do not grow.",
    };
    type Context = ExpansionContext;
    type Evaluated = ExpansionPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<ExpansionPhase> {
        let capacity = fields.optional_capacity("capacity")?;
        Ok(ExpansionPhase {
            capacity,
            pod_template: fields.pod_template()?,
            timeout: fields.timeout()?,
        })
    }
}

/// Evaluated `spec.volumeExpansion`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpansionPhase {
    /// The volume's new capacity in bytes, if the spec fixes it; otherwise
    /// the pod's `/pav/capacity`, else the requested capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// The expansion pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}
