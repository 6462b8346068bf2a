//! `ListVolumes`: the provisioner's volumes, sorted by handle and paged.

use tonic::{Code, Status};

use super::Unserved;
use super::get_volume::csi_condition;
use crate::convert::{self, VolumeAnswerError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::pages::{self, PageError};

/// Why a `ListVolumes` failed: one variant per step of [`run`], each
/// mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListVolumesError {
    /// The provisioner does not list volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// The provisioner's listing failed (its code).
    #[error("{}", .0.message())]
    List(pav_sdk::Error),
    /// CSI cannot carry a volume it listed (`INTERNAL`).
    #[error("the provisioner listed a volume CSI cannot return")]
    Answer(#[source] VolumeAnswerError),
    /// The provisioner's Health of a listed volume failed (its code).
    #[error("{}", .0.message())]
    Health(pav_sdk::Error),
    /// A negative page size or a foreign token (its code).
    #[error(transparent)]
    Page(#[from] PageError),
}

impl From<ListVolumesError> for Status {
    fn from(err: ListVolumesError) -> Self {
        let code = match &err {
            ListVolumesError::Unserved(_) => Code::Unimplemented,
            ListVolumesError::List(e) | ListVolumesError::Health(e) => provisioner_code(e),
            ListVolumesError::Answer(_) => Code::Internal,
            ListVolumesError::Page(e) => e.code(),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `ListVolumesRequest` that passed [`check`]: where to start, and how
/// many entries at most (a token names the last entry of a page; a
/// foreign one is `ABORTED` when paging).
#[derive(Debug)]
pub(crate) struct Checked {
    starting_token: String,
    max_entries: i32,
}

/// Nothing to refuse before the volumes are listed.
pub(crate) fn check(req: &csi::ListVolumesRequest) -> Checked {
    Checked {
        starting_token: req.starting_token.clone(),
        max_entries: req.max_entries,
    }
}

/// Lists, converts each volume (one CSI cannot carry is `INTERNAL`) with
/// its condition (the listing's, else `health`'s when the provisioner has
/// one), and pages.
pub(crate) async fn run(
    lister: &dyn pav_sdk::List,
    health: Option<&dyn pav_sdk::Health>,
    checked: Checked,
) -> Result<csi::ListVolumesResponse, ListVolumesError> {
    let volumes = lister.list().await.map_err(|e| {
        tracing::warn!(error = e.message(), "ListVolumes failed");
        ListVolumesError::List(e)
    })?;
    let mut entries = Vec::with_capacity(volumes.len());
    for listed in volumes {
        let volume = convert::csi_volume(&listed.volume).map_err(ListVolumesError::Answer)?;
        let handle = listed.volume.handle.to_string();
        let condition = match (listed.condition, health) {
            (Some(condition), _) => Some(condition),
            (None, Some(health)) => Some(condition_of(health, &handle).await?),
            (None, None) => None,
        };
        let status = condition.map(|c| csi::list_volumes_response::VolumeStatus {
            published_node_ids: Vec::new(),
            volume_condition: Some(csi_condition(c)),
        });
        let entry = csi::list_volumes_response::Entry {
            volume: Some(volume),
            status,
        };
        entries.push((handle, entry));
    }
    let (entries, next_token) = pages::page(entries, &checked.starting_token, checked.max_entries)?;
    Ok(csi::ListVolumesResponse {
        entries,
        next_token,
    })
}

/// What the provisioner's Health says of a listed volume; a failed check
/// fails the listing, as a failed listing does.
async fn condition_of(
    health: &dyn pav_sdk::Health,
    handle: &str,
) -> Result<pav_sdk::VolumeCondition, ListVolumesError> {
    let ask = pav_sdk::HealthRequest::controller(handle);
    health.condition(ask).await.map_err(|e| {
        tracing::warn!(
            volume_id = handle,
            error = e.message(),
            "checking health failed"
        );
        ListVolumesError::Health(e)
    })
}
