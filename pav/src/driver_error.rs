//! [`DriverError`]: why a step of the per-driver context failed.

/// Why a step the RPCs share failed: an API request, a watch without its
/// list, the PavProvisioner, a pod wait. Each RPC's own error
/// enum (`CreateError`, `StageError`, ...) carries it as the source of its
/// API and pod steps; [`From<DriverError> for pav_sdk::Error`] is its one
/// mapping to CSI codes. The messages name the object (they reach users in
/// events and CSI replies).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The API server says `what` does not exist.
    #[error("{what}: not found")]
    NotFound {
        /// The object asked for.
        what: String,
    },
    /// The driver's service account may not do this.
    #[error("{what}: forbidden: {message}")]
    Forbidden {
        /// The object or action.
        what: String,
        /// The API server's message.
        message: String,
    },
    /// Any other failed request (the server unreachable, overloaded, ...).
    #[error("{what}")]
    Api {
        /// The object or action.
        what: String,
        /// kube's error.
        #[source]
        source: Box<kube::Error>,
    },
    /// A watch (of the PaV pods or of the PavProvisioner) has not listed
    /// its objects yet, or ended.
    #[error("{0}")]
    Watch(String),
    /// The PavProvisioner served does not exist.
    #[error("PavProvisioner {0}: not found")]
    NoProvisioner(String),
    /// The PavProvisioner's templates do not compile: its problems, one a
    /// line.
    #[error("{0}")]
    InvalidProvisioner(String),
    /// A pod did not finish, or was not deleted, in time; a pod that runs
    /// carries on and the CO's retry picks it up.
    #[error("{0}")]
    TimedOut(String),
    /// The pod waited for was deleted before it finished.
    #[error("{0}")]
    PodDeleted(String),
}

impl DriverError {
    /// Whether the step may succeed by itself on a later try, the pod it
    /// waited for, if any, being left to carry on: exactly the errors that
    /// are `UNAVAILABLE` (a phase run keeps such a pod, see
    /// [`DriverContext::run`](crate::csi::context::DriverContext::run)).
    pub fn is_transient(&self) -> bool {
        match self {
            DriverError::Api { .. } | DriverError::Watch(_) | DriverError::TimedOut(_) => true,
            DriverError::NotFound { .. }
            | DriverError::Forbidden { .. }
            | DriverError::NoProvisioner(_)
            | DriverError::InvalidProvisioner(_)
            | DriverError::PodDeleted(_) => false,
        }
    }
}

impl From<DriverError> for pav_sdk::Error {
    /// Not found stays not found; forbidden and an invalid PavProvisioner
    /// are preconditions; a deleted pod aborts; the transient rest is worth
    /// retrying.
    fn from(error: DriverError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            DriverError::NotFound { .. } | DriverError::NoProvisioner(_) => {
                pav_sdk::Error::NotFound(message)
            }
            DriverError::Forbidden { .. } | DriverError::InvalidProvisioner(_) => {
                pav_sdk::Error::FailedPrecondition(message)
            }
            DriverError::Api { .. } | DriverError::Watch(_) | DriverError::TimedOut(_) => {
                pav_sdk::Error::Unavailable(message)
            }
            DriverError::PodDeleted(_) => pav_sdk::Error::Aborted(message),
        }
    }
}

/// A failed request about `what`, classified by its HTTP status (never by
/// its text): 404 is [`DriverError::NotFound`], 403
/// [`DriverError::Forbidden`], the rest [`DriverError::Api`].
pub fn api_error(what: &str, err: kube::Error) -> DriverError {
    let what = what.to_owned();
    match err {
        kube::Error::Api(status) if status.code == 404 => DriverError::NotFound { what },
        kube::Error::Api(status) if status.code == 403 => DriverError::Forbidden {
            what,
            message: status.message,
        },
        source => DriverError::Api {
            what,
            source: Box::new(source),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("the server says so", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    /// Each variant's CSI code; transient exactly when `UNAVAILABLE`.
    #[test]
    fn driver_errors_map_to_csi_codes() {
        use pav_sdk::Error;
        type Case = (DriverError, fn(&Error) -> bool);
        let cases: Vec<Case> = vec![
            (
                api_error("pod a/b", status(404)),
                |e| matches!(e, Error::NotFound(m) if m == "pod a/b: not found"),
            ),
            (
                api_error("pod a/b", status(403)),
                |e| matches!(e, Error::FailedPrecondition(m) if m == "pod a/b: forbidden: the server says so"),
            ),
            (
                api_error("pod a/b", status(500)),
                |e| matches!(e, Error::Unavailable(m) if m.starts_with("pod a/b: ")),
            ),
            (DriverError::Watch("w".into()), |e| {
                matches!(e, Error::Unavailable(_))
            }),
            (
                DriverError::NoProvisioner("p".into()),
                |e| matches!(e, Error::NotFound(m) if m == "PavProvisioner p: not found"),
            ),
            (DriverError::InvalidProvisioner("x".into()), |e| {
                matches!(e, Error::FailedPrecondition(_))
            }),
            (DriverError::TimedOut("t".into()), |e| {
                matches!(e, Error::Unavailable(_))
            }),
            (DriverError::PodDeleted("d".into()), |e| {
                matches!(e, Error::Aborted(_))
            }),
        ];
        for (failure, expected) in cases {
            let debug = format!("{failure:?}");
            let transient = failure.is_transient();
            let error = Error::from(failure);
            assert!(expected(&error), "{debug} became {error:?}");
            assert_eq!(transient, matches!(error, Error::Unavailable(_)), "{debug}");
        }
    }
}
