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
        root: dir.to_owned(),
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
    let report = checks.run_all().await.unwrap();
    // Expansion, snapshots and hostile ids pass their controller part.
    assert_eq!(
        report.passed(),
        [
            Check::RepeatedCreate,
            Check::DeleteUnknownVolume,
            Check::Expand,
            Check::SnapshotRoundTrip,
            Check::HostileIdsAndPaths
        ],
        "{report}"
    );
}
