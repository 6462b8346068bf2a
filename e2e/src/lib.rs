//! Shared helpers of the end-to-end suite: reaching the cluster, or
//! skipping with a clear message when there is none.
//!
//! The suite runs against `$KUBECONFIG` (set by `scripts/cluster-up`) with
//! pav installed from `pav manifests` and its image loaded into the node.

use kube::Client;

/// A client for the cluster named by `$KUBECONFIG`, or `None` (after
/// printing why) when no cluster is reachable, so tests skip instead of
/// failing on machines without one.
pub async fn cluster() -> Option<Client> {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("SKIPPED: KUBECONFIG is not set (run scripts/cluster-up)");
        return None;
    }
    let client = match Client::try_default().await {
        Ok(client) => client,
        Err(err) => {
            eprintln!("SKIPPED: no cluster reachable: {err}");
            return None;
        }
    };
    match client.apiserver_version().await {
        Ok(_) => Some(client),
        Err(err) => {
            eprintln!("SKIPPED: no cluster reachable: {err}");
            None
        }
    }
}
