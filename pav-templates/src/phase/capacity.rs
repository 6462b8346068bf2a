//! `spec.storageCapacity` (pav): the room for new volumes in one topology
//! segment (a node), published as CSIStorageCapacity so that the scheduler
//! places claims where they fit. Given by the spec, or by a pod whose
//! answer is reused for a while.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::CapacityContext;
use crate::error::{Error, Result};

/// `spec.storageCapacity` as a [`Section`], rendered with a
/// [`CapacityContext`]: `availableCapacity` or a pod (or both) must be
/// given.
#[derive(Debug, Clone, Copy)]
pub struct Capacity;

impl Section for Capacity {
    const DEFINITION: Definition = Definition {
        phase: Phase::Capacity,
        field: "storageCapacity",
        required: false,
        name: "capacity",
        keys: &[
            "availableCapacity",
            "maximumVolumeSize",
            "podTemplate",
            "timeout",
            "cacheFor",
        ],
        needs_pod: false,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "CapacityFailed",
        description: "pav: how much room for new volumes each topology segment (each\n\
                      node) has, published as CSIStorageCapacity so the scheduler places\n\
                      `WaitForFirstConsumer` claims where they fit: `availableCapacity`\n\
                      (and `maximumVolumeSize`) from templates, or an optional capacity\n\
                      `podTemplate` run on the segment's node that writes\n\
                      `/pav/capacity`; its answer is reused for `cacheFor` (default 5m).\n\
                      Dynamic provisioning only.",
    };
    type Context = CapacityContext;
    type Evaluated = CapacityPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<CapacityPhase> {
        let available_capacity = fields.optional_bytes("availableCapacity")?;
        let maximum_volume_size = fields.optional_capacity("maximumVolumeSize")?;
        let pod_template = fields.pod_template()?;
        if available_capacity.is_none() && pod_template.is_none() {
            return Err(Error::Rule {
                at: fields.location_of_phase(),
                message: "must specify availableCapacity or podTemplate (or both)".into(),
            });
        }
        Ok(CapacityPhase {
            available_capacity,
            maximum_volume_size,
            pod_template,
            timeout: fields.timeout()?,
            cache_for: fields.duration("cacheFor")?,
        })
    }
}

/// Evaluated `spec.storageCapacity`: the room in one topology segment.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityPhase {
    /// Bytes available for new volumes, if the spec gives them; otherwise
    /// the pod's `/pav/capacity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_capacity: Option<u64>,
    /// The largest volume that could be created now, when it is less than
    /// the room (CSI `maximum_volume_size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_volume_size: Option<u64>,
    /// The capacity pod, run to completion on the segment's node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
    /// How long a pod's answer is reused before another pod runs
    /// ([`DEFAULT_CAPACITY_CACHE`] when absent).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub cache_for: Option<Duration>,
}

/// How long a capacity pod's answer is reused when `cacheFor` is not
/// given: external-provisioner asks every minute per class and segment,
/// and a pod per node each minute would be most of a small cluster's work.
pub const DEFAULT_CAPACITY_CACHE: Duration = Duration::from_secs(300);
