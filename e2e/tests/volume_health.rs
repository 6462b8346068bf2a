//! Scenario: volume health on a real cluster. examples/sparse-file (whose
//! pav-sdk `Health` checks an image's filesystem superblock) serves an
//! ext4 claim to a running pod; the kubelet, with its `CSIVolumeHealth`
//! feature gate (scripts/cluster-up turns it on, for the API server too),
//! asks the node plugin for the volume's health and reports it: before
//! Kubernetes' v1.37 from NodeGetVolumeStats' condition, as the gauge
//! `kubelet_volume_stats_health_status_abnormal` and a
//! `VolumeConditionAbnormal` Warning event on the pod; from v1.37 from
//! NodeGetVolumeHealth, in the pod's `status.volumeHealth` (see
//! [`Reporting`]):
//!
//! - healthy: the gauge is 0 for the claim, or the pod's status lists no
//!   condition for the volume;
//! - the image's ext4 superblock magic overwritten on the node (what a
//!   stray write or a truncation does): abnormal, reported with a message
//!   that names the image (the event's, or the condition's);
//! - the magic written back: healthy again, and the pod unmounts cleanly;
//!
//! then the claim is deleted and nothing is left. examples/local-volumes
//! (PaV `spec.volumeHealth`: a pod on the node checks the staged image
//! every minute, every 10 s here, and writes `/pav/condition`) goes
//! through the same steps.
//! external-health-monitor (events on the claim) is not deployed here:
//! its module is not to be had on this machine, so the kubelet's report
//! is the proof.

use std::os::unix::fs::FileExt as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::{Api, Client};
use pav_e2e::sparse_file::{self, DRIVER, VOLUMES_DIR};
use pav_e2e::*;

const NS: &str = "e2e-volume-health";
const CLAIM: &str = "data";
const POD: &str = "user";
const FILES: [&str; 2] = ["driver.yaml", "storageclass.yaml"];
/// ext4's superblock magic (0xEF53, little-endian) and where it is in the
/// image: byte 56 of the superblock at 1024.
const EXT4_MAGIC: [u8; 2] = [0x53, 0xEF];
const MAGIC_OFFSET: u64 = 1024 + 56;
/// The kubelet measures volumes every volumeStatsAggPeriod (1 minute by
/// default) and the metric shows the last measure: allow a few rounds.
const HEALTH_ROUNDS: Duration = Duration::from_secs(240);

/// A 64 MiB claim [`CLAIM`] of class `class` in namespace `ns`.
fn claim(ns: &str, class: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {CLAIM}
  namespace: {ns}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 64Mi
"#
    )
}

/// What the kubelet reports of the health of claim [`CLAIM`], mounted as
/// volume `data` of pod [`POD`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Health {
    Healthy,
    /// With the condition's messages where the report carries them.
    Abnormal(String),
}

/// Where this cluster's kubelet reports a volume's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reporting {
    /// Before Kubernetes v1.37: the gauge
    /// `kubelet_volume_stats_health_status_abnormal` (0 or 1, per claim),
    /// the condition's message in a `VolumeConditionAbnormal` event on
    /// the pod.
    Gauge,
    /// From v1.37: the pod's `status.volumeHealth`, an entry per volume
    /// whose `healthConditions` hold the abnormal conditions (none:
    /// healthy); the gauge and the event are gone.
    PodStatus,
}

impl Reporting {
    /// The way of the API server's Kubernetes version.
    async fn of(client: &Client) -> Self {
        let version = client
            .apiserver_version()
            .await
            .expect("the server's version");
        let minor: u32 = (version.minor.trim_end_matches('+').parse())
            .unwrap_or_else(|e| panic!("minor version {:?}: {e}", version.minor));
        match (version.major.as_str(), minor) {
            ("1", ..37) => Reporting::Gauge,
            _ => Reporting::PodStatus,
        }
    }

    /// The health last reported, once there is a report.
    async fn health(self, client: &Client, ns: &str, node: &str) -> Option<Health> {
        match self {
            Reporting::Gauge => Some(match abnormal_gauge(client, ns, node).await? {
                0 => Health::Healthy,
                _ => Health::Abnormal(String::new()),
            }),
            Reporting::PodStatus => pod_status_health(client, ns).await,
        }
    }
}

/// The kubelet's `kubelet_volume_stats_health_status_abnormal` for claim
/// [`CLAIM`] of namespace `ns` on `node` (1 abnormal, 0 not), once it
/// reports one.
async fn abnormal_gauge(client: &Client, ns: &str, node: &str) -> Option<u64> {
    let request = http::Request::get(format!("/api/v1/nodes/{node}/proxy/metrics"))
        .body(Vec::new())
        .unwrap();
    let metrics = client.request_text(request).await.ok()?;
    let labels = [
        format!("namespace=\"{ns}\""),
        format!("persistentvolumeclaim=\"{CLAIM}\""),
    ];
    metrics
        .lines()
        .filter(|line| line.starts_with("kubelet_volume_stats_health_status_abnormal{"))
        .find(|line| labels.iter().all(|label| line.contains(label.as_str())))
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
}

/// The health of volume `data` in pod [`POD`]'s `status.volumeHealth`:
/// abnormal with the conditions' messages while it lists any; healthy
/// when it lists none, or has no entry for the volume once the pod runs
/// (the kubelet writes entries for abnormal volumes).
async fn pod_status_health(client: &Client, ns: &str) -> Option<Health> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let status = pods.get(POD).await.ok()?.status?;
    let entry = (status.volume_health.unwrap_or_default().into_iter()).find(|v| v.name == "data");
    let conditions = entry.and_then(|v| v.health_conditions).unwrap_or_default();
    Some(match conditions.is_empty() {
        true => Health::Healthy,
        false => Health::Abnormal(format!("{conditions:?}")),
    })
}

/// Waits until the health of namespace `ns`'s claim is `want` (for
/// abnormal: any report of it, whose messages it returns); on a timeout,
/// panics with `diagnose`'s account.
async fn wait_health<D: std::future::Future<Output = String>>(
    client: &Client,
    (reporting, ns, node): (Reporting, &str, &str),
    want: &Health,
    what: &str,
    diagnose: impl FnOnce() -> D,
) -> Health {
    let matches = |health: &Health| match (want, health) {
        (Health::Abnormal(_), Health::Abnormal(_)) => true,
        _ => want == health,
    };
    let seen = wait_until(what, HEALTH_ROUNDS, || async {
        let health = reporting.health(client, ns, node).await;
        Ok(health.filter(|h| matches(h)))
    })
    .await;
    match seen {
        Ok(health) => health,
        Err(e) => {
            let account = diagnose().await;
            let now = reporting.health(client, ns, node).await;
            panic!("{e}; {reporting:?} reports {now:?}; {account}")
        }
    }
}

/// The last lines of the sparse-file node plugins' logs, for a failure.
async fn sparse_file_node_logs(client: &Client) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), sparse_file::DRIVER_NS);
    let mut tail = String::from("node plugin log tail:\n");
    for pod in pods
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let name = pod.metadata.name.unwrap_or_default();
        let log = logs(client, sparse_file::DRIVER_NS, &name)
            .await
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(20).collect();
        tail.push_str(&format!("--- {name}\n"));
        for line in lines.into_iter().rev() {
            tail.push_str(line);
            tail.push('\n');
        }
    }
    tail
}

/// Writes `bytes` at the magic's offset of `image`, returning what was there.
fn write_magic(image: &str, bytes: [u8; 2]) -> [u8; 2] {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .unwrap_or_else(|e| panic!("{image}: {e}"));
    let mut was = [0u8; 2];
    file.read_exact_at(&mut was, MAGIC_OFFSET).unwrap();
    file.write_all_at(&bytes, MAGIC_OFFSET).unwrap();
    file.sync_all().unwrap();
    was
}

/// Starts pod [`POD`] in `ns`, which writes a token to claim [`CLAIM`] and
/// keeps running; once it runs, the pod API and its node.
async fn run_writer(client: &Client, ns: &str) -> (Api<Pod>, String) {
    let script = "echo token > /data/token && sync && sleep 3600";
    apply(client, &sparse_file::client_pod(ns, POD, CLAIM, script))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let running = wait_for(&pods, POD, STEP, "Running", |p| pod_phase(p) == "Running").await;
    let running = running.unwrap_or_else(|e| panic!("{e}"));
    let node = (running.spec.and_then(|s| s.node_name)).expect("a running pod has a node");
    (pods, node)
}

/// The health steps on a running pod's volume: healthy; its image's ext4
/// magic overwritten: abnormal, reported with a message naming the image
/// and `damage` (the condition's, or the kubelet's event on the pod);
/// written back: healthy again.
async fn damaged_and_repaired<D: std::future::Future<Output = String>>(
    client: &Client,
    (ns, node): (&str, &str),
    image: &str,
    damage: &str,
    diagnose: impl Fn() -> D,
) {
    let reporting = Reporting::of(client).await;
    let at = (reporting, ns, node);
    let healthy = "the kubelet to report the volume healthy";
    wait_health(client, at, &Health::Healthy, healthy, &diagnose).await;
    let was = write_magic(image, [0, 0]);
    assert_eq!(was, EXT4_MAGIC, "{image} held ext4 where health looks");
    let abnormal = "the kubelet to report the volume abnormal";
    let reported = wait_health(
        client,
        at,
        &Health::Abnormal(String::new()),
        abnormal,
        &diagnose,
    )
    .await;
    match (reporting, reported) {
        (Reporting::Gauge, _) => {
            let needles = ["VolumeConditionAbnormal", image, damage];
            let event = wait_event(client, ns, POD, &needles, STEP).await;
            event.unwrap_or_else(|e| panic!("{e}"));
        }
        (Reporting::PodStatus, Health::Abnormal(conditions)) => assert!(
            conditions.contains(image) && conditions.contains(damage),
            "status.volumeHealth names {image} and {damage:?}: {conditions}"
        ),
        (Reporting::PodStatus, Health::Healthy) => unreachable!("waited for abnormal"),
    }
    write_magic(image, EXT4_MAGIC);
    let repaired = "the kubelet to report the repaired volume healthy";
    wait_health(client, at, &Health::Healthy, repaired, &diagnose).await;
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn sparse_file_reports_a_damaged_image_as_abnormal() {
    let client = cluster().await;
    let started = Instant::now();
    reset(&client, NS, DRIVER).await.unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    namespace(&client, NS).await.unwrap();
    sparse_file::install(&client, &FILES).await;

    apply(&client, &claim(NS, "sparse-file")).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let bound = wait_for(&claims, CLAIM, STEP, "Bound", |c| claim_phase(c) == "Bound").await;
    let bound = bound.unwrap_or_else(|e| panic!("{e}"));
    let volume = volume_name(&bound).expect("a bound claim names its volume");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let handle = (pv.spec.and_then(|s| s.csi).map(|csi| csi.volume_handle)).expect("a CSI volume");
    let image = format!("{VOLUMES_DIR}/{handle}.img");

    let (pods, node) = run_writer(&client, NS).await;

    let logs = || sparse_file_node_logs(&client);
    let damage = "no ext4 superblock";
    damaged_and_repaired(&client, (NS, &node), &image, damage, logs).await;

    delete_and_wait(&pods, POD, STEP).await.unwrap();
    delete_and_wait(&claims, CLAIM, STEP).await.unwrap();
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    wait_until("the image to go", STEP, || async {
        Ok((!std::path::Path::new(&image).exists()).then_some(()))
    })
    .await
    .unwrap();
    sparse_file::uninstall(&client, &FILES).await;
    assert_no_leaks(&client, DRIVER, Duration::from_secs(120)).await;
    eprintln!(
        "sparse_file_reports_a_damaged_image_as_abnormal: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// The health check's cadence as shipped, and the one here: a check pod
/// every minute made each of the three steps wait a minute or more, and
/// the cadence is not what this scenario tests.
const SHIPPED_CADENCE: &str = "volumeHealth:\n    every: 1m\n";
const SCENARIO_CADENCE: &str = "volumeHealth:\n    every: 10s\n";

/// examples/local-volumes as shipped, provisioner and class, but for the
/// health check's cadence ([`SCENARIO_CADENCE`]).
fn local_volumes_objects() -> String {
    let example = |file: &str| example_file("local-volumes", file);
    let provisioner = example("provisioner.yaml");
    assert!(
        provisioner.contains(SHIPPED_CADENCE),
        "examples/local-volumes/provisioner.yaml has no {SHIPPED_CADENCE:?}"
    );
    let provisioner = provisioner.replace(SHIPPED_CADENCE, SCENARIO_CADENCE);
    [provisioner, example("storageclass.yaml")].join("\n---\n")
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn local_volumes_report_a_damaged_image_as_abnormal() {
    const NS: &str = "e2e-local-health";
    const NAME: &str = "local-volumes";
    let client = cluster().await;
    let started = Instant::now();
    let objects = local_volumes_objects();
    let _observer = start_scenario(&client, NS, NAME, &objects).await;

    apply(&client, &claim(NS, NAME)).await.unwrap();
    let (pods, node) = run_writer(&client, NS).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let volume = volume_name(&claims.get(CLAIM).await.unwrap()).expect("bound");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let handle = (pv.spec.and_then(|s| s.csi).map(|csi| csi.volume_handle)).expect("a CSI volume");
    let image = format!("/var/lib/pav-local-volumes/{handle}.img");

    let events = || async { format!("pod events: {:#?}", event_lines(&client, NS, POD).await) };
    let damage = "has no ext4 or xfs superblock";
    damaged_and_repaired(&client, (NS, &node), &image, damage, events).await;

    delete_and_wait(&pods, POD, STEP).await.unwrap();
    delete_and_wait(&claims, CLAIM, STEP).await.unwrap();
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    assert!(!std::path::Path::new(&image).exists(), "{image} deleted");
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();
    delete(&client, &objects).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    eprintln!(
        "local_volumes_report_a_damaged_image_as_abnormal: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
