//! Why staging or unstaging failed: [`StageError`], [`UnstageError`].

use pav_sdk::Error;

use crate::csi::context::{DriverError, PhaseError};
use crate::pods::ANNOTATION_UNSTAGING;
use crate::pods::dir::PodDirError;
use crate::recipe::PlanError;

/// Why NodeStageVolume failed: one variant per step. [`StageError::reported`]
/// says whether the client pod gets a `StagingFailed` event and
/// `From<StageError> for pav_sdk::Error` is the one mapping to CSI codes.
/// Steps that talk to the API server or wait for pods carry the driver's
/// error as their source.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The CO passed no client pod.
    #[error("the client pod is unknown: the CSIDriver needs podInfoOnMount: true")]
    NoPodInfo,
    /// Reading the client pod.
    #[error(transparent)]
    ClientPod(DriverError),
    /// Reading the client pod's claims, their volumes, or this node.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// None of the client pod's claims is bound to the volume.
    #[error("pod {pod} uses no claim bound to volume {handle:?} of {provisioner}")]
    NoVolume {
        /// `namespace/name` of the client pod.
        pod: String,
        /// The volume handle staged.
        handle: String,
        /// The driver's name.
        provisioner: String,
    },
    /// Staging per node: no PersistentVolume of the driver has the
    /// handle, or the one that has it is bound to no claim that exists.
    #[error(
        "no PersistentVolume of {provisioner} with handle {handle:?} is bound to an existing claim"
    )]
    Unclaimed {
        /// The volume handle staged.
        handle: String,
        /// The driver's name.
        provisioner: String,
    },
    /// Planning the staging phase.
    #[error(transparent)]
    Plan(PlanError),
    /// Writing the client pod's service-account tokens into the staging
    /// pod's `/pav/tokens`.
    #[error("handing the client pod's service-account tokens to the staging pod")]
    Tokens(#[source] super::tokens::TokenFileError),
    /// Creating the staging pod, or waiting for it to be ready.
    #[error(transparent)]
    StagingPod(DriverError),
    /// Staged per node: telling whether the volume is at the pod's
    /// `/pav/volume` or moved to the staging path already.
    #[error("reading the mounts at {path}")]
    MountTable {
        /// The path asked about.
        path: String,
        /// Why the mount table could not tell.
        #[source]
        source: pav_csi::mount::TableError,
    },
    /// Staged per node: bind-mounting the pod's `/pav/volume` at the
    /// staging path.
    #[error("mounting the staged volume at the staging path {path}")]
    BindStagingPath {
        /// The staging path.
        path: String,
        /// Why the bind mount failed.
        #[source]
        source: pav_csi::mount::MountError,
    },
    /// Staged per node: unmounting the pod's own mount of the volume once
    /// it is at the staging path.
    #[error("unmounting the staging pod's {path}")]
    UnmountPodMount {
        /// The pod's `/pav/volume` on the host.
        path: String,
        /// Why it could not be unmounted.
        #[source]
        source: pav_csi::mount::UnmountError,
    },
    /// The client pod went (or is terminating) while its staging pod ran:
    /// nobody waits for the volume, and the staging was torn down (`undo`:
    /// how that failed).
    #[error(
        "pod {pod} went while its staging pod ran, so the staging was undone{}",
        then_undo(undo)
    )]
    ClientGone {
        /// `namespace/name` of the client pod.
        pod: String,
        /// The tear-down's failure, if it failed.
        undo: Option<Box<UnstageError>>,
    },
    /// The staging pod failed, or what it put at `/pav/volume` cannot be
    /// used; the unstaging pod ran to undo it (`undo`: how that failed).
    #[error("{message}{}", then_undo(undo))]
    Failed {
        /// `staging pod ns/name failed: why`.
        message: String,
        /// The tear-down's failure, if it failed.
        undo: Option<Box<UnstageError>>,
    },
}

/// How undoing a staging failed, as the end of the staging's message
/// ("; then ..." and its causes: it is no source), or nothing.
fn then_undo(undo: &Option<Box<UnstageError>>) -> String {
    undo.as_ref()
        .map(|e| format!("; then {}", pav_csi::error_chain(e)))
        .unwrap_or_default()
}

impl StageError {
    /// Whether the client pod (staging per node: the claim) gets an
    /// event: once it has been read.
    pub fn reported(&self) -> bool {
        match self {
            StageError::NoPodInfo
            | StageError::ClientPod(_)
            | StageError::ClientGone { .. }
            | StageError::Unclaimed { .. } => false,
            StageError::ReadObjects(_)
            | StageError::MountTable { .. }
            | StageError::BindStagingPath { .. }
            | StageError::UnmountPodMount { .. }
            | StageError::NoVolume { .. }
            | StageError::Plan(_)
            | StageError::StagingPod(_)
            | StageError::Tokens(_)
            | StageError::Failed { .. } => true,
        }
    }
}

impl From<StageError> for Error {
    /// A volume the client pod does not use is `NOT_FOUND`; a request the
    /// CO cannot make without `podInfoOnMount` a failed precondition; a
    /// context the objects do not make `INVALID_ARGUMENT`; a failed staging
    /// `INTERNAL`; a client pod gone mid-staging `FAILED_PRECONDITION` (an
    /// answer kubelet takes as final: nothing is left to unpublish); the
    /// API and pod steps keep the code of the driver's error.
    fn from(error: StageError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            StageError::NoPodInfo | StageError::ClientGone { .. } => {
                Error::FailedPrecondition(message)
            }
            StageError::NoVolume { .. } | StageError::Unclaimed { .. } => Error::NotFound(message),
            StageError::Failed { .. }
            | StageError::MountTable { .. }
            | StageError::BindStagingPath { .. }
            | StageError::UnmountPodMount { .. }
            | StageError::Tokens(_) => Error::Internal(message),
            StageError::Plan(e) => e.into(),
            StageError::ClientPod(e) | StageError::ReadObjects(e) | StageError::StagingPod(e) => {
                e.into()
            }
        }
    }
}

/// Why NodeUnstageVolume (or the tear-down after a failed staging) failed:
/// one variant per step. [`UnstageError::reported`] says whether the client
/// pod gets an `UnstagingFailed` event and `From<UnstageError> for
/// pav_sdk::Error` is the one mapping to CSI codes.
#[derive(Debug, thiserror::Error)]
pub enum UnstageError {
    /// Listing this node's staging pods of the volume.
    #[error(transparent)]
    ListStagingPods(DriverError),
    /// Reading the claim, its volume or this node.
    #[error(transparent)]
    ReadObjects(DriverError),
    /// Planning the unstaging phase.
    #[error(transparent)]
    Plan(PlanError),
    /// The unstaging phase recorded on the staging pod does not parse.
    #[error("annotation {ANNOTATION_UNSTAGING}")]
    RecordedUnstaging(#[source] serde_json::Error),
    /// Stopping the staging pod, or waiting for it to stop.
    #[error(transparent)]
    StopStagingPod(DriverError),
    /// The unstaging pod failed (`INTERNAL`) or did not finish.
    #[error(transparent)]
    UnstagingPod(PhaseError),
    /// Unmounting or removing what the staging pod left.
    #[error("cleaning up after staging pod {pod}")]
    CleanUp {
        /// `namespace/name` of the staging pod.
        pod: String,
        /// What could not be unmounted or removed.
        #[source]
        source: PodDirError,
    },
    /// Letting the staging pod go (removing its finalizer).
    #[error(transparent)]
    ReleaseStagingPod(DriverError),
}

impl UnstageError {
    /// Whether the client pod gets an event: once a staging pod, which
    /// names it, was found.
    pub fn reported(&self) -> bool {
        match self {
            UnstageError::ListStagingPods(_) => false,
            UnstageError::ReadObjects(_)
            | UnstageError::Plan(_)
            | UnstageError::RecordedUnstaging(_)
            | UnstageError::StopStagingPod(_)
            | UnstageError::UnstagingPod(_)
            | UnstageError::CleanUp { .. }
            | UnstageError::ReleaseStagingPod(_) => true,
        }
    }
}

impl From<UnstageError> for Error {
    /// A context the objects do not make is `INVALID_ARGUMENT`; a broken
    /// record, a failed unstaging pod and a failed clean-up `INTERNAL`; the
    /// API and pod steps keep the code of the driver's error.
    fn from(error: UnstageError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            UnstageError::Plan(e) => e.into(),
            UnstageError::RecordedUnstaging(_)
            | UnstageError::UnstagingPod(PhaseError::Failed(_))
            | UnstageError::CleanUp { .. } => Error::Internal(message),
            UnstageError::ListStagingPods(e)
            | UnstageError::ReadObjects(e)
            | UnstageError::StopStagingPod(e)
            | UnstageError::UnstagingPod(PhaseError::Run(e))
            | UnstageError::ReleaseStagingPod(e) => e.into(),
        }
    }
}
