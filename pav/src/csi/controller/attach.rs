//! ControllerPublishVolume and ControllerUnpublishVolume:
//! `spec.volumeAttach`'s pod attaches a volume to a node, and what it
//! writes in `/pav/publish-context` reaches staging as `publishContext`;
//! `spec.volumeDetach`'s optional pod detaches it. Both see the staging
//! context of the volume and the node.

use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::{Api, Resource, ResourceExt};
use pav_sdk::{Attach, AttachRequest, Attached, DetachRequest, Error, Result};
use pav_templates::Phase;

use super::PodController;
use crate::csi::context::{DriverError, PhaseError, PodFiles, Regarding, api_error};
use crate::pods::results;
use crate::recipe::PlanError;

/// Why ControllerPublishVolume or ControllerUnpublishVolume failed: one
/// variant per step; `From<AttachError> for pav_sdk::Error` is the one
/// mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
enum AttachError {
    /// No PersistentVolume of this driver has the handle.
    #[error("no PersistentVolume of driver {provisioner} has volume handle {handle:?}")]
    NoVolume {
        /// The driver.
        provisioner: String,
        /// The handle asked about.
        handle: String,
    },
    /// The PavProvisioner lost `spec.volumeAttach` since the driver
    /// started.
    #[error("PavProvisioner {provisioner} has no spec.volumeAttach")]
    NoSection {
        /// Its name.
        provisioner: String,
    },
    /// The node to attach to does not exist.
    #[error("node {0:?} does not exist")]
    NoNode(String),
    /// ControllerUnpublishVolume named no node: pav keeps no record of
    /// where a volume is attached.
    #[error("volume {0:?}: pav detaches from one node at a time, and the request names none")]
    NoNodeGiven(String),
    /// Reading the volume's claim or the node.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// Planning the attach or detach phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The attach or detach pod failed or did not finish.
    #[error(transparent)]
    Pod(PhaseError),
    /// The attach pod's `/pav/publish-context` is not a map of strings.
    #[error("attach pod {pod}: /pav/publish-context: {message}")]
    PublishContext {
        /// The pod, `namespace/name`.
        pod: String,
        /// What is wrong.
        message: String,
    },
}

impl From<AttachError> for Error {
    /// An unknown volume or node is `NOT_FOUND`, as CSI says; a lost
    /// section `FAILED_PRECONDITION`; a detach naming no node
    /// `INVALID_ARGUMENT`; a failed pod or a bad publish context
    /// `INTERNAL` (external-attacher retries with backoff); the API,
    /// render and pod-run steps keep the code of the driver's error.
    fn from(error: AttachError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            AttachError::NoVolume { .. } | AttachError::NoNode(_) => Error::NotFound(message),
            AttachError::NoSection { .. } => Error::FailedPrecondition(message),
            AttachError::NoNodeGiven(_) => Error::InvalidArgument(message),
            AttachError::Plan(PlanError::Context(_))
            | AttachError::Pod(PhaseError::Failed(_))
            | AttachError::PublishContext { .. } => Error::Internal(message),
            AttachError::Plan(e) => e.into(),
            AttachError::ReadObjects(e) | AttachError::Pod(PhaseError::Run(e)) => e.into(),
        }
    }
}

#[pav_sdk::async_trait]
impl Attach for PodController {
    async fn attach(&self, req: AttachRequest) -> Result<Attached> {
        self.attach_volume(&req).await.map_err(Error::from)
    }

    async fn detach(&self, req: DetachRequest) -> Result<()> {
        self.detach_volume(&req).await.map_err(Error::from)
    }
}

/// The claim and volume an attachment is about, and where its events go.
struct Attachment {
    pvc: PersistentVolumeClaim,
    pv: PersistentVolume,
    regarding: ObjectReference,
}

impl PodController {
    async fn attach_volume(
        &self,
        req: &AttachRequest,
    ) -> std::result::Result<Attached, AttachError> {
        let Some(attachment) = self.attachment(&req.handle).await? else {
            return Err(AttachError::NoVolume {
                provisioner: self.driver.provisioner.clone(),
                handle: req.handle.to_string(),
            });
        };
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(AttachError::Plan)?;
        if !planner.compiled().has_phase(Phase::Attach) {
            return Err(AttachError::NoSection {
                provisioner: self.driver.provisioner.clone(),
            });
        }
        let node = (self.node(&req.node_id).await?)
            .ok_or_else(|| AttachError::NoNode(req.node_id.clone()))?;
        let (pvc, pv, read_only) = (attachment.pvc.clone(), attachment.pv.clone(), req.read_only);
        let plan = planner
            .blocking(move |p| p.attach(&pvc, &pv, &node, read_only))
            .await
            .map_err(AttachError::Plan)?;
        let collected = self
            .run_attachment_pod(Phase::Attach, &plan.pod, &attachment)
            .await?;
        let pod = format!(
            "{}/{}",
            plan.pod.namespace().unwrap_or_default(),
            plan.pod.name_any()
        );
        let context = match collected.and_then(|c| c.publish_context) {
            None => pav_sdk::Parameters::new(),
            Some(text) => results::parse_publish_context(&text)
                .map_err(|message| AttachError::PublishContext { pod, message })?,
        };
        tracing::info!(handle = %req.handle, node = req.node_id, "volume attached");
        Ok(Attached::with_context(context))
    }

    async fn detach_volume(&self, req: &DetachRequest) -> std::result::Result<(), AttachError> {
        let node_id = (req.node_id.clone())
            .ok_or_else(|| AttachError::NoNodeGiven(req.handle.to_string()))?;
        let Some(attachment) = self.attachment(&req.handle).await? else {
            // Gone with its volume: attached nowhere.
            return Ok(());
        };
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(AttachError::Plan)?;
        if !planner.compiled().has_phase(Phase::Detach) {
            return Ok(());
        }
        // A deleted node is detached from all the same: the storage may
        // still hold the attachment.
        let node = (self.node(&node_id).await?).unwrap_or_else(|| Node {
            metadata: kube::api::ObjectMeta {
                name: Some(node_id.clone()),
                ..Default::default()
            },
            ..Default::default()
        });
        let (pvc, pv) = (attachment.pvc.clone(), attachment.pv.clone());
        let plan = planner
            .blocking(move |p| p.detach(&pvc, &pv, &node))
            .await
            .map_err(AttachError::Plan)?;
        if let Some(pod) = &plan.pod {
            self.run_attachment_pod(Phase::Detach, pod, &attachment)
                .await?;
        }
        tracing::info!(handle = %req.handle, node = node_id, "volume detached");
        Ok(())
    }

    /// The volume of `handle` and its claim: the live one, or only its
    /// name and namespace once it is gone; `None` without the volume.
    async fn attachment(
        &self,
        handle: &str,
    ) -> std::result::Result<Option<Attachment>, AttachError> {
        let Some(pv) = self.records.volume(handle).await else {
            return Ok(None);
        };
        let pv = PersistentVolume::clone(&pv);
        let pvc = match self
            .records
            .claim_of(&pv)
            .await
            .map_err(AttachError::ReadObjects)?
        {
            Some(pvc) => pvc,
            None => recorded_claim(&pv),
        };
        let regarding = match pvc.metadata.uid {
            Some(_) => pvc.object_ref(&()),
            None => pv.object_ref(&()),
        };
        Ok(Some(Attachment { pvc, pv, regarding }))
    }

    /// The Node `name`, if it exists; a name no Node can have (a DNS
    /// subdomain) is never sent to the API server.
    async fn node(&self, name: &str) -> std::result::Result<Option<Node>, AttachError> {
        if !is_node_name(name) {
            return Ok(None);
        }
        Api::<Node>::all(self.driver.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| AttachError::ReadObjects(api_error(&format!("Node {name}"), e)))
    }

    /// Runs an attach or detach pod; a failure is a Warning event on the
    /// claim (or the volume without one).
    async fn run_attachment_pod(
        &self,
        phase: Phase,
        pod: &k8s_openapi::api::core::v1::Pod,
        attachment: &Attachment,
    ) -> std::result::Result<Option<results::Collected>, AttachError> {
        (self.driver)
            .run(
                (phase, pod),
                PodFiles::Collected,
                Regarding::Objects(std::slice::from_ref(&attachment.regarding)),
            )
            .await
            .map_err(AttachError::Pod)
    }
}

/// Whether `name` can name a Node: a DNS subdomain (at most 253
/// characters of `a-z`, `0-9`, `-` and `.`, alphanumeric at both ends).
fn is_node_name(name: &str) -> bool {
    let alphanumeric =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && alphanumeric(name.chars().next())
        && alphanumeric(name.chars().last())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The claim `pv` records (`spec.claimRef`), with only its name and
/// namespace: what a detach of a volume whose claim is gone can know.
fn recorded_claim(pv: &PersistentVolume) -> PersistentVolumeClaim {
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    PersistentVolumeClaim {
        metadata: kube::api::ObjectMeta {
            name: claim_ref.and_then(|c| c.name.clone()),
            namespace: claim_ref.and_then(|c| c.namespace.clone()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_dns_subdomains_name_nodes() {
        for name in ["n1", "pav-node", "node.example.com", "a"] {
            assert!(super::is_node_name(name), "{name}");
        }
        for name in [
            "",
            "../nodes",
            "N1",
            "-a",
            "a-",
            "a/b",
            "a?b",
            &"a".repeat(254),
        ] {
            assert!(!super::is_node_name(name), "{name}");
        }
    }
}
