//! A PavProvisioner with `volumeAttach` and `volumeDetach`, with the real
//! external-attacher: its CSIDriver requires attaching; a pod's volume is
//! attached to its node by the attach pod, which marks the attachment on
//! the node and writes a publish context; the VolumeAttachment is
//! attached with that context as its metadata, and the staging pod writes
//! the context's token into the volume, which the client reads. Once the
//! pod is gone the VolumeAttachment is deleted and the detach pod removes
//! the mark; then the claim, the provisioner and every PaV pod go.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::Api;
use kube::api::ListParams;
use pav_e2e::sparse_file::client_pod;
use pav_e2e::*;

const NAME: &str = "e2e-attach";
const NS: &str = "e2e-attach";
/// Where the attach pods mark attachments, on each node (a hostPath).
const MARKS: &str = "/var/lib/pav-e2e-attach";

const OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-attach
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeAttach:
    podTemplate:
      spec:
        nodeName: "{{ node.metadata.name }}"
        restartPolicy: Never
        containers:
          - name: attach
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command:
              - sh
              - -c
              - |
                touch /marks/$HANDLE
                printf 'token: attached-to-%s\n' "$NODE" > /pav/publish-context
            env:
              - {name: HANDLE, value: "{{ handle }}"}
              - {name: NODE, value: "{{ node.metadata.name }}"}
            volumeMounts: [{name: marks, mountPath: /marks}]
        volumes:
          - {name: marks, hostPath: {path: /var/lib/pav-e2e-attach, type: DirectoryOrCreate}}
  volumeDetach:
    podTemplate:
      spec:
        nodeName: "{{ node.metadata.name }}"
        restartPolicy: Never
        containers:
          - name: detach
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "rm -f /marks/$HANDLE"]
            env:
              - {name: HANDLE, value: "{{ handle }}"}
            volumeMounts: [{name: marks, mountPath: /marks}]
        volumes:
          - {name: marks, hostPath: {path: /var/lib/pav-e2e-attach, type: DirectoryOrCreate}}
  volumeStaging:
    podTemplate:
      spec:
        restartPolicy: Never
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "mkdir -p /pav/volume && echo \"$TOKEN\" > /pav/volume/token"]
            env:
              - {name: TOKEN, value: "{{ publishContext.token | default('not attached') }}"}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-attach
provisioner: e2e-attach
"#;

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: attached
  namespace: e2e-attach
spec:
  storageClassName: e2e-attach
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Mi
"#;

#[tokio::test]
#[ignore = "needs a cluster"]
async fn pav_attaches_with_its_attach_pod_and_staging_sees_the_context() {
    let client = cluster().await;
    let started = Instant::now();
    let seen = start_scenario(&client, NS, NAME, OBJECTS).await;
    let driver = Api::<CSIDriver>::all(client.clone())
        .get(NAME)
        .await
        .unwrap();
    assert_eq!(driver.spec.attach_required, Some(true));

    apply(&client, CLAIM).await.unwrap();
    apply(
        &client,
        &client_pod(NS, "user", "attached", "cat /data/token"),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let finished = wait_for(&pods, "user", STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await;
    let user = finished.unwrap_or_else(|e| panic!("{e}; events: {:#?}", seen.seen()));
    let node = (user.spec.and_then(|s| s.node_name)).expect("the pod ran on a node");
    let output = logs(&client, NS, "user").await.unwrap();
    assert_eq!(output.trim(), format!("attached-to-{node}"));

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pv = volume_name(&claims.get("attached").await.unwrap()).unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let handle = (pvs.get(&pv).await.unwrap().spec)
        .and_then(|s| s.csi)
        .map(|c| c.volume_handle)
        .expect("a CSI volume");
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let attachment = (attachments
        .list(&ListParams::default())
        .await
        .unwrap()
        .items)
        .into_iter()
        .find(|a| a.spec.source.persistent_volume_name.as_deref() == Some(&pv))
        .expect("a VolumeAttachment of the claim's volume");
    assert_eq!(attachment.spec.attacher, NAME);
    assert_eq!(attachment.spec.node_name, node);
    let status = attachment.status.clone().expect("an attached status");
    assert!(status.attached, "{status:?}");
    let metadata = status.attachment_metadata.unwrap_or_default();
    assert_eq!(metadata.get("token"), Some(&format!("attached-to-{node}")));
    // The test runs on the first node, where the pod ran.
    let mark = Path::new(MARKS).join(&handle);
    assert!(mark.exists(), "{} marked by the attach pod", mark.display());

    // The pod gone, the volume is unstaged and detached.
    delete_and_wait(&pods, "user", STEP).await.unwrap();
    let name = attachment.metadata.name.clone().unwrap();
    wait_gone(&attachments, &name, STEP).await.unwrap();
    assert!(
        !mark.exists(),
        "{} removed by the detach pod",
        mark.display()
    );
    seen.assert_succeeded("attach");
    seen.assert_succeeded("detach");

    delete_and_wait(&claims, "attached", STEP).await.unwrap();
    wait_gone(&pvs, &pv, STEP).await.unwrap();
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();
    delete(&client, OBJECTS).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    eprintln!(
        "pav_attaches_with_its_attach_pod_and_staging_sees_the_context: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
