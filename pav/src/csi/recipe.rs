//! The one recipe every phase follows: [`plan`] it (pure: the objects, the
//! template context, the evaluated fields, the pod), then [`run`] its pod
//! (create, wait, collect the `/pav` files, interpret the result).
//!
//! The CSI handlers and `pav render` plan through the same [`Planner`], so
//! what `pav render` prints is the pod the driver creates by construction.
//! Each RPC's error enum carries a [`PlanError`] as one variant.

pub mod plan;
pub mod run;

pub use self::plan::{
    CapacityFor, CreationPlan, ModificationPlan, ParametersRefused, Plan, PlanError, Planner,
    StagingFor, TooSmall, UnknownAccessMode, claim_access_modes, grown,
};
pub use self::run::{PhaseError, PodFiles, Ran};
