//! `ListVolumes`: the provisioner's volumes, sorted by handle and paged.

use tonic::Status;

use crate::convert;
use crate::csi;
use crate::error::status;
use crate::pages;

use super::get_volume::csi_condition;

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
) -> Result<csi::ListVolumesResponse, Status> {
    let volumes = lister.list().await.map_err(|e| {
        tracing::warn!(error = e.message(), "ListVolumes failed");
        status(e)
    })?;
    let mut entries = Vec::with_capacity(volumes.len());
    for listed in volumes {
        let volume = convert::csi_volume(&listed.volume).map_err(|refused| {
            Status::internal(format!(
                "the provisioner listed a volume CSI cannot return: {}",
                refused.message()
            ))
        })?;
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
) -> Result<pav_sdk::VolumeCondition, Status> {
    let ask = pav_sdk::HealthRequest::controller(handle);
    health.condition(ask).await.map_err(|e| {
        tracing::warn!(
            volume_id = handle,
            error = e.message(),
            "checking health failed"
        );
        status(e)
    })
}
