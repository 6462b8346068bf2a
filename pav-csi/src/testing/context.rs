//! What every check works with: its [`Harness`], what the driver
//! advertises, the settings of [`Conformance`](super::Conformance) it
//! reads, and what it created, staged and published (removed at its end);
//! with the calls and expectations the checks are written in.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pav_sdk::{AccessMode, VolumeMode};
use tonic::{Code, Response, Status};

use super::harness::Harness;
use crate::csi;

/// How long a check waits for one answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The file (Filesystem) a check writes into a volume and looks for later.
const MARKER: &str = "pav-testing-marker";
/// What the marker holds; for a Block volume, its first bytes.
const MARKER_TEXT: &[u8] = b"written by pav-csi's conformance checks\n";

/// A step's result: its value, or what went wrong.
pub(super) type Step<T> = Result<T, String>;

/// What the checks create volumes with and how they damage one: the
/// settings of [`Conformance`](super::Conformance) the checks read.
pub(crate) struct Settings {
    pub(crate) volume_mode: Option<VolumeMode>,
    pub(crate) volume_size: u64,
    pub(crate) expanded_size: Option<u64>,
    pub(crate) parameters: HashMap<String, String>,
    pub(crate) mutable_parameters: HashMap<String, String>,
    pub(crate) damage: Option<Damage>,
}

/// How [`Conformance::damage`](super::Conformance::damage) damages a
/// volume: given the storage directory and the volume id.
pub(crate) type Damage = Arc<dyn Fn(&Path, &str) -> std::io::Result<()> + Send + Sync>;

/// What the driver advertises, read through CSI as csi-sanity reads it.
#[derive(Debug, Default)]
pub(super) struct Caps {
    /// Controller `CREATE_DELETE_VOLUME`.
    pub(super) create: bool,
    /// Controller `MODIFY_VOLUME`.
    pub(super) modify: bool,
    /// Controller `GET_VOLUME`.
    pub(super) get_volume: bool,
    /// Controller `EXPAND_VOLUME`.
    pub(super) controller_expand: bool,
    /// Controller `CREATE_DELETE_SNAPSHOT`.
    pub(super) snapshots: bool,
    /// Controller `LIST_SNAPSHOTS`.
    pub(super) list_snapshots: bool,
    /// The node service is served.
    pub(super) node: bool,
    /// Node `STAGE_UNSTAGE_VOLUME`.
    pub(super) stage_unstage: bool,
    /// Node `EXPAND_VOLUME`.
    pub(super) node_expand: bool,
    /// Node `GET_VOLUME_HEALTH`.
    pub(super) volume_health: bool,
    /// Controller `PUBLISH_UNPUBLISH_VOLUME`.
    pub(super) attach: bool,
}

/// One check's harness, what the driver advertises, and what the check
/// created, staged and published (removed at its end, also on failure).
pub(super) struct Ctx<'a> {
    pub(super) h: Harness,
    pub(super) conf: &'a Settings,
    pub(super) mode: VolumeMode,
    pub(super) access: AccessMode,
    pub(super) caps: Caps,
    /// The node's topology, asked for in CreateVolume as csi-sanity does.
    pub(super) topology: Option<csi::Topology>,
    pub(super) volumes: Vec<String>,
    pub(super) contexts: HashMap<String, HashMap<String, String>>,
    pub(super) staged: Vec<(String, PathBuf)>,
    pub(super) published: Vec<(String, PathBuf)>,
    pub(super) snapshots: Vec<String>,
    /// Group snapshots taken, with their members' ids.
    pub(super) groups: Vec<(String, Vec<String>)>,
}

/// Waits at most [`CALL_TIMEOUT`] for `call`'s answer.
pub(super) async fn call<T>(
    call: impl Future<Output = Result<Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(answer) => answer.map(Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "the check gave up waiting after {CALL_TIMEOUT:?}"
        ))),
    }
}

/// A gRPC code as the CSI spec writes it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A refusal, for messages: `NOT_FOUND ("volume x does not exist")`.
pub(super) fn answered(status: &Status) -> String {
    format!("{} ({:?})", code_name(status.code()), status.message())
}

/// The answer of a call that must succeed.
pub(super) fn expect_ok<T>(what: impl Display, answer: Result<T, Status>) -> Step<T> {
    answer.map_err(|status| format!("{what}: expected OK, got {}", answered(&status)))
}

/// `codes` as `NOT_FOUND or INVALID_ARGUMENT`.
fn code_names(codes: &[Code]) -> String {
    let names: Vec<&str> = codes.iter().map(|c| code_name(*c)).collect();
    names.join(" or ")
}

/// Checks that a call was refused with one of `codes` (`OK` among them
/// counts as success too); the answer of a call that succeeded, for the
/// caller to clean up after, otherwise.
pub(super) fn expect_codes<T>(
    what: impl Display,
    answer: Result<T, Status>,
    codes: &[Code],
) -> Step<()> {
    match answer {
        Err(status) if codes.contains(&status.code()) => Ok(()),
        Ok(_) if codes.contains(&Code::Ok) => Ok(()),
        Ok(_) => Err(format!("{what}: expected {}, got OK", code_names(codes))),
        Err(status) => Err(format!(
            "{what}: expected {}, got {}",
            code_names(codes),
            answered(&status)
        )),
    }
}

/// `bytes` as CSI's int64.
pub(super) fn int64(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// A path as a CSI request carries it.
pub(super) fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

impl<'a> Ctx<'a> {
    /// Reads what the driver advertises and picks the volume and access
    /// modes of the check's volumes.
    pub(super) async fn new(conf: &'a Settings, mut h: Harness) -> Step<Ctx<'a>> {
        use csi::controller_service_capability::Type as ControllerType;
        use csi::controller_service_capability::rpc::Type as ControllerRpc;
        use csi::node_service_capability::Type as NodeType;
        use csi::node_service_capability::rpc::Type as NodeRpc;

        let provisioner = h.provisioner();
        let mode = conf.volume_mode.unwrap_or(
            match provisioner.supports_volume_mode(VolumeMode::Filesystem) {
                true => VolumeMode::Filesystem,
                false => VolumeMode::Block,
            },
        );
        let access = match provisioner.supports_access_mode(AccessMode::SingleNodeWriter) {
            true => AccessMode::SingleNodeWriter,
            false => (AccessMode::ALL.into_iter())
                .find(|m| provisioner.supports_access_mode(*m))
                .unwrap_or(AccessMode::SingleNodeWriter),
        };
        let mut caps = Caps::default();
        let answer = call(
            h.controller
                .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {}),
        )
        .await;
        for cap in expect_ok("ControllerGetCapabilities", answer)?.capabilities {
            let Some(ControllerType::Rpc(rpc)) = cap.r#type else {
                continue;
            };
            match rpc.r#type() {
                ControllerRpc::CreateDeleteVolume => caps.create = true,
                ControllerRpc::ExpandVolume => caps.controller_expand = true,
                ControllerRpc::CreateDeleteSnapshot => caps.snapshots = true,
                ControllerRpc::ListSnapshots => caps.list_snapshots = true,
                ControllerRpc::PublishUnpublishVolume => caps.attach = true,
                ControllerRpc::ModifyVolume => caps.modify = true,
                ControllerRpc::GetVolume => caps.get_volume = true,
                _ => {}
            }
        }
        let mut topology = None;
        if h.serves_node() {
            caps.node = true;
            let answer = call(
                h.node
                    .node_get_capabilities(csi::NodeGetCapabilitiesRequest {}),
            )
            .await;
            for cap in expect_ok("NodeGetCapabilities", answer)?.capabilities {
                let Some(NodeType::Rpc(rpc)) = cap.r#type else {
                    continue;
                };
                match rpc.r#type() {
                    NodeRpc::StageUnstageVolume => caps.stage_unstage = true,
                    NodeRpc::ExpandVolume => caps.node_expand = true,
                    NodeRpc::GetVolumeHealth => caps.volume_health = true,
                    _ => {}
                }
            }
            let info = call(h.node.node_get_info(csi::NodeGetInfoRequest {})).await;
            topology = expect_ok("NodeGetInfo", info)?.accessible_topology;
        }
        Ok(Ctx {
            h,
            conf,
            mode,
            access,
            caps,
            topology,
            volumes: Vec::new(),
            contexts: HashMap::new(),
            staged: Vec::new(),
            published: Vec::new(),
            snapshots: Vec::new(),
            groups: Vec::new(),
        })
    }

    /// Why a node check is skipped when the node service is not served.
    pub(super) fn no_node(&self) -> String {
        match self.h.provisioner().stage().is_some() {
            true => "the node service is not served (controller_only)".into(),
            false => "the node service is not served (the provisioner has no Stage)".into(),
        }
    }

    pub(super) fn capability(&self) -> csi::VolumeCapability {
        crate::convert::csi_capability(self.mode, self.access)
    }

    pub(super) fn size(&self) -> u64 {
        self.conf.volume_size
    }

    pub(super) fn expanded_size(&self) -> u64 {
        (self.conf.expanded_size).unwrap_or(self.conf.volume_size.saturating_mul(2))
    }

    /// A CreateVolume request for `name` (`limit` 0: none).
    pub(super) fn create_request(
        &self,
        name: &str,
        required: u64,
        limit: u64,
    ) -> csi::CreateVolumeRequest {
        csi::CreateVolumeRequest {
            name: name.to_owned(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: int64(required),
                limit_bytes: int64(limit),
            }),
            volume_capabilities: vec![self.capability()],
            parameters: self.conf.parameters.clone(),
            accessibility_requirements: (self.topology.clone()).map(|t| csi::TopologyRequirement {
                requisite: vec![t],
                preferred: Vec::new(),
            }),
            ..Default::default()
        }
    }

    /// Remembers a volume the driver created, to delete it at the end.
    pub(super) fn track_volume(&mut self, volume: &csi::Volume) {
        if !self.volumes.contains(&volume.volume_id) {
            self.volumes.push(volume.volume_id.clone());
        }
        (self.contexts).insert(volume.volume_id.clone(), volume.volume_context.clone());
    }

    /// CreateVolume that must succeed with a volume of at least the
    /// required size (or 0, unknown).
    pub(super) async fn create_with(
        &mut self,
        what: &str,
        req: csi::CreateVolumeRequest,
    ) -> Step<csi::Volume> {
        let required = req.capacity_range.as_ref().map_or(0, |r| r.required_bytes);
        let answer = expect_ok(what, call(self.h.controller.create_volume(req)).await)?;
        let volume = (answer.volume).ok_or_else(|| format!("{what}: OK without a volume"))?;
        self.track_volume(&volume);
        if volume.volume_id.is_empty() {
            return Err(format!("{what}: OK with an empty volume_id"));
        }
        if volume.capacity_bytes != 0 && volume.capacity_bytes < required {
            return Err(format!(
                "{what}: capacity_bytes {} is less than the required {required}",
                volume.capacity_bytes
            ));
        }
        Ok(volume)
    }

    /// Creates `name` with the volume size required.
    pub(super) async fn create(&mut self, name: &str) -> Step<csi::Volume> {
        let req = self.create_request(name, self.size(), 0);
        self.create_with(&format!("CreateVolume {name:?}"), req)
            .await
    }

    /// DeleteVolume that must succeed.
    pub(super) async fn delete(&mut self, what: impl Display, id: &str) -> Step<()> {
        let req = csi::DeleteVolumeRequest {
            volume_id: id.to_owned(),
            ..Default::default()
        };
        expect_ok(what, call(self.h.controller.delete_volume(req)).await)?;
        self.volumes.retain(|v| v != id);
        // A deleted volume has no context: a CO stages it with none.
        self.contexts.remove(id);
        Ok(())
    }

    pub(super) fn validate_request(&self, id: &str) -> csi::ValidateVolumeCapabilitiesRequest {
        csi::ValidateVolumeCapabilitiesRequest {
            volume_id: id.to_owned(),
            volume_context: self.contexts.get(id).cloned().unwrap_or_default(),
            volume_capabilities: vec![self.capability()],
            ..Default::default()
        }
    }

    pub(super) fn stage_request(&self, id: &str, staging: &str) -> csi::NodeStageVolumeRequest {
        csi::NodeStageVolumeRequest {
            volume_id: id.to_owned(),
            staging_target_path: staging.to_owned(),
            volume_capability: Some(self.capability()),
            volume_context: self.contexts.get(id).cloned().unwrap_or_default(),
            ..Default::default()
        }
    }

    pub(super) fn publish_request(
        &self,
        id: &str,
        staging: &str,
        target: &str,
    ) -> csi::NodePublishVolumeRequest {
        csi::NodePublishVolumeRequest {
            volume_id: id.to_owned(),
            staging_target_path: staging.to_owned(),
            target_path: target.to_owned(),
            volume_capability: Some(self.capability()),
            volume_context: self.contexts.get(id).cloned().unwrap_or_default(),
            ..Default::default()
        }
    }

    /// NodeStageVolume that must succeed; the staging path is made first,
    /// as kubelet does.
    pub(super) async fn stage(&mut self, what: impl Display, id: &str, staging: &Path) -> Step<()> {
        std::fs::create_dir_all(staging)
            .map_err(|e| format!("creating {}: {e}", staging.display()))?;
        let req = self.stage_request(id, &text(staging));
        expect_ok(what, call(self.h.node.node_stage_volume(req)).await)?;
        if !self.staged.iter().any(|(v, p)| v == id && p == staging) {
            self.staged.push((id.to_owned(), staging.to_owned()));
        }
        Ok(())
    }

    /// NodeUnstageVolume that must succeed.
    pub(super) async fn unstage(
        &mut self,
        what: impl Display,
        id: &str,
        staging: &Path,
    ) -> Step<()> {
        let what = what.to_string();
        kubelet_would_unstage(&what, staging)?;
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: id.to_owned(),
            staging_target_path: text(staging),
        };
        expect_ok(what, call(self.h.node.node_unstage_volume(req)).await)?;
        self.staged.retain(|(v, p)| !(v == id && p == staging));
        Ok(())
    }

    /// NodePublishVolume that must succeed; the target's parent is made
    /// first, as kubelet does.
    pub(super) async fn publish(
        &mut self,
        what: impl Display,
        id: &str,
        staging: Option<&Path>,
        target: &Path,
    ) -> Step<()> {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        let staging = staging.map(text).unwrap_or_default();
        let req = self.publish_request(id, &staging, &text(target));
        expect_ok(what, call(self.h.node.node_publish_volume(req)).await)?;
        if !self.published.iter().any(|(v, p)| v == id && p == target) {
            self.published.push((id.to_owned(), target.to_owned()));
        }
        Ok(())
    }

    /// NodeUnpublishVolume that must succeed.
    pub(super) async fn unpublish(
        &mut self,
        what: impl Display,
        id: &str,
        target: &Path,
    ) -> Step<()> {
        let req = csi::NodeUnpublishVolumeRequest {
            volume_id: id.to_owned(),
            target_path: text(target),
        };
        expect_ok(what, call(self.h.node.node_unpublish_volume(req)).await)?;
        self.published.retain(|(v, p)| !(v == id && p == target));
        Ok(())
    }

    /// Makes volume `id` available on the node, as kubelet would for one
    /// pod: staged (when the node stages per node) and published. Returns
    /// the staging path (if staged), the target path, and where the
    /// volume's data is reachable (the target).
    pub(super) async fn mount_for_pod(
        &mut self,
        id: &str,
        label: &str,
    ) -> Step<(Option<PathBuf>, PathBuf)> {
        let staging = match self.caps.stage_unstage {
            true => {
                let staging = self.h.staging_path(label);
                self.stage(format!("NodeStageVolume of {label}"), id, &staging)
                    .await?;
                Some(staging)
            }
            false => None,
        };
        let target = self.h.target_path("pod-1", label);
        self.publish(
            format!("NodePublishVolume of {label}"),
            id,
            staging.as_deref(),
            &target,
        )
        .await?;
        Ok((staging, target))
    }

    /// Undoes [`mount_for_pod`](Self::mount_for_pod).
    pub(super) async fn unmount_for_pod(
        &mut self,
        id: &str,
        label: &str,
        (staging, target): (Option<PathBuf>, PathBuf),
    ) -> Step<()> {
        self.unpublish(format!("NodeUnpublishVolume of {label}"), id, &target)
            .await?;
        if let Some(staging) = staging {
            self.unstage(format!("NodeUnstageVolume of {label}"), id, &staging)
                .await?;
        }
        Ok(())
    }

    /// Stops the driver and serves again (pav-csi's caches emptied).
    pub(super) async fn restart(&mut self) -> Step<()> {
        (self.h.restart().await)
            .map_err(|e| format!("restarting the driver: {}", crate::error_chain(&e)))
    }

    /// Removes what the check left (it failed, or stopped early): best
    /// effort, last made first.
    pub(super) async fn clean_up(&mut self) {
        for (id, target) in std::mem::take(&mut self.published).into_iter().rev() {
            let _ = self.unpublish("", &id, &target).await;
        }
        for (id, staging) in std::mem::take(&mut self.staged).into_iter().rev() {
            let _ = self.unstage("", &id, &staging).await;
        }
        for (id, members) in std::mem::take(&mut self.groups).into_iter().rev() {
            let req = csi::DeleteVolumeGroupSnapshotRequest {
                group_snapshot_id: id,
                snapshot_ids: members,
                ..Default::default()
            };
            let _ = call(self.h.group_controller.delete_volume_group_snapshot(req)).await;
        }
        for id in std::mem::take(&mut self.snapshots).into_iter().rev() {
            let req = csi::DeleteSnapshotRequest {
                snapshot_id: id,
                ..Default::default()
            };
            let _ = call(self.h.controller.delete_snapshot(req)).await;
        }
        for id in std::mem::take(&mut self.volumes).into_iter().rev() {
            let _ = self.delete("", &id).await;
        }
    }

    /// Where the data of a volume staged at `staging` is reachable: the
    /// staging path (Filesystem), or the device pav-csi binds in it (Block).
    pub(super) fn staged_data(&self, staging: &Path) -> PathBuf {
        match self.mode {
            VolumeMode::Filesystem => staging.to_owned(),
            VolumeMode::Block => staging.join(crate::node::STAGED_DEVICE),
        }
    }

    /// Writes the marker into the volume reachable at `at`.
    pub(super) fn write_marker(&self, at: &Path) -> Step<()> {
        let failed = |e: std::io::Error| format!("writing a marker into {}: {e}", at.display());
        match self.mode {
            VolumeMode::Filesystem => std::fs::write(at.join(MARKER), MARKER_TEXT).map_err(failed),
            VolumeMode::Block => {
                let device = std::fs::OpenOptions::new()
                    .write(true)
                    .open(at)
                    .map_err(failed)?;
                device.write_all_at(MARKER_TEXT, 0).map_err(failed)?;
                device.sync_all().map_err(failed)
            }
        }
    }

    /// Whether the volume reachable at `at` holds the marker.
    pub(super) fn holds_marker(&self, at: &Path) -> Step<bool> {
        let failed = |e: std::io::Error| format!("reading {}: {e}", at.display());
        match self.mode {
            VolumeMode::Filesystem => match std::fs::read(at.join(MARKER)) {
                Ok(data) => Ok(data == MARKER_TEXT),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(failed(e)),
            },
            VolumeMode::Block => {
                let device = std::fs::File::open(at).map_err(failed)?;
                let mut data = vec![0; MARKER_TEXT.len()];
                device.read_exact_at(&mut data, 0).map_err(failed)?;
                Ok(data == MARKER_TEXT)
            }
        }
    }

    /// Fails unless nothing is mounted in the kubelet directory.
    pub(super) fn nothing_mounted(&self, when: &str) -> Step<()> {
        let left = crate::mount::blocking::mounts_below(self.h.kubelet_dir())
            .map_err(|e| format!("reading the mount table: {}", crate::error_chain(&e)))?;
        match left.is_empty() {
            true => Ok(()),
            false => Err(format!(
                "{when}, still mounted in the kubelet directory: {left:?}"
            )),
        }
    }
}

/// Kubelet's check before NodeUnstageVolume (`GetDeviceMountRefs`,
/// `HasMountRefs`): the filesystem mounted at `staging`, with the same
/// root, mounted anywhere but under kubelet's CSI plugin directories is a
/// reference that makes kubelet refuse to unstage, for ever. A provisioner
/// that keeps its volume mounted elsewhere (a tmpfs in its node
/// directory) and stages that mount's root hits it; staging a directory
/// inside the mount does not.
fn kubelet_would_unstage(what: &str, staging: &Path) -> Step<()> {
    let reading = |e: crate::mount::TableError| format!("reading the mount table: {e}");
    let Some(staged) = crate::mount::blocking::mounted_at(staging).map_err(reading)? else {
        return Ok(()); // not mounted: kubelet has nothing to check
    };
    let table = crate::mount::blocking::mount_table().map_err(reading)?;
    let reference = table.iter().find(|m| {
        m.mount_point != staged.mount_point
            && m.device == staged.device
            && m.root == staged.root
            && !m
                .mount_point
                .to_string_lossy()
                .contains("plugins/kubernetes.io/csi/")
    });
    match reference {
        None => Ok(()),
        Some(other) => Err(format!(
            "before {what}: {} is also mounted at {} (the same filesystem root, {}); kubelet \
             refuses to unstage a volume whose staging mount has other references, so it would \
             stay staged for ever: stage a directory inside what you keep mounted",
            staging.display(),
            other.mount_point.display(),
            staged.root.display()
        )),
    }
}
