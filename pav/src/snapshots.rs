//! VolumeSnapshotContents, external-snapshotter's record of each snapshot
//! (a CRD, read as dynamic objects): the CSI controller answers
//! ListSnapshots from them, the operator keeps a provisioner that has some.

use std::time::{Duration, SystemTime};

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use pav_sdk::SnapshotInfo;

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

/// A snapshot as its VolumeSnapshotContent records it, if it is one of
/// `driver`'s with a handle: a dynamic content once CreateSnapshot has
/// answered (csi-snapshotter writes the status), or a pre-provisioned one
/// (`spec.source.snapshotHandle`, written by an administrator for a
/// snapshot that exists, with no status until ListSnapshots answers).
///
/// Such a snapshot is ready: PaV answers CreateSnapshot only once the
/// snapshot is taken, so readiness is never read from the content's status
/// (a pre-provisioned content asking about itself would stay "not ready"
/// forever). Its size is `status.restoreSize`, 0 (CSI's "unknown") while
/// there is none.
pub fn recorded_snapshot(content: &DynamicObject, driver: &str) -> Option<SnapshotInfo> {
    if !is_of_driver(content, driver) {
        return None;
    }
    let data = &content.data;
    let handle = data
        .pointer("/status/snapshotHandle")
        .or_else(|| data.pointer("/spec/source/snapshotHandle"))
        .and_then(|h| h.as_str())?;
    let source = data
        .pointer("/spec/source/volumeHandle")
        .and_then(|h| h.as_str())
        .unwrap_or_default();
    let size = data
        .pointer("/status/restoreSize")
        .and_then(|s| s.as_u64())
        .unwrap_or(0);
    // creationTime: nanoseconds since the epoch.
    let created = data
        .pointer("/status/creationTime")
        .and_then(|t| t.as_u64())
        .map_or(SystemTime::UNIX_EPOCH, |nanos| {
            SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos)
        });
    // SnapshotInfo::new is ready.
    let info = SnapshotInfo::new(handle, source, size, created);
    // A group's member, as the snapshot-controller marks its content.
    match content.annotations().get(GROUP_HANDLE_ANNOTATION) {
        Some(group) => Some(info.in_group(group.as_str())),
        None => Some(info),
    }
}

/// A group snapshot as its VolumeGroupSnapshotContent records it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedGroup {
    /// The group's handle.
    pub handle: String,
    /// Its members, each marked with the group; a pre-provisioned
    /// content names only their handles (no source, size 0: unknown).
    pub members: Vec<SnapshotInfo>,
}

/// The group `content` records, if it is one of `driver`'s with a handle:
/// a dynamic content once CreateVolumeGroupSnapshot has answered
/// (csi-snapshotter writes the status), or a pre-provisioned one
/// (`spec.source.groupSnapshotHandles`). Members are ready: PaV answers
/// only once the pod has taken them.
pub fn recorded_group(content: &DynamicObject, driver: &str) -> Option<RecordedGroup> {
    if !is_of_driver(content, driver) {
        return None;
    }
    let data = &content.data;
    let handle = data
        .pointer("/status/volumeGroupSnapshotHandle")
        .or_else(|| data.pointer("/spec/source/groupSnapshotHandles/volumeGroupSnapshotHandle"))
        .and_then(|h| h.as_str())?;
    let text = |item: &serde_json::Value, key: &str| {
        item.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let listed = data
        .pointer("/status/volumeSnapshotInfoList")
        .and_then(|l| l.as_array());
    let members: Vec<SnapshotInfo> = match listed {
        Some(items) => items
            .iter()
            .map(|item| {
                let created = item
                    .get("creationTime")
                    .and_then(|t| t.as_u64())
                    .map_or(SystemTime::UNIX_EPOCH, |nanos| {
                        SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos)
                    });
                let size = item.get("restoreSize").and_then(|s| s.as_u64());
                SnapshotInfo::new(
                    text(item, "snapshotHandle"),
                    text(item, "volumeHandle"),
                    size.unwrap_or(0),
                    created,
                )
            })
            .collect(),
        None => data
            .pointer("/spec/source/groupSnapshotHandles/volumeSnapshotHandles")
            .and_then(|l| l.as_array())
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str())
            .map(|h| SnapshotInfo::new(h, "", 0, SystemTime::UNIX_EPOCH))
            .collect(),
    };
    Some(RecordedGroup {
        handle: handle.to_owned(),
        members: members
            .into_iter()
            .filter(|m| !m.handle.is_empty())
            .map(|m| m.in_group(handle))
            .collect(),
    })
}

/// The name csi-snapshotter gives CreateSnapshot for the snapshot `content`
/// records, or CreateVolumeGroupSnapshot for the group: its default prefix
/// (`--snapshot-name-prefix`, `--groupsnapshot-name-prefix`), a dash and
/// the UID of the VolumeSnapshot or VolumeGroupSnapshot it is bound to.
/// `None` for a content bound to none (pre-provisioned).
pub fn requested_name(content: &DynamicObject) -> Option<String> {
    let (prefix, reference) = if is_group(content) {
        ("groupsnapshot", "/spec/volumeGroupSnapshotRef")
    } else {
        ("snapshot", "/spec/volumeSnapshotRef")
    };
    let uid = content
        .data
        .pointer(&format!("{reference}/uid"))?
        .as_str()?;
    (!uid.is_empty()).then(|| format!("{prefix}-{uid}"))
}

/// The parameters a snapshot's (or group snapshot's) templates see for a
/// VolumeSnapshotClass's (or VolumeGroupSnapshotClass's) `parameters`:
/// all but the keys pav-csi takes out ([`pav_csi::is_reserved_parameter`]:
/// csi-snapshotter's secrets and the object names it adds).
pub fn requested_parameters(
    class_parameters: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    (class_parameters.iter())
        .filter(|(key, _)| !pav_csi::is_reserved_parameter(key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// Whether `content` is a VolumeGroupSnapshotContent (else a
/// VolumeSnapshotContent).
pub fn is_group(content: &DynamicObject) -> bool {
    content
        .types
        .as_ref()
        .is_some_and(|t| t.kind == "VolumeGroupSnapshotContent")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(data: serde_json::Value) -> DynamicObject {
        let mut object = DynamicObject::new("g", &crate::snapshots::group_api_resource());
        object.data = data;
        object
    }

    #[test]
    fn a_dynamic_group_lists_its_members_with_sources_and_sizes() {
        let dynamic = content(serde_json::json!({
            "spec": {"driver": "d", "source": {"volumeHandles": ["v1", "v2"]}},
            "status": {
                "volumeGroupSnapshotHandle": "g-1",
                "volumeSnapshotInfoList": [
                    {"volumeHandle": "v1", "snapshotHandle": "s1", "restoreSize": 1024, "creationTime": 5},
                    {"volumeHandle": "v2", "snapshotHandle": "s2", "restoreSize": 2048, "creationTime": 7},
                ],
            },
        }));
        let group = recorded_group(&dynamic, "d").unwrap();
        assert_eq!(group.handle, "g-1");
        let members: Vec<_> = (group.members.iter())
            .map(|m| {
                (
                    m.handle.as_str(),
                    m.source.as_str(),
                    m.size_bytes,
                    m.group.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            members,
            [
                ("s1", "v1", 1024, Some("g-1")),
                ("s2", "v2", 2048, Some("g-1"))
            ]
        );
        assert!(recorded_group(&dynamic, "e").is_none());
    }

    #[test]
    fn a_pre_provisioned_group_names_its_members_only() {
        let pre_provisioned = content(serde_json::json!({
            "spec": {"driver": "d", "source": {"groupSnapshotHandles": {
                "volumeGroupSnapshotHandle": "g-2",
                "volumeSnapshotHandles": ["s3", "s4"],
            }}},
        }));
        let group = recorded_group(&pre_provisioned, "d").unwrap();
        assert_eq!(group.handle, "g-2");
        let handles: Vec<_> = group.members.iter().map(|m| m.handle.as_str()).collect();
        assert_eq!(handles, ["s3", "s4"]);
        // Not yet answered: no handle, nothing recorded.
        let pending = content(serde_json::json!({
            "spec": {"driver": "d", "source": {"volumeHandles": ["v1"]}},
        }));
        assert!(recorded_group(&pending, "d").is_none());
    }
}
