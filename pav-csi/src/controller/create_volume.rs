//! `CreateVolume`: a volume by name, answered again from the cache of
//! recent answers when asked again.

use pav_sdk::VolumeMode;
use pav_sdk::{CapacityRange, ContentSource, CreateRequest, TopologyRequirement, VolumeId};
use tonic::Status;

use super::{ControllerService, check_modes};
use crate::convert;
use crate::csi;
use crate::error::status;
use crate::guard::Key;
use crate::limits;
use crate::shared::Shared;

/// A `CreateVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) struct Checked {
    /// What the provisioner is asked for (its claim not yet completed from
    /// the API server).
    pub(crate) create: CreateRequest,
    /// The request's content source, echoed in the answer.
    content_source: Option<csi::VolumeContentSource>,
}

/// The request's name, limits, capabilities (one volume mode, served by
/// the provisioner), capacity range, topology requirements (only when the
/// driver is topology-aware), content source (only a kind the
/// provisioner takes) and mutable parameters (only when it modifies
/// volumes), converted for the provisioner.
pub(crate) fn check(req: &csi::CreateVolumeRequest, shared: &Shared) -> Result<Checked, Status> {
    let name = limits::name("name", &req.name)?;
    limits::map("parameters", &req.parameters)?;
    let secrets = convert::secrets(&req.secrets)?;
    limits::map("mutable_parameters", &req.mutable_parameters)?;
    let (volume_mode, access_modes, mut mount) =
        convert::capabilities("volume_capabilities", &req.volume_capabilities)?;
    let capacity = convert::capacity_range(req.capacity_range.as_ref())?;
    if let Some(requirement) = &req.accessibility_requirements {
        check_requirement(requirement, shared.topology_aware)?;
    }
    let source = content_source(req.volume_content_source.as_ref(), shared)?;
    // CSI: "SHALL NOT be specified unless the SP has the MODIFY_VOLUME
    // plugin capability".
    if !req.mutable_parameters.is_empty() && shared.provisioner.modify().is_none() {
        return Err(Status::invalid_argument(
            "mutable_parameters: this driver does not modify volumes \
             (MODIFY_VOLUME is not advertised), so it takes no volume attributes class",
        ));
    }
    // The `csi.storage.k8s.io/` keys are the sidecars', not the class's.
    let (mutable_parameters, _, _) = convert::split_parameters(&req.mutable_parameters);
    check_modes(shared, volume_mode, &access_modes).map_err(Status::invalid_argument)?;
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
    create.mutable_parameters = mutable_parameters;
    create.mount = mount;
    create.claim = claim;
    create.topology = topology;
    create.source = source;
    create.secrets = secrets;
    Ok(Checked {
        create,
        content_source: req.volume_content_source.clone(),
    })
}

/// Topology requirements are taken only from a driver that advertises
/// `VOLUME_ACCESSIBILITY_CONSTRAINTS`, and must be valid segments.
fn check_requirement(
    requirement: &csi::TopologyRequirement,
    topology_aware: bool,
) -> Result<(), Status> {
    if !topology_aware {
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
    Ok(())
}

/// The content source of a `CreateVolume`, refused (`INVALID_ARGUMENT`)
/// unless the provisioner takes snapshots (for a snapshot source) or
/// clones volumes (for a volume source).
fn content_source(
    source: Option<&csi::VolumeContentSource>,
    shared: &Shared,
) -> Result<Option<ContentSource>, Status> {
    use csi::volume_content_source::Type;
    let Some(source) = source else {
        return Ok(None);
    };
    let provisioner = &shared.provisioner;
    match &source.r#type {
        Some(Type::Snapshot(snapshot)) if provisioner.snapshot().is_some() => {
            let id = limits::required(
                "volume_content_source.snapshot.snapshot_id",
                &snapshot.snapshot_id,
            )?;
            Ok(Some(ContentSource::Snapshot(VolumeId::new(id))))
        }
        Some(Type::Volume(volume)) if provisioner.clones() => {
            let id = limits::required("volume_content_source.volume.volume_id", &volume.volume_id)?;
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

/// Holds the name (and a source volume while it is copied), answers a
/// repeat from the cache, completes the claim, checks the source, asks
/// the provisioner's Validate then Create, and checks its answer: a volume
/// CSI cannot carry, or outside the requested size or topology, is deleted
/// again and answered `INTERNAL`.
pub(crate) async fn run(
    service: &ControllerService,
    creator: &dyn pav_sdk::Create,
    checked: Checked,
) -> Result<csi::CreateVolumeResponse, Status> {
    let Checked {
        create,
        content_source,
    } = checked;
    let shared = &service.shared;
    let name = create.name.clone();
    let name = name.as_str();
    let capacity = create.capacity;
    let requisite = create.topology.requisite.clone();
    let source = create.source.clone();

    let _guard = shared.in_flight.claim(Key::VolumeName(name.to_owned()))?;
    // The source volume is not deleted or changed while it is copied.
    let _source_guard = match &source {
        Some(ContentSource::Volume(id)) => {
            Some(shared.in_flight.claim(Key::Volume(id.to_string()))?)
        }
        _ => None,
    };
    tracing::info!(name, volume_mode = ?create.volume_mode, ?capacity, secrets = ?create.secrets, "CreateVolume");
    let mut fingerprint = create.clone();
    fingerprint.secrets = Default::default();
    if let Some(answer) = cached(shared, name, &fingerprint)? {
        return Ok(answer);
    }
    // After the cache check: labels may change between retries, and the
    // fingerprint compares only what the CSI request carries.
    #[cfg(feature = "kube")]
    let mut create = create;
    #[cfg(feature = "kube")]
    if let (Some(lookup), Some(claim)) = (&shared.claims, create.claim.as_mut()) {
        crate::claims::complete(&lookup.0, claim).await?;
    }
    if let Some(source) = &source {
        check_source(service, source, capacity).await?;
    }
    if let Some(validator) = shared.provisioner.validate() {
        validator
            .validate(pav_sdk::build::validate_for(&create))
            .await
            .map_err(status)?;
    }
    let volume = creator.create(create).await.map_err(status)?;
    let checked = check_sized(&volume, capacity)
        .and_then(|()| check_placed(&volume, &requisite))
        .and_then(|()| convert::csi_volume(&volume));
    let mut volume = match checked {
        Ok(checked) => checked,
        Err(refused) => return Err(delete_refused(service, name, volume, refused).await),
    };
    volume.content_source = content_source;
    tracing::info!(
        name,
        volume_id = volume.volume_id.as_str(),
        "volume created"
    );
    (shared.create_cache.lock())
        .unwrap_or_else(|e| e.into_inner())
        .insert(name, fingerprint, volume.clone());
    Ok(csi::CreateVolumeResponse {
        volume: Some(volume),
    })
}

/// The cached answer to an earlier request of this name: the same answer
/// for the same request, `ALREADY_EXISTS` for another.
fn cached(
    shared: &Shared,
    name: &str,
    fingerprint: &CreateRequest,
) -> Result<Option<csi::CreateVolumeResponse>, Status> {
    let cache = (shared.create_cache.lock()).unwrap_or_else(|e| e.into_inner());
    let Some((earlier, volume)) = cache.get(name) else {
        return Ok(None);
    };
    if earlier != fingerprint {
        return Err(Status::already_exists(format!(
            "volume {name:?} exists with different properties"
        )));
    }
    Ok(Some(csi::CreateVolumeResponse {
        volume: Some(volume.clone()),
    }))
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

/// The size of `source`, when the provisioner can say: a snapshot's
/// from [`pav_sdk::Snapshot::list_snapshots`], a volume's from
/// [`pav_sdk::List`] if it has one. `NOT_FOUND` when it does not exist.
async fn source_size(
    service: &ControllerService,
    source: &ContentSource,
) -> Result<Option<u64>, Status> {
    match source {
        ContentSource::Snapshot(id) => {
            let snapshots = service.list_snapshots_of_provisioner().await?;
            match snapshots.into_iter().find(|s| s.handle == *id) {
                Some(snapshot) => Ok(Some(snapshot.size_bytes)),
                None => Err(Status::not_found(format!(
                    "volume_content_source: snapshot {id:?} does not exist"
                ))),
            }
        }
        ContentSource::Volume(id) => {
            service
                .check_exists(id.as_str())
                .await
                .map_err(|e| match e.code() {
                    tonic::Code::NotFound => Status::not_found(format!(
                        "volume_content_source: volume {id:?} does not exist"
                    )),
                    _ => e,
                })?;
            let Some(lister) = service.shared.provisioner.list() else {
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
    service: &ControllerService,
    source: &ContentSource,
    capacity: CapacityRange,
) -> Result<(), Status> {
    let size = source_size(service, source).await?;
    if let (Some(size), Some(max)) = (size, capacity.max_bytes)
        && max < size
    {
        return Err(Status::out_of_range(format!(
            "capacity_range.limit_bytes {max} is below the {size} bytes of the volume_content_source"
        )));
    }
    Ok(())
}

/// Deletes a volume the provisioner created but CSI cannot carry (see
/// [`convert::csi_volume`]), so that refusing it leaks nothing, and returns
/// the `INTERNAL` status that answers the `CreateVolume`: the request
/// was fine, the provisioner's answer was not.
async fn delete_refused(
    service: &ControllerService,
    name: &str,
    volume: pav_sdk::Volume,
    refused: Status,
) -> Status {
    let problem = format!(
        "the provisioner created a volume CSI cannot return: {}",
        refused.message()
    );
    let Some(deleter) = service.shared.provisioner.delete() else {
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
