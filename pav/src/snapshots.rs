//! VolumeSnapshotContents, external-snapshotter's record of each snapshot
//! (a CRD, read as dynamic objects): the CSI controller answers
//! ListSnapshots from them, the operator keeps a provisioner that has some.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

/// The VolumeSnapshotContent resource, `snapshot.storage.k8s.io/v1`.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshotContent"),
        "volumesnapshotcontents",
    )
}

/// Whether `content` records a snapshot of CSI driver `driver` (its
/// `spec.driver`).
pub fn is_of_driver(content: &DynamicObject, driver: &str) -> bool {
    content
        .data
        .pointer("/spec/driver")
        .and_then(|d| d.as_str())
        == Some(driver)
}

/// The VolumeGroupSnapshotContent resource, `groupsnapshot.storage.k8s.io/v1`
/// (csi-snapshotter v8.7.0 reads it as v1).
pub fn group_api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "groupsnapshot.storage.k8s.io",
            "v1",
            "VolumeGroupSnapshotContent",
        ),
        "volumegroupsnapshotcontents",
    )
}

/// The annotation the snapshot-controller puts on each member's
/// VolumeSnapshotContent: the handle of the group it belongs to.
pub const GROUP_HANDLE_ANNOTATION: &str = "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle";
