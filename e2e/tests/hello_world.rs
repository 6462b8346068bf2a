//! Scenario 1: examples/hello-world as a user runs it, and a variant with a
//! deletion pod that must run when the claim is deleted.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::{Api, Client};
use pav_e2e::*;

fn example(file: &str) -> String {
    example_file("hello-world", file)
}

/// Claim and client pod of the example, in namespace `ns`, with the
/// example's PVC (minus the fixed `uid` that is there for `pav render`).
fn claim_and_pod(ns: &str) -> (String, String) {
    let pvc = example("pvc.yaml")
        .lines()
        .filter(|l| !l.trim_start().starts_with("uid:"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("namespace: default", &format!("namespace: {ns}"));
    let pod = example("pod.yaml").replace("namespace: default", &format!("namespace: {ns}"));
    (pvc, pod)
}

/// Runs the example's claim and client pod against `provisioner` and
/// deletes them again; returns the name of the volume it used.
async fn run_client(client: &Client, ns: &str, class: &str, greeting: &str) -> String {
    let (pvc_yaml, pod_yaml) = claim_and_pod(ns);
    let pvc_yaml = pvc_yaml.replace(
        "storageClassName: hello-world",
        &format!("storageClassName: {class}"),
    );
    apply(client, &pvc_yaml).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc = match wait_for(&claims, "hello-world", STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    {
        Ok(pvc) => pvc,
        Err(e) => panic!(
            "{e}; claim events: {:#?}",
            event_lines(client, ns, "hello-world").await
        ),
    };
    let volume = volume_name(&pvc).expect("a bound claim names its volume");

    apply(client, &pod_yaml).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = wait_for(&pods, "hello-world-client", STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await;
    let pod = match pod {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{e}; client pod events: {:#?}",
            event_lines(client, ns, "hello-world-client").await
        ),
    };
    assert_eq!(pod_phase(&pod), "Succeeded", "client pod: {:?}", pod.status);
    let output = logs(client, ns, "hello-world-client").await.unwrap();
    assert_eq!(output.trim_end(), greeting);

    delete_and_wait(&pods, "hello-world-client", STEP)
        .await
        .unwrap();
    delete_and_wait(&claims, "hello-world", STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    if let Err(e) = wait_gone(&pvs, &volume, STEP).await {
        panic!(
            "{e}; volume events: {:#?}",
            event_lines(client, "default", &volume).await
        );
    }
    volume
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn hello_world_example() {
    let client = cluster().await;
    let started = Instant::now();
    let (ns, name) = ("e2e-hello-world", "hello-world");
    reset(&client, ns, name).await.unwrap();
    namespace(&client, ns).await.unwrap();

    apply(&client, &example("provisioner.yaml")).await.unwrap();
    apply(&client, &example("storageclass.yaml")).await.unwrap();
    wait_provisioner_ready(&client, name, STEP).await.unwrap();
    run_client(&client, ns, "hello-world", "Hello world!").await;

    // The node plugin unstages: only then may the provisioner go.
    wait_no_pav_pods(&client, name, STEP).await.unwrap();
    delete(&client, &example("storageclass.yaml"))
        .await
        .unwrap();
    delete_provisioner(&client, name, STEP).await.unwrap();
    assert_no_leaks(&client, name, Duration::from_secs(120)).await;
    eprintln!(
        "hello_world_example: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

const WITH_DELETION: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-hello-deletion
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeDeletion:
    podTemplate:
      spec:
        containers:
          - name: goodbye
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo deleting {{ pvc.metadata.name | tobash }}"]
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: greeter
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command:
              - sh
              - -c
              - |
                mkdir -p /pav/volume
                printf '%s\n' {{ params.greeting | tobash }} > /pav/volume/greeting
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: hello-world-deletion
provisioner: e2e-hello-deletion
parameters:
  greeting: "Goodbye world!"
"#;

#[tokio::test]
#[ignore = "needs a cluster"]
async fn hello_world_deletion_pod_runs() {
    let client = cluster().await;
    let started = Instant::now();
    let (ns, name) = ("e2e-hello-deletion", "e2e-hello-deletion");
    reset(&client, ns, name).await.unwrap();
    namespace(&client, ns).await.unwrap();
    let seen = PodObserver::start(&client, name);

    apply(&client, WITH_DELETION).await.unwrap();
    wait_provisioner_ready(&client, name, STEP).await.unwrap();
    run_client(&client, ns, "hello-world-deletion", "Goodbye world!").await;

    seen.assert_succeeded("deletion");
    seen.assert_succeeded("staging");

    // The node plugin unstages: only then may the provisioner go.
    wait_no_pav_pods(&client, name, STEP).await.unwrap();
    delete(&client, WITH_DELETION).await.unwrap();
    delete_provisioner(&client, name, STEP).await.unwrap();
    assert_no_leaks(&client, name, Duration::from_secs(120)).await;
    eprintln!(
        "hello_world_deletion_pod_runs: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
