//! `pav controller` against a real API server.
//!
//! Runs when `$KUBECONFIG` names a reachable cluster (for example
//! `KUBECONFIG=/var/run/pav-cluster/kubeconfig cargo test -p pav --test controller_e2e -- --nocapture`),
//! `#[ignore = "needs a cluster"]`, run by `scripts/e2e` with
//! `--include-ignored`; without a reachable cluster it fails, saying why.
//!
//! The test applies the CRD, runs the controller in-process (restricted to
//! PavProvisioners labelled `pav-e2e=true`, deploying into namespace
//! `pav-e2e`), and checks: the driver objects and their specs, the Ready
//! condition, InvalidSpec with the field path for a broken object,
//! deletion refused while a PersistentVolume names the driver, and
//! deletion removing everything. With `PAV_E2E_EXTERNAL_CONTROLLER=1` it
//! does not start a controller and expects one deployed in namespace
//! `$PAV_E2E_NAMESPACE` (default `pav`) that watches every provisioner.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use pav::manifests::{Settings, driver};
use pav::operator::{self, FINALIZER};
use pav_templates::PavProvisioner;
use serde::de::DeserializeOwned;

const HELLO: &str = "pav-e2e-hello";
const BROKEN: &str = "pav-e2e-broken";
const FAKE_PV: &str = "pav-e2e-fake-pv";
const TIMEOUT: Duration = Duration::from_secs(90);

/// The cluster of `$KUBECONFIG`; panics, saying why, without one.
async fn reachable_client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!("KUBECONFIG is not set: run scripts/cluster-up, then scripts/e2e");
    }
    let config = Config::infer()
        .await
        .unwrap_or_else(|e| panic!("no client configuration from $KUBECONFIG: {e}"));
    let client = Client::try_from(config).unwrap_or_else(|e| panic!("no client: {e}"));
    match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(_)) => client,
        Ok(Err(e)) => panic!("the cluster of $KUBECONFIG does not answer: {e}"),
        Err(_) => panic!("the cluster of $KUBECONFIG does not answer within 10s"),
    }
}

/// Polls `check` every second until it yields `Some`, or panics after [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn get<K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug>(
    api: &Api<K>,
    name: &str,
) -> Option<K> {
    api.get_opt(name).await.expect("API get")
}

fn provisioner(name: &str, image: &str) -> PavProvisioner {
    let yaml = format!(
        r#"apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: {name}
  labels: {{ pav-e2e: "true" }}
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{{{ requestedMinCapacity }}}}"
  volumeStaging:
    podTemplate:
      spec:
        restartPolicy: Never
        containers:
          - name: greeter
            image: "{image}"
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "mkdir -p /pav/volume && echo hi > /pav/volume/greeting"]
"#
    );
    serde_yaml::from_str(&yaml).expect("valid PavProvisioner YAML")
}

fn ready_condition(p: &PavProvisioner) -> Option<pav_templates::model::Condition> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

async fn force_remove(api: &Api<PavProvisioner>, name: &str) {
    if get(api, name).await.is_some() {
        let _ = api.delete(name, &DeleteParams::default()).await;
        let _ = api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "metadata": { "finalizers": null } })),
            )
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster"]
async fn controller_deploys_and_removes_drivers() {
    let client = reachable_client().await;
    let external = std::env::var_os("PAV_E2E_EXTERNAL_CONTROLLER").is_some();
    let ns = std::env::var("PAV_E2E_NAMESPACE")
        .unwrap_or_else(|_| if external { "pav" } else { "pav-e2e" }.into());

    // CRD, established.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = PavProvisioner::definition();
    let crd_name = crd.metadata.name.clone().unwrap();
    crds.patch(
        &crd_name,
        &PatchParams::apply("pav-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    eventually("CRD established", || async {
        let crd = get(&crds, &crd_name).await?;
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    if get(&namespaces, &ns).await.is_none() {
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": ns } })).unwrap();
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create namespace");
    }

    // Leftovers of an interrupted run.
    let provisioners: Api<PavProvisioner> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let _ = pvs.delete(FAKE_PV, &DeleteParams::default()).await;
    force_remove(&provisioners, HELLO).await;
    force_remove(&provisioners, BROKEN).await;

    let controller_task = (!external).then(|| {
        let args = operator::Args {
            settings: Settings {
                namespace: ns.clone(),
                ..Settings::default()
            },
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            selector: Some("pav-e2e=true".into()),
            leader_election: false,
            api: Default::default(),
        };
        tokio::spawn(operator::run_with(client.clone(), args))
    });

    // A binding left by a pav that gave each driver roles of its own: its
    // roleRef cannot be changed, so the controller has to replace it.
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let stale: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": format!("pav-{HELLO}-controller") },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "kind": "ServiceAccount", "name": format!("pav-{HELLO}-controller"), "namespace": ns }],
    }))
    .unwrap();
    cluster_bindings
        .patch(
            stale.metadata.name.as_deref().unwrap(),
            &PatchParams::apply("pav-e2e").force(),
            &Patch::Apply(&stale),
        )
        .await
        .expect("apply a binding to another role");

    // A valid provisioner becomes a driver.
    provisioners
        .create(
            &PostParams::default(),
            &provisioner(HELLO, "busybox:stable"),
        )
        .await
        .expect("create PavProvisioner");
    let controller_name = format!("pav-{HELLO}-controller");
    let node_name = format!("pav-{HELLO}-node");

    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let driver = eventually("CSIDriver", || get(&drivers, HELLO)).await;
    assert_eq!(driver.spec.attach_required, Some(false));
    assert_eq!(driver.spec.pod_info_on_mount, Some(true));
    assert_eq!(
        driver.spec.volume_lifecycle_modes,
        Some(vec!["Persistent".to_owned()])
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deployment = eventually("Deployment", || get(&deployments, &controller_name)).await;
    let owner = &deployment.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("PavProvisioner", HELLO)
    );
    let pod = deployment.spec.template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some(controller_name.as_str())
    );
    let sidecar = pod
        .containers
        .iter()
        .find(|c| c.name == "csi-provisioner")
        .unwrap();
    let args = sidecar.args.clone().unwrap();
    assert!(
        args.contains(&"--extra-create-metadata".to_owned()),
        "{args:?}"
    );
    assert!(args.contains(&"--leader-election".to_owned()), "{args:?}");
    let pav = pod.containers.iter().find(|c| c.name == "pav").unwrap();
    assert_eq!(
        pav.args.as_ref().unwrap()[..3],
        ["csi-controller", "--provisioner", HELLO]
    );

    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let daemon_set = eventually("DaemonSet", || get(&daemon_sets, &node_name)).await;
    let pod = daemon_set.spec.template.spec.unwrap();
    let pav = pod.containers.iter().find(|c| c.name == "pav").unwrap();
    assert_eq!(
        pav.security_context.as_ref().unwrap().privileged,
        Some(true)
    );
    let mounts = pav.volume_mounts.clone().unwrap();
    assert!(mounts.iter().any(|m| m.mount_path == "/var/lib/pav/pods"
        && m.mount_propagation.as_deref() == Some("Bidirectional")));
    assert!(
        pod.containers
            .iter()
            .any(|c| c.name == "node-driver-registrar")
    );

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    // The driver binds the roles `pav manifests` installs; it writes none.
    for (name, role) in [
        (&controller_name, driver::CSI_CONTROLLER_ROLE),
        (&node_name, driver::CSI_NODE_ROLE),
    ] {
        eventually("ServiceAccount", || get(&accounts, name)).await;
        eventually(&format!("ClusterRoleBinding {name} to {role}"), || async {
            let binding = get(&cluster_bindings, name).await?;
            (binding.role_ref.name == role).then_some(())
        })
        .await;
        assert!(get(&cluster_roles, name).await.is_none());
    }
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    let leases = eventually("RoleBinding", || get(&bindings, &controller_name)).await;
    assert_eq!(leases.role_ref.name, driver::CSI_LEADER_ELECTION_ROLE);

    let hello = eventually("Ready condition", || async {
        let p = get(&provisioners, HELLO).await?;
        let ready = ready_condition(&p)?;
        (ready.observed_generation == p.metadata.generation).then_some(p)
    })
    .await;
    let ready = ready_condition(&hello).unwrap();
    assert!(
        ["DriverReady", "DriverNotReady"].contains(&ready.reason.as_str()),
        "{ready:?}"
    );
    assert!(ready.message.contains(HELLO), "{ready:?}");
    assert_eq!(hello.status.as_ref().unwrap().volumes, Some(0));
    assert!(
        hello
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&FINALIZER.to_owned())
    );

    // A broken template: InvalidSpec naming the field, no driver.
    provisioners
        .create(&PostParams::default(), &provisioner(BROKEN, "{{ oops"))
        .await
        .expect("create broken PavProvisioner");
    let invalid = eventually("InvalidSpec", || async {
        let ready = ready_condition(&get(&provisioners, BROKEN).await?)?;
        (ready.reason == "InvalidSpec").then_some(ready)
    })
    .await;
    assert_eq!(invalid.status, "False");
    assert!(
        invalid
            .message
            .contains("spec.volumeStaging.podTemplate.spec.containers[0].image"),
        "{invalid:?}"
    );
    assert!(get(&drivers, BROKEN).await.is_none());
    assert!(
        get(&deployments, &format!("pav-{BROKEN}-controller"))
            .await
            .is_none()
    );

    // Deletion is refused while a PersistentVolume names the driver.
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": { "name": FAKE_PV },
        "spec": {
            "capacity": { "storage": "1Gi" },
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "pav-e2e-none",
            "csi": { "driver": HELLO, "volumeHandle": "pav-e2e-fake" },
        },
    }))
    .unwrap();
    pvs.create(&PostParams::default(), &pv)
        .await
        .expect("create fake PV");
    provisioners
        .delete(HELLO, &DeleteParams::default())
        .await
        .expect("delete PavProvisioner");
    let blocked = eventually("DeletionBlocked", || async {
        let ready = ready_condition(&get(&provisioners, HELLO).await?)?;
        (ready.reason == "DeletionBlocked").then_some(ready)
    })
    .await;
    assert!(
        blocked.message.contains("used by 1 PersistentVolume;"),
        "{blocked:?}"
    );
    assert!(
        get(&drivers, HELLO).await.is_some(),
        "driver removed while in use"
    );

    // Once the volume is gone, deletion completes and removes everything.
    pvs.delete(FAKE_PV, &DeleteParams::default())
        .await
        .expect("delete fake PV");
    eventually("PavProvisioner deleted", || async {
        get(&provisioners, HELLO).await.is_none().then_some(())
    })
    .await;
    assert!(get(&drivers, HELLO).await.is_none());
    for name in [&controller_name, &node_name] {
        assert!(
            get(&cluster_bindings, name).await.is_none(),
            "ClusterRoleBinding {name} left"
        );
        assert!(
            get(&accounts, name).await.is_none(),
            "ServiceAccount {name} left"
        );
    }
    assert!(get(&deployments, &controller_name).await.is_none());
    assert!(get(&daemon_sets, &node_name).await.is_none());

    provisioners
        .delete(BROKEN, &DeleteParams::default())
        .await
        .expect("delete broken PavProvisioner");
    eventually("broken PavProvisioner deleted", || async {
        get(&provisioners, BROKEN).await.is_none().then_some(())
    })
    .await;

    if let Some(task) = controller_task {
        task.abort();
    }
}
