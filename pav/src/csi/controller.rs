//! Validation, creation and deletion carried out by pods (`pav csi-controller`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod,
    PodTemplateSpec, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use pav_sdk::{Create, CreateRequest, Delete, DeleteRequest, Error, Result, Volume};
use pav_templates::{CreationContext, Phase, ProvisioningMode, ValidationContext};

use self::deleted::Deleted;
use super::context::{DriverContext, DriverError, api_error, pod_ref};
use super::phase_run::{PhaseError, PodFiles};
use super::state::{self, CreatedError, PodState};
use crate::pods::{ANNOTATION_CLAIM, LABEL_PHASE, LABEL_VOLUME};

pub mod deleted;

/// The pav-sdk Create and Delete of a PavProvisioner.
#[derive(Debug)]
pub struct PodController {
    driver: Arc<DriverContext>,
    volumes: Store<PersistentVolume>,
    deleted: Deleted,
}

/// Why CreateVolume failed: one variant per step. [`CreateError::phase`]
/// names the phase for the claim's event and `From<CreateError> for
/// pav_sdk::Error` is the one mapping to CSI codes. Steps that talk to the
/// API server or run pods carry the driver's error as their source.
#[derive(Debug, thiserror::Error)]
enum CreateError {
    /// external-provisioner passed no claim.
    #[error("the claim is unknown: run external-provisioner with --extra-create-metadata")]
    NoClaim,
    /// Reading the claim or its StorageClass.
    #[error("{0}")]
    ReadObjects(#[source] DriverError),
    /// The PavProvisioner is missing, not listed yet or invalid.
    #[error("{0}")]
    Provisioner(#[source] DriverError),
    /// The PavProvisioner does not list `Dynamic`.
    #[error("PavProvisioner {provisioner} does not do dynamic provisioning")]
    NotDynamic {
        /// Its name.
        provisioner: String,
    },
    /// The claim and class do not make a template context.
    #[error("{0}")]
    Context(#[source] pav_templates::Error),
    /// Evaluating a phase's templates.
    #[error("{source}")]
    Render {
        /// The phase rendered.
        phase: Phase,
        #[source]
        source: DriverError,
    },
    /// The claim asks for an access mode PaV does not know.
    #[error("access mode {0} is not supported")]
    AccessMode(String),
    /// The evaluated validation rules refuse the request.
    #[error("{0}")]
    Refused(#[source] pav_templates::phase::Refusal),
    /// Reading the pod cache.
    #[error("{0}")]
    PodCache(#[source] DriverError),
    /// The validation pod failed (`INVALID_ARGUMENT`) or did not finish.
    #[error("{0}")]
    ValidationPod(#[source] PhaseError),
    /// The creation pod did not finish (the CO's retry picks it up).
    #[error("{0}")]
    CreationPod(#[source] DriverError),
    /// The creation pod failed; the deletion pod ran to undo the creation
    /// (`undo`: how that failed).
    #[error("{message}{}", then(undo.as_deref()))]
    CreationPodFailed {
        /// `creation pod ns/name failed: why`.
        message: String,
        /// The deletion pod's failure, if it failed.
        undo: Option<Box<PhaseError>>,
    },
    /// What the spec evaluated to, or the creation pod (`pod`, `ns/name`)
    /// exported, is no volume; the deletion pod ran to undo a pod's
    /// creation (`undo`: how that failed).
    #[error("{}{problem}{}", pod.as_ref().map(|p| format!("creation pod {p}: ")).unwrap_or_default(), then(undo.as_deref()))]
    Created {
        /// The creation pod, if one ran.
        pod: Option<String>,
        /// What was wrong.
        #[source]
        problem: CreatedError,
        /// The deletion pod's failure, if it failed.
        undo: Option<Box<PhaseError>>,
    },
}

/// `; then <how the undoing failed>`, or nothing.
fn then(undo: Option<&PhaseError>) -> String {
    undo.map(|e| format!("; then {e}")).unwrap_or_default()
}

/// How a creation pod's run failed, before the deletion pod undoes it.
enum Failed {
    /// The pod failed: its message.
    Pod(String),
    /// The pod succeeded but exported no volume.
    Result(CreatedError),
}

impl CreateError {
    /// The phase that failed, the reason of the claim's event:
    /// `ValidationFailed` for the evaluated rules and the validation pod,
    /// `CreationFailed` for the rest.
    fn phase(&self) -> Phase {
        match self {
            CreateError::Refused(_) | CreateError::ValidationPod(_) => Phase::Validation,
            CreateError::NoClaim
            | CreateError::ReadObjects(_)
            | CreateError::Provisioner(_)
            | CreateError::NotDynamic { .. }
            | CreateError::Context(_)
            | CreateError::Render { .. }
            | CreateError::AccessMode(_)
            | CreateError::PodCache(_)
            | CreateError::CreationPod(_)
            | CreateError::CreationPodFailed { .. }
            | CreateError::Created { .. } => Phase::Creation,
        }
    }
}

impl From<CreateError> for Error {
    /// The CSI code of each step: a capacity rule is `OUT_OF_RANGE`, other
    /// refusals, bad input and a failed validation pod `INVALID_ARGUMENT`,
    /// a failed creation `INTERNAL`; the API and pod steps keep the code
    /// of the driver's error.
    fn from(error: CreateError) -> Self {
        use pav_templates::phase::Refusal;
        let message = error.to_string();
        match error {
            CreateError::NoClaim
            | CreateError::NotDynamic { .. }
            | CreateError::Context(_)
            | CreateError::AccessMode(_)
            | CreateError::Refused(Refusal::VolumeMode { .. } | Refusal::AccessMode { .. })
            | CreateError::ValidationPod(PhaseError::Failed(_)) => Error::InvalidArgument(message),
            CreateError::Refused(Refusal::AboveMaximum { .. } | Refusal::BelowMinimum { .. }) => {
                Error::OutOfRange(message)
            }
            CreateError::ReadObjects(e)
            | CreateError::Provisioner(e)
            | CreateError::Render { source: e, .. }
            | CreateError::PodCache(e)
            | CreateError::ValidationPod(PhaseError::Run(e))
            | CreateError::CreationPod(e) => e.into(),
            CreateError::CreationPodFailed { .. } | CreateError::Created { .. } => {
                Error::Internal(message)
            }
        }
    }
}

/// One claim being provisioned, with the live objects its contexts need.
struct Claim {
    pvc: PersistentVolumeClaim,
    sc: StorageClass,
    uid: String,
    reference: ObjectReference,
}

impl PodController {
    /// Serves `driver`'s provisioner; `volumes` is a reflector store of
    /// PersistentVolumes, to find a volume's claim from its handle.
    pub fn new(driver: Arc<DriverContext>, volumes: Store<PersistentVolume>) -> Self {
        PodController {
            driver,
            volumes,
            deleted: Deleted::default(),
        }
    }

    /// The pod for `phase` of the claim, from an evaluated template.
    fn pod(
        &self,
        template: &PodTemplateSpec,
        phase: Phase,
        timeout: Option<std::time::Duration>,
        claim: &Claim,
        owner: Option<&OwnerReference>,
    ) -> Pod {
        self.driver
            .origin(owner)
            .claim_pod(phase, template, timeout, &claim.pvc)
    }

    async fn claim(&self, req: &CreateRequest) -> std::result::Result<Claim, CreateError> {
        let Some(claim) = &req.claim else {
            return Err(CreateError::NoClaim);
        };
        let client = self.driver.client.clone();
        let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &claim.namespace)
            .get(&claim.name)
            .await
            .map_err(|e| {
                CreateError::ReadObjects(api_error(
                    &format!("PersistentVolumeClaim {}/{}", claim.namespace, claim.name),
                    e,
                ))
            })?;
        let sc_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let sc = Api::<StorageClass>::all(client)
            .get(&sc_name)
            .await
            .map_err(|e| {
                CreateError::ReadObjects(api_error(&format!("StorageClass {sc_name:?}"), e))
            })?;
        let uid = pvc.uid().unwrap_or_default();
        let reference = pvc.object_ref(&());
        Ok(Claim {
            pvc,
            sc,
            uid,
            reference,
        })
    }

    async fn create_volume(
        &self,
        req: &CreateRequest,
        claim: &Claim,
    ) -> std::result::Result<Volume, CreateError> {
        let (compiled, owner) = self
            .driver
            .compiled()
            .await
            .map_err(CreateError::Provisioner)?;
        if !compiled
            .provisioning_modes()
            .contains(&ProvisioningMode::Dynamic)
        {
            return Err(CreateError::NotDynamic {
                provisioner: self.driver.provisioner.clone(),
            });
        }
        let lookup = self.driver.lookup();

        // Validation: the evaluated rules, then the validation pod.
        let context = ValidationContext::dynamic(&claim.pvc, &claim.sc)
            .map_err(CreateError::Context)?
            .with_pvc_lookup(lookup.clone());
        let compiled_v = compiled.clone();
        let rules = DriverContext::render(move || compiled_v.render_validation(&context))
            .await
            .map_err(|source| CreateError::Render {
                phase: Phase::Validation,
                source,
            })?;
        let volume_mode = match req.volume_mode {
            pav_sdk::VolumeMode::Filesystem => pav_templates::VolumeMode::Filesystem,
            pav_sdk::VolumeMode::Block => pav_templates::VolumeMode::Block,
        };
        let access_modes = claim_access_modes(&claim.pvc)?;
        rules
            .admits(
                volume_mode,
                &access_modes,
                req.capacity.min_bytes.unwrap_or(0),
                req.capacity.max_bytes,
            )
            .map_err(CreateError::Refused)?;

        let context = CreationContext::new(&claim.pvc, &claim.sc)
            .map_err(CreateError::Context)?
            .with_pvc_lookup(lookup);
        let default_handle = context.default_handle().to_owned();
        let (compiled_c, context_c) = (compiled.clone(), context.clone());
        let creation = DriverContext::render(move || compiled_c.render_creation(&context_c))
            .await
            .map_err(|source| CreateError::Render {
                phase: Phase::Creation,
                source,
            })?;
        let creation_pod = creation
            .pod_template
            .as_ref()
            .map(|t| self.pod(t, Phase::Creation, creation.timeout, claim, owner.as_ref()));

        // The validation pod runs unless a creation pod exists already
        // (validation passed before a restart).
        let creation_started = match &creation_pod {
            Some(pod) => self
                .driver
                .cached_pod(&pod.namespace().unwrap_or_default(), &pod.name_any())
                .await
                .map_err(CreateError::PodCache)?
                .is_some(),
            None => false,
        };
        if let (Some(template), false) = (&rules.pod_template, creation_started) {
            let pod = self.pod(
                template,
                Phase::Validation,
                rules.timeout,
                claim,
                owner.as_ref(),
            );
            self.driver
                .run_phase(Phase::Validation, &pod, PodFiles::Collected)
                .await
                .map_err(CreateError::ValidationPod)?;
        }

        let Some(pod) = creation_pod else {
            let created = state::creation_result(
                creation.handle.as_deref(),
                creation.capacity,
                None,
                &default_handle,
            )
            .map_err(|problem| CreateError::Created {
                pod: None,
                problem,
                undo: None,
            })?;
            return Ok(volume(created, req));
        };
        let op = self.driver.metrics.start(Phase::Creation);
        let outcome = self
            .driver
            .run_pod(Phase::Creation, &pod, PodFiles::Collected)
            .await;
        let result = match outcome {
            // A timeout or API trouble: the pod carries on, the retry picks it up.
            Err(e) => Err(CreateError::CreationPod(e)),
            Ok(ran) => {
                let checked = match ran.failure {
                    Some(message) => Err(Failed::Pod(message)),
                    None => state::creation_result(
                        creation.handle.as_deref(),
                        creation.capacity,
                        ran.collected.as_ref(),
                        &default_handle,
                    )
                    .map_err(Failed::Result),
                };
                match checked {
                    Ok(created) => Ok(created),
                    Err(failed) => {
                        // The guide: a failed creation runs the deletion pod.
                        let undo = self
                            .undo_creation(&compiled, &context, claim, owner.as_ref())
                            .await;
                        if undo.is_ok() {
                            self.driver.delete_quietly(&pod).await;
                        }
                        let undo = undo.err().map(Box::new);
                        Err(match failed {
                            Failed::Pod(message) => {
                                CreateError::CreationPodFailed { message, undo }
                            }
                            Failed::Result(problem) => CreateError::Created {
                                pod: Some(format!(
                                    "{}/{}",
                                    pod.namespace().unwrap_or_default(),
                                    pod.name_any()
                                )),
                                problem,
                                undo,
                            },
                        })
                    }
                }
            }
        };
        op.finish(&result);
        let created = result?;
        self.clean_up_when_bound(claim);
        Ok(volume(created, req))
    }

    /// Runs the deletion pod after a failed creation.
    async fn undo_creation(
        &self,
        compiled: &Arc<pav_templates::CompiledProvisioner>,
        context: &CreationContext,
        claim: &Claim,
        owner: Option<&OwnerReference>,
    ) -> std::result::Result<(), PhaseError> {
        let (compiled, context) = (compiled.clone(), context.clone());
        let deletion = DriverContext::render(move || compiled.render_deletion(&context))
            .await
            .map_err(PhaseError::Run)?;
        let Some(template) = deletion.pod_template else {
            return Ok(());
        };
        let pod = self.pod(&template, Phase::Deletion, deletion.timeout, claim, owner);
        self.driver
            .run_phase(Phase::Deletion, &pod, PodFiles::Collected)
            .await
    }

    /// Deletes the claim's validation and creation pods once the claim is
    /// bound (their results are then recorded in the PersistentVolume) or gone.
    fn clean_up_when_bound(&self, claim: &Claim) {
        let driver = self.driver.clone();
        let (namespace, name, uid) = (
            claim.pvc.namespace().unwrap_or_default(),
            claim.pvc.name_any(),
            claim.uid.clone(),
        );
        tokio::spawn(async move {
            let api: Api<PersistentVolumeClaim> =
                Api::namespaced(driver.client.clone(), &namespace);
            let bound = kube::runtime::wait::await_condition(
                api,
                &name,
                move |pvc: Option<&PersistentVolumeClaim>| {
                    pvc.is_none_or(|pvc| claim_settled(pvc, &uid))
                },
            );
            if tokio::time::timeout(std::time::Duration::from_secs(3600), bound)
                .await
                .is_err()
            {
                return; // the startup sweep of a later run cleans up
            }
            let uid = claim_uid_label(&driver, &namespace, &name).await;
            if let Some(uid) = uid {
                clean_claim_pods(&driver, &uid, &[Phase::Validation, Phase::Creation]).await;
            }
        });
    }
}

/// The claim's UID label value for cleanup (the claim may be gone: then
/// whatever pods the sweep finds are cleaned up by it).
async fn claim_uid_label(driver: &DriverContext, namespace: &str, name: &str) -> Option<String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(driver.client.clone(), namespace);
    api.get_opt(name).await.ok().flatten().and_then(|p| p.uid())
}

/// True once a claim is bound to a volume, or when the object is another
/// claim of the same name.
fn claim_settled(pvc: &PersistentVolumeClaim, uid: &str) -> bool {
    pvc.uid().as_deref() != Some(uid)
        || pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
}

/// Deletes this provisioner's pods of claim `uid` in `phases`.
async fn clean_claim_pods(driver: &DriverContext, uid: &str, phases: &[Phase]) {
    match driver.list_pods(&[(LABEL_VOLUME, uid)]).await {
        Ok(pods) => {
            for pod in pods {
                let phase = pod.labels().get(LABEL_PHASE).cloned().unwrap_or_default();
                if phases.iter().any(|p| p.name() == phase)
                    && let Err(e) = driver
                        .delete_pod(&pod.namespace().unwrap_or_default(), &pod.name_any())
                        .await
                {
                    tracing::warn!(pod = %pod.name_any(), error = %e, "cannot delete PaV pod");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot list PaV pods"),
    }
}

/// At startup: deletes validation and creation pods whose claim is bound
/// or gone (left by a run that stopped before cleaning up).
pub async fn sweep(driver: Arc<DriverContext>) {
    let pods = match driver.list_pods(&[]).await {
        Ok(pods) => pods,
        Err(e) => {
            tracing::warn!(error = %e, "startup sweep: cannot list PaV pods");
            return;
        }
    };
    for pod in pods {
        let labels = pod.labels();
        let phase = labels.get(LABEL_PHASE).map(String::as_str);
        if !matches!(phase, Some("validation") | Some("creation"))
            || !PodState::of(&pod).is_terminated()
        {
            continue;
        }
        let (Some(uid), Some(claim)) = (
            labels.get(LABEL_VOLUME).cloned(),
            pod.annotations().get(ANNOTATION_CLAIM).cloned(),
        ) else {
            continue;
        };
        let Some((namespace, name)) = state::parse_claim(&claim) else {
            continue;
        };
        let api: Api<PersistentVolumeClaim> = Api::namespaced(driver.client.clone(), namespace);
        let settled = match api.get_opt(name).await {
            Ok(None) => true,
            Ok(Some(pvc)) => claim_settled(&pvc, &uid),
            Err(_) => false,
        };
        if settled {
            tracing::info!(pod = %pod.name_any(), "startup sweep: deleting a finished PaV pod");
            let _ = driver
                .delete_pod(&pod.namespace().unwrap_or_default(), &pod.name_any())
                .await;
        }
    }
}

/// The volume answered to CreateVolume: its volume context is the
/// StorageClass parameters (the guide's `params` when staging).
fn volume(created: state::Created, req: &CreateRequest) -> Volume {
    let mut volume = Volume::new(created.handle, created.capacity);
    volume.context = req.parameters.clone();
    volume
}

/// The claim's access modes in the guide's terms.
fn claim_access_modes(
    pvc: &PersistentVolumeClaim,
) -> std::result::Result<Vec<pav_templates::AccessMode>, CreateError> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .into_iter()
        .flatten()
        .map(|mode| {
            pav_templates::AccessMode::ALL
                .into_iter()
                .find(|m| m.as_str() == mode)
                .ok_or_else(|| CreateError::AccessMode(mode.clone()))
        })
        .collect()
}

/// The claim of a volume being deleted: the live object when it still
/// exists, else rebuilt from the PersistentVolume's `claimRef` and spec.
fn claim_from_pv(
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
impl Create for PodController {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let claim = self.claim(&req).await?;
        match self.create_volume(&req, &claim).await {
            Ok(volume) => Ok(volume),
            Err(failure) => {
                let phase = failure.phase();
                let error = Error::from(failure);
                self.driver
                    .warn(&claim.reference, phase, error.message(), None)
                    .await;
                Err(error)
            }
        }
    }

    /// A volume exists while a PersistentVolume of this driver has its handle.
    async fn exists(&self, volume: &pav_sdk::VolumeId) -> Result<bool> {
        let _ = self.volumes.wait_until_ready().await;
        let provisioner = &self.driver.provisioner;
        let found = self.volumes.find(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|c| &c.driver == provisioner && c.volume_handle == *volume)
        });
        Ok(found.is_some())
    }
}

/// Why DeleteVolume failed: one variant per step; `From<DeleteError> for
/// pav_sdk::Error` is the one mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
enum DeleteError {
    /// Reading the volume's claim or its StorageClass.
    #[error("{0}")]
    ReadObjects(#[source] DriverError),
    /// The PavProvisioner is missing, not listed yet or invalid.
    #[error("{0}")]
    Provisioner(#[source] DriverError),
    /// The recorded claim and class make no template context.
    #[error("{0}")]
    Context(#[source] pav_templates::Error),
    /// Evaluating `spec.volumeDeletion`.
    #[error("{0}")]
    Render(#[source] DriverError),
    /// The deletion pod failed (`INTERNAL`) or did not finish.
    #[error("{0}")]
    DeletionPod(#[source] PhaseError),
}

impl From<DeleteError> for Error {
    /// A context that the volume's own records do not make, and a failed
    /// deletion pod, are `INTERNAL`; the API, render and pod-run steps keep
    /// the code of the driver's error.
    fn from(error: DeleteError) -> Self {
        let message = error.to_string();
        match error {
            DeleteError::Context(_) | DeleteError::DeletionPod(PhaseError::Failed(_)) => {
                Error::Internal(message)
            }
            DeleteError::ReadObjects(e)
            | DeleteError::Provisioner(e)
            | DeleteError::Render(e)
            | DeleteError::DeletionPod(PhaseError::Run(e)) => e.into(),
        }
    }
}

#[pav_sdk::async_trait]
impl Delete for PodController {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        self.delete_volume(&req).await.map_err(Error::from)
    }
}

impl PodController {
    async fn delete_volume(&self, req: &DeleteRequest) -> std::result::Result<(), DeleteError> {
        let _ = self.volumes.wait_until_ready().await;
        let provisioner = &self.driver.provisioner;
        let Some(pv) = self.volumes.find(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|c| &c.driver == provisioner && c.volume_handle == req.handle)
        }) else {
            tracing::info!(handle = %req.handle, "no PersistentVolume has this handle: nothing to delete");
            return Ok(());
        };
        let pv_uid = pv.uid().unwrap_or_default();
        if self.deleted.contains(&req.handle, &pv_uid, Instant::now()) {
            tracing::debug!(handle = %req.handle, "deleted already: no second deletion pod");
            return Ok(());
        }
        let client = self.driver.client.clone();
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
        let live = match &claim_ref {
            Some(r) => Api::<PersistentVolumeClaim>::namespaced(
                client.clone(),
                r.namespace.as_deref().unwrap_or_default(),
            )
            .get_opt(r.name.as_deref().unwrap_or_default())
            .await
            .map_err(|e| DeleteError::ReadObjects(api_error("the volume's claim", e)))?,
            None => None,
        };
        let Some(pvc) = claim_from_pv(&pv, live) else {
            tracing::warn!(handle = %req.handle, "the PersistentVolume has no claimRef: no deletion pod");
            return Ok(());
        };
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
        let claim = Claim {
            uid: pvc.uid().unwrap_or_default(),
            reference: pv.object_ref(&()),
            pvc,
            sc,
        };
        let (compiled, owner) = self
            .driver
            .compiled()
            .await
            .map_err(DeleteError::Provisioner)?;
        let context = CreationContext::new(&claim.pvc, &claim.sc)
            .map_err(DeleteError::Context)?
            .with_pvc_lookup(self.driver.lookup());
        let deletion = DriverContext::render(move || compiled.render_deletion(&context)).await;
        let result = match deletion {
            Err(e) => Err(DeleteError::Render(e)),
            Ok(deletion) => match deletion.pod_template {
                None => Ok(()),
                Some(template) => {
                    let pod = self.pod(
                        &template,
                        Phase::Deletion,
                        deletion.timeout,
                        &claim,
                        owner.as_ref(),
                    );
                    let result = self
                        .driver
                        .run_phase(Phase::Deletion, &pod, PodFiles::Collected)
                        .await
                        .map_err(DeleteError::DeletionPod);
                    if let Err(e) = &result {
                        self.driver
                            .warn(
                                &claim.reference,
                                Phase::Deletion,
                                &e.to_string(),
                                Some(pod_ref(&pod)),
                            )
                            .await;
                    }
                    result
                }
            },
        };
        if result.is_ok() {
            self.deleted.record(&req.handle, &pv_uid, Instant::now());
            clean_claim_pods(&self.driver, &claim.uid, &Phase::ALL).await;
        }
        result
    }
}

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

    #[test]
    fn settled_claims() {
        let mut pvc = PersistentVolumeClaim::default();
        pvc.metadata.uid = Some("u-1".into());
        assert!(!claim_settled(&pvc, "u-1"));
        assert!(claim_settled(&pvc, "u-2"));
        pvc.spec = Some(PersistentVolumeClaimSpec {
            volume_name: Some("pvc-u-1".into()),
            ..Default::default()
        });
        assert!(claim_settled(&pvc, "u-1"));
    }

    #[test]
    fn capacity_refusals_are_out_of_range_the_others_invalid() {
        use pav_templates::phase::Refusal;
        use pav_templates::{AccessMode, VolumeMode};
        let out_of_range = [
            Refusal::AboveMaximum {
                requested: 2,
                maximum: 1,
            },
            Refusal::BelowMinimum {
                limit: 1,
                minimum: 2,
            },
        ];
        for refusal in out_of_range {
            let message = refusal.to_string();
            let failure = CreateError::Refused(refusal);
            assert_eq!(failure.phase(), Phase::Validation);
            let error = Error::from(failure);
            assert!(matches!(error, Error::OutOfRange(_)), "{error:?}");
            assert_eq!(error.message(), message);
        }
        let invalid = [
            Refusal::VolumeMode {
                requested: VolumeMode::Block,
                supported: vec![VolumeMode::Filesystem],
            },
            // A message that names a capacity no longer decides.
            Refusal::AccessMode {
                requested: AccessMode::ReadWriteMany,
                supported: vec![],
            },
        ];
        for refusal in invalid {
            let error = Error::from(CreateError::Refused(refusal));
            assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
        }
    }

    /// Each step's code and event phase; the API and pod steps keep the
    /// code of the driver's error, whatever their message says.
    #[test]
    fn create_steps_map_to_csi_codes_and_phases() {
        let timed_out = || DriverError::TimedOut("capacity validation".into());
        let template_error = || {
            CreationContext::new(&PersistentVolumeClaim::default(), &StorageClass::default())
                .unwrap_err()
        };
        /// A failure, the test of its CSI error, its event's phase.
        type Case = (CreateError, fn(&Error) -> bool, Phase);
        let cases: Vec<Case> = vec![
            (
                CreateError::NoClaim,
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::NotDynamic {
                    provisioner: "p".into(),
                },
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::AccessMode("ReadWriteSometimes".into()),
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::Context(template_error()),
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::ReadObjects(DriverError::NotFound { what: "x".into() }),
                |e| matches!(e, Error::NotFound(m) if m == "x: not found"),
                Phase::Creation,
            ),
            (
                CreateError::Provisioner(DriverError::InvalidProvisioner("x".into())),
                |e| matches!(e, Error::FailedPrecondition(_)),
                Phase::Creation,
            ),
            (
                CreateError::Render {
                    phase: Phase::Validation,
                    source: DriverError::Render(template_error()),
                },
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::PodCache(timed_out()),
                |e| matches!(e, Error::Unavailable(_)),
                Phase::Creation,
            ),
            (
                CreateError::ValidationPod(PhaseError::Run(timed_out())),
                |e| matches!(e, Error::Unavailable(_)),
                Phase::Validation,
            ),
            (
                CreateError::ValidationPod(PhaseError::Failed(
                    "validation pod pav/v failed: no capacity left".into(),
                )),
                |e| {
                    matches!(e, Error::InvalidArgument(m)
                        if m == "validation pod pav/v failed: no capacity left")
                },
                Phase::Validation,
            ),
            (
                CreateError::CreationPod(DriverError::PodDeleted("x".into())),
                |e| matches!(e, Error::Aborted(_)),
                Phase::Creation,
            ),
            (
                CreateError::CreationPodFailed {
                    message: "creation pod pav/x failed: no".into(),
                    undo: Some(Box::new(PhaseError::Run(DriverError::TimedOut(
                        "deletion pod pav/y did not finish".into(),
                    )))),
                },
                |e| {
                    matches!(e, Error::Internal(m)
                        if m == "creation pod pav/x failed: no; then deletion pod pav/y did not finish")
                },
                Phase::Creation,
            ),
            (
                CreateError::Created {
                    pod: Some("pav/x".into()),
                    problem: CreatedError::NoCapacity,
                    undo: Some(Box::new(PhaseError::Failed(
                        "deletion pod pav/y failed: busy".into(),
                    ))),
                },
                |e| {
                    matches!(e, Error::Internal(m)
                        if m == "creation pod pav/x: spec.volumeCreation.capacity is not set and the creation pod did not write /pav/capacity; then deletion pod pav/y failed: busy")
                },
                Phase::Creation,
            ),
            (
                CreateError::Created {
                    pod: None,
                    problem: CreatedError::Handle(String::new()),
                    undo: None,
                },
                |e| {
                    matches!(e, Error::Internal(m)
                        if m == "volume handle \"\" must be 1 to 128 bytes on one line")
                },
                Phase::Creation,
            ),
        ];
        for (failure, expected, phase) in cases {
            let debug = format!("{failure:?}");
            assert_eq!(failure.phase(), phase, "{debug}");
            let error = Error::from(failure);
            assert!(expected(&error), "{debug} became {error:?}");
        }
    }

    /// DeleteVolume's steps keep the code of the driver's error, except a
    /// context the volume's own records cannot make and a failed deletion
    /// pod: `INTERNAL`.
    #[test]
    fn delete_steps_map_to_csi_codes() {
        let pvc = PersistentVolumeClaim::default(); // no UID: no context
        let sc = StorageClass::default();
        let context = CreationContext::new(&pvc, &sc).unwrap_err();
        let message = context.to_string();
        let error = Error::from(DeleteError::Context(context));
        assert!(matches!(error, Error::Internal(_)), "{error:?}");
        assert_eq!(error.message(), message);
        let failed = Error::from(DeleteError::DeletionPod(PhaseError::Failed(
            "deletion pod pav/d failed: busy".into(),
        )));
        assert!(
            matches!(&failed, Error::Internal(m) if m == "deletion pod pav/d failed: busy"),
            "{failed:?}"
        );
        let timed_out = || DriverError::TimedOut("x".into());
        let kept = [
            DeleteError::ReadObjects(timed_out()),
            DeleteError::Provisioner(timed_out()),
            DeleteError::Render(timed_out()),
            DeleteError::DeletionPod(PhaseError::Run(timed_out())),
        ];
        for failure in kept {
            assert!(matches!(Error::from(failure), Error::Unavailable(_)));
        }
    }
}

#[cfg(test)]
mod scenarios;
