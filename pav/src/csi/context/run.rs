//! The async half of the recipe: running one phase pod. The validation,
//! creation, deletion, expansion, node expansion, snapshot and unstaging
//! pods take this path; the staging pod, which may keep running, waits for
//! `/pav/ready` instead (see the node plugin).
//!
//! A run creates the pod unless it exists (a restarted driver picks up its
//! pod), waits for it to terminate (and for the node plugin to collect its
//! `/pav` files when it ran elsewhere), and turns a failure into the
//! phase's error. [`DriverContext::run`] also counts it in the
//! metrics, reports a failed pod as a Warning event, and deletes the pod
//! afterwards, unless the run did not end (a
//! transient [`DriverError`]): then the pod carries on and the CO's retry
//! picks it up.

use std::path::Path;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::ResourceExt;
use pav_templates::Phase;

use super::{DriverContext, Finished, pod_ref};
use crate::driver_error::DriverError;
use crate::pods::results::{self, Collected, PodState};

/// Where a pod's `/pav/error` is read from.
#[derive(Debug, Clone, Copy)]
pub enum PodFiles<'a> {
    /// From the annotations the node plugin of the pod's node copied them
    /// to (validation, creation and deletion pods run on any node): the run
    /// waits for the collection.
    Collected,
    /// From the pod's directory, which this process sees (unstaging pods run
    /// on the node plugin's node): removed with the pod.
    Local(&'a Path),
}

/// Why a phase pod's run failed. The caller's error enum decides the CSI
/// code of [`PhaseError::Failed`] (the phase's own: `INVALID_ARGUMENT` for
/// validation, `INTERNAL` for deletion and unstaging).
#[derive(Debug, thiserror::Error)]
pub enum PhaseError {
    /// The pod ran and failed: `<phase> pod ns/name failed: why`.
    #[error("{0}")]
    Failed(String),
    /// The pod could not be created, or its run did not end.
    #[error(transparent)]
    Run(DriverError),
}

/// Whom the Warning event of a failed phase pod is about.
#[derive(Debug, Clone, Copy)]
pub enum Regarding<'a> {
    /// These objects: the claim, volume or client pod the phase is for
    /// (each member's claim for a group; none when there is no such
    /// object).
    Objects(&'a [ObjectReference]),
    /// The PavProvisioner: for the phases no claim, volume or client pod
    /// stands for (capacity, snapshot and group snapshot deletion).
    Provisioner,
}

/// A phase pod that terminated.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The pod as last seen, and its state.
    pub finished: Finished,
    /// The files it exported, when collected.
    pub collected: Option<Collected>,
    /// The message of a failed pod (`<phase> pod ns/name failed: why`).
    pub failure: Option<String>,
}

impl DriverContext {
    /// Creates `pod` for `phase` unless it exists and waits until it
    /// terminated (and, for [`PodFiles::Collected`], was collected).
    pub async fn run_pod(
        &self,
        phase: Phase,
        pod: &Pod,
        files: PodFiles<'_>,
    ) -> Result<Ran, DriverError> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        self.pods.ensure(pod).await?;
        let collect = matches!(files, PodFiles::Collected);
        let finished = (self.pods)
            .wait_terminated(phase, &namespace, &name, collect)
            .await?;
        let collected = Collected::of(&finished.pod);
        let failure = match &finished.state {
            PodState::Failed { message } => {
                let exported = match files {
                    PodFiles::Collected => collected.as_ref().and_then(|c| c.error.clone()),
                    PodFiles::Local(dir) => results::read_exported(dir, "error"),
                };
                Some(results::pod_failure(
                    phase,
                    &namespace,
                    &name,
                    exported.as_deref(),
                    message,
                ))
            }
            _ => None,
        };
        Ok(Ran {
            finished,
            collected,
            failure,
        })
    }

    /// Runs `pod` for `phase` to the end: counted in the metrics, a
    /// failed pod reported as a Warning event on `regarding`, and the pod
    /// deleted afterwards (with its directory for [`PodFiles::Local`])
    /// unless the run did not end ([`DriverError::is_transient`]).
    /// Returns the `/pav` files the pod exported.
    pub async fn run(
        &self,
        (phase, pod): (Phase, &Pod),
        files: PodFiles<'_>,
        regarding: Regarding<'_>,
    ) -> Result<Option<Collected>, PhaseError> {
        let op = self.metrics.start(phase);
        let result = match self.run_pod(phase, pod, files).await {
            Ok(Ran {
                failure: Some(message),
                ..
            }) => Err(PhaseError::Failed(message)),
            // A pod on this node: its files are read before its
            // directory goes with it.
            Ok(ran) => Ok(match files {
                PodFiles::Collected => ran.collected,
                PodFiles::Local(dir) => Some(Collected::read(dir)),
            }),
            Err(e) => Err(PhaseError::Run(e)),
        };
        op.finish(&result);
        if let Err(PhaseError::Failed(message)) = &result {
            self.warn_regarding(regarding, phase, message, pod).await;
        }
        if !matches!(&result, Err(PhaseError::Run(e)) if e.is_transient()) {
            self.delete_quietly(pod).await;
            if let PodFiles::Local(dir) = files
                && let Err(e) = crate::pods::dir::remove_pod_dir(dir)
            {
                tracing::warn!(pod = %pod.name_any(), error = %pav_csi::error_chain(&e), "cannot remove the pod's directory");
            }
        }
        result
    }

    /// Reports `phase`'s pod failing with `message` on `regarding`.
    async fn warn_regarding(
        &self,
        regarding: Regarding<'_>,
        phase: Phase,
        message: &str,
        pod: &Pod,
    ) {
        let objects = match regarding {
            Regarding::Objects(objects) => objects.to_vec(),
            Regarding::Provisioner => vec![self.served.reference().await],
        };
        for object in &objects {
            self.events
                .warn(object, phase, message, Some(pod_ref(pod)))
                .await;
        }
    }

    /// Deletes a PaV pod and waits until it is gone; a failure is logged
    /// (the startup sweeps remove what is left).
    pub async fn delete_quietly(&self, pod: &Pod) {
        let namespace = pod.namespace().unwrap_or_default();
        if let Err(e) = self.pods.delete(&namespace, &pod.name_any()).await {
            tracing::warn!(pod = %pod.name_any(), error = %pav_csi::error_chain(&e), "cannot delete PaV pod");
        }
    }
}
