//! `NodePublishVolume`: bind the volume's recorded staging path onto the
//! target, or, for a provisioner that stages per client pod, stage at the
//! target and bind what it staged there.

use std::collections::HashMap;
use std::path::PathBuf;

use pav_sdk::{AccessMode, ServiceAccountTokens, VolumeMode};
use tonic::{Code, Status};

use super::binds::{
    BindError, STAGED_DEVICE, bind_once, blocking, check_published_nowhere, published,
};
use super::ephemeral::{self, EphemeralError};
use super::{
    CapabilityError, NodeConfig, NodeService, RecordError, Unserved, check_capability,
    required_capability, stage_request, stages_per_node,
};
use crate::convert::{self, Capability};
use crate::csi;
use crate::error::{error_chain, provisioner_code};
use crate::guard::{Busy, Key};
use crate::limits::{self, LimitError};
use crate::mount;
use crate::occupancy::{OccupancyError, check_free};
use crate::paths::PathError;
use crate::shared::Shared;

/// The key under which kubelet passes `NodePublishVolume` the client
/// pod's service-account tokens (the CSIDriver's `tokenRequests`): in
/// `secrets` with the CSIDriver's `serviceAccountTokenInSecrets: true`,
/// else in `volume_context`.
pub(crate) const SERVICE_ACCOUNT_TOKENS: &str = "csi.storage.k8s.io/serviceAccount.tokens";

/// Why a `NodePublishVolume` failed: one variant per step of [`check`] and
/// [`run`], each mapped to its code once, in [`From`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    /// The provisioner does not stage volumes (`UNIMPLEMENTED`).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// A field breaks CSI's limits (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// kubelet's service-account tokens are refused (`INVALID_ARGUMENT`);
    /// the message names the key, never its value.
    #[error("{field}: reading {SERVICE_ACCOUNT_TOKENS}")]
    ServiceAccountTokens {
        field: &'static str,
        #[source]
        source: pav_sdk::TokensError,
    },
    /// The target or staging path is refused (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Path(#[from] PathError),
    /// The capability is missing, malformed or not served
    /// (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// An ephemeral inline volume was refused or failed (its code).
    #[error(transparent)]
    Ephemeral(#[from] EphemeralError),
    /// No staging path, where the driver stages per node
    /// (`FAILED_PRECONDITION`).
    #[error("staging_target_path is required: this driver advertises STAGE_UNSTAGE_VOLUME")]
    NoStagingPath,
    /// The target and the staging path overlap (`INVALID_ARGUMENT`).
    #[error(
        "target_path {} and staging_target_path {} overlap",
        target.display(),
        staging.display()
    )]
    Overlap { target: PathBuf, staging: PathBuf },
    /// Another call holds the volume or the target (`ABORTED`).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The staging records could not be read (`INTERNAL`).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The volume is not staged on this node (`FAILED_PRECONDITION`).
    #[error("volume {volume_id} is not staged on this node")]
    NotStaged { volume_id: String },
    /// It is staged at another path (`FAILED_PRECONDITION`).
    #[error(
        "volume {volume_id} is staged at {}, not at {}",
        recorded.display(),
        staging.display()
    )]
    StagedElsewhere {
        volume_id: String,
        recorded: PathBuf,
        staging: PathBuf,
    },
    /// It is staged in the other volume mode (`FAILED_PRECONDITION`).
    #[error("volume {volume_id} is staged as {staged}; it cannot be published as {mode}")]
    OtherMode {
        volume_id: String,
        staged: VolumeMode,
        mode: VolumeMode,
    },
    /// Nothing is mounted at its recorded staging path
    /// (`FAILED_PRECONDITION`).
    #[error("volume {volume_id} is not staged at {}", staged.display())]
    NotMounted { volume_id: String, staged: PathBuf },
    /// The target is not free for a new mount (its code).
    #[error(transparent)]
    Occupancy(#[from] OccupancyError),
    /// The provisioner's Stage failed (its code).
    #[error("{}", .0.message())]
    Stage(pav_sdk::Error),
    /// The provisioner's Stage of a republish, with renewed
    /// service-account tokens, failed (its code).
    #[error("staging again with renewed service-account tokens: {}", .0.message())]
    Restage(pav_sdk::Error),
    /// What is mounted at the target, or binding, failed (its code).
    #[error(transparent)]
    Bind(#[from] BindError),
}

impl From<PublishError> for Status {
    fn from(err: PublishError) -> Self {
        let code = match &err {
            PublishError::Unserved(_) => Code::Unimplemented,
            PublishError::Limit(e) => e.code(),
            PublishError::ServiceAccountTokens { .. } => Code::InvalidArgument,
            PublishError::Path(e) => e.code(),
            PublishError::Capability(e) => e.code(),
            PublishError::Ephemeral(e) => e.code(),
            PublishError::Overlap { .. } => Code::InvalidArgument,
            PublishError::Busy(e) => e.code(),
            PublishError::Record(_) => Code::Internal,
            PublishError::NoStagingPath
            | PublishError::NotStaged { .. }
            | PublishError::StagedElsewhere { .. }
            | PublishError::OtherMode { .. }
            | PublishError::NotMounted { .. } => Code::FailedPrecondition,
            PublishError::Occupancy(e) => e.code(),
            PublishError::Stage(e) | PublishError::Restage(e) => provisioner_code(e),
            PublishError::Bind(e) => e.code(),
        };
        Status::new(code, error_chain(&err))
    }
}

/// A `NodePublishVolumeRequest` that passed [`check`].
#[derive(Debug)]
pub(crate) enum Checked {
    /// A provisioner that stages on publish: its Stage, at the target path
    /// with the client pod.
    StageOnPublish(Box<pav_sdk::StageRequest>),
    /// An ephemeral inline volume: created, then staged at the target.
    Ephemeral(Box<ephemeral::Checked>),
    /// A bind of the volume's staging path.
    Bind {
        volume_id: String,
        /// Resolved inside the kubelet directory, as is `staging`.
        target: PathBuf,
        staging: PathBuf,
        capability: Capability,
        read_only: bool,
    },
}

/// The volume id, the target path, a capability the provisioner serves,
/// kubelet's service-account tokens, limits, and (unless the provisioner
/// stages on publish) a staging path apart from the target.
pub(crate) fn check(
    req: &csi::NodePublishVolumeRequest,
    shared: &Shared,
    node: &NodeConfig,
) -> Result<Checked, PublishError> {
    let volume_id = limits::required("volume_id", &req.volume_id)?;
    let target = node.paths.path("target_path", &req.target_path)?;
    let capability = required_capability(req.volume_capability.as_ref())?;
    let (mut secrets, mut volume_context) = (req.secrets.clone(), req.volume_context.clone());
    let tokens = take_service_account_tokens(&mut secrets, &mut volume_context)?;
    limits::map("publish_context", &req.publish_context)?;
    // Measured without the tokens: kubelet sends its JWTs whatever CSI's
    // 4 KiB, and a few audiences exceed it.
    limits::map("volume_context", &volume_context)?;
    let secrets = convert::secrets(&secrets)?;
    check_capability(shared, &capability)?;
    let read_only = req.readonly || capability.access_mode.is_read_only();
    if ephemeral::is_ephemeral(&volume_context) {
        let serves = shared.provisioner.serves_ephemeral();
        let credentials = ephemeral::Credentials {
            secrets,
            service_account_tokens: tokens,
        };
        let checked = ephemeral::check(
            serves,
            volume_id,
            target,
            capability,
            read_only,
            &volume_context,
            credentials,
        )?;
        return Ok(Checked::Ephemeral(Box::new(checked)));
    }
    if shared.provisioner.stages_on_publish() {
        // staging_target_path is not ours to use: STAGE_UNSTAGE_VOLUME
        // is not advertised, so the CO leaves it unset.
        let (context, pod) = convert::split_pod_info(&volume_context);
        let mut stage = stage_request(&node.node_id, volume_id, target, capability, read_only);
        stage.context = context;
        stage.secrets = secrets;
        stage.service_account_tokens = tokens;
        stage.pod = pod;
        stage.publish_context = convert::sorted(&req.publish_context);
        return Ok(Checked::StageOnPublish(Box::new(stage)));
    }
    stages_per_node(shared)?;
    if req.staging_target_path.is_empty() {
        return Err(PublishError::NoStagingPath);
    }
    let staging = node
        .paths
        .path("staging_target_path", &req.staging_target_path)?;
    if target.starts_with(&staging) || staging.starts_with(&target) {
        return Err(PublishError::Overlap { target, staging });
    }
    Ok(Checked::Bind {
        volume_id: volume_id.to_owned(),
        target,
        staging,
        capability,
        read_only,
    })
}

/// Takes kubelet's service-account tokens out of a publish's `secrets`
/// and `volume_context`, so that neither holds a token for the
/// provisioner or a log to see, and parses them: from `secrets` when
/// there (the CSIDriver's `serviceAccountTokenInSecrets: true`), else
/// from the volume context (where kubelet puts them without it). None
/// when kubelet passed none (the CSIDriver has no `tokenRequests`).
fn take_service_account_tokens(
    secrets: &mut HashMap<String, String>,
    volume_context: &mut HashMap<String, String>,
) -> Result<ServiceAccountTokens, PublishError> {
    let in_secrets = secrets.remove(SERVICE_ACCOUNT_TOKENS);
    let in_context = volume_context.remove(SERVICE_ACCOUNT_TOKENS);
    let (field, json) = match (in_secrets, in_context) {
        (Some(json), _) => ("secrets", json),
        (None, Some(json)) => ("volume_context", json),
        (None, None) => return Ok(ServiceAccountTokens::default()),
    };
    ServiceAccountTokens::from_kubelet_json(&json)
        .map_err(|source| PublishError::ServiceAccountTokens { field, source })
}

/// Holds the volume and the target, and binds the staging path recorded
/// for this volume (never one the request alone names) onto the target,
/// unless it is published there already; or stages on publish.
pub(crate) async fn run(
    service: &NodeService,
    checked: Checked,
) -> Result<csi::NodePublishVolumeResponse, PublishError> {
    let (volume_id, target, staging, capability, read_only) = match checked {
        Checked::StageOnPublish(stage) => return stage_and_publish(service, *stage).await,
        Checked::Ephemeral(checked) => {
            ephemeral::publish(service, *checked).await?;
            return Ok(csi::NodePublishVolumeResponse {});
        }
        Checked::Bind {
            volume_id,
            target,
            staging,
            capability,
            read_only,
        } => (volume_id, target, staging, capability, read_only),
    };
    let volume_id = volume_id.as_str();
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    // Two volumes published at one target at once must not both find it free.
    let _target_guard = in_flight.claim(Key::TargetPath(target.clone()))?;
    tracing::info!(volume_id, target = ?target, read_only, "NodePublishVolume");
    let mode = capability.mode;
    let single_writer = capability.access_mode == AccessMode::SingleNodeSingleWriter;
    let paths = service.node.paths.clone();
    let records = service.node.staged.clone();
    let id = volume_id.to_owned();
    blocking(move || -> Result<(), PublishError> {
        // The source is the staging path recorded when this volume was
        // staged, never a path the request alone names.
        let record = (records.get(&id).map_err(RecordError::Read)?).ok_or_else(|| {
            PublishError::NotStaged {
                volume_id: id.clone(),
            }
        })?;
        if record.staging != staging {
            return Err(PublishError::StagedElsewhere {
                volume_id: id,
                recorded: record.staging,
                staging,
            });
        }
        if record.capability.mode != mode {
            return Err(PublishError::OtherMode {
                volume_id: id,
                staged: record.capability.mode,
                mode,
            });
        }
        let source = match mode {
            VolumeMode::Filesystem => record.staging,
            VolumeMode::Block => record.staging.join(STAGED_DEVICE),
        };
        let source_read_only = (mount::blocking::read_only(&source)
            .map_err(BindError::MountTable)?)
        .ok_or_else(|| PublishError::NotMounted {
            volume_id: id.clone(),
            staged: source.clone(),
        })?;
        if published(&target, Some(&source), mode, read_only, source_read_only)? {
            return Ok(());
        }
        if single_writer {
            check_published_nowhere(&id, &source, &paths)?;
        }
        check_free("target_path", &target, &records)?;
        Ok(bind_once(&source, &target, mode, read_only)?)
    })
    .await?;
    Ok(csi::NodePublishVolumeResponse {})
}

/// `NodePublishVolume` of a provisioner that stages per client pod:
/// Stage with the publish target path and the client pod, then
/// bind-mount what it returns onto the target path. A volume published at
/// the target already is a repeat, answered without Stage; or, when the
/// request carries service-account tokens, kubelet's republish (the
/// CSIDriver's `requiresRepublish: true`), whose renewed tokens Stage
/// takes while the bind stays.
async fn stage_and_publish(
    service: &NodeService,
    mut stage: pav_sdk::StageRequest,
) -> Result<csi::NodePublishVolumeResponse, PublishError> {
    let Some(stager) = service.shared.provisioner.stage() else {
        return Err(Unserved::Stage.into());
    };
    let volume_id = stage.handle.to_string();
    let volume_id = volume_id.as_str();
    let target = stage.target_path.clone();
    let in_flight = &service.shared.in_flight;
    let _guard = in_flight.claim(Key::Volume(volume_id.to_owned()))?;
    // Two volumes published at one target at once must not both find it free.
    let _target_guard = in_flight.claim(Key::TargetPath(target.clone()))?;
    let (path, mode, read_only) = (target.clone(), stage.volume_mode, stage.read_only);
    // What the provisioner stages is unknown until it runs: a read-only
    // mount there may be the provisioner's own choice.
    let published =
        blocking::<_, BindError>(move || published(&path, None, mode, read_only, true)).await?;
    if published && stage.service_account_tokens.is_empty() {
        return Ok(csi::NodePublishVolumeResponse {});
    }
    stage.node_dir = service.node_dir(volume_id);
    if published {
        // kubelet's republish: Stage takes the renewed tokens, the bind stays.
        tracing::info!(volume_id, target = ?target, "NodePublishVolume: staging again with renewed service-account tokens");
        stager.stage(stage).await.map_err(PublishError::Restage)?;
        return Ok(csi::NodePublishVolumeResponse {});
    }
    tracing::info!(volume_id, target = ?target, read_only, %mode, "NodePublishVolume: staging");
    let staged = stager.stage(stage).await.map_err(PublishError::Stage)?;
    let records = service.node.staged.clone();
    let published_at = target.clone();
    blocking(move || -> Result<(), PublishError> {
        check_free("target_path", &target, &records)?;
        Ok(bind_once(&staged.path, &target, mode, read_only)?)
    })
    .await?;
    // With the "staging" line above, a volume's time in this call.
    tracing::info!(volume_id, target = ?published_at, "NodePublishVolume: published");
    Ok(csi::NodePublishVolumeResponse {})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const KUBELET: &str =
        r#"{"vault":{"token":"eyJ-vault","expirationTimestamp":"2026-05-01T10:00:00Z"}}"#;

    #[test]
    fn tokens_come_from_secrets_first_and_leave_both_maps() {
        let mut secrets = map(&[(SERVICE_ACCOUNT_TOKENS, KUBELET), ("password", "pw")]);
        let mut context = map(&[(SERVICE_ACCOUNT_TOKENS, "stale"), ("origin", "pv")]);
        let tokens = take_service_account_tokens(&mut secrets, &mut context).unwrap();
        assert_eq!(tokens.get("vault").unwrap().token(), "eyJ-vault");
        assert_eq!(secrets, map(&[("password", "pw")]));
        assert_eq!(context, map(&[("origin", "pv")]));

        let mut context = map(&[(SERVICE_ACCOUNT_TOKENS, KUBELET)]);
        let tokens = take_service_account_tokens(&mut HashMap::new(), &mut context).unwrap();
        assert_eq!(tokens.get("vault").unwrap().token(), "eyJ-vault");
        assert!(context.is_empty());

        let mut context = map(&[("origin", "pv")]);
        let none = take_service_account_tokens(&mut HashMap::new(), &mut context).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn refused_tokens_are_invalid_argument_naming_the_field_and_the_key() {
        let no_token = r#"{"vault": {"expirationTimestamp": "x"}}"#;
        let mut context = map(&[(SERVICE_ACCOUNT_TOKENS, no_token)]);
        let refused = take_service_account_tokens(&mut HashMap::new(), &mut context);
        let refused = Status::from(refused.unwrap_err());
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert_eq!(
            refused.message(),
            "volume_context: reading csi.storage.k8s.io/serviceAccount.tokens: not kubelet's JSON \
             map of audience to token and expirationTimestamp (line 1, column 38)"
        );
        let mut secrets = map(&[(SERVICE_ACCOUNT_TOKENS, "eyJ-vault")]);
        let refused = take_service_account_tokens(&mut secrets, &mut HashMap::new());
        let refused = Status::from(refused.unwrap_err());
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert_eq!(
            refused.message(),
            "secrets: reading csi.storage.k8s.io/serviceAccount.tokens: not kubelet's JSON map \
             of audience to token and expirationTimestamp (line 1, column 1)"
        );
    }
}
