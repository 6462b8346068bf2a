//! `CreateVolume`: a volume by name, answered again from the cache of
//! recent answers when asked again.

use pav_sdk::VolumeMode;
use pav_sdk::{CapacityRange, ContentSource, CreateRequest, TopologyRequirement, VolumeId};
use tonic::{Code, Status};

use super::{ControllerService, ExistsError, ModeError, Unserved, check_modes};
use crate::convert::{self, CapabilityError, RangeError, VolumeAnswerError};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::shared::Shared;

/// Why a `CreateVolume` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateVolumeError {
    /// The provisioner does not create volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The capabilities cannot be converted (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// The capacity range is refused (its code).
    #[error(transparent)]
    Range(#[from] RangeError),
    /// Topology requirements to a driver that is not topology-aware
    /// (`INVALID_ARGUMENT`).
    #[error(
        "accessibility_requirements: this driver does not advertise \
         VOLUME_ACCESSIBILITY_CONSTRAINTS"
    )]
    TopologyUnadvertised,
    /// A snapshot source to a provisioner without snapshots
    /// (`INVALID_ARGUMENT`).
    #[error(
        "volume_content_source: this driver does not restore snapshots (CREATE_DELETE_SNAPSHOT is not advertised)"
    )]
    SnapshotSourceUnserved,
    /// A volume source to a provisioner that does not clone
    /// (`INVALID_ARGUMENT`).
    #[error(
        "volume_content_source: this driver does not clone volumes (CLONE_VOLUME is not advertised)"
    )]
    VolumeSourceUnserved,
    /// A content source naming neither (`INVALID_ARGUMENT`).
    #[error("volume_content_source: a snapshot or a volume is required")]
    EmptySource,
    /// Mutable parameters to a provisioner that does not modify volumes
    /// (`INVALID_ARGUMENT`).
    #[error(
        "mutable_parameters: this driver does not modify volumes \
         (MODIFY_VOLUME is not advertised), so it takes no volume attributes class"
    )]
    MutableParametersUnserved,
    /// Modes the provisioner does not serve (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Mode(#[from] ModeError),
    /// Another call holds the name or the source volume (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// A recent volume of this name was created from another request
    /// (`ALREADY_EXISTS`).
    #[error("volume {name:?} exists with different properties")]
    OtherProperties { name: String },
    /// The claim could not be read from the API server (its code).
    #[cfg(feature = "kube")]
    #[error(transparent)]
    Claim(#[from] crate::claims::ClaimError),
    /// Listing the snapshots, to find the source, failed (the provisioner's
    /// code).
    #[error("{}", .0.message())]
    ListSnapshots(pav_sdk::Error),
    /// The source snapshot does not exist (`NOT_FOUND`).
    #[error("volume_content_source: snapshot {id:?} does not exist")]
    SnapshotSourceMissing { id: VolumeId },
    /// The source volume does not exist (`NOT_FOUND`).
    #[error("volume_content_source: volume {id:?} does not exist")]
    VolumeSourceMissing { id: VolumeId },
    /// Asking whether the source volume exists failed (its code).
    #[error(transparent)]
    SourceLookup(ExistsError),
    /// Listing the volumes, for the source volume's size, failed (the
    /// provisioner's code).
    #[error("{}", .0.message())]
    ListVolumes(pav_sdk::Error),
    /// The requested limit is below the source's size (`OUT_OF_RANGE`).
    #[error(
        "capacity_range.limit_bytes {limit} is below the {size} bytes of the volume_content_source"
    )]
    SourceTooLarge { limit: u64, size: u64 },
    /// The provisioner's Validate refused (its code).
    #[error("{}", .0.message())]
    Validate(pav_sdk::Error),
    /// The provisioner's Create failed (its code).
    #[error("{}", .0.message())]
    Create(pav_sdk::Error),
    /// The provisioner created a volume CSI cannot return; what became of
    /// it (`INTERNAL`).
    #[error("the provisioner created a volume CSI cannot return: {refused}; {outcome}")]
    Unreturnable {
        refused: Unreturnable,
        outcome: Cleanup,
    },
}

impl From<CreateVolumeError> for Status {
    fn from(err: CreateVolumeError) -> Self {
        let code = match &err {
            CreateVolumeError::Unserved(_) => Code::Unimplemented,
            CreateVolumeError::Limit(e) => e.code(),
            CreateVolumeError::Capability(e) => e.code(),
            CreateVolumeError::Range(e) => e.code(),
            CreateVolumeError::TopologyUnadvertised
            | CreateVolumeError::SnapshotSourceUnserved
            | CreateVolumeError::VolumeSourceUnserved
            | CreateVolumeError::EmptySource
            | CreateVolumeError::MutableParametersUnserved
            | CreateVolumeError::Mode(_) => Code::InvalidArgument,
            CreateVolumeError::Busy(e) => e.code(),
            CreateVolumeError::OtherProperties { .. } => Code::AlreadyExists,
            #[cfg(feature = "kube")]
            CreateVolumeError::Claim(e) => e.code(),
            CreateVolumeError::ListSnapshots(e)
            | CreateVolumeError::ListVolumes(e)
            | CreateVolumeError::Validate(e)
            | CreateVolumeError::Create(e) => provisioner_code(e),
            CreateVolumeError::SnapshotSourceMissing { .. }
            | CreateVolumeError::VolumeSourceMissing { .. } => Code::NotFound,
            CreateVolumeError::SourceLookup(e) => e.code(),
            CreateVolumeError::SourceTooLarge { .. } => Code::OutOfRange,
            CreateVolumeError::Unreturnable { .. } => Code::Internal,
        };
        Status::new(code, error_chain(&err))
    }
}

/// Why a volume the provisioner created cannot be returned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unreturnable {
    /// Its size is outside the requested range.
    #[error(
        "capacity_bytes {bytes} is outside the requested range (required_bytes {min}, limit_bytes {max})"
    )]
    Size { bytes: u64, min: u64, max: u64 },
    /// It is accessible from none of the requisite topologies.
    #[error("accessible_topology {reported:?} is outside every requisite topology {requisite:?}")]
    Placement {
        reported: Vec<pav_sdk::Topology>,
        requisite: Vec<pav_sdk::Topology>,
    },
    /// CSI cannot carry it.
    #[error(transparent)]
    Form(#[from] VolumeAnswerError),
}

/// What became of a created volume that cannot be returned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Cleanup {
    /// The provisioner has no Delete.
    #[error("it was not deleted (no Delete)")]
    NoDelete,
    /// Deleted (or gone already).
    #[error("it was deleted")]
    Deleted,
    /// Delete failed too (the provisioner's message).
    #[error("deleting it failed too: {}", .0.message())]
    DeleteFailed(pav_sdk::Error),
}

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
pub(crate) fn check(
    req: &csi::CreateVolumeRequest,
    shared: &Shared,
) -> Result<Checked, CreateVolumeError> {
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
        return Err(CreateVolumeError::MutableParametersUnserved);
    }
    // The `csi.storage.k8s.io/` keys are the sidecars', not the class's.
    let (mutable_parameters, _, _) = convert::split_parameters(&req.mutable_parameters);
    check_modes(shared, volume_mode, &access_modes)?;
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
) -> Result<(), CreateVolumeError> {
    if !topology_aware {
        return Err(CreateVolumeError::TopologyUnadvertised);
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
) -> Result<Option<ContentSource>, CreateVolumeError> {
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
        Some(Type::Snapshot(_)) => Err(CreateVolumeError::SnapshotSourceUnserved),
        Some(Type::Volume(_)) => Err(CreateVolumeError::VolumeSourceUnserved),
        None => Err(CreateVolumeError::EmptySource),
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
) -> Result<csi::CreateVolumeResponse, CreateVolumeError> {
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
            .map_err(CreateVolumeError::Validate)?;
    }
    let volume = (creator.create(create).await).map_err(CreateVolumeError::Create)?;
    let checked = check_sized(&volume, capacity)
        .and_then(|()| check_placed(&volume, &requisite))
        .and_then(|()| Ok(convert::csi_volume(&volume)?));
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
) -> Result<Option<csi::CreateVolumeResponse>, CreateVolumeError> {
    let cache = (shared.create_cache.lock()).unwrap_or_else(|e| e.into_inner());
    let Some((earlier, volume)) = cache.get(name) else {
        return Ok(None);
    };
    if earlier != fingerprint {
        return Err(CreateVolumeError::OtherProperties {
            name: name.to_owned(),
        });
    }
    Ok(Some(csi::CreateVolumeResponse {
        volume: Some(volume.clone()),
    }))
}

/// Checks that a created volume's size is within the requested range. 0
/// is CSI's "unknown" (an NFS share, say) and passes.
fn check_sized(volume: &pav_sdk::Volume, capacity: CapacityRange) -> Result<(), Unreturnable> {
    let bytes = volume.capacity_bytes;
    if bytes == 0 || capacity.contains(bytes) {
        return Ok(());
    }
    Err(Unreturnable::Size {
        bytes,
        min: capacity.min_bytes.unwrap_or(0),
        max: capacity.max_bytes.unwrap_or(0),
    })
}

/// Checks that a volume created for `requisite` topologies is accessible
/// from at least one of them, as CSI requires: a segment it reports must
/// agree with a requisite one on every key both name. A volume that
/// reports no topology is accessible from everywhere.
fn check_placed(
    volume: &pav_sdk::Volume,
    requisite: &[pav_sdk::Topology],
) -> Result<(), Unreturnable> {
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
    Err(Unreturnable::Placement {
        reported: volume.accessible_topology.clone(),
        requisite: requisite.to_vec(),
    })
}

/// The size of `source`, when the provisioner can say: a snapshot's
/// from [`pav_sdk::Snapshot::list_snapshots`], a volume's from
/// [`pav_sdk::List`] if it has one. `NOT_FOUND` when it does not exist.
async fn source_size(
    service: &ControllerService,
    source: &ContentSource,
) -> Result<Option<u64>, CreateVolumeError> {
    match source {
        ContentSource::Snapshot(id) => {
            let snapshots = (service.list_snapshots_of_provisioner().await)
                .map_err(CreateVolumeError::ListSnapshots)?;
            match snapshots.into_iter().find(|s| s.handle == *id) {
                Some(snapshot) => Ok(Some(snapshot.size_bytes)),
                None => Err(CreateVolumeError::SnapshotSourceMissing { id: id.clone() }),
            }
        }
        ContentSource::Volume(id) => {
            service
                .check_exists(id.as_str())
                .await
                .map_err(|e| match e {
                    ExistsError::Missing { .. } => {
                        CreateVolumeError::VolumeSourceMissing { id: id.clone() }
                    }
                    e => CreateVolumeError::SourceLookup(e),
                })?;
            let Some(lister) = service.shared.provisioner.list() else {
                return Ok(None);
            };
            let volumes = lister
                .list()
                .await
                .map_err(CreateVolumeError::ListVolumes)?;
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
) -> Result<(), CreateVolumeError> {
    let size = source_size(service, source).await?;
    if let (Some(size), Some(max)) = (size, capacity.max_bytes)
        && max < size
    {
        return Err(CreateVolumeError::SourceTooLarge { limit: max, size });
    }
    Ok(())
}

/// Deletes a volume the provisioner created but CSI cannot carry (see
/// [`convert::csi_volume`]), so that refusing it leaks nothing, and returns
/// the error (`INTERNAL`) that answers the `CreateVolume`: the request
/// was fine, the provisioner's answer was not.
async fn delete_refused(
    service: &ControllerService,
    name: &str,
    volume: pav_sdk::Volume,
    refused: Unreturnable,
) -> CreateVolumeError {
    let problem = format!("the provisioner created a volume CSI cannot return: {refused}");
    let Some(deleter) = service.shared.provisioner.delete() else {
        tracing::error!(name, volume_id = ?volume.handle, problem, "CreateVolume refused; no Delete to remove the volume");
        return CreateVolumeError::Unreturnable {
            refused,
            outcome: Cleanup::NoDelete,
        };
    };
    let outcome = match deleter
        .delete(pav_sdk::build::delete(volume.handle.as_str()))
        .await
    {
        Ok(()) | Err(pav_sdk::Error::NotFound(_)) => Cleanup::Deleted,
        Err(e) => Cleanup::DeleteFailed(e),
    };
    tracing::error!(name, volume_id = ?volume.handle, problem, outcome = outcome.to_string(), "CreateVolume refused");
    CreateVolumeError::Unreturnable { refused, outcome }
}
