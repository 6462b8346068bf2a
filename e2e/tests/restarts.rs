//! Scenario 7: pav's components restart mid-phase. The CSI controller's
//! leader (two replicas, as installed by default) is killed while a slow
//! creation pod runs and its standby takes over; the node plugin is
//! killed while a slow staging pod runs; everything completes (the
//! component that goes on finds the pod by its deterministic name) and
//! nothing leaks. And the node plugin killed after its staging pod has
//! finished but before it bound the volume for the client, or while the
//! client is deleted mid-staging. A leader shut down gracefully (a
//! rollout) releases its Lease.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use pav_e2e::*;

const NAME: &str = "e2e-restart";
const NS: &str = "e2e-restart";

const OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-restart
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    podTemplate:
      spec:
        containers:
          - name: slow-create
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "sleep 15; echo 1Mi > /pav/capacity"]
  volumeStaging:
    podTemplate:
      spec:
        containers:
          - name: slow-stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "sleep 15; mkdir -p /pav/volume; echo survived > /pav/volume/file"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-restart
provisioner: e2e-restart
"#;

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: e2e-restart
spec:
  storageClassName: e2e-restart
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
"#;

const CLIENT: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: e2e-restart
spec:
  restartPolicy: Never
  containers:
    - name: client
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [cat, /volume/file]
      volumeMounts: [{ name: data, mountPath: /volume }]
  volumes:
    - name: data
      persistentVolumeClaim: { claimName: data }
"#;

/// The CSI controller's pods, once as many are ready as its Deployment
/// asks for (more than one) and its PodDisruptionBudget lets a drain evict
/// exactly one of them; and pav's controller's budget likewise.
async fn replicated_csi_controller(client: &Client) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let selector = ListParams::default().labels(&format!(
        "{LABEL_PROVISIONER}={NAME},app.kubernetes.io/component=csi-controller"
    ));
    let budget = |name: String| {
        let budgets = budgets.clone();
        async move {
            let status = budgets.get(&name).await?.status.unwrap_or_default();
            anyhow::Ok((
                status.expected_pods.unwrap_or_default(),
                status.disruptions_allowed.unwrap_or_default(),
            ))
        }
    };
    wait_until(
        "replicas ready, each budget allowing one eviction",
        STEP,
        || async {
            let ready: Vec<Pod> = pods.list(&selector).await?.items;
            let replicas = ready.len() as i32;
            let controller = budget(format!("pav-{NAME}-controller")).await?;
            let pav = budget("pav-controller".to_owned()).await?;
            let done = replicas > 1
                && ready.iter().all(pod_ready)
                && controller == (replicas, 1)
                && pav.0 > 1
                && pav.1 == 1;
            if done {
                return Ok(Some(ready));
            }
            anyhow::bail!(
                "{replicas} pods, budgets (expected, allowed): {controller:?}, pav's {pav:?}"
            )
        },
    )
    .await
    .unwrap()
}

/// The pod holding the Lease of the CSI controller's external-provisioner
/// (named after the driver; csi-lib-utils' identity is the pod's host
/// name), among `pods`.
async fn provisioner_leader(client: &Client, pods: &[Pod]) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    wait_until("a leader among the replicas", STEP, || async {
        let holder = (leases.get(NAME).await?.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        let leader = pods
            .iter()
            .map(|p| p.name_any())
            .find(|name| holder.starts_with(name));
        match leader {
            Some(leader) => Ok(Some(leader)),
            None => anyhow::bail!("Lease {NAME} held by {holder:?}"),
        }
    })
    .await
    .unwrap()
}

/// Waits until claim `data` of `ns` is Bound; returns its volume's name.
async fn bound_volume(client: &Client, ns: &str) -> String {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    match wait_for(&claims, "data", Duration::from_secs(300), "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    {
        Ok(claim) => volume_name(&claim).unwrap(),
        Err(e) => panic!("{e}; events: {:#?}", event_lines(client, ns, "data").await),
    }
}

/// Waits until pod `client` of `ns` finished, and checks it read what the
/// staging pod wrote.
async fn client_read_the_volume(client: &Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = match wait_for(&pods, "client", Duration::from_secs(300), "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await
    {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{e}; events: {:#?}",
            event_lines(client, ns, "client").await
        ),
    };
    assert_eq!(pod_phase(&pod), "Succeeded");
    assert_eq!(logs(client, ns, "client").await.unwrap().trim(), "survived");
}

/// Deletes the client (if still there) and the claim, waits for the volume
/// and every PaV pod to go (the node plugin unstages: only then may the
/// provisioner go), removes the provisioner and checks nothing leaked.
async fn tear_down(client: &Client, name: &str, objects: &str, volume: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), name);
    delete_and_wait(&pods, "client", STEP).await.unwrap();
    delete_and_wait(&claims, "data", STEP).await.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    wait_gone(&pvs, volume, STEP).await.unwrap();
    wait_no_pav_pods(client, name, STEP).await.unwrap();
    delete(client, objects).await.unwrap();
    delete_provisioner(client, name, STEP).await.unwrap();
    assert_no_leaks(client, name, Duration::from_secs(120)).await;
}

/// The one node plugin process of provisioner `name`.
fn node_plugin_pid(name: &str) -> u32 {
    let plugin = faults::pids_running(&["csi-node", "--provisioner", name]);
    assert_eq!(
        plugin.len(),
        1,
        "node plugin processes of {name}: {plugin:?}"
    );
    plugin[0]
}

/// A scenario whose namespace and provisioner are both `name`: a bound
/// volume, and a client whose staging pod is running while the node plugin
/// is frozen (SIGSTOP); the caller decides how the plugin dies.
struct FrozenMidStaging {
    objects: String,
    observer: PodObserver,
    volume: String,
    plugin: u32,
}

async fn node_plugin_frozen_mid_staging(client: &Client, name: &str) -> FrozenMidStaging {
    let objects = OBJECTS.replace(NAME, name);
    let observer = start_scenario(client, name, name, &objects).await;
    apply(client, &CLAIM.replace(NAME, name)).await.unwrap();
    let volume = bound_volume(client, name).await;

    apply(client, &CLIENT.replace(NAME, name)).await.unwrap();
    observer.wait("staging", "Running", STEP).await.unwrap();
    let plugin = node_plugin_pid(name);
    faults::signal(plugin, "STOP").unwrap();
    FrozenMidStaging {
        objects,
        observer,
        volume,
        plugin,
    }
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn components_restart_mid_phase() {
    let client = cluster().await;
    let started = Instant::now();
    let observer = start_scenario(&client, NS, NAME, OBJECTS).await;

    // The CSI controller's leader dies while the creation pod runs; the
    // standby takes over (once the Lease expires: the killed leader never
    // released it) and finds the creation pod by its name.
    let replicas = replicated_csi_controller(&client).await;
    apply(&client, CLAIM).await.unwrap();
    observer.wait("creation", "Running", STEP).await.unwrap();
    let leader = provisioner_leader(&client, &replicas).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    pods.delete(&leader, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eprintln!("killed the CSI controller's leader {leader}");
    let volume = bound_volume(&client, NS).await;
    assert_eq!(
        observer.runs("creation"),
        1,
        "one creation pod, picked up by the new leader: {:#?}",
        observer.seen()
    );
    let successor = provisioner_leader(
        &client,
        &pods.list(&Default::default()).await.unwrap().items,
    )
    .await;
    assert_ne!(successor, leader, "another replica leads");

    // The node plugin dies while the staging pod runs.
    apply(&client, CLIENT).await.unwrap();
    observer.wait("staging", "Running", STEP).await.unwrap();
    kill_component(&client, NAME, "csi-node").await;
    client_read_the_volume(&client, NS).await;
    assert_eq!(observer.runs("staging"), 1, "{:#?}", observer.seen());

    // A leader shut down gracefully (a rollout) hands its Lease over at
    // once: its successor does not wait for it to expire.
    let replicas = replicated_csi_controller(&client).await;
    let leader = provisioner_leader(&client, &replicas).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let held = leases.get(NAME).await.unwrap().spec.unwrap();
    pods.delete(&leader, &DeleteParams::default())
        .await
        .unwrap();
    let taken = wait_until("another replica holding the Lease", STEP, || async {
        let spec = leases.get(NAME).await?.spec.unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        Ok((!holder.is_empty() && !holder.starts_with(&leader)).then_some(spec))
    })
    .await
    .unwrap();
    let seconds = |time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
        time.unwrap().0.as_second()
    };
    let expiry = seconds(held.renew_time) + i64::from(held.lease_duration_seconds.unwrap());
    let acquired = seconds(taken.acquire_time);
    assert!(
        acquired < expiry,
        "Lease {NAME} taken over at {acquired}, not before it expired at {expiry}: {leader} did not release it"
    );
    eprintln!(
        "Lease {NAME} handed over {} s before it would have expired",
        expiry - acquired
    );

    tear_down(&client, NAME, OBJECTS, &volume).await;
    eprintln!(
        "components_restart_mid_phase: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// The node plugin is killed between the staging pod's success and the
/// bind for the client: it is frozen (SIGSTOP) while the staging pod runs,
/// so it cannot act on the pod's end, and killed once the pod has
/// succeeded. kubelet's NodePublishVolume fails with the connection and is
/// retried against the restarted plugin, which must find the finished pod
/// by its name and bind what it staged: one staging pod, data read, nothing
/// leaked.
#[tokio::test]
#[ignore = "needs a cluster"]
async fn node_plugin_killed_between_staging_and_bind() {
    let client = cluster().await;
    const BIND: &str = "e2e-restart-bind";
    let started = Instant::now();
    let FrozenMidStaging {
        objects,
        observer,
        volume,
        plugin,
    } = node_plugin_frozen_mid_staging(&client, BIND).await;
    let staged = observer.wait("staging", "Succeeded", STEP).await;
    // Killed whatever happened, so a failure above leaves no frozen plugin.
    faults::signal(plugin, "KILL").unwrap();
    staged.unwrap();
    eprintln!("node plugin {plugin} killed after its staging pod succeeded");

    client_read_the_volume(&client, BIND).await;
    assert_eq!(
        observer.runs("staging"),
        1,
        "the restarted plugin must use the finished staging pod: {:#?}",
        observer.seen()
    );
    tear_down(&client, BIND, &objects, &volume).await;
    eprintln!(
        "node_plugin_killed_between_staging_and_bind: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// The node plugin is frozen mid-staging, the client pod deleted, then the
/// plugin killed: the NodePublishVolume kubelet sent never answered, so
/// kubelet holds the mount as uncertain and unpublishes it once the plugin
/// is back; the restarted plugin must unstage a staging it never finished
/// for a client that no longer exists, and let its staging pod go (else its
/// finalizer and the provisioner would stay).
#[tokio::test]
#[ignore = "needs a cluster"]
async fn client_deleted_while_node_plugin_down_mid_staging() {
    let client = cluster().await;
    const ORPHAN: &str = "e2e-restart-orphan";
    let started = Instant::now();
    let FrozenMidStaging {
        objects,
        observer,
        volume,
        plugin,
    } = node_plugin_frozen_mid_staging(&client, ORPHAN).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ORPHAN);
    let gone = delete_and_wait(&pods, "client", STEP).await;
    faults::signal(plugin, "KILL").unwrap();
    gone.unwrap();
    eprintln!("client deleted while node plugin {plugin} was frozen; plugin killed");

    wait_no_pav_pods(&client, ORPHAN, Duration::from_secs(420))
        .await
        .unwrap_or_else(|e| panic!("{e}: {:#?}", observer.seen()));
    tear_down(&client, ORPHAN, &objects, &volume).await;
    eprintln!(
        "client_deleted_while_node_plugin_down_mid_staging: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
