//! The CSI Controller service: create, delete, validate, expand, modify,
//! attach and detach volumes, capacity, listing and snapshots.
//!
//! One file per RPC. Each has a `check` (the request's required fields,
//! limits and conversions, and what the provisioner declares it serves; no
//! I/O, no provisioner call) giving its `Checked` request, and a `run` that
//! carries it out. The service below asks whether the RPC is served, then
//! calls the two; what several RPCs need lives here.

mod capabilities;
mod capacity;
mod create_snapshot;
pub(crate) mod create_volume;
mod delete_snapshot;
pub(crate) mod delete_volume;
mod expand;
pub(crate) mod get_volume;
mod list_snapshots;
mod list_volumes;
mod modify_volume;
pub(crate) mod publish_volume;
pub(crate) mod unpublish_volume;
mod validate;

use std::sync::Arc;

use pav_sdk::{AccessMode, VolumeId, VolumeMode};
use tonic::{Request, Response, Status};

use crate::csi;
use crate::error::{Subject, logged, status};
use crate::shared::Shared;

/// Controller service.
#[derive(Debug)]
pub(crate) struct ControllerService {
    pub(crate) shared: Arc<Shared>,
}

/// Refuses volume and access modes the provisioner did not declare.
fn check_modes(
    shared: &Shared,
    mode: VolumeMode,
    access_modes: &[AccessMode],
) -> Result<(), String> {
    if !shared.provisioner.supports_volume_mode(mode) {
        return Err(format!("volume mode {mode} is not supported"));
    }
    match access_modes
        .iter()
        .find(|m| !shared.provisioner.supports_access_mode(**m))
    {
        Some(m) => Err(format!("access mode {m:?} is not supported")),
        None => Ok(()),
    }
}

impl ControllerService {
    /// `UNIMPLEMENTED` unless the provisioner creates volumes.
    fn creator(&self, message: &'static str) -> Result<&dyn pav_sdk::Create, Status> {
        (self.shared.provisioner.create()).ok_or_else(|| Status::unimplemented(message))
    }

    /// `UNIMPLEMENTED` unless the provisioner takes snapshots.
    fn snapshotter(&self) -> Result<&dyn pav_sdk::Snapshot, Status> {
        self.shared.provisioner.snapshot().ok_or_else(|| {
            Status::unimplemented(
                "this provisioner does not take snapshots (CREATE_DELETE_SNAPSHOT is not advertised)",
            )
        })
    }

    /// `UNIMPLEMENTED` unless the provisioner attaches volumes.
    fn attacher(&self) -> Result<&dyn pav_sdk::Attach, Status> {
        self.shared.provisioner.attach().ok_or_else(|| {
            Status::unimplemented(
                "this provisioner does not attach volumes (PUBLISH_UNPUBLISH_VOLUME is not advertised)",
            )
        })
    }

    /// The provisioner's snapshots (it has the touch point: callers check).
    async fn list_snapshots_of_provisioner(&self) -> Result<Vec<pav_sdk::SnapshotInfo>, Status> {
        let Some(snapshotter) = self.shared.provisioner.snapshot() else {
            return Ok(Vec::new());
        };
        snapshotter.list_snapshots().await.map_err(|e| {
            tracing::warn!(error = e.message(), "listing snapshots failed");
            status(e)
        })
    }

    /// `NOT_FOUND` unless the volume exists; see [`check_exists`].
    async fn check_exists(&self, volume_id: &str) -> Result<(), Status> {
        check_exists(&self.shared, volume_id).await
    }
}

/// `NOT_FOUND` unless the volume exists; a provisioner without Create
/// (static volumes only) cannot say, so every id passes.
pub(crate) async fn check_exists(shared: &Shared, volume_id: &str) -> Result<(), Status> {
    let Some(creator) = shared.provisioner.create() else {
        return Ok(());
    };
    let exists = match creator.exists(&VolumeId::new(volume_id)).await {
        Ok(exists) => exists,
        Err(pav_sdk::Error::NotFound(_)) => false,
        Err(e) => return Err(status(e)),
    };
    match exists {
        true => Ok(()),
        false => Err(Status::not_found(format!(
            "volume {volume_id:?} does not exist"
        ))),
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
            let creator = self.creator("this provisioner does not create volumes")?;
            let checked = create_volume::check(req, &self.shared)?;
            create_volume::run(self, creator, checked).await
        };
        let answer = answer.await.map(Response::new);
        logged("CreateVolume", Subject::Name(&req.name), answer)
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            self.creator(
                "this provisioner does not create volumes (CREATE_DELETE_VOLUME is not advertised)",
            )?;
            let checked = delete_volume::check(req)?;
            delete_volume::run(self, checked).await
        };
        let answer = answer.await.map(Response::new);
        logged("DeleteVolume", Subject::Volume(&req.volume_id), answer)
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        let checked = validate::check(request.get_ref(), &self.shared)?;
        validate::run(self, checked).await.map(Response::new)
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        let req = request.get_ref();
        let answer = async {
            let Some(expander) = self.shared.provisioner.expand() else {
                return Err(Status::unimplemented(
                    "this provisioner does not expand volumes (EXPAND_VOLUME is not advertised)",
                ));
            };
            let checked = expand::check(req, &self.shared)?;
            expand::run(self, expander, checked).await
        };
        let answer = answer.await.map(Response::new);
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
            let Some(modifier) = self.shared.provisioner.modify() else {
                return Err(Status::unimplemented(
                    "this provisioner does not modify volumes (MODIFY_VOLUME is not advertised)",
                ));
            };
            let checked = modify_volume::check(req)?;
            modify_volume::run(self, modifier, checked).await
        };
        let answer = answer.await.map(Response::new);
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
            Ok(publish_volume::run(self, attacher, checked).await?)
        };
        let answer = answer.await.map(Response::new);
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
            Ok(unpublish_volume::run(self, attacher, checked).await?)
        };
        let answer = answer.await.map(Response::new);
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
        let Some(reporter) = self.shared.provisioner.capacity() else {
            return Err(Status::unimplemented(
                "this provisioner does not report capacity (GET_CAPACITY is not advertised)",
            ));
        };
        let checked = capacity::check(request.get_ref(), &self.shared)?;
        capacity::run(reporter, checked).await.map(Response::new)
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        let Some(lister) = self.shared.provisioner.list() else {
            return Err(Status::unimplemented(
                "this provisioner does not list volumes (LIST_VOLUMES is not advertised)",
            ));
        };
        let checked = list_volumes::check(request.get_ref());
        let health = self.shared.provisioner.health();
        list_volumes::run(lister, health, checked)
            .await
            .map(Response::new)
    }

    async fn controller_get_volume(
        &self,
        request: Request<csi::ControllerGetVolumeRequest>,
    ) -> Result<Response<csi::ControllerGetVolumeResponse>, Status> {
        let provisioner = &self.shared.provisioner;
        let (Some(lister), Some(health)) = (provisioner.list(), provisioner.health()) else {
            return Err(Status::unimplemented(
                "this provisioner does not report volume health (GET_VOLUME is not advertised)",
            ));
        };
        let checked = get_volume::check(request.get_ref())?;
        get_volume::run(lister, health, checked)
            .await
            .map(Response::new)
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
        let answer = answer.await.map(Response::new);
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
        let answer = answer.await.map(Response::new);
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
        self.snapshotter()?;
        let checked = list_snapshots::check(request.get_ref())?;
        list_snapshots::run(self, checked).await.map(Response::new)
    }

    async fn controller_get_capabilities(
        &self,
        _request: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        Ok(Response::new(capabilities::answer(&self.shared)))
    }
}
