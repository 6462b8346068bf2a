//! CSI ephemeral inline volumes (`pav_sdk::Provisioner::ephemeral`):
//! `NodePublishVolume` with `csi.storage.k8s.io/ephemeral: "true"` creates
//! the volume and stages it at the target; `NodeUnpublishVolume` of a
//! recorded one unstages and deletes it. The node record
//! ([`crate::ephemeral`]) is written before Create and removed after
//! Delete, so that neither a crash nor a node restart in between leaks
//! or loses the volume.

use std::collections::HashMap;
use std::path::PathBuf;

use pav_sdk::{CapacityRange, PodInfo, Secrets, ServiceAccountTokens};
use tonic::{Code, Status};

use super::binds::{BindError, bind_once, blocking, published, unmount_and_remove};
use super::{NodeService, Unserved, stage_request};
use crate::convert::{self, Capability};
use crate::ephemeral::{Record, Records};
use crate::error::{error_chain, is_final, provisioner_code};
use crate::guard::{Busy, Key};
use crate::occupancy::{OccupancyError, check_free};

/// The volume context key the kubelet sets on an ephemeral inline volume.
pub(crate) const EPHEMERAL_KEY: &str = "csi.storage.k8s.io/ephemeral";

/// Whether a publish's volume context makes it an ephemeral inline volume.
pub(crate) fn is_ephemeral(volume_context: &HashMap<String, String>) -> bool {
    volume_context.get(EPHEMERAL_KEY).map(String::as_str) == Some("true")
}

/// What a publish hands the provisioner besides the volume: the secrets
/// (Create and Stage) and the client pod's service-account tokens (Stage).
/// Never recorded.
#[derive(Debug, Default)]
pub(crate) struct Credentials {
    pub(crate) secrets: Secrets,
    pub(crate) service_account_tokens: ServiceAccountTokens,
}

/// An ephemeral `NodePublishVolume` that passed its checks.
#[derive(Debug)]
pub(crate) struct Checked {
    /// What the record keeps: the name, target, capability, size and
    /// parameters (no handle yet).
    record: Record,
    read_only: bool,
    pod: Option<PodInfo>,
    credentials: Credentials,
}

/// An error naming the key (`INVALID_ARGUMENT`) unless the provisioner
/// serves ephemeral volumes; the `size` attribute parsed, the other
/// attributes (the `csi.storage.k8s.io/` keys aside, which are the pod)
/// the parameters. The common checks (ids, paths, capability, limits) and
/// taking the service-account tokens out of the context are the caller's.
pub(crate) fn check(
    serves_ephemeral: bool,
    volume_id: &str,
    target: PathBuf,
    capability: Capability,
    read_only: bool,
    volume_context: &HashMap<String, String>,
    credentials: Credentials,
) -> Result<Checked, EphemeralError> {
    if !serves_ephemeral {
        return Err(EphemeralError::Unserved);
    }
    let (mut parameters, pod) = convert::split_pod_info(volume_context);
    let size = match parameters.remove(pav_sdk::ephemeral::SIZE_ATTRIBUTE) {
        Some(size) => Some(parse_size(&size).ok_or(EphemeralError::Size { size })?),
        None => None,
    };
    Ok(Checked {
        record: Record {
            volume_id: volume_id.to_owned(),
            target,
            capability,
            size,
            parameters,
            handle: None,
        },
        read_only,
        pod,
        credentials,
    })
}

/// Bytes of a Kubernetes quantity without a fraction: `1048576`, `64Mi`,
/// `1G`; `None` for anything else or more than `u64` holds.
fn parse_size(text: &str) -> Option<u64> {
    const SUFFIXES: [(&str, u64); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (digits, unit) = (SUFFIXES.iter())
        .find_map(|(suffix, unit)| Some((text.strip_suffix(suffix)?, *unit)))
        .unwrap_or((text, 1));
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// Why an ephemeral publish or unpublish failed: one variant per step,
/// each given its code once, in [`EphemeralError::code`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum EphemeralError {
    /// The driver serves no ephemeral inline volumes (`INVALID_ARGUMENT`).
    #[error(
        "volume_context: {EPHEMERAL_KEY} is \"true\" but this driver serves no ephemeral \
         inline volumes (Ephemeral is not among its CSIDriver's volumeLifecycleModes)"
    )]
    Unserved,
    /// The `size` attribute is no quantity (`INVALID_ARGUMENT`).
    #[error(
        "volume_context: {} {size:?} is not a number of bytes or a quantity such as 64Mi",
        pav_sdk::ephemeral::SIZE_ATTRIBUTE
    )]
    Size { size: String },
    /// Another call holds the volume or the target (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// Reading or writing the node record.
    #[error("{doing} the ephemeral volume record")]
    Record {
        doing: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The volume id is recorded at another target.
    #[error("ephemeral volume {volume_id} is published at {recorded}, not at {asked}")]
    OtherTarget {
        volume_id: String,
        recorded: String,
        asked: String,
    },
    /// The provisioner's Validate refused the volume.
    #[error("validating ephemeral volume {volume_id}")]
    Validate {
        volume_id: String,
        #[source]
        source: pav_sdk::Error,
    },
    /// The provisioner's Create failed.
    #[error("creating ephemeral volume {volume_id}")]
    Create {
        volume_id: String,
        #[source]
        source: pav_sdk::Error,
    },
    /// The provisioner has no Stage (`UNIMPLEMENTED`).
    #[error(transparent)]
    NoStage(#[from] Unserved),
    /// The provisioner's Stage failed.
    #[error("staging ephemeral volume {volume_id}")]
    Stage {
        volume_id: String,
        #[source]
        source: pav_sdk::Error,
    },
    /// The provisioner's Stage of a republish, with renewed
    /// service-account tokens, failed.
    #[error("staging ephemeral volume {volume_id} again with renewed service-account tokens")]
    Restage {
        volume_id: String,
        #[source]
        source: pav_sdk::Error,
    },
    /// The target is not free for a new mount (its code).
    #[error(transparent)]
    Occupancy(#[from] OccupancyError),
    /// What is mounted at the target, binding, or unmounting failed (its
    /// code).
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The provisioner's Unstage failed.
    #[error("unstaging ephemeral volume {volume_id}")]
    Unstage {
        volume_id: String,
        #[source]
        source: pav_sdk::Error,
    },
    /// The provisioner's Delete failed.
    #[error("deleting ephemeral volume {volume_id}")]
    Delete {
        volume_id: String,
        #[source]
        source: pav_sdk::Error,
    },
}

impl EphemeralError {
    /// One code for every failure: the provisioner's codes pass on.
    pub(crate) fn code(&self) -> Code {
        match self {
            EphemeralError::Unserved | EphemeralError::Size { .. } => Code::InvalidArgument,
            EphemeralError::Busy(e) => e.code(),
            EphemeralError::Record { .. } => Code::Internal,
            EphemeralError::OtherTarget { .. } => Code::FailedPrecondition,
            EphemeralError::NoStage(_) => Code::Unimplemented,
            EphemeralError::Occupancy(e) => e.code(),
            EphemeralError::Bind(e) => e.code(),
            EphemeralError::Validate { source, .. }
            | EphemeralError::Create { source, .. }
            | EphemeralError::Stage { source, .. }
            | EphemeralError::Restage { source, .. }
            | EphemeralError::Unstage { source, .. }
            | EphemeralError::Delete { source, .. } => provisioner_code(source),
        }
    }
}

impl From<EphemeralError> for Status {
    /// The message is the whole chain, the cause after the step.
    fn from(err: EphemeralError) -> Self {
        Status::new(err.code(), error_chain(&err))
    }
}

/// The record store, its I/O through [`crate::blocking_work::run`].
struct Store(Records);

impl Store {
    async fn get(&self, volume_id: &str) -> Result<Option<Record>, EphemeralError> {
        let id = volume_id.to_owned();
        self.io("reading", move |records| records.get(&id)).await
    }

    async fn put(&self, record: &Record) -> Result<(), EphemeralError> {
        let record = record.clone();
        self.io("writing", move |records| records.put(&record))
            .await
    }

    async fn remove(&self, volume_id: &str) -> Result<(), EphemeralError> {
        let id = volume_id.to_owned();
        self.io("removing", move |records| records.remove(&id))
            .await
    }

    /// Runs `work` on the records; its failure, or its not returning, is
    /// the record step `doing` failing.
    async fn io<T: Send + 'static>(
        &self,
        doing: &'static str,
        work: impl FnOnce(&Records) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, EphemeralError> {
        let records = self.0.clone();
        let done = crate::blocking_work::run(move || work(&records)).await;
        let done = done.unwrap_or_else(|e| Err(std::io::Error::other(e)));
        done.map_err(|source| EphemeralError::Record { doing, source })
    }
}

impl NodeService {
    fn ephemeral_records(&self) -> Store {
        Store(Records::new(&self.node.paths.state_dir))
    }

    /// The provisioner's handle of the volume the kubelet calls
    /// `volume_id`: an ephemeral volume's is the handle Create answered
    /// (the kubelet knows only the id it made up); any other volume's is
    /// its id.
    pub(crate) async fn provisioner_handle(
        &self,
        volume_id: &str,
    ) -> Result<String, EphemeralError> {
        let record = self.ephemeral_records().get(volume_id).await?;
        Ok(record
            .and_then(|r| r.handle)
            .unwrap_or_else(|| volume_id.to_owned()))
    }

    /// The record of `volume_id` when it is an ephemeral volume published
    /// at `target` on this node.
    pub(crate) async fn ephemeral_at(
        &self,
        volume_id: &str,
        target: &std::path::Path,
    ) -> Result<Option<Record>, EphemeralError> {
        let record = self.ephemeral_records().get(volume_id).await?;
        Ok(record.filter(|r| r.target == target))
    }
}

/// NodePublishVolume of an ephemeral volume, in steps: hold the volume and
/// the target; record it (or find its record); create it (Validate first);
/// answer a repeat from the mount table, staging again when it brings
/// service-account tokens (kubelet's republish renews them); record the
/// handle; stage it at the target and bind what was staged there. A step
/// failing with a code the kubelet takes as final undoes the volume (it
/// will not call NodeUnpublishVolume for a publish it saw fail); a failed
/// republish keeps it, as the pod still uses it.
pub(crate) async fn publish(
    service: &NodeService,
    checked: Checked,
) -> Result<pav_sdk::Volume, EphemeralError> {
    let Checked {
        record: asked,
        read_only,
        pod,
        credentials,
    } = checked;
    let volume_id = asked.volume_id.clone();
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.clone()))?;
    let _target_guard = in_flight.claim(Key::TargetPath(asked.target.clone()))?;
    let store = service.ephemeral_records();
    let record = match store.get(&volume_id).await? {
        Some(recorded) if recorded.target != asked.target => {
            return Err(EphemeralError::OtherTarget {
                volume_id,
                recorded: recorded.target.display().to_string(),
                asked: asked.target.display().to_string(),
            });
        }
        Some(recorded) => recorded,
        None => {
            store.put(&asked).await?;
            asked
        }
    };
    let (path, mode) = (record.target.clone(), record.capability.mode);
    let repeat =
        blocking::<_, BindError>(move || published(&path, None, mode, read_only, true)).await?;
    let volume = create(service, &record, credentials.secrets.clone()).await?;
    if repeat {
        // A plain repeat carries no tokens: nothing to stage again.
        if !credentials.service_account_tokens.is_empty() {
            restage(service, &record, &volume, read_only, pod, credentials).await?;
        }
        return Ok(volume);
    }
    tracing::info!(volume_id, handle = %volume.handle, target = ?record.target, "NodePublishVolume: ephemeral volume created");
    let handle = volume.handle.to_string();
    let record = match record.handle.as_deref() == Some(handle.as_str()) {
        true => record,
        false => {
            let completed = Record {
                handle: Some(handle.clone()),
                ..record
            };
            store.put(&completed).await?;
            completed
        }
    };
    let staged = stage_and_bind(service, &record, &volume, read_only, pod, credentials).await;
    match staged {
        Err(failure) if is_final(failure.code()) => {
            if let Err(undo) = undo(service, &record, &handle).await {
                tracing::warn!(volume_id, error = %error_chain(&undo), "undoing a failed ephemeral publish failed: the record keeps the volume for NodeUnpublishVolume");
            }
            Err(failure)
        }
        Err(failure) => Err(failure),
        Ok(()) => Ok(volume),
    }
}

/// Validate (when the provisioner has it) and Create of the recorded
/// volume: Create is idempotent by name, so asking again answers the
/// volume made before a crash.
async fn create(
    service: &NodeService,
    record: &Record,
    secrets: Secrets,
) -> Result<pav_sdk::Volume, EphemeralError> {
    let provisioner = &service.shared.provisioner;
    let mut create = pav_sdk::build::create(record.volume_id.clone(), record.capability.mode);
    create.access_modes = vec![record.capability.access_mode];
    create.capacity = CapacityRange {
        min_bytes: record.size,
        max_bytes: None,
    };
    create.parameters = record.parameters.clone();
    create.mount = record.capability.mount.clone();
    create.secrets = secrets;
    let volume_id = record.volume_id.clone();
    if let Some(validator) = provisioner.validate() {
        let validate = pav_sdk::build::validate_for(&create);
        validator
            .validate(validate)
            .await
            .map_err(|source| EphemeralError::Validate {
                volume_id: volume_id.clone(),
                source,
            })?;
    }
    let creator = provisioner.create().ok_or_else(|| EphemeralError::Create {
        volume_id: volume_id.clone(),
        source: pav_sdk::Error::Internal("the provisioner does not create volumes".into()),
    })?;
    (creator.create(create).await).map_err(|source| EphemeralError::Create { volume_id, source })
}

/// The StageRequest at the target: the created volume's context, the pod
/// and the credentials.
fn stage_request_at_target(
    service: &NodeService,
    record: &Record,
    volume: &pav_sdk::Volume,
    read_only: bool,
    pod: Option<PodInfo>,
    credentials: Credentials,
) -> pav_sdk::StageRequest {
    let handle = volume.handle.as_str();
    let mut stage = stage_request(
        &service.node.node_id,
        handle,
        record.target.clone(),
        record.capability.clone(),
        read_only,
    );
    stage.context = volume.context.clone();
    stage.pod = pod;
    stage.secrets = credentials.secrets;
    stage.service_account_tokens = credentials.service_account_tokens;
    stage.node_dir = service.node_dir(handle);
    stage
}

/// Stage again at the target, where the volume is bound already: kubelet's
/// republish (the CSIDriver's `requiresRepublish: true`) brings the pod's
/// renewed service-account tokens. The bind stays.
async fn restage(
    service: &NodeService,
    record: &Record,
    volume: &pav_sdk::Volume,
    read_only: bool,
    pod: Option<PodInfo>,
    credentials: Credentials,
) -> Result<(), EphemeralError> {
    let stager = (service.shared.provisioner.stage()).ok_or(Unserved::Stage)?;
    let volume_id = record.volume_id.as_str();
    tracing::info!(volume_id, target = ?record.target, "NodePublishVolume: staging ephemeral volume again with renewed service-account tokens");
    let stage = stage_request_at_target(service, record, volume, read_only, pod, credentials);
    let restaged = stager.stage(stage).await;
    restaged.map_err(|source| EphemeralError::Restage {
        volume_id: volume_id.to_owned(),
        source,
    })?;
    Ok(())
}

/// Stage at the target (with the created volume's context and the pod),
/// then bind what was staged onto the target unless Stage mounted there.
async fn stage_and_bind(
    service: &NodeService,
    record: &Record,
    volume: &pav_sdk::Volume,
    read_only: bool,
    pod: Option<PodInfo>,
    credentials: Credentials,
) -> Result<(), EphemeralError> {
    let stager = (service.shared.provisioner.stage()).ok_or(Unserved::Stage)?;
    let stage = stage_request_at_target(service, record, volume, read_only, pod, credentials);
    let staged = stager
        .stage(stage)
        .await
        .map_err(|source| EphemeralError::Stage {
            volume_id: record.volume_id.clone(),
            source,
        })?;
    let target = record.target.clone();
    let (records, mode) = (service.node.staged.clone(), record.capability.mode);
    blocking(move || {
        check_free("target_path", &target, &records)?;
        Ok(bind_once(&staged.path, &target, mode, read_only)?)
    })
    .await
}

/// Undoes a publish: unmounts and removes the target, Unstage (when the
/// provisioner has it), Delete, and forgets the record. Each step
/// succeeds on what is already undone, so a repeat after a failure (or a
/// crash) finishes it.
async fn undo(service: &NodeService, record: &Record, handle: &str) -> Result<(), EphemeralError> {
    let provisioner = &service.shared.provisioner;
    let volume_id = record.volume_id.clone();
    let path = record.target.clone();
    blocking::<_, BindError>(move || unmount_and_remove(&path)).await?;
    if let Some(unstager) = provisioner.unstage() {
        let unstaged = service
            .unstage(unstager, handle, record.target.clone())
            .await;
        unstaged.map_err(|source| EphemeralError::Unstage {
            volume_id: volume_id.clone(),
            source,
        })?;
    }
    if let Some(deleter) = provisioner.delete() {
        match deleter.delete(pav_sdk::build::delete(handle)).await {
            Ok(()) | Err(pav_sdk::Error::NotFound(_)) => {}
            Err(source) => Err(EphemeralError::Delete {
                volume_id: volume_id.clone(),
                source,
            })?,
        }
    }
    service.ephemeral_records().remove(&volume_id).await?;
    tracing::info!(volume_id, handle, "ephemeral volume deleted");
    Ok(())
}

/// NodeUnpublishVolume of a recorded ephemeral volume: the handle (from
/// the record, or from Create asked again when a crash came between
/// Create and the record of its answer), then [`undo`]. The caller holds
/// the volume.
pub(crate) async fn unpublish(service: &NodeService, record: Record) -> Result<(), EphemeralError> {
    let handle = match &record.handle {
        Some(handle) => handle.clone(),
        None => {
            let volume = create(service, &record, Secrets::default()).await?;
            volume.handle.to_string()
        }
    };
    undo(service, &record, &handle).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use pav_sdk::{AccessMode, MountOptions, Parameters, VolumeMode};

    fn capability() -> Capability {
        Capability {
            mode: VolumeMode::Filesystem,
            access_mode: AccessMode::SingleNodeWriter,
            mount: MountOptions::default(),
        }
    }

    fn context(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn checked(serves: bool, pairs: &[(&str, &str)]) -> Result<Checked, Status> {
        let ctx = context(pairs);
        check(
            serves,
            "csi-1",
            "/t".into(),
            capability(),
            false,
            &ctx,
            Credentials::default(),
        )
        .map_err(Status::from)
    }

    #[test]
    fn sizes_are_bytes_or_quantities() {
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("64Mi"), Some(64 << 20));
        assert_eq!(parse_size("2Gi"), Some(2 << 30));
        assert_eq!(parse_size("1G"), Some(1_000_000_000));
        assert_eq!(parse_size("5k"), Some(5_000));
        for wrong in ["", "Mi", "-1", "1.5Gi", "64MB", "16Ei", "1 Gi", "0x10"] {
            assert_eq!(parse_size(wrong), None, "{wrong:?}");
        }
    }

    #[test]
    fn ephemeral_volumes_are_refused_without_the_option_naming_the_key() {
        assert!(is_ephemeral(&context(&[(EPHEMERAL_KEY, "true")])));
        assert!(!is_ephemeral(&context(&[(EPHEMERAL_KEY, "false")])));
        let refused = checked(false, &[(EPHEMERAL_KEY, "true")]).unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(refused.message().contains(EPHEMERAL_KEY), "{refused:?}");
    }

    #[test]
    fn attributes_are_the_size_the_parameters_and_the_pod() {
        let checked = checked(
            true,
            &[
                (EPHEMERAL_KEY, "true"),
                ("size", "64Mi"),
                ("provisioning", "thick"),
                ("csi.storage.k8s.io/pod.name", "app"),
                ("csi.storage.k8s.io/pod.namespace", "ns"),
                ("csi.storage.k8s.io/pod.uid", "u-1"),
                ("csi.storage.k8s.io/serviceAccount.name", "default"),
            ],
        )
        .unwrap();
        assert_eq!(checked.record.size, Some(64 << 20));
        assert_eq!(
            &checked.record.parameters,
            &Parameters::from([("provisioning".to_owned(), "thick".to_owned())])
        );
        let pod = checked.pod.expect("the pod");
        assert!(pod.ephemeral && pod.name == "app" && pod.namespace == "ns");
        assert_eq!(checked.record.volume_id, "csi-1");
        let wrong = super::tests::checked(true, &[(EPHEMERAL_KEY, "true"), ("size", "big")]);
        let wrong = wrong.unwrap_err();
        assert_eq!(wrong.code(), Code::InvalidArgument);
        assert!(wrong.message().contains("size"), "{wrong:?}");
    }

    #[test]
    fn each_failure_has_its_code() {
        let io = || std::io::Error::other("disk");
        let provisioner = |e: pav_sdk::Error| EphemeralError::Delete {
            volume_id: "csi-1".into(),
            source: e,
        };
        let cases = [
            (
                EphemeralError::Record {
                    doing: "writing",
                    source: io(),
                },
                Code::Internal,
            ),
            (
                EphemeralError::OtherTarget {
                    volume_id: "csi-1".into(),
                    recorded: "/a".into(),
                    asked: "/b".into(),
                },
                Code::FailedPrecondition,
            ),
            (
                provisioner(pav_sdk::Error::Unavailable("busy".into())),
                Code::Unavailable,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(Status::from(error).code(), code);
        }
    }
}
