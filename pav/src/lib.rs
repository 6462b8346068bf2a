//! PaV, Pods-as-Volumes: PavProvisioner objects become CSI drivers whose
//! validation, creation, deletion, staging and unstaging are pods.
//!
//! | module | role |
//! |---|---|
//! | [`cached`] | what pav's watch caches keep of an object |
//! | [`cli`] | the `pav` command line |
//! | [`client`] | the API client of every component, with a client-side rate limit |
//! | [`operator`] | `pav controller`, the operator: PavProvisioner objects become CSI drivers |
//! | [`csi`] | `pav csi-controller` / `pav csi-node`: pav-sdk touch points carried out by pods |
//! | [`driver_error`] | why a step the per-driver RPCs share failed |
//! | [`leader`] | leader election on a Lease, for `pav controller` |
//! | [`memory`] | memory a long-running process hands back to the system |
//! | [`manifests`] | `pav manifests`: the deployment, generated from Rust types |
//! | [`phases`] | each phase's plan, pod and `pav render` example, one module per phase |
//! | [`pods`] | evaluated pod templates become the pods PaV creates |
//! | [`recipe`] | the one recipe every phase follows: plan it, then run its pod |
//! | [`snapshots`] | VolumeSnapshotContents, read for ListSnapshots and the operator |
//! | [`telemetry`] | logs, the metrics server, message bounds |
//! | [`uninstall_check`] | `pav uninstall-check`: the chart's pre-delete hook refuses while PavProvisioners exist |

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

pub mod cached;
pub mod cli;
pub mod client;
pub mod csi;
pub mod driver_error;
pub mod leader;
pub mod manifests;
pub mod memory;
pub mod operator;
pub mod phases;
pub mod pods;
pub mod recipe;
pub mod snapshots;
pub mod telemetry;
pub mod uninstall_check;

#[cfg(test)]
mod cause_once;
