//! The CSI Controller service: create, delete, validate, expand, modify,
//! attach and detach volumes, capacity, listing and snapshots.
//!
//! One file per RPC. Each has a `check` (the request's required fields,
//! limits and conversions, and what the provisioner declares it serves; no
//! I/O, no provisioner call) giving its `Checked` request, a `run` that
//! carries it out, and an error enum (one variant per failing step) with
//! the one mapping of it to a `Status`. The service below asks whether the
//! RPC is served, then calls the two; what several RPCs need lives here.

mod capabilities;
mod capacity;
mod create_snapshot;
pub(crate) mod create_volume;
mod delete_snapshot;
pub(crate) mod delete_volume;
mod expand;
pub(crate) mod get_volume;
mod list_snapshots;
pub(crate) mod list_volumes;
mod modify_volume;
pub(crate) mod publish_volume;
pub(crate) mod unpublish_volume;
mod validate;

use std::sync::Arc;

use pav_sdk::{AccessMode, VolumeId, VolumeMode};
use tonic::{Code, Request, Response, Status};

use crate::csi;
use crate::error::{Subject, logged, provisioner_code};
use crate::shared::Shared;

/// Controller service.
#[derive(Debug)]
pub(crate) struct ControllerService {
    pub(crate) shared: Arc<Shared>,
}

/// A touch point the provisioner lacks, so that an RPC is not served
/// (`UNIMPLEMENTED`; its capability is not advertised).
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub(crate) enum Unserved {
    /// `CreateVolume` without [`pav_sdk::Create`].
    #[error("this provisioner does not create volumes")]
    Create,
    /// `DeleteVolume` without [`pav_sdk::Create`].
    #[error("this provisioner does not create volumes (CREATE_DELETE_VOLUME is not advertised)")]
    Delete,
    /// Snapshot RPCs without [`pav_sdk::Snapshot`].
    #[error("this provisioner does not take snapshots (CREATE_DELETE_SNAPSHOT is not advertised)")]
    Snapshot,
    /// `ControllerPublishVolume` and `ControllerUnpublishVolume` without
    /// [`pav_sdk::Attach`].
    #[error(
        "this provisioner does not attach volumes (PUBLISH_UNPUBLISH_VOLUME is not advertised)"
    )]
    Attach,
    /// `ControllerExpandVolume` without [`pav_sdk::Expand`].
    #[error("this provisioner does not expand volumes (EXPAND_VOLUME is not advertised)")]
    Expand,
    /// `ControllerModifyVolume` without [`pav_sdk::Modify`].
    #[error("this provisioner does not modify volumes (MODIFY_VOLUME is not advertised)")]
    Modify,
    /// `GetCapacity` without [`pav_sdk::Capacity`].
    #[error("this provisioner does not report capacity (GET_CAPACITY is not advertised)")]
    Capacity,
    /// `ListVolumes` without [`pav_sdk::List`].
    #[error("this provisioner does not list volumes (LIST_VOLUMES is not advertised)")]
    List,
    /// `ControllerGetVolume` without [`pav_sdk::List`] and [`pav_sdk::Health`].
    #[error("this provisioner does not report volume health (GET_VOLUME is not advertised)")]
    Health,
}

/// A volume or access mode the provisioner did not declare.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ModeError {
    #[error("volume mode {0} is not supported")]
    VolumeMode(VolumeMode),
    #[error("access mode {0:?} is not supported")]
    AccessMode(AccessMode),
}

/// Why a volume was not found to exist.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExistsError {
    /// Asking the provisioner failed (with its code).
    #[error("{}", .0.message())]
    Lookup(pav_sdk::Error),
    /// It does not exist (`NOT_FOUND`).
    #[error("volume {volume_id:?} does not exist")]
    Missing { volume_id: String },
}

impl ExistsError {
    /// The provisioner's code, or `NOT_FOUND`.
    pub(crate) fn code(&self) -> Code {
        match self {
            ExistsError::Lookup(e) => provisioner_code(e),
            ExistsError::Missing { .. } => Code::NotFound,
        }
    }
}

/// Refuses volume and access modes the provisioner did not declare.
fn check_modes(
    shared: &Shared,
    mode: VolumeMode,
    access_modes: &[AccessMode],
) -> Result<(), ModeError> {
    if !shared.provisioner.supports_volume_mode(mode) {
        return Err(ModeError::VolumeMode(mode));
    }
    match access_modes
        .iter()
        .find(|m| !shared.provisioner.supports_access_mode(**m))
    {
        Some(m) => Err(ModeError::AccessMode(*m)),
        None => Ok(()),
    }
}

impl ControllerService {
    /// The provisioner's Create, or [`Unserved`] (`unserved` says which RPC
    /// asked).
    fn creator(&self, unserved: Unserved) -> Result<&dyn pav_sdk::Create, Unserved> {
        self.shared.provisioner.create().ok_or(unserved)
    }

    /// The provisioner's Snapshot, or [`Unserved::Snapshot`].
    fn snapshotter(&self) -> Result<&dyn pav_sdk::Snapshot, Unserved> {
        self.shared.provisioner.snapshot().ok_or(Unserved::Snapshot)
    }

    /// The provisioner's Attach, or [`Unserved::Attach`].
    fn attacher(&self) -> Result<&dyn pav_sdk::Attach, Unserved> {
        self.shared.provisioner.attach().ok_or(Unserved::Attach)
    }

    /// The provisioner's snapshots (it has the touch point: callers check).
    async fn list_snapshots_of_provisioner(
        &self,
    ) -> Result<Vec<pav_sdk::SnapshotInfo>, pav_sdk::Error> {
        let Some(snapshotter) = self.shared.provisioner.snapshot() else {
            return Ok(Vec::new());
        };
        snapshotter.list_snapshots().await.inspect_err(|e| {
            tracing::warn!(error = e.message(), "listing snapshots failed");
        })
    }

    /// Whether the volume exists; see [`check_exists`].
    async fn check_exists(&self, volume_id: &str) -> Result<(), ExistsError> {
        check_exists(&self.shared, volume_id).await
    }
}

/// [`ExistsError::Missing`] unless the volume exists; a provisioner
/// without Create (static volumes only) cannot say, so every id passes.
pub(crate) async fn check_exists(shared: &Shared, volume_id: &str) -> Result<(), ExistsError> {
    let Some(creator) = shared.provisioner.create() else {
        return Ok(());
    };
    let exists = match creator.exists(&VolumeId::new(volume_id)).await {
        Ok(exists) => exists,
        Err(pav_sdk::Error::NotFound(_)) => false,
        Err(e) => return Err(ExistsError::Lookup(e)),
    };
    match exists {
        true => Ok(()),
        false => Err(ExistsError::Missing {
            volume_id: volume_id.to_owned(),
        }),
    }
}

#[tonic::async_trait]
impl csi::controller_server::Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let creator = self.creator(Unserved::Create)?;
            let checked = create_volume::check(req, &self.shared)?;
            create_volume::run(self, creator, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged("CreateVolume", Subject::Name(&req.name), answer)
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            self.creator(Unserved::Delete)?;
            let checked = delete_volume::check(req)?;
            delete_volume::run(self, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged("DeleteVolume", Subject::Volume(&req.volume_id), answer)
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        let checked = validate::check(request.get_ref(), &self.shared)?;
        Ok(Response::new(validate::run(self, checked).await?))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let expander = self.shared.provisioner.expand().ok_or(Unserved::Expand)?;
            let checked = expand::check(req, &self.shared)?;
            expand::run(self, expander, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "ControllerExpandVolume",
            Subject::Volume(&req.volume_id),
            answer,
        )
    }

    async fn controller_modify_volume(
        &self,
        request: Request<csi::ControllerModifyVolumeRequest>,
    ) -> Result<Response<csi::ControllerModifyVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let modifier = self.shared.provisioner.modify().ok_or(Unserved::Modify)?;
            let checked = modify_volume::check(req)?;
            modify_volume::run(self, modifier, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "ControllerModifyVolume",
            Subject::Volume(&req.volume_id),
            answer,
        )
    }

    async fn controller_publish_volume(
        &self,
        request: Request<csi::ControllerPublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerPublishVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let attacher = self.attacher()?;
            let checked = publish_volume::check(req, &self.shared, attacher)?;
            publish_volume::run(self, attacher, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "ControllerPublishVolume",
            Subject::Volume(&req.volume_id),
            answer,
        )
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerUnpublishVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let attacher = self.attacher()?;
            let checked = unpublish_volume::check(req)?;
            unpublish_volume::run(self, attacher, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "ControllerUnpublishVolume",
            Subject::Volume(&req.volume_id),
            answer,
        )
    }

    async fn get_capacity(
        &self,
        request: Request<csi::GetCapacityRequest>,
    ) -> Result<Response<csi::GetCapacityResponse>, Status> {
        let answer = async {
            let reporter = self.shared.provisioner.capacity();
            let reporter = reporter.ok_or(Unserved::Capacity)?;
            let checked = capacity::check(request.get_ref(), &self.shared)?;
            capacity::run(reporter, checked).await
        };
        Ok(Response::new(answer.await?))
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        let answer = async {
            let lister = self.shared.provisioner.list().ok_or(Unserved::List)?;
            let checked = list_volumes::check(request.get_ref());
            let health = self.shared.provisioner.health();
            list_volumes::run(lister, health, checked).await
        };
        Ok(Response::new(answer.await?))
    }

    async fn controller_get_volume(
        &self,
        request: Request<csi::ControllerGetVolumeRequest>,
    ) -> Result<Response<csi::ControllerGetVolumeResponse>, Status> {
        let answer = async {
            let provisioner = &self.shared.provisioner;
            let (Some(lister), Some(health)) = (provisioner.list(), provisioner.health()) else {
                return Err(Unserved::Health.into());
            };
            let checked = get_volume::check(request.get_ref())?;
            get_volume::run(lister, health, checked).await
        };
        Ok(Response::new(answer.await?))
    }

    async fn create_snapshot(
        &self,
        request: Request<csi::CreateSnapshotRequest>,
    ) -> Result<Response<csi::CreateSnapshotResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let snapshotter = self.snapshotter()?;
            let checked = create_snapshot::check(req)?;
            create_snapshot::run(self, snapshotter, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged("CreateSnapshot", Subject::Name(&req.name), answer)
    }

    async fn delete_snapshot(
        &self,
        request: Request<csi::DeleteSnapshotRequest>,
    ) -> Result<Response<csi::DeleteSnapshotResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let snapshotter = self.snapshotter()?;
            let checked = delete_snapshot::check(req)?;
            delete_snapshot::run(self, snapshotter, checked).await
        };
        let answer = answer.await.map(Response::new).map_err(Status::from);
        logged(
            "DeleteSnapshot",
            Subject::Snapshot(&req.snapshot_id),
            answer,
        )
    }

    async fn list_snapshots(
        &self,
        request: Request<csi::ListSnapshotsRequest>,
    ) -> Result<Response<csi::ListSnapshotsResponse>, Status> {
        let answer = async {
            self.snapshotter()?;
            let checked = list_snapshots::check(request.get_ref())?;
            list_snapshots::run(self, checked).await
        };
        Ok(Response::new(answer.await?))
    }

    async fn controller_get_capabilities(
        &self,
        _request: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        Ok(Response::new(capabilities::answer(&self.shared)))
    }
}
