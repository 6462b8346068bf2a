//! Group snapshots (Kubernetes VolumeGroupSnapshot): the [`GroupSnapshot`]
//! touch point and its requests and answers.

use std::time::SystemTime;

use async_trait::async_trait;

use crate::snapshot::{Snapshot, SnapshotInfo};
use crate::types::{Parameters, Secrets};
use crate::{Result, VolumeId};

/// Takes snapshots of several volumes at one instant, deletes them
/// together, and describes them (the CSI GroupController service).
///
/// A group snapshot's members are ordinary snapshots: restored by
/// [`Create`](crate::Create) from
/// [`ContentSource::Snapshot`](crate::ContentSource::Snapshot), listed by
/// [`Snapshot::list_snapshots`] with their
/// [`group`](SnapshotInfo::group). That is why [`Snapshot`] comes with it.
///
/// # What Kubernetes needs
///
/// - **csi-snapshotter v8.7.0** beside the controller. Its
///   `CSIVolumeGroupSnapshot` feature (`--feature-gates=CSIVolumeGroupSnapshot=true`,
///   the gate's name in its `cmd/csi-snapshotter/main.go`) is GA and on by
///   default in v8.7.0; it serves group snapshots only when pav-csi
///   advertises the `GROUP_CONTROLLER_SERVICE` plugin capability, which
///   it does exactly when this trait is added.
/// - The **snapshot-controller** of the same release (the same gate, on by
///   default too).
/// - The CRDs of `groupsnapshot.storage.k8s.io` (VolumeGroupSnapshotClass,
///   VolumeGroupSnapshot, VolumeGroupSnapshotContent): v8.7.0 reads them as
///   `v1` (the CRDs also serve `v1beta2` and a deprecated `v1beta1`).
///   Without them both components turn group snapshots off, with a
///   warning in their log.
/// - A VolumeGroupSnapshotClass whose `driver` is this driver (its
///   `parameters` become [`GroupSnapshotRequest::parameters`], without the
///   `csi.storage.k8s.io/` keys), and a VolumeGroupSnapshot whose
///   `spec.source.selector` selects the claims to snapshot together.
///
/// ```yaml
/// apiVersion: groupsnapshot.storage.k8s.io/v1
/// kind: VolumeGroupSnapshotClass
/// metadata:
///   name: my-group-snapshots
/// driver: my.driver.example.com
/// deletionPolicy: Delete
/// ```
///
/// With [records](crate::Provisioner::keep_records), pav-sdk records each
/// group and its members: a repeated create is answered from them (another
/// list of sources or other parameters under the same name is
/// `ALREADY_EXISTS`), delete of an unrecorded group succeeds without
/// calling [`delete_group_snapshot`](Self::delete_group_snapshot), get is
/// answered from them, a `DeleteSnapshot` of a member is
/// `INVALID_ARGUMENT` (CSI: delete the group), and `ListSnapshots` lists
/// the members with their group.
#[async_trait]
pub trait GroupSnapshot: Snapshot {
    /// Takes one snapshot of each of `req.sources` at the same instant
    /// (write-order consistent: no write to one member may be in the
    /// group while an earlier write to another is not), or returns the
    /// group if it was taken already (a retry). The same name with other
    /// sources or parameters is
    /// [`AlreadyExists`](crate::Error::AlreadyExists).
    ///
    /// **CSI call:** `CreateVolumeGroupSnapshot`, from csi-snapshotter for
    /// each dynamically provisioned VolumeGroupSnapshot of a
    /// VolumeGroupSnapshotClass of this driver. pav-csi has checked the
    /// name, that the sources are distinct and that each exists (with
    /// [`Create::exists`](crate::Create::exists)), and runs no other call
    /// on the name or the sources meanwhile. It checks the answer: one
    /// member per source, each with this group's handle.
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when a volume does
    /// not exist, [`FailedPrecondition`](crate::Error::FailedPrecondition)
    /// when these volumes cannot be snapshotted together,
    /// [`ResourceExhausted`](crate::Error::ResourceExhausted) when there is
    /// no room. A failure part-way must leave no member behind (CSI: the
    /// CO has no handle to clean up with). csi-snapshotter retries every
    /// error with exponential backoff; a group with a member not
    /// [`ready`](SnapshotInfo::ready) is asked about again.
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo>;

    /// Deletes the group snapshot and every member; one that does not
    /// exist is already deleted.
    ///
    /// **CSI call:** `DeleteVolumeGroupSnapshot`, from csi-snapshotter when
    /// a VolumeGroupSnapshotContent with `deletionPolicy: Delete` is
    /// released. `req.snapshot_ids` are the members the CO knows of:
    /// [`InvalidArgument`](crate::Error::InvalidArgument) when they are not
    /// the group's (pav-sdk's records check that). Any error is retried
    /// with exponential backoff.
    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()>;

    /// The group snapshot as it is now.
    ///
    /// **CSI call:** `GetVolumeGroupSnapshot`, from csi-snapshotter for a
    /// pre-provisioned VolumeGroupSnapshotContent (and for one not yet
    /// ready). [`NotFound`](crate::Error::NotFound) when it does not
    /// exist, [`InvalidArgument`](crate::Error::InvalidArgument) when
    /// `req.snapshot_ids` are not its members.
    ///
    /// With [records](crate::Provisioner::keep_records) pav-sdk answers
    /// from them and never calls this; the default, for that case, is
    /// `INTERNAL`.
    async fn get_group_snapshot(&self, req: GetGroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        Err(crate::Error::Internal(format!(
            "cannot describe group snapshot {:?}: implement GroupSnapshot::get_group_snapshot, or keep records",
            req.handle.as_str()
        )))
    }
}

/// Asks for a group snapshot of several volumes. `name` is the idempotency
/// key: the same name, sources and parameters again is the same group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupSnapshotRequest {
    /// Unique name chosen by the CO, at most 128 bytes
    /// (`groupsnapshot-<uid>`).
    pub name: String,
    /// The volumes to snapshot together, distinct, in the CO's order;
    /// pav-csi checked that each exists.
    pub sources: Vec<VolumeId>,
    /// VolumeGroupSnapshotClass parameters, without the
    /// `csi.storage.k8s.io/` keys.
    pub parameters: Parameters,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// A group snapshot that exists, as [`GroupSnapshot`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupSnapshotInfo {
    /// The handle (CSI `group_snapshot_id`), at most 128 bytes: all that
    /// deleting and getting it will get (with its members' handles).
    pub handle: String,
    /// One snapshot per source volume, each with
    /// [`group`](SnapshotInfo::group) this handle (pav-csi sets it where
    /// it is `None`).
    pub snapshots: Vec<SnapshotInfo>,
    /// When it was taken.
    pub created: SystemTime,
}

impl GroupSnapshotInfo {
    /// The group `handle` of `snapshots`, each marked a member of it.
    pub fn new(
        handle: impl Into<String>,
        snapshots: impl IntoIterator<Item = SnapshotInfo>,
        created: SystemTime,
    ) -> Self {
        let handle = handle.into();
        let snapshots = (snapshots.into_iter())
            .map(|s| s.in_group(handle.clone()))
            .collect();
        Self {
            handle,
            snapshots,
            created,
        }
    }

    /// True when every member can be restored from (CSI `ready_to_use`).
    pub fn ready(&self) -> bool {
        self.snapshots.iter().all(|s| s.ready)
    }
}

/// Asks to delete a group snapshot and its members. Deleting one that is
/// already gone must succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeleteGroupSnapshotRequest {
    /// The group snapshot's handle, untrusted as a [`VolumeId`] is.
    pub handle: VolumeId,
    /// The members' handles as the CO knows them (untrusted); may be
    /// empty when the CO does not know them.
    pub snapshot_ids: Vec<VolumeId>,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// Asks what a group snapshot is now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GetGroupSnapshotRequest {
    /// The group snapshot's handle, untrusted as a [`VolumeId`] is.
    pub handle: VolumeId,
    /// The members' handles as the CO knows them (untrusted); may be
    /// empty.
    pub snapshot_ids: Vec<VolumeId>,
    /// Secrets for the operation.
    pub secrets: Secrets,
}

/// `INVALID_ARGUMENT` unless `given` (when not empty) names exactly the
/// members `members`, in any order: the check CSI asks of Delete and Get.
pub fn check_members<'a>(
    group: &str,
    given: &[VolumeId],
    members: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    if given.is_empty() {
        return Ok(());
    }
    let mut given: Vec<&str> = given.iter().map(|id| id.as_str()).collect();
    let mut members: Vec<&str> = members.into_iter().collect();
    given.sort_unstable();
    members.sort_unstable();
    if given != members {
        return Err(crate::Error::InvalidArgument(format!(
            "snapshot_ids {given:?} are not the members of group snapshot {group:?} ({members:?})"
        )));
    }
    Ok(())
}

/// Constructors of the group snapshot requests, for pav-csi and tests.
pub mod build {
    use super::*;

    /// A [`GroupSnapshotRequest`] named `name` of the volumes `sources`.
    pub fn group_snapshot(
        name: impl Into<String>,
        sources: impl IntoIterator<Item = impl Into<VolumeId>>,
    ) -> GroupSnapshotRequest {
        GroupSnapshotRequest {
            name: name.into(),
            sources: sources.into_iter().map(Into::into).collect(),
            parameters: Parameters::new(),
            secrets: Secrets::default(),
        }
    }

    /// A [`DeleteGroupSnapshotRequest`] for `handle` and its members
    /// `snapshot_ids` (empty: not known).
    pub fn delete_group_snapshot(
        handle: impl Into<VolumeId>,
        snapshot_ids: impl IntoIterator<Item = impl Into<VolumeId>>,
    ) -> DeleteGroupSnapshotRequest {
        DeleteGroupSnapshotRequest {
            handle: handle.into(),
            snapshot_ids: snapshot_ids.into_iter().map(Into::into).collect(),
            secrets: Secrets::default(),
        }
    }

    /// A [`GetGroupSnapshotRequest`] for `handle` and its members
    /// `snapshot_ids` (empty: not known).
    pub fn get_group_snapshot(
        handle: impl Into<VolumeId>,
        snapshot_ids: impl IntoIterator<Item = impl Into<VolumeId>>,
    ) -> GetGroupSnapshotRequest {
        GetGroupSnapshotRequest {
            handle: handle.into(),
            snapshot_ids: snapshot_ids.into_iter().map(Into::into).collect(),
            secrets: Secrets::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_checked_in_any_order_and_unknown_ones_refused() {
        let ids = |names: &[&str]| names.iter().map(|n| VolumeId::new(*n)).collect::<Vec<_>>();
        assert!(check_members("g", &ids(&[]), ["a", "b"]).is_ok());
        assert!(check_members("g", &ids(&["b", "a"]), ["a", "b"]).is_ok());
        for wrong in [&["a"][..], &["a", "c"], &["a", "b", "c"], &["a", "a"]] {
            assert!(
                matches!(
                    check_members("g", &ids(wrong), ["a", "b"]),
                    Err(crate::Error::InvalidArgument(_))
                ),
                "{wrong:?}"
            );
        }
    }

    #[test]
    fn a_group_marks_its_members_and_is_ready_when_they_all_are() {
        let now = SystemTime::now();
        let mut cut = SnapshotInfo::new("s-2", "v-2", 1, now);
        cut.ready = false;
        let group = GroupSnapshotInfo::new("g", [SnapshotInfo::new("s-1", "v-1", 1, now)], now);
        assert!(group.ready());
        assert_eq!(group.snapshots[0].group.as_deref(), Some("g"));
        let group = GroupSnapshotInfo::new("g", [cut], now);
        assert!(!group.ready());
    }
}
