//! Faults injected on the real cluster while pav works: the API server
//! restarted, etcd frozen and etcd slow in the middle of creation and staging, a
//! creation pod evicted, a staging pod that never becomes ready. Each
//! operation either completes or fails with an event, and nothing leaks.
//! (The CSI controller and node plugin killed mid-phase are in
//! `restarts.rs`.)

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::EvictParams;
use kube::{Api, Client};
use pav_e2e::faults;
use pav_e2e::gate::Gate;
use pav_e2e::*;

/// A provisioner whose creation pod runs `creation` and whose staging pod
/// runs `staging`, with staging timing out after `staging_timeout`; its
/// StorageClass has the same name. Both pods mount the scenario's
/// [`Gate`] (JSON is YAML's flow style).
fn objects(name: &str, creation: &str, staging: &str, staging_timeout: &str) -> String {
    let (volume, mount) = (Gate::volume(name), Gate::volume_mount());
    format!(
        r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: {name}
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{{{ requestedMinCapacity }}}}"
    podTemplate:
      spec:
        # An evicted pod is killed at once instead of finishing its work
        # within the grace period (sh as PID 1 ignores SIGTERM).
        terminationGracePeriodSeconds: 1
        containers:
          - name: create
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, {creation:?}]
            volumeMounts: [{mount}]
        volumes: [{volume}]
  volumeStaging:
    timeout: {staging_timeout}
    podTemplate:
      spec:
        terminationGracePeriodSeconds: 1
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, {staging:?}]
            volumeMounts: [{mount}]
        volumes: [{volume}]
  volumeUnstaging:
    podTemplate:
      spec:
        containers:
          - name: unstage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "echo unstaged"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {name}
provisioner: {name}
"#
    )
}

fn claim(ns: &str, class: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: {ns}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources: {{ requests: {{ storage: 1Mi }} }}
"#
    )
}

fn client_pod(ns: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: {ns}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [cat, /volume/greeting]
      volumeMounts: [{{ name: data, mountPath: /volume }}]
  volumes:
    - name: data
      persistentVolumeClaim: {{ claimName: data }}
"#
    )
}

/// Creation and staging that wait at the scenario's [`Gate`], then
/// succeed; staging writes a greeting the client prints.
fn gated_objects(name: &str) -> String {
    objects(
        name,
        &Gate::script("creation"),
        &format!(
            "{}; mkdir -p /pav/volume; echo hello > /pav/volume/greeting",
            Gate::script("staging")
        ),
        "120s",
    )
}

/// How long a wait after a control-plane fault may take. Besides pav,
/// the kube-controller-manager, the scheduler and the kubelet must catch
/// up: their watches back off while the API server is away (binding the
/// claim took 70 s after one restart here), and the node may be marked
/// NotReady and tainted until the kubelet reports again. After an API
/// server restart the kubelet once started a pod created 8 s after the
/// restart 100 s late, with nothing about it in its log; the scheduler
/// still saw a claim unbound 16 s after it was bound, and set its client
/// pod aside as unschedulable (retried on a later change of the claim, or
/// after 5 min); a CI run's client pod got no staging pod within 300 s.
/// Our reading: watches that missed the restart go on until their timeout,
/// which client-go's reflector picks between 5 and 10 min; so 10 min and a
/// margin. Every wait on the cluster in this file takes it, not only those
/// right after a fault: each scenario may start right after another's.
const AFTER_FAULT: Duration = Duration::from_secs(660);

/// Waits until the API server answers again (after a restart or while etcd
/// is frozen).
async fn wait_api(client: &Client) {
    wait_until("the API server to answer", STEP, || async {
        Ok(client.apiserver_version().await.ok().map(|_| ()))
    })
    .await
    .unwrap();
}

/// Panics with `result`'s error and the [`pav_e2e::diagnosis`] of scenario `name`
/// (its namespace and provisioner) when the wait failed.
async fn or_diagnose<T>(client: &Client, name: &str, result: anyhow::Result<T>) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{e:#}\n{}", pav_e2e::diagnosis(client, name, name).await),
    }
}

/// The client pod prints the greeting; then pod, claim, volume, PaV pods
/// and provisioner are removed and the leak check runs.
async fn read_and_tear_down(client: &Client, name: &str, objects: &str) {
    let ns = name;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let done = wait_for(&pods, "client", AFTER_FAULT, "Succeeded", |p| {
        pod_phase(p) == "Succeeded"
    })
    .await;
    or_diagnose(client, name, done).await;
    assert_eq!(
        logs(client, ns, "client").await.unwrap().trim_end(),
        "hello"
    );
    tear_down(client, name, objects).await;
}

async fn tear_down(client: &Client, name: &str, objects: &str) {
    let ns = name;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    or_diagnose(
        client,
        name,
        delete_and_wait(&pods, "client", AFTER_FAULT).await,
    )
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volume = claims.get("data").await.ok().and_then(|c| volume_name(&c));
    or_diagnose(
        client,
        name,
        delete_and_wait(&claims, "data", AFTER_FAULT).await,
    )
    .await;
    if let Some(volume) = volume {
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        or_diagnose(client, name, wait_gone(&pvs, &volume, AFTER_FAULT).await).await;
    }
    or_diagnose(
        client,
        name,
        wait_no_pav_pods(client, name, AFTER_FAULT).await,
    )
    .await;
    delete(client, objects).await.unwrap();
    or_diagnose(
        client,
        name,
        delete_provisioner(client, name, AFTER_FAULT).await,
    )
    .await;
    assert_no_leaks(client, name, Duration::from_secs(120)).await;
}

/// Provisions and stages a volume through provisioner `name`, injecting
/// `fault` once while its creation pod waits at the [`Gate`] and once
/// while its staging pod does, releasing each pod only after the fault;
/// then the client must read the volume, exactly one pod of each phase
/// must have run, and nothing may leak.
async fn survives_fault_mid_creation_and_mid_staging<F, Fut>(client: &Client, name: &str, fault: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let objects = gated_objects(name);
    let gate = Gate::new(name);
    let observer = start_scenario(client, name, name, &objects).await;

    apply(client, &claim(name, name)).await.unwrap();
    or_diagnose(
        client,
        name,
        gate.wait_started("creation", 1, AFTER_FAULT).await,
    )
    .await;
    fault().await;
    wait_api(client).await;
    gate.release("creation");

    apply(client, &client_pod(name)).await.unwrap();
    or_diagnose(
        client,
        name,
        gate.wait_started("staging", 1, AFTER_FAULT).await,
    )
    .await;
    fault().await;
    wait_api(client).await;
    gate.release("staging");

    read_and_tear_down(client, name, &objects).await;
    for phase in ["creation", "staging"] {
        assert_eq!(
            gate.runs(phase).len(),
            1,
            "one {phase} pod, picked up after the fault: {:?}; seen: {:#?}",
            gate.runs(phase),
            observer.seen()
        );
    }
    assert!(
        observer.pods("creation", "Failed").is_empty(),
        "{:#?}",
        observer.seen()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn api_server_restarts_mid_creation_and_mid_staging() {
    let client = cluster().await;
    let started = Instant::now();
    survives_fault_mid_creation_and_mid_staging(&client, "e2e-fault-apiserver", || async {
        faults::restart("kube-apiserver").unwrap();
    })
    .await;
    eprintln!(
        "api_server_restarts_mid_creation_and_mid_staging: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn etcd_frozen_mid_creation_and_mid_staging() {
    let client = cluster().await;
    let started = Instant::now();
    survives_fault_mid_creation_and_mid_staging(&client, "e2e-fault-etcd", || async {
        faults::freeze("etcd", Duration::from_secs(15))
            .await
            .unwrap();
    })
    .await;
    eprintln!(
        "etcd_frozen_mid_creation_and_mid_staging: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn etcd_slow_mid_creation_and_mid_staging() {
    let client = cluster().await;
    let started = Instant::now();
    // pav waits on the pod, and the pod's start and watches happen,
    // against an etcd that is stopped for 250 ms of every 500 ms.
    survives_fault_mid_creation_and_mid_staging(&client, "e2e-fault-etcd-slow", || async {
        faults::slow(
            "etcd",
            Duration::from_millis(250),
            Duration::from_millis(500),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    })
    .await;
    eprintln!(
        "etcd_slow_mid_creation_and_mid_staging: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn evicted_creation_pod_is_retried() {
    let client = cluster().await;
    let started = Instant::now();
    let name = "e2e-fault-evict";
    let objects = gated_objects(name);
    let gate = Gate::new(name);
    gate.release("staging");
    let observer = start_scenario(&client, name, name, &objects).await;

    apply(&client, &claim(name, name)).await.unwrap();
    or_diagnose(
        &client,
        name,
        gate.wait_started("creation", 1, AFTER_FAULT).await,
    )
    .await;
    let evicted = gate.runs("creation").remove(0);
    let pav_pods: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    pav_pods
        .evict(&evicted, &EvictParams::default())
        .await
        .unwrap();

    let line = wait_event(
        &client,
        name,
        "data",
        &["ProvisioningFailed", &evicted],
        AFTER_FAULT,
    )
    .await;
    let line = or_diagnose(&client, name, line).await;
    eprintln!("claim event: {line}");
    gate.release("creation");
    apply(&client, &client_pod(name)).await.unwrap();
    read_and_tear_down(&client, name, &objects).await;
    // Pod names are derived from the volume, so the retry's pod has the
    // evicted one's name: seen Failed (killed), then Succeeded (the retry),
    // and exactly two ran.
    assert_eq!(gate.runs("creation"), [evicted.clone(), evicted.clone()]);
    assert_eq!(
        observer.pods("creation", "Failed"),
        std::slice::from_ref(&evicted),
        "{:#?}",
        observer.seen()
    );
    assert_eq!(
        observer.pods("creation", "Succeeded"),
        [evicted],
        "{:#?}",
        observer.seen()
    );
    eprintln!(
        "evicted_creation_pod_is_retried: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn staging_pod_never_ready_times_out_and_unstages() {
    let client = cluster().await;
    let started = Instant::now();
    let name = "e2e-fault-timeout";
    // Never writes /pav/ready, never exits.
    let objects = objects(name, "true", &Gate::script("staging"), "10s");
    let gate = Gate::new(name);
    let observer = start_scenario(&client, name, name, &objects).await;

    apply(&client, &claim(name, name)).await.unwrap();
    apply(&client, &client_pod(name)).await.unwrap();
    let line = wait_event(
        &client,
        name,
        "client",
        &["FailedMount", "staging pod", "did not finish within 10s"],
        AFTER_FAULT,
    )
    .await;
    let line = or_diagnose(&client, name, line).await;
    eprintln!("client event: {line}");
    // Kubernetes retries NodePublishVolume; each retry waits for the same
    // staging pod rather than starting another. Once a retry has been
    // answered too, exactly one staging pod has started.
    let retried = wait_until(
        "a retried NodePublishVolume answered",
        AFTER_FAULT,
        || async { Ok((timeouts_reported(&client, name).await? >= 2).then_some(())) },
    )
    .await;
    or_diagnose(&client, name, retried).await;
    assert_eq!(
        gate.runs("staging").len(),
        1,
        "one staging pod: {:?}; seen: {:#?}",
        gate.runs("staging"),
        observer.seen()
    );

    tear_down(&client, name, &objects).await;
    let unstaged = observer.wait("unstaging", "Succeeded", AFTER_FAULT).await;
    or_diagnose(&client, name, unstaged).await;
    eprintln!(
        "staging_pod_never_ready_times_out_and_unstages: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// How many times kubelet reported the client's staging timing out (events
/// of one reason and message are one Event with a count).
async fn timeouts_reported(client: &Client, ns: &str) -> anyhow::Result<i32> {
    Ok(events(client, ns, "client")
        .await?
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("FailedMount")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("did not finish within 10s"))
        })
        .map(|e| e.count.unwrap_or(1))
        .sum())
}
