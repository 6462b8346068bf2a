//! `spec.volumeValidation`: whether a volume may be made as asked. Its
//! rules (the volume modes, access modes and capacities the provisioner
//! accepts, the guide's defaults where absent) are checked against each
//! request ([`ValidationPhase::admits`]), before a dynamic volume is
//! created or a static one first served; its optional pod rejects the
//! volume by failing.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::ValidationContext;
use crate::error::{Error, Result};
use crate::volume::{AccessMode, VolumeMode};

/// `spec.volumeValidation` as a [`Section`], rendered with a dynamic or a
/// static [`ValidationContext`].
#[derive(Debug, Clone, Copy)]
pub struct Validation;

impl Section for Validation {
    const DEFINITION: Definition = Definition {
        phase: Phase::Validation,
        field: "volumeValidation",
        required: false,
        name: "validation",
        keys: &[
            "volumeModes",
            "accessModes",
            "minCapacity",
            "maxCapacity",
            "podTemplate",
            "timeout",
        ],
        needs_pod: false,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "ValidationFailed",
        description: "What volumes may be requested: `volumeModes`, `accessModes`,\n\
                      `minCapacity`, `maxCapacity` and an optional validation `podTemplate`.",
    };
    type Context = ValidationContext;
    type Evaluated = ValidationPhase;

    /// Applies the guide's defaults: `[Filesystem]`, every access mode,
    /// a least capacity of 1 byte, no greatest.
    fn decode(fields: &mut Fields<'_>) -> Result<ValidationPhase> {
        let volume_modes = match fields.take("volumeModes") {
            None => vec![VolumeMode::Filesystem],
            Some(value) => fields.enum_list("volumeModes", value)?,
        };
        let access_modes = match fields.take("accessModes") {
            None => AccessMode::DEFAULT.to_vec(),
            Some(value) => fields.enum_list("accessModes", value)?,
        };
        let min_capacity = match fields.take("minCapacity") {
            None => 1,
            Some(value) => fields.capacity("minCapacity", value)?,
        };
        let max_capacity = fields.optional_capacity("maxCapacity")?;
        if let Some(max) = max_capacity
            && min_capacity > max
        {
            return Err(Error::Rule {
                at: fields.location("maxCapacity"),
                message: format!(
                    "evaluates to {max} bytes, less than minCapacity ({min_capacity} bytes)"
                ),
            });
        }
        Ok(ValidationPhase {
            volume_modes,
            access_modes,
            min_capacity,
            max_capacity,
            pod_template: fields.pod_template()?,
            timeout: fields.timeout()?,
        })
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
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

impl ValidationPhase {
    /// Checks a request against the evaluated rules; the error says which
    /// rule the request breaks, in the user's terms.
    ///
    /// ```
    /// use pav_templates::{phase::ValidationPhase, volume::{AccessMode, VolumeMode}};
    /// let rules = ValidationPhase {
    ///     volume_modes: vec![VolumeMode::Filesystem],
    ///     access_modes: AccessMode::DEFAULT.to_vec(),
    ///     min_capacity: 1,
    ///     max_capacity: Some(1 << 30),
    ///     pod_template: None,
    ///     timeout: None,
    /// };
    /// assert!(rules.admits(VolumeMode::Filesystem, &[AccessMode::ReadWriteOnce], 1024, None).is_ok());
    /// assert_eq!(
    ///     rules.admits(VolumeMode::Block, &[], 1024, None).unwrap_err().to_string(),
    ///     "volume mode Block is not supported (supported: Filesystem)"
    /// );
    /// ```
    pub fn admits(
        &self,
        volume_mode: VolumeMode,
        access_modes: &[AccessMode],
        min_capacity: u64,
        max_capacity: Option<u64>,
    ) -> Result<(), Refusal> {
        if !self.volume_modes.contains(&volume_mode) {
            return Err(Refusal::VolumeMode {
                requested: volume_mode,
                supported: self.volume_modes.clone(),
            });
        }
        if let Some(mode) = access_modes.iter().find(|m| !self.access_modes.contains(m)) {
            return Err(Refusal::AccessMode {
                requested: *mode,
                supported: self.access_modes.clone(),
            });
        }
        if let Some(max) = self.max_capacity
            && min_capacity > max
        {
            return Err(Refusal::AboveMaximum {
                requested: min_capacity,
                maximum: max,
            });
        }
        let requested_max = max_capacity.unwrap_or(u64::MAX);
        if requested_max < self.min_capacity {
            return Err(Refusal::BelowMinimum {
                limit: requested_max,
                minimum: self.min_capacity,
            });
        }
        Ok(())
    }
}

/// Why [`ValidationPhase::admits`] refuses a request: one variant per rule,
/// so callers decide by the rule (a CSI driver answers `OUT_OF_RANGE` for
/// the capacity rules) and never by the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The volume mode is not among `volumeModes`.
    #[error("volume mode {} is not supported (supported: {})", requested.as_str(), list(supported.iter().map(|m| m.as_str())))]
    VolumeMode {
        /// What the claim asks for.
        requested: VolumeMode,
        /// The evaluated `volumeModes`.
        supported: Vec<VolumeMode>,
    },
    /// An access mode is not among `accessModes`.
    #[error("access mode {} is not supported (supported: {})", requested.as_str(), list(supported.iter().map(|m| m.as_str())))]
    AccessMode {
        /// The first access mode of the claim not supported.
        requested: AccessMode,
        /// The evaluated `accessModes`.
        supported: Vec<AccessMode>,
    },
    /// The least capacity asked for exceeds `maxCapacity`.
    #[error("requested capacity {requested} bytes exceeds the maximum of {maximum} bytes")]
    AboveMaximum {
        /// The request's least capacity, in bytes.
        requested: u64,
        /// The evaluated `maxCapacity`, in bytes.
        maximum: u64,
    },
    /// The capacity limit is below `minCapacity`.
    #[error("capacity limit {limit} bytes is below the minimum of {minimum} bytes")]
    BelowMinimum {
        /// The request's limit, in bytes.
        limit: u64,
        /// The evaluated `minCapacity`, in bytes.
        minimum: u64,
    },
}

impl Refusal {
    /// Whether a capacity rule refused the request (CSI's `OUT_OF_RANGE`).
    pub fn is_capacity(&self) -> bool {
        match self {
            Refusal::AboveMaximum { .. } | Refusal::BelowMinimum { .. } => true,
            Refusal::VolumeMode { .. } | Refusal::AccessMode { .. } => false,
        }
    }
}

fn list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(", ")
}
