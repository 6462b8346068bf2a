//! The node's clean-up of node directories ([`crate::node_dirs`]): at
//! start, after each Unstage, and periodically for Deletes that ran in a
//! controller elsewhere, the directory of every volume the records no
//! longer hold and this node has not staged is removed.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::guard::Key;
use crate::node_dirs::{NodeDirError, NodeDirs};
use crate::shared::Shared;

/// How often the node looks for deleted volumes when nothing tells it:
/// a Delete in a controller elsewhere reaches it this late at most.
pub(crate) const DEFAULT_CLEAN_UP_PERIOD: Duration = Duration::from_secs(60);

/// How soon a volume another call held is looked at again.
const BUSY_RETRY: Duration = Duration::from_secs(1);

/// Whether a clean-up left a directory because its volume was busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Busy(bool);

/// Why one round of clean-up stopped.
#[derive(Debug, thiserror::Error)]
enum CleanUpError {
    /// Listing or removing a directory failed.
    #[error(transparent)]
    NodeDir(#[from] NodeDirError),
    /// The records could not be read: nothing is removed without them.
    #[error("cannot read the records")]
    Records(#[source] pav_sdk::Error),
    /// The staging records could not be read.
    #[error("cannot read the staging records")]
    Staged(#[source] io::Error),
}

/// Removes the directory of every volume the records no longer hold
/// and this node has not staged; answers whether one was left because
/// another call held its volume (the call that just told us, often).
async fn clean_up(dirs: &NodeDirs, shared: &Shared) -> Result<Busy, CleanUpError> {
    let Some(records) = shared.provisioner.records() else {
        return Ok(Busy(false));
    };
    let names = dirs.names().await?;
    if names.is_empty() {
        return Ok(Busy(false));
    }
    let live: BTreeSet<String> = records
        .volume_handles()
        .await
        .map_err(CleanUpError::Records)?;
    let mut busy = Busy(false);
    for name in names.into_iter().filter(|name| !live.contains(name)) {
        let Ok(_guard) = shared.in_flight.claim(Key::Volume(name.clone())) else {
            busy = Busy(true);
            continue;
        };
        if let Some(staged) = &shared.staged
            && staged.get(&name).map_err(CleanUpError::Staged)?.is_some()
        {
            continue; // kubelet unstages it first; that brings a round
        }
        dirs.remove_volume(shared.provisioner.stage(), &name)
            .await?;
    }
    Ok(busy)
}

/// For a process serving the node with node directories: cleans up at
/// start, whenever an Unstage may have left a directory behind, and every
/// `period` (for Deletes elsewhere), until `stop` turns true.
pub(crate) async fn keep_clean(
    shared: Arc<Shared>,
    period: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(dirs) = shared.node_dirs.clone() else {
        return;
    };
    loop {
        let wait = match clean_up(&dirs, &shared).await {
            Ok(Busy(true)) => BUSY_RETRY.min(period),
            Ok(Busy(false)) => period,
            Err(e) => {
                tracing::warn!(error = %crate::error::error_chain(&e), "node directory clean-up");
                period
            }
        };
        tokio::select! {
            () = shared.node_dirs_stale.notified() => {}
            () = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}
