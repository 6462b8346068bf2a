//! The one error type a provisioner returns.

/// Why a provisioner call failed.
///
/// Each variant names the gRPC status code that pav-csi answers with, which
/// is the code the CSI spec prescribes for that situation, so provisioner
/// authors pick the meaning and never touch gRPC. The message is shown to the
/// CO (and so to the Kubernetes user in events): keep secrets out of it.
///
/// | Variant | gRPC code | Typical use |
/// |---|---|---|
/// | [`InvalidArgument`](Error::InvalidArgument) | `INVALID_ARGUMENT` | unknown or malformed StorageClass parameter, unsupported capability |
/// | [`NotFound`](Error::NotFound) | `NOT_FOUND` | the volume handle names nothing (Validate, Stage) |
/// | [`AlreadyExists`](Error::AlreadyExists) | `ALREADY_EXISTS` | a volume with this name exists but is incompatible with the request |
/// | [`OutOfRange`](Error::OutOfRange) | `OUT_OF_RANGE` | the capacity range cannot be satisfied |
/// | [`ResourceExhausted`](Error::ResourceExhausted) | `RESOURCE_EXHAUSTED` | no space or quota left, or too many volumes on the node |
/// | [`FailedPrecondition`](Error::FailedPrecondition) | `FAILED_PRECONDITION` | the volume is in a state that forbids the call (e.g. still in use) |
/// | [`Aborted`](Error::Aborted) | `ABORTED` | a conflicting operation is in progress; the CO retries |
/// | [`Unavailable`](Error::Unavailable) | `UNAVAILABLE` | the backend is temporarily unreachable; the CO retries |
/// | [`Internal`](Error::Internal) | `INTERNAL` | anything else |
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request is malformed or asks for something this provisioner does not support.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The volume does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A volume with the same name exists with incompatible properties.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The requested capacity cannot be provided.
    #[error("out of range: {0}")]
    OutOfRange(String),
    /// Out of space, quota or per-node volume slots.
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// The volume is not in a state that allows this call.
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// A conflicting operation is in flight; safe to retry later.
    #[error("aborted: {0}")]
    Aborted(String),
    /// The backend is temporarily unavailable; safe to retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// An unexpected failure.
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    /// Wraps any displayable failure as [`Error::Internal`].
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::Internal(cause.to_string())
    }

    /// The human-readable message without the category prefix.
    pub fn message(&self) -> &str {
        match self {
            Self::InvalidArgument(m)
            | Self::NotFound(m)
            | Self::AlreadyExists(m)
            | Self::OutOfRange(m)
            | Self::ResourceExhausted(m)
            | Self::FailedPrecondition(m)
            | Self::Aborted(m)
            | Self::Unavailable(m)
            | Self::Internal(m) => m,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        match err.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                Self::ResourceExhausted(err.to_string())
            }
            _ => Self::Internal(err.to_string()),
        }
    }
}

/// Result alias used by every provisioner call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
