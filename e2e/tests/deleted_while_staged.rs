//! Claims deleted together with the pods that use them, on one node
//! (pav_e2e::deleted_while_staged; several_nodes.rs runs the same on
//! three nodes).

use std::time::Instant;

use pav_e2e::deleted_while_staged::{local_volumes_deleted_at_once, sparse_file_deleted_at_once};
use pav_e2e::*;

/// This host's node alone.
fn one_node() -> Vec<LocalNode> {
    local_nodes().expect("reading the cluster's nodes")[..1].to_vec()
}

/// Runs `scenario` and prints how long it took under `name`.
async fn timed(name: &str, scenario: impl std::future::Future<Output = ()>) {
    let started = Instant::now();
    scenario.await;
    eprintln!("{name}: {:.1}s", started.elapsed().as_secs_f64());
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volumes_claims_deleted_with_their_pods_leave_nothing() {
    timed(
        "local_volumes_claims_deleted_with_their_pods_leave_nothing",
        local_volumes_deleted_at_once("e2e-deleted-staged-local", &one_node()),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn sparse_file_claims_deleted_with_their_pods_leave_nothing() {
    timed(
        "sparse_file_claims_deleted_with_their_pods_leave_nothing",
        sparse_file_deleted_at_once("e2e-deleted-staged-sparse", &one_node()),
    )
    .await;
}
