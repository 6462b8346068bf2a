//! `ListSnapshots`: the provisioner's snapshots, filtered, sorted by
//! handle and paged.

use tonic::{Code, Status};

use super::{ControllerService, Unserved};
use crate::convert::{self, SnapshotAnswerError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::limits::{self, LimitError};
use crate::pages::{self, PageError};

/// Why a `ListSnapshots` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListSnapshotsError {
    /// The provisioner does not take snapshots (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The provisioner's listing failed (its code).
    #[error("{}", .0.message())]
    List(pav_sdk::Error),
    /// CSI cannot carry a snapshot it listed (`INTERNAL`).
    #[error(transparent)]
    Answer(#[from] SnapshotAnswerError),
    /// A negative page size or a foreign token (its code).
    #[error(transparent)]
    Page(#[from] PageError),
}

impl From<ListSnapshotsError> for Status {
    fn from(err: ListSnapshotsError) -> Self {
        let code = match &err {
            ListSnapshotsError::Unserved(_) => Code::Unimplemented,
            ListSnapshotsError::Limit(e) => e.code(),
            ListSnapshotsError::List(e) => provisioner_code(e),
            ListSnapshotsError::Answer(_) => Code::Internal,
            ListSnapshotsError::Page(e) => e.code(),
        };
        Status::new(code, error_chain(&err))
    }
}

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
pub(crate) fn check(req: &csi::ListSnapshotsRequest) -> Result<Checked, ListSnapshotsError> {
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
) -> Result<csi::ListSnapshotsResponse, ListSnapshotsError> {
    let snapshots =
        (service.list_snapshots_of_provisioner().await).map_err(ListSnapshotsError::List)?;
    let mut entries = Vec::new();
    for snapshot in snapshots {
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
