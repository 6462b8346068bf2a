//! Reconciles against the fake API server
//! ([`fixtures`](crate::csi::fixtures)): what the operator applies,
//! deletes and writes for one PavProvisioner.

use super::*;
use crate::csi::fixtures::{ApiServer, Logged, assert_golden, list};
use http::Method;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use serde_json::{Value, json};

const PROVISIONER: &str = "/apis/pav.albertofaria.github.io/v1alpha1/pavprovisioners/p";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
/// Where the controller looks for a driver's staging pods (every namespace).
const STAGING_PODS: &str = "/api/v1/pods";
/// Where the controller looks for a driver's node plugin bindings.
const ROLE_BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/rolebindings";

fn provisioner(spec: Value, metadata: Value) -> PavProvisioner {
    let mut object = json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1", "kind": "PavProvisioner",
        "metadata": {"name": "p", "uid": "u-p", "generation": 3, "resourceVersion": "7"},
        "spec": spec,
    });
    crate::csi::fixtures::merge(&mut object, &json!({ "metadata": metadata }));
    serde_json::from_value(object).unwrap()
}

fn valid() -> Value {
    json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": {"capacity": "{{ requestedMinCapacity }}"},
        "volumeStaging": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    })
}

/// Stores that have listed nothing (the watches' first lists are
/// done), as the controller's watches give them.
fn empty_stores() -> Stores {
    stores_with(vec![])
}

/// Stores that have listed `volumes` (slim, as the controller keeps
/// them) and nothing else.
fn stores_with(volumes: Vec<PersistentVolume>) -> Stores {
    fn listed<K>(objects: Vec<K>) -> Store<K>
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(object));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        store
    }
    Stores {
        deployments: listed(vec![]),
        daemon_sets: listed(vec![]),
        csi_drivers: listed(vec![]),
        volumes: listed(volumes),
    }
}

/// The fake: every PATCH of the provisioner answers `p`, every other
/// PATCH (server-side apply) answers the applied object with
/// `statuses` merged in by kind; events are accepted.
fn scenario(p: &PavProvisioner, statuses: Value) -> (ApiServer, Arc<Context>) {
    scenario_with(p, statuses, empty_stores())
}

/// [`scenario`] with `stores` as the controller's watches filled them.
fn scenario_with(p: &PavProvisioner, statuses: Value, stores: Stores) -> (ApiServer, Arc<Context>) {
    let (server, client) = ApiServer::start();
    let object = serde_json::to_value(p).unwrap();
    server.on(move |r: &Logged| {
        if r.method != Method::PATCH {
            return None;
        }
        if r.path.starts_with(PROVISIONER) {
            return Some((200, object.clone()));
        }
        let mut applied = r.body.clone().unwrap_or_default();
        let kind = applied["kind"].as_str().unwrap_or_default().to_owned();
        if let Some(status) = statuses.get(&kind) {
            applied["status"] = status.clone();
        }
        Some((200, applied))
    });
    server.on(|r: &Logged| {
        (r.method == Method::POST && r.path == EVENTS)
            .then(|| (201, r.body.clone().unwrap_or_default()))
    });
    // No staged volumes, no node plugin bindings but those applied.
    server.route(Method::GET, STAGING_PODS, list("Pod", vec![]));
    server.route(Method::GET, ROLE_BINDINGS, list("RoleBinding", vec![]));
    let context = Context::new(
        client,
        Settings::default(),
        Arc::new(Metrics::default()),
        stores,
    );
    (server, Arc::new(context))
}

fn lines(server: &ApiServer) -> Vec<String> {
    server.requests().iter().map(Logged::line).collect()
}

fn body(server: &ApiServer, line: &str) -> Value {
    server
        .requests()
        .into_iter()
        .find(|r| r.line() == line)
        .and_then(|r| r.body)
        .unwrap_or_else(|| panic!("no {line}"))
}

fn path_of<K: Resource<DynamicType = ()>>(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", K::url_path(&(), namespace))
}

/// Every object of the driver, with the path it is applied at, in
/// the order of [`apply_driver`].
fn driver_objects(p: &PavProvisioner) -> Vec<(String, Value)> {
    let objects = driver::objects(p, &Settings::default());
    let ns = Some("pav");
    let mut out = vec![(
        path_of::<CSIDriver>(None, &objects.csi_driver.name_any()),
        serde_json::to_value(&objects.csi_driver).unwrap(),
    )];
    for account in &objects.service_accounts {
        out.push((
            path_of::<ServiceAccount>(ns, &account.name_any()),
            serde_json::to_value(account).unwrap(),
        ));
    }
    for binding in &objects.cluster_role_bindings {
        out.push((
            path_of::<ClusterRoleBinding>(None, &binding.name_any()),
            serde_json::to_value(binding).unwrap(),
        ));
    }
    for binding in &objects.role_bindings {
        out.push((
            path_of::<RoleBinding>(ns, &binding.name_any()),
            serde_json::to_value(binding).unwrap(),
        ));
    }
    out.push((
        path_of::<Deployment>(ns, &objects.deployment.name_any()),
        serde_json::to_value(&objects.deployment).unwrap(),
    ));
    out.push((
        path_of::<DaemonSet>(ns, &objects.daemon_set.name_any()),
        serde_json::to_value(&objects.daemon_set).unwrap(),
    ));
    out.push((
        path_of::<PodDisruptionBudget>(ns, &objects.disruption_budget.name_any()),
        serde_json::to_value(&objects.disruption_budget).unwrap(),
    ));
    out
}

#[tokio::test]
async fn a_new_provisioner_gets_the_finalizer_then_its_driver_and_a_ready_status() {
    let p = provisioner(valid(), json!({}));
    let (server, ctx) = scenario(
        &p,
        json!({
            "Deployment": {"availableReplicas": 1},
            "DaemonSet": {"numberReady": 2, "desiredNumberScheduled": 2,
                          "currentNumberScheduled": 2, "numberMisscheduled": 0},
        }),
    );
    // First the finalizer, and nothing else.
    reconcile(Arc::new(p.clone()), ctx.clone()).await.unwrap();
    assert_eq!(lines(&server), [format!("PATCH {PROVISIONER}")]);
    let patch = body(&server, &format!("PATCH {PROVISIONER}"));
    assert!(
        patch
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["op"] == "add" && op["value"] == json!([FINALIZER])),
        "{patch}"
    );

    // Then the driver, server-side applied, and the status.
    let p = provisioner(valid(), json!({"finalizers": [FINALIZER]}));
    let before = server.requests().len();
    reconcile(Arc::new(p.clone()), ctx).await.unwrap();
    let requests = server.requests().split_off(before);
    let applied: Vec<Value> = requests
        .iter()
        .filter(|r| r.method == Method::PATCH && !r.path.starts_with(PROVISIONER))
        .map(|r| json!({"path": r.path, "object": r.body}))
        .collect();
    // Each object at its path, in apply order, as checked by hand.
    assert_golden("src/operator/golden/driver-objects.json", &json!(applied));
    assert!(
        requests
            .iter()
            .filter(|r| r.method == Method::PATCH && !r.path.starts_with(PROVISIONER))
            .all(|r| r.query.contains("fieldManager=pav-controller")
                && r.query.contains("force=true")),
        "{requests:#?}"
    );
    let others: Vec<String> = requests
        .iter()
        .filter(|r| r.method != Method::PATCH || r.path.starts_with(PROVISIONER))
        .map(Logged::line)
        .collect();
    assert_eq!(
        others,
        [
            // Where its staged volumes' pods are (none), then, between
            // the bindings and the Deployment, its bindings elsewhere.
            format!("GET {STAGING_PODS}"),
            format!("GET {ROLE_BINDINGS}"),
            format!("POST {EVENTS}"),
            format!("PATCH {PROVISIONER}/status")
        ]
    );
    let status = body(&server, &format!("PATCH {PROVISIONER}/status"))["status"].clone();
    assert_eq!(status["observedGeneration"], 3);
    assert_eq!(status["volumes"], 0);
    let ready = &status["conditions"][0];
    assert_eq!(ready["type"], READY);
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], reason::DRIVER_READY);
    assert_eq!(
        ready["message"],
        "CSI driver p: controller 1/2 available, node plugin ready on 2/2 nodes"
    );
    let event = body(&server, &format!("POST {EVENTS}"));
    assert_eq!(event["reason"], reason::DRIVER_READY);
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["regarding"]["name"], "p");
}

/// A controller image newer than its RBAC (an older chart's roles, until
/// the chart is upgraded): the objects it may not make yet are named in
/// `Ready` and a Warning event, and the driver is deployed without them.
#[tokio::test]
async fn objects_forbidden_by_older_rbac_are_named_and_the_driver_deployed_without_them() {
    let p = provisioner(valid(), json!({"finalizers": [FINALIZER]}));
    let (server, ctx) = scenario(
        &p,
        json!({
            "Deployment": {"availableReplicas": 1},
            "DaemonSet": {"numberReady": 1, "desiredNumberScheduled": 1,
                          "currentNumberScheduled": 1, "numberMisscheduled": 0},
        }),
    );
    let budgets = path_of::<PodDisruptionBudget>(Some("pav"), "pav-p-controller");
    let forbidden = budgets.clone();
    server.on(move |r: &Logged| {
        (r.method == Method::PATCH && r.path == forbidden).then(|| {
            (403, json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                "reason": "Forbidden",
                "message": "poddisruptionbudgets.policy \"pav-p-controller\" is forbidden: User \"system:serviceaccount:pav:pav-controller\" cannot patch resource \"poddisruptionbudgets\"",
            }))
        })
    });
    // A binding to a role the older installation lacks: the API server
    // answers 404, naming the role.
    let node_binding = path_of::<RoleBinding>(Some("pav"), "pav-p-node");
    server.on(move |r: &Logged| {
        (r.method == Method::PATCH && r.path == node_binding).then(|| {
            (404, json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                "reason": "NotFound",
                "message": "rolebindings.rbac.authorization.k8s.io \"pav-csi-node-pods\" not found",
                "details": {"name": "pav-csi-node-pods", "group": "rbac.authorization.k8s.io", "kind": "rolebindings"},
            }))
        })
    });
    reconcile(Arc::new(p), ctx).await.unwrap();
    let applied: Vec<String> = lines(&server)
        .into_iter()
        .filter(|l| l.starts_with("PATCH") && !l.contains(PROVISIONER))
        .collect();
    let everything: Vec<String> = (driver_objects(&provisioner(valid(), json!({}))).into_iter())
        .map(|(path, _)| format!("PATCH {path}"))
        .collect();
    assert_eq!(applied, everything, "every object tried");
    let status = body(&server, &format!("PATCH {PROVISIONER}/status"))["status"].clone();
    let ready = &status["conditions"][0];
    assert_eq!(ready["status"], "True", "the driver works without it");
    assert_eq!(ready["reason"], reason::OBJECTS_FORBIDDEN);
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("RoleBinding pav/pav-p-node, PodDisruptionBudget pav/pav-p-controller")
            && message.contains("upgrade"),
        "{message}"
    );
    let event = body(&server, &format!("POST {EVENTS}"));
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["note"], message);
}

/// Node phases whose pods' namespace is a template: the node plugin is
/// bound where it renders for each volume (from its claim's namespace),
/// and where staging pods and the unstaging pods they recorded are; a
/// binding where none go any more is deleted.
#[tokio::test]
async fn the_node_plugin_is_bound_where_templates_put_its_pods() {
    let mut spec = valid();
    spec["volumeStaging"]["podTemplate"]["metadata"] =
        json!({"namespace": "{{ pvc.metadata.namespace }}-stage"});
    let p = provisioner(spec, json!({"finalizers": [FINALIZER]}));
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pvc-1", "uid": "u-pv1"},
        "spec": {"csi": {"driver": "p", "volumeHandle": "h1"},
                 "capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                 "claimRef": {"namespace": "apps", "name": "data"}},
    });
    let mut slim: PersistentVolume = serde_json::from_value(volume.clone()).unwrap();
    crate::cached::slim_volume(&mut slim);
    let (server, ctx) = scenario_with(&p, json!({}), stores_with(vec![slim]));
    server.route(Method::GET, PVS_1, (200, volume));
    server.route(
        Method::GET,
        "/api/v1/namespaces/apps/persistentvolumeclaims/data",
        (200, json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "apps", "uid": "u-data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
        })),
    );
    // A volume staged while the spec put its pods in `old`, which
    // recorded an unstaging pod for `older`.
    let staging = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pav-staging-x", "namespace": "old", "annotations": {
            crate::pods::ANNOTATION_UNSTAGING: r#"{"metadata":{"namespace":"older"},"spec":{}}"#,
        }},
    });
    server.route(Method::GET, STAGING_PODS, list("Pod", vec![staging]));
    // A binding where no pod goes.
    let stale = driver::node_pods_binding(&p, &Settings::default(), "gone");
    server.route(
        Method::GET,
        ROLE_BINDINGS,
        list("RoleBinding", vec![serde_json::to_value(stale).unwrap()]),
    );

    reconcile(Arc::new(p.clone()), ctx.clone()).await.unwrap();
    let node = driver::node_name("p");
    let bound: Vec<String> = lines(&server)
        .into_iter()
        .filter(|l| l.contains("/rolebindings/") && l.ends_with(&node))
        .collect();
    assert_eq!(
        bound,
        [
            format!(
                "PATCH {}",
                path_of::<RoleBinding>(Some("apps-stage"), &node)
            ),
            format!("PATCH {}", path_of::<RoleBinding>(Some("old"), &node)),
            format!("PATCH {}", path_of::<RoleBinding>(Some("older"), &node)),
            format!("DELETE {}", path_of::<RoleBinding>(Some("gone"), &node)),
        ]
    );

    // Evaluated once per volume and spec: the next reconcile reads no
    // volume or claim again.
    let before = server.requests().len();
    ctx.applied().clear();
    reconcile(Arc::new(p), ctx).await.unwrap();
    let again: Vec<String> = server.requests()[before..]
        .iter()
        .map(Logged::line)
        .collect();
    assert!(
        !again
            .iter()
            .any(|l| l.contains("pvc-1") || l.contains("/data")),
        "{again:#?}"
    );
}

#[tokio::test]
async fn an_invalid_provisioner_deploys_nothing_and_says_why() {
    let mut spec = valid();
    spec["volumeStaging"]["podTemplate"]["spec"]["containers"][0]["image"] = json!("{{ oops");
    let p = provisioner(spec, json!({"finalizers": [FINALIZER]}));
    let (server, ctx) = scenario(&p, json!({}));
    reconcile(Arc::new(p), ctx).await.unwrap();
    assert_eq!(
        lines(&server),
        [
            format!("POST {EVENTS}"),
            format!("PATCH {PROVISIONER}/status")
        ]
    );
    let status = body(&server, &format!("PATCH {PROVISIONER}/status"))["status"].clone();
    let ready = &status["conditions"][0];
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], reason::INVALID_SPEC);
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("spec.volumeStaging.podTemplate.spec.containers[0].image"),
        "{message}"
    );
    let event = body(&server, &format!("POST {EVENTS}"));
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["note"], message);
}

/// A provisioner being deleted: its finalizer and a deletion time.
fn deleted() -> PavProvisioner {
    provisioner(
        valid(),
        json!({"finalizers": [FINALIZER], "deletionTimestamp": "2026-01-01T00:00:00Z"}),
    )
}

const PVS: &str = "/api/v1/persistentvolumes";
const PVS_1: &str = "/api/v1/persistentvolumes/pvc-1";
const SNAPSHOT_CONTENTS: &str = "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents";

/// Lists of what could use the provisioner: `pvs` volumes, no
/// classes, claims, pods or VolumeSnapshotContents; and the node plugin's
/// binding in namespace `storage`, where a template put its pods.
fn uses(server: &ApiServer, pvs: Vec<Value>) {
    let binding = driver::node_pods_binding(&deleted(), &Settings::default(), "storage");
    server.route(
        Method::GET,
        ROLE_BINDINGS,
        list("RoleBinding", vec![serde_json::to_value(binding).unwrap()]),
    );
    server.route(Method::GET, PVS, list("PersistentVolume", pvs));
    server.route(
        Method::GET,
        "/apis/storage.k8s.io/v1/storageclasses",
        list("StorageClass", vec![]),
    );
    server.route(
        Method::GET,
        "/api/v1/persistentvolumeclaims",
        list("PersistentVolumeClaim", vec![]),
    );
    server.route(Method::GET, "/api/v1/pods", list("Pod", vec![]));
    server.route(
        Method::GET,
        "/api/v1/namespaces/pav/pods",
        list("Pod", vec![]),
    );
    server.route(
        Method::GET,
        SNAPSHOT_CONTENTS,
        list("VolumeSnapshotContent", vec![]),
    );
}

/// A VolumeSnapshotContent csi-snapshotter recorded for `driver`.
fn snapshot_content(name: &str, driver: &str) -> Value {
    json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
        "metadata": {"name": name},
        "spec": {"driver": driver, "deletionPolicy": "Delete",
                 "source": {"volumeHandle": "h"},
                 "volumeSnapshotRef": {"namespace": "ns", "name": name}},
    })
}

/// The requests of a deletion up to the counting of what uses the
/// provisioner.
fn counting() -> Vec<String> {
    vec![
        format!("GET {PVS}"),
        "GET /apis/storage.k8s.io/v1/storageclasses".to_owned(),
        "GET /api/v1/persistentvolumeclaims".to_owned(),
        "GET /api/v1/pods".to_owned(),
        format!("GET {SNAPSHOT_CONTENTS}"),
    ]
}

#[tokio::test]
async fn deletion_is_refused_while_volumes_exist() {
    let p = deleted();
    let (server, ctx) = scenario(&p, json!({}));
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pvc-1"},
        "spec": {"csi": {"driver": "p", "volumeHandle": "h"}},
    });
    uses(&server, vec![volume]);
    let error = reconcile(Arc::new(p), ctx).await.unwrap_err();
    let finalizer::Error::CleanupFailed(Error::InUse(in_use)) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        (
            in_use.volumes,
            in_use.claims,
            in_use.staged,
            in_use.snapshots
        ),
        (1, 0, 0, 0)
    );
    let mut expected = counting();
    expected.extend([
        format!("POST {EVENTS}"),
        format!("PATCH {PROVISIONER}/status"),
    ]);
    assert_eq!(lines(&server), expected);
    let status = body(&server, &format!("PATCH {PROVISIONER}/status"))["status"].clone();
    let ready = &status["conditions"][0];
    assert_eq!(ready["reason"], reason::DELETION_BLOCKED);
    assert_eq!(ready["message"], in_use.to_string());
    assert_eq!(status["volumes"], 1);
    let event = body(&server, &format!("POST {EVENTS}"));
    assert_eq!(event["reason"], reason::DELETION_BLOCKED);
    assert_eq!(event["type"], "Warning");
}

#[tokio::test]
async fn deletion_is_refused_while_snapshots_of_its_driver_exist() {
    let p = deleted();
    let (server, ctx) = scenario(&p, json!({}));
    uses(&server, vec![]);
    server.route(
        Method::GET,
        SNAPSHOT_CONTENTS,
        list(
            "VolumeSnapshotContent",
            vec![
                snapshot_content("snapcontent-1", "p"),
                snapshot_content("snapcontent-2", "other"),
            ],
        ),
    );
    let error = reconcile(Arc::new(p), ctx).await.unwrap_err();
    let finalizer::Error::CleanupFailed(Error::InUse(in_use)) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        (
            in_use.volumes,
            in_use.claims,
            in_use.staged,
            in_use.snapshots
        ),
        (0, 0, 0, 1)
    );
    let mut expected = counting();
    expected.extend([
        format!("POST {EVENTS}"),
        format!("PATCH {PROVISIONER}/status"),
    ]);
    assert_eq!(lines(&server), expected);
    let message = "PavProvisioner p is still used by 1 VolumeSnapshotContent; \
                   delete them before the PavProvisioner can be deleted";
    let status = body(&server, &format!("PATCH {PROVISIONER}/status"))["status"].clone();
    let ready = &status["conditions"][0];
    assert_eq!(ready["reason"], reason::DELETION_BLOCKED);
    assert_eq!(ready["message"], message);
    let event = body(&server, &format!("POST {EVENTS}"));
    assert_eq!(event["reason"], reason::DELETION_BLOCKED);
    assert_eq!(event["note"], message);
}

/// The requests of deleting provisioner `p`'s driver, once nothing uses
/// it, through the finalizer's removal.
fn removal() -> Vec<String> {
    let controller = driver::controller_name("p");
    let node = driver::node_name("p");
    let ns = Some("pav");
    vec![
        format!("DELETE {}", path_of::<Deployment>(ns, &controller)),
        format!("DELETE {}", path_of::<DaemonSet>(ns, &node)),
        format!("DELETE {}", path_of::<RoleBinding>(ns, &controller)),
        format!("DELETE {}", path_of::<PodDisruptionBudget>(ns, &controller)),
        // The node plugin's bindings where its pods went.
        format!("GET {ROLE_BINDINGS}"),
        format!("DELETE {}", path_of::<RoleBinding>(Some("storage"), &node)),
        format!("DELETE {}", path_of::<ServiceAccount>(ns, &controller)),
        format!(
            "DELETE {}",
            path_of::<ClusterRoleBinding>(None, &controller)
        ),
        format!("DELETE {}", path_of::<ServiceAccount>(ns, &node)),
        format!("DELETE {}", path_of::<ClusterRoleBinding>(None, &node)),
        format!("DELETE {}", path_of::<CSIDriver>(None, "p")),
        // The CSI controller is gone: its sidecars' Leases may go.
        "GET /api/v1/namespaces/pav/pods".to_owned(),
        format!("DELETE {}", path_of::<Lease>(ns, "p")),
        format!("DELETE {}", path_of::<Lease>(ns, "external-resizer-p")),
        format!(
            "DELETE {}",
            path_of::<Lease>(ns, "external-snapshotter-leader-p")
        ),
        format!(
            "DELETE {}",
            path_of::<Lease>(ns, "external-attacher-leader-p")
        ),
        format!("DELETE {}", path_of::<Lease>(ns, "pav-populator-p")),
        // Then the finalizer.
        format!("PATCH {PROVISIONER}"),
    ]
}

#[tokio::test]
async fn an_unused_provisioner_loses_its_driver_lease_and_finalizer() {
    let p = deleted();
    let (server, ctx) = scenario(&p, json!({}));
    uses(&server, vec![]);
    reconcile(Arc::new(p), ctx).await.unwrap();
    let mut expected = counting();
    expected.extend(removal());
    assert_eq!(lines(&server), expected);
    let patch = body(&server, &format!("PATCH {PROVISIONER}"));
    assert!(
        patch
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"),
        "{patch}"
    );
}

#[tokio::test]
async fn without_the_snapshot_crds_a_provisioner_has_no_snapshots_and_is_deleted() {
    let p = deleted();
    let (server, ctx) = scenario(&p, json!({}));
    uses(&server, vec![]);
    // What the API server answers for a resource it does not serve.
    server.route(
        Method::GET,
        SNAPSHOT_CONTENTS,
        crate::csi::fixtures::status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    );
    reconcile(Arc::new(p), ctx).await.unwrap();
    let mut expected = counting();
    expected.extend(removal());
    assert_eq!(lines(&server), expected);
}

#[tokio::test]
async fn a_refused_snapshot_list_is_an_error_and_deletes_nothing() {
    let p = deleted();
    let (server, ctx) = scenario(&p, json!({}));
    uses(&server, vec![]);
    server.route(
        Method::GET,
        SNAPSHOT_CONTENTS,
        crate::csi::fixtures::status(403, "Forbidden", "cannot list volumesnapshotcontents"),
    );
    let error = reconcile(Arc::new(p), ctx).await.unwrap_err();
    assert!(
        matches!(
            &error,
            finalizer::Error::CleanupFailed(Error::Kube(kube::Error::Api(s))) if s.code == 403
        ),
        "{error:?}"
    );
    assert_eq!(lines(&server), counting());
}

#[tokio::test]
async fn a_binding_to_another_role_is_replaced_and_other_refusals_are_errors() {
    let p = provisioner(valid(), json!({"finalizers": [FINALIZER]}));
    let (server, ctx) = scenario(&p, json!({}));
    let controller = driver::controller_name("p");
    let binding = path_of::<ClusterRoleBinding>(None, &controller);
    let ours = driver_objects(&p)
        .into_iter()
        .find(|(path, _)| *path == binding)
        .unwrap()
        .1;
    // The binding made by an older pav binds a role of its own; the
    // API server refuses to change roleRef until it is deleted.
    let mut old = ours.clone();
    old["roleRef"]["name"] = json!("pav-p-controller-own");
    let deleted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (refusing, answering) = (deleted.clone(), binding.clone());
    server.on(move |r: &Logged| {
        if r.path != answering {
            return None;
        }
        let gone = refusing.load(std::sync::atomic::Ordering::SeqCst);
        match (r.method.clone(), gone) {
            (Method::PATCH, false) => Some(crate::csi::fixtures::status(
                422,
                "Invalid",
                "the binding may not change",
            )),
            (Method::GET, _) => Some((200, old.clone())),
            (Method::DELETE, _) => {
                refusing.store(true, std::sync::atomic::Ordering::SeqCst);
                Some((200, old.clone()))
            }
            _ => None,
        }
    });
    reconcile(Arc::new(p.clone()), ctx).await.unwrap();
    let about_binding: Vec<String> = lines(&server)
        .into_iter()
        .filter(|line| line.ends_with(&binding))
        .collect();
    assert_eq!(
        about_binding,
        [
            format!("PATCH {binding}"),
            format!("GET {binding}"),
            format!("DELETE {binding}"),
            format!("PATCH {binding}"),
        ]
    );

    // The same refusal of a binding that binds our role already is
    // not about roleRef: an error, and nothing deleted.
    let (server, ctx) = scenario(&p, json!({}));
    let answering = binding.clone();
    server.on(move |r: &Logged| {
        (r.path == answering).then(|| match r.method {
            Method::GET => (200, ours.clone()),
            _ => crate::csi::fixtures::status(422, "Invalid", "roleRef: something else"),
        })
    });
    let error = reconcile(Arc::new(p), ctx).await.unwrap_err();
    assert!(
        matches!(
            &error,
            finalizer::Error::ApplyFailed(Error::Kube(kube::Error::Api(s))) if s.code == 422
        ),
        "{error:?}"
    );
    assert!(
        !lines(&server).iter().any(|l| l.starts_with("DELETE")),
        "{:?}",
        lines(&server)
    );
}
