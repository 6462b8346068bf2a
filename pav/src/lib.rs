//! PaV, Pods-as-Volumes: PavProvisioner objects become CSI drivers whose
//! validation, creation, deletion, staging and unstaging are pods.
//!
//! The binary's commands live in [`cli`]; [`pods`] turns evaluated pod
//! templates into the pods PaV creates.

pub mod cli;
pub mod pods;
