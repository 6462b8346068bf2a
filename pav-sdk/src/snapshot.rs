//! Snapshots (Kubernetes VolumeSnapshot): the [`Snapshot`] touch point and
//! its requests and answers. Volumes are restored from them by
//! [`Create`](crate::Create); [group snapshots](crate::group_snapshot) are
//! made of them.

use async_trait::async_trait;

use crate::types::{Parameters, Secrets};
use crate::{Result, VolumeId};

/// Takes, deletes and lists snapshots; volumes are restored from them by
/// [`Create`](crate::Create) ([`CreateRequest::source`](crate::CreateRequest::source)).
#[async_trait]
pub trait Snapshot: Send + Sync {
    /// Takes a snapshot of `req.source` named `req.name`, or returns it if
    /// it already exists; a snapshot of that name of another volume is
    /// [`AlreadyExists`](crate::Error::AlreadyExists).
    ///
    /// **CSI call:** `CreateSnapshot`, from the csi-snapshotter sidecar for
    /// each VolumeSnapshot of a VolumeSnapshotClass whose `driver` is this
    /// one. pav-csi has checked that the source volume exists (with
    /// [`Create::exists`](crate::Create::exists)), runs no other call on it meanwhile, and
    /// answers repeats from a cache of recent answers.
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when the volume does
    /// not exist, [`ResourceExhausted`](crate::Error::ResourceExhausted)
    /// when there is no room. csi-snapshotter retries every error with
    /// exponential backoff; a snapshot that is not
    /// [`ready`](SnapshotInfo::ready) is asked about again.
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo>;

    /// Deletes the snapshot; one that does not exist is already deleted.
    ///
    /// **CSI call:** `DeleteSnapshot`, from csi-snapshotter when a
    /// VolumeSnapshotContent with `deletionPolicy: Delete` is released.
    /// Any error is retried with exponential backoff.
    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()>;

    /// Every snapshot that exists, in any order, from the storage.
    ///
    /// **CSI call:** `ListSnapshots` (pav-csi filters by id or source,
    /// sorts by handle and pages), and the source lookup of a
    /// `CreateVolume` from a snapshot (`NOT_FOUND` when it is not listed,
    /// `OUT_OF_RANGE` when the requested limit is below its size).
    ///
    /// With [records](crate::Provisioner::keep_records) pav-sdk answers from
    /// them and never calls this; the default, for that case, is `INTERNAL`.
    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Err(crate::Error::Internal(
            "cannot list snapshots: implement Snapshot::list_snapshots, or keep records".into(),
        ))
    }
}

/// Asks for a snapshot of a volume. `name` is the idempotency key, as for
/// [`CreateRequest`](crate::CreateRequest): the same name and source again is the same snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotRequest {
    /// Unique name chosen by the CO, at most 128 bytes (`snapshot-<uid>`).
    pub name: String,
    /// The volume to take the snapshot of; pav-csi checked it exists.
    pub source: VolumeId,
    /// VolumeSnapshotClass parameters, without the `csi.storage.k8s.io/` keys.
    pub parameters: Parameters,
    /// Secrets for the operation.
    pub secrets: Secrets,
    /// Where the source volume's node directory is
    /// ([`StageRequest::node_dir`](crate::StageRequest::node_dir)) when
    /// this process serves the node too, for a snapshot of node-local
    /// storage to copy; it does not exist when the volume was never staged
    /// here. `None` in a controller apart from its node plugins.
    pub source_node_dir: Option<std::path::PathBuf>,
}

impl SnapshotRequest {
    /// [`source_node_dir`](Self::source_node_dir), or `FAILED_PRECONDITION`
    /// saying why there is none.
    pub fn source_node_dir(&self) -> crate::Result<&std::path::Path> {
        self.source_node_dir.as_deref().ok_or_else(|| {
            crate::Error::FailedPrecondition(format!(
                "volume {:?} has no node directory in this process: its node plugin runs apart from the controller",
                self.source.as_str()
            ))
        })
    }
}

/// A snapshot that exists, as [`Snapshot`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotInfo {
    /// The handle (CSI `snapshot_id`, VolumeSnapshotContent
    /// `snapshotHandle`), at most 128 bytes: all that deleting, listing
    /// and restoring it will get.
    pub handle: String,
    /// The handle of the volume it was taken of.
    pub source: String,
    /// Bytes a volume restored from it needs at least.
    pub size_bytes: u64,
    /// When it was taken.
    pub created: std::time::SystemTime,
    /// True when it can be restored from (a snapshot still being cut or
    /// uploaded is not: the snapshotter asks again).
    pub ready: bool,
    /// The handle of the group snapshot it was taken in, if it is a member
    /// of one ([`GroupSnapshot`](crate::GroupSnapshot)); CSI
    /// `group_snapshot_id`. `None` for a snapshot taken alone.
    pub group: Option<String>,
}

impl SnapshotInfo {
    /// A ready snapshot `handle` of volume `source`.
    pub fn new(
        handle: impl Into<String>,
        source: impl Into<String>,
        size_bytes: u64,
        created: std::time::SystemTime,
    ) -> Self {
        Self {
            handle: handle.into(),
            source: source.into(),
            size_bytes,
            created,
            ready: true,
            group: None,
        }
    }

    /// The same snapshot, a member of the group snapshot `group`.
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
}

/// Asks to delete a snapshot. Deleting one that is already gone must succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeleteSnapshotRequest {
    /// The snapshot handle, untrusted as a [`VolumeId`] is.
    pub handle: VolumeId,
    /// Secrets for the operation.
    pub secrets: Secrets,
}
