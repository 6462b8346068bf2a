//! `spec.snapshotCreation` (pav): a snapshot of a volume is taken. Its
//! handle and size are fixed by the spec or written by its pod.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::SnapshotContext;
use crate::error::Result;

/// `spec.snapshotCreation` as a [`Section`], rendered with a
/// [`SnapshotContext::creation`].
#[derive(Debug, Clone, Copy)]
pub struct SnapshotCreation;

impl Section for SnapshotCreation {
    const DEFINITION: Definition = Definition {
        phase: Phase::SnapshotCreation,
        field: "snapshotCreation",
        required: false,
        name: "snapshot-creation",
        keys: &["handle", "size", "podTemplate", "timeout"],
        needs_pod: false,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "SnapshotCreationFailed",
        description: "pav: how a snapshot of a volume is taken (for VolumeSnapshots of a\n\
                      VolumeSnapshotClass whose `driver` is this provisioner): `handle`,\n\
                      `size` and an optional snapshot creation `podTemplate`.",
    };
    type Context = SnapshotContext;
    type Evaluated = SnapshotCreationPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<SnapshotCreationPhase> {
        let handle = fields.handle("handle")?;
        let size = fields.optional_capacity("size")?;
        Ok(SnapshotCreationPhase {
            handle,
            size,
            pod_template: fields.pod_template()?,
            timeout: fields.timeout()?,
        })
    }
}

/// Evaluated `spec.snapshotCreation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotCreationPhase {
    /// The snapshot's handle, if the spec fixes it; otherwise the pod's
    /// `/pav/handle`, else `defaultHandle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The snapshot's size in bytes (what a volume restored from it needs),
    /// if the spec fixes it; otherwise the pod's `/pav/size`, else the
    /// source volume's capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The snapshot creation pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}
