//! `CreateVolumeGroupSnapshot`: snapshots of several volumes at one
//! instant, by name.

use std::collections::BTreeSet;

use pav_sdk::GroupSnapshotRequest;
use tonic::{Code, Status};

use super::{AnswerError, Unserved, csi_group};
use crate::controller::ExistsError;
use crate::convert;
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key, OperationGuard};
use crate::limits::{self, LimitError};
use crate::shared::Shared;

/// Why a `CreateVolumeGroupSnapshot` failed, one variant per step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateGroupError {
    /// The provisioner takes no group snapshots (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks the spec's rules or limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Request(#[from] LimitError),
    /// No source volume (`INVALID_ARGUMENT`).
    #[error("source_volume_ids is required")]
    NoSources,
    /// A source volume named twice (`INVALID_ARGUMENT`).
    #[error("source_volume_ids names volume {0:?} twice")]
    DuplicateSource(String),
    /// Another call holds the name or a source (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// A source volume does not exist (`NOT_FOUND`), or its check failed.
    #[error(transparent)]
    Source(#[from] ExistsError),
    /// The provisioner's answer, with its code.
    #[error("{}", .0.message())]
    Provisioner(pav_sdk::Error),
    /// Its answer is not one member per source (`INTERNAL`).
    #[error("the provisioner answered members of volumes {answered:?} for sources {requested:?}")]
    Members {
        /// The sources of the members answered, sorted.
        answered: Vec<String>,
        /// The sources asked for, sorted.
        requested: Vec<String>,
    },
    /// Its answer cannot be carried (`INTERNAL`).
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

impl From<CreateGroupError> for Status {
    fn from(error: CreateGroupError) -> Status {
        let code = match &error {
            CreateGroupError::Unserved(_) => Code::Unimplemented,
            CreateGroupError::Request(e) => e.code(),
            CreateGroupError::NoSources | CreateGroupError::DuplicateSource(_) => {
                Code::InvalidArgument
            }
            CreateGroupError::Busy(e) => e.code(),
            CreateGroupError::Source(e) => e.code(),
            CreateGroupError::Provisioner(e) => provisioner_code(e),
            CreateGroupError::Members { .. } | CreateGroupError::Answer(_) => Code::Internal,
        };
        Status::new(code, error_chain(&error))
    }
}

/// A `CreateVolumeGroupSnapshotRequest` that passed [`check`]: what the
/// provisioner is asked for.
pub(crate) type Checked = GroupSnapshotRequest;

/// The name (as CSI's names), the sources (at least one, each an id within
/// the limits, none twice, at most 64), parameters and secrets within the
/// map limit.
pub(crate) fn check(
    req: &csi::CreateVolumeGroupSnapshotRequest,
) -> Result<Checked, CreateGroupError> {
    let name = limits::name("name", &req.name)?;
    if req.source_volume_ids.is_empty() {
        return Err(CreateGroupError::NoSources);
    }
    limits::repeated("source_volume_ids", req.source_volume_ids.len())?;
    let mut seen = BTreeSet::new();
    for (i, id) in req.source_volume_ids.iter().enumerate() {
        limits::required(&format!("source_volume_ids[{i}]"), id)?;
        if !seen.insert(id.as_str()) {
            return Err(CreateGroupError::DuplicateSource(id.clone()));
        }
    }
    limits::map("parameters", &req.parameters)?;
    let secrets = convert::secrets(&req.secrets)?;
    let mut group = pav_sdk::group_snapshot::build::group_snapshot(
        name,
        req.source_volume_ids.iter().map(String::as_str),
    );
    group.parameters = convert::split_parameters(&req.parameters).0;
    group.secrets = secrets;
    Ok(group)
}

/// Holds the name and every source, checks each source exists, asks the
/// provisioner and checks its answer.
pub(crate) async fn run(
    shared: &Shared,
    grouper: &dyn pav_sdk::GroupSnapshot,
    group: Checked,
) -> Result<csi::CreateVolumeGroupSnapshotResponse, CreateGroupError> {
    let _held = hold(shared, &group)?;
    tracing::info!(name = group.name, sources = ?group.sources, secrets = ?group.secrets, "CreateVolumeGroupSnapshot");
    for source in &group.sources {
        crate::controller::check_exists(shared, source.as_str()).await?;
    }
    let name = group.name.clone();
    let mut requested: Vec<String> = group.sources.iter().map(|s| s.to_string()).collect();
    let taken = grouper
        .create_group_snapshot(group)
        .await
        .map_err(CreateGroupError::Provisioner)?;
    let mut answered: Vec<String> = taken.snapshots.iter().map(|s| s.source.clone()).collect();
    answered.sort();
    requested.sort();
    if answered != requested {
        return Err(CreateGroupError::Members {
            answered,
            requested,
        });
    }
    let answer = csi_group(taken)?;
    tracing::info!(
        name,
        group_snapshot_id = answer.group_snapshot_id.as_str(),
        ready = answer.ready_to_use,
        "group snapshot taken"
    );
    Ok(csi::CreateVolumeGroupSnapshotResponse {
        group_snapshot: Some(answer),
    })
}

/// Claims the group's name and each source volume: no other call on them
/// runs meanwhile (`ABORTED`).
fn hold(shared: &Shared, group: &Checked) -> Result<Vec<OperationGuard>, CreateGroupError> {
    let keys = std::iter::once(Key::GroupSnapshotName(group.name.clone()))
        .chain(group.sources.iter().map(|s| Key::Volume(s.to_string())));
    keys.map(|key| Ok(shared.in_flight.claim(key)?)).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn request(name: &str, sources: &[&str]) -> csi::CreateVolumeGroupSnapshotRequest {
        csi::CreateVolumeGroupSnapshotRequest {
            name: name.into(),
            source_volume_ids: sources.iter().map(|s| s.to_string()).collect(),
            secrets: HashMap::new(),
            parameters: HashMap::new(),
        }
    }

    fn refused(req: &csi::CreateVolumeGroupSnapshotRequest) -> Status {
        Status::from(check(req).unwrap_err())
    }

    #[test]
    fn name_and_distinct_valid_sources_are_required() {
        for (req, field) in [
            (request("", &["v"]), "name"),
            (request("g\u{1}", &["v"]), "name"),
            (request("g", &[]), "source_volume_ids"),
            (request("g", &["v", ""]), "source_volume_ids[1]"),
            (
                request("g", &["v", &"x".repeat(129)]),
                "source_volume_ids[1]",
            ),
            (request("g", &["v", "w", "v"]), "\"v\" twice"),
        ] {
            let status = refused(&req);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(status.message().contains(field), "{field}: {status:?}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("v{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(refused(&request("g", &many)).message().contains("64"));
        let mut big = request("g", &["v"]);
        big.parameters.insert("k".into(), "x".repeat(5000));
        assert!(refused(&big).message().contains("parameters"));
        let checked = check(&request("g", &["v", "w"])).unwrap();
        assert_eq!(
            checked.sources,
            [pav_sdk::VolumeId::new("v"), pav_sdk::VolumeId::new("w")]
        );
    }
}
