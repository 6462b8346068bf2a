//! CreateSnapshot, DeleteSnapshot and ListSnapshots: `spec.snapshotCreation`
//! and `spec.snapshotDeletion`, their optional pods, and the snapshots the
//! cluster records (VolumeSnapshotContents of this driver).

use std::time::SystemTime;

use kube::{Resource, ResourceExt};
use pav_sdk::{DeleteSnapshotRequest, Error, Result, Snapshot, SnapshotInfo, SnapshotRequest};
use pav_templates::Phase;
use pav_templates::quantity::Rounding;

use super::PodController;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding};
use crate::pods::results;
use crate::recipe::PlanError;

/// Why CreateSnapshot or DeleteSnapshot failed: one variant per step;
/// `From<SnapshotError> for pav_sdk::Error` is the one mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    /// No PersistentVolume of this driver has the source handle.
    #[error("no PersistentVolume of driver {provisioner} has volume handle {handle:?}")]
    NoVolume {
        /// The driver.
        provisioner: String,
        /// The source handle asked about.
        handle: String,
    },
    /// Planning the snapshot creation or deletion phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The PavProvisioner has no `spec.snapshotCreation`.
    #[error("PavProvisioner {provisioner} has no spec.snapshotCreation: it takes no snapshots")]
    NoSnapshots {
        /// Its name.
        provisioner: String,
    },
    /// Reading the source volume's claim or the recorded snapshots.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// The source volume's PersistentVolume has no capacity (the size of
    /// a snapshot that neither the spec nor the pod sizes).
    #[error(transparent)]
    SourceCapacity(pav_templates::Error),
    /// The snapshot creation or deletion pod failed or did not finish.
    #[error(transparent)]
    Pod(PhaseError),
    /// The handle the spec or the pod gave is no handle.
    #[error("snapshot handle {0:?} must be 1 to 128 bytes on one line")]
    Handle(String),
    /// The pod's `/pav/size` is no quantity.
    #[error("snapshot creation pod {pod}: /pav/size")]
    Size {
        /// The pod, `namespace/name`.
        pod: String,
        #[source]
        source: pav_templates::quantity::QuantityError,
    },
}

impl From<SnapshotError> for Error {
    /// An unknown source is `NOT_FOUND`; a provisioner without snapshots
    /// `FAILED_PRECONDITION`; what the spec or a pod got wrong `INTERNAL`;
    /// the API, render and pod-run steps keep the code of the driver's
    /// error. csi-snapshotter retries every error with backoff.
    fn from(error: SnapshotError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            SnapshotError::NoVolume { .. } => Error::NotFound(message),
            SnapshotError::NoSnapshots { .. } => Error::FailedPrecondition(message),
            SnapshotError::Plan(PlanError::Context(_))
            | SnapshotError::SourceCapacity(_)
            | SnapshotError::Pod(PhaseError::Failed(_))
            | SnapshotError::Handle(_)
            | SnapshotError::Size { .. } => Error::Internal(message),
            SnapshotError::Plan(e) => e.into(),
            SnapshotError::ReadObjects(e) | SnapshotError::Pod(PhaseError::Run(e)) => e.into(),
        }
    }
}

#[pav_sdk::async_trait]
impl Snapshot for PodController {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        self.take_snapshot(&req).await.map_err(Error::from)
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        self.remove_snapshot(&req).await.map_err(Error::from)
    }

    /// The snapshots the cluster records for this driver: the state of a
    /// PaV snapshot lives in its VolumeSnapshotContent, as a volume's in
    /// its PersistentVolume.
    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.records.snapshots().await.map_err(Error::from)
    }
}

impl PodController {
    async fn take_snapshot(
        &self,
        req: &SnapshotRequest,
    ) -> std::result::Result<SnapshotInfo, SnapshotError> {
        let provisioner = &self.driver.provisioner;
        let pv = self
            .records
            .volume(&req.source)
            .await
            .ok_or_else(|| SnapshotError::NoVolume {
                provisioner: provisioner.clone(),
                handle: req.source.to_string(),
            })?;
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(SnapshotError::Plan)?;
        if !planner.compiled().has_phase(Phase::SnapshotCreation) {
            return Err(SnapshotError::NoSnapshots {
                provisioner: provisioner.clone(),
            });
        }
        let pvc = self
            .records
            .claim_of(&pv)
            .await
            .map_err(SnapshotError::ReadObjects)?;
        let source_capacity =
            pav_templates::context::pv_capacity(&pv).map_err(SnapshotError::SourceCapacity)?;
        let (name, parameters, claim) = (req.name.clone(), req.parameters.clone(), pvc.clone());
        let creation = planner
            .blocking(move |p| p.snapshot_creation(&name, &parameters, &pv, claim.as_ref()))
            .await
            .map_err(SnapshotError::Plan)?;
        let mut exported = None;
        let mut pod_name = String::new();
        if let Some(pod) = &creation.pod {
            pod_name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
            // Events go to the claim, when the volume has one.
            let claim: Vec<_> = pvc.iter().map(|pvc| pvc.object_ref(&())).collect();
            exported = (self.driver)
                .run(
                    (Phase::SnapshotCreation, pod),
                    PodFiles::Collected,
                    Regarding::Objects(&claim),
                )
                .await
                .map_err(SnapshotError::Pod)?;
        }
        let creation = creation.evaluated;
        let handle =
            results::exported_handle(creation.handle.as_deref(), exported.as_ref(), &req.name)
                .map_err(SnapshotError::Handle)?;
        let exported_size = exported.as_ref().and_then(|c| c.size.as_deref());
        let size = results::evaluated_else_exported(creation.size, exported_size, Rounding::Up)
            .map_err(|source| SnapshotError::Size {
                pod: pod_name.clone(),
                source,
            })?
            .unwrap_or(source_capacity);
        tracing::info!(snapshot = %req.name, handle, size, "snapshot taken");
        Ok(SnapshotInfo::new(
            handle,
            req.source.to_string(),
            size,
            SystemTime::now(),
        ))
    }

    async fn remove_snapshot(
        &self,
        req: &DeleteSnapshotRequest,
    ) -> std::result::Result<(), SnapshotError> {
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(SnapshotError::Plan)?;
        if !planner.compiled().has_phase(Phase::SnapshotDeletion) {
            return Ok(());
        }
        let source = self
            .records
            .snapshots()
            .await
            .map_err(SnapshotError::ReadObjects)?
            .into_iter()
            .find(|s| s.handle == *req.handle)
            .map(|s| s.source)
            .filter(|s| !s.is_empty());
        let handle = req.handle.to_string();
        let deletion = planner
            .blocking(move |p| p.snapshot_deletion(&handle, source.as_deref()))
            .await
            .map_err(SnapshotError::Plan)?;
        let Some(pod) = &deletion.pod else {
            return Ok(());
        };
        (self.driver)
            .run(
                (Phase::SnapshotDeletion, pod),
                PodFiles::Collected,
                Regarding::Provisioner,
            )
            .await
            .map(drop)
            .map_err(SnapshotError::Pod)
    }
}
