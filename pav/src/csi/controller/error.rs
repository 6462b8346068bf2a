//! Why CreateVolume and DeleteVolume fail: one variant per step, one
//! mapping to CSI codes each, and the phase of the claim's event.

use pav_sdk::Error;
use pav_templates::Phase;

use crate::csi::context::{DriverError, PhaseError};
use crate::pods::results::CreatedError;
use crate::recipe::{PlanError, UnknownAccessMode};

/// Why CreateVolume failed: one variant per step. [`CreateError::phase`]
/// names the phase for the claim's event and `From<CreateError> for
/// pav_sdk::Error` is the one mapping to CSI codes. Steps that talk to the
/// API server or run pods carry the driver's error as their source.
#[derive(Debug, thiserror::Error)]
pub(super) enum CreateError {
    /// external-provisioner passed no claim.
    #[error("the claim is unknown: run external-provisioner with --extra-create-metadata")]
    NoClaim,
    /// Reading the claim or its StorageClass.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// Planning the validation or creation phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The claim asks for an access mode PaV does not know.
    #[error(transparent)]
    AccessMode(UnknownAccessMode),
    /// The request's data source is of a kind pav does not know.
    #[error("data source {0} is not supported")]
    UnknownSource(String),
    /// `spec.dataSources` does not list the claim's data source kind.
    #[error("PavProvisioner {provisioner} does not create volumes from a {}: spec.dataSources does not list it", kind.as_str())]
    SourceNotListed {
        /// Its name.
        provisioner: String,
        /// The claim's data source kind.
        kind: pav_templates::DataSourceKind,
    },
    /// The source volume's PersistentVolume has no capacity.
    #[error(transparent)]
    SourceCapacity(pav_templates::Error),
    /// The data source does not exist (any more).
    #[error("the {} to create the volume from, handle {handle:?}, does not exist", kind.as_str())]
    SourceMissing {
        /// Its kind.
        kind: pav_templates::DataSourceKind,
        /// Its handle.
        handle: String,
    },
    /// The evaluated validation rules refuse the request.
    #[error(transparent)]
    Refused(pav_templates::phase::Refusal),
    /// Reading the pod cache.
    #[error(transparent)]
    PodCache(DriverError),
    /// The validation pod failed (`INVALID_ARGUMENT`) or did not finish.
    #[error(transparent)]
    ValidationPod(PhaseError),
    /// The creation pod did not finish (the CO's retry picks it up).
    #[error(transparent)]
    CreationPod(DriverError),
    /// The creation pod failed; the deletion pod ran to undo the creation
    /// (`undo`: how that failed).
    #[error("{message}{}", then(undo.as_deref()))]
    CreationPodFailed {
        /// `creation pod ns/name failed: why`.
        message: String,
        /// The deletion phase's failure, if it failed.
        undo: Option<Box<UndoError>>,
    },
    /// What the spec evaluated to, or the creation pod (`pod`, `ns/name`)
    /// exported, is no volume; the deletion pod ran to undo a pod's
    /// creation (`undo`: how that failed). Two causes, the problem and the
    /// undoing's failure, so neither is the source: the message says both.
    #[error("{}{}{}", pod.as_ref().map(|p| format!("creation pod {p}: ")).unwrap_or_default(), pav_csi::error_chain(problem), then(undo.as_deref()))]
    Created {
        /// The creation pod, if one ran.
        pod: Option<String>,
        /// What was wrong.
        problem: CreatedError,
        /// The deletion phase's failure, if it failed.
        undo: Option<Box<UndoError>>,
    },
}

/// How undoing a failed creation with the deletion phase failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum UndoError {
    /// Planning the deletion phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The deletion pod failed or did not finish.
    #[error(transparent)]
    Pod(PhaseError),
}

/// `; then <how the undoing failed>` (and its causes: it is no source),
/// or nothing.
pub(super) fn then(undo: Option<&UndoError>) -> String {
    undo.map(|e| format!("; then {}", pav_csi::error_chain(e)))
        .unwrap_or_default()
}

/// How a creation pod's run failed, before the deletion pod undoes it.
pub(super) enum Failed {
    /// The pod failed: its message.
    Pod(String),
    /// The pod succeeded but exported no volume.
    Result(CreatedError),
}

impl CreateError {
    /// The phase that failed, the reason of the claim's event:
    /// `ValidationFailed` for the evaluated rules and the validation pod,
    /// `CreationFailed` for the rest.
    pub(super) fn phase(&self) -> Phase {
        match self {
            CreateError::Refused(_) | CreateError::ValidationPod(_) => Phase::Validation,
            CreateError::NoClaim
            | CreateError::ReadObjects(_)
            | CreateError::Plan(_)
            | CreateError::AccessMode(_)
            | CreateError::UnknownSource(_)
            | CreateError::SourceNotListed { .. }
            | CreateError::SourceMissing { .. }
            | CreateError::SourceCapacity(_)
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
        let message = pav_csi::error_chain(&error);
        match error {
            CreateError::NoClaim
            | CreateError::AccessMode(_)
            | CreateError::UnknownSource(_)
            | CreateError::SourceNotListed { .. }
            | CreateError::SourceCapacity(_)
            | CreateError::Refused(Refusal::VolumeMode { .. } | Refusal::AccessMode { .. })
            | CreateError::ValidationPod(PhaseError::Failed(_)) => Error::InvalidArgument(message),
            CreateError::Refused(Refusal::AboveMaximum { .. } | Refusal::BelowMinimum { .. }) => {
                Error::OutOfRange(message)
            }
            CreateError::SourceMissing { .. } => Error::NotFound(message),
            CreateError::Plan(e) => e.into(),
            CreateError::ReadObjects(e)
            | CreateError::PodCache(e)
            | CreateError::ValidationPod(PhaseError::Run(e))
            | CreateError::CreationPod(e) => e.into(),
            CreateError::CreationPodFailed { .. } | CreateError::Created { .. } => {
                Error::Internal(message)
            }
        }
    }
}

/// Why DeleteVolume failed: one variant per step; `From<DeleteError> for
/// pav_sdk::Error` is the one mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
pub(super) enum DeleteError {
    /// Listing the staging pods that say whether the volume is staged.
    #[error(transparent)]
    ListStagingPods(DriverError),
    /// The volume is still staged, or being unstaged, on a node: its
    /// staging pods (`namespace/name`) remain until their node plugin has
    /// unstaged it, and a deletion pod now would pull the storage from
    /// under the unstaging (`FAILED_PRECONDITION`: the CO retries).
    #[error("PersistentVolume {pv} is still staged on node {}: it is deleted once the node plugin has unstaged it (staging pod {})", nodes.join(", "), pods.join(", "))]
    Staged {
        /// The PersistentVolume's name.
        pv: String,
        /// The nodes it is staged on.
        nodes: Vec<String>,
        /// Its staging pods, `namespace/name`.
        pods: Vec<String>,
    },
    /// Reading the volume's claim or its StorageClass.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// Planning the deletion phase from the recorded claim and class.
    #[error(transparent)]
    Plan(PlanError),
    /// The deletion pod failed (`INTERNAL`) or did not finish.
    #[error(transparent)]
    DeletionPod(PhaseError),
}

impl From<DeleteError> for Error {
    /// A volume still staged is `FAILED_PRECONDITION` (the CSI spec's code
    /// for a volume in use; external-provisioner retries with backoff); a
    /// context that the volume's own records do not make, and a failed
    /// deletion pod, are `INTERNAL`; the API, render and pod-run steps keep
    /// the code of the driver's error.
    fn from(error: DeleteError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            DeleteError::Staged { .. } => Error::FailedPrecondition(message),
            DeleteError::Plan(PlanError::Context(_))
            | DeleteError::DeletionPod(PhaseError::Failed(_)) => Error::Internal(message),
            DeleteError::Plan(e) => e.into(),
            DeleteError::ListStagingPods(e)
            | DeleteError::ReadObjects(e)
            | DeleteError::DeletionPod(PhaseError::Run(e)) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::api::storage::v1::StorageClass;
    use pav_templates::CreationContext;

    /// A step's error that only carries another one prints it once: an
    /// error-chain printer (`anyhow`'s `{:#}`, tracing's error fields)
    /// walks `source()`, and a `{0}` message with the same error as its
    /// source printed the cause twice.
    #[test]
    fn a_wrapped_cause_is_printed_once_in_the_chain() {
        let error = CreateError::Plan(PlanError::Provisioner(DriverError::InvalidProvisioner(
            "PavProvisioner p: spec.volumeCreation: missing".into(),
        )));
        let chain: Vec<String> =
            std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
                .map(ToString::to_string)
                .collect();
        assert_eq!(chain, ["PavProvisioner p: spec.volumeCreation: missing"]);
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
                CreateError::Plan(PlanError::NotDynamic {
                    provisioner: "p".into(),
                    phase: Phase::Validation,
                }),
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::AccessMode(UnknownAccessMode("ReadWriteSometimes".into())),
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::Plan(PlanError::Context(template_error())),
                |e| matches!(e, Error::InvalidArgument(_)),
                Phase::Creation,
            ),
            (
                CreateError::ReadObjects(DriverError::NotFound { what: "x".into() }),
                |e| matches!(e, Error::NotFound(m) if m == "x: not found"),
                Phase::Creation,
            ),
            (
                CreateError::Plan(PlanError::Provisioner(DriverError::InvalidProvisioner(
                    "x".into(),
                ))),
                |e| matches!(e, Error::FailedPrecondition(_)),
                Phase::Creation,
            ),
            (
                CreateError::Plan(PlanError::Render {
                    phase: Phase::Validation,
                    error: template_error(),
                }),
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
                    undo: Some(Box::new(UndoError::Pod(PhaseError::Run(
                        DriverError::TimedOut("deletion pod pav/y did not finish".into()),
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
                    undo: Some(Box::new(UndoError::Pod(PhaseError::Failed(
                        "deletion pod pav/y failed: busy".into(),
                    )))),
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
        let error = Error::from(DeleteError::Plan(PlanError::Context(context)));
        assert!(matches!(error, Error::Internal(_)), "{error:?}");
        assert_eq!(error.message(), message);
        let failed = Error::from(DeleteError::DeletionPod(PhaseError::Failed(
            "deletion pod pav/d failed: busy".into(),
        )));
        assert!(
            matches!(&failed, Error::Internal(m) if m == "deletion pod pav/d failed: busy"),
            "{failed:?}"
        );
        let staged = Error::from(DeleteError::Staged {
            pv: "pvc-1".into(),
            nodes: vec!["node-a".into(), "node-b".into()],
            pods: vec!["pav/s-a".into(), "pav/s-b".into()],
        });
        assert!(
            matches!(&staged, Error::FailedPrecondition(m) if m == "PersistentVolume pvc-1 is still staged on node node-a, node-b: it is deleted once the node plugin has unstaged it (staging pod pav/s-a, pav/s-b)"),
            "{staged:?}"
        );
        let timed_out = || DriverError::TimedOut("x".into());
        let kept = [
            DeleteError::ListStagingPods(timed_out()),
            DeleteError::ReadObjects(timed_out()),
            DeleteError::Plan(PlanError::Provisioner(timed_out())),
            DeleteError::DeletionPod(PhaseError::Run(timed_out())),
        ];
        for failure in kept {
            assert!(matches!(Error::from(failure), Error::Unavailable(_)));
        }
    }
}
