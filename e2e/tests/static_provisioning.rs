//! Scenario 2: static provisioning. A PersistentVolume names the
//! provisioner in `spec.csi.driver`, a claim binds to it, and a client pod
//! reads what the staging pod made.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use pav_e2e::*;

const NAME: &str = "e2e-static";
const NS: &str = "e2e-static";

const PROVISIONER: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-static
spec:
  provisioningModes: [Static]
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command:
              - sh
              - -c
              - |
                mkdir -p /pav/volume
                echo {{ handle | tobash }} {{ params.color | tobash }} {{ capacity }} > /pav/volume/content
"#;

const VOLUME: &str = r#"
apiVersion: v1
kind: PersistentVolume
metadata:
  name: e2e-static-pv
spec:
  capacity: { storage: 2Mi }
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  csi:
    driver: e2e-static
    volumeHandle: blue-volume
    volumeAttributes:
      color: blue
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: static-claim
  namespace: e2e-static
spec:
  storageClassName: ""
  volumeName: e2e-static-pv
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 2Mi } }
"#;

const CLIENT: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: reader
  namespace: e2e-static
spec:
  restartPolicy: Never
  containers:
    - name: reader
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [cat, /volume/content]
      volumeMounts: [{ name: data, mountPath: /volume }]
  volumes:
    - name: data
      persistentVolumeClaim: { claimName: static-claim }
"#;

#[tokio::test]
#[ignore = "needs a cluster"]
async fn static_volume_is_staged() {
    let client = cluster().await;
    let started = Instant::now();
    let observer = start_scenario(&client, NS, NAME, PROVISIONER).await;
    apply(&client, VOLUME).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    wait_for(&claims, "static-claim", STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    .unwrap();

    apply(&client, CLIENT).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = match wait_for(&pods, "reader", STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await
    {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{e}; events: {:#?}",
            event_lines(&client, NS, "reader").await
        ),
    };
    assert_eq!(pod_phase(&pod), "Succeeded");
    let output = logs(&client, NS, "reader").await.unwrap();
    assert_eq!(output.trim_end(), "blue-volume blue 2097152");
    observer.assert_succeeded("staging");

    delete_and_wait(&pods, "reader", STEP).await.unwrap();
    delete_and_wait(&claims, "static-claim", STEP)
        .await
        .unwrap();
    // Retain: the volume stays Released until its owner deletes it.
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    delete_and_wait(&pvs, "e2e-static-pv", STEP).await.unwrap();
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    eprintln!(
        "static_volume_is_staged: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
