//! `ListSnapshots`: the provisioner's snapshots, filtered, sorted by
//! handle and paged.

use tonic::Status;

use super::ControllerService;
use crate::convert;
use crate::csi;
use crate::limits;
use crate::pages;

/// A `ListSnapshotsRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    /// Only this snapshot, when not empty.
    snapshot_id: String,
    /// Only snapshots of this volume, when not empty.
    source_volume_id: String,
    starting_token: String,
    max_entries: i32,
}

/// The filters and secrets within the limits.
pub(crate) fn check(req: &csi::ListSnapshotsRequest) -> Result<Checked, Status> {
    limits::limited("snapshot_id", &req.snapshot_id)?;
    limits::limited("source_volume_id", &req.source_volume_id)?;
    convert::secrets(&req.secrets)?;
    Ok(Checked {
        snapshot_id: req.snapshot_id.clone(),
        source_volume_id: req.source_volume_id.clone(),
        starting_token: req.starting_token.clone(),
        max_entries: req.max_entries,
    })
}

/// Lists, keeps what the filters ask for (a snapshot CSI cannot carry is
/// `INTERNAL`), and pages.
pub(crate) async fn run(
    service: &ControllerService,
    checked: Checked,
) -> Result<csi::ListSnapshotsResponse, Status> {
    let mut entries = Vec::new();
    for snapshot in service.list_snapshots_of_provisioner().await? {
        let wanted = (checked.snapshot_id.is_empty() || snapshot.handle == checked.snapshot_id)
            && (checked.source_volume_id.is_empty() || snapshot.source == checked.source_volume_id);
        if wanted {
            let handle = snapshot.handle.clone();
            let entry = csi::list_snapshots_response::Entry {
                snapshot: Some(convert::csi_snapshot(snapshot)?),
            };
            entries.push((handle, entry));
        }
    }
    let (entries, next_token) = pages::page(entries, &checked.starting_token, checked.max_entries)?;
    Ok(csi::ListSnapshotsResponse {
        entries,
        next_token,
    })
}
