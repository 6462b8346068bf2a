//! DeleteVolume: the deletion pod, from the claim and class the volume's
//! records keep.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod,
    VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::{Api, Resource, ResourceExt};
use pav_sdk::{Delete, DeleteRequest, Error, Result};
use pav_templates::Phase;

use super::PodController;
use super::cleanup::clean_claim_pods;
use super::error::DeleteError;
use crate::csi::context::{PodFiles, Regarding, api_error, pod_ref};
use crate::pods::{LABEL_PHASE, stages_pv};

/// The claim of a volume being deleted: the live object when it still
/// exists, else rebuilt from the PersistentVolume's `claimRef` and spec.
pub(super) fn claim_from_pv(
    pv: &PersistentVolume,
    live: Option<PersistentVolumeClaim>,
) -> Option<PersistentVolumeClaim> {
    let claim_ref = pv.spec.as_ref()?.claim_ref.as_ref()?;
    if let Some(live) = live
        && live.uid() == claim_ref.uid
    {
        return Some(live);
    }
    let spec = pv.spec.as_ref()?;
    let mut pvc = PersistentVolumeClaim::default();
    pvc.metadata.name = claim_ref.name.clone();
    pvc.metadata.namespace = claim_ref.namespace.clone();
    pvc.metadata.uid = claim_ref.uid.clone();
    pvc.spec = Some(PersistentVolumeClaimSpec {
        access_modes: spec.access_modes.clone(),
        volume_mode: spec.volume_mode.clone(),
        storage_class_name: spec.storage_class_name.clone(),
        volume_name: pv.metadata.name.clone(),
        resources: Some(VolumeResourceRequirements {
            requests: spec.capacity.clone().map(|c| {
                c.into_iter()
                    .filter(|(k, _)| k == "storage")
                    .collect::<BTreeMap<_, _>>()
            }),
            ..VolumeResourceRequirements::default()
        }),
        ..PersistentVolumeClaimSpec::default()
    });
    Some(pvc)
}

#[pav_sdk::async_trait]
impl Delete for PodController {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        self.delete_volume(&req).await.map_err(Error::from)
    }
}

impl PodController {
    async fn delete_volume(&self, req: &DeleteRequest) -> std::result::Result<(), DeleteError> {
        let provisioner = &self.driver.provisioner;
        let Some(pv) = self.records.volume(&req.handle).await else {
            tracing::info!(handle = %req.handle, "no PersistentVolume has this handle: nothing to delete");
            return Ok(());
        };
        let pv_uid = pv.uid().unwrap_or_default();
        if self.deleted.contains(&req.handle, &pv_uid, Instant::now()) {
            tracing::debug!(handle = %req.handle, "deleted already: no second deletion pod");
            return Ok(());
        }
        self.check_unstaged(&pv).await?;
        let client = self.driver.client.clone();
        let live = self
            .records
            .claim_of(&pv)
            .await
            .map_err(DeleteError::ReadObjects)?;
        let Some(pvc) = claim_from_pv(&pv, live) else {
            tracing::warn!(handle = %req.handle, "the PersistentVolume has no claimRef: no deletion pod");
            return Ok(());
        };
        let claim_uid = pvc.uid().unwrap_or_default();
        let sc_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let sc = match Api::<StorageClass>::all(client)
            .get_opt(&sc_name)
            .await
            .map_err(|e| DeleteError::ReadObjects(api_error("the volume's StorageClass", e)))?
        {
            Some(sc) => sc,
            None => StorageClass {
                metadata: kube::api::ObjectMeta {
                    name: Some(sc_name),
                    ..Default::default()
                },
                provisioner: provisioner.clone(),
                parameters: pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.csi.as_ref())
                    .and_then(|c| c.volume_attributes.clone()),
                ..StorageClass::default()
            },
        };
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(DeleteError::Plan)?;
        let handle = req.handle.to_string();
        let deletion = planner
            .blocking(move |p| p.volume_deletion(&pvc, &sc, &handle))
            .await
            .map_err(DeleteError::Plan)?;
        let result = match &deletion.pod {
            None => Ok(()),
            Some(pod) => {
                // Any error is reported below, a failed pod's included.
                let result = (self.driver)
                    .run(
                        (Phase::Deletion, pod),
                        PodFiles::Collected,
                        Regarding::Objects(&[]),
                    )
                    .await
                    .map(drop)
                    .map_err(DeleteError::DeletionPod);
                if let Err(e) = &result {
                    self.driver
                        .events
                        .warn(
                            &pv.object_ref(&()),
                            Phase::Deletion,
                            &pav_csi::error_chain(e),
                            Some(pod_ref(pod)),
                        )
                        .await;
                }
                result
            }
        };
        if result.is_ok() {
            self.deleted.record(&req.handle, &pv_uid, Instant::now());
            clean_claim_pods(&self.driver, &claim_uid, &Phase::ALL).await;
        }
        result
    }
}

impl PodController {
    /// Refuses to delete a volume that is staged, or being unstaged, on any
    /// node, with a Normal event on the volume saying what it waits for.
    /// Kubernetes does not order DeleteVolume after the last
    /// NodeUnstageVolume for a driver without attach: once the client pod's
    /// object is gone the claim may go, and external-provisioner deletes the
    /// volume while the kubelet is still unpublishing it; a deletion pod
    /// then would remove the storage under the unstaging pod (which then
    /// leaks what it should have released, such as a loop device). The
    /// staging pods are the record (see [`stages_pv`]), read from the API
    /// server rather than a cache or memory: the check holds across
    /// restarts of this controller and of the node plugins.
    async fn check_unstaged(&self, pv: &PersistentVolume) -> std::result::Result<(), DeleteError> {
        let name = pv.name_any();
        let staging: Vec<Pod> = self
            .driver
            .pods
            .list(&[(LABEL_PHASE, Phase::Staging.name().to_owned())])
            .await
            .map_err(DeleteError::ListStagingPods)?
            .into_iter()
            .filter(|pod| stages_pv(pod, &name))
            .collect();
        let Some(first) = staging.first() else {
            return Ok(());
        };
        let mut nodes: Vec<String> = staging
            .iter()
            .filter_map(|pod| pod.spec.as_ref()?.node_name.clone())
            .collect();
        nodes.sort();
        nodes.dedup();
        let pods = staging
            .iter()
            .map(|pod| format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()))
            .collect();
        let error = DeleteError::Staged {
            pv: name,
            nodes,
            pods,
        };
        tracing::info!(error = %error, "deletion postponed");
        self.driver
            .events
            .note_waiting(
                &pv.object_ref(&()),
                (Phase::Deletion, DELETION_WAITS_FOR_UNSTAGING),
                &error.to_string(),
                Some(pod_ref(first)),
            )
            .await;
        Err(error)
    }
}

/// The reason of the Normal event on a PersistentVolume whose deletion
/// waits until no node has it staged.
pub(super) const DELETION_WAITS_FOR_UNSTAGING: &str = "DeletionWaitsForUnstaging";

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn a_deleted_claim_is_rebuilt_from_its_volume() {
        let pv = PersistentVolume {
            metadata: kube::api::ObjectMeta {
                name: Some("pvc-1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                claim_ref: Some(ObjectReference {
                    name: Some("data".into()),
                    namespace: Some("apps".into()),
                    uid: Some("u-1".into()),
                    ..Default::default()
                }),
                capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: Some("sc".into()),
                ..Default::default()
            }),
            status: None,
        };
        let pvc = claim_from_pv(&pv, None).unwrap();
        assert_eq!(pvc.uid().as_deref(), Some("u-1"));
        assert_eq!(pvc.namespace().as_deref(), Some("apps"));
        let spec = pvc.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("sc"));
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"],
            Quantity("1Gi".into())
        );
        let mut other = PersistentVolumeClaim::default();
        other.metadata.uid = Some("u-2".into());
        assert_eq!(
            claim_from_pv(&pv, Some(other)).unwrap().uid().as_deref(),
            Some("u-1")
        );
    }
}
