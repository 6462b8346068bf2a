//! Scenarios of CreateVolume and DeleteVolume against the fake API server
//! ([`fixtures`](super::super::fixtures)), through pav-csi's gRPC
//! service as external-provisioner calls it.

use std::time::Duration;

use super::*;
use crate::csi::fixtures::{ApiServer, Logged, assert_golden, list};
use crate::pods::LABEL_PHASE;
use http::Method;
use kube::Client;
use pav_csi::csi;
use serde_json::json;

const PROVISIONERS: &str = "/apis/pav.albertofaria.github.io/v1alpha1/pavprovisioners";
const CLAIM: &str = "/api/v1/namespaces/apps/persistentvolumeclaims/data";
const CLASS: &str = "/apis/storage.k8s.io/v1/storageclasses/sc";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/apps/events";

fn claim() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "apps", "uid": "u-data",
                     "resourceVersion": "1"},
        "spec": {"storageClassName": "sc", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Mi"}}},
    })
}

fn class() -> serde_json::Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "sc"}, "provisioner": "p",
    })
}

/// The fake, answering for provisioner `p` with `spec`, claim
/// `apps/data` of class `sc`, no PersistentVolumes and no pods.
fn scenario(spec: serde_json::Value) -> (ApiServer, Client) {
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
        list("PersistentVolume", vec![]),
    );
    server.route(Method::GET, "/api/v1/pods", list("Pod", vec![]));
    server.route(Method::GET, CLAIM, (200, claim()));
    server.route(
        Method::GET,
        "/api/v1/namespaces/apps/persistentvolumeclaims",
        list("PersistentVolumeClaim", vec![claim()]),
    );
    server.route(Method::GET, CLASS, (200, class()));
    server.on(|r: &Logged| {
        (r.method == Method::POST && r.path.ends_with("/events"))
            .then(|| (201, r.body.clone().unwrap_or_default()))
    });
    (server, client)
}

fn request(required_bytes: i64) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: "pvc-u-data".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_type: Some(csi::volume_capability::AccessType::Mount(
                csi::volume_capability::MountVolume::default(),
            )),
            access_mode: Some(csi::volume_capability::AccessMode {
                mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
            }),
        }],
        parameters: [
            ("csi.storage.k8s.io/pvc/name".to_owned(), "data".to_owned()),
            (
                "csi.storage.k8s.io/pvc/namespace".to_owned(),
                "apps".to_owned(),
            ),
        ]
        .into(),
        ..Default::default()
    }
}

/// Serves the CSI controller of `p` over `client` and sends `request`.
async fn create_volume(
    client: Client,
    request: csi::CreateVolumeRequest,
) -> std::result::Result<csi::CreateVolumeResponse, tonic::Status> {
    with_controller(client, async |mut controller| {
        controller
            .create_volume(request)
            .await
            .map(|r| r.into_inner())
    })
    .await
}

/// Serves the CSI controller of `p` over `client` while `calls`
/// runs with a gRPC client of it.
async fn with_controller<T>(
    client: Client,
    calls: impl AsyncFnOnce(csi::controller_client::ControllerClient<tonic::transport::Channel>) -> T,
) -> T {
    let driver = Arc::new(crate::csi::fixtures::driver_context(client));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = pav_csi::Driver::builder("p")
        .provisioner(crate::csi::controller_provisioner(driver))
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
    let answer = calls(csi::controller_client::ControllerClient::new(channel)).await;
    let _ = stop.send(());
    let _ = server.await;
    answer
}

/// What a scenario asked of the API server, caches' lists and
/// watches aside, in order.
fn asked(server: &ApiServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| !r.is_watch() && !r.query.contains("limit="))
        .map(|r| r.line())
        .collect()
}

#[tokio::test]
async fn a_volume_without_pods_is_the_evaluated_one() {
    let (server, client) = scenario(json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": {"capacity": "{{ requestedMinCapacity }}"},
        "volumeStaging": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }));
    let volume = create_volume(client, request(1 << 20))
        .await
        .expect("CreateVolume")
        .volume
        .unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(claim()).unwrap();
    let sc: StorageClass = serde_json::from_value(class()).unwrap();
    let context = pav_templates::CreationContext::new(&pvc, &sc).unwrap();
    assert_eq!(volume.volume_id, context.default_handle());
    assert_eq!(volume.capacity_bytes, 1 << 20);
    assert_eq!(
        asked(&server),
        [format!("GET {CLAIM}"), format!("GET {CLASS}")]
    );
}

#[tokio::test]
async fn a_capacity_over_the_maximum_is_out_of_range_with_a_validation_event() {
    let (server, client) = scenario(json!({
        "provisioningModes": ["Dynamic"],
        "volumeValidation": {"maxCapacity": "1Ki"},
        "volumeCreation": {"capacity": "{{ requestedMinCapacity }}"},
        "volumeStaging": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }));
    let status = create_volume(client, request(1 << 20)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert_eq!(
        status.message(),
        "requested capacity 1048576 bytes exceeds the maximum of 1024 bytes"
    );
    assert_eq!(
        asked(&server),
        [
            format!("GET {CLAIM}"),
            format!("GET {CLASS}"),
            format!("POST {EVENTS}")
        ]
    );
    let event = server
        .requests()
        .into_iter()
        .find(|r| r.method == Method::POST)
        .and_then(|r| r.body)
        .unwrap();
    assert_eq!(event["reason"], "ValidationFailed");
    assert_eq!(event["regarding"]["name"], "data");
    assert_eq!(event["note"], status.message());
}

/// The PersistentVolume of claim `apps/data`, handle `vol-1`.
fn volume() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pvc-u-data", "uid": "u-pv", "resourceVersion": "1"},
        "spec": {
            "csi": {"driver": "p", "volumeHandle": "vol-1"},
            "claimRef": {"name": "data", "namespace": "apps", "uid": "u-data"},
            "storageClassName": "sc",
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "1Mi"},
        },
    })
}

#[tokio::test]
async fn a_volume_without_a_deletion_pod_is_deleted_once_and_its_pods_cleaned_up() {
    let (server, client) = scenario(json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": {"capacity": "{{ requestedMinCapacity }}"},
        "volumeStaging": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }));
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    let delete = |id: &str| csi::DeleteVolumeRequest {
        volume_id: id.into(),
        ..Default::default()
    };
    let answers = with_controller(client, async |mut controller| {
        let mut answers = Vec::new();
        for id in ["vol-1", "vol-1", "vol-unknown"] {
            answers.push(controller.delete_volume(delete(id)).await.map(|_| ()));
        }
        answers
    })
    .await;
    for answer in answers {
        answer.expect("DeleteVolume");
    }
    let pods = "GET /api/v1/pods".to_owned();
    // The staging pods (none: the volume is staged nowhere), the claim and
    // its class for the deletion context, then the claim's pods; the
    // repeat and the unknown handle ask nothing.
    assert_eq!(
        asked(&server),
        [
            pods.clone(),
            format!("GET {CLAIM}"),
            format!("GET {CLASS}"),
            pods
        ]
    );
    let listed: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.line() == "GET /api/v1/pods" && !r.query.contains("limit="))
        .map(|r| r.query)
        .collect();
    assert!(
        listed[0].contains("phase%3Dstaging") || listed[0].contains("phase=staging"),
        "{listed:?}"
    );
    assert!(
        listed[1].contains("volume%3Du-data") || listed[1].contains("volume=u-data"),
        "{listed:?}"
    );
}

/// A provisioner whose creation and deletion are pods; the creation
/// pod is given the requested capacity as an argument.
fn spec_with_pods() -> serde_json::Value {
    json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": {"podTemplate": {"spec": {"containers": [{
            "name": "create", "image": "creator:1",
            "args": ["{{ requestedMinCapacity }}"],
        }]}}},
        "volumeDeletion": {"podTemplate": {"spec": {"containers": [{
            "name": "delete", "image": "deleter:1",
        }]}}},
        "volumeStaging": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    })
}

/// A pod that succeeded, its `/pav` files collected.
fn succeeded(files: results::Collected) -> serde_json::Value {
    json!({"status": {"phase": "Succeeded", "conditions": [files.condition()]}})
}

/// A pod whose container `container` was killed for `reason`, no
/// `/pav/error` written.
fn failed(container: &str, reason: &str) -> serde_json::Value {
    json!({
        "status": {"phase": "Failed", "conditions": [results::Collected::default().condition()], "containerStatuses": [{
            "name": container, "image": "x", "imageID": "", "ready": false,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": reason}},
        }]},
    })
}

/// The creation and deletion pods of claim `apps/data` for
/// [`spec_with_pods`], as checked by hand.
const CREATION_POD: &str = "src/csi/controller/golden/creation-pod.json";
const DELETION_POD: &str = "src/csi/controller/golden/deletion-pod.json";

fn pod_path(pod: &serde_json::Value) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/{}",
        pod["metadata"]["namespace"].as_str().unwrap(),
        pod["metadata"]["name"].as_str().unwrap()
    )
}

const PODS_OF_PAV: &str = "/api/v1/namespaces/pav/pods";

#[tokio::test]
async fn a_creation_pod_runs_to_completion_and_its_files_make_the_volume() {
    let (server, client) = scenario(spec_with_pods());
    server.serve_pods(crate::csi::fixtures::pods_ending(|phase| {
        assert_eq!(phase, "creation", "only the creation pod runs");
        succeeded(results::Collected {
            handle: Some("vol-from-pod".into()),
            capacity: Some("2Mi".into()),
            topology: Some("node-a".into()),
            ..results::Collected::default()
        })
    }));
    let volume = create_volume(client, request(1 << 20))
        .await
        .expect("CreateVolume")
        .volume
        .unwrap();
    assert_eq!(volume.volume_id, "vol-from-pod");
    assert_eq!(volume.capacity_bytes, 2 << 20);
    let topology: Vec<_> = volume
        .accessible_topology
        .iter()
        .map(|t| &t.segments)
        .collect();
    assert_eq!(
        topology,
        [&std::collections::HashMap::from([(
            crate::csi::TOPOLOGY_KEY.to_owned(),
            "node-a".to_owned()
        )])]
    );

    let created = server.created_pods();
    assert_eq!(created.len(), 1, "{created:#?}");
    let pod = &created[0];
    assert_golden(CREATION_POD, pod);
    assert_eq!(pod["spec"]["containers"][0]["args"], json!(["1048576"]));
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u-p");
    // The pod stays, its files recorded, until the claim is bound
    // (external-provisioner may call again before it writes the
    // PersistentVolume); then it goes.
    assert_eq!(
        asked(&server),
        [
            format!("GET {CLAIM}"),
            format!("GET {CLASS}"),
            format!("POST {PODS_OF_PAV}"),
        ]
    );
    assert_eq!(server.pods().len(), 1);
    let claims = "/api/v1/namespaces/apps/persistentvolumeclaims";
    wait_until(|| {
        server
            .requests()
            .iter()
            .any(|r| r.is_watch() && r.path == claims)
    })
    .await;
    let mut bound = claim();
    bound["spec"]["volumeName"] = json!("pvc-u-data");
    bound["metadata"]["resourceVersion"] = json!("2");
    server.route(Method::GET, CLAIM, (200, bound.clone()));
    server.send(claims, "MODIFIED", &bound);
    wait_until(|| server.pods().is_empty()).await;
    let mut after_binding = asked(&server);
    assert_eq!(
        after_binding.split_off(3),
        [
            format!("GET {CLAIM}"),
            "GET /api/v1/pods".to_owned(),
            format!("DELETE {}", pod_path(pod)),
        ]
    );
}

/// Waits, at most 10 s, until `done`.
async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("waited 10 s in vain");
}

#[tokio::test]
async fn a_failed_creation_pod_is_an_error_with_its_reason_an_event_and_an_undo() {
    let (server, client) = scenario(spec_with_pods());
    server.serve_pods(crate::csi::fixtures::pods_ending(|phase| match phase {
        "creation" => failed("create", "OOMKilled"),
        _ => succeeded(results::Collected::default()),
    }));
    let status = create_volume(client, request(1 << 20)).await.unwrap_err();

    let created = server.created_pods();
    let phases: Vec<_> = created
        .iter()
        .map(|p| p["metadata"]["labels"][LABEL_PHASE].clone())
        .collect();
    assert_eq!(phases, [json!("creation"), json!("deletion")]);
    let (creation, deletion) = (&created[0], &created[1]);
    assert_golden(DELETION_POD, deletion);
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(
        status.message(),
        format!(
            "creation pod pav/{} failed: container create: OOMKilled (exit code 137)",
            creation["metadata"]["name"].as_str().unwrap()
        )
    );
    // The deletion pod undoes what the creation did (no volume
    // leaks), then both pods go, then the claim is told.
    assert_eq!(
        asked(&server),
        [
            format!("GET {CLAIM}"),
            format!("GET {CLASS}"),
            format!("POST {PODS_OF_PAV}"),
            format!("POST {PODS_OF_PAV}"),
            format!("DELETE {}", pod_path(deletion)),
            format!("DELETE {}", pod_path(creation)),
            format!("POST {EVENTS}"),
        ]
    );
    let event = server
        .requests()
        .into_iter()
        .find(|r| r.path == EVENTS)
        .and_then(|r| r.body)
        .unwrap();
    assert_eq!(event["reason"], "CreationFailed");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["name"], "data");
    assert_eq!(event["note"], status.message());
    assert!(server.pods().is_empty(), "{:#?}", server.pods());
}

#[tokio::test]
async fn a_deletion_pod_runs_and_a_failed_one_is_reported_and_retried() {
    let (server, client) = scenario(spec_with_pods());
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    // The first deletion pod fails, the second succeeds.
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    server.serve_pods(crate::csi::fixtures::pods_ending(move |phase| {
        assert_eq!(phase, "deletion");
        match counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => failed("delete", "Error"),
            _ => succeeded(results::Collected::default()),
        }
    }));
    let delete = csi::DeleteVolumeRequest {
        volume_id: "vol-1".into(),
        ..Default::default()
    };
    let answers = with_controller(client, async |mut controller| {
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(controller.delete_volume(delete.clone()).await.map(|_| ()));
        }
        answers
    })
    .await;
    let created = server.created_pods();
    assert_eq!(created.len(), 2, "a deleted volume ran a third pod");
    assert_golden(DELETION_POD, &created[0]);
    let path = pod_path(&created[0]);
    let status = answers[0].as_ref().unwrap_err();
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(
        status.message(),
        format!(
            "deletion pod pav/{} failed: container delete: Error (exit code 137)",
            created[0]["metadata"]["name"].as_str().unwrap()
        )
    );
    answers[1].as_ref().expect("the retry");
    answers[2].as_ref().expect("the repeat");
    let pods = "GET /api/v1/pods".to_owned();
    assert_eq!(
        asked(&server),
        [
            // The failed run, the volume staged nowhere: its pod goes, the
            // volume is told.
            pods.clone(),
            format!("GET {CLAIM}"),
            format!("GET {CLASS}"),
            format!("POST {PODS_OF_PAV}"),
            format!("DELETE {path}"),
            "POST /apis/events.k8s.io/v1/namespaces/default/events".to_owned(),
            // The retry runs the pod again, then cleans up the
            // claim's pods; the repeat asks nothing.
            pods.clone(),
            format!("GET {CLAIM}"),
            format!("GET {CLASS}"),
            format!("POST {PODS_OF_PAV}"),
            format!("DELETE {path}"),
            pods,
        ]
    );
    let event = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/events"))
        .and_then(|r| r.body)
        .unwrap();
    assert_eq!(event["reason"], "DeletionFailed");
    assert_eq!(event["regarding"]["kind"], "PersistentVolume");
    assert_eq!(event["note"], status.message());
    assert!(server.pods().is_empty(), "{:#?}", server.pods());
}

/// The staging pod of volume `vol-1` (PersistentVolume `pv`) for a client
/// pod on `node`, as the node plugin creates it.
fn staging_pod(pv: &str, node: &str) -> serde_json::Value {
    let origin = crate::pods::PodOrigin {
        provisioner: "p",
        owner: None,
        default_namespace: "pav",
    };
    let staging = pav_templates::StagingPhase {
        pod_template: serde_json::from_value(
            json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .unwrap(),
        timeout: None,
    };
    let target = format!("/var/lib/kubelet/pods/u-web-{node}/volumes/kubernetes.io~csi/{pv}/mount");
    let publication = crate::pods::Publication {
        handle: "vol-1",
        target_path: &target,
        node,
        claim: "apps/data",
        pv,
        client: Some(("apps", "web", "u-web")),
        read_only: false,
        moved_to: None,
    };
    serde_json::to_value(origin.staging_pod(&staging, None, &publication)).unwrap()
}

#[tokio::test]
async fn a_volume_still_staged_is_deleted_only_once_unstaged_whatever_restarts() {
    let (server, client) = scenario(spec_with_pods());
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|phase| {
        assert_eq!(phase, "deletion");
        succeeded(results::Collected::default())
    }));
    // The client pod is gone and its claim with it; the kubelet is still
    // unpublishing the volume on node-a: the node plugin has stopped the
    // staging pod, whose finalizer keeps it until the unstaging pod ran.
    let mut unstaging = staging_pod("pvc-u-data", "node-a");
    unstaging["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    server.put_pod(unstaging.clone());
    // Another volume staged on node-b does not hold this one.
    server.put_pod(staging_pod("pvc-other", "node-b"));
    let delete = csi::DeleteVolumeRequest {
        volume_id: "vol-1".into(),
        ..Default::default()
    };
    let staged_name = unstaging["metadata"]["name"].as_str().unwrap().to_owned();
    // Each call is a new controller: nothing is remembered in memory
    // between them, as after a restart.
    let call = || {
        let (client, delete) = (client.clone(), delete.clone());
        async move {
            with_controller(client, async |mut controller| {
                controller.delete_volume(delete).await.map(|_| ())
            })
            .await
        }
    };
    for _ in 0..2 {
        let status = call().await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert_eq!(
            status.message(),
            format!(
                "PersistentVolume pvc-u-data is still staged on node node-a: it is deleted \
                 once the node plugin has unstaged it (staging pod pav/{staged_name})"
            )
        );
    }
    assert!(
        server.created_pods().is_empty(),
        "a deletion pod ran while staged"
    );
    let events: Vec<_> = (server.requests().into_iter())
        .filter(|r| r.method == Method::POST && r.path.ends_with("/events"))
        .filter_map(|r| r.body)
        .collect();
    assert_eq!(events.len(), 2, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["reason"], super::delete::DELETION_WAITS_FOR_UNSTAGING);
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["regarding"]["kind"], "PersistentVolume");
    assert_eq!(event["regarding"]["name"], "pvc-u-data");
    assert_eq!(event["related"]["name"], staged_name.as_str());
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("still staged on node node-a"),
        "{event:#?}"
    );

    // The node plugin has unstaged the volume and released its staging
    // pod: the deletion pod runs.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "pav");
    pods.patch(
        &staged_name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    call().await.expect("DeleteVolume once unstaged");
    let created = server.created_pods();
    assert_eq!(created.len(), 1, "{created:#?}");
    assert_golden(DELETION_POD, &created[0]);
    let staging_lists = (server.requests().into_iter())
        .filter(|r| r.line() == "GET /api/v1/pods" && r.query.contains("staging"))
        .count();
    assert_eq!(staging_lists, 3, "each call reads the API server");
}

/// `spec_with_pods` with pav's expansion and snapshot sections, and the
/// data sources `sources`.
fn spec_with_features(sources: serde_json::Value) -> serde_json::Value {
    let mut spec = spec_with_pods();
    let pod = |name: &str, args: &str| json!({"spec": {"containers": [{"name": name, "image": "tool:1", "args": [args]}]}});
    spec["volumeCreation"]["podTemplate"] = pod(
        "create",
        "{{ requestedMinCapacity }} {{ source.kind }} {{ source.handle }}",
    );
    spec["volumeExpansion"] = json!({"podTemplate": pod("grow", "{{ requestedMinCapacity }}")});
    spec["volumeNodeExpansion"] = json!({"podTemplate": pod("grow", "{{ capacity }}")});
    spec["snapshotCreation"] = json!({"podTemplate": pod("snap", "{{ sourceHandle }}")});
    spec["dataSources"] = sources;
    spec
}

#[tokio::test]
async fn an_expansion_pod_grows_the_volume_and_the_nodes_are_asked_to_follow() {
    let (server, client) = scenario(spec_with_features(json!(["PersistentVolumeClaim"])));
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|phase| {
        assert_eq!(phase, "expansion", "only the expansion pod runs");
        succeeded(results::Collected {
            capacity: Some("3Mi".into()),
            ..results::Collected::default()
        })
    }));
    let grow = csi::ControllerExpandVolumeRequest {
        volume_id: "vol-1".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 2 << 20,
            limit_bytes: 0,
        }),
        ..Default::default()
    };
    let answer = with_controller(client, async |mut controller| {
        controller.controller_expand_volume(grow).await
    })
    .await
    .expect("ControllerExpandVolume")
    .into_inner();
    assert_eq!(answer.capacity_bytes, 3 << 20, "the pod's /pav/capacity");
    assert!(answer.node_expansion_required, "volumeNodeExpansion is set");
    let created = server.created_pods();
    assert_eq!(created.len(), 1, "{created:#?}");
    let pod = &created[0];
    assert_eq!(pod["metadata"]["labels"][LABEL_PHASE], "expansion");
    assert_eq!(
        pod["metadata"]["annotations"][crate::pods::ANNOTATION_PV],
        "pvc-u-data"
    );
    assert_eq!(pod["spec"]["containers"][0]["args"], json!(["2097152"]));
    assert!(
        asked(&server).contains(&format!("DELETE {}", pod_path(pod))),
        "the pod goes once it ran"
    );
}

#[tokio::test]
async fn a_provisioner_without_expansion_refuses_growth_naming_the_section() {
    let (server, client) = scenario(spec_with_pods());
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    let grow = csi::ControllerExpandVolumeRequest {
        volume_id: "vol-1".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 2 << 20,
            limit_bytes: 0,
        }),
        ..Default::default()
    };
    let status = with_controller(client, async |mut controller| {
        controller.controller_expand_volume(grow).await
    })
    .await
    .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert_eq!(
        status.message(),
        "PavProvisioner p has no spec.volumeExpansion: its volumes do not grow"
    );
    assert!(server.created_pods().is_empty());
}

/// ControllerExpandVolume of `vol-1` to `bytes`.
fn grow(bytes: i64) -> csi::ControllerExpandVolumeRequest {
    csi::ControllerExpandVolumeRequest {
        volume_id: "vol-1".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        ..Default::default()
    }
}

/// The Warning events the driver posted: (reason, regarded object, note).
fn warnings(server: &ApiServer) -> Vec<(String, String, String)> {
    (server.requests().into_iter())
        .filter(|r| r.method == Method::POST && r.path == EVENTS)
        .filter_map(|r| r.body)
        .map(|e| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&e["reason"]),
                text(&e["regarding"]["name"]),
                text(&e["note"]),
            )
        })
        .collect()
}

/// Recovery from a failed expansion (Kubernetes 1.34): growth past
/// `maxCapacity` is infeasible, `OUT_OF_RANGE` before any pod runs, and
/// the claim's owner who lowers the request then gets the volume grown.
#[tokio::test]
async fn growth_past_max_capacity_is_out_of_range_and_a_lower_request_then_grows() {
    let mut spec = spec_with_features(json!(["PersistentVolumeClaim"]));
    spec["volumeValidation"] = json!({"maxCapacity": "{{ '2Mi' if sc.metadata.name == 'sc' }}"});
    let (server, client) = scenario(spec);
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|phase| {
        assert_eq!(phase, "expansion", "only the expansion pod runs");
        succeeded(results::Collected::default())
    }));
    let (refused, grown) = with_controller(client, async |mut controller| {
        let refused = controller.controller_expand_volume(grow(4 << 20)).await;
        let grown = controller.controller_expand_volume(grow(2 << 20)).await;
        (refused, grown)
    })
    .await;
    let status = refused.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    let message = "PersistentVolume pvc-u-data: requested capacity 4194304 bytes exceeds the maximum of 2097152 bytes";
    assert_eq!(status.message(), message);
    assert_eq!(
        warnings(&server),
        [("ExpansionFailed".into(), "data".into(), message.into())],
        "the claim says why"
    );
    assert_eq!(
        grown
            .expect("the lowered request")
            .into_inner()
            .capacity_bytes,
        2 << 20
    );
    assert_eq!(
        server.created_pods().len(),
        1,
        "no pod for the refused size"
    );
}

/// An expansion pod that could not give what was asked says how much it
/// gave: that is the volume's limit, `OUT_OF_RANGE` (infeasible).
#[tokio::test]
async fn an_expansion_pod_giving_less_than_asked_is_out_of_range_naming_its_capacity() {
    let (server, client) = scenario(spec_with_features(json!(["PersistentVolumeClaim"])));
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|_| {
        succeeded(results::Collected {
            capacity: Some("3Mi".into()),
            ..results::Collected::default()
        })
    }));
    let status = with_controller(client, async |mut controller| {
        controller.controller_expand_volume(grow(4 << 20)).await
    })
    .await
    .unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    let pod = pod_path(&server.created_pods()[0]);
    let pod = pod.rsplit('/').next().unwrap();
    assert_eq!(
        status.message(),
        format!(
            "expansion pod pav/{pod}: /pav/capacity: the volume grew to 3145728 bytes, less than the 4194304 bytes requested"
        )
    );
    assert_eq!(warnings(&server)[0].2, status.message());
}

#[tokio::test]
async fn a_snapshot_pod_exports_the_snapshot_handle_and_size() {
    let (server, client) = scenario(spec_with_features(json!(["PersistentVolumeClaim"])));
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    server.serve_pods(crate::csi::fixtures::pods_ending(|phase| {
        assert_eq!(phase, "snapshot-creation");
        succeeded(results::Collected {
            handle: Some("snap-of-vol-1".into()),
            size: Some("5Mi".into()),
            ..results::Collected::default()
        })
    }));
    let take = csi::CreateSnapshotRequest {
        source_volume_id: "vol-1".into(),
        name: "snapshot-u-s".into(),
        ..Default::default()
    };
    let snapshot = with_controller(client, async |mut controller| {
        controller.create_snapshot(take).await
    })
    .await
    .expect("CreateSnapshot")
    .into_inner()
    .snapshot
    .unwrap();
    assert_eq!(snapshot.snapshot_id, "snap-of-vol-1");
    assert_eq!(snapshot.source_volume_id, "vol-1");
    assert_eq!(snapshot.size_bytes, 5 << 20);
    assert!(snapshot.ready_to_use);
    let created = server.created_pods();
    assert_eq!(created.len(), 1);
    assert_eq!(
        created[0]["spec"]["containers"][0]["args"],
        json!(["vol-1"])
    );
    assert_eq!(
        created[0]["metadata"]["annotations"][crate::pods::ANNOTATION_SNAPSHOT],
        "snapshot-u-s"
    );
}

/// A CreateVolume of claim `apps/data` cloning volume `vol-1`.
fn clone_request() -> csi::CreateVolumeRequest {
    let mut request = request(1 << 20);
    request.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Volume(
            csi::volume_content_source::VolumeSource {
                volume_id: "vol-1".into(),
            },
        )),
    });
    request
}

#[tokio::test]
async fn a_clone_is_refused_unless_data_sources_list_it_and_then_its_source_is_templated() {
    for (sources, listed) in [
        (json!(["VolumeSnapshot"]), false),
        (json!(["PersistentVolumeClaim"]), true),
    ] {
        let (server, client) = scenario(spec_with_features(sources));
        server.route(
            Method::GET,
            "/api/v1/persistentvolumes",
            list("PersistentVolume", vec![volume()]),
        );
        server.serve_pods(crate::csi::fixtures::pods_ending(|phase| {
            assert_eq!(phase, "creation");
            succeeded(results::Collected {
                capacity: Some("1Mi".into()),
                ..results::Collected::default()
            })
        }));
        let answer = create_volume(client, clone_request()).await;
        if !listed {
            let status = answer.unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert_eq!(
                status.message(),
                "PavProvisioner p does not create volumes from a PersistentVolumeClaim: spec.dataSources does not list it"
            );
            assert!(server.created_pods().is_empty());
            continue;
        }
        let volume = answer.expect("CreateVolume").volume.unwrap();
        assert_eq!(
            volume.content_source,
            clone_request().volume_content_source,
            "the answer names its source"
        );
        let created = server.created_pods();
        assert_eq!(
            created[0]["spec"]["containers"][0]["args"],
            json!(["1048576 PersistentVolumeClaim vol-1"])
        );
    }
}
