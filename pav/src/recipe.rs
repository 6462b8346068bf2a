//! The one recipe every phase follows: [`plan`] it (pure: the objects, the
//! template context, the evaluated fields, the pod), then run its pod
//! (the driver's `csi::context::run`: create, wait, collect the `/pav`
//! files, interpret the result).
//!
//! The CSI handlers and `pav render` plan through the same [`Planner`], so
//! what `pav render` prints is the pod the driver creates by construction.
//! Each RPC's error enum carries a [`PlanError`] as one variant. Planning
//! needs no cluster: this module uses nothing of the driver.
//!
//! What each phase plans (its [`Planner`] method, the types only it uses,
//! its pod) is its module of [`crate::phases`]; this module is what they
//! share, and uses none of them.

pub mod plan;

pub use self::plan::{
    ParametersRefused, Plan, PlanError, Planner, TooSmall, UnknownAccessMode, claim_access_modes,
    grown,
};

/// The topology key of every pav driver: each node plugin reports its
/// node's name under it (kubelet then labels the Node with it), and a
/// volume accessible from some nodes only gets node affinity on it.
pub const TOPOLOGY_KEY: &str = "topology.pav.albertofaria.github.io/node";
