//! Failures a claim recovers from.
//!
//! Scenario 3: a creation pod that fails. The claim stays Pending with an
//! event carrying the pod's error text, the deletion pod runs, and once the
//! template is fixed the claim binds.
//!
//! An infeasible expansion (Kubernetes' recovery from expansion failure,
//! GA in v1.34): a request past `maxCapacity`, then one past what the
//! expansion pod could give, are refused with the limit in an event and
//! the claim marked `ControllerResizeInfeasible`; the owner lowers the
//! request and the volume grows to it.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use pav_e2e::*;

const NAME: &str = "e2e-create-fail";
const NS: &str = "e2e-create-fail";

fn provisioner(creation: &str) -> String {
    format!(
        r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-create-fail
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    podTemplate:
      spec:
        containers:
          - name: create
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, {creation:?}]
  volumeDeletion:
    podTemplate:
      spec:
        containers:
          - name: delete
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo undoing"]
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
  name: e2e-create-fail
provisioner: e2e-create-fail
"#
    )
}

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: doomed
  namespace: e2e-create-fail
spec:
  storageClassName: e2e-create-fail
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
"#;

#[tokio::test]
#[ignore = "needs a cluster"]
async fn failed_creation_reports_and_recovers() {
    let client = cluster().await;
    let started = Instant::now();
    let failing =
        provisioner("echo \"quota exceeded for {{ pvc.metadata.name }}\" > /pav/error; exit 1");
    let observer = start_scenario(&client, NS, NAME, &failing).await;
    apply(&client, CLAIM).await.unwrap();

    let line = wait_event(&client, NS, "doomed", &["quota exceeded for doomed"], STEP)
        .await
        .unwrap();
    eprintln!("claim event: {line}");
    observer.wait("deletion", "Succeeded", STEP).await.unwrap();
    observer.assert_succeeded("deletion");
    assert!(!observer.pods("creation", "Failed").is_empty());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let claim = claims.get("doomed").await.unwrap();
    assert_eq!(claim_phase(&claim), "Pending");

    // Fix the template: the next retry of external-provisioner binds.
    let fixed = provisioner("echo 3Mi > /pav/capacity");
    apply(&client, &fixed).await.unwrap();
    let claim = wait_for(&claims, "doomed", Duration::from_secs(300), "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    .unwrap();
    let volume = volume_name(&claim).unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let capacity = pv.spec.unwrap().capacity.unwrap()["storage"].0.clone();
    assert_eq!(capacity, "3Mi");

    delete_and_wait(&claims, "doomed", STEP).await.unwrap();
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    // The node plugin unstages: only then may the provisioner go.
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();
    delete(&client, &fixed).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    eprintln!(
        "failed_creation_reports_and_recovers: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

const GROW: &str = "e2e-grow-infeasible";

/// At most 4 MiB by its validation rule; its expansion pod gives 3 MiB at
/// most, and says so in `/pav/capacity`.
const GROW_PROVISIONER: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-grow-infeasible
spec:
  provisioningModes: [Dynamic]
  volumeValidation:
    maxCapacity: 4Mi
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
  volumeExpansion:
    podTemplate:
      spec:
        containers:
          - name: grow
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo {{ [requestedMinCapacity, 3145728] | min }} > /pav/capacity"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-grow-infeasible
provisioner: e2e-grow-infeasible
allowVolumeExpansion: true
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: grown
  namespace: e2e-grow-infeasible
spec:
  storageClassName: e2e-grow-infeasible
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
"#;

#[tokio::test]
#[ignore = "needs a cluster"]
async fn infeasible_expansion_is_reported_and_a_lower_request_grows() {
    let client = cluster().await;
    let started = Instant::now();
    let observer = start_scenario(&client, GROW, GROW, GROW_PROVISIONER).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), GROW);
    let claim = wait_for(&claims, "grown", STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    .unwrap();
    let volume = volume_name(&claim).unwrap();

    // Past maxCapacity: refused before any pod runs.
    let past_maximum = "requested capacity 8388608 bytes exceeds the maximum of 4194304 bytes";
    request_infeasible(&client, GROW, "grown", 8 << 20, &[past_maximum])
        .await
        .unwrap();
    assert_eq!(observer.runs("expansion"), 0, "{:#?}", observer.seen());

    // Within maxCapacity, past what the expansion pod can give.
    let past_storage = "the volume grew to 3145728 bytes, less than the 4194304 bytes requested";
    request_infeasible(&client, GROW, "grown", 4 << 20, &[past_storage])
        .await
        .unwrap();

    // The owner lowers the request: the volume grows to it.
    request_size(&claims, "grown", 2 << 20).await.unwrap();
    let claim = wait_for(&claims, "grown", STEP, "2 MiB", |c| {
        status_capacity(c) == Some(2 << 20)
    })
    .await
    .unwrap();
    assert!(!resize_infeasible(&claim), "{:?}", claim.status);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let capacity = &pv.spec.unwrap().capacity.unwrap()["storage"].0;
    assert_eq!(quantity_bytes(capacity), Some(2 << 20));
    observer.assert_succeeded("expansion");

    delete_and_wait(&claims, "grown", STEP).await.unwrap();
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    wait_no_pav_pods(&client, GROW, STEP).await.unwrap();
    delete(&client, GROW_PROVISIONER).await.unwrap();
    delete_provisioner(&client, GROW, STEP).await.unwrap();
    assert_no_leaks(&client, GROW, Duration::from_secs(120)).await;
    eprintln!(
        "infeasible_expansion_is_reported_and_a_lower_request_grows: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
