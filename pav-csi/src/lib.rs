//! Serve any [`pav_sdk`] provisioner as a conformant CSI v1.12.0 driver.
//!
//! ```no_run
//! # async fn f(provisioner: pav_sdk::Provisioner) -> Result<(), pav_csi::Error> {
//! pav_csi::Driver::builder("example.com/hostdir")
//!     .provisioner(provisioner)
//!     .serve_controller("/csi/csi.sock")
//!     .serve_node("/csi/csi.sock", "node-1")
//!     .run() // until SIGTERM
//!     .await
//! # }
//! ```
//!
//! What pav-csi does so the provisioner does not have to:
//!
//! | Concern | Where | Behaviour |
//! |---|---|---|
//! | Identity | `GetPluginInfo`, `GetPluginCapabilities`, `Probe` | name and version from the builder; `CONTROLLER_SERVICE` on controller sockets; `VOLUME_ACCESSIBILITY_CONSTRAINTS` when topology is configured |
//! | Capabilities | `ControllerGetCapabilities`, `NodeGetCapabilities` | derived from the touch points in the [`pav_sdk::Provisioner`] |
//! | Required fields, size limits | every RPC | `INVALID_ARGUMENT` naming the field; strings ≤ 128 bytes, maps ≤ 4 KiB, paths ≤ 4096 bytes |
//! | Paths | node RPCs | staging and target paths must resolve inside the kubelet directory ([`DriverBuilder::kubelet_dir`]); publishing binds only a staging path recorded at stage time for the same volume ([`DriverBuilder::state_dir`]) |
//! | One operation per volume | every mutating RPC | a concurrent call for the same volume (or name) is `ABORTED` |
//! | Idempotency | `CreateVolume` | recent answers cached by name; an incompatible repeat is `ALREADY_EXISTS` |
//! | Idempotency | `DeleteVolume`, `NodeUnstageVolume`, `NodeUnpublishVolume` | what is gone is success; checked against `/proc/self/mountinfo` |
//! | Publishing | `NodePublishVolume` | bind mount of the staged directory (Filesystem) or device (Block, onto a file), read-only when asked |
//! | Usage | `NodeGetVolumeStats` | `statvfs` for filesystems, device size for blocks |
//! | Everything else | snapshots, expansion, publish/attach, listing | `UNIMPLEMENTED`, not advertised |
//! | Socket | [`DriverBuilder::run`] | stale socket replaced, mode `0600`, removed on SIGTERM/SIGINT |
//! | Secrets | logs | CSI messages with secrets have no `Debug`; [`pav_sdk::Secrets`] redacts values |

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

pub mod client;
mod controller;
mod convert;
mod driver;
mod error;
mod guard;
mod identity;
mod limits;
pub mod mount;
mod node;
mod occupancy;
mod paths;
mod staged;

/// Generated CSI v1.12.0 messages, clients and servers (package `csi.v1`).
#[allow(missing_docs, clippy::all)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}

pub use driver::{Driver, DriverBuilder};
pub use error::Error;
pub use paths::DEFAULT_KUBELET_DIR;
