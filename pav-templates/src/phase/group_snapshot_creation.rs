//! `spec.groupSnapshotCreation` (pav): snapshots of several volumes are
//! taken together. Its pod, mandatory, takes every member; its
//! `/pav/snapshots` names each one.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::GroupSnapshotContext;
use crate::error::Result;

/// `spec.groupSnapshotCreation` as a [`Section`], rendered with a
/// [`GroupSnapshotContext::creation`]: its pod is mandatory.
#[derive(Debug, Clone, Copy)]
pub struct GroupSnapshotCreation;

impl Section for GroupSnapshotCreation {
    const DEFINITION: Definition = Definition {
        phase: Phase::GroupSnapshotCreation,
        field: "groupSnapshotCreation",
        required: false,
        name: "group-snapshot-creation",
        keys: &["handle", "podTemplate", "timeout"],
        needs_pod: true,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "GroupSnapshotCreationFailed",
        description: "pav: how snapshots of several volumes are taken together (for\n\
                      VolumeGroupSnapshots of a VolumeGroupSnapshotClass whose `driver`\n\
                      is this provisioner): `handle` and the mandatory group snapshot\n\
                      creation `podTemplate`, which writes `/pav/snapshots` (each source\n\
                      volume's handle mapped to the handle of its snapshot). The members\n\
                      are ordinary snapshots: restored as `source` of kind\n\
                      `VolumeSnapshot`, deleted by snapshotDeletion.",
    };
    type Context = GroupSnapshotContext;
    type Evaluated = GroupSnapshotCreationPhase;

    fn decode(fields: &mut Fields<'_>) -> Result<GroupSnapshotCreationPhase> {
        Ok(GroupSnapshotCreationPhase {
            handle: fields.handle("handle")?,
            pod_template: fields.mandatory_pod_template()?,
            timeout: fields.timeout()?,
        })
    }
}

/// Evaluated `spec.groupSnapshotCreation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSnapshotCreationPhase {
    /// The group's handle, if the spec fixes it; otherwise the pod's
    /// `/pav/handle`, else `defaultHandle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The group snapshot creation pod, run to completion: it takes every
    /// member and writes `/pav/snapshots`, each source volume's handle
    /// mapped to its snapshot's.
    pub pod_template: PodTemplateSpec,
    /// How long this phase's pod may take; the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}
