//! `CreateSnapshot`: a snapshot of a volume by name, answered again from
//! the cache of recent final answers.

use pav_sdk::SnapshotRequest;
use tonic::{Code, Status};

use super::{ControllerService, ExistsError, Unserved};
use crate::convert::{self, SnapshotAnswerError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};

/// Why a `CreateSnapshot` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateSnapshotError {
    /// The provisioner does not take snapshots (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Another call holds the name or the source volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// A recent snapshot of this name is of another volume
    /// (`ALREADY_EXISTS`).
    #[error("snapshot {name:?} exists of volume {earlier:?}, not of {source_volume:?}")]
    OtherSource {
        name: String,
        earlier: String,
        source_volume: String,
    },
    /// A recent snapshot of this name was taken with other parameters
    /// (`ALREADY_EXISTS`).
    #[error("snapshot {name:?} exists with different parameters")]
    OtherParameters { name: String },
    /// The source volume does not exist, or asking failed (its code).
    #[error(transparent)]
    Source(#[from] ExistsError),
    /// The provisioner's snapshot failed (its code).
    #[error("{}", .0.message())]
    Take(pav_sdk::Error),
    /// The provisioner answered a snapshot of another volume (`INTERNAL`).
    #[error("the provisioner answered a snapshot of volume {answered:?}, not of {asked:?}")]
    WrongSource { answered: String, asked: String },
    /// CSI cannot carry its answer (`INTERNAL`).
    #[error(transparent)]
    Answer(#[from] SnapshotAnswerError),
}

impl From<CreateSnapshotError> for Status {
    fn from(err: CreateSnapshotError) -> Self {
        let code = match &err {
            CreateSnapshotError::Unserved(_) => Code::Unimplemented,
            CreateSnapshotError::Limit(e) => e.code(),
            CreateSnapshotError::Busy(e) => e.code(),
            CreateSnapshotError::OtherSource { .. }
            | CreateSnapshotError::OtherParameters { .. } => Code::AlreadyExists,
            CreateSnapshotError::Source(e) => e.code(),
            CreateSnapshotError::Take(e) => provisioner_code(e),
            CreateSnapshotError::WrongSource { .. } | CreateSnapshotError::Answer(_) => {
                Code::Internal
            }
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `CreateSnapshotRequest` that passed [`check`]: what the provisioner
/// is asked for.
pub(crate) type Checked = SnapshotRequest;

/// The name, source volume id and limits.
pub(crate) fn check(req: &csi::CreateSnapshotRequest) -> Result<Checked, CreateSnapshotError> {
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
    mut snapshot: Checked,
) -> Result<csi::CreateSnapshotResponse, CreateSnapshotError> {
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
                return Err(CreateSnapshotError::OtherSource {
                    name: name.to_owned(),
                    earlier: earlier.source.to_string(),
                    source_volume: source.to_owned(),
                });
            }
            if *earlier == fingerprint {
                return Ok(csi::CreateSnapshotResponse {
                    snapshot: Some(answer.clone()),
                });
            }
            return Err(CreateSnapshotError::OtherParameters {
                name: name.to_owned(),
            });
        }
    }
    service.check_exists(source).await?;
    snapshot.source_node_dir = (shared.node_dirs.as_ref()).and_then(|dirs| dirs.path(source));
    let taken = snapshotter
        .create_snapshot(snapshot)
        .await
        .map_err(CreateSnapshotError::Take)?;
    if taken.source != source {
        return Err(CreateSnapshotError::WrongSource {
            answered: taken.source,
            asked: source.to_owned(),
        });
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
