//! The CSI Node service: stage through the provisioner, publish with bind mounts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pav_sdk::{AccessMode, Topology, Usage, VolumeCondition, VolumeMode, VolumeStats};
use tonic::{Request, Response, Status};

use crate::convert;
use crate::csi;
use crate::csi::node_service_capability::rpc::Type as RpcType;
use crate::error::{internal, status};
use crate::guard::Key;
use crate::limits;
use crate::mount;
use crate::occupancy::{check_free, same_file};
use crate::paths::Confinement;
use crate::shared::Shared;
use crate::staged::{Record, Records};

/// Where a staged block device is bind-mounted inside the staging directory,
/// so that NodePublishVolume finds it again after a driver restart.
const STAGED_DEVICE: &str = "device";

/// What this node reports about itself, and where it may mount.
#[derive(Debug, Clone)]
pub(crate) struct NodeConfig {
    pub(crate) node_id: String,
    pub(crate) topology: Topology,
    pub(crate) max_volumes: i64,
    /// Staging and target paths must lie in the kubelet directory.
    pub(crate) paths: Confinement,
    /// Which volume is staged where.
    pub(crate) staged: Records,
}

/// Node service.
#[derive(Debug)]
pub(crate) struct NodeService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) node: Arc<NodeConfig>,
}

/// Runs blocking mount-table work off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| internal("mount task", e))?
}

/// Bind-mounts `source` on `target` unless `target` is already a mount
/// point (a repeated call is answered from the mount table), creating the
/// target as a directory or an empty file first.
fn bind_once(
    source: &Path,
    target: &Path,
    mode: VolumeMode,
    read_only: bool,
) -> Result<(), Status> {
    if mount::is_mount_point(target).map_err(|e| internal("reading mounts", e))? {
        return Ok(());
    }
    prepare_target(target, mode == VolumeMode::Filesystem)?;
    mount::bind(source, target, read_only).map_err(|e| {
        internal(
            &format!("bind-mounting {} on {}", source.display(), target.display()),
            e,
        )
    })
}

/// Makes `target` exist as what a bind of `source` needs: a directory for a
/// directory, an empty file for a device or file.
fn prepare_target(target: &Path, directory: bool) -> Result<(), Status> {
    if directory {
        return std::fs::create_dir_all(target).map_err(|e| internal("creating target", e));
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| internal("creating target parent", e))?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(target)
    {
        Ok(_) => Ok(()),
        Err(e) => Err(internal("creating target file", e)),
    }
}

/// Whether a volume is published at `target` already, compatibly with a
/// publish of `mode`, read-only when `read_only`: `Ok(true)` when it is
/// (the repeated call succeeds), `Ok(false)` when nothing is mounted there,
/// `ALREADY_EXISTS` when the mount there is incompatible (spec:
/// "Volume published but is incompatible"). `source_read_only` is whether
/// the source is read-only itself (a bind of it is then read-only too).
/// With a `source`, what is mounted at `target` must be a bind of it:
/// another volume there is `FAILED_PRECONDITION`.
fn published(
    target: &Path,
    source: Option<&Path>,
    mode: VolumeMode,
    read_only: bool,
    source_read_only: bool,
) -> Result<bool, Status> {
    let Some(mounted_read_only) =
        mount::read_only(target).map_err(|e| internal("reading mounts", e))?
    else {
        return Ok(false);
    };
    if let Some(source) = source
        && !same_file(source, target)
    {
        return Err(Status::failed_precondition(format!(
            "target_path {target:?} holds another volume (or a mount this driver did not make)"
        )));
    }
    let is_dir = std::fs::metadata(target).is_ok_and(|m| m.is_dir());
    let incompatible = |what: &str| {
        Err(Status::already_exists(format!(
            "target_path {} is already published {what}",
            target.display()
        )))
    };
    match mode {
        VolumeMode::Filesystem if !is_dir => return incompatible("as a Block volume"),
        VolumeMode::Block if is_dir => return incompatible("as a Filesystem volume"),
        _ => {}
    }
    if read_only && !mounted_read_only {
        return incompatible("read-write, not read-only");
    }
    if !read_only && mounted_read_only && !source_read_only {
        return incompatible("read-only, not read-write");
    }
    Ok(true)
}

/// Checks that the volume's record allows staging it at `wanted.staging`
/// with `wanted.capability`, and records it before anything is mounted;
/// true when the record is new (this call made it).
fn record_stage(records: &Records, wanted: &Record) -> Result<bool, Status> {
    let io = |e| internal("reading staging records", e);
    let id = &wanted.volume_id;
    let staging = &wanted.staging;
    if let Some(record) = records.get(id).map_err(io)? {
        if record.staging != *staging {
            return Err(Status::failed_precondition(format!(
                "volume {id} is staged at {}, not at {}: unstage it there first",
                record.staging.display(),
                staging.display()
            )));
        }
        if !same_use(&record.capability, &wanted.capability) {
            return Err(Status::already_exists(format!(
                "volume {id} is staged at {} as {}, incompatible with {}",
                staging.display(),
                describe(&record.capability),
                describe(&wanted.capability)
            )));
        }
        return Ok(false);
    }
    if let Some(other) = records.at(staging).map_err(io)? {
        return Err(Status::failed_precondition(format!(
            "staging_target_path {} holds volume {}",
            staging.display(),
            other.volume_id
        )));
    }
    for path in [staging.clone(), staging.join(STAGED_DEVICE)] {
        if mount::is_mount_point(&path).map_err(|e| internal("reading mounts", e))? {
            return Err(Status::failed_precondition(format!(
                "{} is a mount point this driver did not stage",
                path.display()
            )));
        }
    }
    check_free("staging_target_path", staging, records)?;
    records
        .put(wanted)
        .map_err(|e| internal("writing the staging record", e))?;
    Ok(true)
}

/// Whether a volume staged with capability `a` serves a request for `b`.
/// `SINGLE_NODE_WRITER` and `SINGLE_NODE_MULTI_WRITER` are both
/// Kubernetes' `ReadWriteOnce`: which one kubelet sends depends only on
/// whether the driver advertises `SINGLE_NODE_MULTI_WRITER`, so a volume
/// staged before an upgrade that started advertising it is asked again
/// with the other.
fn same_use(a: &convert::Capability, b: &convert::Capability) -> bool {
    let read_write_once = |mode: AccessMode| match mode {
        AccessMode::SingleNodeMultiWriter => AccessMode::SingleNodeWriter,
        other => other,
    };
    a.mode == b.mode
        && a.mount == b.mount
        && read_write_once(a.access_mode) == read_write_once(b.access_mode)
}

/// A capability in words, for messages.
fn describe(c: &convert::Capability) -> String {
    let mut text = format!(
        "{} {}",
        c.mode,
        crate::staged::access_mode_name(c.access_mode)
    );
    if let Some(fs_type) = &c.mount.fs_type {
        text.push_str(&format!(" {fs_type}"));
    }
    if !c.mount.mount_flags.is_empty() {
        text.push_str(&format!(" ({})", c.mount.mount_flags.join(",")));
    }
    text
}

/// Unmounts `path` and removes it if it is what [`prepare_target`] makes:
/// an empty directory or an empty file. Anything else (a file with data, a
/// symlink, a device) is not this driver's and is refused with
/// `FAILED_PRECONDITION`. A missing path is fine.
fn unmount_and_remove(path: &Path) -> Result<(), Status> {
    mount::unmount_all(path).map_err(|e| internal("unmounting", e))?;
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir(path),
        Ok(meta) if meta.is_file() && meta.len() == 0 => std::fs::remove_file(path),
        Ok(_) => {
            return Err(Status::failed_precondition(format!(
                "{path:?} is not a mount point, an empty directory or an empty file: not removed"
            )));
        }
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(internal("removing", e)),
        _ => Ok(()),
    }
}

/// A `SINGLE_NODE_SINGLE_WRITER` volume is published at one target only:
/// a mount of its staged `source` elsewhere in the kubelet directory is
/// `FAILED_PRECONDITION`, as the spec requires of a second target path.
fn check_published_nowhere(
    volume_id: &str,
    source: &Path,
    kubelet_dir: &Path,
) -> Result<(), Status> {
    let canonical = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let source = canonical(source);
    let mounts =
        mount::mounts_inside(&canonical(kubelet_dir)).map_err(|e| internal("reading mounts", e))?;
    match (mounts.iter()).find(|point| **point != source && same_file(point, &source)) {
        Some(other) => Err(Status::failed_precondition(format!(
            "volume {volume_id} is single-writer (SINGLE_NODE_SINGLE_WRITER) and already published at {}",
            other.display()
        ))),
        None => Ok(()),
    }
}

/// Runs the provisioner's Stage, then binds what it staged at the staging
/// path (a Block volume's device at `<staging>/device`) unless it mounted
/// the volume there itself.
async fn stage_and_bind(
    stager: &dyn pav_sdk::Stage,
    stage: pav_sdk::StageRequest,
) -> Result<(), Status> {
    let (staging, mode, read_only) = (
        stage.target_path.clone(),
        stage.volume_mode,
        stage.read_only,
    );
    let staged = stager.stage(stage).await.map_err(status)?;
    blocking(move || {
        let (source, target) = match mode {
            VolumeMode::Filesystem if staged.path == staging => return Ok(()),
            VolumeMode::Filesystem => (staged.path, staging),
            VolumeMode::Block => (staged.path, staging.join(STAGED_DEVICE)),
        };
        bind_once(&source, &target, mode, read_only)
    })
    .await
}

impl NodeService {
    /// Refuses a capability the provisioner does not serve: a volume mode or
    /// access mode it never declared is unsupported by the plugin, not by
    /// one volume (`INVALID_ARGUMENT`, not "Exceeds capabilities").
    fn check_capability(&self, capability: &convert::Capability) -> Result<(), Status> {
        let provisioner = &self.shared.provisioner;
        if !provisioner.supports_volume_mode(capability.mode) {
            return Err(Status::invalid_argument(format!(
                "volume_capability: volume mode {} is not supported",
                capability.mode
            )));
        }
        if !provisioner.supports_access_mode(capability.access_mode) {
            return Err(Status::invalid_argument(format!(
                "volume_capability: access mode {} is not supported",
                crate::staged::access_mode_name(capability.access_mode)
            )));
        }
        Ok(())
    }

    /// Undoes a stage recorded at `staging`: unmounts what is mounted there
    /// (the driver's binds and whatever the provisioner mounted), runs the
    /// provisioner's Unstage, then forgets the record. A failure keeps the
    /// record, so that the next NodeUnstageVolume tries again.
    async fn unstage_recorded(
        &self,
        volume_id: &str,
        staging: PathBuf,
        mode: VolumeMode,
    ) -> Result<(), Status> {
        let path = staging.clone();
        blocking(move || {
            // Only a Block volume's staging path holds our device bind; in
            // a Filesystem volume `device` is the volume's own file.
            if mode == VolumeMode::Block {
                unmount_and_remove(&path.join(STAGED_DEVICE))?;
            }
            mount::unmount_all(&path).map_err(|e| internal("unmounting staging path", e))
        })
        .await?;
        if let Some(unstager) = self.shared.provisioner.unstage() {
            let unstage = pav_sdk::build::unstage(volume_id, self.node.node_id.clone(), staging);
            unstager.unstage(unstage).await.map_err(status)?;
        }
        let (records, id) = (self.node.staged.clone(), volume_id.to_owned());
        blocking(move || {
            records
                .remove(&id)
                .map_err(|e| internal("removing the staging record", e))
        })
        .await
    }

    /// [`Self::unstage_recorded`] for a stage that failed; its own failure
    /// is logged (the stage's is what the caller answers).
    async fn undo_failed_stage(&self, volume_id: &str, staging: PathBuf, mode: VolumeMode) {
        if let Err(failed) = self.unstage_recorded(volume_id, staging, mode).await {
            tracing::warn!(
                volume_id,
                error = failed.message(),
                "NodeStageVolume: undoing the failed stage failed; the next NodeUnstageVolume tries again"
            );
        }
    }

    /// The StageRequest of `volume_id` at `path` (the staging path, or the
    /// publish target when staging on publish), for `capability`; context,
    /// secrets and pod are the caller's to add.
    fn stage_request(
        &self,
        volume_id: &str,
        path: PathBuf,
        capability: convert::Capability,
        read_only: bool,
    ) -> pav_sdk::StageRequest {
        let node_id = self.node.node_id.clone();
        let mut stage = pav_sdk::build::stage(volume_id, node_id, path, capability.mode);
        stage.access_mode = capability.access_mode;
        stage.read_only = read_only;
        stage.mount = capability.mount;
        stage
    }

    /// `UNIMPLEMENTED` unless the node service stages per node.
    fn stages_per_node(&self) -> Result<&dyn pav_sdk::Stage, Status> {
        match self.shared.provisioner.stage() {
            Some(_) if self.shared.provisioner.stages_on_publish() => Err(Status::unimplemented(
                "this driver stages on publish: STAGE_UNSTAGE_VOLUME is not advertised",
            )),
            Some(stager) => Ok(stager),
            None => Err(Status::unimplemented(
                "this provisioner does not stage volumes",
            )),
        }
    }

    /// `NodePublishVolume` of a provisioner that stages per client pod:
    /// Stage with the publish target path and the client pod, then
    /// bind-mount what it returns onto the target path.
    async fn stage_and_publish(
        &self,
        stage: pav_sdk::StageRequest,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let Some(stager) = self.shared.provisioner.stage() else {
            return Err(Status::unimplemented(
                "this provisioner does not stage volumes",
            ));
        };
        let volume_id = stage.handle.to_string();
        let volume_id = volume_id.as_str();
        let target = stage.target_path.clone();
        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        // Two volumes published at one target at once must not both find it free.
        let _target_guard = (self.shared.in_flight).claim(Key::TargetPath(target.clone()))?;
        let (path, mode, read_only) = (target.clone(), stage.volume_mode, stage.read_only);
        // What the provisioner stages is unknown until it runs: a read-only
        // mount there may be the provisioner's own choice.
        if blocking(move || published(&path, None, mode, read_only, true)).await? {
            return Ok(Response::new(csi::NodePublishVolumeResponse {}));
        }
        tracing::info!(volume_id, target = ?target, read_only, %mode, "NodePublishVolume: staging");
        let staged = stager.stage(stage).await.map_err(|e| {
            tracing::warn!(
                volume_id,
                error = e.message(),
                "NodePublishVolume: staging failed"
            );
            status(e)
        })?;
        let records = self.node.staged.clone();
        let published_at = target.clone();
        blocking(move || {
            check_free("target_path", &target, &records)?;
            bind_once(&staged.path, &target, mode, read_only)
        })
        .await?;
        // With the "staging" line above, a volume's time in this call.
        tracing::info!(volume_id, target = ?published_at, "NodePublishVolume: published");
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        let stager = self.stages_per_node()?;
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        let staging = self
            .node
            .paths
            .path("staging_target_path", &req.staging_target_path)?;
        let capability = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
        let capability = convert::capability("volume_capability", capability)?;
        limits::map("publish_context", &req.publish_context)?;
        limits::map("volume_context", &req.volume_context)?;
        let secrets = convert::secrets(&req.secrets)?;
        self.check_capability(&capability)?;

        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        // Two volumes staged at one path at once must not both find it free.
        let _path_guard = (self.shared.in_flight).claim(Key::StagingPath(staging.clone()))?;
        let record = Record {
            volume_id: volume_id.to_owned(),
            staging: staging.clone(),
            capability: capability.clone(),
        };
        let records = self.node.staged.clone();
        let recorded_now = blocking(move || record_stage(&records, &record)).await?;
        tracing::info!(volume_id, staging = ?staging, mode = %capability.mode, "NodeStageVolume");
        let mode = capability.mode;
        let read_only = capability.access_mode.is_read_only();
        let mut stage = self.stage_request(volume_id, staging.clone(), capability, read_only);
        stage.context = convert::sorted(&req.volume_context);
        stage.secrets = secrets;
        if let Err(failed) = stage_and_bind(stager, stage).await {
            tracing::warn!(
                volume_id,
                error = failed.message(),
                "NodeStageVolume failed"
            );
            // Kubelet does not unstage a volume whose stage failed: what
            // this call did is undone here. A stage recorded earlier may
            // be in use, and stays.
            if recorded_now {
                self.undo_failed_stage(volume_id, staging, mode).await;
            }
            return Err(failed);
        }
        Ok(Response::new(csi::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        self.stages_per_node()?;
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        let staging = self
            .node
            .paths
            .path("staging_target_path", &req.staging_target_path)?;
        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        let (records, id, path) = (
            self.node.staged.clone(),
            volume_id.to_owned(),
            staging.clone(),
        );
        let recorded = blocking(move || {
            let record = records
                .get(&id)
                .map_err(|e| internal("reading staging records", e))?;
            Ok(record.filter(|r| r.staging == path))
        })
        .await?;
        // Not staged here (never, or unstaged already): nothing to undo,
        // and nothing at this path is ours to unmount.
        let Some(record) = recorded else {
            tracing::info!(volume_id, staging = ?staging, "NodeUnstageVolume: not staged there");
            return Ok(Response::new(csi::NodeUnstageVolumeResponse {}));
        };
        tracing::info!(volume_id, staging = ?staging, "NodeUnstageVolume");
        self.unstage_recorded(volume_id, staging, record.capability.mode)
            .await
            .inspect_err(|failed| {
                tracing::warn!(
                    volume_id,
                    error = failed.message(),
                    "NodeUnstageVolume failed"
                );
            })?;
        Ok(Response::new(csi::NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        let target = self.node.paths.path("target_path", &req.target_path)?;
        let capability = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
        let capability = convert::capability("volume_capability", capability)?;
        limits::map("publish_context", &req.publish_context)?;
        limits::map("volume_context", &req.volume_context)?;
        let secrets = convert::secrets(&req.secrets)?;
        self.check_capability(&capability)?;
        if self.shared.provisioner.stages_on_publish() {
            // staging_target_path is not ours to use: STAGE_UNSTAGE_VOLUME
            // is not advertised, so the CO leaves it unset.
            let read_only = req.readonly || capability.access_mode.is_read_only();
            let (context, pod) = convert::split_pod_info(&req.volume_context);
            let mut stage = self.stage_request(volume_id, target, capability, read_only);
            stage.context = context;
            stage.secrets = secrets;
            stage.pod = pod;
            return self.stage_and_publish(stage).await;
        }
        self.stages_per_node()?;
        if req.staging_target_path.is_empty() {
            return Err(Status::failed_precondition(
                "staging_target_path is required: this driver advertises STAGE_UNSTAGE_VOLUME",
            ));
        }
        let staging = self
            .node
            .paths
            .path("staging_target_path", &req.staging_target_path)?;
        if target.starts_with(&staging) || staging.starts_with(&target) {
            return Err(Status::invalid_argument(format!(
                "target_path {} and staging_target_path {} overlap",
                target.display(),
                staging.display()
            )));
        }

        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        // Two volumes published at one target at once must not both find it free.
        let _target_guard = (self.shared.in_flight).claim(Key::TargetPath(target.clone()))?;
        let read_only = req.readonly || capability.access_mode.is_read_only();
        tracing::info!(volume_id, target = ?target, read_only, "NodePublishVolume");
        let mode = capability.mode;
        let single_writer = capability.access_mode == AccessMode::SingleNodeSingleWriter;
        let kubelet_dir = self.node.paths.kubelet_dir.clone();
        let records = self.node.staged.clone();
        let id = volume_id.to_owned();
        blocking(move || {
            // The source is the staging path recorded when this volume was
            // staged, never a path the request alone names.
            let record = records
                .get(&id)
                .map_err(|e| internal("reading staging records", e))?
                .ok_or_else(|| {
                    Status::failed_precondition(format!("volume {id} is not staged on this node"))
                })?;
            if record.staging != staging {
                return Err(Status::failed_precondition(format!(
                    "volume {id} is staged at {}, not at {}",
                    record.staging.display(),
                    staging.display()
                )));
            }
            if record.capability.mode != mode {
                return Err(Status::failed_precondition(format!(
                    "volume {id} is staged as {}; it cannot be published as {mode}",
                    record.capability.mode
                )));
            }
            let source = match mode {
                VolumeMode::Filesystem => record.staging,
                VolumeMode::Block => record.staging.join(STAGED_DEVICE),
            };
            let source_read_only = mount::read_only(&source)
                .map_err(|e| internal("reading mounts", e))?
                .ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "volume {id} is not staged at {}",
                        source.display()
                    ))
                })?;
            if published(&target, Some(&source), mode, read_only, source_read_only)? {
                return Ok(());
            }
            if single_writer {
                check_published_nowhere(&id, &source, &kubelet_dir)?;
            }
            check_free("target_path", &target, &records)?;
            bind_once(&source, &target, mode, read_only)
        })
        .await?;
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        let target = self.node.paths.path("target_path", &req.target_path)?;
        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        tracing::info!(volume_id, target = ?target, "NodeUnpublishVolume");
        let path = target.clone();
        blocking(move || unmount_and_remove(&path)).await?;
        if self.shared.provisioner.stages_on_publish()
            && let Some(unstager) = self.shared.provisioner.unstage()
        {
            let unstage = pav_sdk::build::unstage(volume_id, self.node.node_id.clone(), target);
            unstager.unstage(unstage).await.map_err(|e| {
                tracing::warn!(
                    volume_id,
                    error = e.message(),
                    "NodeUnpublishVolume: unstaging failed"
                );
                status(e)
            })?;
        }
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        limits::required("volume_id", &req.volume_id)?;
        let volume_path = limits::required_path("volume_path", &req.volume_path)?;
        limits::path("staging_target_path", &req.staging_target_path)?;
        let message = format!("no volume is published at {volume_path}");
        // Nothing of this driver's is mounted outside the kubelet directory.
        let path = (self.node.paths.lookup(volume_path))
            .ok_or_else(|| Status::not_found(message.clone()))?;
        let staging_path = (!req.staging_target_path.is_empty())
            .then(|| self.node.paths.lookup(&req.staging_target_path))
            .flatten();
        let (path, mode, measured) = blocking(move || {
            let not_found = || Status::not_found(message.clone());
            if !mount::is_mount_point(&path).map_err(|e| internal("reading mounts", e))? {
                return Err(not_found());
            }
            let meta = std::fs::metadata(&path).map_err(|_| not_found())?;
            let mode = match meta.is_dir() {
                true => VolumeMode::Filesystem,
                false => VolumeMode::Block,
            };
            let measured = measure(&path, mode);
            Ok((path, mode, measured))
        })
        .await?;
        let stats = match self.shared.provisioner.stats() {
            None => measured.map_err(|e| internal("reading usage", e))?,
            Some(provisioner) => {
                let mut ask = pav_sdk::build::stats(req.volume_id.as_str(), path, mode);
                ask.staging_path = staging_path;
                ask.measured = measured.ok();
                provisioner.stats(ask).await.map_err(|e| {
                    tracing::warn!(
                        volume_id = req.volume_id,
                        error = e.message(),
                        "NodeGetVolumeStats failed"
                    );
                    status(e)
                })?
            }
        };
        Ok(Response::new(csi_stats(
            stats,
            self.shared.provisioner.stats().is_some(),
        )?))
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        let Some(expander) = self.shared.provisioner.node_expand() else {
            return Err(Status::unimplemented(
                "this provisioner does not expand volumes on nodes (EXPAND_VOLUME is not advertised)",
            ));
        };
        let req = request.into_inner();
        let volume_id = limits::required("volume_id", &req.volume_id)?;
        let volume_path = limits::required_path("volume_path", &req.volume_path)?;
        limits::path("staging_target_path", &req.staging_target_path)?;
        convert::secrets(&req.secrets)?;
        let capacity = convert::capacity_range(req.capacity_range.as_ref())?;
        let wanted_mode = match &req.volume_capability {
            Some(cap) => {
                let cap = convert::capability("volume_capability", cap)?;
                self.check_capability(&cap)?;
                Some(cap.mode)
            }
            None => None,
        };
        let message = format!("volume {volume_id} is not published at {volume_path}");
        // Nothing of this driver's is mounted outside the kubelet directory.
        let path = (self.node.paths.lookup(volume_path))
            .ok_or_else(|| Status::not_found(message.clone()))?;
        let staging_path = (!req.staging_target_path.is_empty())
            .then(|| self.node.paths.lookup(&req.staging_target_path))
            .flatten();
        let _guard = self
            .shared
            .in_flight
            .claim(Key::Volume(volume_id.to_owned()))?;
        let (path, mode) = blocking(move || {
            let not_found = || Status::not_found(message.clone());
            if !mount::is_mount_point(&path).map_err(|e| internal("reading mounts", e))? {
                return Err(not_found());
            }
            let meta = std::fs::metadata(&path).map_err(|_| not_found())?;
            let mode = match meta.is_dir() {
                true => VolumeMode::Filesystem,
                false => VolumeMode::Block,
            };
            Ok((path, mode))
        })
        .await?;
        if let Some(wanted) = wanted_mode
            && wanted != mode
        {
            return Err(Status::invalid_argument(format!(
                "volume_capability says {wanted}, but {volume_path} holds a {mode} volume"
            )));
        }
        tracing::info!(volume_id, path = ?path, ?capacity, "NodeExpandVolume");
        let mut expand = pav_sdk::build::node_expand(volume_id, path, mode);
        expand.staging_path = staging_path;
        expand.capacity = capacity;
        let bytes = expander.node_expand(expand).await.map_err(|e| {
            tracing::warn!(volume_id, error = e.message(), "NodeExpandVolume failed");
            status(e)
        })?;
        Ok(Response::new(csi::NodeExpandVolumeResponse {
            capacity_bytes: limits::int64("capacity_bytes", bytes)?,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        let mut rpcs = vec![RpcType::GetVolumeStats];
        if self.shared.provisioner.stats().is_some() {
            rpcs.push(RpcType::VolumeCondition);
        }
        if self.shared.provisioner.stage().is_some() && !self.shared.provisioner.stages_on_publish()
        {
            rpcs.push(RpcType::StageUnstageVolume);
        }
        if self.shared.provisioner.node_expand().is_some() {
            rpcs.push(RpcType::ExpandVolume);
        }
        if self.shared.provisioner.tells_single_node_writers_apart() {
            rpcs.push(RpcType::SingleNodeMultiWriter);
        }
        let capabilities = rpcs
            .into_iter()
            .map(|rpc| csi::NodeServiceCapability {
                r#type: Some(csi::node_service_capability::Type::Rpc(
                    csi::node_service_capability::Rpc { r#type: rpc as i32 },
                )),
            })
            .collect();
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn node_get_info(
        &self,
        _request: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        let accessible_topology =
            (!self.node.topology.is_empty()).then(|| convert::topology(&self.node.topology));
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node.node_id.clone(),
            max_volumes_per_node: self.node.max_volumes,
            accessible_topology,
        }))
    }
}

/// What pav-csi measures of the volume at `path` itself: `statvfs` (bytes
/// and inodes) for a filesystem, the device's size for a block volume.
fn measure(path: &Path, mode: VolumeMode) -> std::io::Result<VolumeStats> {
    if mode == VolumeMode::Filesystem {
        let fs = rustix::fs::statvfs(path)?;
        let block = fs.f_frsize;
        let bytes = Usage {
            total: fs.f_blocks.saturating_mul(block),
            available: fs.f_bavail.saturating_mul(block),
            used: (fs.f_blocks.saturating_sub(fs.f_bfree)).saturating_mul(block),
        };
        let inodes = Usage {
            total: fs.f_files,
            available: fs.f_ffree,
            used: fs.f_files.saturating_sub(fs.f_ffree),
        };
        return Ok(VolumeStats::bytes(bytes).with_inodes(inodes));
    }
    // A block device's size is where seeking to its end lands.
    use std::io::Seek;
    let size = std::fs::File::open(path)?.seek(std::io::SeekFrom::End(0))?;
    Ok(VolumeStats::bytes(Usage {
        total: size,
        available: 0,
        used: 0,
    }))
}

/// The CSI answer for `stats`. With `VOLUME_CONDITION` advertised
/// (`condition_advertised`) the spec requires a condition: none from the
/// provisioner is reported as healthy.
fn csi_stats(
    stats: VolumeStats,
    condition_advertised: bool,
) -> Result<csi::NodeGetVolumeStatsResponse, Status> {
    use csi::volume_usage::Unit;
    let usage = |unit: Unit, u: Usage| {
        let count = |field: &str, value| {
            let field = format!("{} {field}", unit.as_str_name().to_lowercase());
            limits::int64(&field, value)
        };
        Ok::<_, Status>(csi::VolumeUsage {
            available: count("available", u.available)?,
            total: count("total", u.total)?,
            used: count("used", u.used)?,
            unit: unit as i32,
        })
    };
    let mut usages = Vec::new();
    if let Some(bytes) = stats.bytes {
        usages.push(usage(Unit::Bytes, bytes)?);
    }
    if let Some(inodes) = stats.inodes {
        usages.push(usage(Unit::Inodes, inodes)?);
    }
    let condition = match stats.condition {
        Some(c) => Some(c),
        None if condition_advertised => Some(VolumeCondition::healthy()),
        None => None,
    };
    Ok(csi::NodeGetVolumeStatsResponse {
        usage: usages,
        volume_condition: condition.map(|c| csi::VolumeCondition {
            abnormal: c.abnormal,
            message: c.message,
        }),
    })
}
