//! Test kit (cargo feature `testing`): serve a provisioner in-process and
//! check it as csi-sanity would, from `cargo test`, without Go.
//!
//! Add pav-csi with the feature under your dev-dependencies (and tokio
//! with `macros` and `rt-multi-thread` for `#[tokio::test]`):
//!
//! ```toml
//! [dev-dependencies]
//! pav-csi = { version = "0.1", features = ["testing"] }
//! ```
//!
//! Two layers, and faults for tests of your own:
//!
//! * [`Harness`] serves a [`Provisioner`](pav_sdk::Provisioner) as a CSI
//!   driver on a Unix socket in a temporary directory, with a kubelet
//!   directory there (so staging and target paths are valid), a storage
//!   directory for the provisioner, and connected Identity, Controller and
//!   Node clients. It restarts the driver on demand and unmounts and
//!   removes everything when dropped.
//! * [`Conformance`] runs named checks against a fresh harness each:
//!   [`repeated_create`](Conformance::repeated_create),
//!   [`delete_unknown_volume`](Conformance::delete_unknown_volume),
//!   [`stage_unstage_repeats`](Conformance::stage_unstage_repeats),
//!   [`publish_unpublish_repeats`](Conformance::publish_unpublish_repeats),
//!   [`attach_detach_repeats`](Conformance::attach_detach_repeats),
//!   [`expand`](Conformance::expand),
//!   [`snapshot_round_trip`](Conformance::snapshot_round_trip),
//!   [`group_snapshot_round_trip`](Conformance::group_snapshot_round_trip),
//!   [`hostile_ids_and_paths`](Conformance::hostile_ids_and_paths),
//!   [`modify`](Conformance::modify) and
//!   [`health`](Conformance::health). Each
//!   asserts what csi-sanity asserts for the same cases (codes,
//!   idempotency), and checks the provisioner's own answers where pav-csi
//!   would otherwise answer for it (a repeated `CreateVolume` is answered
//!   from pav-csi's cache until the driver restarts). A check whose
//!   capability the driver does not advertise is [`Outcome::Skipped`],
//!   not passed.
//! * [`Faults`] puts a [`Fault`] around any method of the provisioner
//!   under test ([`Faults::around`] its value, then serve it as usual): a
//!   delay, an error instead of the call, or an error after it (a crash
//!   between the storage's work and its record), for the next call or
//!   every call of a [`Method`], and counts the calls that reached it. A
//!   test of what a slow call, a cancelled one or a crash does needs no
//!   hand-written wrapper delegating every method.
//!
//! The node checks mount (bind mounts, and whatever the provisioner's
//! Stage mounts), which needs root; [`Conformance::controller_only`] runs
//! the rest without it. pav-csi's own rules (required fields, size
//! limits, confinement to the kubelet directory) are tested in pav-csi;
//! what these checks can find is the provisioner's: a Create that is not
//! idempotent by name, a Delete that fails for what is gone, a Stage that
//! mounts twice, an Expand that shrinks, a handle joined to a directory
//! without [`VolumeId::path_component`](pav_sdk::VolumeId::path_component).
//!
//! Build the provisioner on the harness's storage directory
//! ([`Conformance::with_storage`]) rather than giving a value
//! ([`Conformance::new`]): it is then built again after each restart, from
//! what that directory holds, and
//! [`hostile_ids_and_paths`](Conformance::hostile_ids_and_paths) also sends
//! ids that climb (`..`, `../x`), which from there stay inside the
//! harness's temporary directory, where decoys show whether the
//! provisioner followed them. No id the checks send is an absolute path. A
//! value keeps its storage where it was built, and ids that climb are not
//! sent to it: a Delete that followed them would reach that directory's
//! real parent.
//!
//! # A complete conformance test
//!
//! The HostDir provisioner of [pav-sdk's front page](pav_sdk#a-complete-provisioner)
//! checked with every check (its `tests/conformance.rs`; `provisioner.rs`
//! is the front page's file):
//!
//! <!-- examples/hostdir/tests/conformance.rs -->
//! ```ignore
//! //! HostDir against pav-csi's conformance checks: what csi-sanity checks
//! //! for the calls it serves, from `cargo test`.
//!
//! #[allow(dead_code)]
//! #[path = "../src/provisioner.rs"]
//! mod provisioner;
//!
//! use std::path::Path;
//!
//! use pav_csi::testing::{Check, Conformance};
//! use pav_sdk::Provisioner;
//! use provisioner::HostDir;
//!
//! /// HostDir keeping its volumes in `dir`, with every touch point it
//! /// implements, as `main` serves it.
//! fn hostdir(dir: &Path) -> Provisioner<HostDir> {
//!     pav_sdk::provisioner!(HostDir::new(dir.to_owned(), 1 << 30).unwrap())
//! }
//!
//! /// Every check. The node checks mount, which needs root.
//! #[tokio::test]
//! #[ignore = "needs root (mounts): .ci/run runs it as root"]
//! async fn conformance() {
//!     // `with_storage` builds HostDir on a directory of each check's
//!     // harness, again after each restart, next to the decoys the
//!     // hostile-id check watches.
//!     let report = Conformance::with_storage(hostdir).run_all().await.unwrap();
//!     // HostDir attaches, grows, modifies and checks the health of no
//!     // volume and takes no snapshot: those checks are skipped, and no
//!     // other.
//!     assert_eq!(
//!         report.skipped(),
//!         [
//!             Check::AttachDetachRepeats,
//!             Check::Expand,
//!             Check::SnapshotRoundTrip,
//!             Check::GroupSnapshotRoundTrip,
//!             Check::Modify,
//!             Check::Health
//!         ],
//!         "{report}"
//!     );
//! }
//!
//! /// The controller's side of the checks, without root.
//! #[tokio::test]
//! async fn controller_conformance() {
//!     let checks = Conformance::with_storage(hostdir).controller_only();
//!     let report = checks.run_all().await.unwrap();
//!     assert_eq!(
//!         report.passed(),
//!         [
//!             Check::RepeatedCreate,
//!             Check::DeleteUnknownVolume,
//!             Check::HostileIdsAndPaths
//!         ],
//!         "{report}"
//!     );
//! }
//! ```
//!
//! A failing check says which step failed and what the driver answered,
//! for example:
//!
//! ```text
//! 1 conformance check(s) failed:
//! FAILED  repeated_create: CreateVolume repeated after a driver restart (answered by
//!         the provisioner, not pav-csi's cache: Create must be idempotent by name):
//!         answered volume "vol-2" of 67108864 bytes, the first answer was "vol-1" of 67108864 bytes
//! passed  delete_unknown_volume
//! ...
//! ```
//!
//! # The harness alone
//!
//! For tests of your own, [`Harness`] gives the clients and the paths:
//!
//! ```no_run
//! # async fn f(provisioner: pav_sdk::Provisioner) -> Result<(), Box<dyn std::error::Error>> {
//! use pav_csi::csi;
//! use pav_csi::testing::{Harness, capability};
//! use pav_sdk::{AccessMode, VolumeMode};
//!
//! let mut h = Harness::start(provisioner).await?;
//! let created = h
//!     .controller
//!     .create_volume(csi::CreateVolumeRequest {
//!         name: "pvc-1".into(),
//!         volume_capabilities: vec![capability(VolumeMode::Filesystem, AccessMode::SingleNodeWriter)],
//!         ..Default::default()
//!     })
//!     .await?
//!     .into_inner();
//! let staging = h.staging_path("pvc-1"); // inside h.kubelet_dir()
//! # let _ = (created, staging);
//! h.restart().await?; // pav-csi's caches emptied; staging records kept
//! h.shutdown().await?;
//! # Ok(()) }
//! ```

// From the bottom up, each using only those below it: `harness` serves
// a driver; `report` says what checks found; `context` is what every
// check works with (on a harness); `checks` are the checks (on a
// context, ending in a report's outcome); `conformance` runs them.
// `faults` stands apart: it wraps the provisioner a test serves.
mod checks;
mod conformance;
mod context;
mod faults;
mod harness;
mod report;

pub use conformance::Conformance;
pub use faults::{Fault, Faults, Faulty, Method};
pub use harness::{Harness, HarnessBuilder, HarnessError, detach_below};
pub use report::{Check, Failure, Failures, Outcome, Report};

/// The CSI volume capability of `mode` and `access_mode` (no fs type, no
/// mount flags), for requests.
pub fn capability(
    mode: pav_sdk::VolumeMode,
    access_mode: pav_sdk::AccessMode,
) -> crate::csi::VolumeCapability {
    crate::convert::csi_capability(mode, access_mode)
}
