//! Tmpfs against pav-csi's conformance checks: what csi-sanity checks for
//! the calls it serves, from `cargo test`.

#[allow(dead_code)]
#[path = "../src/provisioner.rs"]
mod provisioner;

use std::path::Path;

use pav_csi::testing::{Check, Conformance};
use pav_sdk::Provisioner;
use pav_sdk::records::Records;
use provisioner::Tmpfs;

/// Tmpfs keeping its volumes, snapshots and records in `dir`, with every
/// touch point it implements, as `main` serves it.
fn tmpfs(dir: &Path) -> Provisioner<Tmpfs> {
    let tmpfs = Tmpfs {
        snapshots: dir.join("snapshots"),
        node: Default::default(),
    };
    pav_sdk::provisioner!(tmpfs).keep_records(Records::in_dir(dir.join("records")).budget(1 << 30))
}

/// Every check. The node checks mount, which needs root.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn conformance() {
    let report = Conformance::with_storage(tmpfs).run_all().await.unwrap();
    // tmpfs volumes are the node's memory: nothing to attach; it takes no
    // group snapshots, modifies no volume and reports no health. Those
    // checks alone are skipped.
    assert_eq!(
        report.skipped(),
        [
            Check::AttachDetachRepeats,
            Check::GroupSnapshotRoundTrip,
            Check::Modify,
            Check::Health
        ],
        "{report}"
    );
}

/// The controller's side of the checks, without root.
#[tokio::test]
async fn controller_conformance() {
    let checks = Conformance::with_storage(tmpfs).controller_only();
    let failures = checks.run_all().await.unwrap_err();
    // Expansion and hostile ids pass their controller part; so would any
    // check that needs no node.
    assert_eq!(
        failures.0.passed(),
        [
            Check::RepeatedCreate,
            Check::DeleteUnknownVolume,
            Check::Expand,
            Check::HostileIdsAndPaths
        ],
        "{failures}"
    );
    // A snapshot copies the volume's tmpfs, which lives on its node: a
    // controller apart from its node plugin refuses, saying so.
    let refused = checks.run(Check::SnapshotRoundTrip).await.unwrap_err();
    assert!(
        refused.to_string().contains("FAILED_PRECONDITION"),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("node plugin runs apart"),
        "{refused}"
    );
}
