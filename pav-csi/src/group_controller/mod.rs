//! The CSI GroupController service: group snapshots, served only for a
//! provisioner with [`pav_sdk::GroupSnapshot`] (the Identity service then
//! advertises `GROUP_CONTROLLER_SERVICE`); otherwise every RPC answers
//! `UNIMPLEMENTED`.
//!
//! One file per RPC, as in `controller/`: a `check` (required fields,
//! limits, conversions; no provisioner call) giving the `Checked` request,
//! a `run` of named steps, and an error enum with one mapping to gRPC
//! codes.

mod capabilities;
mod create;
mod delete;
mod get;

use std::sync::Arc;

use pav_sdk::{GroupSnapshot, GroupSnapshotInfo, VolumeId};
use tonic::{Request, Response, Status};

use crate::convert::SnapshotAnswerError;
use crate::csi;
use crate::error::{Subject, logged};
use crate::limits::LimitError;
use crate::shared::Shared;

/// GroupController service.
#[derive(Debug)]
pub(crate) struct GroupControllerService {
    pub(crate) shared: Arc<Shared>,
}

/// The provisioner takes no group snapshots: every RPC of the service is
/// `UNIMPLEMENTED`.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "this provisioner does not take group snapshots (GROUP_CONTROLLER_SERVICE is not advertised)"
)]
pub(crate) struct Unserved;

/// The provisioner's group snapshots, or [`Unserved`].
fn grouper(shared: &Shared) -> Result<&dyn GroupSnapshot, Unserved> {
    shared.provisioner.group_snapshot().ok_or(Unserved)
}

/// Why the provisioner's group snapshot cannot be answered as it is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// Its handle is not one CSI can carry.
    #[error("the provisioner returned a group snapshot CSI cannot carry")]
    Handle(#[source] LimitError),
    /// A member is not one CSI can carry.
    #[error("the provisioner returned a group snapshot CSI cannot carry")]
    Member(#[source] SnapshotAnswerError),
    /// A member names another group.
    #[error("the provisioner answered member {member:?} of group {other:?} in group {group:?}")]
    OtherGroup {
        /// The group answered.
        group: String,
        /// The member.
        member: String,
        /// The group the member names.
        other: String,
    },
}

/// The CSI form of a group snapshot the provisioner returned: each member
/// marked with the group's handle (CSI: the same `group_snapshot_id`),
/// `ready_to_use` only when every member is.
fn csi_group(info: GroupSnapshotInfo) -> Result<csi::VolumeGroupSnapshot, AnswerError> {
    crate::limits::name("group_snapshot_id", &info.handle).map_err(AnswerError::Handle)?;
    let ready = info.ready();
    let mut snapshots = Vec::with_capacity(info.snapshots.len());
    for mut member in info.snapshots {
        match &member.group {
            Some(other) if *other != info.handle => {
                return Err(AnswerError::OtherGroup {
                    group: info.handle,
                    member: member.handle,
                    other: other.clone(),
                });
            }
            _ => member.group = Some(info.handle.clone()),
        }
        snapshots.push(crate::convert::csi_snapshot(member).map_err(AnswerError::Member)?);
    }
    Ok(csi::VolumeGroupSnapshot {
        group_snapshot_id: info.handle,
        snapshots,
        creation_time: Some(prost_types::Timestamp::from(info.created)),
        ready_to_use: ready,
    })
}

/// The members the request names, as ids (checked by each RPC's `check`).
fn snapshot_ids(ids: &[String]) -> Result<Vec<VolumeId>, LimitError> {
    crate::limits::repeated("snapshot_ids", ids.len())?;
    (ids.iter().enumerate())
        .map(|(i, id)| {
            crate::limits::required(&format!("snapshot_ids[{i}]"), id).map(VolumeId::new)
        })
        .collect()
}

#[tonic::async_trait]
impl csi::group_controller_server::GroupController for GroupControllerService {
    async fn group_controller_get_capabilities(
        &self,
        _request: Request<csi::GroupControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::GroupControllerGetCapabilitiesResponse>, Status> {
        Ok(Response::new(capabilities::answer(&self.shared)?))
    }

    async fn create_volume_group_snapshot(
        &self,
        request: Request<csi::CreateVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::CreateVolumeGroupSnapshotResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let grouper = grouper(&self.shared)?;
            let checked = create::check(req)?;
            create::run(&self.shared, grouper, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "CreateVolumeGroupSnapshot",
            Subject::Name(&req.name),
            answer,
        )
    }

    async fn delete_volume_group_snapshot(
        &self,
        request: Request<csi::DeleteVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::DeleteVolumeGroupSnapshotResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let grouper = grouper(&self.shared)?;
            let checked = delete::check(req)?;
            delete::run(&self.shared, grouper, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "DeleteVolumeGroupSnapshot",
            Subject::GroupSnapshot(&req.group_snapshot_id),
            answer,
        )
    }

    async fn get_volume_group_snapshot(
        &self,
        request: Request<csi::GetVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::GetVolumeGroupSnapshotResponse>, Status> {
        let answer = async {
            let grouper = grouper(&self.shared)?;
            let checked = get::check(request.get_ref())?;
            get::run(grouper, checked).await
        };
        Ok(Response::new(answer.await?))
    }
}
