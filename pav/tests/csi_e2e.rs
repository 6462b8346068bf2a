//! CreateVolume / DeleteVolume through a real tonic client against the
//! `pav csi-controller` logic, talking to a real API server (and a kubelet
//! that runs the pods). Uses `$KUBECONFIG`: `#[ignore = "needs a cluster"]`,
//! run by `scripts/e2e` (`--include-ignored`); without a reachable cluster
//! it fails, saying why.
//!
//! The node plugin's collector runs in this process, so the test must run
//! on the cluster's (single) node, as root, like `scripts/cluster-up` sets up.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Namespace, Node, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeSpec, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use pav::csi::context::DriverContext;
use pav::csi::metrics::Metrics;
use pav::pods::{LABEL_PHASE, LABEL_VOLUME};
use pav_csi::csi;
use pav_templates::PavProvisioner;

const NAME: &str = "pav-csi-e2e";

/// The cluster of `$KUBECONFIG`; panics, saying why, without one.
async fn reachable() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!("KUBECONFIG is not set: run scripts/cluster-up, then scripts/e2e");
    }
    let client = Client::try_default()
        .await
        .unwrap_or_else(|e| panic!("no client from $KUBECONFIG: {e}"));
    let nodes: Api<Node> = Api::all(client.clone());
    match tokio::time::timeout(Duration::from_secs(10), nodes.list(&ListParams::default())).await {
        Ok(Ok(_)) => client,
        Ok(Err(e)) => panic!("the cluster of $KUBECONFIG does not answer: {e}"),
        Err(_) => panic!("the cluster of $KUBECONFIG does not answer within 10s"),
    }
}

async fn create<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating {}: {e}", object.name_any()),
    }
}

/// The CRD as `pav crd` prints it.
fn crd() -> CustomResourceDefinition {
    PavProvisioner::definition()
}

fn provisioner() -> PavProvisioner {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata: {{ name: {NAME} }}
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    podTemplate:
      spec:
        containers:
          - name: create
            image: docker.io/library/busybox:stable
            imagePullPolicy: IfNotPresent
            command:
              - sh
              - -c
              - |
                {{% if params.fail | default('') %}}
                echo 'backend said no' > /pav/error; exit 3
                {{% endif %}}
                echo vol-{{{{ pvc.metadata.name | tobash }}}} > /pav/handle
                echo {{{{ requestedMinCapacity }}}} > /pav/capacity
  volumeDeletion:
    podTemplate:
      spec:
        containers:
          - name: delete
            image: docker.io/library/busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "test {{{{ defaultHandle | tobash }}}} != ''"]
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: stage
            image: docker.io/library/busybox:stable
            command: [sh, -c, "mkdir -p /pav/volume"]
"#
    ))
    .unwrap()
}

fn pvc(name: &str, sc: &str) -> PersistentVolumeClaim {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{ name: {name}, namespace: default }}
spec:
  storageClassName: {sc}
  accessModes: [ReadWriteOnce]
  resources: {{ requests: {{ storage: 1Mi }} }}
"#
    ))
    .unwrap()
}

fn sc(name: &str, parameters: &[(&str, &str)]) -> StorageClass {
    StorageClass {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        provisioner: NAME.into(),
        parameters: Some(
            parameters
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        ),
        volume_binding_mode: Some("Immediate".into()),
        ..Default::default()
    }
}

fn create_request(claim: &str, parameters: &[(&str, &str)]) -> csi::CreateVolumeRequest {
    let mut params: HashMap<String, String> = parameters
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    params.insert("csi.storage.k8s.io/pvc/name".into(), claim.into());
    params.insert("csi.storage.k8s.io/pvc/namespace".into(), "default".into());
    csi::CreateVolumeRequest {
        name: format!("pvc-{claim}"),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 20,
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
        parameters: params,
        ..Default::default()
    }
}

/// The label value of [`PodLog`]'s sentinel pods.
const SENTINEL: &str = "pav-csi-e2e-sentinel";

/// Every pod of one claim (label `volume=<uid>` in namespace `pav`) that
/// existed since the log started, however briefly: a watch, and a sentinel
/// pod to know the watch has caught up (the API server sends a watch's
/// events in order, so once the sentinel's arrives, every pod created
/// before it has been seen).
struct PodLog {
    api: Api<Pod>,
    /// uid to (name, phase label).
    seen: Arc<std::sync::Mutex<BTreeMap<String, (String, String)>>>,
    watch: tokio::task::JoinHandle<()>,
    sentinels: usize,
}

impl PodLog {
    /// Starts watching the pods of claim `uid`; returns once the watch has
    /// listed what exists.
    async fn start(client: &Client, uid: &str) -> PodLog {
        let api: Api<Pod> = Api::namespaced(client.clone(), "pav");
        let selector = format!("{LABEL_VOLUME} in ({uid},{SENTINEL})");
        let seen = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let (listed, listed_rx) = tokio::sync::oneshot::channel();
        let events = watcher(api.clone(), watcher::Config::default().labels(&selector));
        let log = seen.clone();
        let watch = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        let phase = pod.labels().get(LABEL_PHASE).cloned().unwrap_or_default();
                        log.lock()
                            .unwrap()
                            .insert(pod.uid().unwrap_or_default(), (pod.name_any(), phase));
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("pod log: {e}"),
                }
            }
        });
        listed_rx.await.expect("the pod watch listed");
        PodLog {
            api,
            seen,
            watch,
            sentinels: 0,
        }
    }

    /// Waits until the watch has seen every pod created before this call.
    async fn catch_up(&mut self) {
        self.sentinels += 1;
        let name = format!("{SENTINEL}-{}", self.sentinels);
        let sentinel: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": { LABEL_VOLUME: SENTINEL } },
            "spec": {
                // Never scheduled: it only marks a point in the watch.
                "nodeSelector": { "pav-csi-e2e/nowhere": "true" },
                "containers": [{ "name": "c", "image": "docker.io/library/busybox:stable" }]
            }
        }))
        .unwrap();
        let uid = self
            .api
            .create(&PostParams::default(), &sentinel)
            .await
            .unwrap()
            .uid()
            .unwrap();
        for _ in 0..600 {
            if self.seen.lock().unwrap().contains_key(&uid) {
                self.api
                    .delete(&name, &DeleteParams::default().grace_period(0))
                    .await
                    .unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the pod watch never saw sentinel {name}");
    }

    /// The names of the claim's pods of `phase` seen so far.
    fn of_phase(&self, phase: &str) -> Vec<String> {
        self.of_claim()
            .into_iter()
            .filter(|(_, p)| p == phase)
            .map(|(name, _)| name)
            .collect()
    }

    /// The claim's pods seen so far (sentinels left out): name and phase,
    /// in order of uid.
    fn of_claim(&self) -> Vec<(String, String)> {
        self.seen
            .lock()
            .unwrap()
            .values()
            .filter(|(name, _)| !name.starts_with(SENTINEL))
            .cloned()
            .collect()
    }
}

impl Drop for PodLog {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster"]
async fn create_and_delete_through_pods() {
    let client = reachable().await;
    // The CRD, the pav namespace, the provisioner, classes and claims.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    create(&crds, &crd()).await;
    let established = kube::runtime::wait::await_condition(
        crds,
        "pavprovisioners.pav.albertofaria.github.io",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(30), established)
        .await
        .unwrap()
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(
        &namespaces,
        &Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some("pav".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let provisioners: Api<PavProvisioner> = Api::all(client.clone());
    // A leftover of an interrupted run may still carry the controller's
    // finalizer, and no controller runs here to release it.
    let _ = provisioners.delete(NAME, &DeleteParams::default()).await;
    let _ = provisioners
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "metadata": { "finalizers": null } })),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    provisioners
        .create(&PostParams::default(), &provisioner())
        .await
        .unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    create(&classes, &sc(NAME, &[])).await;
    create(&classes, &sc(&format!("{NAME}-fail"), &[("fail", "yes")])).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    for (claim, class) in [
        ("e2e-ok", NAME.to_owned()),
        ("e2e-fail", format!("{NAME}-fail")),
    ] {
        let _ = claims.delete(claim, &DeleteParams::default()).await;
        let _ = kube::runtime::wait::await_condition(
            claims.clone(),
            claim,
            kube::runtime::wait::conditions::is_deleted(""),
        )
        .await;
        claims
            .create(&PostParams::default(), &pvc(claim, &class))
            .await
            .unwrap();
    }
    let ok_uid = claims.get("e2e-ok").await.unwrap().uid().unwrap();
    let mut pods_of_ok = PodLog::start(&client, &ok_uid).await;

    // The node plugin's collector (this process runs on the node) and the
    // controller served on a socket. They share one pod cache, of every
    // node's pods: there is one node.
    let cluster = Arc::new(DriverContext::new(
        client.clone(),
        NAME.into(),
        "pav".into(),
        Duration::from_secs(120),
        Arc::new(Metrics::default()),
        None,
    ));
    tokio::spawn(pav::csi::node::collect(
        cluster.clone(),
        pav::pods::HOST_POD_DIR.into(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let driver = pav_csi::Driver::builder(NAME)
        .provisioner(pav::csi::controller_provisioner(cluster.clone()))
        .serve_controller(&socket)
        .run_until(async {
            let _ = stopped.await;
        });
    let server = tokio::spawn(driver);
    for _ in 0..50 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let channel = pav_csi::client::connect(&socket).await.unwrap();
    let mut controller = csi::controller_client::ControllerClient::new(channel);

    // A creation pod that exports handle and capacity.
    let volume = controller
        .create_volume(create_request("e2e-ok", &[]))
        .await
        .expect("CreateVolume")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(volume.volume_id, "vol-e2e-ok");
    assert_eq!(volume.capacity_bytes, 1 << 20);
    // A retry answers the same without a second creation pod run.
    let again = controller
        .create_volume(create_request("e2e-ok", &[]))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(again.volume_id, volume.volume_id);
    pods_of_ok.catch_up().await;
    assert_eq!(
        pods_of_ok.of_phase("creation").len(),
        1,
        "creation pods: {:?}",
        pods_of_ok.of_phase("creation")
    );

    // A creation pod that fails: its /pav/error reaches the caller, naming
    // the phase and the pod; the deletion pod runs after it.
    let failed = controller
        .create_volume(create_request("e2e-fail", &[("fail", "yes")]))
        .await
        .expect_err("the creation pod fails");
    println!("CreateVolume error: {}", failed.message());
    assert!(
        failed.message().contains("backend said no"),
        "{}",
        failed.message()
    );
    assert!(failed.message().contains("creation pod pav/pav-creation-"));

    // DeleteVolume finds the PersistentVolume by handle and runs the deletion pod.
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv_name = format!("pvc-{ok_uid}");
    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    let pv = PersistentVolume {
        metadata: kube::api::ObjectMeta {
            name: Some(pv_name.clone()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Mi".into()))])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(NAME.into()),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            claim_ref: Some(ObjectReference {
                name: Some("e2e-ok".into()),
                namespace: Some("default".into()),
                uid: Some(ok_uid.clone()),
                ..Default::default()
            }),
            csi: Some(CSIPersistentVolumeSource {
                driver: NAME.into(),
                volume_handle: volume.volume_id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    pvs.create(&PostParams::default(), &pv).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await; // the reflector sees it
    controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: volume.volume_id.clone(),
            secrets: HashMap::new(),
        })
        .await
        .expect("DeleteVolume");
    pods_of_ok.catch_up().await;
    assert_eq!(
        pods_of_ok.of_phase("deletion").len(),
        1,
        "the deletion pod ran once: {:?}",
        pods_of_ok.of_phase("deletion")
    );
    // Nothing of this claim is left behind.
    let left: Vec<Pod> = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().labels(&format!("pav.albertofaria.github.io/volume={ok_uid}")))
        .await
        .unwrap()
        .items;
    assert!(
        left.is_empty(),
        "left behind: {:?}",
        left.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    // external-provisioner repeats DeleteVolume now and then: the repeat
    // succeeds without a second deletion pod (or any other).
    let before = pods_of_ok.of_claim();
    controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: volume.volume_id.clone(),
            secrets: HashMap::new(),
        })
        .await
        .expect("repeated DeleteVolume");
    pods_of_ok.catch_up().await;
    assert_eq!(
        pods_of_ok.of_claim(),
        before,
        "a repeated DeleteVolume started pods"
    );

    // Deleting an unknown handle succeeds.
    controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: "no-such-volume".into(),
            secrets: HashMap::new(),
        })
        .await
        .unwrap();

    // Clean up.
    let _ = stop.send(());
    let _ = server.await;
    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    for claim in ["e2e-ok", "e2e-fail"] {
        let _ = claims.delete(claim, &DeleteParams::default()).await;
    }
    for class in [NAME.to_owned(), format!("{NAME}-fail")] {
        let _ = classes.delete(&class, &DeleteParams::default()).await;
    }
    let _ = provisioners.delete(NAME, &DeleteParams::default()).await;
}
