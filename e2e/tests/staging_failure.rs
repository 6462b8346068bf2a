//! Scenario 4: a staging pod that fails. The client pod does not start
//! (ContainerCreating, FailedMount event naming the error), the unstaging
//! pod runs, and after the client pod is deleted nothing leaks.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use pav_e2e::*;

const NAME: &str = "e2e-stage-fail";
const NS: &str = "e2e-stage-fail";

const OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-stage-fail
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
            command: [sh, -c, "echo 'backend unreachable: 10.9.8.7' > /pav/error; exit 1"]
  volumeUnstaging:
    podTemplate:
      spec:
        containers:
          - name: unstage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo cleaning up"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-stage-fail
provisioner: e2e-stage-fail
"#;

const CLAIM_AND_CLIENT: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: e2e-stage-fail
spec:
  storageClassName: e2e-stage-fail
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: e2e-stage-fail
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [ls, /volume]
      volumeMounts: [{ name: data, mountPath: /volume }]
  volumes:
    - name: data
      persistentVolumeClaim: { claimName: data }
"#;

#[tokio::test]
#[ignore = "needs a cluster"]
async fn failed_staging_blocks_the_client_and_unstages() {
    let client = cluster().await;
    let started = Instant::now();
    let observer = start_scenario(&client, NS, NAME, OBJECTS).await;
    apply(&client, CLAIM_AND_CLIENT).await.unwrap();

    let line = wait_event(
        &client,
        NS,
        "client",
        &["FailedMount", "backend unreachable: 10.9.8.7"],
        STEP,
    )
    .await
    .unwrap();
    eprintln!("client event: {line}");
    observer.wait("unstaging", "Succeeded", STEP).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = pods.get("client").await.unwrap();
    assert_eq!(pod_phase(&pod), "Pending");
    let waiting = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    assert_eq!(waiting.as_deref(), Some("ContainerCreating"));

    delete_and_wait(&pods, "client", STEP).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let volume = volume_name(&claims.get("data").await.unwrap()).unwrap();
    delete_and_wait(&claims, "data", STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    // The node plugin unstages: only then may the provisioner go.
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();
    delete(&client, OBJECTS).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    eprintln!(
        "failed_staging_blocks_the_client_and_unstages: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
