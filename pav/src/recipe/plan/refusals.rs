//! What the driver refuses in a phase's evaluated fields, as one function
//! per rule that the handlers and `pav render` both call, so that a
//! preview fails where the driver would, in the driver's words.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use pav_templates::{AccessMode, ExpansionPhase};

use super::Plan;

/// The claim asks for an access mode PaV does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("access mode {0} is not supported")]
pub struct UnknownAccessMode(pub String);

/// The access modes `pvc` asks for, as the validation rules name them.
pub fn claim_access_modes(
    pvc: &PersistentVolumeClaim,
) -> Result<Vec<AccessMode>, UnknownAccessMode> {
    (pvc.spec.as_ref())
        .and_then(|s| s.access_modes.as_ref())
        .into_iter()
        .flatten()
        .map(|mode| {
            AccessMode::ALL
                .into_iter()
                .find(|m| m.as_str() == mode)
                .ok_or_else(|| UnknownAccessMode(mode.clone()))
        })
        .collect()
}

/// The expansion's `capacity` is less than the size asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the volume grew to {capacity} bytes, less than the {requested} bytes requested")]
pub struct TooSmall {
    /// What the spec or the pod gave.
    pub capacity: u64,
    /// What the claim asks for.
    pub requested: u64,
}

/// The volume's size after an expansion to `requested` bytes: `capacity`
/// if it is at least that.
pub fn grown(capacity: u64, requested: u64) -> Result<u64, TooSmall> {
    if capacity < requested {
        return Err(TooSmall {
            capacity,
            requested,
        });
    }
    Ok(capacity)
}

impl Plan<ExpansionPhase> {
    /// Refuses an evaluated `capacity` below `requested` bytes (a capacity
    /// only the pod's `/pav/capacity` gives is checked once the pod ran).
    pub fn check_capacity(&self, requested: u64) -> Result<(), TooSmall> {
        match self.evaluated.capacity {
            Some(capacity) => grown(capacity, requested).map(drop),
            None => Ok(()),
        }
    }
}

/// The `refusal` template refused the class's mutable parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PavProvisioner {provisioner} refuses the mutable parameters {requested:?}: {refusal}")]
pub struct ParametersRefused {
    /// Its name.
    pub provisioner: String,
    /// What the class asks for.
    pub requested: BTreeMap<String, String>,
    /// The evaluated `refusal`.
    pub refusal: String,
}
