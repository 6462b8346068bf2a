//! Why a step of the protocol failed: one variant per step, naming the
//! object it was about, its cause in [`source`](std::error::Error::source)
//! only ([`crate::error_chain`] prints both).

use pav_sdk::DataSourceKind;

use super::plan::{ClaimKey, RequestError};
use super::reason;

/// A failed step. Every one is retried with backoff per claim; the
/// reconcile that failed puts a Warning event on the claim
/// ([`Error::reason`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Reading the claim's StorageClass.
    #[error("reading StorageClass {class}")]
    ReadClass {
        class: String,
        #[source]
        source: kube::Error,
    },
    /// The StorageClass of a claim the populator holds is gone.
    #[error("{claim} names StorageClass {class:?}, which does not exist")]
    ClassMissing { claim: ClaimKey, class: String },
    /// Adding the finalizer, before anything is created.
    #[error("adding the finalizer to {claim}")]
    AddFinalizer {
        claim: ClaimKey,
        #[source]
        source: kube::Error,
    },
    /// Removing the finalizer, once nothing is left to clean up.
    #[error("removing the finalizer from {claim}")]
    RemoveFinalizer {
        claim: ClaimKey,
        #[source]
        source: kube::Error,
    },
    /// Reading the claim again before its volume is handed over.
    #[error("reading {claim} again")]
    ReadClaim {
        claim: ClaimKey,
        #[source]
        source: kube::Error,
    },
    /// Discovery of the data source's kind.
    #[error("discovering the API resource of kind {kind}")]
    Discovery {
        kind: DataSourceKind,
        #[source]
        source: kube::Error,
    },
    /// The API server serves no such kind (a CRD not installed yet).
    #[error("the API server serves no kind {kind}")]
    KindNotServed { kind: DataSourceKind },
    /// The data source does not exist (yet).
    #[error("{kind} {namespace}/{name} not found")]
    SourceMissing {
        kind: DataSourceKind,
        namespace: String,
        name: String,
    },
    /// The driver's ServiceAccount may not read the data source.
    #[error(
        "reading {kind} {namespace}/{name} is forbidden: grant get on {resource} \
         to this driver's controller"
    )]
    SourceForbidden {
        kind: DataSourceKind,
        namespace: String,
        name: String,
        /// `<plural>.<group>` (`<plural>` in the core group), as RBAC
        /// rules and `kubectl auth can-i` name it.
        resource: String,
        #[source]
        source: kube::Error,
    },
    /// Reading the data source failed otherwise.
    #[error("reading {kind} {namespace}/{name}")]
    ReadSource {
        kind: DataSourceKind,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The data source as JSON for the driver.
    #[error("encoding {kind} {namespace}/{name} as JSON")]
    EncodeSource {
        kind: DataSourceKind,
        namespace: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    /// Reading the prime claim.
    #[error("reading prime claim {prime}")]
    ReadPrime {
        prime: String,
        #[source]
        source: kube::Error,
    },
    /// Creating the prime claim.
    #[error("creating prime claim {prime} for {claim}")]
    CreatePrime {
        prime: String,
        claim: ClaimKey,
        #[source]
        source: kube::Error,
    },
    /// Deleting the prime claim.
    #[error("deleting prime claim {prime}")]
    DeletePrime {
        prime: String,
        #[source]
        source: kube::Error,
    },
    /// Reading a PersistentVolume (the prime claim's or the claim's).
    #[error("reading PersistentVolume {volume}")]
    ReadVolume {
        volume: String,
        #[source]
        source: kube::Error,
    },
    /// Looking for a volume handed over to the claim already.
    #[error("listing the PersistentVolumes handed over to {claim}")]
    ListVolumes {
        claim: ClaimKey,
        #[source]
        source: kube::Error,
    },
    /// The prime claim's volume is not one the driver can be asked to fill.
    #[error("PersistentVolume {volume} of prime claim {prime} cannot be filled")]
    Request {
        volume: String,
        prime: String,
        #[source]
        source: RequestError,
    },
    /// Pointing the filled volume's claim reference at the claim.
    #[error("handing PersistentVolume {volume} over to {claim}")]
    Handover {
        volume: String,
        claim: ClaimKey,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The reason of the Warning event the claim gets, `None` for a
    /// conflict: another writer changed the object since it was read,
    /// which the retry reads again, and not the user's concern.
    pub(crate) fn reason(&self) -> Option<&'static str> {
        match self {
            Error::SourceMissing { .. } | Error::KindNotServed { .. } => Some(reason::WAITING),
            Error::SourceForbidden { .. } => Some(reason::FORBIDDEN),
            _ if self.is_conflict() => None,
            _ => Some(reason::ERROR),
        }
    }

    /// The event's text: this error and its causes, with the API
    /// server's own message for a failed request rather than kube's
    /// (which repeats it with a `Debug` dump of the status).
    pub(crate) fn note(&self) -> String {
        let mut note = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            if let Some(kube::Error::Api(status)) = cause.downcast_ref::<kube::Error>() {
                note.push_str(": ");
                note.push_str(&status.message);
                break;
            }
            let text = cause.to_string();
            if !note.contains(&text) {
                note.push_str(": ");
                note.push_str(&text);
            }
            source = cause.source();
        }
        note
    }

    fn is_conflict(&self) -> bool {
        let kube = match self {
            Error::AddFinalizer { source, .. }
            | Error::RemoveFinalizer { source, .. }
            | Error::Handover { source, .. } => source,
            _ => return false,
        };
        matches!(kube, kube::Error::Api(status) if status.is_conflict())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn key() -> ClaimKey {
        ClaimKey {
            namespace: "apps".into(),
            name: "data".into(),
            uid: "u-1".into(),
        }
    }

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            Status::failure("the disk is on fire", reason)
                .with_code(code)
                .boxed(),
        )
    }

    fn every_variant() -> Vec<Error> {
        let kind = || DataSourceKind::new("example.com", "Dataset");
        let source = || (kind(), "apps".to_owned(), "set".to_owned());
        let (k, namespace, name) = source();
        vec![
            Error::ReadClass {
                class: "fast".into(),
                source: api(500, "InternalError"),
            },
            Error::ClassMissing {
                claim: key(),
                class: "fast".into(),
            },
            Error::AddFinalizer {
                claim: key(),
                source: api(409, "Conflict"),
            },
            Error::RemoveFinalizer {
                claim: key(),
                source: api(500, "InternalError"),
            },
            Error::ReadClaim {
                claim: key(),
                source: api(500, "InternalError"),
            },
            Error::Discovery {
                kind: kind(),
                source: api(503, "ServiceUnavailable"),
            },
            Error::KindNotServed { kind: kind() },
            Error::SourceMissing {
                kind: k.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
            },
            Error::SourceForbidden {
                kind: k.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                resource: "datasets.example.com".into(),
                source: api(403, "Forbidden"),
            },
            Error::ReadSource {
                kind: k.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                source: api(500, "InternalError"),
            },
            Error::EncodeSource {
                kind: k,
                namespace,
                name,
                source: serde_json::from_str::<u8>(r#""the disk is on fire""#).unwrap_err(),
            },
            Error::ReadPrime {
                prime: "pav/prime-u-1".into(),
                source: api(500, "InternalError"),
            },
            Error::CreatePrime {
                prime: "pav/prime-u-1".into(),
                claim: key(),
                source: api(403, "Forbidden"),
            },
            Error::DeletePrime {
                prime: "pav/prime-u-1".into(),
                source: api(500, "InternalError"),
            },
            Error::ReadVolume {
                volume: "pvc-9".into(),
                source: api(500, "InternalError"),
            },
            Error::ListVolumes {
                claim: key(),
                source: api(500, "InternalError"),
            },
            Error::Request {
                volume: "pvc-9".into(),
                prime: "pav/prime-u-1".into(),
                source: RequestError::Mode("the disk is on fire".into()),
            },
            Error::Handover {
                volume: "pvc-9".into(),
                claim: key(),
                source: api(409, "Conflict"),
            },
        ]
    }

    #[test]
    fn each_error_says_its_cause_once() {
        for err in every_variant() {
            if let Some(problem) = crate::cause_repeated(&err) {
                assert!(std::error::Error::source(&err).is_none(), "{problem}");
            }
            assert!(!err.to_string().contains("the disk is on fire"), "{err}");
            let note = err.note();
            let causes = note.matches("the disk is on fire").count();
            assert_eq!(
                causes,
                usize::from(std::error::Error::source(&err).is_some()),
                "{note:?}"
            );
        }
    }

    #[test]
    fn the_note_has_the_api_servers_message_without_kubes_dump() {
        let err = Error::CreatePrime {
            prime: "pav/prime-u-1".into(),
            claim: key(),
            source: api(403, "Forbidden"),
        };
        assert_eq!(
            err.note(),
            "creating prime claim pav/prime-u-1 for PersistentVolumeClaim apps/data: \
             the disk is on fire"
        );
    }

    #[test]
    fn messages_name_the_object_and_the_missing_permission() {
        let messages: Vec<String> = every_variant().iter().map(ToString::to_string).collect();
        assert!(
            messages.contains(&"adding the finalizer to PersistentVolumeClaim apps/data".into())
        );
        assert!(messages.contains(&"Dataset.example.com apps/set not found".into()));
        assert!(
            messages.contains(
                &"reading Dataset.example.com apps/set is forbidden: grant get on \
              datasets.example.com to this driver's controller"
                    .into()
            )
        );
    }

    #[test]
    fn conflicts_make_no_event_and_the_rest_a_warning_of_their_kind() {
        let reasons: Vec<Option<&str>> = every_variant().iter().map(Error::reason).collect();
        assert_eq!(reasons[2], None, "a conflicting finalizer patch");
        assert_eq!(reasons[17], None, "a conflicting handover");
        assert_eq!(reasons[3], Some(reason::ERROR));
        assert_eq!(reasons[6], Some(reason::WAITING));
        assert_eq!(reasons[7], Some(reason::WAITING));
        assert_eq!(reasons[8], Some(reason::FORBIDDEN));
        assert_eq!(reasons[12], Some(reason::ERROR));
    }
}
