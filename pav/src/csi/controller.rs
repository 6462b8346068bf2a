//! Validation, creation and deletion carried out by pods (`pav csi-controller`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use pav_sdk::{ContentSource, Create, CreateRequest, Error, Result, Volume};
use pav_templates::context::MUTABLE_PARAMETERS_KEY;
use pav_templates::{CompiledProvisioner, DataSourceKind, Phase, Source};

use self::deleted::Deleted;
use super::context::{DriverContext, api_error};
use crate::csi::context::{Lifetime, PhaseError, PodFiles, Regarding, RunFailure};
use crate::phases::CreationPlan;
use crate::pods::results;
use crate::recipe::{Plan, Planner, claim_access_modes};

mod attach;
pub(crate) mod capacity;
mod cleanup;
mod delete;
pub mod deleted;
mod error;
pub(crate) mod expand;
mod group_snapshot;
mod modify;
mod populate;
mod records;
pub(crate) mod snapshot;

pub use self::cleanup::sweep;
use self::cleanup::{claim_settled, claim_uid_label, clean_claim_pods};
use self::error::{CreateError, Failed, UndoError};
use self::records::Records;

/// The pav-sdk Create and Delete of a PavProvisioner.
#[derive(Debug)]
pub struct PodController {
    driver: Arc<DriverContext>,
    records: Records,
    deleted: Deleted,
    capacities: crate::csi::answers::Answers<u64>,
}

/// One claim being provisioned, with the live objects its contexts need.
struct ClaimObjects {
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
            records: Records::new(driver.clone(), volumes),
            driver,
            deleted: Deleted::default(),
            capacities: Default::default(),
        }
    }

    async fn claim(&self, req: &CreateRequest) -> std::result::Result<ClaimObjects, CreateError> {
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
        Ok(ClaimObjects {
            pvc,
            sc,
            uid,
            reference,
        })
    }

    async fn create_volume(
        &self,
        req: &CreateRequest,
        claim: &ClaimObjects,
    ) -> std::result::Result<Volume, CreateError> {
        let planner = self
            .driver
            .served
            .planner()
            .await
            .map_err(CreateError::Plan)?;
        let (pvc, sc) = (claim.pvc.clone(), claim.sc.clone());
        let validation = planner
            .blocking(move |p| p.validation(&pvc, &sc))
            .await
            .map_err(CreateError::Plan)?;
        self.check_request(req, claim, &validation.evaluated)?;
        let source = match &req.source {
            Some(source) => Some(self.source(planner.compiled(), source).await?),
            None => None,
        };
        let (pvc, sc) = (claim.pvc.clone(), claim.sc.clone());
        let nodes = topology_nodes(&req.topology);
        let mutable = req.mutable_parameters.clone();
        let creation = planner
            .blocking(move |p| p.creation(&pvc, &sc, &nodes, source.as_ref(), &mutable))
            .await
            .map_err(CreateError::Plan)?;

        // The validation pod runs unless a creation pod exists already
        // (validation passed before a restart).
        if let Some(pod) = &validation.pod
            && !self.creation_started(&creation.plan).await?
        {
            // CreateVolume's error reports it (ValidationFailed).
            let regarding = Regarding::Objects(&[]);
            (self.driver)
                .run((Phase::Validation, pod), PodFiles::Collected, regarding)
                .await
                .map_err(CreateError::ValidationPod)?;
        }
        let created = self.run_creation(&planner, &creation, claim).await?;
        Ok(volume(created, req))
    }

    /// Checks the request against the evaluated validation rules.
    fn check_request(
        &self,
        req: &CreateRequest,
        claim: &ClaimObjects,
        rules: &pav_templates::ValidationPhase,
    ) -> std::result::Result<(), CreateError> {
        let volume_mode = match req.volume_mode {
            pav_sdk::VolumeMode::Filesystem => pav_templates::VolumeMode::Filesystem,
            pav_sdk::VolumeMode::Block => pav_templates::VolumeMode::Block,
        };
        let access_modes = claim_access_modes(&claim.pvc).map_err(CreateError::AccessMode)?;
        rules
            .admits(
                volume_mode,
                &access_modes,
                req.capacity.min_bytes.unwrap_or(0),
                req.capacity.max_bytes,
            )
            .map_err(CreateError::Refused)
    }

    /// Whether the creation pod exists already.
    async fn creation_started(
        &self,
        creation: &Plan<pav_templates::CreationPhase>,
    ) -> std::result::Result<bool, CreateError> {
        let Some(pod) = &creation.pod else {
            return Ok(false);
        };
        let cached = self
            .driver
            .pods
            .cached(&pod.namespace().unwrap_or_default(), &pod.name_any())
            .await
            .map_err(CreateError::PodCache)?;
        Ok(cached.is_some())
    }

    /// Runs the creation pod, if any, and reads the volume it made; a
    /// failed creation is undone by the deletion phase.
    async fn run_creation(
        &self,
        planner: &Planner,
        creation: &CreationPlan,
        claim: &ClaimObjects,
    ) -> std::result::Result<results::Created, CreateError> {
        let evaluated = &creation.plan.evaluated;
        let default_handle = creation.context.default_handle();
        let Some(pod) = &creation.plan.pod else {
            return results::creation_result(evaluated, None, default_handle).map_err(|problem| {
                CreateError::Created {
                    pod: None,
                    problem,
                    undo: None,
                }
            });
        };
        // The pod stays: until the claim is bound, and after a failure
        // until the deletion phase undid it.
        let lifetime = Lifetime {
            kept: true,
            ..Lifetime::default()
        };
        let read = |collected: Option<results::Collected>| {
            results::creation_result(evaluated, collected.as_ref(), default_handle)
        };
        // CreateVolume's error reports a failure (CreationFailed).
        let regarding = Regarding::Objects(&[]);
        let ran = (self.driver)
            .run_with(
                (Phase::Creation, pod),
                PodFiles::Collected,
                regarding,
                lifetime,
                read,
            )
            .await;
        let failed = match ran {
            Ok(created) => {
                self.clean_up_when_bound(claim);
                return Ok(created);
            }
            // A timeout or API trouble: the pod carries on, the retry picks it up.
            Err(RunFailure::Pod(PhaseError::Run(e))) => return Err(CreateError::CreationPod(e)),
            Err(RunFailure::Pod(PhaseError::Failed(message))) => Failed::Pod(message),
            Err(RunFailure::Unusable(problem)) => Failed::Result(problem),
        };
        Err(self
            .undo_creation(planner, creation, claim, pod, failed)
            .await)
    }

    /// Runs the deletion pod after a failed creation (the guide), deletes
    /// the creation pod once that succeeded, and says what failed.
    async fn undo_creation(
        &self,
        planner: &Planner,
        creation: &CreationPlan,
        claim: &ClaimObjects,
        creation_pod: &Pod,
        failed: Failed,
    ) -> CreateError {
        let (context, pvc) = (creation.context.clone(), claim.pvc.clone());
        let undo = match planner.blocking(move |p| p.deletion(&context, &pvc)).await {
            Err(e) => Err(UndoError::Plan(e)),
            Ok(Plan { pod: None, .. }) => Ok(()),
            // CreateVolume's error reports it, with the creation's.
            Ok(Plan { pod: Some(pod), .. }) => (self.driver)
                .run(
                    (Phase::Deletion, &pod),
                    PodFiles::Collected,
                    Regarding::Objects(&[]),
                )
                .await
                .map(drop)
                .map_err(UndoError::Pod),
        };
        if undo.is_ok() {
            self.driver.delete_quietly(creation_pod).await;
        }
        let undo = undo.err().map(Box::new);
        match failed {
            Failed::Pod(message) => CreateError::CreationPodFailed { message, undo },
            Failed::Result(problem) => CreateError::Created {
                pod: Some(format!(
                    "{}/{}",
                    creation_pod.namespace().unwrap_or_default(),
                    creation_pod.name_any()
                )),
                problem,
                undo,
            },
        }
    }

    /// What a volume is created from, as the creation templates see it;
    /// refused unless `spec.dataSources` lists its kind.
    async fn source(
        &self,
        compiled: &CompiledProvisioner,
        source: &ContentSource,
    ) -> std::result::Result<Source, CreateError> {
        let (kind, handle) = match source {
            ContentSource::Snapshot(handle) => (DataSourceKind::VolumeSnapshot, handle),
            ContentSource::Volume(handle) => (DataSourceKind::PersistentVolumeClaim, handle),
            other => return Err(CreateError::UnknownSource(format!("{other:?}"))),
        };
        if !compiled.data_sources().contains(&kind) {
            return Err(CreateError::SourceNotListed {
                provisioner: self.driver.provisioner.clone(),
                kind,
            });
        }
        let missing = || CreateError::SourceMissing {
            kind,
            handle: handle.to_string(),
        };
        let capacity = match kind {
            DataSourceKind::VolumeSnapshot => {
                self.records
                    .snapshots()
                    .await
                    .map_err(CreateError::ReadObjects)?
                    .into_iter()
                    .find(|s| s.handle == **handle)
                    .ok_or_else(missing)?
                    .size_bytes
            }
            DataSourceKind::PersistentVolumeClaim => {
                let pv = self.records.volume(handle).await.ok_or_else(missing)?;
                pav_templates::context::pv_capacity(&pv).map_err(CreateError::SourceCapacity)?
            }
        };
        Ok(Source {
            kind,
            handle: handle.to_string(),
            capacity,
        })
    }

    /// Deletes the claim's validation and creation pods once the claim is
    /// bound (their results are then recorded in the PersistentVolume) or gone.
    fn clean_up_when_bound(&self, claim: &ClaimObjects) {
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

/// The volume answered to CreateVolume: its volume context is the
/// StorageClass parameters (the guide's `params` when staging) and the
/// claim's VolumeAttributesClass parameters, when it has some, as JSON
/// under [`MUTABLE_PARAMETERS_KEY`] (staging's `mutableParams`); its
/// topology the nodes it is accessible from, as the node plugins report
/// theirs ([`super::node_topology`]).
fn volume(created: results::Created, req: &CreateRequest) -> Volume {
    let mut volume = Volume::new(created.handle, created.capacity);
    volume.context = req.parameters.clone();
    if !req.mutable_parameters.is_empty() {
        volume.context.insert(
            MUTABLE_PARAMETERS_KEY.to_owned(),
            serde_json::to_string(&req.mutable_parameters).unwrap_or_default(),
        );
    }
    for node in &created.topology {
        volume = volume.accessible_from(super::node_topology(node));
    }
    volume
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
                    .events
                    .warn(&claim.reference, phase, error.message(), None)
                    .await;
                Err(error)
            }
        }
    }

    /// A volume exists while a PersistentVolume of this driver has its handle.
    async fn exists(&self, volume: &pav_sdk::VolumeId) -> Result<bool> {
        Ok(self.records.volume(volume).await.is_some())
    }
}

/// The nodes of `requirement` (pav's node topology key), preferred first,
/// then the other requisite ones, each once: the templates'
/// `topologyNodes`.
fn topology_nodes(requirement: &pav_sdk::TopologyRequirement) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    requirement
        .preferred
        .iter()
        .chain(&requirement.requisite)
        .filter_map(|topology| topology.get(super::TOPOLOGY_KEY))
        .filter(|node| seen.insert(node.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod attribute_scenarios;
#[cfg(test)]
mod scenarios;

#[cfg(test)]
mod tests {
    #[test]
    fn topology_nodes_are_preferred_first_then_requisite_each_once() {
        let node = |n: &str| super::super::node_topology(n);
        let other_key = pav_sdk::Topology::from([("zone".to_owned(), "a".to_owned())]);
        let requirement = pav_sdk::TopologyRequirement {
            requisite: vec![node("n1"), node("n2"), other_key.clone(), node("n3")],
            preferred: vec![node("n3"), other_key, node("n2")],
        };
        assert_eq!(super::topology_nodes(&requirement), ["n3", "n2", "n1"]);
        assert!(super::topology_nodes(&Default::default()).is_empty());
    }
}
