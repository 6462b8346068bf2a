//! Evaluated phases: what a PavProvisioner says to do for one volume.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use crate::model::{AccessMode, VolumeMode};

/// One of the five lifecycle steps of a PaV volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// `spec.volumeValidation`.
    Validation,
    /// `spec.volumeCreation`.
    Creation,
    /// `spec.volumeDeletion`.
    Deletion,
    /// `spec.volumeStaging`.
    Staging,
    /// `spec.volumeUnstaging`.
    Unstaging,
}

impl Phase {
    /// All phases in lifecycle order.
    pub const ALL: [Phase; 5] = [
        Phase::Validation,
        Phase::Creation,
        Phase::Deletion,
        Phase::Staging,
        Phase::Unstaging,
    ];

    /// The spec field holding this phase (`volumeStaging`).
    pub fn field(self) -> &'static str {
        match self {
            Phase::Validation => "volumeValidation",
            Phase::Creation => "volumeCreation",
            Phase::Deletion => "volumeDeletion",
            Phase::Staging => "volumeStaging",
            Phase::Unstaging => "volumeUnstaging",
        }
    }

    /// Lower-case name (`staging`), as used on the command line and in pod names.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Validation => "validation",
            Phase::Creation => "creation",
            Phase::Deletion => "deletion",
            Phase::Staging => "staging",
            Phase::Unstaging => "unstaging",
        }
    }

    /// Keys a phase object may hold.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            Phase::Validation => &[
                "volumeModes",
                "accessModes",
                "minCapacity",
                "maxCapacity",
                "podTemplate",
                "timeout",
            ],
            Phase::Creation => &["handle", "capacity", "podTemplate", "timeout"],
            Phase::Deletion | Phase::Staging | Phase::Unstaging => &["podTemplate", "timeout"],
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::str::FromStr for Phase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown phase {s:?}: expected validation, creation, deletion, staging or unstaging"))
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Evaluated `spec.volumeValidation`, with the guide's defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationPhase {
    /// Volume modes the provisioner accepts (default `[Filesystem]`).
    pub volume_modes: Vec<VolumeMode>,
    /// Access modes the provisioner accepts (default: all three).
    pub access_modes: Vec<AccessMode>,
    /// Smallest capacity accepted, in bytes (default 1).
    pub min_capacity: u64,
    /// Largest capacity accepted, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_capacity: Option<u64>,
    /// The validation pod, run to completion; failure rejects the volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.volumeCreation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreationPhase {
    /// The volume's handle, if the spec fixes it; otherwise the pod's
    /// `/pav/handle`, else `defaultHandle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The volume's capacity in bytes, if the spec fixes it; otherwise the
    /// pod must write `/pav/capacity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// The creation pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.volumeDeletion` or `spec.volumeUnstaging`: an optional pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptionalPodPhase {
    /// The pod to run to completion, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Evaluated `spec.volumeStaging`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StagingPhase {
    /// The staging pod: it exposes the volume at `/pav/volume`, then either
    /// completes or creates `/pav/ready` and keeps running.
    pub pod_template: PodTemplateSpec,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

impl ValidationPhase {
    /// Checks a request against the evaluated rules; the error says which
    /// rule the request breaks, in the user's terms.
    ///
    /// ```
    /// use pav_templates::{phase::ValidationPhase, model::{AccessMode, VolumeMode}};
    /// let rules = ValidationPhase {
    ///     volume_modes: vec![VolumeMode::Filesystem],
    ///     access_modes: AccessMode::ALL.to_vec(),
    ///     min_capacity: 1,
    ///     max_capacity: Some(1 << 30),
    ///     pod_template: None,
    ///     timeout: None,
    /// };
    /// assert!(rules.admits(VolumeMode::Filesystem, &[AccessMode::ReadWriteOnce], 1024, None).is_ok());
    /// assert_eq!(
    ///     rules.admits(VolumeMode::Block, &[], 1024, None).unwrap_err(),
    ///     "volume mode Block is not supported (supported: Filesystem)"
    /// );
    /// ```
    pub fn admits(
        &self,
        volume_mode: VolumeMode,
        access_modes: &[AccessMode],
        min_capacity: u64,
        max_capacity: Option<u64>,
    ) -> Result<(), String> {
        let list = |items: Vec<&str>| items.join(", ");
        if !self.volume_modes.contains(&volume_mode) {
            return Err(format!(
                "volume mode {} is not supported (supported: {})",
                volume_mode.as_str(),
                list(self.volume_modes.iter().map(|m| m.as_str()).collect())
            ));
        }
        if let Some(mode) = access_modes.iter().find(|m| !self.access_modes.contains(m)) {
            return Err(format!(
                "access mode {} is not supported (supported: {})",
                mode.as_str(),
                list(self.access_modes.iter().map(|m| m.as_str()).collect())
            ));
        }
        if let Some(max) = self.max_capacity
            && min_capacity > max
        {
            return Err(format!(
                "requested capacity {min_capacity} bytes exceeds the maximum of {max} bytes"
            ));
        }
        let requested_max = max_capacity.unwrap_or(u64::MAX);
        if requested_max < self.min_capacity {
            return Err(format!(
                "capacity limit {requested_max} bytes is below the minimum of {} bytes",
                self.min_capacity
            ));
        }
        Ok(())
    }
}

fn serialize_timeout<S: serde::Serializer>(
    timeout: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match timeout {
        Some(duration) => serializer.serialize_str(&crate::duration::format_timeout(duration)),
        None => serializer.serialize_none(),
    }
}
