//! `CreateSnapshot`: a snapshot of a volume by name, answered again from
//! the cache of recent final answers.

use pav_sdk::SnapshotRequest;
use tonic::Status;

use super::ControllerService;
use crate::convert;
use crate::csi;
use crate::error::status;
use crate::guard::Key;
use crate::limits;

/// A `CreateSnapshotRequest` that passed [`check`]: what the provisioner
/// is asked for.
pub(crate) type Checked = SnapshotRequest;

/// The name, source volume id and limits.
pub(crate) fn check(req: &csi::CreateSnapshotRequest) -> Result<Checked, Status> {
    let name = limits::name("name", &req.name)?;
    let source = limits::required("source_volume_id", &req.source_volume_id)?;
    limits::map("parameters", &req.parameters)?;
    let secrets = convert::secrets(&req.secrets)?;
    let mut snapshot = pav_sdk::build::snapshot(name, source);
    snapshot.parameters = convert::split_parameters(&req.parameters).0;
    snapshot.secrets = secrets;
    Ok(snapshot)
}

/// Holds the name and the source volume, answers a repeat from the cache
/// (another source or other parameters are `ALREADY_EXISTS`), checks the
/// source exists, asks the provisioner and checks its answer; a snapshot
/// ready to use is cached.
pub(crate) async fn run(
    service: &ControllerService,
    snapshotter: &dyn pav_sdk::Snapshot,
    snapshot: Checked,
) -> Result<csi::CreateSnapshotResponse, Status> {
    let shared = &service.shared;
    let (name, source) = (snapshot.name.clone(), snapshot.source.to_string());
    let (name, source) = (name.as_str(), source.as_str());
    let _guard = shared.in_flight.claim(Key::SnapshotName(name.to_owned()))?;
    let _source_guard = shared.in_flight.claim(Key::Volume(source.to_owned()))?;
    tracing::info!(name, source, secrets = ?snapshot.secrets, "CreateSnapshot");
    let mut fingerprint = snapshot.clone();
    fingerprint.secrets = Default::default();
    {
        let cache = (shared.snapshot_cache.lock()).unwrap_or_else(|e| e.into_inner());
        if let Some((earlier, answer)) = cache.get(name) {
            if earlier.source != fingerprint.source {
                return Err(Status::already_exists(format!(
                    "snapshot {name:?} exists of volume {:?}, not of {source:?}",
                    earlier.source.as_str()
                )));
            }
            if *earlier == fingerprint {
                return Ok(csi::CreateSnapshotResponse {
                    snapshot: Some(answer.clone()),
                });
            }
            return Err(Status::already_exists(format!(
                "snapshot {name:?} exists with different parameters"
            )));
        }
    }
    service.check_exists(source).await?;
    let taken = snapshotter
        .create_snapshot(snapshot)
        .await
        .map_err(status)?;
    if taken.source != source {
        return Err(Status::internal(format!(
            "the provisioner answered a snapshot of volume {:?}, not of {source:?}",
            taken.source
        )));
    }
    let ready = taken.ready;
    let answer = convert::csi_snapshot(taken)?;
    tracing::info!(
        name,
        snapshot_id = answer.snapshot_id.as_str(),
        "snapshot taken"
    );
    // A snapshot still being cut is asked about again: only a final
    // answer may be replayed.
    if ready {
        (shared.snapshot_cache.lock())
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, fingerprint, answer.clone());
    }
    Ok(csi::CreateSnapshotResponse {
        snapshot: Some(answer),
    })
}
