//! The async half of the recipe: running one phase pod, for every phase.
//!
//! A run creates the pod unless it exists (a restarted driver picks up its
//! pod), waits for it to terminate (and for the node plugin to collect its
//! `/pav` files when it ran elsewhere), reads what it left, and turns a
//! failure into the phase's error. [`DriverContext::run_with`] also counts
//! it in the metrics, reports a failure as a Warning event, and deletes
//! the pod afterwards, unless the run did not end (a transient
//! [`DriverError`]: the pod carries on and the CO's retry picks it up) or
//! the pod is [`Lifetime::kept`]. Two phases need the [`Lifetime`] options:
//! the staging pod's run ends when it is ready, and it stays while its
//! volume is staged; the creation pod stays until its claim is bound or
//! its failure undone.

use std::convert::Infallible;
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

/// Why a run that reads what its pod left failed: the run's failure, or
/// the pod succeeded but what it left is unusable (the reader's error).
#[derive(Debug)]
pub enum RunFailure<E> {
    /// The pod failed, could not be created, or its run did not end.
    Pod(PhaseError),
    /// The pod succeeded, but its results cannot be used.
    Unusable(E),
}

/// When a phase pod's run ends and whose the pod is afterwards: the
/// defaults (the run ends when the pod terminates, then the pod is
/// deleted) fit every phase but creation and staging.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lifetime {
    /// The run also ends when the pod, still running, wrote `ready` into
    /// its [`PodFiles::Local`] directory: the staging pod, which holds its
    /// volume for as long as the volume is staged.
    pub ends_when_ready: bool,
    /// The pod is the caller's after the run, whatever its result: the
    /// creation pod stays until its claim is bound (or its failure was
    /// undone), the staging pod while its volume is staged.
    pub kept: bool,
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

/// A phase pod whose run ended.
#[derive(Debug, Clone)]
struct Ran {
    /// The files it exported: copied to annotations by the node plugin
    /// (`None` until collected), or read from the local directory.
    collected: Option<Collected>,
    /// The message of a failed pod (`<phase> pod ns/name failed: why`).
    failure: Option<String>,
}

impl DriverContext {
    /// Creates `pod` for `phase` unless it exists and waits until it
    /// terminated (and, for [`PodFiles::Collected`], was collected) or, for
    /// [`Lifetime::ends_when_ready`], said it is ready.
    async fn run_pod(
        &self,
        phase: Phase,
        pod: &Pod,
        files: PodFiles<'_>,
        lifetime: Lifetime,
    ) -> Result<Ran, DriverError> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        self.pods.ensure(pod).await?;
        let finished = match files {
            PodFiles::Local(dir) if lifetime.ends_when_ready => {
                let ready = dir.join("ready");
                (self.pods)
                    .wait(phase, &namespace, &name, |pod| {
                        let state = PodState::of(pod);
                        let done = state.is_terminated()
                            || (matches!(state, PodState::Running) && ready.exists());
                        done.then(|| Finished {
                            pod: pod.clone(),
                            state,
                        })
                    })
                    .await?
            }
            _ => {
                let collect = matches!(files, PodFiles::Collected);
                (self.pods)
                    .wait_terminated(phase, &namespace, &name, collect)
                    .await?
            }
        };
        let collected = match files {
            PodFiles::Collected => Collected::of(&finished.pod),
            // A pod on this node: its files are read before its
            // directory goes with it.
            PodFiles::Local(dir) => Some(Collected::read(dir)),
        };
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
        Ok(Ran { collected, failure })
    }

    /// Runs `pod` for `phase` to the end ([`DriverContext::run_with`],
    /// with the default [`Lifetime`]) and returns the `/pav` files it
    /// exported.
    pub async fn run(
        &self,
        phase_pod: (Phase, &Pod),
        files: PodFiles<'_>,
        regarding: Regarding<'_>,
    ) -> Result<Option<Collected>, PhaseError> {
        let read = Ok::<_, Infallible>;
        match (self.run_with(phase_pod, files, regarding, Lifetime::default(), read)).await {
            Ok(collected) => Ok(collected),
            Err(RunFailure::Pod(e)) => Err(e),
            Err(RunFailure::Unusable(never)) => match never {},
        }
    }

    /// Runs `pod` for `phase` and `read`s what it left: counted in the
    /// metrics, a failure (of the pod, or of `read`) reported as a Warning
    /// event on `regarding`, and the pod deleted afterwards (with its
    /// directory for [`PodFiles::Local`]) unless it is
    /// [`Lifetime::kept`] or the run did not end
    /// ([`DriverError::is_transient`]).
    pub async fn run_with<T, E: std::error::Error>(
        &self,
        (phase, pod): (Phase, &Pod),
        files: PodFiles<'_>,
        regarding: Regarding<'_>,
        lifetime: Lifetime,
        read: impl FnOnce(Option<Collected>) -> Result<T, E>,
    ) -> Result<T, RunFailure<E>> {
        let op = self.metrics.start(phase);
        let result = match self.run_pod(phase, pod, files, lifetime).await {
            Ok(Ran {
                failure: Some(message),
                ..
            }) => Err(RunFailure::Pod(PhaseError::Failed(message))),
            Ok(ran) => read(ran.collected).map_err(RunFailure::Unusable),
            Err(e) => Err(RunFailure::Pod(PhaseError::Run(e))),
        };
        op.finish(&result);
        let failure = match &result {
            Err(RunFailure::Pod(PhaseError::Failed(message))) => Some(message.clone()),
            Err(RunFailure::Unusable(e)) => Some(format!(
                "{phase} pod {}/{}: {}",
                pod.namespace().unwrap_or_default(),
                pod.name_any(),
                pav_csi::error_chain(e)
            )),
            _ => None,
        };
        if let Some(message) = failure {
            self.warn_regarding(regarding, phase, &message, pod).await;
        }
        let ended =
            !matches!(&result, Err(RunFailure::Pod(PhaseError::Run(e))) if e.is_transient());
        if ended && !lifetime.kept {
            let dir = match files {
                PodFiles::Local(dir) => Some(dir),
                PodFiles::Collected => None,
            };
            self.delete_with_dir(pod, dir).await;
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

    /// [`Self::delete_quietly`], then removes the pod's local directory
    /// `dir` (where its `/pav` files were collected), if it has one; a
    /// failure is logged.
    pub async fn delete_with_dir(&self, pod: &Pod, dir: Option<&Path>) {
        self.delete_quietly(pod).await;
        if let Some(dir) = dir
            && let Err(e) = crate::pods::dir::remove_pod_dir(dir)
        {
            tracing::warn!(pod = %pod.name_any(), error = %pav_csi::error_chain(&e), "cannot remove the pod's directory");
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
