//! Errors of pav-csi itself, and the mapping of provisioner errors to gRPC codes.
//!
//! Each RPC has an error enum of its own (one variant per step that can
//! fail) next to its `check` and `run`, and one mapping of it to a
//! `tonic::Status`: its `impl From<...> for Status`, which picks the code
//! and prints the message with [`error_chain`]. Nothing else builds a
//! `Status` (the test `status_is_built_only_where_errors_are_mapped`
//! holds that); the shared checks (`limits`, `convert`, `paths`, ...) answer
//! typed errors each RPC wraps.

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
    #[error("socket {path}")]
    Socket {
        /// The socket path.
        path: std::path::PathBuf,
        /// The underlying failure.
        source: std::io::Error,
    },
    /// The gRPC server or client transport failed.
    #[error("gRPC transport")]
    Transport(#[from] tonic::transport::Error),
}

/// The gRPC code of a provisioner error, the one the CSI spec names. An
/// RPC's mapping answers it with the error's message (without the
/// category its `Display` adds: the code says it).
pub(crate) fn provisioner_code(err: &pav_sdk::Error) -> Code {
    match err {
        pav_sdk::Error::InvalidArgument(_) => Code::InvalidArgument,
        pav_sdk::Error::NotFound(_) => Code::NotFound,
        pav_sdk::Error::AlreadyExists(_) => Code::AlreadyExists,
        pav_sdk::Error::OutOfRange(_) => Code::OutOfRange,
        pav_sdk::Error::ResourceExhausted(_) => Code::ResourceExhausted,
        pav_sdk::Error::FailedPrecondition(_) => Code::FailedPrecondition,
        pav_sdk::Error::Aborted(_) => Code::Aborted,
        pav_sdk::Error::Unavailable(_) => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// The answer to a call whose handler panicked (see
/// [`crate::completion`]): `INTERNAL`, whatever the RPC.
pub(crate) fn panicked(panic: &(dyn std::any::Any + Send)) -> Status {
    Status::internal(format!(
        "the call failed: {}",
        crate::blocking_work::panic_message(panic)
    ))
}

/// Whether kubelet and the CSI sidecars take an answer with `code` as
/// final: not `CANCELLED`, `DEADLINE_EXCEEDED`, `UNAVAILABLE`,
/// `RESOURCE_EXHAUSTED` or `ABORTED`, which they take as "maybe still in
/// progress" and call again (their `isFinalError`); a NodeStageVolume
/// answered so may have staged, and kubelet retries it or unstages the
/// volume once no pod needs it.
pub(crate) fn is_final(code: Code) -> bool {
    !matches!(
        code,
        Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Unavailable
            | Code::ResourceExhausted
            | Code::Aborted
    )
}

/// What a mutating call is about, for its log line.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Subject<'a> {
    /// A volume id.
    Volume(&'a str),
    /// The name of a volume or snapshot to create.
    Name(&'a str),
    /// A snapshot id.
    Snapshot(&'a str),
    /// A group snapshot id.
    GroupSnapshot(&'a str),
}

/// Request strings in log lines are cut to this many bytes: a call
/// refused for an oversized id must not write it whole.
const LOGGED_ID_BYTES: usize = 256;

/// Logs the failure of the mutating call `rpc` about `subject`, and passes
/// `answer` on: every failure, from the first check to the last step, is
/// one line. `warn` when the caller takes it as final (someone must look:
/// `INTERNAL`, `INVALID_ARGUMENT`, `NOT_FOUND`, ...), `info` when it calls
/// again ([`is_final`]: `ABORTED` while another call holds the volume,
/// `UNAVAILABLE`, ...). Success is each call's own `info` line.
pub(crate) fn logged<T>(
    rpc: &'static str,
    subject: Subject<'_>,
    answer: Result<T, Status>,
) -> Result<T, Status> {
    let Err(failure) = &answer else {
        return answer;
    };
    let (code, error) = (failure.code(), failure.message());
    let short = |id: &str| -> String {
        match id.len() <= LOGGED_ID_BYTES {
            true => id.to_owned(),
            false => {
                let end = (0..=LOGGED_ID_BYTES)
                    .rev()
                    .find(|i| id.is_char_boundary(*i))
                    .unwrap_or(0);
                format!("{}... ({} bytes)", &id[..end], id.len())
            }
        }
    };
    macro_rules! log {
        ($level:ident) => {
            match subject {
                Subject::Volume(id) => {
                    tracing::$level!(volume_id = short(id), ?code, error, "{rpc} failed")
                }
                Subject::Name(name) => {
                    tracing::$level!(name = short(name), ?code, error, "{rpc} failed")
                }
                Subject::Snapshot(id) => {
                    tracing::$level!(snapshot_id = short(id), ?code, error, "{rpc} failed")
                }
                Subject::GroupSnapshot(id) => {
                    tracing::$level!(group_snapshot_id = short(id), ?code, error, "{rpc} failed")
                }
            }
        };
    }
    match is_final(code) {
        true => log!(warn),
        false => log!(info),
    }
    answer
}

/// `err` and its sources, `: `-separated, as `anyhow`'s `{:#}` prints
/// them: the whole story of an error whose message says only its step
/// (`cannot unmount /x: Device or resource busy (os error 16)`).
///
/// The errors of pav-csi (and of pav) name the step that failed and
/// leave the cause to [`source`](std::error::Error::source), so each
/// cause is said once; print them with this where a person reads them,
/// in a provisioner's [`pav_sdk::Error`] for one (the mount errors'
/// conversions into it do, so `?` is all it takes for them):
///
/// ```
/// # fn f(dir: &std::path::Path) -> pav_sdk::Result<()> {
/// pav_csi::mount::blocking::unmount(dir)
///     .map_err(|e| pav_sdk::Error::Internal(pav_csi::error_chain(&e)))?;
/// # Ok(()) }
/// ```
///
/// Some other crates' errors print their source in their own message too
/// (kube's `"HyperError: {0}"`, `"ApiError: {0} ({0:?})"`): a cause whose
/// text is printed already is not printed again.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// How `err` says its cause twice, for the tests of error enums (this
/// crate's and its users'): `None` when its message leaves out its
/// source's (the rule: a variant's `#[error]` names the step that failed,
/// [`error_chain`] adds the cause once), else what is repeated. A
/// provisioner's [`pav_sdk::Error`] as the source counts with its message
/// alone too, since its category is all its display adds.
pub fn cause_repeated(err: &dyn std::error::Error) -> Option<String> {
    let message = err.to_string();
    let Some(source) = err.source() else {
        return Some(format!("{message:?} has no source"));
    };
    let mut causes = vec![source.to_string()];
    if let Some(sdk) = source.downcast_ref::<pav_sdk::Error>() {
        causes.push(sdk.message().to_owned());
    }
    (causes.into_iter())
        .find(|cause| !cause.is_empty() && message.contains(cause.as_str()))
        .map(|cause| format!("{message:?} repeats its source {cause:?}"))
}

#[cfg(test)]
mod cause_once;
#[cfg(test)]
mod status_sites;

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What a subscriber wrote, in memory.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines `work` logs at `info` and above.
    fn logs(work: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, work);
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn failures_are_logged_warn_when_final_info_when_retried() {
        let final_failure = logs(|| {
            let answer: Result<(), Status> = Err(Status::internal("reading staging records: EIO"));
            let _ = logged("NodeUnstageVolume", Subject::Volume("vol-1"), answer);
        });
        assert!(final_failure.contains(" WARN "), "{final_failure}");
        assert!(
            final_failure.contains("NodeUnstageVolume failed"),
            "{final_failure}"
        );
        assert!(
            final_failure.contains("volume_id=\"vol-1\""),
            "{final_failure}"
        );
        assert!(final_failure.contains("code=Internal"), "{final_failure}");
        assert!(
            final_failure.contains("reading staging records: EIO"),
            "{final_failure}"
        );

        let retried = logs(|| {
            let answer: Result<(), Status> = Err(Status::aborted("busy"));
            let _ = logged("CreateVolume", Subject::Name("pvc-1"), answer);
        });
        assert!(
            retried.contains(" INFO ") && retried.contains("CreateVolume failed"),
            "{retried}"
        );
        assert!(retried.contains("name=\"pvc-1\""), "{retried}");

        let fine = logs(|| {
            let _ = logged(
                "DeleteSnapshot",
                Subject::Snapshot("s"),
                Ok::<(), Status>(()),
            );
        });
        assert_eq!(fine, "");
    }

    #[test]
    fn long_ids_are_cut_in_log_lines() {
        let id = "é".repeat(200);
        let lines = logs(|| {
            let _ = logged(
                "DeleteVolume",
                Subject::Volume(&id),
                Err::<(), _>(Status::invalid_argument("too long")),
            );
        });
        assert!(lines.contains("... (400 bytes)"), "{lines}");
        assert!(!lines.contains(&id), "{lines}");
    }

    #[test]
    fn in_progress_codes_are_kubelet_s() {
        for code in [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::Aborted,
        ] {
            assert!(!is_final(code), "{code:?}");
        }
        for code in [
            Code::Internal,
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::Unimplemented,
        ] {
            assert!(is_final(code), "{code:?}");
        }
    }

    #[test]
    fn chains_print_each_cause_once() {
        let gone = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let quiet = crate::mount::TableError::Read(gone());
        assert_eq!(
            error_chain(&quiet),
            format!("reading /proc/self/mountinfo: {}", gone())
        );
        let unmount = crate::mount::UnmountError::MountTable(gone());
        assert_eq!(
            error_chain(&unmount),
            format!("reading /proc/self/mountinfo: {}", gone())
        );
        // Another crate's error that prints its source itself (kube's).
        #[derive(Debug, thiserror::Error)]
        #[error("HyperError: {0}")]
        struct Loud(#[source] std::io::Error);
        assert_eq!(
            error_chain(&Loud(gone())),
            format!("HyperError: {}", gone())
        );
        assert_eq!(
            error_chain(&crate::occupancy::OccupancyError::MountTable(quiet)),
            format!("reading mounts: reading /proc/self/mountinfo: {}", gone())
        );
    }
}
