//! `spec.volumeHealth` (pav): a staged volume's periodic check, whose
//! `/pav/condition` the kubelet reports. Its pod, mandatory, runs on the
//! volume's node with the staged volume at `/pav/volume`; its answer
//! stands for `every`.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::StagingContext;
use crate::error::Result;

/// `spec.volumeHealth` as a [`Section`], rendered with the
/// [`StagingContext`] of the volume checked: its pod is mandatory.
#[derive(Debug, Clone, Copy)]
pub struct Health;

impl Section for Health {
    const DEFINITION: Definition = Definition {
        phase: Phase::Health,
        field: "volumeHealth",
        required: false,
        name: "health",
        keys: &["podTemplate", "timeout", "every"],
        needs_pod: true,
        requires: None,
        pod_on_volume_node: true,
        event_reason: "HealthCheckFailed",
        description: "pav: how a staged volume's health is checked: a health check\n\
                      `podTemplate` run on each node where the volume is staged, with the\n\
                      volume at `/pav/volume`, every `every` (default 5m); it writes\n\
                      `/pav/condition`, which the kubelet reports (NodeGetVolumeStats).\n\
                      Without it, a staging pod that keeps running may write\n\
                      `/pav/condition` itself.",
    };
    type Context = StagingContext;
    type Evaluated = HealthPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<HealthPhase> {
        Ok(HealthPhase {
            pod_template: fields.mandatory_pod_template()?,
            timeout: fields.timeout()?,
            every: fields.duration("every")?,
        })
    }
}

/// How often a staged volume is checked when `every` is not given: the
/// kubelet asks for its condition each minute, and a pod per volume each
/// minute would be most of a node's work.
pub const DEFAULT_HEALTH_CHECK_EVERY: Duration = Duration::from_secs(300);

/// Evaluated `spec.volumeHealth`: a staged volume's check.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthPhase {
    /// The health check pod, run to completion on the volume's node with
    /// the staged volume at `/pav/volume`; it writes `/pav/condition`.
    pub pod_template: PodTemplateSpec,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
    /// How long a check's answer stands before the next check runs
    /// ([`DEFAULT_HEALTH_CHECK_EVERY`] when absent).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub every: Option<Duration>,
}
