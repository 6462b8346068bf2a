//! The CSI Controller service: create, delete and validate volumes.

use std::sync::Arc;

use pav_sdk::{CapacityRange, ContentSource, TopologyRequirement, VolumeId, VolumeMode};
use tonic::{Request, Response, Status};

use crate::convert;
use crate::csi;
use crate::csi::controller_service_capability::rpc::Type as RpcType;
use crate::error::status;
use crate::guard::Key;
use crate::limits;
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
    access_modes: &[pav_sdk::AccessMode],
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

/// The CSI form of a volume the provisioner created or listed, checked
/// against what CSI allows in a `CreateVolumeResponse`: a `volume_id` of 1
/// to 128 bytes free of the control characters CSI bans in names (kubelet
/// and the sidecars pass it on as the PV's `volumeHandle`), a size that
/// fits an int64, a `volume_context` of at most 4 KiB and valid topology
/// segments.
fn csi_volume(volume: &pav_sdk::Volume) -> Result<csi::Volume, Status> {
    limits::name("volume_id", &volume.handle)?;
    let volume_context = convert::unsorted(&volume.context);
    limits::map("volume_context", &volume_context)?;
    limits::repeated("accessible_topology", volume.accessible_topology.len())?;
    let accessible_topology: Vec<csi::Topology> = volume
        .accessible_topology
        .iter()
        .map(convert::topology)
        .collect();
    for (i, topology) in accessible_topology.iter().enumerate() {
        limits::topology(&format!("accessible_topology[{i}]"), &topology.segments)?;
    }
    Ok(csi::Volume {
        capacity_bytes: limits::int64("capacity_bytes", volume.capacity_bytes)?,
        volume_context,
        content_source: None,
        accessible_topology,
        volume_id: volume.handle.to_string(),
    })
}

/// Checks that a created volume's size is within the requested range. 0
/// is CSI's "unknown" (an NFS share, say) and passes.
fn check_sized(volume: &pav_sdk::Volume, capacity: CapacityRange) -> Result<(), Status> {
    let bytes = volume.capacity_bytes;
    if bytes == 0 || capacity.contains(bytes) {
        return Ok(());
    }
    Err(Status::invalid_argument(format!(
        "capacity_bytes {bytes} is outside the requested range (required_bytes {}, limit_bytes {})",
        capacity.min_bytes.unwrap_or(0),
        capacity.max_bytes.unwrap_or(0)
    )))
}

/// Checks that a volume created for `requisite` topologies is accessible
/// from at least one of them, as CSI requires: a segment it reports must
/// agree with a requisite one on every key both name. A volume that
/// reports no topology is accessible from everywhere.
fn check_placed(volume: &pav_sdk::Volume, requisite: &[pav_sdk::Topology]) -> Result<(), Status> {
    let agree = |reported: &pav_sdk::Topology, wanted: &pav_sdk::Topology| {
        reported
            .iter()
            .all(|(key, value)| wanted.get(key).is_none_or(|w| w == value))
    };
    let placed = requisite.is_empty()
        || volume.accessible_topology.is_empty()
        || (volume.accessible_topology.iter())
            .any(|reported| requisite.iter().any(|wanted| agree(reported, wanted)));
    if placed {
        return Ok(());
    }
    Err(Status::invalid_argument(format!(
        "accessible_topology {:?} is outside every requisite topology {requisite:?}",
        volume.accessible_topology
    )))
}

/// The CSI form of a snapshot the provisioner returned, or `INTERNAL` when
/// CSI cannot carry it.
fn csi_snapshot(snapshot: pav_sdk::SnapshotInfo) -> Result<csi::Snapshot, Status> {
    limits::name("snapshot_id", &snapshot.handle).map_err(|refused| {
        Status::internal(format!(
            "the provisioner returned a snapshot CSI cannot carry: {}",
            refused.message()
        ))
    })?;
    Ok(csi::Snapshot {
        size_bytes: limits::int64("size_bytes", snapshot.size_bytes)?,
        snapshot_id: snapshot.handle,
        source_volume_id: snapshot.source,
        creation_time: Some(prost_types::Timestamp::from(snapshot.created)),
        ready_to_use: snapshot.ready,
        group_snapshot_id: String::new(),
    })
}

impl ControllerService {
    /// The content source of a `CreateVolume`, refused (`INVALID_ARGUMENT`)
    /// unless the provisioner takes snapshots (for a snapshot source) or
    /// clones volumes (for a volume source).
    fn content_source(
        &self,
        source: Option<&csi::VolumeContentSource>,
    ) -> Result<Option<ContentSource>, Status> {
        use csi::volume_content_source::Type;
        let Some(source) = source else {
            return Ok(None);
        };
        let provisioner = &self.shared.provisioner;
        match &source.r#type {
            Some(Type::Snapshot(snapshot)) if provisioner.snapshot().is_some() => {
                let id = limits::required(
                    "volume_content_source.snapshot.snapshot_id",
                    &snapshot.snapshot_id,
                )?;
                Ok(Some(ContentSource::Snapshot(VolumeId::new(id))))
            }
            Some(Type::Volume(volume)) if provisioner.clones() => {
                let id =
                    limits::required("volume_content_source.volume.volume_id", &volume.volume_id)?;
                Ok(Some(ContentSource::Volume(VolumeId::new(id))))
            }
            Some(Type::Snapshot(_)) => Err(Status::invalid_argument(
                "volume_content_source: this driver does not restore snapshots (CREATE_DELETE_SNAPSHOT is not advertised)",
            )),
            Some(Type::Volume(_)) => Err(Status::invalid_argument(
                "volume_content_source: this driver does not clone volumes (CLONE_VOLUME is not advertised)",
            )),
            None => Err(Status::invalid_argument(
                "volume_content_source: a snapshot or a volume is required",
            )),
        }
    }

    /// The size of `source`, when the provisioner can say: a snapshot's
    /// from [`pav_sdk::Snapshot::list_snapshots`], a volume's from
    /// [`pav_sdk::List`] if it has one. `NOT_FOUND` when it does not exist.
    async fn source_size(&self, source: &ContentSource) -> Result<Option<u64>, Status> {
        match source {
            ContentSource::Snapshot(id) => {
                let snapshots = self.list_snapshots_of_provisioner().await?;
                match snapshots.into_iter().find(|s| s.handle == *id) {
                    Some(snapshot) => Ok(Some(snapshot.size_bytes)),
                    None => Err(Status::not_found(format!(
                        "volume_content_source: snapshot {id:?} does not exist"
                    ))),
                }
            }
            ContentSource::Volume(id) => {
                self.check_exists(id.as_str())
                    .await
                    .map_err(|e| match e.code() {
                        tonic::Code::NotFound => Status::not_found(format!(
                            "volume_content_source: volume {id:?} does not exist"
                        )),
                        _ => e,
                    })?;
                let Some(lister) = self.shared.provisioner.list() else {
                    return Ok(None);
                };
                let volumes = lister.list().await.map_err(status)?;
                Ok(volumes
                    .into_iter()
                    .find(|v| v.volume.handle == *id)
                    .map(|v| v.volume.capacity_bytes))
            }
            _ => Ok(None),
        }
    }

    /// `NOT_FOUND` for a source that does not exist, `OUT_OF_RANGE` when
    /// the requested limit is below the source's size (a volume made from
    /// it cannot hold its data).
    async fn check_source(
        &self,
        source: &ContentSource,
        capacity: CapacityRange,
    ) -> Result<(), Status> {
        let size = self.source_size(source).await?;
        if let (Some(size), Some(max)) = (size, capacity.max_bytes)
            && max < size
        {
            return Err(Status::out_of_range(format!(
                "capacity_range.limit_bytes {max} is below the {size} bytes of the volume_content_source"
            )));
        }
        Ok(())
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

    /// `UNIMPLEMENTED` unless the provisioner takes snapshots.
    fn snapshotter(&self) -> Result<&dyn pav_sdk::Snapshot, Status> {
        self.shared.provisioner.snapshot().ok_or_else(|| {
            Status::unimplemented(
                "this provisioner does not take snapshots (CREATE_DELETE_SNAPSHOT is not advertised)",
            )
        })
    }

    /// `NOT_FOUND` unless the volume exists; a provisioner without Create
    /// (static volumes only) cannot say, so every id passes.
    async fn check_exists(&self, volume_id: &str) -> Result<(), Status> {
        let Some(creator) = self.shared.provisioner.create() else {
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

    /// Deletes a volume the provisioner created but CSI cannot carry (see
    /// [`csi_volume`]), so that refusing it leaks nothing, and returns
    /// the `INTERNAL` status that answers the `CreateVolume`: the request
    /// was fine, the provisioner's answer was not.
    async fn delete_refused(&self, name: &str, volume: pav_sdk::Volume, refused: Status) -> Status {
        let problem = format!(
            "the provisioner created a volume CSI cannot return: {}",
            refused.message()
        );
        let Some(deleter) = self.shared.provisioner.delete() else {
            tracing::error!(name, volume_id = ?volume.handle, problem, "CreateVolume refused; no Delete to remove the volume");
            return Status::internal(format!("{problem}; it was not deleted (no Delete)"));
        };
        let outcome = match deleter
            .delete(pav_sdk::build::delete(volume.handle.as_str()))
            .await
        {
            Ok(()) | Err(pav_sdk::Error::NotFound(_)) => "it was deleted".to_owned(),
            Err(e) => format!("deleting it failed too: {}", e.message()),
        };
        tracing::error!(name, volume_id = ?volume.handle, problem, outcome, "CreateVolume refused");
        Status::internal(format!("{problem}; {outcome}"))
    }
}

#[tonic::async_trait]
impl csi::controller_server::Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        let Some(creator) = self.shared.provisioner.create() else {
            return Err(Status::unimplemented(
                "this provisioner does not create volumes",
            ));
        };
        let req = request.into_inner();
        let name = limits::name("name", &req.name)?;
        limits::map("parameters", &req.parameters)?;
        let secrets = convert::secrets(&req.secrets)?;
        limits::map("mutable_parameters", &req.mutable_parameters)?;
        let (volume_mode, access_modes, mut mount) =
            convert::capabilities("volume_capabilities", &req.volume_capabilities)?;
        let capacity = convert::capacity_range(req.capacity_range.as_ref())?;
        if let Some(requirement) = &req.accessibility_requirements {
            if !self.shared.topology_aware {
                return Err(Status::invalid_argument(
                    "accessibility_requirements: this driver does not advertise \
                     VOLUME_ACCESSIBILITY_CONSTRAINTS",
                ));
            }
            let kinds = [
                ("requisite", &requirement.requisite),
                ("preferred", &requirement.preferred),
            ];
            for (kind, list) in kinds {
                limits::repeated(&format!("accessibility_requirements.{kind}"), list.len())?;
                for (i, t) in list.iter().enumerate() {
                    limits::topology(
                        &format!("accessibility_requirements.{kind}[{i}]"),
                        &t.segments,
                    )?;
                }
            }
        }
        let source = self.content_source(req.volume_content_source.as_ref())?;
        if !req.mutable_parameters.is_empty() {
            return Err(Status::invalid_argument(
                "mutable_parameters: volume attribute classes are not supported",
            ));
        }
        check_modes(&self.shared, volume_mode, &access_modes).map_err(Status::invalid_argument)?;
        let (parameters, claim, legacy_fs_type) = convert::split_parameters(&req.parameters);
        if mount.fs_type.is_none() && volume_mode == VolumeMode::Filesystem {
            mount.fs_type = legacy_fs_type;
        }
        let topology = req
            .accessibility_requirements
            .as_ref()
            .map(|t| TopologyRequirement {
                requisite: t.requisite.iter().map(convert::from_topology).collect(),
                preferred: t.preferred.iter().map(convert::from_topology).collect(),
            })
            .unwrap_or_default();

        let mut create = pav_sdk::build::create(name, volume_mode);
        create.access_modes = access_modes;
        create.capacity = capacity;
        create.parameters = parameters;
        create.mount = mount;
        create.claim = claim;
        let requisite = topology.requisite.clone();
        create.topology = topology;
        create.source = source.clone();
        create.secrets = secrets;

        let _guard = self
            .shared
            .in_flight
            .claim(Key::VolumeName(name.to_owned()))?;
        // The source volume is not deleted or changed while it is copied.
        let _source_guard = match &source {
            Some(ContentSource::Volume(id)) => {
                Some(self.shared.in_flight.claim(Key::Volume(id.to_string()))?)
            }
            _ => None,
        };
        tracing::info!(name, ?volume_mode, ?capacity, secrets = ?create.secrets, "CreateVolume");
        let mut fingerprint = create.clone();
        fingerprint.secrets = Default::default();
        {
            let cache = self
                .shared
                .create_cache
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some((earlier, volume)) = cache.get(name) {
                if *earlier != fingerprint {
                    return Err(Status::already_exists(format!(
                        "volume {name:?} exists with different properties"
                    )));
                }
                return Ok(Response::new(csi::CreateVolumeResponse {
                    volume: Some(volume.clone()),
                }));
            }
        }
        // After the cache check: labels may change between retries, and the
        // fingerprint compares only what the CSI request carries.
        #[cfg(feature = "kube")]
        if let (Some(lookup), Some(claim)) = (&self.shared.claims, create.claim.as_mut()) {
            crate::claims::complete(&lookup.0, claim).await?;
        }
        if let Some(source) = &source {
            self.check_source(source, capacity).await?;
        }
        if let Some(validator) = self.shared.provisioner.validate() {
            validator
                .validate(pav_sdk::build::validate_for(&create))
                .await
                .map_err(status)?;
        }
        let volume = creator.create(create).await.map_err(|e| {
            tracing::warn!(name, error = e.message(), "CreateVolume failed");
            status(e)
        })?;
        let checked = check_sized(&volume, capacity)
            .and_then(|()| check_placed(&volume, &requisite))
            .and_then(|()| csi_volume(&volume));
        let mut volume = match checked {
            Ok(checked) => checked,
            Err(refused) => return Err(self.delete_refused(name, volume, refused).await),
        };
        volume.content_source = req.volume_content_source;
        tracing::info!(
            name,
            volume_id = volume.volume_id.as_str(),
            "volume created"
        );
        self.shared
            .create_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, fingerprint, volume.clone());
        Ok(Response::new(csi::CreateVolumeResponse {
            volume: Some(volume),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        if self.shared.provisioner.create().is_none() {
            return Err(Status::unimplemented(
                "this provisioner does not create volumes (CREATE_DELETE_VOLUME is not advertised)",
            ));
        }
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        let secrets = convert::secrets(&req.secrets)?;
        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        tracing::info!(volume_id, "DeleteVolume");
        if let Some(deleter) = self.shared.provisioner.delete() {
            let mut delete = pav_sdk::build::delete(volume_id);
            delete.secrets = secrets;
            match deleter.delete(delete).await {
                Ok(()) | Err(pav_sdk::Error::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(volume_id, error = e.message(), "DeleteVolume failed");
                    return Err(status(e));
                }
            }
        }
        self.shared
            .create_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget_volume(volume_id);
        Ok(Response::new(csi::DeleteVolumeResponse {}))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        limits::map("volume_context", &req.volume_context)?;
        limits::map("parameters", &req.parameters)?;
        limits::map("mutable_parameters", &req.mutable_parameters)?;
        let secrets = convert::secrets(&req.secrets)?;
        let capabilities =
            convert::capability_list("volume_capabilities", &req.volume_capabilities)?;
        let unconfirmed = |message: String| {
            Response::new(csi::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message,
            })
        };
        // A volume is either a filesystem or a block device: asking for both
        // is a valid question whose answer is "not confirmed".
        let (volume_mode, access_modes, mount) =
            match convert::one_mode("volume_capabilities", &capabilities) {
                Ok(one) => one,
                Err(message) => return Ok(unconfirmed(message)),
            };
        let mut validate = pav_sdk::build::validate_existing(volume_id, volume_mode);
        validate.access_modes = access_modes;
        // For a static volume the PV attributes play the StorageClass parameters' role.
        let (mut parameters, claim, _) = convert::split_parameters(&req.parameters);
        parameters.extend(convert::sorted(&req.volume_context));
        validate.parameters = parameters;
        validate.claim = claim;
        validate.mount = mount;
        validate.secrets = secrets;

        if let Err(message) = check_modes(&self.shared, volume_mode, &validate.access_modes) {
            return Ok(unconfirmed(message));
        }
        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        // A provisioner that creates volumes knows which exist; one that
        // does not (static provisioning only) leaves it to Validate.
        self.check_exists(volume_id).await?;
        if let Some(validator) = self.shared.provisioner.validate() {
            match validator.validate(validate.clone()).await {
                Ok(()) => {}
                Err(
                    pav_sdk::Error::InvalidArgument(message) | pav_sdk::Error::OutOfRange(message),
                ) => return Ok(unconfirmed(message)),
                Err(e) => return Err(status(e)),
            }
        }
        Ok(Response::new(csi::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                volume_context: req.volume_context,
                volume_capabilities: req.volume_capabilities,
                parameters: req.parameters,
                mutable_parameters: req.mutable_parameters,
            }),
            message: String::new(),
        }))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        let Some(expander) = self.shared.provisioner.expand() else {
            return Err(Status::unimplemented(
                "this provisioner does not expand volumes (EXPAND_VOLUME is not advertised)",
            ));
        };
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        let secrets = convert::secrets(&req.secrets)?;
        let Some(range) = req.capacity_range.as_ref() else {
            return Err(Status::invalid_argument("capacity_range is required"));
        };
        let capacity = convert::capacity_range(Some(range))?;
        if capacity.min_bytes.is_none() && capacity.max_bytes.is_none() {
            return Err(Status::invalid_argument(
                "capacity_range: required_bytes or limit_bytes must be set",
            ));
        }
        let volume_mode = match &req.volume_capability {
            Some(cap) => {
                let cap = convert::capability("volume_capability", cap)?;
                check_modes(&self.shared, cap.mode, &[cap.access_mode])
                    .map_err(Status::invalid_argument)?;
                Some(cap.mode)
            }
            None => None,
        };
        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        self.check_exists(volume_id).await?;
        tracing::info!(volume_id, ?capacity, "ControllerExpandVolume");
        let mut expand = pav_sdk::build::expand(volume_id, 0);
        expand.capacity = capacity;
        expand.volume_mode = volume_mode;
        expand.secrets = secrets;
        let expanded = expander.expand(expand).await.map_err(|e| {
            tracing::warn!(
                volume_id,
                error = e.message(),
                "ControllerExpandVolume failed"
            );
            status(e)
        })?;
        if !capacity.contains(expanded.capacity_bytes) {
            return Err(Status::internal(format!(
                "the provisioner grew volume {volume_id:?} to {} bytes, outside the requested range",
                expanded.capacity_bytes
            )));
        }
        // A cached CreateVolume answer would report the old size.
        self.shared
            .create_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget_volume(volume_id);
        // kubelet would call NodeExpandVolume, which this process would not
        // serve; a controller-only process trusts the provisioner, whose
        // node plugins are another process.
        let node_expansion_required = expanded.node_expansion_required
            && (self.shared.provisioner.node_expand().is_some() || !self.shared.serves_node);
        Ok(Response::new(csi::ControllerExpandVolumeResponse {
            capacity_bytes: limits::int64("capacity_bytes", expanded.capacity_bytes)?,
            node_expansion_required,
        }))
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
        let req = request.into_inner();
        limits::map("parameters", &req.parameters)?;
        if let Some(t) = &req.accessible_topology {
            limits::topology("accessible_topology", &t.segments)?;
        }
        let mut ask = pav_sdk::build::capacity();
        if !req.volume_capabilities.is_empty() {
            let capabilities =
                convert::capability_list("volume_capabilities", &req.volume_capabilities)?;
            // No volume can have modes the provisioner does not serve, or
            // two volume modes at once: there is no room for one.
            let Ok((mode, access_modes, _)) =
                convert::one_mode("volume_capabilities", &capabilities)
            else {
                return Ok(Response::new(csi::GetCapacityResponse::default()));
            };
            if check_modes(&self.shared, mode, &access_modes).is_err() {
                return Ok(Response::new(csi::GetCapacityResponse::default()));
            }
            ask.volume_mode = Some(mode);
            ask.access_modes = access_modes;
        }
        ask.parameters = convert::split_parameters(&req.parameters).0;
        ask.topology = req.accessible_topology.as_ref().map(convert::from_topology);
        let available = reporter.capacity(ask).await.map_err(|e| {
            tracing::warn!(error = e.message(), "GetCapacity failed");
            status(e)
        })?;
        let bytes = limits::int64;
        let size = |field, b: Option<u64>| b.map(|b| bytes(field, b)).transpose();
        Ok(Response::new(csi::GetCapacityResponse {
            available_capacity: bytes("available_capacity", available.available_bytes)?,
            maximum_volume_size: size("maximum_volume_size", available.maximum_volume_size)?,
            minimum_volume_size: size("minimum_volume_size", available.minimum_volume_size)?,
        }))
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
        let req = request.into_inner();
        let volumes = lister.list().await.map_err(|e| {
            tracing::warn!(error = e.message(), "ListVolumes failed");
            status(e)
        })?;
        let mut entries = Vec::with_capacity(volumes.len());
        for listed in volumes {
            let volume = csi_volume(&listed.volume).map_err(|refused| {
                Status::internal(format!(
                    "the provisioner listed a volume CSI cannot return: {}",
                    refused.message()
                ))
            })?;
            let handle = listed.volume.handle.to_string();
            let status = listed
                .condition
                .map(|c| csi::list_volumes_response::VolumeStatus {
                    published_node_ids: Vec::new(),
                    volume_condition: Some(csi::VolumeCondition {
                        abnormal: c.abnormal,
                        message: c.message,
                    }),
                });
            let entry = csi::list_volumes_response::Entry {
                volume: Some(volume),
                status,
            };
            entries.push((handle, entry));
        }
        let (entries, next_token) =
            crate::pages::page(entries, &req.starting_token, req.max_entries)?;
        Ok(Response::new(csi::ListVolumesResponse {
            entries,
            next_token,
        }))
    }

    async fn create_snapshot(
        &self,
        request: Request<csi::CreateSnapshotRequest>,
    ) -> Result<Response<csi::CreateSnapshotResponse>, Status> {
        let snapshotter = self.snapshotter()?;
        let req = request.into_inner();
        let name = limits::name("name", &req.name)?;
        let source = limits::required("source_volume_id", &req.source_volume_id)?;
        limits::map("parameters", &req.parameters)?;
        let secrets = convert::secrets(&req.secrets)?;
        let mut snapshot = pav_sdk::build::snapshot(name, source);
        snapshot.parameters = convert::split_parameters(&req.parameters).0;
        snapshot.secrets = secrets;

        let _guard = (self.shared.in_flight).claim(Key::SnapshotName(name.to_owned()))?;
        let _source_guard = self
            .shared
            .in_flight
            .claim(Key::Volume(source.to_owned()))?;
        tracing::info!(name, source, secrets = ?snapshot.secrets, "CreateSnapshot");
        let mut fingerprint = snapshot.clone();
        fingerprint.secrets = Default::default();
        {
            let cache = (self.shared.snapshot_cache.lock()).unwrap_or_else(|e| e.into_inner());
            if let Some((earlier, answer)) = cache.get(name) {
                if earlier.source != fingerprint.source {
                    return Err(Status::already_exists(format!(
                        "snapshot {name:?} exists of volume {:?}, not of {source:?}",
                        earlier.source.as_str()
                    )));
                }
                if *earlier == fingerprint {
                    return Ok(Response::new(csi::CreateSnapshotResponse {
                        snapshot: Some(answer.clone()),
                    }));
                }
                return Err(Status::already_exists(format!(
                    "snapshot {name:?} exists with different parameters"
                )));
            }
        }
        self.check_exists(source).await?;
        let taken = snapshotter.create_snapshot(snapshot).await.map_err(|e| {
            tracing::warn!(name, error = e.message(), "CreateSnapshot failed");
            status(e)
        })?;
        if taken.source != source {
            return Err(Status::internal(format!(
                "the provisioner answered a snapshot of volume {:?}, not of {source:?}",
                taken.source
            )));
        }
        let ready = taken.ready;
        let answer = csi_snapshot(taken)?;
        tracing::info!(
            name,
            snapshot_id = answer.snapshot_id.as_str(),
            "snapshot taken"
        );
        // A snapshot still being cut is asked about again: only a final
        // answer may be replayed.
        if ready {
            (self.shared.snapshot_cache.lock())
                .unwrap_or_else(|e| e.into_inner())
                .insert(name, fingerprint, answer.clone());
        }
        Ok(Response::new(csi::CreateSnapshotResponse {
            snapshot: Some(answer),
        }))
    }

    async fn delete_snapshot(
        &self,
        request: Request<csi::DeleteSnapshotRequest>,
    ) -> Result<Response<csi::DeleteSnapshotResponse>, Status> {
        let snapshotter = self.snapshotter()?;
        let req = request.into_inner();
        let snapshot_id = limits::required("snapshot_id", &req.snapshot_id)?;
        let secrets = convert::secrets(&req.secrets)?;
        let _guard = (self.shared.in_flight).claim(Key::Snapshot(snapshot_id.to_owned()))?;
        tracing::info!(snapshot_id, "DeleteSnapshot");
        let mut delete = pav_sdk::build::delete_snapshot(snapshot_id);
        delete.secrets = secrets;
        match snapshotter.delete_snapshot(delete).await {
            Ok(()) | Err(pav_sdk::Error::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(snapshot_id, error = e.message(), "DeleteSnapshot failed");
                return Err(status(e));
            }
        }
        (self.shared.snapshot_cache.lock())
            .unwrap_or_else(|e| e.into_inner())
            .forget_snapshot(snapshot_id);
        Ok(Response::new(csi::DeleteSnapshotResponse {}))
    }

    async fn list_snapshots(
        &self,
        request: Request<csi::ListSnapshotsRequest>,
    ) -> Result<Response<csi::ListSnapshotsResponse>, Status> {
        self.snapshotter()?;
        let req = request.into_inner();
        limits::limited("snapshot_id", &req.snapshot_id)?;
        limits::limited("source_volume_id", &req.source_volume_id)?;
        convert::secrets(&req.secrets)?;
        let mut entries = Vec::new();
        for snapshot in self.list_snapshots_of_provisioner().await? {
            let wanted = (req.snapshot_id.is_empty() || snapshot.handle == req.snapshot_id)
                && (req.source_volume_id.is_empty() || snapshot.source == req.source_volume_id);
            if wanted {
                let handle = snapshot.handle.clone();
                let entry = csi::list_snapshots_response::Entry {
                    snapshot: Some(csi_snapshot(snapshot)?),
                };
                entries.push((handle, entry));
            }
        }
        let (entries, next_token) =
            crate::pages::page(entries, &req.starting_token, req.max_entries)?;
        Ok(Response::new(csi::ListSnapshotsResponse {
            entries,
            next_token,
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _request: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        let mut rpcs = Vec::new();
        if self.shared.provisioner.create().is_some() {
            rpcs.push(RpcType::CreateDeleteVolume);
        }
        if self.shared.provisioner.expand().is_some() {
            rpcs.push(RpcType::ExpandVolume);
        }
        if self.shared.provisioner.capacity().is_some() {
            rpcs.push(RpcType::GetCapacity);
        }
        if self.shared.provisioner.snapshot().is_some() {
            rpcs.push(RpcType::CreateDeleteSnapshot);
            rpcs.push(RpcType::ListSnapshots);
        }
        if self.shared.provisioner.clones() {
            rpcs.push(RpcType::CloneVolume);
        }
        if self.shared.provisioner.tells_single_node_writers_apart() {
            rpcs.push(RpcType::SingleNodeMultiWriter);
        }
        if let Some(lister) = self.shared.provisioner.list() {
            rpcs.push(RpcType::ListVolumes);
            if lister.reports_condition() {
                rpcs.push(RpcType::VolumeCondition);
            }
        }
        let capabilities = rpcs
            .into_iter()
            .map(|rpc| csi::ControllerServiceCapability {
                r#type: Some(csi::controller_service_capability::Type::Rpc(
                    csi::controller_service_capability::Rpc { r#type: rpc as i32 },
                )),
            })
            .collect();
        Ok(Response::new(csi::ControllerGetCapabilitiesResponse {
            capabilities,
        }))
    }
}
