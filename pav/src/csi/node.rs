//! Staging and unstaging carried out by pods (`pav csi-node`); the
//! collection of `/pav` files of the controller's pods on this node is
//! [`collector`]'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec,
};
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use pav_sdk::{PodInfo, Result, Stage, StageRequest, Staged, Unstage, UnstageRequest};
use pav_templates::Phase;

use super::context::{DriverContext, DriverError, api_error, core_ref, pod_ref};
use crate::csi::context::{Lifetime, PhaseError, PodFiles, Regarding, RunFailure};
use crate::phases::StagingFor;
use crate::pods::results;
use crate::recipe::Planner;

pub mod collector;
mod ephemeral;
mod error;
mod growth;
mod tokens;

pub use self::collector::{collect, sweep_dirs};
pub use self::error::{StageError, UnstageError};
use crate::pods::dir::{PodDirError, ReportedMounts, remove_pod_dir};
use crate::pods::{
    ANNOTATION_CLAIM, ANNOTATION_CLIENT, ANNOTATION_PV, ANNOTATION_READ_ONLY,
    ANNOTATION_STAGING_POD, ANNOTATION_UNSTAGING, FINALIZER_UNSTAGE, LABEL_NODE, LABEL_PHASE,
    LABEL_VOLUME, label_value, staging_selector,
};

/// How often a staging in progress checks that its client pod still exists.
const CLIENT_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Health check pods running at once on one node. Every staged volume is
/// due a check each `every` (a minute by default): with 200 volumes that
/// is more pods than the test cluster's nodes start in a minute
/// (docs/performance.md), and the checks would crowd out the pods that
/// stage volumes. A volume whose check cannot start now keeps its last
/// answer and is checked on a later call.
const HEALTH_CHECKS_AT_ONCE: usize = 2;

/// How a claim's volume is staged on the node (`spec.stagingPer`);
/// ephemeral inline volumes are staged per pod either way.
#[derive(Debug)]
pub enum Staging {
    /// One staging pod per client pod, in NodePublishVolume (the guide's).
    PerPod,
    /// One staging pod per node, in NodeStageVolume, for all the node's
    /// client pods of the volume; the volume is found by its handle in
    /// this watch of PersistentVolumes (kubelet names no pod there).
    PerNode(Store<PersistentVolume>),
}

/// The pav-sdk Stage and Unstage of a PavProvisioner on one node.
#[derive(Debug)]
pub struct PodNode {
    driver: Arc<DriverContext>,
    node: String,
    pods_dir: PathBuf,
    staging: Staging,
    unmount_failures: ReportedMounts,
    /// The health checks' answers, per staging pod.
    conditions: crate::csi::answers::Answers<pav_sdk::VolumeCondition>,
    /// Permits for health check pods ([`HEALTH_CHECKS_AT_ONCE`]).
    health_checks: tokio::sync::Semaphore,
}

impl PodNode {
    /// Stages on `node`; `pods_dir` is where this process sees the nodes'
    /// `/var/lib/pav/pods`.
    pub fn new(
        driver: Arc<DriverContext>,
        node: String,
        pods_dir: PathBuf,
        staging: Staging,
    ) -> Self {
        PodNode {
            driver,
            node,
            pods_dir,
            staging,
            unmount_failures: ReportedMounts::default(),
            conditions: Default::default(),
            health_checks: tokio::sync::Semaphore::new(HEALTH_CHECKS_AT_ONCE),
        }
    }

    fn dir(&self, pod_name: &str) -> PathBuf {
        self.pods_dir.join(pod_name)
    }

    /// The claim and volume a client pod uses for `handle`: the pod's
    /// claims (and generic ephemeral volumes), their `volumeName`s, and the
    /// PersistentVolume of this driver with that handle. No listing.
    async fn find_volume(
        &self,
        client_pod: &Pod,
        handle: &str,
    ) -> std::result::Result<(PersistentVolumeClaim, PersistentVolume), StageError> {
        let namespace = client_pod.namespace().unwrap_or_default();
        let pvcs: Api<PersistentVolumeClaim> =
            Api::namespaced(self.driver.client.clone(), &namespace);
        let pvs: Api<PersistentVolume> = Api::all(self.driver.client.clone());
        let volumes = client_pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten();
        for volume in volumes {
            let claim = match (&volume.persistent_volume_claim, &volume.ephemeral) {
                (Some(source), _) => source.claim_name.clone(),
                (None, Some(_)) => format!("{}-{}", client_pod.name_any(), volume.name),
                _ => continue,
            };
            let Some(pvc) = pvcs.get_opt(&claim).await.map_err(|e| {
                StageError::ReadObjects(api_error(
                    &format!("PersistentVolumeClaim {namespace}/{claim}"),
                    e,
                ))
            })?
            else {
                continue;
            };
            let Some(pv_name) = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
                continue;
            };
            let Some(pv) = pvs.get_opt(&pv_name).await.map_err(|e| {
                StageError::ReadObjects(api_error(&format!("PersistentVolume {pv_name}"), e))
            })?
            else {
                continue;
            };
            let matches = pv
                .spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|c| c.driver == self.driver.provisioner && c.volume_handle == handle);
            if matches {
                return Ok((pvc, pv));
            }
        }
        Err(StageError::NoVolume {
            pod: format!("{namespace}/{}", client_pod.name_any()),
            handle: handle.to_owned(),
            provisioner: self.driver.provisioner.clone(),
        })
    }

    /// The PersistentVolume of this driver with `handle`, from `volumes`
    /// (from a list when the watch has not seen it yet: a volume made a
    /// moment ago), and the claim it is bound to, read now (the same uid
    /// as the volume's claimRef).
    async fn claimed_volume(
        &self,
        volumes: &Store<PersistentVolume>,
        handle: &str,
    ) -> std::result::Result<(PersistentVolumeClaim, PersistentVolume), StageError> {
        let unclaimed = || StageError::Unclaimed {
            handle: handle.to_owned(),
            provisioner: self.driver.provisioner.clone(),
        };
        let has_handle = |pv: &PersistentVolume| {
            (pv.spec.as_ref())
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|c| c.driver == self.driver.provisioner && c.volume_handle == handle)
        };
        // Not waiting for the watch's first list: a watch that cannot
        // start (the API server away) must not hold the volume.
        let pv = match volumes.find(|pv| has_handle(pv)) {
            Some(watched) => PersistentVolume::clone(&watched),
            None => Api::<PersistentVolume>::all(self.driver.client.clone())
                .list(&Default::default())
                .await
                .map_err(|e| StageError::ReadObjects(api_error("listing PersistentVolumes", e)))?
                .items
                .into_iter()
                .find(has_handle)
                .ok_or_else(unclaimed)?,
        };
        let pvc = (self.driver.claim_of(&pv).await)
            .map_err(StageError::ReadObjects)?
            .ok_or_else(unclaimed)?;
        Ok((pvc, pv))
    }

    /// This node's Node object, if it exists.
    async fn node_object(&self) -> std::result::Result<Option<Node>, DriverError> {
        Api::<Node>::all(self.driver.client.clone())
            .get_opt(&self.node)
            .await
            .map_err(|e| api_error(&format!("Node {}", self.node), e))
    }

    /// Stages `volume` for `req`: for client pod `client`, or (`None`)
    /// for all the node's client pods of it.
    async fn stage_volume(
        &self,
        req: &StagingRequest<'_>,
        volume: Volume,
        client: Option<&PodInfo>,
    ) -> std::result::Result<Staged, StageError> {
        let node = self
            .node_object()
            .await
            .map_err(StageError::ReadObjects)?
            .ok_or_else(|| {
                StageError::ReadObjects(DriverError::NotFound {
                    what: format!("Node {}", self.node),
                })
            })?;
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(StageError::Plan)?;
        let (handle, target_path) = (
            req.handle.to_string(),
            req.target_path.display().to_string(),
        );
        let client_pod =
            client.map(|info| (info.namespace.clone(), info.name.clone(), info.uid.clone()));
        let (read_only, publish_context) = (req.read_only, req.publish_context.clone());
        // Kubelet unstages a Filesystem volume staged per node only once
        // its filesystem is mounted at the staging path alone: it is moved
        // there (move_to_staging_path).
        let moved = client.is_none() && !req.block;
        let pod = planner
            .blocking(move |p| {
                let staging = StagingFor {
                    handle: &handle,
                    target_path: &target_path,
                    client: (client_pod.as_ref())
                        .map(|(ns, name, uid)| (&ns[..], &name[..], &uid[..])),
                    read_only,
                    publish_context: &publish_context,
                    moved_to: moved.then_some(&target_path[..]),
                };
                match volume {
                    Volume::Claimed(pvc, pv) => p.staging(&pvc, &pv, &node, &staging),
                    Volume::Inline(attributes, size) => {
                        p.ephemeral_staging(&attributes, size, &node, &staging)
                    }
                }
            })
            .await
            .map_err(StageError::Plan)?
            .pod;
        let name = pod.name_any();
        let dir = self.dir(&name);
        // Before the pod starts, and again at each republish (renewed).
        let (tokens_dir, tokens) = (dir.clone(), req.tokens.clone());
        let written =
            tokio::task::spawn_blocking(move || tokens::write_tokens(&tokens_dir, &tokens));
        written
            .await
            .expect("writing tokens does not panic")
            .map_err(StageError::Tokens)?;
        let volume = dir.join("volume");
        let block = req.block;
        // The pod stays while its volume is staged; the run ends once the
        // volume it exposes is ready (or the pod ended), then checked.
        let lifetime = Lifetime {
            ends_when_ready: true,
            kept: true,
        };
        // NodeStageVolume's error reports a failure, on the client pod.
        let regarding = Regarding::Objects(&[]);
        let staged = self.driver.run_with(
            (Phase::Staging, &pod),
            PodFiles::Local(&dir),
            regarding,
            lifetime,
            |_| check_volume(&volume, block),
        );
        // The call runs to completion even once kubelet has given up on
        // it, and holds the volume meanwhile: a staging pod that never
        // ends must not keep the NodeUnpublishVolume for a deleted client
        // waiting until the phase times out.
        // Staged per node, kubelet unstages what it asked to stage once
        // no pod needs it.
        let finished = match client {
            None => staged.await,
            Some(info) => tokio::select! {
                finished = staged => finished,
                () = self.client_gone(info) => {
                    let client = format!("{}/{}", info.namespace, info.name);
                    tracing::info!(pod = %name, client, "the client pod went mid-staging: undoing the staging");
                    let undo = self.tear_down(&pod).await.err().map(Box::new);
                    return Err(StageError::ClientGone { pod: client, undo });
                }
            },
        };
        let message = match finished {
            Ok(()) if moved => {
                return self.move_to_staging_path(&volume, req.target_path).await;
            }
            Ok(()) => return Ok(Staged::at(volume)),
            Err(RunFailure::Pod(PhaseError::Run(e))) => return Err(StageError::StagingPod(e)),
            Err(RunFailure::Pod(PhaseError::Failed(message))) => message,
            // An unusable volume fails the pod's staging as its failure would.
            Err(RunFailure::Unusable(unusable)) => results::pod_failure(
                Phase::Staging,
                &pod.namespace().unwrap_or_default(),
                &name,
                results::read_exported(&dir, "error").as_deref(),
                &unusable.to_string(),
            ),
        };
        // The guide: a failed staging runs the unstaging pod.
        let undo = self.tear_down(&pod).await.err().map(Box::new);
        Err(StageError::Failed { message, undo })
    }

    /// Moves the volume a staging pod put at `volume` (its `/pav/volume`)
    /// to `staging_path`: a bind mount there, then the pod's own mount
    /// undone. Kubelet's NodeUnstageVolume waits as long as the staged
    /// filesystem is mounted anywhere but the staging path (its
    /// GetDeviceMountRefs), so it must not stay at the pod's path too.
    /// Once moved, a repeat finds it so.
    async fn move_to_staging_path(
        &self,
        volume: &Path,
        staging_path: &Path,
    ) -> std::result::Result<Staged, StageError> {
        use pav_csi::mount;
        let is_mounted = async |path: &Path| {
            mount::is_mounted(path)
                .await
                .map_err(|source| StageError::MountTable {
                    path: path.display().to_string(),
                    source,
                })
        };
        let moved_already = !is_mounted(volume).await? && is_mounted(staging_path).await?;
        if !moved_already {
            mount::mount_once(volume, staging_path, "", mount::MountFlags::BIND, "")
                .await
                .map_err(|source| StageError::BindStagingPath {
                    path: staging_path.display().to_string(),
                    source,
                })?;
            mount::unmount(volume)
                .await
                .map_err(|source| StageError::UnmountPodMount {
                    path: volume.display().to_string(),
                    source,
                })?;
        }
        Ok(Staged::at(staging_path))
    }

    /// Returns once client pod `info` is gone or terminating (a pod of
    /// the same name with another uid is another pod), asking every 5 s;
    /// never while the API server cannot say.
    async fn client_gone(&self, info: &PodInfo) {
        let api = Api::<Pod>::namespaced(self.driver.client.clone(), &info.namespace);
        loop {
            tokio::time::sleep(CLIENT_CHECK_INTERVAL).await;
            match api.get_opt(&info.name).await {
                Ok(None) => return,
                Ok(Some(pod))
                    if pod.uid().as_deref() != Some(info.uid.as_str())
                        || pod.metadata.deletion_timestamp.is_some() =>
                {
                    return;
                }
                Ok(Some(_)) | Err(_) => {}
            }
        }
    }

    /// Stops a staging pod, runs the unstaging pod, cleans up the `/pav`
    /// directories and finally lets the staging pod go. Safe to repeat.
    async fn tear_down(&self, staging: &Pod) -> std::result::Result<(), UnstageError> {
        let annotations = staging.annotations();
        let get = |key: &str| annotations.get(key).cloned().unwrap_or_default();
        let (claim, pv_name) = (get(ANNOTATION_CLAIM), get(ANNOTATION_PV));
        let read_only = get(ANNOTATION_READ_ONLY) == "true";
        let key = staging
            .labels()
            .get(LABEL_VOLUME)
            .cloned()
            .unwrap_or_default();
        let namespace = staging.namespace().unwrap_or_default();
        let name = staging.name_any();

        // Render the unstaging phase while the objects are certainly there;
        // when the claim, volume or node is gone already (a terminated
        // client pod does not keep them), use what was rendered when
        // staging.
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(UnstageError::Plan)?;
        let unstaging_pod = match self
            .plan_unstaging(&planner, &claim, &pv_name, read_only, &key)
            .await?
        {
            LiveUnstaging::Planned(pod) => pod.map(|pod| *pod),
            LiveUnstaging::Gone { what } => match annotations.get(ANNOTATION_UNSTAGING) {
                Some(json) => {
                    let recorded: Option<PodTemplateSpec> =
                        serde_json::from_str(json).map_err(UnstageError::RecordedUnstaging)?;
                    recorded.map(|template| {
                        planner
                            .origin()
                            .unstaging_pod(&template, &key, &self.node, &claim)
                    })
                }
                None => {
                    tracing::warn!(pod = %name, %what, "cannot render the unstaging phase: no unstaging pod");
                    None
                }
            },
        };

        // 1. Stop the staging pod; its finalizer keeps the object (and this
        //    state) until unstaging is done.
        (self.driver.pods)
            .stop(Phase::Unstaging, staging)
            .await
            .map_err(UnstageError::StopStagingPod)?;

        // 2. The health checks this staging left running: a check whose
        //    NodeGetVolumeStats kubelet gave up on keeps its pod for the
        //    next call of its round, which never comes once unstaged.
        if planner.compiled().has_phase(Phase::Health) {
            self.delete_checks_of(&name).await;
        }

        // 3. The unstaging pod, on this node.
        if let Some(pod) = unstaging_pod {
            let dir = self.dir(&pod.name_any());
            // NodeUnpublishVolume's error reports it (UnstagingFailed).
            let regarding = Regarding::Objects(&[]);
            (self.driver)
                .run((Phase::Unstaging, &pod), PodFiles::Local(&dir), regarding)
                .await
                .map_err(UnstageError::UnstagingPod)?;
        }

        // 4. Unmount what the staging pod left (a pod that ran to completion
        //    leaves its mounts at /pav/volume), clean up, let the pod go.
        let uid = staging.uid().unwrap_or_default();
        if let Err(source) = remove_pod_dir(&self.dir(&name)) {
            let error = UnstageError::CleanUp {
                pod: format!("{namespace}/{name}"),
                source,
            };
            if let UnstageError::CleanUp {
                source: PodDirError::Unmount(unmount),
                ..
            } = &error
                && let Some(point) = unmount.mount_point()
                && self.unmount_failures.first_report(&uid, point)
            {
                self.warn_claim(&claim, &pav_csi::error_chain(&error), staging)
                    .await;
            }
            return Err(error);
        }
        self.unmount_failures.forget(&uid);
        self.driver
            .pods
            .remove_finalizer(staging, FINALIZER_UNSTAGE)
            .await
            .map_err(UnstageError::ReleaseStagingPod)?;
        Ok(())
    }

    /// Deletes the health check pods of staging pod `staging` on this
    /// node, with their directories; a failure is logged (the startup
    /// sweep removes what is left).
    async fn delete_checks_of(&self, staging: &str) {
        let selector = [
            (LABEL_PHASE, Phase::Health.name().to_owned()),
            (LABEL_NODE, label_value(&self.node)),
        ];
        let checks = match self.driver.pods.list(&selector).await {
            Ok(pods) => pods,
            Err(e) => {
                tracing::warn!(staging, error = %pav_csi::error_chain(&e), "cannot list the health checks to delete");
                return;
            }
        };
        let of_staging = |pod: &&Pod| {
            pod.annotations()
                .get(ANNOTATION_STAGING_POD)
                .map(String::as_str)
                == Some(staging)
        };
        for check in checks.iter().filter(of_staging) {
            tracing::info!(staging, pod = %check.name_any(), "deleting a health check left running");
            let dir = self.dir(&check.name_any());
            self.driver.delete_with_dir(check, Some(&dir)).await;
        }
    }

    /// A warning event about the claim `namespace/name` (from the staging
    /// pod's annotation), related to the staging pod.
    async fn warn_claim(&self, claim: &str, message: &str, staging: &Pod) {
        let Some((namespace, name)) = crate::pods::parse_claim(claim) else {
            tracing::warn!(claim, message, "no claim to report to");
            return;
        };
        let reference = core_ref("PersistentVolumeClaim", namespace, name, None);
        self.driver
            .events
            .warn(
                &reference,
                Phase::Unstaging,
                message,
                Some(pod_ref(staging)),
            )
            .await;
    }

    /// A warning about unstaging `staging` that failed with `error`: on
    /// the client pod it was staged for, or, staged per node, on its claim.
    async fn report_unstaging(&self, staging: &Pod, error: &UnstageError) {
        let message = pav_csi::error_chain(error);
        let annotations = staging.annotations();
        match (annotations.get(ANNOTATION_CLIENT)).and_then(|c| crate::pods::parse_client(c)) {
            Some((ns, name, uid)) => {
                let reference = core_ref("Pod", ns, name, Some(uid));
                (self.driver.events)
                    .warn(
                        &reference,
                        Phase::Unstaging,
                        &message,
                        Some(pod_ref(staging)),
                    )
                    .await;
            }
            None => {
                let claim = annotations
                    .get(ANNOTATION_CLAIM)
                    .cloned()
                    .unwrap_or_default();
                self.warn_claim(&claim, &message, staging).await;
            }
        }
    }

    /// The unstaging pod for the claim `namespace/name` and the
    /// PersistentVolume `pv_name`, planned now; [`LiveUnstaging::Gone`]
    /// when the claim, the volume or this node's object is gone.
    async fn plan_unstaging(
        &self,
        planner: &Planner,
        claim: &str,
        pv_name: &str,
        read_only: bool,
        staging_label: &str,
    ) -> std::result::Result<LiveUnstaging, UnstageError> {
        let gone = |what: String| Ok(LiveUnstaging::Gone { what });
        let Some((pvc_ns, pvc_name)) = crate::pods::parse_claim(claim) else {
            // An ephemeral inline volume: only what staging rendered.
            return gone("the claim of an ephemeral inline volume (it has none)".to_owned());
        };
        let Some(pvc) =
            Api::<PersistentVolumeClaim>::namespaced(self.driver.client.clone(), pvc_ns)
                .get_opt(pvc_name)
                .await
                .map_err(|e| {
                    UnstageError::ReadObjects(api_error(
                        &format!("PersistentVolumeClaim {claim}"),
                        e,
                    ))
                })?
        else {
            return gone(format!("PersistentVolumeClaim {claim}"));
        };
        let Some(pv) = Api::<PersistentVolume>::all(self.driver.client.clone())
            .get_opt(pv_name)
            .await
            .map_err(|e| {
                UnstageError::ReadObjects(api_error(&format!("PersistentVolume {pv_name}"), e))
            })?
        else {
            return gone(format!("PersistentVolume {pv_name}"));
        };
        let Some(node) = self
            .node_object()
            .await
            .map_err(UnstageError::ReadObjects)?
        else {
            return gone(format!("Node {}", self.node));
        };
        let staging_label = staging_label.to_owned();
        let plan = planner
            .blocking(move |p| p.unstaging(&pvc, &pv, &node, read_only, &staging_label))
            .await
            .map_err(UnstageError::Plan)?;
        Ok(LiveUnstaging::Planned(plan.pod.map(Box::new)))
    }
}

/// The unstaging phase planned from the live objects, or which of them is
/// gone (then the staging pod's record of it is used).
enum LiveUnstaging {
    /// Planned: its pod, if it has one.
    Planned(Option<Box<Pod>>),
    /// The claim, volume or node that no longer exists.
    Gone {
        /// `Kind name` of the object.
        what: String,
    },
}

/// Why what a staging pod put at `/pav/volume` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum VolumeCheckError {
    /// Nothing is there.
    #[error("the staging pod did not create /pav/volume")]
    Missing,
    /// A symlink: it would be followed in the node plugin's mount namespace.
    #[error("/pav/volume is a symlink: create the directory or device node itself")]
    Symlink,
    /// Filesystem mode needs a directory.
    #[error("/pav/volume is not a directory (volumeMode Filesystem)")]
    NotDirectory,
    /// Block mode needs a block device.
    #[error("/pav/volume is not a block device (volumeMode Block)")]
    NotBlockDevice,
}

/// Checks what a staging pod put at `/pav/volume`. A symlink is refused:
/// it would be followed in the node plugin's mount namespace, so a pod could
/// point it at any host path (`/etc`, another pod's volume) and have that
/// bind-mounted into its client.
fn check_volume(path: &Path, block: bool) -> std::result::Result<(), VolumeCheckError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::symlink_metadata(path).map_err(|_| VolumeCheckError::Missing)?;
    if meta.file_type().is_symlink() {
        return Err(VolumeCheckError::Symlink);
    }
    match (block, meta.is_dir(), meta.file_type().is_block_device()) {
        (false, true, _) | (true, _, true) => Ok(()),
        (false, false, _) => Err(VolumeCheckError::NotDirectory),
        (true, _, false) => Err(VolumeCheckError::NotBlockDevice),
    }
}

/// The volume a staging is for: a claim's, or a pod's inline volume.
enum Volume {
    /// The claim and its PersistentVolume.
    Claimed(Box<PersistentVolumeClaim>, Box<PersistentVolume>),
    /// An ephemeral inline volume's attributes and size.
    Inline(pav_sdk::Parameters, Option<u64>),
}

/// What staging uses of a [`StageRequest`], which only pav-sdk builds (so
/// that the scenarios can build one).
#[derive(Debug, Clone)]
struct StagingRequest<'a> {
    handle: &'a str,
    /// The publish target path (the driver stages on publish).
    target_path: &'a Path,
    read_only: bool,
    /// Block (else Filesystem) volume mode.
    block: bool,
    /// What the volume's attach pod wrote, from its VolumeAttachment.
    publish_context: &'a pav_sdk::Parameters,
    /// An ephemeral inline volume's attributes and size; `None` for a
    /// persistent volume.
    ephemeral: Option<(pav_sdk::Parameters, Option<u64>)>,
    /// The client pod's service-account tokens (`spec.tokenRequests`).
    tokens: &'a pav_sdk::ServiceAccountTokens,
}

impl<'a> StagingRequest<'a> {
    fn of(req: &'a StageRequest) -> Self {
        StagingRequest {
            handle: &req.handle,
            target_path: &req.target_path,
            read_only: req.read_only,
            block: req.volume_mode == pav_sdk::VolumeMode::Block,
            publish_context: &req.publish_context,
            ephemeral: ephemeral::attributes(&req.context),
            tokens: &req.service_account_tokens,
        }
    }
}

#[pav_sdk::async_trait]
impl Stage for PodNode {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        let staging = StagingRequest::of(&req);
        match (&req.pod, &self.staging) {
            // Every publish of a driver that stages per pod, and an
            // ephemeral inline volume's of either.
            (Some(info), _) => Ok(self.stage_for(&staging, info).await?),
            (None, Staging::PerNode(volumes)) => Ok(self.stage_on_node(&staging, volumes).await?),
            (None, Staging::PerPod) => Err(StageError::NoPodInfo.into()),
        }
    }
}

#[pav_sdk::async_trait]
impl Unstage for PodNode {
    async fn unstage(&self, req: UnstageRequest) -> Result<()> {
        Ok(self.unstage_at(&req.handle, &req.target_path).await?)
    }
}

impl PodNode {
    /// Stages `req` for client pod `info`; a failure is an event on it.
    async fn stage_for(
        &self,
        req: &StagingRequest<'_>,
        info: &PodInfo,
    ) -> std::result::Result<Staged, StageError> {
        let client_pod = Api::<Pod>::namespaced(self.driver.client.clone(), &info.namespace)
            .get(&info.name)
            .await
            .map_err(|e| {
                StageError::ClientPod(api_error(
                    &format!("pod {}/{}", info.namespace, info.name),
                    e,
                ))
            })?;
        // A persistent volume's claim and PersistentVolume, through the
        // client pod; an ephemeral inline volume's attributes.
        let volume = match &req.ephemeral {
            Some((attributes, size)) => Ok(Volume::Inline(attributes.clone(), *size)),
            None => (self.find_volume(&client_pod, req.handle).await)
                .map(|(pvc, pv)| Volume::Claimed(Box::new(pvc), Box::new(pv))),
        };
        let result = match volume {
            Ok(volume) => self.stage_volume(req, volume, Some(info)).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &result
            && e.reported()
        {
            self.driver
                .events
                .warn(
                    &client_pod.object_ref(&()),
                    Phase::Staging,
                    &pav_csi::error_chain(e),
                    None,
                )
                .await;
        }
        result
    }

    /// Stages `req` once for all the node's client pods of its claim's
    /// volume (`stagingPer: Node`); a failure is an event on the claim.
    async fn stage_on_node(
        &self,
        req: &StagingRequest<'_>,
        volumes: &Store<PersistentVolume>,
    ) -> std::result::Result<Staged, StageError> {
        let (pvc, pv) = self.claimed_volume(volumes, req.handle).await?;
        let claim = pvc.object_ref(&());
        let volume = Volume::Claimed(Box::new(pvc), Box::new(pv));
        let result = self.stage_volume(req, volume, None).await;
        if let Err(e) = &result
            && e.reported()
        {
            let message = pav_csi::error_chain(e);
            (self.driver.events)
                .warn(&claim, Phase::Staging, &message, None)
                .await;
        }
        result
    }

    /// Tears down the staging pods of `handle` at `target_path` on this
    /// node; a failure is an event on the client pod (staged per node: on
    /// the claim).
    async fn unstage_at(
        &self,
        handle: &str,
        target_path: &Path,
    ) -> std::result::Result<(), UnstageError> {
        let target_path = target_path.display().to_string();
        let selector = staging_selector(handle, &target_path, &self.node);
        let pods = self
            .driver
            .pods
            .list(&selector)
            .await
            .map_err(UnstageError::ListStagingPods)?;
        for pod in pods {
            if let Err(e) = self.tear_down(&pod).await {
                if e.reported() {
                    self.report_unstaging(&pod, &e).await;
                }
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::PlanError;
    use pav_sdk::Error;

    /// The steps without a scenario of their own: their CSI codes, and
    /// which are reported on the client pod.
    #[test]
    fn stage_and_unstage_steps_map_to_csi_codes_and_events() {
        let no_info = StageError::NoPodInfo;
        assert!(!no_info.reported());
        let error = Error::from(no_info);
        assert!(matches!(error, Error::FailedPrecondition(_)), "{error:?}");
        let read = StageError::ClientPod(DriverError::NotFound {
            what: "pod apps/client".into(),
        });
        assert!(!read.reported());
        assert!(matches!(Error::from(read), Error::NotFound(_)));
        let context = pav_templates::StagingContext::new(
            &PersistentVolumeClaim::default(),
            &PersistentVolume::default(),
            &Node::default(),
            false,
        )
        .unwrap_err();
        let context = StageError::Plan(PlanError::Context(context));
        assert!(context.reported());
        assert!(matches!(Error::from(context), Error::InvalidArgument(_)));
        let waiting = StageError::StagingPod(DriverError::TimedOut("t".into()));
        assert!(matches!(Error::from(waiting), Error::Unavailable(_)));

        let listing = UnstageError::ListStagingPods(DriverError::TimedOut("t".into()));
        assert!(!listing.reported());
        assert!(matches!(Error::from(listing), Error::Unavailable(_)));
        let record = UnstageError::RecordedUnstaging(
            serde_json::from_str::<Option<PodTemplateSpec>>("{").unwrap_err(),
        );
        assert!(record.reported());
        let error = Error::from(record);
        assert!(
            matches!(&error, Error::Internal(m) if m.starts_with(&format!("annotation {ANNOTATION_UNSTAGING}: "))),
            "{error:?}"
        );
        let stopping = UnstageError::StopStagingPod(DriverError::Forbidden {
            what: "stopping pod pav/s".into(),
            message: "no".into(),
        });
        assert!(matches!(
            Error::from(stopping),
            Error::FailedPrecondition(_)
        ));
    }

    #[test]
    fn staged_volume_kinds() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            check_volume(&dir.path().join("volume"), false),
            Err(VolumeCheckError::Missing)
        );
        std::fs::create_dir(dir.path().join("volume")).unwrap();
        assert!(check_volume(&dir.path().join("volume"), false).is_ok());
        assert_eq!(
            check_volume(&dir.path().join("volume"), true),
            Err(VolumeCheckError::NotBlockDevice)
        );
    }

    #[test]
    fn staged_volume_symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume");
        std::os::unix::fs::symlink("/etc", &volume).unwrap();
        assert_eq!(check_volume(&volume, false), Err(VolumeCheckError::Symlink));
        std::fs::remove_file(&volume).unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), &volume).unwrap();
        assert_eq!(
            check_volume(&volume, false),
            Err(VolumeCheckError::Symlink),
            "even inside the pod dir"
        );
    }
}

#[cfg(test)]
mod scenarios;
