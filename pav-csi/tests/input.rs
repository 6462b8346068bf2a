//! CSI input: one row per RPC and bad (missing, oversized, inconsistent or
//! out-of-place) input, each asserting the gRPC code the CSI v1.12 spec
//! names for it and that the provisioner was not called. Rows whose
//! fixture mounts (a staged or published volume) need root: their tests
//! are `#[ignore]`d, and `.ci/run` runs them as root in scripts/sandbox.
//!
//! Codes, from the spec's general and per-RPC error tables:
//! missing or invalid field `INVALID_ARGUMENT`; `limit_bytes` below
//! `required_bytes` `OUT_OF_RANGE` (CreateVolume's "Unsupported
//! capacity_range"); NodePublishVolume without `staging_target_path` while
//! `STAGE_UNSTAGE_VOLUME` is advertised, or of a volume not staged there or
//! staged as the other access type, `FAILED_PRECONDITION`; a repeated
//! NodeStageVolume / NodePublishVolume incompatible with what is
//! staged / published at that path `ALREADY_EXISTS`; an RPC the driver does
//! not serve `UNIMPLEMENTED`; NodeGetVolumeStats of a path where no volume
//! of the driver is `NOT_FOUND`, and NodeGetVolumeHealth (CSI v1.13) the
//! same as NodeGetVolumeStats.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{Harness, Options, capability};
use pav_csi::csi;
use pav_sdk::{AccessMode, VolumeMode};
use tonic::{Code, Status};

/// One RPC with its request.
enum Call {
    CreateVolume(csi::CreateVolumeRequest),
    DeleteVolume(csi::DeleteVolumeRequest),
    ValidateVolumeCapabilities(csi::ValidateVolumeCapabilitiesRequest),
    ControllerModifyVolume(csi::ControllerModifyVolumeRequest),
    ControllerGetCapabilities,
    GetCapacity,
    ListVolumes,
    NodeStageVolume(csi::NodeStageVolumeRequest),
    NodeUnstageVolume(csi::NodeUnstageVolumeRequest),
    NodePublishVolume(csi::NodePublishVolumeRequest),
    NodeUnpublishVolume(csi::NodeUnpublishVolumeRequest),
    NodeGetVolumeStats(csi::NodeGetVolumeStatsRequest),
    NodeGetVolumeHealth(csi::NodeGetVolumeHealthRequest),
    NodeGetInfo,
    NodeGetCapabilities,
    NodeExpandVolume,
}

impl Call {
    fn rpc(&self) -> &'static str {
        match self {
            Call::CreateVolume(_) => "CreateVolume",
            Call::DeleteVolume(_) => "DeleteVolume",
            Call::ValidateVolumeCapabilities(_) => "ValidateVolumeCapabilities",
            Call::ControllerModifyVolume(_) => "ControllerModifyVolume",
            Call::ControllerGetCapabilities => "ControllerGetCapabilities",
            Call::GetCapacity => "GetCapacity",
            Call::ListVolumes => "ListVolumes",
            Call::NodeStageVolume(_) => "NodeStageVolume",
            Call::NodeUnstageVolume(_) => "NodeUnstageVolume",
            Call::NodePublishVolume(_) => "NodePublishVolume",
            Call::NodeUnpublishVolume(_) => "NodeUnpublishVolume",
            Call::NodeGetVolumeStats(_) => "NodeGetVolumeStats",
            Call::NodeGetVolumeHealth(_) => "NodeGetVolumeHealth",
            Call::NodeGetInfo => "NodeGetInfo",
            Call::NodeGetCapabilities => "NodeGetCapabilities",
            Call::NodeExpandVolume => "NodeExpandVolume",
        }
    }
}

/// What a row expects.
enum Expect {
    /// This code, with this text in the message.
    Fails(Code, &'static str),
    /// Success.
    Ok,
    /// ValidateVolumeCapabilities answers "not confirmed", with this text.
    Unconfirmed(&'static str),
}

struct Row {
    case: &'static str,
    call: Call,
    expect: Expect,
    /// Provisioner methods the call may make (none unless a row says so).
    calls: Vec<&'static str>,
}

fn fails(case: &'static str, call: Call, code: Code, text: &'static str) -> Row {
    Row {
        case,
        call,
        expect: Expect::Fails(code, text),
        calls: vec![],
    }
}

fn invalid(case: &'static str, call: Call, field: &'static str) -> Row {
    fails(case, call, Code::InvalidArgument, field)
}

fn ok(case: &'static str, call: Call) -> Row {
    Row {
        case,
        call,
        expect: Expect::Ok,
        calls: vec![],
    }
}

impl Row {
    fn calling(mut self, calls: &[&'static str]) -> Row {
        self.calls = calls.to_vec();
        self
    }
}

/// Sends the call; `Ok(Some(message))` when validation is not confirmed.
async fn invoke(h: &mut Harness, call: Call) -> Result<Option<String>, Status> {
    fn none<T>(_: T) -> Option<String> {
        None
    }
    match call {
        Call::CreateVolume(r) => h.controller.create_volume(r).await.map(none),
        Call::DeleteVolume(r) => h.controller.delete_volume(r).await.map(none),
        Call::ValidateVolumeCapabilities(r) => {
            h.controller.validate_volume_capabilities(r).await.map(|r| {
                let r = r.into_inner();
                r.confirmed.is_none().then_some(r.message)
            })
        }
        Call::ControllerModifyVolume(r) => h.controller.controller_modify_volume(r).await.map(none),
        Call::ControllerGetCapabilities => h
            .controller
            .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
            .await
            .map(none),
        Call::GetCapacity => h
            .controller
            .get_capacity(csi::GetCapacityRequest::default())
            .await
            .map(none),
        Call::ListVolumes => h
            .controller
            .list_volumes(csi::ListVolumesRequest::default())
            .await
            .map(none),
        Call::NodeStageVolume(r) => h.node.node_stage_volume(r).await.map(none),
        Call::NodeUnstageVolume(r) => h.node.node_unstage_volume(r).await.map(none),
        Call::NodePublishVolume(r) => h.node.node_publish_volume(r).await.map(none),
        Call::NodeUnpublishVolume(r) => h.node.node_unpublish_volume(r).await.map(none),
        Call::NodeGetVolumeStats(r) => h.node.node_get_volume_stats(r).await.map(none),
        Call::NodeGetVolumeHealth(r) => h.node.node_get_volume_health(r).await.map(none),
        Call::NodeGetInfo => h
            .node
            .node_get_info(csi::NodeGetInfoRequest {})
            .await
            .map(none),
        Call::NodeGetCapabilities => h
            .node
            .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
            .await
            .map(none),
        Call::NodeExpandVolume => h
            .node
            .node_expand_volume(csi::NodeExpandVolumeRequest::default())
            .await
            .map(none),
    }
}

/// Runs every row, then fails listing every row that did not hold.
async fn run(h: &mut Harness, table: &str, rows: Vec<Row>) -> usize {
    let count = rows.len();
    let mut per_rpc = std::collections::BTreeMap::<&str, usize>::new();
    let mut failures = Vec::new();
    for row in rows {
        *per_rpc.entry(row.call.rpc()).or_default() += 1;
        let name = format!("{table} / {} / {}", row.call.rpc(), row.case);
        let before = h.provisioner.calls().len();
        let result = invoke(h, row.call).await;
        let made = h.provisioner.calls()[before..].to_vec();
        let outcome = match (&row.expect, &result) {
            (Expect::Fails(code, text), Err(s)) if s.code() == *code => {
                if s.message().contains(text) {
                    Ok(())
                } else {
                    Err(format!("message {:?} lacks {text:?}", s.message()))
                }
            }
            (Expect::Ok, Ok(None)) => Ok(()),
            (Expect::Unconfirmed(text), Ok(Some(message))) if message.contains(text) => Ok(()),
            (_, Err(s)) => Err(format!("got {:?}: {}", s.code(), s.message())),
            (_, Ok(None)) => Err("succeeded".into()),
            (_, Ok(Some(message))) => Err(format!("unconfirmed: {message}")),
        };
        let outcome = outcome.and_then(|()| match made == row.calls {
            true => Ok(()),
            false => Err(format!(
                "provisioner calls {made:?}, expected {:?}",
                row.calls
            )),
        });
        if let Err(why) = outcome {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{table}: {count} rows held {per_rpc:?}");
    count
}

fn long(n: usize) -> String {
    "x".repeat(n)
}

/// A map of 4097 bytes: one more than CSI's 4 KiB.
fn big_map() -> HashMap<String, String> {
    HashMap::from([("k".to_owned(), "v".repeat(4096))])
}

/// 40 keys of 128 bytes with 1-byte values: each entry is small, the map is not.
fn many_keys() -> HashMap<String, String> {
    (0..40)
        .map(|i| (format!("{i:0>128}"), "v".to_owned()))
        .collect()
}

fn cap_access(
    mode: VolumeMode,
    access: csi::volume_capability::access_mode::Mode,
) -> csi::VolumeCapability {
    let mut cap = capability(mode);
    cap.access_mode = Some(csi::volume_capability::AccessMode {
        mode: access as i32,
    });
    cap
}

fn cap_mount(edit: impl FnOnce(&mut csi::volume_capability::MountVolume)) -> csi::VolumeCapability {
    let mut mount = csi::volume_capability::MountVolume::default();
    edit(&mut mount);
    csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Mount(mount)),
        ..capability(VolumeMode::Filesystem)
    }
}

fn no_access_type() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: None,
        ..capability(VolumeMode::Filesystem)
    }
}

fn no_access_mode() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: None,
        ..capability(VolumeMode::Filesystem)
    }
}

fn unknown_access_mode() -> csi::VolumeCapability {
    cap_access(
        VolumeMode::Filesystem,
        csi::volume_capability::access_mode::Mode::Unknown,
    )
}

fn create(name: &str) -> csi::CreateVolumeRequest {
    common::create_request(name)
}

fn topology(key: &str, value: &str) -> csi::TopologyRequirement {
    csi::TopologyRequirement {
        requisite: vec![csi::Topology {
            segments: HashMap::from([(key.to_owned(), value.to_owned())]),
        }],
        preferred: vec![],
    }
}

fn validate(id: &str) -> csi::ValidateVolumeCapabilitiesRequest {
    csi::ValidateVolumeCapabilitiesRequest {
        volume_id: id.into(),
        volume_capabilities: vec![capability(VolumeMode::Filesystem)],
        ..Default::default()
    }
}

fn modify(id: &str) -> csi::ControllerModifyVolumeRequest {
    csi::ControllerModifyVolumeRequest {
        volume_id: id.into(),
        mutable_parameters: HashMap::from([("tier".into(), "gold".into())]),
        ..Default::default()
    }
}

fn stage(id: &str, staging: &str, mode: VolumeMode) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.into(),
        volume_capability: Some(capability(mode)),
        ..Default::default()
    }
}

fn unstage(id: &str, staging: &str) -> csi::NodeUnstageVolumeRequest {
    csi::NodeUnstageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.into(),
    }
}

fn publish(
    id: &str,
    staging: &str,
    target: &str,
    mode: VolumeMode,
) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.into(),
        target_path: target.into(),
        volume_capability: Some(capability(mode)),
        ..Default::default()
    }
}

fn unpublish(id: &str, target: &str) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: id.into(),
        target_path: target.into(),
    }
}

fn stats(id: &str, path: &str) -> csi::NodeGetVolumeStatsRequest {
    csi::NodeGetVolumeStatsRequest {
        volume_id: id.into(),
        volume_path: path.into(),
        staging_target_path: String::new(),
    }
}

fn volume_health(id: &str, path: &str) -> csi::NodeGetVolumeHealthRequest {
    csi::NodeGetVolumeHealthRequest {
        volume_id: id.into(),
        volume_publish_path: path.into(),
        staging_target_path: String::new(),
    }
}

/// Paths of one harness: its kubelet directory (the temporary directory),
/// a directory outside it, and links inside it that lead out.
struct Paths {
    kubelet: PathBuf,
    outside: tempfile::TempDir,
}

impl Paths {
    fn new(h: &Harness) -> Self {
        let kubelet = h.kubelet_dir().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(kubelet.join("pods")).unwrap();
        std::os::unix::fs::symlink(outside.path(), kubelet.join("pods/escape")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("not-yet"),
            kubelet.join("pods/dangling"),
        )
        .unwrap();
        Paths { kubelet, outside }
    }

    /// A path inside the kubelet directory.
    fn k(&self, rest: &str) -> String {
        self.kubelet.join(rest).to_string_lossy().into_owned()
    }

    /// `..` climbing out of the kubelet directory to the outside one.
    fn traversal(&self, rest: &str) -> String {
        // From <kubelet>/pods, one `..` per component of <kubelet> (root
        // included) reaches `/`.
        let up = "../".repeat(self.kubelet.components().count());
        let outside = self.outside.path().strip_prefix("/").unwrap();
        format!(
            "{}/pods/{up}{}/{rest}",
            self.kubelet.display(),
            outside.display()
        )
    }

    /// Through a symlink inside the kubelet directory that points outside.
    fn escape(&self, rest: &str) -> String {
        self.k(&format!("pods/escape/{rest}"))
    }

    /// An absolute path elsewhere.
    fn elsewhere(&self, rest: &str) -> String {
        self.outside
            .path()
            .join(rest)
            .to_string_lossy()
            .into_owned()
    }

    /// Nothing was created outside the kubelet directory.
    fn assert_outside_untouched(&self) {
        let entries: Vec<_> = std::fs::read_dir(self.outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(entries.is_empty(), "created outside: {entries:?}");
    }
}

impl Drop for Paths {
    fn drop(&mut self) {
        pav_csi::testing::detach_below(self.outside.path());
    }
}

/// Rows for the full driver (controller and per-node staging) that need no
/// mounted fixture.
fn full_driver_rows(p: &Paths) -> Vec<Row> {
    use csi::volume_capability::access_mode::Mode;
    let fs = VolumeMode::Filesystem;
    let staging = p.k("plugins/kubernetes.io/csi/v/globalmount");
    let target = p.k("pods/uid/volumes/kubernetes.io~csi/v/mount");
    let st = |edit: fn(&mut csi::NodeStageVolumeRequest)| {
        let mut r = stage("v", &staging, fs);
        edit(&mut r);
        Call::NodeStageVolume(r)
    };
    let pb = |edit: &dyn Fn(&mut csi::NodePublishVolumeRequest)| {
        let mut r = publish("v", &staging, &target, fs);
        edit(&mut r);
        Call::NodePublishVolume(r)
    };
    let cr = |edit: fn(&mut csi::CreateVolumeRequest)| {
        let mut r = create("pvc-1");
        edit(&mut r);
        Call::CreateVolume(r)
    };
    let va = |edit: fn(&mut csi::ValidateVolumeCapabilitiesRequest)| {
        let mut r = validate("vol-1");
        edit(&mut r);
        Call::ValidateVolumeCapabilities(r)
    };
    let long_path = format!("/{}", "a/".repeat(2100));
    vec![
        // CreateVolume
        invalid("missing name", cr(|r| r.name.clear()), "name"),
        invalid("name of 129 bytes", cr(|r| r.name = long(129)), "name"),
        invalid(
            "name with U+0007",
            cr(|r| r.name = "pvc\u{7}".into()),
            "U+0007",
        ),
        invalid(
            "name with U+0085",
            cr(|r| r.name = "pvc\u{85}".into()),
            "U+0085",
        ),
        invalid(
            "missing volume_capabilities",
            cr(|r| r.volume_capabilities.clear()),
            "volume_capabilities",
        ),
        invalid(
            "capability without access_type",
            cr(|r| r.volume_capabilities = vec![no_access_type()]),
            "access_type",
        ),
        invalid(
            "capability without access_mode",
            cr(|r| r.volume_capabilities = vec![no_access_mode()]),
            "access_mode",
        ),
        invalid(
            "access_mode UNKNOWN",
            cr(|r| r.volume_capabilities = vec![unknown_access_mode()]),
            "access_mode",
        ),
        invalid(
            "block and mount in one request",
            cr(|r| {
                r.volume_capabilities = vec![
                    capability(VolumeMode::Filesystem),
                    capability(VolumeMode::Block),
                ]
            }),
            "mixes",
        ),
        invalid(
            "fs_type of 129 bytes",
            cr(|r| r.volume_capabilities = vec![cap_mount(|m| m.fs_type = long(129))]),
            "fs_type",
        ),
        invalid(
            "mount flag of 129 bytes",
            cr(|r| r.volume_capabilities = vec![cap_mount(|m| m.mount_flags = vec![long(129)])]),
            "mount_flags[0]",
        ),
        invalid(
            "100,000 mount flags",
            cr(|r| {
                r.volume_capabilities =
                    vec![cap_mount(|m| m.mount_flags = vec!["ro".into(); 100_000])]
            }),
            "mount_flags has 100000 entries",
        ),
        invalid(
            "65 capabilities",
            cr(|r| r.volume_capabilities = vec![capability(VolumeMode::Filesystem); 65]),
            "volume_capabilities has 65 entries",
        ),
        invalid(
            "volume_mount_group of 129 bytes",
            cr(|r| r.volume_capabilities = vec![cap_mount(|m| m.volume_mount_group = long(129))]),
            "volume_mount_group",
        ),
        invalid(
            "parameters over 4 KiB",
            cr(|r| r.parameters = big_map()),
            "parameters",
        ),
        invalid(
            "parameters over 4 KiB in 40 keys",
            cr(|r| r.parameters = many_keys()),
            "parameters",
        ),
        invalid(
            "secrets over 4 KiB",
            cr(|r| r.secrets = big_map()),
            "secrets",
        ),
        invalid(
            "mutable_parameters over 4 KiB",
            cr(|r| r.mutable_parameters = big_map()),
            "mutable_parameters",
        ),
        invalid(
            "mutable_parameters (not supported)",
            cr(|r| r.mutable_parameters = HashMap::from([("iops".into(), "10".into())])),
            "mutable_parameters",
        ),
        invalid(
            "negative required_bytes",
            cr(|r| {
                r.capacity_range = Some(csi::CapacityRange {
                    required_bytes: -1,
                    limit_bytes: 0,
                })
            }),
            "required_bytes",
        ),
        invalid(
            "negative limit_bytes",
            cr(|r| {
                r.capacity_range = Some(csi::CapacityRange {
                    required_bytes: 0,
                    limit_bytes: -1,
                })
            }),
            "limit_bytes",
        ),
        fails(
            "limit_bytes below required_bytes",
            cr(|r| {
                r.capacity_range = Some(csi::CapacityRange {
                    required_bytes: 10 << 20,
                    limit_bytes: 1 << 20,
                })
            }),
            Code::OutOfRange,
            "limit_bytes",
        ),
        invalid(
            "volume_content_source (not supported)",
            cr(|r| {
                r.volume_content_source = Some(csi::VolumeContentSource {
                    r#type: Some(csi::volume_content_source::Type::Volume(
                        csi::volume_content_source::VolumeSource {
                            volume_id: "src".into(),
                        },
                    )),
                })
            }),
            "volume_content_source",
        ),
        invalid(
            "topology key name of 64 characters",
            cr(|r| r.accessibility_requirements = Some(topology(&long(64), "a"))),
            "accessibility_requirements.requisite[0]",
        ),
        invalid(
            "topology value of 64 characters",
            cr(|r| r.accessibility_requirements = Some(topology("zone", &long(64)))),
            "accessibility_requirements.requisite[0]",
        ),
        invalid(
            "empty topology value",
            cr(|r| r.accessibility_requirements = Some(topology("zone", ""))),
            "accessibility_requirements.requisite[0]",
        ),
        // DeleteVolume
        invalid(
            "missing volume_id",
            Call::DeleteVolume(csi::DeleteVolumeRequest::default()),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            Call::DeleteVolume(csi::DeleteVolumeRequest {
                volume_id: long(129),
                ..Default::default()
            }),
            "volume_id",
        ),
        invalid(
            "secrets over 4 KiB",
            Call::DeleteVolume(csi::DeleteVolumeRequest {
                volume_id: "vol-1".into(),
                secrets: big_map(),
            }),
            "secrets",
        ),
        // ValidateVolumeCapabilities
        invalid(
            "missing volume_id",
            va(|r| r.volume_id.clear()),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            va(|r| r.volume_id = long(129)),
            "volume_id",
        ),
        invalid(
            "missing volume_capabilities",
            va(|r| r.volume_capabilities.clear()),
            "volume_capabilities",
        ),
        invalid(
            "capability without access_mode",
            va(|r| r.volume_capabilities = vec![no_access_mode()]),
            "access_mode",
        ),
        invalid(
            "volume_context over 4 KiB",
            va(|r| r.volume_context = big_map()),
            "volume_context",
        ),
        invalid(
            "parameters over 4 KiB",
            va(|r| r.parameters = big_map()),
            "parameters",
        ),
        invalid(
            "secrets over 4 KiB",
            va(|r| r.secrets = big_map()),
            "secrets",
        ),
        invalid(
            "mutable_parameters over 4 KiB",
            va(|r| r.mutable_parameters = big_map()),
            "mutable_parameters",
        ),
        Row {
            case: "mutable_parameters without MODIFY_VOLUME: not confirmed",
            call: va(|r| r.mutable_parameters = HashMap::from([("iops".into(), "10".into())])),
            expect: Expect::Unconfirmed("MODIFY_VOLUME"),
            calls: vec![],
        },
        Row {
            case: "block and mount in one request: not confirmed",
            call: va(|r| {
                r.volume_capabilities = vec![
                    capability(VolumeMode::Filesystem),
                    capability(VolumeMode::Block),
                ]
            }),
            expect: Expect::Unconfirmed("mixes"),
            calls: vec![],
        },
        // Controller RPCs without input, or not served
        ok("no input", Call::ControllerGetCapabilities),
        fails(
            "not served",
            Call::ControllerModifyVolume(modify("vol-1")),
            Code::Unimplemented,
            "MODIFY_VOLUME",
        ),
        fails("not served", Call::GetCapacity, Code::Unimplemented, ""),
        fails("not served", Call::ListVolumes, Code::Unimplemented, ""),
        // NodeStageVolume
        invalid(
            "missing volume_id",
            st(|r| r.volume_id.clear()),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            st(|r| r.volume_id = long(129)),
            "volume_id",
        ),
        invalid(
            "missing staging_target_path",
            st(|r| r.staging_target_path.clear()),
            "staging_target_path",
        ),
        invalid(
            "relative staging_target_path",
            st(|r| r.staging_target_path = "staging/v".into()),
            "absolute",
        ),
        invalid(
            "staging_target_path over 4096 bytes",
            Call::NodeStageVolume(stage("v", &long_path, fs)),
            "staging_target_path",
        ),
        invalid(
            "staging_target_path with a NUL byte",
            Call::NodeStageVolume(stage("v", &p.k("pods/a\0b"), fs)),
            "NUL",
        ),
        invalid(
            "staging_target_path climbing out with ..",
            Call::NodeStageVolume(stage("v", &p.traversal("staging"), fs)),
            "..",
        ),
        invalid(
            "staging_target_path through a symlink out",
            Call::NodeStageVolume(stage("v", &p.escape("staging"), fs)),
            "outside the kubelet directory",
        ),
        invalid(
            "staging_target_path elsewhere",
            Call::NodeStageVolume(stage("v", &p.elsewhere("staging"), fs)),
            "outside the kubelet directory",
        ),
        invalid(
            "staging_target_path is the kubelet directory",
            Call::NodeStageVolume(stage("v", &p.k(""), fs)),
            "outside the kubelet directory",
        ),
        invalid(
            "staging_target_path in the driver's state directory",
            Call::NodeStageVolume(stage(
                "v",
                &p.k("plugins/test.pav.example.com/staged/x"),
                fs,
            )),
            "state directory",
        ),
        // DriverBuilder::state_dir's docs: a provisioner's own data in the
        // state directory is as safe from mounts as pav-csi's records.
        invalid(
            "staging_target_path in the provisioner's data in the state directory",
            Call::NodeStageVolume(stage(
                "v",
                &p.k("plugins/test.pav.example.com/volumes/v"),
                fs,
            )),
            "state directory",
        ),
        invalid(
            "missing volume_capability",
            st(|r| r.volume_capability = None),
            "volume_capability",
        ),
        invalid(
            "capability without access_type",
            st(|r| r.volume_capability = Some(no_access_type())),
            "access_type",
        ),
        invalid(
            "access_mode UNKNOWN",
            st(|r| r.volume_capability = Some(unknown_access_mode())),
            "access_mode",
        ),
        invalid(
            "fs_type of 129 bytes",
            st(|r| r.volume_capability = Some(cap_mount(|m| m.fs_type = long(129)))),
            "fs_type",
        ),
        invalid(
            "publish_context over 4 KiB",
            st(|r| r.publish_context = big_map()),
            "publish_context",
        ),
        invalid(
            "volume_context over 4 KiB",
            st(|r| r.volume_context = big_map()),
            "volume_context",
        ),
        invalid(
            "secrets over 4 KiB",
            st(|r| r.secrets = big_map()),
            "secrets",
        ),
        // NodeUnstageVolume
        invalid(
            "missing volume_id",
            Call::NodeUnstageVolume(unstage("", &staging)),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            Call::NodeUnstageVolume(unstage(&long(129), &staging)),
            "volume_id",
        ),
        invalid(
            "missing staging_target_path",
            Call::NodeUnstageVolume(unstage("v", "")),
            "staging_target_path",
        ),
        invalid(
            "relative staging_target_path",
            Call::NodeUnstageVolume(unstage("v", "staging/v")),
            "absolute",
        ),
        invalid(
            "staging_target_path climbing out with ..",
            Call::NodeUnstageVolume(unstage("v", &p.traversal("staging"))),
            "..",
        ),
        invalid(
            "staging_target_path through a symlink out",
            Call::NodeUnstageVolume(unstage("v", &p.escape("staging"))),
            "outside the kubelet directory",
        ),
        invalid(
            "staging_target_path elsewhere",
            Call::NodeUnstageVolume(unstage("v", &p.elsewhere("staging"))),
            "outside the kubelet directory",
        ),
        // NodePublishVolume
        invalid(
            "missing volume_id",
            pb(&|r| r.volume_id.clear()),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            pb(&|r| r.volume_id = long(129)),
            "volume_id",
        ),
        invalid(
            "missing target_path",
            pb(&|r| r.target_path.clear()),
            "target_path",
        ),
        invalid(
            "relative target_path",
            pb(&|r| r.target_path = "pods/uid/mount".into()),
            "absolute",
        ),
        invalid(
            "target_path over 4096 bytes",
            pb(&|r| r.target_path = long_path.clone()),
            "target_path",
        ),
        invalid(
            "target_path climbing out with ..",
            pb(&|r| r.target_path = p.traversal("target")),
            "..",
        ),
        invalid(
            "target_path through a symlink out",
            pb(&|r| r.target_path = p.escape("target")),
            "outside the kubelet directory",
        ),
        invalid(
            "target_path is a dangling symlink",
            pb(&|r| r.target_path = p.k("pods/dangling")),
            "does not resolve",
        ),
        invalid(
            "target_path elsewhere",
            pb(&|r| r.target_path = p.elsewhere("target")),
            "outside the kubelet directory",
        ),
        invalid(
            "target_path in the driver's state directory",
            pb(&|r| r.target_path = p.k("plugins/test.pav.example.com/staged/t")),
            "state directory",
        ),
        invalid(
            "target_path in the provisioner's data in the state directory",
            pb(&|r| r.target_path = p.k("plugins/test.pav.example.com/volumes/t")),
            "state directory",
        ),
        invalid(
            "missing volume_capability",
            pb(&|r| r.volume_capability = None),
            "volume_capability",
        ),
        invalid(
            "capability without access_type",
            pb(&|r| r.volume_capability = Some(no_access_type())),
            "access_type",
        ),
        invalid(
            "publish_context over 4 KiB",
            pb(&|r| r.publish_context = big_map()),
            "publish_context",
        ),
        invalid(
            "volume_context over 4 KiB",
            pb(&|r| r.volume_context = big_map()),
            "volume_context",
        ),
        invalid(
            "secrets over 4 KiB",
            pb(&|r| r.secrets = big_map()),
            "secrets",
        ),
        fails(
            "missing staging_target_path (STAGE_UNSTAGE_VOLUME advertised)",
            pb(&|r| r.staging_target_path.clear()),
            Code::FailedPrecondition,
            "staging_target_path",
        ),
        invalid(
            "staging_target_path climbing out with ..",
            pb(&|r| r.staging_target_path = p.traversal("staging")),
            "..",
        ),
        invalid(
            "staging_target_path through a symlink out",
            pb(&|r| r.staging_target_path = p.escape("staging")),
            "outside the kubelet directory",
        ),
        invalid(
            "staging_target_path /etc (bind /etc into the pod)",
            pb(&|r| r.staging_target_path = "/etc".into()),
            "outside the kubelet directory",
        ),
        invalid(
            "staging_target_path / (bind the host root)",
            pb(&|r| r.staging_target_path = "/".into()),
            "outside the kubelet directory",
        ),
        invalid(
            "target_path inside staging_target_path",
            pb(&|r| r.target_path = format!("{staging}/t")),
            "overlap",
        ),
        fails(
            "never staged",
            pb(&|_| {}),
            Code::FailedPrecondition,
            "not staged",
        ),
        fails(
            "publish without stage, read-only",
            pb(&|r| {
                r.readonly = true;
                r.volume_capability = Some(cap_access(fs, Mode::SingleNodeReaderOnly));
            }),
            Code::FailedPrecondition,
            "not staged",
        ),
        // NodeUnpublishVolume
        invalid(
            "missing volume_id",
            Call::NodeUnpublishVolume(unpublish("", &target)),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            Call::NodeUnpublishVolume(unpublish(&long(129), &target)),
            "volume_id",
        ),
        invalid(
            "missing target_path",
            Call::NodeUnpublishVolume(unpublish("v", "")),
            "target_path",
        ),
        invalid(
            "relative target_path",
            Call::NodeUnpublishVolume(unpublish("v", "pods/uid/mount")),
            "absolute",
        ),
        invalid(
            "target_path climbing out with ..",
            Call::NodeUnpublishVolume(unpublish("v", &p.traversal("target"))),
            "..",
        ),
        invalid(
            "target_path through a symlink out",
            Call::NodeUnpublishVolume(unpublish("v", &p.escape("target"))),
            "outside the kubelet directory",
        ),
        invalid(
            "target_path elsewhere",
            Call::NodeUnpublishVolume(unpublish("v", &p.elsewhere("target"))),
            "outside the kubelet directory",
        ),
        // NodeGetVolumeStats
        invalid(
            "missing volume_id",
            Call::NodeGetVolumeStats(stats("", &target)),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            Call::NodeGetVolumeStats(stats(&long(129), &target)),
            "volume_id",
        ),
        invalid(
            "missing volume_path",
            Call::NodeGetVolumeStats(stats("v", "")),
            "volume_path",
        ),
        invalid(
            "staging_target_path over 4096 bytes",
            Call::NodeGetVolumeStats(csi::NodeGetVolumeStatsRequest {
                staging_target_path: long_path.clone(),
                ..stats("v", &target)
            }),
            "staging_target_path",
        ),
        fails(
            "relative volume_path",
            Call::NodeGetVolumeStats(stats("v", "some/path")),
            Code::NotFound,
            "some/path",
        ),
        fails(
            "volume_path outside the kubelet directory (/)",
            Call::NodeGetVolumeStats(stats("v", "/")),
            Code::NotFound,
            "no volume",
        ),
        fails(
            "volume_path through a symlink out",
            Call::NodeGetVolumeStats(stats("v", &p.escape(""))),
            Code::NotFound,
            "no volume",
        ),
        fails(
            "nothing published at volume_path",
            Call::NodeGetVolumeStats(stats("v", &target)),
            Code::NotFound,
            "no volume",
        ),
        // Node RPCs without input, or not served
        ok("no input", Call::NodeGetInfo),
        ok("no input", Call::NodeGetCapabilities),
        fails(
            "not served (no Stats, no Health), even without a volume_id",
            Call::NodeGetVolumeHealth(volume_health("", &target)),
            Code::Unimplemented,
            "GET_VOLUME_HEALTH",
        ),
        fails(
            "not served",
            Call::NodeExpandVolume,
            Code::Unimplemented,
            "",
        ),
    ]
}

#[tokio::test]
async fn full_driver_refuses_bad_input_with_the_spec_code() {
    let mut h = Harness::start().await;
    let p = Paths::new(&h);
    let rows = full_driver_rows(&p);
    run(&mut h, "full driver", rows).await;
    assert_eq!(h.provisioner.calls(), Vec::<&str>::new());
    p.assert_outside_untouched();
    h.stop().await;
}

/// A driver whose provisioner stages per client pod, serves Filesystem
/// only, three access modes, no topology.
async fn on_publish_harness() -> Harness {
    Harness::start_with(Options {
        stage_on_publish: true,
        topology: false,
        block: false,
        access_modes: Some(vec![
            AccessMode::SingleNodeWriter,
            AccessMode::SingleNodeReaderOnly,
            AccessMode::MultiNodeReaderOnly,
        ]),
        ..Options::default()
    })
    .await
}

fn on_publish_rows(p: &Paths) -> Vec<Row> {
    use csi::volume_capability::access_mode::Mode;
    let fs = VolumeMode::Filesystem;
    let target = p.k("pods/uid/volumes/kubernetes.io~csi/v/mount");
    let pb = |edit: &dyn Fn(&mut csi::NodePublishVolumeRequest)| {
        let mut r = publish("v", "", &target, fs);
        edit(&mut r);
        Call::NodePublishVolume(r)
    };
    vec![
        fails(
            "STAGE_UNSTAGE_VOLUME not advertised",
            Call::NodeStageVolume(stage("v", &p.k("staging/v"), fs)),
            Code::Unimplemented,
            "STAGE_UNSTAGE_VOLUME",
        ),
        fails(
            "STAGE_UNSTAGE_VOLUME not advertised",
            Call::NodeUnstageVolume(unstage("v", &p.k("staging/v"))),
            Code::Unimplemented,
            "STAGE_UNSTAGE_VOLUME",
        ),
        invalid(
            "missing volume_id",
            pb(&|r| r.volume_id.clear()),
            "volume_id",
        ),
        invalid(
            "missing target_path",
            pb(&|r| r.target_path.clear()),
            "target_path",
        ),
        invalid(
            "missing volume_capability",
            pb(&|r| r.volume_capability = None),
            "volume_capability",
        ),
        invalid(
            "target_path climbing out with ..",
            pb(&|r| r.target_path = p.traversal("target")),
            "..",
        ),
        invalid(
            "target_path through a symlink out",
            pb(&|r| r.target_path = p.escape("target")),
            "outside the kubelet directory",
        ),
        invalid(
            "target_path elsewhere",
            pb(&|r| r.target_path = p.elsewhere("target")),
            "outside the kubelet directory",
        ),
        invalid(
            "Block on a Filesystem-only driver",
            pb(&|r| r.volume_capability = Some(capability(VolumeMode::Block))),
            "volume mode Block",
        ),
        invalid(
            "access mode the driver does not serve",
            pb(&|r| r.volume_capability = Some(cap_access(fs, Mode::MultiNodeMultiWriter))),
            "MULTI_NODE_MULTI_WRITER",
        ),
        invalid(
            "volume_context over 4 KiB",
            pb(&|r| r.volume_context = big_map()),
            "volume_context",
        ),
        invalid(
            "target_path elsewhere",
            Call::NodeUnpublishVolume(unpublish("v", &p.elsewhere("target"))),
            "outside the kubelet directory",
        ),
        invalid(
            "accessibility_requirements without VOLUME_ACCESSIBILITY_CONSTRAINTS",
            Call::CreateVolume(csi::CreateVolumeRequest {
                accessibility_requirements: Some(topology("zone", "a")),
                ..create("pvc-1")
            }),
            "accessibility_requirements",
        ),
        invalid(
            "Block on a Filesystem-only driver",
            Call::CreateVolume(csi::CreateVolumeRequest {
                volume_capabilities: vec![capability(VolumeMode::Block)],
                ..create("pvc-1")
            }),
            "volume mode Block",
        ),
        invalid(
            "access mode the driver does not serve",
            Call::CreateVolume(csi::CreateVolumeRequest {
                volume_capabilities: vec![cap_access(fs, Mode::MultiNodeMultiWriter)],
                ..create("pvc-1")
            }),
            "access mode",
        ),
        Row {
            case: "access mode the driver does not serve: not confirmed",
            call: Call::ValidateVolumeCapabilities(csi::ValidateVolumeCapabilitiesRequest {
                volume_capabilities: vec![cap_access(fs, Mode::MultiNodeMultiWriter)],
                ..validate("vol-1")
            }),
            expect: Expect::Unconfirmed("access mode"),
            calls: vec![],
        },
        ok("no input", Call::NodeGetCapabilities),
    ]
}

#[tokio::test]
async fn staging_on_publish_driver_refuses_bad_input_with_the_spec_code() {
    let mut h = on_publish_harness().await;
    let p = Paths::new(&h);
    let rows = on_publish_rows(&p);
    run(&mut h, "stage-on-publish driver", rows).await;
    assert_eq!(h.provisioner.calls(), Vec::<&str>::new());
    p.assert_outside_untouched();
    h.stop().await;
}

/// A driver whose provisioner modifies volumes: ControllerModifyVolume's
/// input, and CreateVolume's mutable parameters within the map limit.
#[tokio::test]
async fn modifying_driver_refuses_bad_input_with_the_spec_code() {
    let mut h = Harness::start_with(Options {
        modify: true,
        ..Options::default()
    })
    .await;
    let md = |edit: fn(&mut csi::ControllerModifyVolumeRequest)| {
        let mut r = modify("vol-1");
        edit(&mut r);
        Call::ControllerModifyVolume(r)
    };
    let rows = vec![
        invalid(
            "missing volume_id",
            md(|r| r.volume_id.clear()),
            "volume_id",
        ),
        invalid(
            "volume_id of 129 bytes",
            md(|r| r.volume_id = long(129)),
            "volume_id",
        ),
        invalid(
            "mutable_parameters over 4 KiB",
            md(|r| r.mutable_parameters = big_map()),
            "mutable_parameters",
        ),
        invalid(
            "mutable_parameters over 4 KiB in 40 keys",
            md(|r| r.mutable_parameters = many_keys()),
            "mutable_parameters",
        ),
        invalid(
            "secrets over 4 KiB",
            md(|r| r.secrets = big_map()),
            "secrets",
        ),
        fails(
            "a volume that does not exist",
            md(|r| r.volume_id = "vol-never".into()),
            Code::NotFound,
            "vol-never",
        )
        .calling(&["exists"]),
        invalid(
            "CreateVolume: mutable_parameters over 4 KiB",
            Call::CreateVolume(csi::CreateVolumeRequest {
                mutable_parameters: big_map(),
                ..create("pvc-1")
            }),
            "mutable_parameters",
        ),
    ];
    run(&mut h, "modifying driver", rows).await;
    h.stop().await;
}

/// A driver whose provisioner has Health: NodeGetVolumeHealth refuses
/// what NodeGetVolumeStats refuses, with the same code, before asking the
/// provisioner. Only its publish path is optional (a volume the CO could
/// not publish): Health is asked about the volume alone.
#[tokio::test]
async fn health_reporting_driver_refuses_bad_input_as_stats_does() {
    let mut h = Harness::start_with(Options {
        health: true,
        ..Options::default()
    })
    .await;
    let p = Paths::new(&h);
    let target = p.k("pods/uid/volumes/kubernetes.io~csi/v/mount");
    let long_path = format!("/{}", "a/".repeat(2100));
    let mut rows = Vec::new();
    // (case, volume id, path, code, text): each a NodeGetVolumeStats row
    // and a NodeGetVolumeHealth row.
    let same = [
        (
            "missing volume_id",
            String::new(),
            target.clone(),
            Code::InvalidArgument,
            "volume_id",
        ),
        (
            "volume_id of 129 bytes",
            long(129),
            target.clone(),
            Code::InvalidArgument,
            "volume_id",
        ),
        (
            "path over 4096 bytes",
            "v".into(),
            long_path.clone(),
            Code::InvalidArgument,
            "path",
        ),
        (
            "relative path",
            "v".into(),
            "some/path".into(),
            Code::NotFound,
            "some/path",
        ),
        (
            "path outside the kubelet directory (/)",
            "v".into(),
            "/".into(),
            Code::NotFound,
            "no volume",
        ),
        (
            "path through a symlink out",
            "v".into(),
            p.escape(""),
            Code::NotFound,
            "no volume",
        ),
        (
            "path climbing out with ..",
            "v".into(),
            p.traversal("t"),
            Code::NotFound,
            "no volume",
        ),
        (
            "nothing published at the path",
            "v".into(),
            target.clone(),
            Code::NotFound,
            "no volume",
        ),
    ];
    for (case, id, path, code, text) in same {
        rows.push(fails(
            case,
            Call::NodeGetVolumeStats(stats(&id, &path)),
            code,
            text,
        ));
        let health = Call::NodeGetVolumeHealth(volume_health(&id, &path));
        rows.push(fails(case, health, code, text));
    }
    rows.extend([
        invalid(
            "staging_target_path over 4096 bytes",
            Call::NodeGetVolumeHealth(csi::NodeGetVolumeHealthRequest {
                staging_target_path: long_path.clone(),
                ..volume_health("v", &target)
            }),
            "staging_target_path",
        ),
        fails(
            "no volume_publish_path, a volume that does not exist",
            Call::NodeGetVolumeHealth(volume_health("vol-never", "")),
            Code::NotFound,
            "no volume vol-never",
        )
        .calling(&["condition"]),
    ]);
    run(&mut h, "health-reporting driver", rows).await;
    p.assert_outside_untouched();
    h.stop().await;
}

#[tokio::test]
async fn driver_without_create_answers_unimplemented() {
    let mut h = Harness::start_with(Options {
        controller_ops: false,
        ..Options::default()
    })
    .await;
    let rows = vec![
        fails(
            "no Create, even with a bad name",
            Call::CreateVolume(csi::CreateVolumeRequest {
                name: String::new(),
                ..create("x")
            }),
            Code::Unimplemented,
            "",
        ),
        fails(
            "no Create",
            Call::DeleteVolume(csi::DeleteVolumeRequest {
                volume_id: "vol-1".into(),
                ..Default::default()
            }),
            Code::Unimplemented,
            "CREATE_DELETE_VOLUME",
        ),
    ];
    run(&mut h, "driver without Create", rows).await;
    h.stop().await;
}

/// `mount --bind source target`, for fixtures the driver did not make.
fn bind(source: &Path, target: &Path) {
    std::fs::create_dir_all(target).unwrap();
    let status = std::process::Command::new("mount")
        .arg("--bind")
        .arg(source)
        .arg(target)
        .status()
        .unwrap();
    assert!(status.success());
}

fn umount(target: &Path) {
    let _ = std::process::Command::new("umount").arg(target).status();
}

fn is_mounted(path: &Path) -> bool {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn staged_and_published_volumes_refuse_inconsistent_requests() {
    use csi::volume_capability::access_mode::Mode;
    let (fs, block) = (VolumeMode::Filesystem, VolumeMode::Block);
    let mut h = Harness::start().await;
    let p = Paths::new(&h);
    let p_fs = p.k("plugins/kubernetes.io/csi/fs-1/globalmount");
    let p_other = p.k("plugins/kubernetes.io/csi/fs-1-elsewhere/globalmount");
    let p_blk = p.k("plugins/kubernetes.io/csi/volumeDevices/staging/blk-1");
    let p_foreign = p.k("plugins/kubernetes.io/csi/foreign/globalmount");
    let p_fs3 = p.k("plugins/kubernetes.io/csi/fs-3/globalmount");
    let p_failed = p.k("plugins/kubernetes.io/csi/missing/globalmount");
    let kubelet_config = p.k("config.yaml");
    std::fs::write(&kubelet_config, "kind: KubeletConfiguration\n").unwrap();
    for dir in [&p_fs, &p_other, &p_blk, &p_fs3, &p_failed] {
        std::fs::create_dir_all(dir).unwrap(); // kubelet creates them
    }
    bind(p.outside.path(), Path::new(&p_foreign));
    let t_rw = p.k("pods/uid-1/volumes/kubernetes.io~csi/fs-1/mount");
    let t_ro = p.k("pods/uid-2/volumes/kubernetes.io~csi/fs-1/mount");
    let t_blk = p.k("plugins/kubernetes.io/csi/volumeDevices/publish/blk-1/uid-3");

    // The fixture: fs-1 staged and published twice, blk-1 staged.
    let fixture = vec![
        ok(
            "stage fs-1",
            Call::NodeStageVolume(stage("fs-1", &p_fs, fs)),
        )
        .calling(&["stage"]),
        ok(
            "stage blk-1",
            Call::NodeStageVolume(stage("blk-1", &p_blk, block)),
        )
        .calling(&["stage"]),
        ok(
            "stage fs-3",
            Call::NodeStageVolume(stage("fs-3", &p_fs3, fs)),
        )
        .calling(&["stage"]),
        ok(
            "publish fs-1 read-write",
            Call::NodePublishVolume(publish("fs-1", &p_fs, &t_rw, fs)),
        ),
        ok(
            "publish fs-1 read-only",
            Call::NodePublishVolume(csi::NodePublishVolumeRequest {
                readonly: true,
                ..publish("fs-1", &p_fs, &t_ro, fs)
            }),
        ),
    ];
    run(&mut h, "fixture", fixture).await;
    let cap = |mode, access| Some(cap_access(mode, access));
    let rows = vec![
        // NodeStageVolume against what is staged
        ok(
            "repeat with the same capability",
            Call::NodeStageVolume(stage("fs-1", &p_fs, fs)),
        )
        .calling(&["stage"]),
        fails(
            "same volume and path, Block instead of mount",
            Call::NodeStageVolume(stage("fs-1", &p_fs, block)),
            Code::AlreadyExists,
            "incompatible",
        ),
        fails(
            "same volume and path, mount instead of Block",
            Call::NodeStageVolume(stage("blk-1", &p_blk, fs)),
            Code::AlreadyExists,
            "incompatible",
        ),
        fails(
            "same volume and path, another access mode",
            Call::NodeStageVolume(csi::NodeStageVolumeRequest {
                volume_capability: cap(fs, Mode::SingleNodeReaderOnly),
                ..stage("fs-1", &p_fs, fs)
            }),
            Code::AlreadyExists,
            "incompatible",
        ),
        fails(
            "same volume and path, another fs_type",
            Call::NodeStageVolume(csi::NodeStageVolumeRequest {
                volume_capability: Some(cap_mount(|m| m.fs_type = "xfs".into())),
                ..stage("fs-1", &p_fs, fs)
            }),
            Code::AlreadyExists,
            "incompatible",
        ),
        fails(
            "same volume at a second staging path",
            Call::NodeStageVolume(stage("fs-1", &p_other, fs)),
            Code::FailedPrecondition,
            "unstage it there first",
        ),
        fails(
            "another volume at a path holding a staged one",
            Call::NodeStageVolume(stage("fs-2", &p_fs, fs)),
            Code::FailedPrecondition,
            "holds volume fs-1",
        ),
        fails(
            "a path with a mount this driver did not make",
            Call::NodeStageVolume(stage("fs-2", &p_foreign, fs)),
            Code::FailedPrecondition,
            "did not stage",
        ),
        // NodePublishVolume against what is staged and published
        ok(
            "repeat with the same arguments",
            Call::NodePublishVolume(publish("fs-1", &p_fs, &t_rw, fs)),
        ),
        fails(
            "staging path other than the one used at stage",
            Call::NodePublishVolume(publish("fs-1", &p_other, &t_rw, fs)),
            Code::FailedPrecondition,
            "is staged at",
        ),
        fails(
            "staging path of another staged volume",
            Call::NodePublishVolume(publish("fs-1", &p_blk, &p.k("pods/uid-9/t"), fs)),
            Code::FailedPrecondition,
            "is staged at",
        ),
        fails(
            "a foreign mount as staging path",
            Call::NodePublishVolume(publish("fs-2", &p_foreign, &p.k("pods/uid-9/t"), fs)),
            Code::FailedPrecondition,
            "not staged",
        ),
        fails(
            "staged as mount, published as Block",
            Call::NodePublishVolume(publish("fs-1", &p_fs, &t_blk, block)),
            Code::FailedPrecondition,
            "cannot be published as Block",
        ),
        fails(
            "staged as Block, published as mount",
            Call::NodePublishVolume(publish("blk-1", &p_blk, &p.k("pods/uid-9/t"), fs)),
            Code::FailedPrecondition,
            "cannot be published as Filesystem",
        ),
        fails(
            "same target, now read-only",
            Call::NodePublishVolume(csi::NodePublishVolumeRequest {
                readonly: true,
                ..publish("fs-1", &p_fs, &t_rw, fs)
            }),
            Code::AlreadyExists,
            "read-write",
        ),
        fails(
            "same target, now read-write",
            Call::NodePublishVolume(publish("fs-1", &p_fs, &t_ro, fs)),
            Code::AlreadyExists,
            "read-only",
        ),
        // NodeUnstageVolume where the volume is not staged: nothing touched
        ok(
            "staging path other than the one used at stage",
            Call::NodeUnstageVolume(unstage("fs-1", &p_other)),
        ),
        ok(
            "a volume never staged, at a staged volume's path",
            Call::NodeUnstageVolume(unstage("fs-2", &p_fs)),
        ),
        ok(
            "a volume never staged, at a foreign mount",
            Call::NodeUnstageVolume(unstage("fs-2", &p_foreign)),
        ),
        ok(
            "published volume",
            Call::NodeGetVolumeStats(stats("fs-1", &t_rw)),
        ),
        // Paths that would hide other mounts or reach into another volume
        fails(
            "another volume at a target where one is published",
            Call::NodePublishVolume(publish("fs-3", &p_fs3, &t_rw, fs)),
            Code::FailedPrecondition,
            "holds another volume",
        ),
        fails(
            "a target inside another volume's target",
            Call::NodePublishVolume(publish("fs-3", &p_fs3, &format!("{t_rw}/inner"), fs)),
            Code::FailedPrecondition,
            "where volume \"fs-1\" is mounted",
        ),
        fails(
            "a target inside another volume's staging path",
            Call::NodePublishVolume(publish("fs-3", &p_fs3, &format!("{p_fs}/inner"), fs)),
            Code::FailedPrecondition,
            "inside the staging path of volume \"fs-1\"",
        ),
        fails(
            "a target on the kubelet's pods directory",
            Call::NodePublishVolume(publish("fs-3", &p_fs3, &p.k("pods"), fs)),
            Code::FailedPrecondition,
            "would hide it",
        ),
        fails(
            "a staging path inside another volume's target",
            Call::NodeStageVolume(stage("fs-4", &format!("{t_rw}/inner"), fs)),
            Code::FailedPrecondition,
            "where volume \"fs-1\" is mounted",
        ),
        fails(
            "a staging path holding other volumes' staging paths",
            Call::NodeStageVolume(stage("fs-4", &p.k("plugins/kubernetes.io/csi"), fs)),
            Code::FailedPrecondition,
            "would hide it",
        ),
        fails(
            "unpublish of a kubelet file that is no target",
            Call::NodeUnpublishVolume(unpublish("fs-1", &kubelet_config)),
            Code::FailedPrecondition,
            "not removed",
        ),
        // A failed stage is undone and forgotten: the path stays free for others
        fails(
            "stage that the provisioner fails",
            Call::NodeStageVolume(stage("missing", &p_failed, fs)),
            Code::NotFound,
            "no such volume",
        )
        .calling(&["stage", "unstage"]),
        ok(
            "another volume at the path of the failed stage",
            Call::NodeStageVolume(stage("fs-5", &p_failed, fs)),
        )
        .calling(&["stage"]),
        ok(
            "unstage fs-5",
            Call::NodeUnstageVolume(unstage("fs-5", &p_failed)),
        )
        .calling(&["unstage"]),
    ];
    run(&mut h, "staged and published", rows).await;
    assert!(is_mounted(Path::new(&t_rw)), "fs-1 stays published");
    assert!(
        Path::new(&kubelet_config).exists(),
        "a kubelet file deleted"
    );
    assert!(
        !Path::new(&format!("{t_rw}/inner")).exists(),
        "nothing created inside fs-1"
    );
    assert!(is_mounted(Path::new(&p_fs)), "fs-1 stays staged");
    assert!(is_mounted(Path::new(&p_foreign)), "foreign mount untouched");
    assert!(!is_mounted(Path::new(&p_other)));

    let cleanup = vec![
        ok(
            "unpublish",
            Call::NodeUnpublishVolume(unpublish("fs-1", &t_rw)),
        ),
        ok(
            "unpublish",
            Call::NodeUnpublishVolume(unpublish("fs-1", &t_ro)),
        ),
        ok(
            "unstage fs-1",
            Call::NodeUnstageVolume(unstage("fs-1", &p_fs)),
        )
        .calling(&["unstage"]),
        ok(
            "unstage blk-1",
            Call::NodeUnstageVolume(unstage("blk-1", &p_blk)),
        )
        .calling(&["unstage"]),
        ok(
            "unstage fs-3",
            Call::NodeUnstageVolume(unstage("fs-3", &p_fs3)),
        )
        .calling(&["unstage"]),
        fails(
            "publish after unstage",
            Call::NodePublishVolume(publish("fs-1", &p_fs, &t_rw, fs)),
            Code::FailedPrecondition,
            "not staged",
        ),
    ];
    run(&mut h, "cleanup", cleanup).await;
    umount(Path::new(&p_foreign));
    assert!(!is_mounted(Path::new(&p_fs)));
    p.assert_outside_untouched();
    h.stop().await;
}

/// Kubelet publishes one volume per target; a caller racing ten volumes
/// onto one target gets exactly one mount, and the others an error.
#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn concurrent_publishes_to_one_target_mount_one_volume() {
    let fs = VolumeMode::Filesystem;
    let mut h = Harness::start().await;
    let p = Paths::new(&h);
    let ids: Vec<String> = (0..10).map(|i| format!("race-{i}")).collect();
    let staging = |id: &str| p.k(&format!("plugins/kubernetes.io/csi/{id}/globalmount"));
    for id in &ids {
        std::fs::create_dir_all(staging(id)).unwrap();
        h.node
            .node_stage_volume(stage(id, &staging(id), fs))
            .await
            .unwrap();
    }
    let target = p.k("pods/uid-race/volumes/kubernetes.io~csi/pv/mount");
    let publishes = ids.iter().map(|id| {
        let mut node = h.node.clone();
        let request = publish(id, &staging(id), &target, fs);
        async move { node.node_publish_volume(request).await }
    });
    let answers = futures::future::join_all(publishes).await;
    let published: Vec<&String> = ids
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| answer.is_ok())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(published.len(), 1, "{answers:?}");
    for answer in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert!(
            matches!(answer.code(), Code::Aborted | Code::FailedPrecondition),
            "{answer:?}"
        );
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(target.as_str()))
        .count();
    assert_eq!(mounts, 1, "mounts stacked on the target");

    h.node
        .node_unpublish_volume(unpublish(published[0], &target))
        .await
        .unwrap();
    for id in &ids {
        h.node
            .node_unstage_volume(unstage(id, &staging(id)))
            .await
            .unwrap();
    }
    p.assert_outside_untouched();
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn crafted_contexts_never_choose_what_is_mounted() {
    let fs = VolumeMode::Filesystem;
    let crafted: HashMap<String, String> = ["source", "path", "device", "staging_target_path"]
        .into_iter()
        .map(|k| (k.to_owned(), "/etc".to_owned()))
        .collect();

    // Per-node staging: what is bound is what the provisioner staged.
    let mut h = Harness::start().await;
    let p = Paths::new(&h);
    let staging = p.k("plugins/kubernetes.io/csi/v/globalmount");
    let target = p.k("pods/uid/volumes/kubernetes.io~csi/v/mount");
    std::fs::create_dir_all(&staging).unwrap();
    let rows = vec![
        ok(
            "volume_context and publish_context naming /etc",
            Call::NodeStageVolume(csi::NodeStageVolumeRequest {
                volume_context: crafted.clone(),
                publish_context: crafted.clone(),
                ..stage("v", &staging, fs)
            }),
        )
        .calling(&["stage"]),
        ok(
            "volume_context and publish_context naming /etc",
            Call::NodePublishVolume(csi::NodePublishVolumeRequest {
                volume_context: crafted.clone(),
                publish_context: crafted.clone(),
                ..publish("v", &staging, &target, fs)
            }),
        ),
    ];
    run(&mut h, "crafted contexts, per-node staging", rows).await;
    let backing = h.path("backing/v");
    std::fs::write(backing.join("marker"), "backing").unwrap();
    for dir in [&staging, &target] {
        let dir = Path::new(dir);
        assert_eq!(
            std::fs::read_to_string(dir.join("marker")).unwrap(),
            "backing"
        );
        assert!(
            !dir.join("passwd").exists(),
            "/etc bound at {}",
            dir.display()
        );
    }
    h.node
        .node_unpublish_volume(unpublish("v", &target))
        .await
        .unwrap();
    h.node
        .node_unstage_volume(unstage("v", &staging))
        .await
        .unwrap();
    h.stop().await;

    // Staging on publish: the same.
    let mut h = on_publish_harness().await;
    let p = Paths::new(&h);
    let target = p.k("pods/uid/volumes/kubernetes.io~csi/v/mount");
    let mut context = crafted.clone();
    context.insert("csi.storage.k8s.io/pod.name".into(), "web".into());
    let rows = vec![
        ok(
            "volume_context and publish_context naming /etc",
            Call::NodePublishVolume(csi::NodePublishVolumeRequest {
                volume_context: context.clone(),
                publish_context: crafted.clone(),
                staging_target_path: "/etc".into(),
                ..publish("v", "", &target, fs)
            }),
        )
        .calling(&["stage"]),
        ok(
            "repeat",
            Call::NodePublishVolume(publish("v", "", &target, fs)),
        ),
        fails(
            "same target, now read-only",
            Call::NodePublishVolume(csi::NodePublishVolumeRequest {
                readonly: true,
                ..publish("v", "", &target, fs)
            }),
            Code::AlreadyExists,
            "read-write",
        ),
    ];
    run(&mut h, "crafted contexts, staging on publish", rows).await;
    std::fs::write(h.path("backing/v/marker"), "backing").unwrap();
    let target = Path::new(&target);
    assert_eq!(
        std::fs::read_to_string(target.join("marker")).unwrap(),
        "backing"
    );
    assert!(!target.join("passwd").exists(), "/etc bound at the target");
    h.node
        .node_unpublish_volume(unpublish("v", &target.to_string_lossy()))
        .await
        .unwrap();
    assert!(!target.exists());
    h.stop().await;
}
