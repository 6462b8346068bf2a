//! What pav-sdk records of a volume: below the requests, which carry a
//! volume's record to the node ([`StageRequest::record`](super::StageRequest::record)
//! and the others), and re-exported by [`records`](crate::records), which
//! keeps them.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{ContentSource, Parameters, Topology, Volume, VolumeMode};
use crate::{Error, Result, VolumeId};

/// What the SDK records of a volume it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VolumeRecord {
    /// The name the CO created it under (`CreateRequest::name`).
    pub name: String,
    /// Its handle.
    pub handle: String,
    /// Its size in bytes, as created or last expanded.
    pub capacity_bytes: u64,
    /// The StorageClass parameters it was created with.
    pub parameters: Parameters,
    /// Its VolumeAttributesClass parameters: those it was created with,
    /// each updated by a successful [`Modify`](crate::Modify). Absent from
    /// records written before pav-sdk knew them (none: a volume could
    /// not be created with any then).
    #[serde(default)]
    pub mutable_parameters: Parameters,
    /// Its volume context.
    pub context: Parameters,
    /// The nodes it is attached to ([`Attach`](crate::Attach)). Absent
    /// from records written before pav-sdk attached volumes (none were).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRecord>,
    /// Where it is accessible from (the node of a node-local volume).
    pub accessible_topology: Vec<Topology>,
    /// `Filesystem` or `Block`.
    pub volume_mode: RecordedMode,
    /// The snapshot or volume it was made from.
    pub source: Option<RecordedSource>,
    /// When it was created.
    pub created: SystemTime,
}

/// What the SDK records of a volume's attachment to a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttachmentRecord {
    /// The node (`AttachRequest::node_id`).
    pub node_id: String,
    /// The volume mode it was attached for.
    pub volume_mode: RecordedMode,
    /// The access mode it was attached for, by name (`SingleNodeWriter`, ...).
    pub access_mode: String,
    /// Whether it was attached read-only.
    pub read_only: bool,
    /// What [`Attach::attach`](crate::Attach::attach) answered.
    pub publish_context: Parameters,
}

/// A volume mode as records keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordedMode {
    /// [`VolumeMode::Filesystem`].
    Filesystem,
    /// [`VolumeMode::Block`].
    Block,
}

impl From<VolumeMode> for RecordedMode {
    fn from(mode: VolumeMode) -> Self {
        match mode {
            VolumeMode::Filesystem => RecordedMode::Filesystem,
            VolumeMode::Block => RecordedMode::Block,
        }
    }
}

/// What a volume was made from, as records keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RecordedSource {
    /// Restored from this snapshot handle.
    Snapshot(String),
    /// Cloned from this volume handle.
    Volume(String),
}

impl RecordedSource {
    /// The source of a create request, if it has one pav-sdk knows.
    pub fn of(source: &ContentSource) -> Option<Self> {
        match source {
            ContentSource::Snapshot(id) => Some(RecordedSource::Snapshot(id.to_string())),
            ContentSource::Volume(id) => Some(RecordedSource::Volume(id.to_string())),
        }
    }
}

impl VolumeRecord {
    /// The volume as Create answered it.
    pub fn volume(&self) -> Volume {
        let mut volume = Volume::new(self.handle.clone(), self.capacity_bytes);
        volume.context = self.context.clone();
        volume.accessible_topology = self.accessible_topology.clone();
        volume
    }
}

/// The record a request carries, or `NOT_FOUND` naming the volume: what
/// each request's `recorded` answers.
pub(crate) fn recorded<'a>(
    record: &'a Option<VolumeRecord>,
    handle: &VolumeId,
) -> Result<&'a VolumeRecord> {
    record
        .as_ref()
        .ok_or_else(|| Error::NotFound(format!("volume {:?} is not recorded", handle.as_str())))
}

/// The node directory a request carries, or `FAILED_PRECONDITION` saying
/// why there is none: what each request's `node_dir` answers.
pub(crate) fn node_dir<'a>(dir: &'a Option<PathBuf>, handle: &VolumeId) -> Result<&'a Path> {
    dir.as_deref().ok_or_else(|| {
        Error::FailedPrecondition(format!(
            "volume {:?} has no node directory: pav-csi keeps them for the volumes a provisioner's records hold",
            handle.as_str()
        ))
    })
}
