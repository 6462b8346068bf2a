//! Scenarios of GetCapacity, ControllerModifyVolume,
//! ControllerPublishVolume and the GroupController calls against the fake
//! API server ([`fixtures`](super::super::fixtures)), through pav-csi's
//! gRPC services as external-provisioner, external-resizer,
//! external-attacher and csi-snapshotter call them: advertised only with
//! their sections, templates evaluated, refusals `INVALID_ARGUMENT` with
//! nothing changed, new parameters recorded, the attach pod's publish
//! context answered, a group's members named by its pod.

use std::time::Duration;

use crate::csi::fixtures::{ApiServer, Logged, list};
use http::Method;
use kube::Client;
use pav_csi::csi;
use serde_json::json;

const PROVISIONERS: &str = "/apis/pav.albertofaria.github.io/v1alpha1/pavprovisioners";
const PV: &str = "/api/v1/persistentvolumes/pv-1";
const MUTABLE: &str = "pav.albertofaria.github.io/mutable-parameters";

fn volume() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-1", "uid": "u-pv", "resourceVersion": "1",
                     "annotations": {MUTABLE: "{\"mode\":\"rw\",\"tier\":\"gold\"}"}},
        "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": "p", "volumeHandle": "h-1"}},
    })
}

/// The fake, answering for provisioner `p` with `spec`, one volume
/// (`h-1`, without a claim) and no pods; PATCHes of the volume echo it.
fn scenario(spec: serde_json::Value) -> (ApiServer, Client) {
    scenario_with(spec, vec![volume()])
}

/// [`scenario`] with the PersistentVolumes `volumes`.
fn scenario_with(spec: serde_json::Value, volumes: Vec<serde_json::Value>) -> (ApiServer, Client) {
    let (server, client) = ApiServer::start();
    let provisioner = json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1", "kind": "PavProvisioner",
        "metadata": {"name": "p", "uid": "u-p", "generation": 1, "resourceVersion": "1"},
        "spec": spec,
    });
    server.route(
        Method::GET,
        PROVISIONERS,
        list("PavProvisioner", vec![provisioner]),
    );
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", volumes),
    );
    server.route(Method::GET, "/api/v1/pods", list("Pod", vec![]));
    server.route(Method::PATCH, PV, (200, volume()));
    server.on(|r: &Logged| {
        (r.method == Method::POST && r.path.ends_with("/events"))
            .then(|| (201, r.body.clone().unwrap_or_default()))
    });
    (server, client)
}

/// Serves the CSI controller of `p` as `pav csi-controller` does (its
/// sections read from the spec at start) while `calls` runs.
async fn with_controller<T>(
    client: Client,
    calls: impl AsyncFnOnce(csi::controller_client::ControllerClient<tonic::transport::Channel>) -> T,
) -> T {
    serving(client, async |channel| {
        calls(csi::controller_client::ControllerClient::new(channel)).await
    })
    .await
}

/// [`with_controller`], calling the GroupController service.
async fn with_group_controller<T>(
    client: Client,
    calls: impl AsyncFnOnce(
        csi::group_controller_client::GroupControllerClient<tonic::transport::Channel>,
    ) -> T,
) -> T {
    serving(client, async |channel| {
        calls(csi::group_controller_client::GroupControllerClient::new(
            channel,
        ))
        .await
    })
    .await
}

/// Serves the CSI controller of `p` while `calls` runs with a channel to
/// it.
async fn serving<T>(client: Client, calls: impl AsyncFnOnce(tonic::transport::Channel) -> T) -> T {
    let driver = std::sync::Arc::new(crate::csi::fixtures::driver_context(client));
    let object = driver.served.object().await.unwrap();
    let provisioner = crate::csi::served_sections(
        crate::csi::controller_provisioner(driver),
        object.as_ref().map(|p| &p.spec),
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = pav_csi::Driver::builder("p")
        .provisioner(provisioner)
        .serve_controller(&socket)
        .run_until(async {
            let _ = stopped.await;
        });
    let server = tokio::spawn(serving);
    for _ in 0..100 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let channel = pav_csi::client::connect(&socket).await.unwrap();
    let answer = calls(channel).await;
    let _ = stop.send(());
    let _ = server.await;
    answer
}

fn base() -> serde_json::Value {
    json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": {"capacity": "1Mi"},
        "volumeStaging": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    })
}

fn with(sections: serde_json::Value) -> serde_json::Value {
    let mut spec = base();
    crate::csi::fixtures::merge(&mut spec, &sections);
    spec
}

type Rpc = csi::controller_service_capability::rpc::Type;

async fn advertised(spec: serde_json::Value) -> Vec<Rpc> {
    let (_server, client) = scenario(spec);
    with_controller(client, async |mut c| {
        c.controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
            .await
            .unwrap()
            .into_inner()
            .capabilities
            .into_iter()
            .filter_map(|c| match c.r#type {
                Some(csi::controller_service_capability::Type::Rpc(rpc)) => {
                    Rpc::try_from(rpc.r#type).ok()
                }
                _ => None,
            })
            .collect()
    })
    .await
}

#[tokio::test]
async fn capacity_and_modification_are_advertised_exactly_with_their_sections() {
    let plain = advertised(base()).await;
    assert!(!plain.contains(&Rpc::GetCapacity) && !plain.contains(&Rpc::ModifyVolume));
    let both = advertised(with(json!({
        "storageCapacity": {"availableCapacity": "1Gi"},
        "volumeModification": {},
    })))
    .await;
    assert!(both.contains(&Rpc::GetCapacity) && both.contains(&Rpc::ModifyVolume));
}

fn capacity_request(node: &str, room: &str) -> csi::GetCapacityRequest {
    csi::GetCapacityRequest {
        parameters: [("room".to_owned(), room.to_owned())].into(),
        accessible_topology: Some(csi::Topology {
            segments: [(crate::csi::TOPOLOGY_KEY.to_owned(), node.to_owned())].into(),
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn capacity_is_evaluated_per_segment_and_class() {
    let (_server, client) = scenario(with(json!({"storageCapacity": {
        "availableCapacity": "{{ params.room }}",
        "maximumVolumeSize": "{{ '1Gi' if nodeName == 'n1' else '2Gi' }}",
    }})));
    let answers = with_controller(client, async |mut c| {
        let mut answers = Vec::new();
        for (node, room) in [("n1", "3Gi"), ("n2", "0")] {
            let answer = c
                .get_capacity(capacity_request(node, room))
                .await
                .unwrap()
                .into_inner();
            answers.push((answer.available_capacity, answer.maximum_volume_size));
        }
        answers
    })
    .await;
    // The largest volume is never more than the room.
    assert_eq!(answers, [(3 << 30, Some(1 << 30)), (0, Some(0))]);
}

#[tokio::test]
async fn a_hostile_capacity_template_is_a_bounded_error() {
    let (_server, client) = scenario(with(json!({"storageCapacity": {
        "availableCapacity": "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
    }})));
    let status = with_controller(client, async |mut c| {
        c.get_capacity(capacity_request("n1", "1Gi"))
            .await
            .unwrap_err()
    })
    .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains("spec.storageCapacity.availableCapacity")
            && status.message().len() < 4096,
        "{}",
        status.message()
    );
}

fn modify_request(mode: &str) -> csi::ControllerModifyVolumeRequest {
    csi::ControllerModifyVolumeRequest {
        volume_id: "h-1".into(),
        mutable_parameters: [("mode".to_owned(), mode.to_owned())].into(),
        ..Default::default()
    }
}

fn modification() -> serde_json::Value {
    with(json!({"volumeModification": {
        "refusal": "{% if requestedMutableParams.mode not in ['rw', 'ro'] %}mode {{ requestedMutableParams.mode }} is not rw or ro{% endif %}",
    }}))
}

#[tokio::test]
async fn a_modification_records_the_parameters_on_the_volume() {
    let (server, client) = scenario(modification());
    with_controller(client, async |mut c| {
        c.controller_modify_volume(modify_request("ro"))
            .await
            .unwrap();
    })
    .await;
    let patches: Vec<Logged> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::PATCH && r.path == PV)
        .collect();
    assert_eq!(patches.len(), 1, "{patches:#?}");
    let body = patches[0].body.clone().unwrap_or_default();
    let recorded: serde_json::Value =
        serde_json::from_str(body["metadata"]["annotations"][MUTABLE].as_str().unwrap()).unwrap();
    // Keys the class does not name keep their values.
    assert_eq!(recorded, json!({"mode": "ro", "tier": "gold"}));
}

#[tokio::test]
async fn a_refused_modification_is_invalid_and_changes_nothing() {
    let (server, client) = scenario(modification());
    let status = with_controller(client, async |mut c| {
        c.controller_modify_volume(modify_request("rx"))
            .await
            .unwrap_err()
    })
    .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("mode rx is not rw or ro"),
        "{}",
        status.message()
    );
    assert!(
        !server.requests().iter().any(|r| r.method == Method::PATCH
            || (r.method == Method::POST && r.path.ends_with("/pods"))),
        "nothing changed"
    );
}

fn attachment() -> serde_json::Value {
    with(json!({
        "volumeAttach": {"podTemplate": {"spec": {
            "nodeName": "{{ node.metadata.name }}",
            "containers": [{"name": "attach", "image": "i", "args": ["{{ handle }}"]}],
        }}},
        "volumeDetach": {"podTemplate": {"spec": {
            "containers": [{"name": "detach", "image": "i", "args": ["{{ node.metadata.name }}"]}],
        }}},
    }))
}

fn publish_request(node: &str) -> csi::ControllerPublishVolumeRequest {
    csi::ControllerPublishVolumeRequest {
        volume_id: "h-1".into(),
        node_id: node.into(),
        volume_capability: Some(csi::VolumeCapability {
            access_type: Some(csi::volume_capability::AccessType::Mount(Default::default())),
            access_mode: Some(csi::volume_capability::AccessMode {
                mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
            }),
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn attach_is_advertised_exactly_with_its_section() {
    assert!(
        !advertised(base())
            .await
            .contains(&Rpc::PublishUnpublishVolume)
    );
    assert!(
        advertised(attachment())
            .await
            .contains(&Rpc::PublishUnpublishVolume)
    );
}

#[tokio::test]
async fn the_attach_pod_runs_and_its_publish_context_is_the_answer() {
    let (server, client) = scenario(attachment());
    server.route(
        Method::GET,
        "/api/v1/nodes/n1",
        (
            200,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
        ),
    );
    server.route(
        Method::GET,
        "/api/v1/nodes/gone",
        (
            404,
            json!({"kind": "Status", "code": 404, "reason": "NotFound"}),
        ),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|phase| {
        let files = crate::pods::results::Collected {
            publish_context: (phase == "attach").then(|| "device: /dev/loop7\nlun: 3".into()),
            ..Default::default()
        };
        json!({"status": {"phase": "Succeeded", "conditions": [files.condition()]}})
    }));
    let (attached, unknown, detached, nodeless) = with_controller(client, async |mut c| {
        let attached = c.controller_publish_volume(publish_request("n1")).await;
        let unknown = c.controller_publish_volume(publish_request("gone")).await;
        let unpublish = |node: &str| csi::ControllerUnpublishVolumeRequest {
            volume_id: "h-1".into(),
            node_id: node.into(),
            ..Default::default()
        };
        let detached = c.controller_unpublish_volume(unpublish("gone")).await;
        let nodeless = c.controller_unpublish_volume(unpublish("")).await;
        (attached, unknown, detached, nodeless)
    })
    .await;
    let context = attached.unwrap().into_inner().publish_context;
    assert_eq!(
        context,
        [
            ("device".to_owned(), "/dev/loop7".to_owned()),
            ("lun".to_owned(), "3".to_owned())
        ]
        .into()
    );
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    // A node that is gone is detached from all the same.
    detached.unwrap();
    let created = server.created_pods();
    let phases: Vec<&str> = created
        .iter()
        .map(|p| {
            p["metadata"]["labels"][crate::pods::LABEL_PHASE]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(phases, ["attach", "detach"]);
    assert_eq!(created[0]["spec"]["nodeName"], "n1");
    assert_eq!(created[0]["spec"]["containers"][0]["args"], json!(["h-1"]));
    assert_eq!(created[1]["spec"]["containers"][0]["args"], json!(["gone"]));
    // Without a node, pav cannot know where the volume is attached.
    assert_eq!(nodeless.unwrap_err().code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn a_failed_attach_pod_is_internal_with_its_message() {
    let (server, client) = scenario(attachment());
    server.route(
        Method::GET,
        "/api/v1/nodes/n1",
        (
            200,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
        ),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|_| {
        let files = crate::pods::results::Collected {
            error: Some("iSCSI login to 10.0.0.9 refused".into()),
            ..Default::default()
        };
        json!({"status": {"phase": "Failed", "conditions": [files.condition()]}})
    }));
    let status = with_controller(client, async |mut c| {
        c.controller_publish_volume(publish_request("n1"))
            .await
            .unwrap_err()
    })
    .await;
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert!(
        status.message().contains("attach pod pav/")
            && status
                .message()
                .ends_with("iSCSI login to 10.0.0.9 refused"),
        "{}",
        status.message()
    );
}

/// Volume `h-<n>` (PersistentVolume `pv-<n>`, without a claim) of
/// `n` MiB.
fn sized_volume(n: u64) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("pv-{n}"), "uid": format!("u-pv-{n}"), "resourceVersion": "1"},
        "spec": {"capacity": {"storage": format!("{n}Mi")}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": "p", "volumeHandle": format!("h-{n}")}},
    })
}

fn grouped() -> serde_json::Value {
    with(json!({
        "groupSnapshotCreation": {"podTemplate": {"spec": {"containers": [{
            "name": "group", "image": "i",
            "args": ["{{ groupSnapshotName }}:{% for s in sources %} {{ s.handle }}={{ s.capacity }}{% endfor %}"],
        }]}}},
        "groupSnapshotDeletion": {"podTemplate": {"spec": {"containers": [{
            "name": "ungroup", "image": "i",
            "args": ["{{ groupSnapshotHandle }}:{% for s in snapshots %} {{ s.handle }}<{{ s.sourceHandle }}{% endfor %}"],
        }]}}},
    }))
}

fn group_request(sources: &[&str]) -> csi::CreateVolumeGroupSnapshotRequest {
    csi::CreateVolumeGroupSnapshotRequest {
        name: "groupsnapshot-u".into(),
        source_volume_ids: sources.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Pods that succeed with `/pav/snapshots` `members` (and `/pav/handle`
/// `g-1`).
fn group_pods(server: &ApiServer, members: &'static str) {
    server.serve_pods(crate::csi::fixtures::pods_ending(move |_| {
        let files = crate::pods::results::Collected {
            handle: Some("g-1".into()),
            snapshots: Some(members.into()),
            ..Default::default()
        };
        json!({"status": {"phase": "Succeeded", "conditions": [files.condition()]}})
    }));
}

#[tokio::test]
async fn group_snapshots_are_served_exactly_with_their_section() {
    let (_server, client) = scenario_with(base(), vec![sized_volume(1)]);
    let status = with_group_controller(client, async |mut c| {
        c.create_volume_group_snapshot(group_request(&["h-1"]))
            .await
            .unwrap_err()
    })
    .await;
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    let (_server, client) = scenario_with(grouped(), vec![sized_volume(1)]);
    let capabilities = with_group_controller(client, async |mut c| {
        c.group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest {})
            .await
            .unwrap()
            .into_inner()
            .capabilities
    })
    .await;
    assert_eq!(capabilities.len(), 1, "{capabilities:?}");
}

#[tokio::test]
async fn the_group_pod_names_each_member_and_the_answer_lists_them() {
    let (server, client) = scenario_with(grouped(), vec![sized_volume(1), sized_volume(2)]);
    group_pods(&server, "h-2: s-2\nh-1: s-1");
    let group = with_group_controller(client, async |mut c| {
        c.create_volume_group_snapshot(group_request(&["h-1", "h-2"]))
            .await
            .unwrap()
            .into_inner()
            .group_snapshot
            .unwrap()
    })
    .await;
    assert_eq!(group.group_snapshot_id, "g-1", "the pod's /pav/handle");
    assert!(group.ready_to_use);
    let members: Vec<_> = (group.snapshots.iter())
        .map(|s| {
            (
                s.snapshot_id.as_str(),
                s.source_volume_id.as_str(),
                s.size_bytes,
                s.group_snapshot_id.as_str(),
            )
        })
        .collect();
    assert_eq!(
        members,
        [
            ("s-1", "h-1", 1 << 20, "g-1"),
            ("s-2", "h-2", 2 << 20, "g-1")
        ]
    );
    let created = server.created_pods();
    assert_eq!(created.len(), 1, "{created:#?}");
    assert_eq!(
        created[0]["metadata"]["labels"][crate::pods::LABEL_PHASE],
        "group-snapshot-creation"
    );
    assert_eq!(
        created[0]["spec"]["containers"][0]["args"],
        json!(["groupsnapshot-u: h-1=1048576 h-2=2097152"])
    );
}

#[tokio::test]
async fn a_group_pod_that_leaves_a_source_without_snapshot_is_internal_naming_it() {
    let (server, client) = scenario_with(grouped(), vec![sized_volume(1), sized_volume(2)]);
    group_pods(&server, "h-1: s-1");
    let status = with_group_controller(client, async |mut c| {
        c.create_volume_group_snapshot(group_request(&["h-1", "h-2"]))
            .await
            .unwrap_err()
    })
    .await;
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("group snapshot creation pod pav/")
            && status
                .message()
                .ends_with("/pav/snapshots: source volume \"h-2\" has no snapshot"),
        "{}",
        status.message()
    );
}

/// The VolumeGroupSnapshotContent csi-snapshotter writes for group `g-1`
/// of `h-1` and `h-2`.
fn group_content() -> serde_json::Value {
    json!({
        "apiVersion": "groupsnapshot.storage.k8s.io/v1", "kind": "VolumeGroupSnapshotContent",
        "metadata": {"name": "groupsnapcontent-u"},
        "spec": {"driver": "p", "source": {"volumeHandles": ["h-1", "h-2"]}},
        "status": {"volumeGroupSnapshotHandle": "g-1", "readyToUse": true, "volumeSnapshotInfoList": [
            {"volumeHandle": "h-1", "snapshotHandle": "s-1", "restoreSize": 1048576, "creationTime": 1},
            {"volumeHandle": "h-2", "snapshotHandle": "s-2", "restoreSize": 2097152, "creationTime": 2},
        ]},
    })
}

#[tokio::test]
async fn a_group_is_described_and_deleted_from_its_recorded_content() {
    let (server, client) = scenario_with(grouped(), vec![sized_volume(1), sized_volume(2)]);
    server.route(
        Method::GET,
        "/apis/groupsnapshot.storage.k8s.io/v1/volumegroupsnapshotcontents",
        list("VolumeGroupSnapshotContent", vec![group_content()]),
    );
    group_pods(&server, "");
    let get = |handle: &str, ids: &[&str]| csi::GetVolumeGroupSnapshotRequest {
        group_snapshot_id: handle.into(),
        snapshot_ids: ids.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let (known, unknown, others, deleted) = with_group_controller(client, async |mut c| {
        let known = c
            .get_volume_group_snapshot(get("g-1", &["s-2", "s-1"]))
            .await;
        let unknown = c.get_volume_group_snapshot(get("g-9", &[])).await;
        let others = c.get_volume_group_snapshot(get("g-1", &["s-1"])).await;
        let delete = csi::DeleteVolumeGroupSnapshotRequest {
            group_snapshot_id: "g-1".into(),
            ..Default::default()
        };
        (
            known,
            unknown,
            others,
            c.delete_volume_group_snapshot(delete).await,
        )
    })
    .await;
    let known = known.unwrap().into_inner().group_snapshot.unwrap();
    let members: Vec<_> = (known.snapshots.iter())
        .map(|s| {
            (
                s.snapshot_id.as_str(),
                s.source_volume_id.as_str(),
                s.size_bytes,
            )
        })
        .collect();
    assert_eq!(members, [("s-1", "h-1", 1 << 20), ("s-2", "h-2", 2 << 20)]);
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    assert_eq!(others.unwrap_err().code(), tonic::Code::InvalidArgument);
    deleted.unwrap();
    let created = server.created_pods();
    assert_eq!(created.len(), 1, "{created:#?}");
    assert_eq!(
        created[0]["metadata"]["labels"][crate::pods::LABEL_PHASE],
        "group-snapshot-deletion"
    );
    // The CO named no members: the recorded ones, with their sources.
    assert_eq!(
        created[0]["spec"]["containers"][0]["args"],
        json!(["g-1: s-1<h-1 s-2<h-2"])
    );
}

#[tokio::test]
async fn failures_no_claim_stands_for_are_events_on_the_pav_provisioner() {
    let pod = || json!({"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}});
    let mut spec = grouped();
    crate::csi::fixtures::merge(
        &mut spec,
        &json!({
            "storageCapacity": pod(),
            "snapshotCreation": pod(),
            "snapshotDeletion": pod(),
        }),
    );
    let (server, client) = scenario(spec);
    server.route(
        Method::GET,
        "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents",
        list("VolumeSnapshotContent", vec![]),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|_| {
        let files = crate::pods::results::Collected {
            error: Some("pool tank is offline".into()),
            ..Default::default()
        };
        json!({"status": {"phase": "Failed", "conditions": [files.condition()]}})
    }));
    let codes = serving(client, async |channel| {
        let mut c = csi::controller_client::ControllerClient::new(channel.clone());
        let mut g = csi::group_controller_client::GroupControllerClient::new(channel);
        let capacity = c.get_capacity(capacity_request("n1", "1Gi")).await;
        let snapshot = c
            .delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: "s-1".into(),
                ..Default::default()
            })
            .await;
        let group = g
            .delete_volume_group_snapshot(csi::DeleteVolumeGroupSnapshotRequest {
                group_snapshot_id: "g-1".into(),
                ..Default::default()
            })
            .await;
        [capacity.map(drop), snapshot.map(drop), group.map(drop)].map(|r| r.unwrap_err().code())
    })
    .await;
    assert_eq!(codes, [tonic::Code::Internal; 3]);
    let events: Vec<_> = (server.requests().into_iter())
        .filter(|r| r.method == Method::POST && r.path.ends_with("/events"))
        .filter_map(|r| r.body)
        .map(|e| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            let note = text(&e["note"]);
            assert!(note.ends_with("pool tank is offline"), "{note}");
            (
                text(&e["reason"]),
                text(&e["regarding"]["kind"]),
                text(&e["regarding"]["name"]),
                text(&e["regarding"]["uid"]),
            )
        })
        .collect();
    // With the uid `kubectl describe pavprovisioner p` finds them by.
    let on_provisioner = |reason: &str| {
        let (kind, name, uid) = ("PavProvisioner", "p", "u-p");
        (reason.to_owned(), kind.into(), name.into(), uid.into())
    };
    assert_eq!(
        events,
        [
            on_provisioner("CapacityFailed"),
            on_provisioner("SnapshotDeletionFailed"),
            on_provisioner("GroupSnapshotDeletionFailed"),
        ]
    );
}
