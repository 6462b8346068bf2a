//! Scenarios of staging and unstaging against the fake API server
//! ([`fixtures`](super::super::fixtures)): the pods, the requests, the
//! `/pav` directories on this node.

use super::*;
use crate::csi::context::PhaseError;
use crate::csi::fixtures::{ApiServer, Logged, assert_golden, list, status};
use crate::pods::LABEL_PHASE;
use http::Method;
use pav_sdk::Error;
use serde_json::{Value, json};

const PROVISIONERS: &str = "/apis/pav.albertofaria.github.io/v1alpha1/pavprovisioners";
const CLIENT: &str = "/api/v1/namespaces/apps/pods/client";
const CLAIM: &str = "/api/v1/namespaces/apps/persistentvolumeclaims/data";
const PV: &str = "/api/v1/persistentvolumes/pvc-u-data";
const NODE: &str = "/api/v1/nodes/n1";
const PODS_OF_PAV: &str = "/api/v1/namespaces/pav/pods";
const TARGET: &str = "/var/lib/kubelet/pods/u-client/volumes/kubernetes.io~csi/pvc-u-data/mount";

fn spec() -> Value {
    json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": {"capacity": "{{ requestedMinCapacity }}"},
        "volumeStaging": {"podTemplate": {"spec": {"containers": [{
            "name": "stage", "image": "stager:1",
            "args": ["{{ pv.spec.csi.volumeHandle }}"],
        }]}}},
        "volumeUnstaging": {"podTemplate": {"spec": {"containers": [{
            "name": "unstage", "image": "unstager:1",
        }]}}},
    })
}

fn provisioner(spec: Value) -> Value {
    json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1", "kind": "PavProvisioner",
        "metadata": {"name": "p", "uid": "u-p", "generation": 1, "resourceVersion": "1"},
        "spec": spec,
    })
}

fn claim() -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "apps", "uid": "u-data",
                     "resourceVersion": "1"},
        "spec": {"storageClassName": "sc", "accessModes": ["ReadWriteOnce"],
                 "volumeName": "pvc-u-data",
                 "resources": {"requests": {"storage": "1Mi"}}},
    })
}

fn volume() -> Value {
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

fn node() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "u-n1", "labels": {"zone": "a"}},
    })
}

fn client_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "client", "namespace": "apps", "uid": "u-client"},
        "spec": {
            "containers": [{"name": "app", "image": "app"}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    })
}

/// What the kubelet and the pods do on this node: `staging` and
/// `unstaging` give each pod's patches, given its `/pav` directory.
type Pods = fn(&Path) -> Vec<Value>;

/// The fake with the objects above, pods served by `staging` and
/// `unstaging`, and a node plugin of `p` on node `n1`.
fn scenario(staging: Pods, unstaging: Pods) -> (ApiServer, PodNode, tempfile::TempDir) {
    scenario_of(spec(), move |phase, dir| match phase {
        "staging" => staging(dir),
        "unstaging" => unstaging(dir),
        other => panic!("a {other:?} pod on the node"),
    })
}

/// The fake with the objects above and a node plugin on node `n1` of `p`
/// with `spec`, whose pods `pods` serves, given their phase and `/pav`
/// directory.
fn scenario_of(
    spec: Value,
    pods: impl Fn(&str, &Path) -> Vec<Value> + Send + 'static,
) -> (ApiServer, PodNode, tempfile::TempDir) {
    let (server, client) = ApiServer::start();
    server.route(
        Method::GET,
        PROVISIONERS,
        list("PavProvisioner", vec![provisioner(spec)]),
    );
    server.route(Method::GET, CLAIM, (200, claim()));
    server.route(Method::GET, PV, (200, volume()));
    server.route(Method::GET, NODE, (200, node()));
    server.on(|r: &Logged| {
        (r.method == Method::POST && r.path.ends_with("/events"))
            .then(|| (201, r.body.clone().unwrap_or_default()))
    });
    let pods_dir = tempfile::tempdir().unwrap();
    let dir = pods_dir.path().to_owned();
    server.serve_pods(move |pod| {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let phase = pod["metadata"]["labels"][LABEL_PHASE].as_str();
        pods(phase.unwrap_or_default(), &dir.join(name))
    });
    server.put_pod(client_pod());
    let driver = Arc::new(crate::csi::fixtures::driver_context(client));
    driver.pods.start_cache(Some("n1"));
    let node = PodNode::new(
        driver,
        "n1".into(),
        pods_dir.path().to_owned(),
        Staging::PerPod,
    );
    (server, node, pods_dir)
}

/// A staging pod that mounts its volume and says it is ready.
fn ready(dir: &Path) -> Vec<Value> {
    std::fs::create_dir_all(dir.join("volume")).unwrap();
    std::fs::write(dir.join("ready"), "").unwrap();
    vec![json!({"status": {"phase": "Running"}})]
}

/// A staging pod that fails, writing `/pav/error`.
fn refused(dir: &Path) -> Vec<Value> {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("error"), "export /data is not shared\n").unwrap();
    vec![json!({"status": {"phase": "Failed"}})]
}

/// An unstaging pod that runs to completion.
fn done(dir: &Path) -> Vec<Value> {
    std::fs::create_dir_all(dir).unwrap();
    vec![
        json!({"status": {"phase": "Running"}}),
        json!({"status": {"phase": "Succeeded"}}),
    ]
}

fn staging_request() -> StagingRequest<'static> {
    StagingRequest {
        handle: "vol-1",
        target_path: Path::new(TARGET),
        read_only: false,
        block: false,
        publish_context: &NO_CONTEXT,
        ephemeral: None,
        tokens: &NO_TOKENS,
    }
}

/// The publish context of a volume no attach pod attached.
static NO_CONTEXT: pav_sdk::Parameters = pav_sdk::Parameters::new();

/// The tokens of a client pod when the CSIDriver asks for none.
static NO_TOKENS: std::sync::LazyLock<pav_sdk::ServiceAccountTokens> =
    std::sync::LazyLock::new(Default::default);

/// A client pod's service-account tokens (`spec.tokenRequests`) are in
/// its staging pod's `/pav/tokens` when the pod is created; a republish
/// with renewed tokens replaces them and creates no other pod.
#[tokio::test]
async fn the_client_pods_tokens_are_its_staging_pods_files_renewed_at_republish() {
    let found_at_creation = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let found = found_at_creation.clone();
    let (server, node, pods_dir) = scenario_of(spec(), move |phase, dir| match phase {
        "staging" => {
            let token = std::fs::read_to_string(dir.join("tokens/sts.example.com"));
            found.lock().unwrap().push(token.ok());
            ready(dir)
        }
        other => panic!("a {other:?} pod on the node"),
    });
    let tokens = |jwt: &str| -> pav_sdk::ServiceAccountTokens {
        let token = pav_sdk::ServiceAccountToken::new(jwt, "2026-12-01T00:00:00Z");
        [("sts.example.com".to_owned(), token)]
            .into_iter()
            .collect()
    };
    let first = tokens("jwt-first");
    let request = StagingRequest {
        tokens: &first,
        ..staging_request()
    };
    node.stage_for(&request, &client_info())
        .await
        .expect("staging");
    let created = server.created_pods();
    assert_eq!(created.len(), 1);
    let file = pods_dir
        .path()
        .join(name(&created[0]))
        .join("tokens/sts.example.com");
    let at_creation = found_at_creation.lock().unwrap().clone();
    assert_eq!(at_creation.first(), Some(&Some("jwt-first".to_owned())));

    let renewed = tokens("jwt-renewed");
    let republish = StagingRequest {
        tokens: &renewed,
        ..staging_request()
    };
    node.stage_for(&republish, &client_info())
        .await
        .expect("republish");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "jwt-renewed");
    assert_eq!(server.created_pods().len(), 1, "the staging pod is kept");
    let posted = format!("{:?}", server.requests());
    assert!(
        !posted.contains("jwt-"),
        "no token reaches the API server: {posted}"
    );
}

fn client_info() -> PodInfo {
    PodInfo {
        name: "client".into(),
        namespace: "apps".into(),
        uid: "u-client".into(),
        ..PodInfo::default()
    }
}

/// The staging pod of the scenario's claim for its client pod, and the
/// unstaging pod recorded on it, as checked by hand.
const STAGING_POD: &str = "src/csi/node/golden/staging-pod.json";
const UNSTAGING_POD: &str = "src/csi/node/golden/unstaging-pod.json";

fn pod_path(pod: &Value) -> String {
    format!(
        "{PODS_OF_PAV}/{}",
        pod["metadata"]["name"].as_str().unwrap()
    )
}

/// The requests so far, watches and the pod cache's list aside.
fn asked(server: &ApiServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| !r.is_watch() && !r.query.contains("limit="))
        .map(|r| r.line())
        .collect()
}

#[tokio::test]
async fn a_volume_is_staged_by_its_pod_and_unstaged_by_another() {
    let (server, node, pods_dir) = scenario(ready, done);
    let staged = node
        .stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    let created = server.created_pods();
    assert_eq!(created.len(), 1);
    assert_golden(STAGING_POD, &created[0]);
    let staging = &created[0];
    assert_eq!(staging["spec"]["containers"][0]["args"], json!(["vol-1"]));
    assert_eq!(staging["spec"]["nodeName"], "n1");
    assert_eq!(
        staging["metadata"]["finalizers"],
        json!([FINALIZER_UNSTAGE])
    );
    let name = staging["metadata"]["name"].as_str().unwrap();
    assert_eq!(staged.path, pods_dir.path().join(name).join("volume"));
    assert_eq!(
        asked(&server),
        [
            format!("GET {CLIENT}"),
            format!("GET {CLAIM}"),
            format!("GET {PV}"),
            format!("GET {NODE}"),
            format!("POST {PODS_OF_PAV}"),
        ]
    );

    let before = server.requests().len();
    node.unstage_at("vol-1", Path::new(TARGET))
        .await
        .expect("unstaging");
    let created = server.created_pods();
    assert_eq!(created.len(), 2);
    assert_golden(UNSTAGING_POD, &created[1]);
    let unstaging = &created[1];
    assert_eq!(unstaging["spec"]["nodeName"], "n1");
    let unstage_asked: Vec<String> = server.requests()[before..]
        .iter()
        .filter(|r| !r.is_watch())
        .map(Logged::line)
        .collect();
    assert_eq!(
        unstage_asked,
        [
            // This node's staging pods of the volume and target.
            "GET /api/v1/pods".to_owned(),
            // The unstaging phase rendered from the live objects.
            format!("GET {CLAIM}"),
            format!("GET {PV}"),
            format!("GET {NODE}"),
            // Stop the staging pod (its finalizer keeps it), run
            // the unstaging pod, then let the staging pod go.
            format!("DELETE {}", pod_path(staging)),
            format!("POST {PODS_OF_PAV}"),
            format!("DELETE {}", pod_path(unstaging)),
            format!("GET {}", pod_path(staging)),
            format!("PATCH {}", pod_path(staging)),
        ]
    );
    let listed = server
        .requests()
        .into_iter()
        .skip(before)
        .find(|r| r.line() == "GET /api/v1/pods")
        .unwrap();
    assert!(listed.query.contains("staging"), "{listed:?}");
    // Only the client pod is left, and no /pav directory.
    let left: Vec<Value> = server.pods();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0]["metadata"]["name"], "client");
    assert_eq!(std::fs::read_dir(pods_dir.path()).unwrap().count(), 0);
    // Unstaging again finds nothing to do.
    node.unstage_at("vol-1", Path::new(TARGET))
        .await
        .expect("unstaging again");
    assert_eq!(server.created_pods().len(), 2);
}

#[tokio::test]
async fn a_failed_staging_pod_is_reported_on_the_client_and_unstaged() {
    let (server, node, pods_dir) = scenario(refused, done);
    let failure = node
        .stage_for(&staging_request(), &client_info())
        .await
        .unwrap_err();
    assert!(
        matches!(failure, StageError::Failed { undo: None, .. }),
        "{failure:?}"
    );
    let error = Error::from(failure);
    let created = server.created_pods();
    let phases: Vec<&Value> = created
        .iter()
        .map(|p| &p["metadata"]["labels"][LABEL_PHASE])
        .collect();
    assert_eq!(phases, [&json!("staging"), &json!("unstaging")]);
    let staging = &created[0];
    assert!(matches!(error, Error::Internal(_)), "{error:?}");
    assert_eq!(
        error.message(),
        format!(
            "staging pod pav/{} failed: export /data is not shared",
            staging["metadata"]["name"].as_str().unwrap()
        )
    );
    let event = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/events"))
        .and_then(|r| r.body)
        .expect("an event");
    assert_eq!(event["reason"], "StagingFailed");
    assert_eq!(event["regarding"]["kind"], "Pod");
    assert_eq!(event["regarding"]["name"], "client");
    assert_eq!(event["note"], error.message());
    let left = server.pods();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(std::fs::read_dir(pods_dir.path()).unwrap().count(), 0);
}

/// A staging pod that says it is ready without a volume at `/pav/volume`.
fn ready_without_volume(dir: &Path) -> Vec<Value> {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("ready"), "").unwrap();
    vec![json!({"status": {"phase": "Running"}})]
}

/// An unstaging pod that fails, writing `/pav/error`.
fn unstaging_refused(dir: &Path) -> Vec<Value> {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("error"), "the export is busy\n").unwrap();
    vec![json!({"status": {"phase": "Failed"}})]
}

/// The Warning events posted so far: reason, kind and name of the object
/// they regard, note.
fn events(server: &ApiServer) -> Vec<(String, String, String, String)> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::POST && r.path.ends_with("/events"))
        .filter_map(|r| r.body)
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&e["reason"]),
                text(&e["regarding"]["kind"]),
                text(&e["regarding"]["name"]),
                text(&e["note"]),
            )
        })
        .collect()
}

fn name(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap().to_owned()
}

/// The staging pod said ready but left nothing to mount, and the unstaging
/// pod that undoes it fails too: one `INTERNAL` naming both, one
/// `StagingFailed` event on the client pod, and the staging pod kept (its
/// finalizer) for the next unstaging.
#[tokio::test]
async fn a_staging_pod_without_a_volume_whose_unstaging_fails_is_internal() {
    let (server, node, _pods_dir) = scenario(ready_without_volume, unstaging_refused);
    let failure = node
        .stage_for(&staging_request(), &client_info())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &failure,
            StageError::Failed { undo: Some(undo), .. }
                if matches!(**undo, UnstageError::UnstagingPod(PhaseError::Failed(_)))
        ),
        "{failure:?}"
    );
    let created = server.created_pods();
    let (staging, unstaging) = (name(&created[0]), name(&created[1]));
    let error = Error::from(failure);
    let message = format!(
        "staging pod pav/{staging} failed: the staging pod did not create /pav/volume; \
         then unstaging pod pav/{unstaging} failed: the export is busy"
    );
    assert!(
        matches!(&error, Error::Internal(m) if *m == message),
        "{error:?}"
    );
    assert_eq!(
        events(&server),
        [(
            "StagingFailed".to_owned(),
            "Pod".to_owned(),
            "client".to_owned(),
            message
        )]
    );
    let left: Vec<String> = server.pods().iter().map(name).collect();
    assert_eq!(left, ["client".to_owned(), staging], "staging pod released");
}

/// A client pod none of whose claims is bound to the volume: `NOT_FOUND`,
/// an event on the client pod, no pod created.
#[tokio::test]
async fn staging_a_volume_the_client_does_not_use_is_not_found() {
    let (server, node, _pods_dir) = scenario(ready, done);
    let request = StagingRequest {
        handle: "vol-2",
        ..staging_request()
    };
    let failure = node.stage_for(&request, &client_info()).await.unwrap_err();
    assert!(
        matches!(failure, StageError::NoVolume { .. }),
        "{failure:?}"
    );
    let error = Error::from(failure);
    let message = "pod apps/client uses no claim bound to volume \"vol-2\" of p";
    assert!(
        matches!(&error, Error::NotFound(m) if m == message),
        "{error:?}"
    );
    assert_eq!(
        events(&server),
        [(
            "StagingFailed".to_owned(),
            "Pod".to_owned(),
            "client".to_owned(),
            message.to_owned()
        )]
    );
    assert!(server.created_pods().is_empty());
}

/// A failing unstaging pod: `INTERNAL`, an `UnstagingFailed` event on the
/// client pod, and the staging pod kept with its finalizer for the retry.
#[tokio::test]
async fn a_failed_unstaging_pod_is_reported_on_the_client() {
    let (server, node, _pods_dir) = scenario(ready, unstaging_refused);
    node.stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    let failure = node
        .unstage_at("vol-1", Path::new(TARGET))
        .await
        .unwrap_err();
    assert!(
        matches!(failure, UnstageError::UnstagingPod(PhaseError::Failed(_))),
        "{failure:?}"
    );
    let created = server.created_pods();
    let (staging, unstaging) = (name(&created[0]), name(&created[1]));
    let error = Error::from(failure);
    let message = format!("unstaging pod pav/{unstaging} failed: the export is busy");
    assert!(
        matches!(&error, Error::Internal(m) if *m == message),
        "{error:?}"
    );
    assert_eq!(
        events(&server),
        [(
            "UnstagingFailed".to_owned(),
            "Pod".to_owned(),
            "client".to_owned(),
            message
        )]
    );
    let kept = server
        .pods()
        .into_iter()
        .find(|p| name(p) == staging)
        .expect("the staging pod is kept");
    assert_eq!(kept["metadata"]["finalizers"], json!([FINALIZER_UNSTAGE]));
}

/// The claim deleted after staging (as a terminated client pod allows):
/// the unstaging pod is the one recorded on the staging pod, and no error.
#[tokio::test]
async fn a_volume_whose_claim_is_gone_is_unstaged_as_recorded() {
    let (server, node, _pods_dir) = scenario(ready, done);
    node.stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    server.route(
        Method::GET,
        CLAIM,
        status(404, "NotFound", "persistentvolumeclaims \"data\" not found"),
    );
    node.unstage_at("vol-1", Path::new(TARGET))
        .await
        .expect("unstaging");
    let created = server.created_pods();
    assert_eq!(created.len(), 2);
    assert_golden(UNSTAGING_POD, &created[1]);
    let left: Vec<String> = server.pods().iter().map(name).collect();
    assert_eq!(left, ["client"]);
    assert!(events(&server).is_empty());
}

/// A staging pod that runs and never says ready.
fn never_ready(dir: &Path) -> Vec<Value> {
    std::fs::create_dir_all(dir).unwrap();
    vec![json!({"status": {"phase": "Running"}})]
}

/// The client pod is deleted while its staging pod runs: the staging is
/// torn down at once (the unstaging pod runs, the staging pod's directory
/// goes) and the answer is FAILED_PRECONDITION, not a wait for a pod that
/// nobody needs until the phase times out. (Real time: the check comes
/// every 5 s.)
#[tokio::test]
async fn a_client_deleted_mid_staging_has_its_staging_torn_down() {
    let (server, node, pods_dir) = scenario(never_ready, done);
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = reads.clone();
    server.intercept(move |r: &Logged| {
        (r.method == Method::GET && r.path == CLIENT)
            // The first read is stage_for's own; the pod is gone after it.
            .then(|| counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
            .filter(|&n| n > 0)
            .map(|_| status(404, "NotFound", "pods \"client\" not found"))
    });
    let failure = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        node.stage_for(&staging_request(), &client_info()),
    )
    .await
    .expect("the staging gave up once the client was gone")
    .unwrap_err();
    assert!(
        matches!(failure, StageError::ClientGone { undo: None, .. }),
        "{failure:?}"
    );
    assert!(!failure.reported(), "no event on a pod that is gone");
    let error = Error::from(failure);
    assert!(matches!(error, Error::FailedPrecondition(_)), "{error:?}");
    assert!(error.message().contains("apps/client"), "{error:?}");
    let phases: Vec<Value> = server
        .created_pods()
        .iter()
        .map(|p| p["metadata"]["labels"][LABEL_PHASE].clone())
        .collect();
    assert_eq!(phases, [json!("staging"), json!("unstaging")]);
    let left: Vec<String> = server.pods().iter().map(name).collect();
    assert_eq!(left, ["client"], "the staging pod is let go");
    assert_eq!(std::fs::read_dir(pods_dir.path()).unwrap().count(), 0);
    assert!(reads.load(std::sync::atomic::Ordering::SeqCst) >= 2);
}

/// The scenario's spec with a health check every `every`.
fn checked_spec(every: &str) -> Value {
    let mut spec = spec();
    spec["volumeHealth"] = json!({
        "every": every,
        "podTemplate": {"spec": {"containers": [{
            "name": "check", "image": "checker:1",
            "args": ["{{ handle }}", "{{ mutableParams | tojson }}"],
        }]}},
    });
    spec
}

/// A health check pod that writes `condition` and completes.
fn checked(dir: &Path, condition: &str) -> Vec<Value> {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("condition"), condition).unwrap();
    done(dir)
}

/// How many health check pods were created.
fn health_checks_created(server: &ApiServer) -> usize {
    let created = server.created_pods();
    created
        .iter()
        .filter(|pod| pod["metadata"]["labels"][LABEL_PHASE] == "health")
        .count()
}

/// The condition NodeGetVolumeStats reports of the scenario's volume.
async fn condition(node: &PodNode) -> Result<Option<pav_sdk::VolumeCondition>, Error> {
    let mut req = pav_sdk::build::stats("vol-1", TARGET, pav_sdk::VolumeMode::Filesystem);
    req.measured = Some(pav_sdk::VolumeStats::default());
    pav_sdk::Stats::stats(node, req)
        .await
        .map(|stats| stats.condition)
}

/// The scenario's volume staged, with a health check every hour whose pod
/// reports 3 unreadable blocks.
async fn staged_with_hourly_check() -> (ApiServer, PodNode, tempfile::TempDir) {
    let (server, node, pods_dir) = scenario_of(checked_spec("1h"), |phase, dir| match phase {
        "staging" => ready(dir),
        "health" => checked(dir, "abnormal: true\nmessage: 3 blocks unreadable\n"),
        other => panic!("a {other:?} pod on the node"),
    });
    node.stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    (server, node, pods_dir)
}

#[tokio::test]
async fn a_staged_volume_is_checked_by_a_pod_on_its_node_at_most_every_interval() {
    let (server, node, pods_dir) = staged_with_hourly_check().await;
    let staging = server.created_pods()[0].clone();
    let abnormal = condition(&node).await.unwrap().unwrap();
    assert!(abnormal.abnormal);
    assert_eq!(abnormal.message, "3 blocks unreadable");
    let created = server.created_pods();
    assert_eq!(created.len(), 2);
    let check = &created[1];
    assert_eq!(check["metadata"]["labels"][LABEL_PHASE], "health");
    assert_eq!(check["spec"]["nodeName"], "n1");
    assert_eq!(
        check["spec"]["containers"][0]["args"],
        json!(["vol-1", "{}"])
    );
    // The staged volume is at /pav/volume, from the staging pod's directory.
    let staged = format!(
        "/var/lib/pav/pods/{}/volume",
        staging["metadata"]["name"].as_str().unwrap()
    );
    let volumes = check["spec"]["volumes"].as_array().unwrap();
    assert!(
        volumes.iter().any(|v| v["hostPath"]["path"] == staged),
        "{volumes:#?}"
    );
    // The pod and its directory are gone; the answer stands for an hour:
    // asked again, no pod and no request.
    assert!(
        server
            .pods()
            .iter()
            .all(|p| p["metadata"]["name"] != check["metadata"]["name"])
    );
    let check_dir = pods_dir
        .path()
        .join(check["metadata"]["name"].as_str().unwrap());
    assert!(!check_dir.exists());
    let before = asked(&server).len();
    assert_eq!(condition(&node).await.unwrap(), Some(abnormal));
    assert_eq!(server.created_pods().len(), 2);
    assert_eq!(
        asked(&server).len(),
        before,
        "{:#?}",
        &asked(&server)[before..]
    );
}

/// An answer stands for `every` and no longer: once the clock has passed
/// it, the next stats call checks again.
#[tokio::test]
async fn a_staged_volume_is_checked_again_once_its_interval_has_passed() {
    let (server, node, _dir) = staged_with_hourly_check().await;
    let checks = || health_checks_created(&server);
    condition(&node).await.unwrap();
    assert_eq!(checks(), 1);
    tokio::time::pause();
    tokio::time::advance(std::time::Duration::from_secs(59 * 60)).await;
    condition(&node).await.unwrap();
    assert_eq!(checks(), 1, "the answer stands for an hour");
    tokio::time::advance(std::time::Duration::from_secs(2 * 60)).await;
    tokio::time::resume();
    condition(&node).await.unwrap();
    assert_eq!(checks(), 2, "checked again after the hour");
}

/// While the node runs as many checks as it may, a volume due a check
/// starts no pod: it keeps its last answer (none before the first), even
/// one that no longer stands, and is checked once a check may start.
#[tokio::test]
async fn a_volume_due_a_check_while_the_node_runs_its_most_keeps_its_last_answer() {
    let (server, node, _dir) = staged_with_hourly_check().await;
    let checks = || health_checks_created(&server);
    let all = u32::try_from(super::HEALTH_CHECKS_AT_ONCE).unwrap();
    let busy = node.health_checks.try_acquire_many(all).unwrap();
    assert_eq!(condition(&node).await.unwrap(), None);
    assert_eq!(checks(), 0, "no check pod while the node runs its most");
    drop(busy);
    let abnormal = condition(&node).await.unwrap().unwrap();
    assert!(abnormal.abnormal);
    assert_eq!(checks(), 1);

    tokio::time::pause();
    tokio::time::advance(std::time::Duration::from_secs(61 * 60)).await;
    let busy = node.health_checks.try_acquire_many(all).unwrap();
    assert_eq!(condition(&node).await.unwrap(), Some(abnormal));
    assert_eq!(
        checks(),
        1,
        "the answer no longer stands, but no check may start"
    );
    drop(busy);
    tokio::time::resume();
    condition(&node).await.unwrap();
    assert_eq!(checks(), 2, "checked once a check may start");
}

/// A check cancelled mid-run (kubelet gave up on NodeGetVolumeStats)
/// keeps its pod for the next call of its round, which never comes once
/// the volume is unstaged: the unstaging deletes it, with its directory.
#[tokio::test]
async fn a_check_left_running_goes_with_the_unstaging() {
    let (server, node, pods_dir) = scenario_of(checked_spec("1h"), |phase, dir| match phase {
        "staging" | "health" => ready(dir),
        "unstaging" => done(dir),
        other => panic!("a {other:?} pod on the node"),
    });
    node.stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    let is_check = |pod: &Value| pod["metadata"]["labels"][LABEL_PHASE] == "health";
    // Cancelled once its pod exists, as kubelet's deadline would.
    let checking = condition(&node);
    tokio::pin!(checking);
    while !server.pods().iter().any(is_check) {
        tokio::select! {
            ended = &mut checking => panic!("the check never ends: {ended:?}"),
            () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
        }
    }
    assert_eq!(server.pods().iter().filter(|p| is_check(p)).count(), 1);

    node.unstage_at("vol-1", Path::new(TARGET))
        .await
        .expect("unstaging");
    let left = server.pods();
    assert!(!left.iter().any(is_check), "{left:#?}");
    assert_eq!(std::fs::read_dir(pods_dir.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_failed_check_is_abnormal_with_its_message_and_a_silent_one_healthy() {
    let (server, node, _dir) = scenario_of(checked_spec("1h"), |phase, dir| match phase {
        "staging" => ready(dir),
        "health" => refused(dir),
        other => panic!("a {other:?} pod on the node"),
    });
    node.stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    let failed = condition(&node).await.unwrap().unwrap();
    assert!(failed.abnormal);
    assert!(
        failed.message.starts_with("health pod pav/"),
        "{}",
        failed.message
    );
    assert!(
        failed.message.ends_with("export /data is not shared"),
        "{}",
        failed.message
    );
    let events = events(&server);
    assert_eq!(events.len(), 1, "{events:#?}");
    let (reason, kind, object, note) = &events[0];
    assert_eq!(
        (reason.as_str(), kind.as_str(), object.as_str()),
        ("HealthCheckFailed", "PersistentVolumeClaim", "data")
    );
    assert_eq!(note, &failed.message);

    let (_server, node, _dir) = scenario_of(checked_spec("1h"), |phase, dir| match phase {
        "staging" => ready(dir),
        "health" => done(dir),
        other => panic!("a {other:?} pod on the node"),
    });
    node.stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    let condition = condition(&node).await.unwrap();
    assert_eq!(condition, Some(pav_sdk::VolumeCondition::healthy()));
}

#[tokio::test]
async fn without_a_health_check_the_staging_pod_reports_the_condition() {
    let (server, node, pods_dir) = scenario(ready, done);
    node.stage_for(&staging_request(), &client_info())
        .await
        .expect("staging");
    assert_eq!(
        condition(&node).await.unwrap(),
        None,
        "pav-csi answers healthy"
    );
    let staging = server.created_pods()[0].clone();
    let dir = pods_dir
        .path()
        .join(staging["metadata"]["name"].as_str().unwrap());
    std::fs::write(
        dir.join("condition"),
        "abnormal: true\nmessage: FUSE daemon lost its server",
    )
    .unwrap();
    let written = condition(&node).await.unwrap().unwrap();
    assert!(written.abnormal);
    assert_eq!(written.message, "FUSE daemon lost its server");
    std::fs::write(dir.join("condition"), "abnormal: maybe").unwrap();
    let error = condition(&node).await.unwrap_err();
    assert!(matches!(error, Error::Internal(_)), "{error}");
    let pod = format!("pav/{}", staging["metadata"]["name"].as_str().unwrap());
    assert!(
        error.to_string().contains(&format!(
            "{pod}: /pav/condition: abnormal: \"maybe\" is not true or false"
        )),
        "{error}"
    );
    assert_eq!(server.created_pods().len(), 1, "no health check pod");
}

#[tokio::test]
async fn staging_sees_the_publish_context_of_the_attach_pod() {
    let mut spec = spec();
    spec["volumeStaging"]["podTemplate"]["spec"]["containers"][0]["args"] =
        json!(["{{ publishContext.device | default('none') }}"]);
    let (server, node, _dir) = scenario_of(spec, |phase, dir| match phase {
        "staging" => ready(dir),
        other => panic!("a {other:?} pod on the node"),
    });
    let context: pav_sdk::Parameters = [("device".to_owned(), "/dev/loop7".to_owned())].into();
    let request = StagingRequest {
        publish_context: &context,
        ..staging_request()
    };
    node.stage_for(&request, &client_info())
        .await
        .expect("staging");
    let staging = &server.created_pods()[0];
    assert_eq!(
        staging["spec"]["containers"][0]["args"],
        json!(["/dev/loop7"])
    );
}

#[tokio::test]
async fn an_ephemeral_volume_is_staged_with_the_pods_attributes_and_unstaged_as_recorded() {
    let mut spec = spec();
    spec["volumeStaging"]["podTemplate"]["spec"]["containers"][0]["args"] = json!([
        "{{ handle }}",
        "{{ params.tier }}",
        "{{ capacity }}",
        "{{ 'ephemeral' if ephemeral and pvc is none else 'persistent' }}",
    ]);
    spec["volumeUnstaging"]["podTemplate"]["spec"]["containers"][0]["args"] =
        json!(["{{ handle }}", "{{ params.tier }}"]);
    let (server, node, pods_dir) = scenario_of(spec, |phase, dir| match phase {
        "staging" => ready(dir),
        "unstaging" => done(dir),
        other => panic!("a {other:?} pod on the node"),
    });
    let attributes: pav_sdk::Parameters = [("tier".to_owned(), "fast".to_owned())].into();
    let request = StagingRequest {
        handle: "csi-0123",
        ephemeral: Some((attributes, Some(64 << 20))),
        ..staging_request()
    };
    node.stage_for(&request, &client_info())
        .await
        .expect("staging");
    let staging = server.created_pods()[0].clone();
    assert_eq!(
        staging["spec"]["containers"][0]["args"],
        json!(["csi-0123", "fast", "67108864", "ephemeral"])
    );
    let before = server.requests().len();
    node.unstage_at("csi-0123", Path::new(TARGET))
        .await
        .expect("unstaging");
    let unstaging = &server.created_pods()[1];
    assert_eq!(unstaging["metadata"]["labels"][LABEL_PHASE], "unstaging");
    assert_eq!(
        unstaging["spec"]["containers"][0]["args"],
        json!(["csi-0123", "fast"]),
        "rendered at staging"
    );
    let asked_claims = server.requests()[before..]
        .iter()
        .any(|r| r.path.contains("persistentvolumeclaims"));
    assert!(!asked_claims, "an ephemeral volume has no claim to read");
    assert_eq!(std::fs::read_dir(pods_dir.path()).unwrap().count(), 0);
}

/// The staging path of the scenario's volume (staged per node, the staging
/// pod is keyed by it). The scenarios cannot mount (no root), so it is a
/// mount point already, as after a first staging moved the volume there
/// from the pod's `/pav/volume`: the move is found done. The move itself
/// is e2e/tests/local_volumes.rs's (kubelet unstages the volume).
const STAGING_PATH: &str = "/proc";

/// A watch of PersistentVolumes that has listed `volumes`.
fn volumes_watched(volumes: Vec<Value>) -> Store<PersistentVolume> {
    use kube::runtime::watcher::Event;
    let (store, mut writer) = kube::runtime::reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for volume in volumes {
        writer.apply_watcher_event(&Event::InitApply(serde_json::from_value(volume).unwrap()));
    }
    writer.apply_watcher_event(&Event::InitDone);
    store
}

/// The scenario's node plugin staging per node (`stagingPer: Node`), the
/// watch having listed the scenario's volume.
fn per_node(staging: Pods, unstaging: Pods) -> (ApiServer, PodNode, tempfile::TempDir) {
    let (server, mut node, pods_dir) = scenario(staging, unstaging);
    node.staging = Staging::PerNode(volumes_watched(vec![volume()]));
    (server, node, pods_dir)
}

/// The watch of PersistentVolumes of a node plugin made by [`per_node`].
fn watched(node: &PodNode) -> &Store<PersistentVolume> {
    match &node.staging {
        Staging::PerNode(volumes) => volumes,
        Staging::PerPod => panic!("a node plugin staging per pod watches no volumes"),
    }
}

/// NodeStageVolume's request: the staging path, no pod.
fn node_staging_request() -> StagingRequest<'static> {
    StagingRequest {
        target_path: Path::new(STAGING_PATH),
        ..staging_request()
    }
}

#[tokio::test]
async fn staged_per_node_the_volume_is_found_by_its_handle_and_its_pod_names_no_client() {
    let (server, node, pods_dir) = per_node(ready, done);
    let volumes = watched(&node);
    let staged = node
        .stage_on_node(&node_staging_request(), volumes)
        .await
        .expect("staging");
    let created = server.created_pods();
    assert_eq!(created.len(), 1);
    let staging = &created[0];
    assert_eq!(staging["spec"]["containers"][0]["args"], json!(["vol-1"]));
    let annotations = &staging["metadata"]["annotations"];
    assert_eq!(annotations[ANNOTATION_CLAIM], "apps/data");
    assert_eq!(annotations[crate::pods::ANNOTATION_TARGET], STAGING_PATH);
    assert!(
        annotations.get(ANNOTATION_CLIENT).is_none(),
        "{annotations}"
    );
    // Where health checks and node expansion find the moved volume.
    assert_eq!(annotations[crate::pods::ANNOTATION_STAGED_AT], STAGING_PATH);
    let parsed: Pod = serde_json::from_value(staging.clone()).unwrap();
    let moved = crate::pods::StagedVolume::of(&parsed);
    assert_eq!(moved.host_path, STAGING_PATH);
    assert_eq!(
        staging["metadata"]["labels"][LABEL_VOLUME],
        crate::pods::staging_label("vol-1", STAGING_PATH)
    );
    assert_eq!(staged.path, Path::new(STAGING_PATH));
    assert!(pods_dir.path().join(name(staging)).join("volume").is_dir());
    // No client pod to read, and the volume comes from the watch.
    assert_eq!(
        asked(&server),
        [
            format!("GET {CLAIM}"),
            format!("GET {NODE}"),
            format!("POST {PODS_OF_PAV}"),
        ]
    );

    // kubelet asks for a pod's stats at its publish target, naming the
    // staging path, by which the staging pod is found.
    let mut stats = pav_sdk::build::stats("vol-1", TARGET, pav_sdk::VolumeMode::Filesystem);
    stats.measured = Some(pav_sdk::VolumeStats::default());
    let unnamed = pav_sdk::Stats::stats(&node, stats.clone())
        .await
        .unwrap_err();
    assert!(matches!(unnamed, Error::NotFound(_)), "{unnamed:?}");
    stats.staging_path = Some(STAGING_PATH.into());
    pav_sdk::Stats::stats(&node, stats)
        .await
        .expect("the stats of the volume staged for the node");

    node.unstage_at("vol-1", Path::new(STAGING_PATH))
        .await
        .expect("unstaging");
    let phases: Vec<Value> = (server.created_pods().iter())
        .map(|p| p["metadata"]["labels"][LABEL_PHASE].clone())
        .collect();
    assert_eq!(phases, [json!("staging"), json!("unstaging")]);
    let left: Vec<String> = server.pods().iter().map(name).collect();
    assert_eq!(left, ["client"], "the staging pod let go");
}

#[tokio::test]
async fn staged_per_node_a_failure_is_reported_on_the_claim() {
    let (server, node, _pods_dir) = per_node(refused, done);
    let volumes = watched(&node);
    let failure = node
        .stage_on_node(&node_staging_request(), volumes)
        .await
        .unwrap_err();
    assert!(
        matches!(failure, StageError::Failed { undo: None, .. }),
        "{failure:?}"
    );
    let reported = events(&server);
    assert_eq!(reported.len(), 1, "{reported:?}");
    let (reason, kind, name, note) = &reported[0];
    assert_eq!(
        (&reason[..], &kind[..], &name[..]),
        ("StagingFailed", "PersistentVolumeClaim", "data")
    );
    assert_eq!(note, &pav_csi::error_chain(&failure));
}

#[tokio::test]
async fn staged_per_node_a_handle_of_no_claimed_volume_is_not_found_and_stages_nothing() {
    let (server, node, _pods_dir) = per_node(ready, done);
    let other = volumes_watched(vec![volume(), {
        let mut unbound = volume();
        unbound["metadata"]["name"] = json!("pv-2");
        unbound["spec"]["csi"]["volumeHandle"] = json!("vol-2");
        unbound["spec"]["claimRef"] = Value::Null;
        unbound
    }]);
    // A handle the watch has not seen is looked for in a list too.
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    for handle in ["vol-2", "vol-3"] {
        let request = StagingRequest {
            handle,
            ..node_staging_request()
        };
        let failure = node.stage_on_node(&request, &other).await.unwrap_err();
        assert!(
            matches!(failure, StageError::Unclaimed { .. }),
            "{failure:?}"
        );
        assert!(matches!(Error::from(failure), Error::NotFound(_)));
    }
    // A claim of the same name but another uid is not the volume's.
    server.route(
        Method::GET,
        CLAIM,
        (200, {
            let mut replaced = claim();
            replaced["metadata"]["uid"] = json!("u-other");
            replaced
        }),
    );
    let failure = node
        .stage_on_node(&node_staging_request(), &other)
        .await
        .unwrap_err();
    assert!(
        matches!(failure, StageError::Unclaimed { .. }),
        "{failure:?}"
    );
    assert!(server.created_pods().is_empty());
    assert!(events(&server).is_empty());
}

#[tokio::test]
async fn a_publish_without_a_pod_is_refused_when_staging_per_pod() {
    let (server, node, _pods_dir) = scenario(ready, done);
    let request = pav_sdk::build::stage(
        "vol-1",
        "n1",
        PathBuf::from(TARGET),
        pav_sdk::VolumeMode::Filesystem,
    );
    let error = node.stage(request).await.unwrap_err();
    assert!(matches!(error, Error::FailedPrecondition(_)), "{error:?}");
    assert!(server.created_pods().is_empty());
}

#[tokio::test]
async fn staged_per_node_a_volume_the_watch_has_not_seen_yet_is_listed() {
    let (server, node, _pods_dir) = per_node(ready, done);
    server.route(
        Method::GET,
        "/api/v1/persistentvolumes",
        list("PersistentVolume", vec![volume()]),
    );
    let not_yet = volumes_watched(vec![]);
    node.stage_on_node(&node_staging_request(), &not_yet)
        .await
        .expect("staging");
    assert_eq!(
        asked(&server),
        [
            "GET /api/v1/persistentvolumes".to_owned(),
            format!("GET {CLAIM}"),
            format!("GET {NODE}"),
            format!("POST {PODS_OF_PAV}"),
        ]
    );
}
