//! Constructors for the request types, for pav-csi and for provisioner tests.
//!
//! Requests are `#[non_exhaustive]` so that fields can be added without a
//! breaking change; these builders keep tests compiling when that happens.
//!
//! The constructors of the [`Attach`](crate::Attach) requests live
//! with them and are re-exported here; those of the group snapshot
//! requests are [`group_snapshot::build`](crate::group_snapshot::build).

use std::path::PathBuf;

use crate::VolumeId;
pub use crate::attach::build::{attach, detach};
use crate::snapshot::{DeleteSnapshotRequest, SnapshotRequest};
use crate::types::{
    AccessMode, CapacityRange, CapacityRequest, CreateRequest, DeleteRequest, ExpandRequest,
    ModifyRequest, MountOptions, NodeCleanUpRequest, NodeExpandRequest, Parameters, Secrets,
    ServiceAccountTokens, StageRequest, StatsRequest, TopologyRequirement, UnstageRequest,
    ValidateRequest, VolumeMode,
};

/// A [`CreateRequest`] for `name` with `mode`, `SingleNodeWriter` and nothing else set.
pub fn create(name: impl Into<String>, mode: VolumeMode) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        volume_mode: mode,
        access_modes: vec![AccessMode::SingleNodeWriter],
        capacity: CapacityRange::default(),
        parameters: Parameters::new(),
        mutable_parameters: Parameters::new(),
        mount: MountOptions::default(),
        claim: None,
        topology: TopologyRequirement::default(),
        source: None,
        secrets: Secrets::default(),
    }
}

/// The [`ValidateRequest`] that precedes creating `req`.
pub fn validate_for(req: &CreateRequest) -> ValidateRequest {
    ValidateRequest {
        handle: None,
        volume_mode: req.volume_mode,
        access_modes: req.access_modes.clone(),
        capacity: req.capacity,
        parameters: req.parameters.clone(),
        mutable_parameters: req.mutable_parameters.clone(),
        mount: req.mount.clone(),
        claim: req.claim.clone(),
        secrets: req.secrets.clone(),
    }
}

/// A [`ValidateRequest`] for the existing volume `handle`.
pub fn validate_existing(handle: impl Into<VolumeId>, mode: VolumeMode) -> ValidateRequest {
    ValidateRequest {
        handle: Some(handle.into()),
        volume_mode: mode,
        access_modes: vec![AccessMode::SingleNodeWriter],
        capacity: CapacityRange::default(),
        parameters: Parameters::new(),
        mutable_parameters: Parameters::new(),
        mount: MountOptions::default(),
        claim: None,
        secrets: Secrets::default(),
    }
}

/// A [`DeleteRequest`] for `handle`.
pub fn delete(handle: impl Into<VolumeId>) -> DeleteRequest {
    DeleteRequest {
        handle: handle.into(),
        secrets: Secrets::default(),
    }
}

/// A [`ModifyRequest`] setting `mutable_parameters` on volume `handle`.
pub fn modify(handle: impl Into<VolumeId>, mutable_parameters: Parameters) -> ModifyRequest {
    ModifyRequest {
        handle: handle.into(),
        mutable_parameters,
        claim: None,
        secrets: Secrets::default(),
    }
}

/// A read-write `SingleNodeWriter` [`StageRequest`].
pub fn stage(
    handle: impl Into<VolumeId>,
    node_id: impl Into<String>,
    target_path: impl Into<PathBuf>,
    mode: VolumeMode,
) -> StageRequest {
    StageRequest {
        handle: handle.into(),
        node_id: node_id.into(),
        target_path: target_path.into(),
        volume_mode: mode,
        access_mode: AccessMode::SingleNodeWriter,
        read_only: false,
        mount: MountOptions::default(),
        context: Parameters::new(),
        secrets: Secrets::default(),
        service_account_tokens: ServiceAccountTokens::default(),
        pod: None,
        publish_context: Parameters::new(),
        record: None,
        node_dir: None,
    }
}

/// A [`StatsRequest`] for the volume published at `volume_path`, with
/// nothing measured.
pub fn stats(
    handle: impl Into<VolumeId>,
    volume_path: impl Into<PathBuf>,
    mode: VolumeMode,
) -> StatsRequest {
    StatsRequest {
        handle: handle.into(),
        volume_path: volume_path.into(),
        staging_path: None,
        volume_mode: mode,
        measured: None,
    }
}

/// An [`ExpandRequest`] for `handle` to at least `min_bytes`.
pub fn expand(handle: impl Into<VolumeId>, min_bytes: u64) -> ExpandRequest {
    ExpandRequest {
        handle: handle.into(),
        capacity: CapacityRange {
            min_bytes: Some(min_bytes),
            max_bytes: None,
        },
        volume_mode: None,
        secrets: Secrets::default(),
    }
}

/// A [`NodeExpandRequest`] for the volume published at `volume_path`.
pub fn node_expand(
    handle: impl Into<VolumeId>,
    volume_path: impl Into<PathBuf>,
    mode: VolumeMode,
) -> NodeExpandRequest {
    NodeExpandRequest {
        handle: handle.into(),
        volume_path: volume_path.into(),
        staging_path: None,
        volume_mode: mode,
        capacity: CapacityRange::default(),
        record: None,
        node_dir: None,
    }
}

/// A [`CapacityRequest`] about all the storage, for any volume.
pub fn capacity() -> CapacityRequest {
    CapacityRequest {
        volume_mode: None,
        access_modes: Vec::new(),
        parameters: Parameters::new(),
        topology: None,
    }
}

/// A [`SnapshotRequest`] named `name` of volume `source`.
pub fn snapshot(name: impl Into<String>, source: impl Into<VolumeId>) -> SnapshotRequest {
    SnapshotRequest {
        name: name.into(),
        source: source.into(),
        parameters: Parameters::new(),
        secrets: Secrets::default(),
        source_node_dir: None,
    }
}

/// A [`DeleteSnapshotRequest`] for `handle`.
pub fn delete_snapshot(handle: impl Into<VolumeId>) -> DeleteSnapshotRequest {
    DeleteSnapshotRequest {
        handle: handle.into(),
        secrets: Secrets::default(),
    }
}

/// A [`NodeCleanUpRequest`] for `handle`, whose node directory is `node_dir`.
pub fn node_clean_up(
    handle: impl Into<VolumeId>,
    node_dir: impl Into<PathBuf>,
) -> NodeCleanUpRequest {
    NodeCleanUpRequest {
        handle: handle.into(),
        node_dir: node_dir.into(),
    }
}

/// An [`UnstageRequest`].
pub fn unstage(
    handle: impl Into<VolumeId>,
    node_id: impl Into<String>,
    target_path: impl Into<PathBuf>,
) -> UnstageRequest {
    UnstageRequest {
        handle: handle.into(),
        node_id: node_id.into(),
        target_path: target_path.into(),
        record: None,
        node_dir: None,
    }
}
