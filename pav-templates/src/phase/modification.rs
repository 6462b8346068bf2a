//! `spec.volumeModification` (pav): a volume's mutable parameters change
//! when its claim moves to another VolumeAttributesClass. A `refusal` (or
//! a template that fails) refuses the new parameters before anything
//! changed; else its pod makes the change.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::ModificationContext;
use crate::error::Result;

/// `spec.volumeModification` as a [`Section`], rendered with a
/// [`ModificationContext`].
#[derive(Debug, Clone, Copy)]
pub struct Modification;

impl Section for Modification {
    const DEFINITION: Definition = Definition {
        phase: Phase::Modification,
        field: "volumeModification",
        required: false,
        name: "modification",
        keys: &["refusal", "podTemplate", "timeout"],
        needs_pod: false,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "ModificationFailed",
        description: "pav: how a volume's mutable parameters change when its claim moves\n\
                      to another VolumeAttributesClass of this driver: an optional\n\
                      modification `podTemplate` and a `refusal` message that refuses them;\n\
                      on success the new parameters are recorded on the volume, and\n\
                      staging sees them as `mutableParams`. Without it, claims naming a\n\
                      VolumeAttributesClass are refused.",
    };
    type Context = ModificationContext;
    type Evaluated = ModificationPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<ModificationPhase> {
        Ok(ModificationPhase {
            refusal: fields.message("refusal")?,
            pod_template: fields.pod_template()?,
            timeout: fields.timeout()?,
        })
    }
}

/// Evaluated `spec.volumeModification`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModificationPhase {
    /// Why the new parameters are refused, when the `refusal` template
    /// says so (a non-empty message): nothing changes, and the driver
    /// answers `INVALID_ARGUMENT` with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The modification pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}
