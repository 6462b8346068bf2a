//! HostDir against pav-csi's conformance checks: what csi-sanity checks
//! for the calls it serves, from `cargo test`.

#[allow(dead_code)]
#[path = "../src/provisioner.rs"]
mod provisioner;

use std::path::Path;

use pav_csi::testing::{Check, Conformance};
use pav_sdk::Provisioner;
use provisioner::HostDir;

/// HostDir keeping its volumes in `dir`, with every touch point it
/// implements, as `main` serves it.
fn hostdir(dir: &Path) -> Provisioner<HostDir> {
    pav_sdk::provisioner!(HostDir::new(dir.to_owned(), 1 << 30).unwrap())
}

/// Every check. The node checks mount, which needs root.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn conformance() {
    // `with_storage` builds HostDir on a directory of each check's
    // harness, again after each restart, next to the decoys the
    // hostile-id check watches.
    let report = Conformance::with_storage(hostdir).run_all().await.unwrap();
    // HostDir attaches, grows, modifies and checks the health of no
    // volume and takes no snapshot: those checks are skipped, and no
    // other.
    assert_eq!(
        report.skipped(),
        [
            Check::AttachDetachRepeats,
            Check::Expand,
            Check::SnapshotRoundTrip,
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
    let checks = Conformance::with_storage(hostdir).controller_only();
    let report = checks.run_all().await.unwrap();
    assert_eq!(
        report.passed(),
        [
            Check::RepeatedCreate,
            Check::DeleteUnknownVolume,
            Check::HostileIdsAndPaths
        ],
        "{report}"
    );
}
