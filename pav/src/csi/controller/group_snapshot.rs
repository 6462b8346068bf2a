//! CreateVolumeGroupSnapshot, DeleteVolumeGroupSnapshot and
//! GetVolumeGroupSnapshot: `spec.groupSnapshotCreation`'s pod takes every
//! member and names each in `/pav/snapshots`; `spec.groupSnapshotDeletion`'s
//! optional pod deletes them. The groups the cluster records
//! (VolumeGroupSnapshotContents of this driver) answer Get and say which
//! snapshots are members.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::{Resource, ResourceExt};
use pav_sdk::{
    DeleteGroupSnapshotRequest, Error, GetGroupSnapshotRequest, GroupSnapshot, GroupSnapshotInfo,
    GroupSnapshotRequest, Result, SnapshotInfo,
};
use pav_templates::{GroupMember, Phase};

use super::PodController;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding};
use crate::pods::results;
use crate::recipe::PlanError;
use crate::snapshots::RecordedGroup;

/// Why a group snapshot call failed: one variant per step;
/// `From<GroupSnapshotError> for pav_sdk::Error` is the one mapping to CSI
/// codes.
#[derive(Debug, thiserror::Error)]
enum GroupSnapshotError {
    /// No PersistentVolume of this driver has a source handle.
    #[error("no PersistentVolume of driver {provisioner} has volume handle {handle:?}")]
    NoVolume {
        /// The driver.
        provisioner: String,
        /// The source handle asked about.
        handle: String,
    },
    /// The PavProvisioner lost `spec.groupSnapshotCreation` since the
    /// driver started.
    #[error(
        "PavProvisioner {provisioner} has no spec.groupSnapshotCreation: it takes no group snapshots"
    )]
    NoSection {
        /// Its name.
        provisioner: String,
    },
    /// Reading the sources' claims or the recorded groups.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// Planning the group snapshot creation or deletion phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The group snapshot creation or deletion pod failed or did not
    /// finish.
    #[error(transparent)]
    Pod(PhaseError),
    /// The group's handle, from the spec or the pod, is no handle.
    #[error("group snapshot handle {0:?} must be 1 to 128 bytes on one line")]
    Handle(String),
    /// The pod's `/pav/snapshots` is missing or does not name one snapshot
    /// per source.
    #[error("group snapshot creation pod {pod}: /pav/snapshots: {message}")]
    Members {
        /// The pod, `namespace/name`.
        pod: String,
        /// What is wrong.
        message: String,
    },
    /// No VolumeGroupSnapshotContent of this driver records the group.
    #[error(
        "no VolumeGroupSnapshotContent of driver {provisioner} records group snapshot {handle:?}"
    )]
    Unknown {
        /// The driver.
        provisioner: String,
        /// The group's handle.
        handle: String,
    },
    /// A source volume's PersistentVolume has no capacity (each member's
    /// size).
    #[error(transparent)]
    SourceCapacity(pav_templates::Error),
    /// The members the CO named are not the group's.
    #[error(transparent)]
    NotMembers(Error),
}

impl From<GroupSnapshotError> for Error {
    /// An unknown source or group is `NOT_FOUND`; a provisioner without
    /// the section `FAILED_PRECONDITION`; members that are not the
    /// group's `INVALID_ARGUMENT`; what the spec or a pod got wrong
    /// `INTERNAL`; the API, render and pod-run steps keep the code of the
    /// driver's error. csi-snapshotter retries every error with backoff.
    fn from(error: GroupSnapshotError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            GroupSnapshotError::NoVolume { .. } | GroupSnapshotError::Unknown { .. } => {
                Error::NotFound(message)
            }
            GroupSnapshotError::NoSection { .. } => Error::FailedPrecondition(message),
            GroupSnapshotError::NotMembers(e) => e,
            GroupSnapshotError::Plan(PlanError::Context(_))
            | GroupSnapshotError::SourceCapacity(_)
            | GroupSnapshotError::Pod(PhaseError::Failed(_))
            | GroupSnapshotError::Handle(_)
            | GroupSnapshotError::Members { .. } => Error::Internal(message),
            GroupSnapshotError::Plan(e) => e.into(),
            GroupSnapshotError::ReadObjects(e) | GroupSnapshotError::Pod(PhaseError::Run(e)) => {
                e.into()
            }
        }
    }
}

#[pav_sdk::async_trait]
impl GroupSnapshot for PodController {
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        self.take_group_snapshot(&req).await.map_err(Error::from)
    }

    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()> {
        self.remove_group_snapshot(&req).await.map_err(Error::from)
    }

    /// The group as its VolumeGroupSnapshotContent records it: the state
    /// of a PaV group snapshot lives there, as a snapshot's in its
    /// VolumeSnapshotContent.
    async fn get_group_snapshot(&self, req: GetGroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        self.recorded_group_snapshot(&req)
            .await
            .map_err(Error::from)
    }
}

impl PodController {
    async fn recorded_group(
        &self,
        handle: &str,
    ) -> std::result::Result<Option<RecordedGroup>, GroupSnapshotError> {
        let groups = self
            .records
            .groups()
            .await
            .map_err(GroupSnapshotError::ReadObjects)?;
        Ok(groups.into_iter().find(|g| g.handle == handle))
    }

    async fn take_group_snapshot(
        &self,
        req: &GroupSnapshotRequest,
    ) -> std::result::Result<GroupSnapshotInfo, GroupSnapshotError> {
        let provisioner = &self.driver.provisioner;
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(GroupSnapshotError::Plan)?;
        if !planner.compiled().has_phase(Phase::GroupSnapshotCreation) {
            return Err(GroupSnapshotError::NoSection {
                provisioner: provisioner.clone(),
            });
        }
        let mut sources: Vec<(PersistentVolume, Option<PersistentVolumeClaim>)> = Vec::new();
        let mut sizes = Vec::with_capacity(req.sources.len());
        for handle in &req.sources {
            let pv =
                self.records
                    .volume(handle)
                    .await
                    .ok_or_else(|| GroupSnapshotError::NoVolume {
                        provisioner: provisioner.clone(),
                        handle: handle.to_string(),
                    })?;
            let pvc = self
                .records
                .claim_of(&pv)
                .await
                .map_err(GroupSnapshotError::ReadObjects)?;
            // A member needs its source's capacity to be restored.
            sizes.push(
                pav_templates::context::pv_capacity(&pv)
                    .map_err(GroupSnapshotError::SourceCapacity)?,
            );
            sources.push(((*pv).clone(), pvc));
        }
        let (name, parameters, planned_sources) =
            (req.name.clone(), req.parameters.clone(), sources.clone());
        let creation = planner
            .blocking(move |p| {
                let members: Vec<GroupMember<'_>> = (planned_sources.iter())
                    .map(|(pv, pvc)| GroupMember {
                        pv,
                        pvc: pvc.as_ref(),
                    })
                    .collect();
                p.group_snapshot_creation(&name, &parameters, &members)
            })
            .await
            .map_err(GroupSnapshotError::Plan)?;
        let pod = &creation.pod;
        let pod_name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        // Events go to each member's claim.
        let claims: Vec<_> = (sources.iter())
            .filter_map(|(_, pvc)| pvc.as_ref())
            .map(|pvc| pvc.object_ref(&()))
            .collect();
        let exported = (self.driver)
            .run(
                (Phase::GroupSnapshotCreation, pod),
                PodFiles::Collected,
                Regarding::Objects(&claims),
            )
            .await
            .map_err(GroupSnapshotError::Pod)?;
        let handle = results::exported_handle(
            creation.evaluated.handle.as_deref(),
            exported.as_ref(),
            &req.name,
        )
        .map_err(GroupSnapshotError::Handle)?;
        let members = |message: String| GroupSnapshotError::Members {
            pod: pod_name.clone(),
            message,
        };
        let written = (exported.as_ref())
            .and_then(|c| c.snapshots.as_deref())
            .ok_or_else(|| members("the pod did not write it".into()))?;
        let source_handles: Vec<&str> = req.sources.iter().map(|s| s.as_str()).collect();
        let snapshot_handles =
            results::parse_group_members(written, &source_handles).map_err(members)?;
        let now = SystemTime::now();
        let snapshots: Vec<SnapshotInfo> = (snapshot_handles.into_iter())
            .zip(source_handles.iter().zip(sizes))
            .map(|(snapshot, (source, size))| SnapshotInfo::new(snapshot, *source, size, now))
            .collect();
        tracing::info!(group = %req.name, handle, members = snapshots.len(), "group snapshot taken");
        Ok(GroupSnapshotInfo::new(handle, snapshots, now))
    }

    async fn remove_group_snapshot(
        &self,
        req: &DeleteGroupSnapshotRequest,
    ) -> std::result::Result<(), GroupSnapshotError> {
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(GroupSnapshotError::Plan)?;
        if !planner.compiled().has_phase(Phase::GroupSnapshotDeletion) {
            return Ok(());
        }
        let recorded = self.recorded_group(&req.handle).await?;
        let recorded_members = recorded.map(|g| g.members).unwrap_or_default();
        let source_of = |snapshot: &str| {
            (recorded_members.iter())
                .find(|m| m.handle == snapshot && !m.source.is_empty())
                .map(|m| m.source.clone())
        };
        // The members the CO names, else those recorded.
        let snapshots: Vec<(String, Option<String>)> = if req.snapshot_ids.is_empty() {
            (recorded_members.iter())
                .map(|m| (m.handle.clone(), source_of(&m.handle)))
                .collect()
        } else {
            (req.snapshot_ids.iter())
                .map(|id| (id.to_string(), source_of(id.as_str())))
                .collect()
        };
        let handle = req.handle.to_string();
        let deletion = planner
            .blocking(move |p| p.group_snapshot_deletion(&handle, &snapshots))
            .await
            .map_err(GroupSnapshotError::Plan)?;
        let Some(pod) = &deletion.pod else {
            return Ok(());
        };
        (self.driver)
            .run(
                (Phase::GroupSnapshotDeletion, pod),
                PodFiles::Collected,
                Regarding::Provisioner,
            )
            .await
            .map(drop)
            .map_err(GroupSnapshotError::Pod)
    }

    async fn recorded_group_snapshot(
        &self,
        req: &GetGroupSnapshotRequest,
    ) -> std::result::Result<GroupSnapshotInfo, GroupSnapshotError> {
        let group =
            self.recorded_group(&req.handle)
                .await?
                .ok_or_else(|| GroupSnapshotError::Unknown {
                    provisioner: self.driver.provisioner.clone(),
                    handle: req.handle.to_string(),
                })?;
        pav_sdk::group_snapshot::check_members(
            &group.handle,
            &req.snapshot_ids,
            group.members.iter().map(|m| m.handle.as_str()),
        )
        .map_err(GroupSnapshotError::NotMembers)?;
        let created = (group.members.iter())
            .map(|m| m.created)
            .min()
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Ok(GroupSnapshotInfo::new(group.handle, group.members, created))
    }
}
