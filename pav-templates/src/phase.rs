//! Evaluated phases: what a PavProvisioner says to do for one volume.
//!
//! A phase is one module: [`staging`] holds everything about
//! `spec.volumeStaging` (its [`Definition`], its [`Section`] type, the type
//! it evaluates to and how its rendered keys are decoded into it). This
//! module ties them together: the [`Phase`] enum, the table of every
//! phase's definition (in [`Phase`]'s order), and the evaluated types
//! several phases share ([`OptionalPodPhase`], [`StagingPhase`]). So a new
//! phase touches this file (its variant, its `mod` and re-exports, its
//! entry in the table) and its own module only: the spec's field for it,
//! with its description in the CRD, comes from its definition too
//! ([`crate::model::Phases`]).
//!
//! The rendered keys are decoded through `fields`, the one table of what
//! each key holds, which `pav check` reads too. It carries what decoding
//! needs to know of the provisioner, so nothing here uses the compiled
//! provisioner, which uses this module.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use crate::context::PhaseContext;
use crate::error::Result;

pub mod attach;
pub mod capacity;
pub mod creation;
pub mod deletion;
pub mod detach;
pub mod expansion;
pub(crate) mod fields;
pub mod group_snapshot_creation;
pub mod group_snapshot_deletion;
pub mod health;
pub mod modification;
pub mod node_expansion;
pub mod population;
pub mod snapshot_creation;
pub mod snapshot_deletion;
pub mod staging;
pub mod unstaging;
pub mod validation;

pub use self::attach::Attach;
pub use self::capacity::{Capacity, CapacityPhase, DEFAULT_CAPACITY_CACHE};
pub use self::creation::{Creation, CreationPhase, MAX_TOPOLOGY_NODES, topology_nodes};
pub use self::deletion::Deletion;
pub use self::detach::Detach;
pub use self::expansion::{Expansion, ExpansionPhase};
pub use self::group_snapshot_creation::{GroupSnapshotCreation, GroupSnapshotCreationPhase};
pub use self::group_snapshot_deletion::GroupSnapshotDeletion;
pub use self::health::{DEFAULT_HEALTH_CHECK_EVERY, Health, HealthPhase};
pub use self::modification::{Modification, ModificationPhase};
pub use self::node_expansion::NodeExpansion;
pub use self::population::Population;
pub use self::snapshot_creation::{SnapshotCreation, SnapshotCreationPhase};
pub use self::snapshot_deletion::SnapshotDeletion;
pub use self::staging::Staging;
pub use self::unstaging::Unstaging;
pub use self::validation::{Refusal, Validation, ValidationPhase};

use self::fields::Fields;

/// One step of a PaV volume's life: the original PaV's five, then pav's
/// expansion and snapshots. Each has its module here, named after it
/// ([`staging`] for [`Phase::Staging`]), that says what it does.
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
    /// `spec.volumeExpansion` (pav): a volume grows on the storage side.
    Expansion,
    /// `spec.volumeNodeExpansion` (pav): a staged volume grows on its node.
    NodeExpansion,
    /// `spec.snapshotCreation` (pav): a snapshot of a volume is taken.
    SnapshotCreation,
    /// `spec.snapshotDeletion` (pav): a snapshot is deleted.
    SnapshotDeletion,
    /// `spec.storageCapacity` (pav): the room for new volumes in one
    /// topology segment (a node), published as CSIStorageCapacity.
    Capacity,
    /// `spec.volumeModification` (pav): a volume's mutable parameters
    /// change when its claim moves to another VolumeAttributesClass.
    Modification,
    /// `spec.volumeHealth` (pav): a staged volume's periodic check, whose
    /// `/pav/condition` the kubelet reports.
    Health,
    /// `spec.volumeAttach` (pav): a volume is attached to a node before it
    /// is staged there; the pod's `/pav/publish-context` reaches staging.
    Attach,
    /// `spec.volumeDetach` (pav): a volume is detached from a node after
    /// it was unstaged there.
    Detach,
    /// `spec.groupSnapshotCreation` (pav): snapshots of several volumes
    /// are taken together; the pod's `/pav/snapshots` names each one.
    GroupSnapshotCreation,
    /// `spec.groupSnapshotDeletion` (pav): a group snapshot and its
    /// members are deleted.
    GroupSnapshotDeletion,
    /// `spec.volumePopulation` (pav): a new volume is filled from its
    /// claim's `dataSourceRef` before the claim gets it.
    Population,
}

/// What defines one phase, in one place: the rest of pav (the spec's
/// checks, `pav render`, events, metrics, pod names, where pods run)
/// reads it from here.
#[derive(Debug)]
pub struct Definition {
    /// The phase defined.
    pub phase: Phase,
    /// The spec field holding it (`volumeStaging`).
    pub field: &'static str,
    /// Whether every spec has its section (`volumeStaging` only): the CRD
    /// requires the field, and a spec without it is refused.
    pub required: bool,
    /// Lower-case name (`staging`), as used on the command line, in pod
    /// names and labels, and in metrics.
    pub name: &'static str,
    /// The keys its section may hold.
    keys: &'static [&'static str],
    /// Whether it cannot do without its pod: what it does is only the
    /// pod's (expose the volume, check it, attach it, say each member's
    /// snapshot).
    needs_pod: bool,
    /// The phase without which its section is refused: it grows, undoes
    /// or deletes what that one did ([`Phase::requires`]).
    pub requires: Option<Phase>,
    /// Whether its pod runs on the node where the volume is staged
    /// ([`Phase::pod_on_volume_node`]).
    pub pod_on_volume_node: bool,
    /// The reason of the Warning event it reports when it fails.
    pub event_reason: &'static str,
    /// What its section is, for users: the `description` of its field in
    /// the CRD's schema (`pav crd`), line breaks kept.
    pub description: &'static str,
}

/// The keys of a section that is a pod and nothing else.
const POD_ONLY: &[&str] = &["podTemplate", "timeout"];

/// Every phase's definition, in [`Phase`]'s order: the original PaV's in
/// lifecycle order, then pav's.
const DEFINITIONS: [Definition; 17] = [
    Validation::DEFINITION,
    Creation::DEFINITION,
    Deletion::DEFINITION,
    Staging::DEFINITION,
    Unstaging::DEFINITION,
    Expansion::DEFINITION,
    NodeExpansion::DEFINITION,
    SnapshotCreation::DEFINITION,
    SnapshotDeletion::DEFINITION,
    Capacity::DEFINITION,
    Modification::DEFINITION,
    Health::DEFINITION,
    Attach::DEFINITION,
    Detach::DEFINITION,
    GroupSnapshotCreation::DEFINITION,
    GroupSnapshotDeletion::DEFINITION,
    Population::DEFINITION,
];

/// A phase's section of the spec as a type, one per phase in its module
/// ([`Staging`] for `spec.volumeStaging`): what
/// [`CompiledProvisioner::render`](crate::CompiledProvisioner::render)
/// renders it with and what it yields, so that a phase's context and
/// result are checked when pav is compiled instead of matched at run time.
///
/// Implemented by this crate only: [`decode`](Section::decode) takes the
/// rendered keys as a type of its own.
pub trait Section {
    /// What defines the phase; [`Phase::definition`] reads the same.
    const DEFINITION: Definition;
    /// The variables its templates see.
    type Context: PhaseContext;
    /// What it evaluates to: its keys decoded, the guide's defaults
    /// applied, its rules checked.
    type Evaluated;

    /// Decodes the phase's rendered keys into what it evaluates to,
    /// taking out each key it knows; rendering then refuses any key left
    /// as an unknown field.
    fn decode(fields: &mut Fields<'_>) -> Result<Self::Evaluated>;
}

impl Phase {
    /// All phases, in the order of their definitions: the original PaV's
    /// in lifecycle order, then pav's.
    pub const ALL: [Phase; 17] = {
        let mut all = [Phase::Validation; 17];
        let mut i = 0;
        while i < all.len() {
            all[i] = DEFINITIONS[i].phase;
            i += 1;
        }
        all
    };

    /// This phase's definition.
    pub const fn definition(self) -> &'static Definition {
        &DEFINITIONS[self.index()]
    }

    /// The spec field holding this phase (`volumeStaging`).
    pub const fn field(self) -> &'static str {
        self.definition().field
    }

    /// Whether every spec has this phase's section (staging's).
    pub fn required(self) -> bool {
        self.definition().required
    }

    /// Lower-case name (`staging`), as used on the command line and in pod names.
    pub fn name(self) -> &'static str {
        self.definition().name
    }

    /// The reason of the Warning event this phase reports when it fails
    /// (`StagingFailed`).
    pub fn event_reason(self) -> &'static str {
        self.definition().event_reason
    }

    /// The phase without which this one's section is refused, as it only
    /// continues what that one did: node expansion grows on the node what
    /// expansion grew, detach undoes attach, and a (group) snapshot is
    /// deleted only if it can be taken. `None` for a phase that stands
    /// alone.
    pub fn requires(self) -> Option<Phase> {
        self.definition().requires
    }

    /// Whether this phase's pod runs on the node where the volume is
    /// staged, with the staged volume at hand (staging, unstaging, node
    /// expansion, health). The other phases' pods run on any node, where
    /// their templates put them, and pav collects their `/pav` files.
    pub fn pod_on_volume_node(self) -> bool {
        self.definition().pod_on_volume_node
    }

    /// Keys a phase object may hold.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        self.definition().keys
    }

    /// Whether the phase cannot do without its pod.
    pub(crate) fn needs_pod(self) -> bool {
        self.definition().needs_pod
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl std::str::FromStr for Phase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                format!("unknown phase {s:?}: expected one of {}", names.join(", "))
            })
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Evaluated section of a phase whose pod is optional and all it holds:
/// deletion, unstaging, snapshot deletion, detach, group snapshot
/// deletion.
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

impl OptionalPodPhase {
    /// The decoding of every phase that evaluates to an [`OptionalPodPhase`].
    fn decode(fields: &mut Fields<'_>) -> Result<Self> {
        Ok(OptionalPodPhase {
            pod_template: fields.pod_template()?,
            timeout: fields.timeout()?,
        })
    }
}

/// Evaluated section of a phase whose pod is mandatory and all it holds:
/// `spec.volumeStaging`, and `spec.volumeNodeExpansion`,
/// `spec.volumeAttach` and `spec.volumePopulation`, whose pod is mandatory
/// too.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StagingPhase {
    /// The staging pod: it exposes the volume at `/pav/volume`, then either
    /// completes or creates `/pav/ready` and keeps running. (The node
    /// expansion pod: run to completion, the staged volume at
    /// `/pav/volume`. The attach pod: run to completion, its
    /// `/pav/publish-context` reaching staging. The population pod: run to
    /// completion, the new volume at `/pav/volume`.)
    pub pod_template: PodTemplateSpec,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

impl StagingPhase {
    /// The decoding of every phase that evaluates to a [`StagingPhase`].
    fn decode(fields: &mut Fields<'_>) -> Result<Self> {
        Ok(StagingPhase {
            pod_template: fields.mandatory_pod_template()?,
            timeout: fields.timeout()?,
        })
    }
}

/// A `timeout`-like duration as the spec writes it (`5m`).
fn serialize_timeout<S: serde::Serializer>(
    timeout: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match timeout {
        Some(duration) => serializer.serialize_str(&crate::duration::format_timeout(duration)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Phase::definition`] indexes the table by the enum's order, so
    /// each entry must sit at its phase's place; names and fields are
    /// distinct (they name pods, metrics, events and spec sections).
    #[test]
    fn each_definition_is_at_its_phases_place() {
        for (index, definition) in DEFINITIONS.iter().enumerate() {
            assert_eq!(definition.phase.index(), index, "{definition:?}");
        }
        let distinct = |values: Vec<&str>| {
            let set: std::collections::BTreeSet<&str> = values.iter().copied().collect();
            set.len() == values.len()
        };
        assert!(distinct(DEFINITIONS.iter().map(|d| d.name).collect()));
        assert!(distinct(DEFINITIONS.iter().map(|d| d.field).collect()));
        assert!(distinct(
            DEFINITIONS.iter().map(|d| d.event_reason).collect()
        ));
        for definition in &DEFINITIONS {
            let description = definition.description;
            assert!(!description.is_empty(), "{definition:?}");
            assert_eq!(description, description.trim(), "{definition:?}");
        }
    }
}
