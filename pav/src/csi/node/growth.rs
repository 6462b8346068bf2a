//! NodeExpandVolume and NodeGetVolumeStats of a staged volume: the node
//! expansion pod (`spec.volumeNodeExpansion`), the staging pod's
//! `/pav/stats`, and the volume's condition from the health check pod
//! (`spec.volumeHealth`) or the staging pod's `/pav/condition`. All find
//! the volume's staging pod by its handle and the path kubelet published
//! it at.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::{Api, ResourceExt};
use pav_sdk::{
    Error, NodeExpand, NodeExpandRequest, Result, Stats, StatsRequest, VolumeCondition, VolumeStats,
};
use pav_templates::Phase;
use pav_templates::phase::DEFAULT_HEALTH_CHECK_EVERY;

use super::PodNode;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding, api_error, core_ref};
use crate::pods::results;
use crate::pods::{
    ANNOTATION_CLAIM, ANNOTATION_CLIENT, ANNOTATION_PV, ANNOTATION_READ_ONLY, StagedVolume,
    has_labels, staging_selector,
};
use crate::recipe::PlanError;

/// Why NodeExpandVolume or NodeGetVolumeStats failed: one variant per
/// step; `From<GrowthError> for pav_sdk::Error` is the one mapping to CSI
/// codes.
#[derive(Debug, thiserror::Error)]
enum GrowthError {
    /// Reading the pod cache for the staging pod.
    #[error(transparent)]
    ListStagingPods(DriverError),
    /// No staging pod on this node has the volume at that path.
    #[error("volume {handle:?} is not staged at {path} on node {node}")]
    NotStaged {
        /// The volume handle.
        handle: String,
        /// The path kubelet gave.
        path: String,
        /// This node.
        node: String,
    },
    /// Planning the node expansion or the health check.
    #[error(transparent)]
    Plan(PlanError),
    /// The staging pod does not record its claim or volume.
    #[error("staging pod {pod} records no {what}")]
    Unrecorded {
        /// The staging pod, `namespace/name`.
        pod: String,
        /// The annotation missing.
        what: &'static str,
    },
    /// Reading the claim, volume or node.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// The request names no capacity and the PersistentVolume has none.
    #[error(transparent)]
    Capacity(pav_templates::Error),
    /// The node expansion pod failed or did not finish.
    #[error(transparent)]
    NodeExpansionPod(PhaseError),
    /// The staging pod's `/pav/stats` is not `used` and `available`.
    #[error("staging pod {pod}: /pav/stats: {message}")]
    Stats {
        /// The staging pod, `namespace/name`.
        pod: String,
        /// What is wrong.
        message: String,
    },
    /// Nothing measured the volume.
    #[error("volume {0:?}: its filesystem cannot be measured")]
    Unmeasured(String),
    /// The health check pod could not be run, or did not end: no verdict
    /// on the volume (a pod that failed is one: the volume is abnormal).
    #[error(transparent)]
    HealthCheckPod(DriverError),
    /// A `/pav/condition` that is not `abnormal` and `message`.
    #[error("{pod}: /pav/condition: {message}")]
    Condition {
        /// The pod that wrote it, `namespace/name`.
        pod: String,
        /// What is wrong.
        message: String,
    },
}

impl From<GrowthError> for Error {
    /// A volume not staged here is `NOT_FOUND`; what the staging pod, the
    /// spec or the objects got wrong, and a failed pod, `INTERNAL`; the
    /// API, render and pod-run steps keep the code of the driver's error.
    /// kubelet retries both calls.
    fn from(error: GrowthError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            GrowthError::NotStaged { .. } => Error::NotFound(message),
            GrowthError::Unrecorded { .. }
            | GrowthError::Plan(PlanError::Context(_))
            | GrowthError::Capacity(_)
            | GrowthError::NodeExpansionPod(PhaseError::Failed(_))
            | GrowthError::Stats { .. }
            | GrowthError::Unmeasured(_)
            | GrowthError::Condition { .. } => Error::Internal(message),
            GrowthError::Plan(e) => e.into(),
            GrowthError::ListStagingPods(e)
            | GrowthError::ReadObjects(e)
            | GrowthError::NodeExpansionPod(PhaseError::Run(e))
            | GrowthError::HealthCheckPod(e) => e.into(),
        }
    }
}

#[pav_sdk::async_trait]
impl NodeExpand for PodNode {
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        self.grow(&req).await.map_err(Error::from)
    }
}

#[pav_sdk::async_trait]
impl Stats for PodNode {
    async fn stats(&self, req: StatsRequest) -> Result<VolumeStats> {
        self.usage(&req).await.map_err(Error::from)
    }
}

/// `pod`'s `/pav/condition`, `text`.
fn parse_condition(pod: &Pod, text: &str) -> std::result::Result<VolumeCondition, GrowthError> {
    results::parse_condition(text).map_err(|message| GrowthError::Condition {
        pod: pod_name(pod),
        message,
    })
}

fn pod_name(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

impl PodNode {
    /// The staging pod of `handle` on this node, from the node plugin's
    /// pod cache (kubelet asks for stats of every published volume
    /// periodically, which must cost no request): the one staged at
    /// `staging_path` (the volume staged per node: pav-csi gives its record),
    /// else the one published at `path` (staged per pod, as is every
    /// ephemeral inline volume).
    async fn staging_pod_at(
        &self,
        handle: &str,
        path: &Path,
        staging_path: Option<&Path>,
    ) -> std::result::Result<Arc<Pod>, GrowthError> {
        let pods = (self.driver.pods.cached_all().await).map_err(GrowthError::ListStagingPods)?;
        let staged_at = |path: &Path| {
            let selector = staging_selector(handle, &path.display().to_string(), &self.node);
            pods.iter().find(|pod| has_labels(pod, &selector)).cloned()
        };
        staging_path
            .and_then(staged_at)
            .or_else(|| staged_at(path))
            .ok_or_else(|| GrowthError::NotStaged {
                handle: handle.to_owned(),
                path: path.display().to_string(),
                node: self.node.clone(),
            })
    }

    async fn grow(&self, req: &NodeExpandRequest) -> std::result::Result<u64, GrowthError> {
        let staging = self
            .staging_pod_at(&req.handle, &req.volume_path, req.staging_path.as_deref())
            .await?;
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(GrowthError::Plan)?;
        let (pvc, pv, node) = self.staged_objects(&staging).await?;
        let capacity = match req.capacity.min_bytes {
            Some(bytes) => bytes,
            None => pav_templates::context::pv_capacity(&pv).map_err(GrowthError::Capacity)?,
        };
        if !planner.compiled().has_phase(Phase::NodeExpansion) {
            // Nothing grows on the node: the controller's answer said so.
            return Ok(capacity);
        }
        let read_only = staging
            .annotations()
            .get(ANNOTATION_READ_ONLY)
            .map(String::as_str)
            == Some("true");
        // Events go to the client pod the volume was staged for; staged
        // per node, to the claim.
        let regarding = match (staging.annotations().get(ANNOTATION_CLIENT))
            .and_then(|c| crate::pods::parse_client(c))
        {
            Some((ns, name, uid)) => core_ref("Pod", ns, name, Some(uid)),
            None => kube::Resource::object_ref(&pvc, &()),
        };
        let staged = StagedVolume::of(&staging);
        let pod = planner
            .blocking(move |p| p.node_expansion(&pvc, &pv, &node, read_only, &staged, capacity))
            .await
            .map_err(GrowthError::Plan)?
            .pod;
        let dir = self.dir(&pod.name_any());
        (self.driver)
            .run(
                (Phase::NodeExpansion, &pod),
                PodFiles::Local(&dir),
                Regarding::Objects(std::slice::from_ref(&regarding)),
            )
            .await
            .map_err(GrowthError::NodeExpansionPod)?;
        tracing::info!(handle = %req.handle, capacity, "volume grown on the node");
        Ok(capacity)
    }

    /// The claim, volume and node a staging pod was made for.
    async fn staged_objects(
        &self,
        staging: &Pod,
    ) -> std::result::Result<(PersistentVolumeClaim, PersistentVolume, Node), GrowthError> {
        let annotations = staging.annotations();
        let unrecorded = |what| GrowthError::Unrecorded {
            pod: pod_name(staging),
            what,
        };
        let (namespace, claim) = annotations
            .get(ANNOTATION_CLAIM)
            .and_then(|c| crate::pods::parse_claim(c))
            .ok_or_else(|| unrecorded(ANNOTATION_CLAIM))?;
        let pv_name = annotations
            .get(ANNOTATION_PV)
            .ok_or_else(|| unrecorded(ANNOTATION_PV))?;
        let client = self.driver.client.clone();
        let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
            .get(claim)
            .await
            .map_err(|e| {
                GrowthError::ReadObjects(api_error(
                    &format!("PersistentVolumeClaim {namespace}/{claim}"),
                    e,
                ))
            })?;
        let pv = Api::<PersistentVolume>::all(client)
            .get(pv_name)
            .await
            .map_err(|e| {
                GrowthError::ReadObjects(api_error(&format!("PersistentVolume {pv_name}"), e))
            })?;
        let node = self
            .node_object()
            .await
            .map_err(GrowthError::ReadObjects)?
            .ok_or_else(|| {
                GrowthError::ReadObjects(DriverError::NotFound {
                    what: format!("Node {}", self.node),
                })
            })?;
        Ok((pvc, pv, node))
    }

    /// The volume's usage and condition: see [`measured`](Self::measured)
    /// and [`condition`](Self::condition).
    async fn usage(&self, req: &StatsRequest) -> std::result::Result<VolumeStats, GrowthError> {
        let staging = self
            .staging_pod_at(&req.handle, &req.volume_path, req.staging_path.as_deref())
            .await?;
        let mut stats = self.measured(&staging, req)?;
        stats.condition = self.condition(&staging).await?;
        Ok(stats)
    }

    /// The volume's usage: the staging pod's `/pav/stats` when it wrote
    /// one, else what pav-csi measured of the filesystem at `/pav/volume`
    /// (bind-mounted at the published path).
    fn measured(
        &self,
        staging: &Pod,
        req: &StatsRequest,
    ) -> std::result::Result<VolumeStats, GrowthError> {
        let written = results::read_exported(&self.dir(&staging.name_any()), "stats");
        let Some(text) = written else {
            return req
                .measured
                .clone()
                .ok_or_else(|| GrowthError::Unmeasured(req.handle.to_string()));
        };
        let usage = results::parse_stats(&text).map_err(|message| GrowthError::Stats {
            pod: pod_name(staging),
            message,
        })?;
        let mut stats = VolumeStats::bytes(usage);
        if let Some(inodes) = req.measured.as_ref().and_then(|m| m.inodes) {
            stats = stats.with_inodes(inodes);
        }
        Ok(stats)
    }

    /// The staged volume's condition. With `spec.volumeHealth`, its health
    /// check pod's: run when the last answer for this staging no longer
    /// stands (`every`), which costs no request in between; a pod that
    /// failed makes the volume abnormal with its message, one that wrote
    /// no `/pav/condition` healthy. While the node runs as many checks as
    /// it may ([`HEALTH_CHECKS_AT_ONCE`](super::HEALTH_CHECKS_AT_ONCE)),
    /// the last answer (none before the first). Without it (and for an ephemeral
    /// inline volume), the staging pod's own `/pav/condition` (a pod that
    /// keeps running may keep it current), else none: pav-csi answers
    /// healthy.
    async fn condition(
        &self,
        staging: &Pod,
    ) -> std::result::Result<Option<VolumeCondition>, GrowthError> {
        let staging_name = staging.name_any();
        let planner = (self.driver.served.planner().await).map_err(GrowthError::Plan)?;
        // An ephemeral inline volume has no claim or volume for a check's
        // context: its staging pod alone may tell.
        let ephemeral = (staging.annotations().get(ANNOTATION_CLAIM)).is_none_or(String::is_empty);
        if ephemeral || !planner.compiled().has_phase(Phase::Health) {
            let written = results::read_exported(&self.dir(&staging_name), "condition");
            return (written.as_deref())
                .map(|text| parse_condition(staging, text))
                .transpose();
        }
        if let Some(condition) = self.conditions.fresh(&staging_name) {
            return Ok(Some(condition));
        }
        let Ok(_checking) = self.health_checks.try_acquire() else {
            return Ok(self.conditions.latest(&staging_name));
        };
        let (pvc, pv, node) = self.staged_objects(staging).await?;
        let claim = kube::Resource::object_ref(&pvc, &());
        let read_only = staging
            .annotations()
            .get(ANNOTATION_READ_ONLY)
            .map(String::as_str)
            == Some("true");
        let staged = StagedVolume::of(staging);
        let now = std::time::SystemTime::now();
        let plan = planner
            .blocking(move |p| p.health(&pvc, &pv, &node, read_only, &staged, now))
            .await
            .map_err(GrowthError::Plan)?;
        let pod = plan.pod;
        let dir = self.dir(&pod.name_any());
        // The condition reaches the client pods' events through the
        // kubelet; the claim says which check failed and why.
        let ran = (self.driver)
            .run(
                (Phase::Health, &pod),
                PodFiles::Local(&dir),
                Regarding::Objects(std::slice::from_ref(&claim)),
            )
            .await;
        let condition = match ran {
            Ok(files) => match files.and_then(|f| f.condition) {
                Some(text) => parse_condition(&pod, &text)?,
                None => VolumeCondition::healthy(),
            },
            Err(PhaseError::Failed(message)) => VolumeCondition::abnormal(message),
            Err(PhaseError::Run(e)) => return Err(GrowthError::HealthCheckPod(e)),
        };
        if condition.abnormal {
            tracing::warn!(staging = %staging_name, message = %condition.message, "volume abnormal");
        }
        let every = plan.evaluated.every.unwrap_or(DEFAULT_HEALTH_CHECK_EVERY);
        self.conditions
            .record(staging_name, condition.clone(), every);
        Ok(Some(condition))
    }
}
