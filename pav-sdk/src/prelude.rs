//! What a provisioner's storage logic names, in one import: the touch
//! points, their requests and answers, [`Error`] and [`Result`],
//! [`VolumeId`], the record a request carries and `async_trait`. Serving
//! it ([`provisioner!`](crate::provisioner!), [`Provisioner`](crate::Provisioner),
//! [`records::Records`](crate::records::Records)) is `main`'s, and named
//! there.
//!
//! ```
//! use pav_sdk::prelude::*;
//!
//! struct Scratch;
//!
//! #[async_trait]
//! impl Stage for Scratch {
//!     async fn stage(&self, req: StageRequest) -> Result<Staged> {
//!         let volume = req.recorded()?; // NOT_FOUND: none of ours
//!         match &volume.source {
//!             Some(RecordedSource::Snapshot(_)) => Err(Error::InvalidArgument("no restores".into())),
//!             _ => Ok(Staged::at(req.target_path)),
//!         }
//!     }
//! }
//! ```

pub use crate::async_trait;
pub use crate::attach::{Attach, AttachRequest, Attached, DetachRequest};
pub use crate::error::{Error, Result};
pub use crate::group_snapshot::{
    DeleteGroupSnapshotRequest, GetGroupSnapshotRequest, GroupSnapshot, GroupSnapshotInfo,
    GroupSnapshotRequest,
};
pub use crate::health::{Health, HealthRequest};
pub use crate::snapshot::{DeleteSnapshotRequest, Snapshot, SnapshotInfo, SnapshotRequest};
pub use crate::touch_points::{
    Capacity, Create, Delete, Expand, List, Modify, NodeExpand, Stage, Stats, Unstage, Validate,
};
pub use crate::types::{
    AccessMode, AvailableCapacity, CapacityRange, CapacityRequest, Claim, ContentSource,
    CreateRequest, DeleteRequest, ExpandRequest, Expanded, HealthProblem, ListedVolume,
    ModifyRequest, MountOptions, NodeCleanUpRequest, NodeExpandRequest, Parameters, PodInfo,
    RecordedSource, Secrets, ServiceAccountToken, ServiceAccountTokens, StageRequest, Staged,
    StatsRequest, Topology, TopologyRequirement, UnstageRequest, Usage, ValidateRequest, Volume,
    VolumeCondition, VolumeMode, VolumeRecord, VolumeStats,
};
pub use crate::volume_id::VolumeId;
