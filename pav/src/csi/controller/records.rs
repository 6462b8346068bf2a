//! What the driver's controller reads of what exists, for every RPC file
//! of the controller: the PersistentVolumes of this driver (from a watch),
//! the claims they are bound to, and the snapshots and group snapshots its
//! VolumeSnapshotContents and VolumeGroupSnapshotContents record.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector::Store;
use pav_sdk::SnapshotInfo;

use crate::csi::context::DriverContext;
use crate::driver_error::{DriverError, api_error};
use crate::snapshots::{RecordedGroup, recorded_group, recorded_snapshot};

/// The records of one driver's volumes and snapshots.
#[derive(Debug)]
pub(super) struct Records {
    driver: Arc<DriverContext>,
    /// A reflector store of PersistentVolumes.
    volumes: Store<PersistentVolume>,
}

impl Records {
    pub(super) fn new(driver: Arc<DriverContext>, volumes: Store<PersistentVolume>) -> Self {
        Records { driver, volumes }
    }

    /// The PersistentVolume of this driver whose handle is `handle`, from
    /// the watch of PersistentVolumes.
    pub(super) async fn volume(&self, handle: &str) -> Option<Arc<PersistentVolume>> {
        let _ = self.volumes.wait_until_ready().await;
        let provisioner = &self.driver.provisioner;
        self.volumes.find(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|c| &c.driver == provisioner && c.volume_handle == handle)
        })
    }

    /// The claim `pv` is bound to, as it is now
    /// ([`DriverContext::claim_of`]).
    pub(super) async fn claim_of(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<PersistentVolumeClaim>, DriverError> {
        self.driver.claim_of(pv).await
    }

    /// The snapshots the cluster records for this driver: its
    /// VolumeSnapshotContents and its groups' members, one entry per
    /// handle.
    pub(super) async fn snapshots(&self) -> Result<Vec<SnapshotInfo>, DriverError> {
        let api: Api<DynamicObject> = Api::all_with(
            self.driver.client.clone(),
            &crate::snapshots::api_resource(),
        );
        let contents = api
            .list(&ListParams::default())
            .await
            .map_err(|e| api_error("listing VolumeSnapshotContents", e))?;
        let members = (self.groups().await?.into_iter()).flat_map(|g| g.members);
        Ok(by_handle(
            (contents.items.iter())
                .filter_map(|c| recorded_snapshot(c, &self.driver.provisioner))
                .chain(members),
        ))
    }

    /// The groups the cluster records for this driver; none when the
    /// group snapshot CRDs are not installed.
    pub(super) async fn groups(&self) -> Result<Vec<RecordedGroup>, DriverError> {
        let api: Api<DynamicObject> = Api::all_with(
            self.driver.client.clone(),
            &crate::snapshots::group_api_resource(),
        );
        match api.list(&ListParams::default()).await {
            Ok(contents) => Ok((contents.items.iter())
                .filter_map(|c| recorded_group(c, &self.driver.provisioner))
                .collect()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
            Err(e) => Err(api_error("listing VolumeGroupSnapshotContents", e)),
        }
    }
}

/// One entry per handle: a handle recorded twice (a pre-provisioned
/// content naming a snapshot that a dynamic content records too, a group
/// member recorded by its group and its own content) keeps what either
/// knows of its source, size and group.
pub(super) fn by_handle(recorded: impl Iterator<Item = SnapshotInfo>) -> Vec<SnapshotInfo> {
    let mut snapshots = std::collections::BTreeMap::<String, SnapshotInfo>::new();
    for info in recorded {
        match snapshots.get_mut(&info.handle) {
            None => {
                snapshots.insert(info.handle.clone(), info);
            }
            Some(known) => {
                if known.source.is_empty() {
                    known.source = info.source;
                }
                known.size_bytes = known.size_bytes.max(info.size_bytes);
                if known.group.is_none() {
                    known.group = info.group;
                }
            }
        }
    }
    snapshots.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshots::recorded_snapshot;

    fn content(data: serde_json::Value) -> DynamicObject {
        let mut object = DynamicObject::new("c", &crate::snapshots::api_resource());
        object.data = data;
        object
    }

    /// A pre-provisioned content (kubernetes' "Pre-provisioned Snapshot"
    /// specs) has no status until ListSnapshots answers: it must be ready.
    #[test]
    fn a_pre_provisioned_snapshot_is_ready_and_known_once() {
        let pre_provisioned = content(serde_json::json!({
            "spec": {"driver": "d", "source": {"snapshotHandle": "snap-1"}},
        }));
        let dynamic = content(serde_json::json!({
            "spec": {"driver": "d", "source": {"volumeHandle": "vol-1"}},
            "status": {"snapshotHandle": "snap-1", "restoreSize": 1024, "readyToUse": true},
        }));
        let other_driver = content(serde_json::json!({
            "spec": {"driver": "e", "source": {"snapshotHandle": "snap-2"}},
        }));
        let alone = recorded_snapshot(&pre_provisioned, "d").unwrap();
        assert!(alone.ready);
        assert_eq!((alone.handle.as_str(), alone.size_bytes), ("snap-1", 0));
        assert!(recorded_snapshot(&other_driver, "d").is_none());
        let listed = by_handle(
            [pre_provisioned, dynamic, other_driver]
                .iter()
                .filter_map(|c| recorded_snapshot(c, "d")),
        );
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (
                listed[0].source.as_str(),
                listed[0].size_bytes,
                listed[0].ready
            ),
            ("vol-1", 1024, true)
        );
    }
}
