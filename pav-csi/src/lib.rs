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
//! | Required fields, size limits | every RPC | `INVALID_ARGUMENT` naming the field; strings ≤ 128 bytes, maps ≤ 4 KiB, paths ≤ 4096 bytes, repeated fields ≤ 64 entries |
//! | Paths | node RPCs | staging and target paths must resolve inside the kubelet directory ([`DriverBuilder::kubelet_dir`]); publishing binds only a staging path recorded at stage time for the same volume ([`DriverBuilder::state_dir`]) |
//! | Other volumes | node RPCs | a new stage or publish refuses a path that holds mounts (it would hide them) or lies inside a staged or published volume, and a target holding another volume; one operation per target path; unpublish removes only the empty file or directory it made; a failed stage forgets its record |
//! | One operation per volume | every mutating RPC | a concurrent call for the same volume (or name) is `ABORTED` |
//! | Idempotency | `CreateVolume` | the 1024 most recent answers cached by name; an incompatible repeat is `ALREADY_EXISTS` |
//! | Idempotency | `DeleteVolume`, `NodeUnstageVolume`, `NodeUnpublishVolume` | what is gone is success; checked against `/proc/self/mountinfo` |
//! | Publishing | `NodePublishVolume` | bind mount of the staged directory (Filesystem) or device (Block, onto a file), read-only when asked |
//! | Usage | `NodeGetVolumeStats` | `statvfs` for filesystems, device size for blocks |
//! | Everything else | snapshots, expansion, publish/attach, listing | `UNIMPLEMENTED`, not advertised |
//! | Socket | [`DriverBuilder::run`] | stale socket replaced, mode `0600`, removed on SIGTERM/SIGINT; at most 256 connections at once, each asked to go after 10 minutes (an idle one closes then) |
//! | Secrets | logs | CSI messages with secrets have no `Debug`; [`pav_sdk::Secrets`] redacts values |
//! | Logs | every RPC | request strings are logged escaped (`Debug`), so a newline in a path or id cannot forge a line |
//! | Mounts | [`mount::unmount_below`] | unmount with system calls, never a `mount` or `umount` program |

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

pub mod client;
mod connections;
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
