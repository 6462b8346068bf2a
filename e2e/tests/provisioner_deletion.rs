//! Scenario 8: deleting a PavProvisioner in use is refused (finalizer and a
//! DeletionBlocked event); once its volumes are gone it is removed with
//! everything it created (CSIDriver, Deployment, DaemonSet, RBAC).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::ListParams;
use kube::{Api, Client};
use pav_e2e::*;

const NAME: &str = "e2e-in-use";
const NS: &str = "e2e-in-use";

const OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-in-use
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "mkdir -p /pav/volume"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-in-use
provisioner: e2e-in-use
"#;

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: kept
  namespace: e2e-in-use
spec:
  storageClassName: e2e-in-use
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
"#;

/// Names of the objects of each kind pav deployed for the provisioner.
async fn deployed(client: &Client) -> Vec<String> {
    let selector = ListParams::default().labels(&format!("{LABEL_PROVISIONER}={NAME}"));
    let mut found = Vec::new();
    macro_rules! collect {
        ($kind:ty, $api:expr) => {{
            let api: Api<$kind> = $api;
            for object in api.list(&selector).await.unwrap().items {
                found.push(format!(
                    "{} {}",
                    stringify!($kind),
                    kube::ResourceExt::name_any(&object)
                ));
            }
        }};
    }
    collect!(CSIDriver, Api::all(client.clone()));
    collect!(ClusterRole, Api::all(client.clone()));
    collect!(ClusterRoleBinding, Api::all(client.clone()));
    collect!(Deployment, Api::namespaced(client.clone(), PAV_NAMESPACE));
    collect!(DaemonSet, Api::namespaced(client.clone(), PAV_NAMESPACE));
    collect!(
        ServiceAccount,
        Api::namespaced(client.clone(), PAV_NAMESPACE)
    );
    collect!(Role, Api::namespaced(client.clone(), PAV_NAMESPACE));
    // In every namespace: the node plugin's go wherever its pods go.
    collect!(RoleBinding, Api::all(client.clone()));
    collect!(
        PodDisruptionBudget,
        Api::namespaced(client.clone(), PAV_NAMESPACE)
    );
    found.sort();
    found
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn provisioner_in_use_is_kept_until_its_volumes_are_gone() {
    let client = cluster().await;
    let started = Instant::now();
    reset(&client, NS, NAME).await.unwrap();
    namespace(&client, NS).await.unwrap();

    apply(&client, OBJECTS).await.unwrap();
    wait_provisioner_ready(&client, NAME, STEP).await.unwrap();
    let objects = deployed(&client).await;
    for kind in [
        "CSIDriver",
        "Deployment",
        "DaemonSet",
        "ClusterRoleBinding",
        "RoleBinding",
        "ServiceAccount",
        "PodDisruptionBudget",
    ] {
        assert!(
            objects.iter().any(|o| o.starts_with(kind)),
            "no {kind} deployed: {objects:#?}"
        );
    }
    // Drivers bind the roles `pav manifests` installed; they own none.
    assert!(
        !objects
            .iter()
            .any(|o| o.starts_with("ClusterRole ") || o.starts_with("Role ")),
        "a driver has roles of its own: {objects:#?}"
    );
    apply(&client, CLAIM).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let claim = wait_for(&claims, "kept", STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    .unwrap();
    let volume = volume_name(&claim).unwrap();

    // Refused while the volume exists: finalizer stays, event says why.
    let provisioners = provisioners(&client).await.unwrap();
    provisioners
        .delete(NAME, &Default::default())
        .await
        .unwrap();
    let line = wait_event(
        &client,
        "default",
        NAME,
        &["DeletionBlocked", "still used by 1 PersistentVolume"],
        STEP,
    )
    .await
    .unwrap();
    eprintln!("provisioner event: {line}");
    let p = provisioners.get(NAME).await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert!(!p.metadata.finalizers.unwrap_or_default().is_empty());
    assert_eq!(
        deployed(&client).await,
        objects,
        "the driver must stay while in use"
    );

    // The driver still works while the deletion waits: the volume is
    // deleted through it, then the provisioner goes with everything.
    delete_and_wait(&claims, "kept", STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    // The node plugin unstages: only then may the provisioner go.
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();
    delete(&client, OBJECTS).await.unwrap();
    wait_gone(&provisioners, NAME, Duration::from_secs(360))
        .await
        .unwrap();
    wait_until("the driver's objects to be deleted", STEP, || async {
        let left = deployed(&client).await;
        if left.is_empty() {
            Ok(Some(()))
        } else {
            anyhow::bail!("left: {left:?}")
        }
    })
    .await
    .unwrap();
    // Nor does external-provisioner's Lease stay, which would hold up a
    // provisioner re-created under the same name.
    let leases: Api<Lease> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    assert!(
        leases.get_opt(NAME).await.unwrap().is_none(),
        "the driver's Lease {PAV_NAMESPACE}/{NAME} outlived it"
    );
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    eprintln!(
        "provisioner_in_use_is_kept_until_its_volumes_are_gone: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
