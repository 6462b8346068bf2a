//! Errors of pav-csi itself, and the mapping of provisioner errors to gRPC codes.

use tonic::{Code, Status};

/// Why a driver could not be built or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder was given an inconsistent configuration.
    #[error("invalid driver configuration: {0}")]
    Config(String),
    /// The driver name is not one CSI allows.
    #[error("driver name {name:?} is not a valid CSI driver name: {problem}")]
    DriverName {
        /// The name given to [`Driver::builder`](crate::Driver::builder).
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Preparing or binding a Unix socket failed.
    #[error("socket {path}: {source}")]
    Socket {
        /// The socket path.
        path: std::path::PathBuf,
        /// The underlying failure.
        source: std::io::Error,
    },
    /// The gRPC server or client transport failed.
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The gRPC status for a provisioner error, with the code the CSI spec names.
pub(crate) fn status(err: pav_sdk::Error) -> Status {
    let code = match &err {
        pav_sdk::Error::InvalidArgument(_) => Code::InvalidArgument,
        pav_sdk::Error::NotFound(_) => Code::NotFound,
        pav_sdk::Error::AlreadyExists(_) => Code::AlreadyExists,
        pav_sdk::Error::OutOfRange(_) => Code::OutOfRange,
        pav_sdk::Error::ResourceExhausted(_) => Code::ResourceExhausted,
        pav_sdk::Error::FailedPrecondition(_) => Code::FailedPrecondition,
        pav_sdk::Error::Aborted(_) => Code::Aborted,
        pav_sdk::Error::Unavailable(_) => Code::Unavailable,
        _ => Code::Internal,
    };
    Status::new(code, err.message().to_owned())
}

/// An `INTERNAL` status for a local failure (I/O, mounting) while `what`.
pub(crate) fn internal(what: &str, err: impl std::error::Error) -> Status {
    Status::internal(format!("{what}: {}", chain(&err)))
}

/// An `INTERNAL` status for a local failure whose message says the step
/// (the errors of [`crate::mount`] name their path and step).
pub(crate) fn failed(err: impl std::error::Error) -> Status {
    Status::internal(chain(&err))
}

/// `err` and its sources, `: `-separated, as `anyhow`'s `{:#}` prints
/// them; a source whose message ends its wrapper's already (a
/// `"{what}: {source}"` message) is not repeated.
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_print_each_cause_once() {
        let gone = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let quiet = crate::mount::TableError::Read(gone());
        assert_eq!(
            chain(&quiet),
            format!("reading /proc/self/mountinfo: {}", gone())
        );
        // UnmountError's messages carry their source already.
        let loud = crate::mount::UnmountError::MountTable(gone());
        assert_eq!(
            chain(&loud),
            format!("reading /proc/self/mountinfo: {}", gone())
        );
        assert_eq!(
            internal("reading mounts", quiet).message(),
            format!("reading mounts: reading /proc/self/mountinfo: {}", gone())
        );
    }
}
