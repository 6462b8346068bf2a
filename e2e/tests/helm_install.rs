//! The Helm chart `charts/pav` on the real cluster, used the way storage
//! users install a CSI driver (docs/install.md, "With Helm") and upgrade it
//! from the chart before (docs/upgrade.md):
//!
//! 1. `helm install` of this chart with `--create-namespace` is refused,
//!    saying how to create and label the namespace for Pod Security, and
//!    leaves nothing; `helm install` of the previous chart
//!    (`e2e/previous-chart/pav`, its README says which commit), which had
//!    no such check, into a namespace of its own (`--create-namespace`;
//!    an upgrade to this chart is refused until the namespace is labelled
//!    as the message says), with the image `scripts/e2e-image` loaded (`pav:dev`,
//!    `pullPolicy: Never`, so nothing is pulled); the controller becomes
//!    ready, and `examples/local-volumes` (volumes are image files on the
//!    node, so data outlives the pods that use it) gets its driver, node
//!    plugin included, in the release namespace;
//! 2. a claim binds and a client pod writes a token into the volume and
//!    keeps reading it;
//! 3. `helm upgrade --reset-then-reuse-values` to `charts/pav`, setting
//!    `logFormat=json` and `logLevel=debug`, a value the previous chart
//!    lacks, and leaving `controller.replicas` (also new) to its default,
//!    which the release then has: the values set at install carry over, the controller, the CSI
//!    controller and the node plugin are replaced by pods that log JSON at
//!    debug level, and the volume is kept: same claim, same
//!    PersistentVolume, the writer read it all along and never restarted,
//!    the volume was not staged again; once the writer is gone (the new
//!    node plugin unstages what the old one staged) a new client pod reads
//!    the token back;
//! 4. claim and pods deleted, then `helm uninstall` in the wrong order,
//!    the PavProvisioner still there: the chart's pre-delete hook (`pav
//!    uninstall-check`) refuses, naming it and the `kubectl delete` to run,
//!    as its pod's termination message, and nothing is uninstalled;
//! 5. the PavProvisioner deleted as the message says, `helm uninstall`
//!    again: nothing stuck (no PavProvisioner, PersistentVolume or pod of
//!    the driver, no pod of the release), no object labelled as the
//!    release's anywhere, nothing in the release namespace but what
//!    Kubernetes puts in every namespace, no ClusterRoles or bindings, no
//!    CSIDriver, no image file; only the CRD stays, on purpose
//!    (`helm.sh/resource-policy: keep`: deleting it would delete every
//!    PavProvisioner of the cluster), and the namespace, which Helm never
//!    deletes when `--create-namespace` made it, holding only the
//!    controller's leader-election Lease (the test then deletes it).
//!
//! The chart and `pav manifests` install objects of the same fixed names
//! (CRD, ClusterRoles, ClusterRoleBinding), and the `pav manifests`
//! controller would reconcile this scenario's PavProvisioner too, so the two
//! installs cannot run side by side: the scenario removes a `pav manifests`
//! install it finds (all but the `pav` Namespace and the CRD, which Helm
//! adopts: deleting it would delete every PavProvisioner) and puts it back
//! at the end, also when the scenario fails. `scripts/e2e` runs it in a step
//! of its own, before its own install, so in CI (a fresh cluster) Helm
//! creates everything, the CRD included. The release's controller only
//! reconciles PavProvisioners labelled for it (chart value `selector`), so
//! provisioners an earlier failed scenario left cannot get drivers in the
//! release namespace and be blamed on the chart.
//!
//! Needs helm (`$PAV_HELM`, default `helm` on the PATH) and the pav binary
//! (`pav manifests`; see [`pav_binary`]).

use std::panic::AssertUnwindSafe;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use futures::FutureExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Api, Client, ResourceExt};
use pav_e2e::sparse_file::{client_pod, run_client};
use pav_e2e::*;

/// Release name, as in docs/install.md.
const RELEASE: &str = "pav";
/// The release namespace: the controller's, its drivers' and their PaV pods'.
const RELEASE_NAMESPACE: &str = "e2e-helm-pav";
/// examples/local-volumes' PavProvisioner (and CSI driver and StorageClass).
const NAME: &str = "local-volumes";
/// Where the example keeps its volumes' images on each node.
const VOLUMES_DIR: &str = "/var/lib/pav-local-volumes";
/// Namespace of the claim and the client pods.
const NS: &str = "e2e-helm";
/// The label the release's controller selects PavProvisioners by.
const SELECTOR: &str = "e2e.pav.albertofaria.github.io/install=helm";
const CRD: &str = "pavprovisioners.pav.albertofaria.github.io";
/// Namespace of a `pav manifests` install.
const MANIFESTS_NAMESPACE: &str = PAV_NAMESPACE;
/// pav's own controller pods (drivers' pods carry the provisioner label).
const CONTROLLER_PODS: &str = "app.kubernetes.io/component=controller,app.kubernetes.io/name=pav,!pav.albertofaria.github.io/provisioner";
/// The labels Helm puts on every object of the release (charts/pav/templates/_helpers.tpl).
const RELEASE_LABELS: &str = "app.kubernetes.io/managed-by=Helm,app.kubernetes.io/instance=pav";
/// The controller's leader-election Lease in the release namespace. Not the
/// chart's (the controller creates it), so `helm uninstall` leaves it, and
/// still held: Helm deletes the controller's RoleBinding along with its
/// Deployment, so the stopping controller may no longer update the Lease
/// to release it. It goes with the namespace.
const CONTROLLER_LEASE: &str = "pav-controller";
/// The Pod Security label the release namespace needs, as the chart's
/// messages write it.
const POD_SECURITY_PRIVILEGED: &str = "pod-security.kubernetes.io/enforce=privileged";
/// The ClusterRoles and ClusterRoleBinding the chart installs (fixed names).
const CLUSTER_ROLES: [&str; 5] = [
    "pav-controller",
    "pav-csi-controller",
    "pav-csi-node",
    "pav-csi-node-pods",
    "pav-csi-leader-election",
];

fn chart() -> String {
    format!("{}/../charts/pav", env!("CARGO_MANIFEST_DIR"))
}

/// The chart the scenario installs first and upgrades from
/// (e2e/previous-chart/README.md says which commit it is).
fn previous_chart() -> String {
    format!("{}/previous-chart/pav", env!("CARGO_MANIFEST_DIR"))
}

/// The chart's pre-delete hook: its Job, ServiceAccount, ClusterRole and
/// ClusterRoleBinding (charts/pav/templates/uninstall-check.yaml).
const UNINSTALL_CHECK: &str = "pav-uninstall-check";

fn example(file: &str) -> String {
    example_file("local-volumes", file)
}

/// The example's PavProvisioner, labelled for the release's controller, and
/// its StorageClass.
fn objects() -> String {
    let mut provisioner: serde_yaml::Value =
        serde_yaml::from_str(&example("provisioner.yaml")).expect("the example parses");
    // Applied under the previous chart, whose CRD does not declare
    // spec.stagingPer (its users' provisioners stage per pod; the field
    // is fixed once created, so it stays so after the upgrade), nor
    // spec.populatedFrom and spec.volumePopulation.
    let spec = provisioner["spec"]
        .as_mapping_mut()
        .expect("the example's spec");
    for newer in ["stagingPer", "populatedFrom", "volumePopulation"] {
        spec.remove(newer);
    }
    let (key, value) = SELECTOR.split_once('=').expect("key=value");
    provisioner["metadata"]["labels"] =
        serde_yaml::Mapping::from_iter([(key.into(), value.into())]).into();
    format!(
        "{}---\n{}",
        serde_yaml::to_string(&provisioner).expect("serializes"),
        example("storageclass.yaml")
    )
}

/// Runs helm with `args` (off the runtime's thread: `--wait` blocks for
/// minutes, and the pod observer must keep watching); its stdout, or an
/// error with its stderr.
async fn helm(args: &[&str]) -> anyhow::Result<String> {
    let helm = std::env::var("PAV_HELM").unwrap_or_else(|_| "helm".to_owned());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let command = format!("{helm} {}", args.join(" "));
    let output = tokio::task::spawn_blocking({
        let helm = helm.clone();
        move || Command::new(helm).args(args).output()
    })
    .await?
    .with_context(|| format!("cannot run {helm} (set PAV_HELM)"))?;
    if !output.status.success() {
        bail!(
            "{command} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether Helm has a release of that name in the release namespace, in any
/// state (a failed install is a release too).
async fn release_exists() -> anyhow::Result<bool> {
    let listed = helm(&["list", "--namespace", RELEASE_NAMESPACE, "--all", "--short"]).await?;
    Ok(listed.lines().any(|line| line.trim() == RELEASE))
}

/// The `pav` container of a pav pod (controller, CSI controller, node plugin).
fn pav_container(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "pav")
}

/// Whether pod's `pav` container runs with `flag value` (the controller
/// gets `--flag=value`, the drivers two arguments).
fn runs_with(pod: &Pod, flag: &str, value: &str) -> bool {
    let args = pav_container(pod)
        .and_then(|c| c.args.as_deref())
        .unwrap_or_default();
    args.iter().any(|a| *a == format!("{flag}={value}"))
        || args.windows(2).any(|w| w[0] == flag && w[1] == value)
}

/// Whether pod's `pav` container runs with the upgrade's values:
/// `--log-format json` and `--log-level debug` (the value the previous
/// chart lacks).
fn upgraded(pod: &Pod) -> bool {
    runs_with(pod, "--log-format", "json") && runs_with(pod, "--log-level", "debug")
}

fn uids(pods: &[Pod]) -> Vec<String> {
    pods.iter().filter_map(|p| p.uid()).collect()
}

/// Waits until pods of `selector` in the release namespace exist and are
/// all ready, none of them one of `old` (pod UIDs) and, with `upgrade`,
/// all running with the upgrade's values ([`upgraded`]); returns them.
/// `what` names them in the failure.
async fn wait_pods(
    client: &Client,
    what: &str,
    selector: &str,
    old: &[String],
    upgrade: bool,
) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let params = ListParams::default().labels(selector);
    let found = wait_until(
        &format!("{what} ({RELEASE_NAMESPACE}, {selector}) ready"),
        STEP,
        || async {
            let listed = pods.list(&params).await?.items;
            let done = !listed.is_empty()
                && listed.iter().all(|p| {
                    pod_ready(p)
                        && !p.uid().is_some_and(|uid| old.contains(&uid))
                        && (!upgrade || upgraded(p))
                });
            if done {
                return Ok(Some(listed));
            }
            let states: Vec<String> = listed
                .iter()
                .map(|p| {
                    format!(
                        "{} ready={} old={} upgraded={}",
                        p.name_any(),
                        pod_ready(p),
                        p.uid().is_some_and(|uid| old.contains(&uid)),
                        upgraded(p)
                    )
                })
                .collect();
            bail!("pods: {states:?}")
        },
    )
    .await;
    found.unwrap_or_else(|e| panic!("{e}"))
}

/// The driver's pods of one component (`csi-controller`, `csi-node`).
fn driver_pods(component: &str) -> String {
    format!("{LABEL_PROVISIONER}={NAME},app.kubernetes.io/component={component},!{LABEL_PHASE}")
}

/// Every pod pav runs for the release: its controller, the scenario's CSI
/// controller and node plugin; with `old`, each must be a new pod.
async fn wait_pav_pods(client: &Client, old: &[String], upgrade: bool) -> Vec<Pod> {
    let mut all = wait_pods(client, "pav controller", CONTROLLER_PODS, old, upgrade).await;
    for component in ["csi-controller", "csi-node"] {
        all.extend(wait_pods(client, component, &driver_pods(component), old, upgrade).await);
    }
    all
}

/// A `pav manifests` install (what `scripts/e2e` applies), removed for the
/// scenario and put back after it.
struct ManifestsInstall {
    yaml: String,
}

impl ManifestsInstall {
    /// `pav manifests` with its defaults, as `scripts/e2e` installs it.
    fn read() -> ManifestsInstall {
        let binary = pav_binary();
        let output = Command::new(&binary)
            .arg("manifests")
            .output()
            .unwrap_or_else(|e| panic!("running {} manifests: {e}", binary.display()));
        assert!(
            output.status.success(),
            "{} manifests: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        ManifestsInstall {
            yaml: String::from_utf8(output.stdout).expect("UTF-8"),
        }
    }

    /// Deletes its objects but the Namespace and the CRD, and waits until
    /// its controller is gone; true when it was installed (its
    /// `pav-controller` Deployment existed).
    async fn remove(&self, client: &Client) -> anyhow::Result<bool> {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), MANIFESTS_NAMESPACE);
        let installed = deployments.get_opt("pav-controller").await?.is_some();
        for object in yaml_objects(&self.yaml)? {
            let kind = object.types.as_ref().map(|t| t.kind.as_str());
            if !matches!(kind, Some("Namespace" | "CustomResourceDefinition")) {
                delete_object(client, &object).await?;
            }
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), MANIFESTS_NAMESPACE);
        wait_until(
            &format!("the pav manifests controller pods in {MANIFESTS_NAMESPACE} to go"),
            STEP,
            || async {
                let left = pods
                    .list(&ListParams::default().labels(CONTROLLER_PODS))
                    .await?;
                Ok(left.items.is_empty().then_some(()))
            },
        )
        .await?;
        Ok(installed)
    }

    /// Applies it again and waits for its controller.
    async fn restore(&self, client: &Client) -> anyhow::Result<()> {
        apply(client, &self.yaml).await?;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), MANIFESTS_NAMESPACE);
        wait_for(
            &deployments,
            "pav-controller",
            STEP,
            "rolled out and available",
            |d| {
                let status = d.status.clone().unwrap_or_default();
                let wanted = d.spec.replicas;
                status.observed_generation == d.metadata.generation
                    && status.updated_replicas == wanted
                    && status.available_replicas == wanted
            },
        )
        .await?;
        Ok(())
    }
}

/// Lets the release take over a CRD installed before it (by `pav manifests`
/// or an uninstalled release): Helm refuses to install over an object
/// without its ownership metadata (docs/upgrade.md, "Switching from `pav
/// manifests` to the chart"). Deleting the CRD instead would delete every
/// PavProvisioner.
async fn let_helm_adopt_the_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(CRD).await?.is_none() {
        return Ok(());
    }
    let ownership = serde_json::json!({"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {
            "meta.helm.sh/release-name": RELEASE,
            "meta.helm.sh/release-namespace": RELEASE_NAMESPACE,
        },
    }});
    crds.patch(CRD, &PatchParams::default(), &Patch::Merge(&ownership))
        .await
        .with_context(|| format!("labelling CRD {CRD} for Helm"))?;
    Ok(())
}

/// Takes Helm's labels and annotations off the CRD the uninstalled release
/// kept: they would make a later `helm install` into another namespace
/// fail ("invalid ownership metadata"), and a `pav manifests` install
/// look like Helm's.
async fn strip_helm_from_the_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(CRD).await?.is_none() {
        return Ok(());
    }
    let helm_metadata = serde_json::json!({"metadata": {
        "labels": {
            "helm.sh/chart": null,
            "app.kubernetes.io/managed-by": null,
            "app.kubernetes.io/instance": null,
            "app.kubernetes.io/version": null,
        },
        "annotations": {
            "helm.sh/resource-policy": null,
            "meta.helm.sh/release-name": null,
            "meta.helm.sh/release-namespace": null,
        },
    }});
    crds.patch(CRD, &PatchParams::default(), &Patch::Merge(&helm_metadata))
        .await
        .with_context(|| format!("removing Helm's labels from CRD {CRD}"))?;
    Ok(())
}

/// Removes what the scenario leaves when it fails midway (or what a killed
/// run left): its claims, pods and provisioner (while the release's
/// controller still runs: the provisioner's finalizer needs it), the
/// release and the release namespace. Goes on after an error, so as much
/// as possible is removed; returns the first error.
async fn remove_release(client: &Client) -> anyhow::Result<()> {
    let mut first_error = None;
    if release_exists().await? {
        if let Err(e) = reset(client, NS, NAME).await {
            first_error.get_or_insert(e.context(format!(
                "removing {NS}'s claims and pods and PavProvisioner {NAME}"
            )));
        }
        let uninstall = [
            "uninstall",
            RELEASE,
            "--namespace",
            RELEASE_NAMESPACE,
            "--wait",
        ];
        if let Err(e) = helm(&uninstall).await {
            // The provisioners are gone (reset), so a refusing or failing
            // uninstall check (say, an image without `pav uninstall-check`)
            // must not keep the release's cluster-scoped objects, which
            // deleting the namespace below would not remove.
            first_error.get_or_insert(e);
            if let Err(e) = helm(&[&uninstall[..], &["--no-hooks"]].concat()).await {
                first_error.get_or_insert(e);
            }
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Err(e) = delete_and_wait(&namespaces, RELEASE_NAMESPACE, Duration::from_secs(180)).await
    {
        first_error.get_or_insert(e.context(format!("deleting namespace {RELEASE_NAMESPACE}")));
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What is left after the uninstall: `Kind [namespace/]name`.
#[derive(Debug, Default)]
struct Leftovers {
    /// Objects anywhere labelled as the release's, but the kept CRD.
    labelled: Vec<String>,
    /// Objects in the release namespace, but those Kubernetes makes in
    /// every namespace (ServiceAccount `default`, ConfigMap
    /// `kube-root-ca.crt`), Events (records of what happened, which expire
    /// by themselves) and the controller's leader-election Lease
    /// ([`CONTROLLER_LEASE`]).
    in_release_namespace: Vec<String>,
}

impl Leftovers {
    /// Lists every kind the API server serves.
    async fn find(client: &Client) -> anyhow::Result<Leftovers> {
        let discovery = Discovery::new(client.clone()).run().await?;
        let mut left = Leftovers::default();
        for group in discovery.groups() {
            for (resource, capabilities) in group.recommended_resources() {
                if !capabilities.supports_operation(verbs::LIST) {
                    continue;
                }
                let everywhere: Api<kube::api::DynamicObject> =
                    Api::all_with(client.clone(), &resource);
                let labelled = everywhere
                    .list_metadata(&ListParams::default().labels(RELEASE_LABELS))
                    .await
                    .with_context(|| format!("listing {}", resource.plural))?;
                for object in labelled.items {
                    let name = object.name_any();
                    if resource.kind == "CustomResourceDefinition" && name == CRD {
                        continue;
                    }
                    let place = match object.namespace() {
                        Some(namespace) => format!("{namespace}/{name}"),
                        None => name,
                    };
                    left.labelled.push(format!("{} {place}", resource.kind));
                }
                if capabilities.scope != Scope::Namespaced || resource.kind == "Event" {
                    continue;
                }
                let in_namespace: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(client.clone(), RELEASE_NAMESPACE, &resource);
                let all = in_namespace
                    .list_metadata(&ListParams::default())
                    .await
                    .with_context(|| {
                        format!("listing {} in {RELEASE_NAMESPACE}", resource.plural)
                    })?;
                for object in all.items {
                    let name = object.name_any();
                    let expected = matches!(
                        (resource.kind.as_str(), name.as_str()),
                        ("ServiceAccount", "default")
                            | ("ConfigMap", "kube-root-ca.crt")
                            | ("Lease", CONTROLLER_LEASE)
                    );
                    if !expected {
                        left.in_release_namespace
                            .push(format!("{} {name}", resource.kind));
                    }
                }
            }
        }
        Ok(left)
    }

    fn is_empty(&self) -> bool {
        self.labelled.is_empty() && self.in_release_namespace.is_empty()
    }
}

/// Whether the image of the example's volume `handle` exists on node 1.
fn image_exists(handle: &str) -> bool {
    std::path::Path::new(&format!("{VOLUMES_DIR}/{handle}.img")).exists()
}

/// The value of a wait for `kind` `name` in the claims' namespace; panics
/// with the error and that object's events.
async fn or_panic_with_events<T>(
    client: &Client,
    kind: &str,
    name: &str,
    waited: anyhow::Result<T>,
) -> T {
    match waited {
        Ok(found) => found,
        Err(e) => panic!(
            "{e}; {kind} {NS}/{name} events: {:#?}",
            event_lines(client, NS, name).await
        ),
    }
}

/// The scenario's claim: the example's class is WaitForFirstConsumer, so it
/// binds once the writer is scheduled.
const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: e2e-helm
spec:
  storageClassName: local-volumes
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 64Mi } }
"#;

/// The writer's script: writes `token`, says so, then keeps reading it
/// back, and fails if it ever cannot (its mount lost while the node plugin
/// is replaced).
fn writer_script(token: &str) -> String {
    format!(
        "printf '%s\\n' {token} > /data/token && sync && echo written && \
         while cat /data/token >/dev/null; do sleep 1; done; echo lost; exit 1"
    )
}

/// A claim's volume as the writer left it before the upgrade.
struct Written {
    /// The PersistentVolume's name.
    volume: String,
    /// Its uid: a volume made again under the same name has another.
    uid: Option<String>,
    /// Its handle: the example's image is `VOLUMES_DIR/<handle>.img`.
    handle: String,
    /// What the writer wrote into it.
    token: String,
}

/// Install the previous chart, claim, upgrade to this one, read back,
/// uninstall while the provisioner exists (refused), delete it,
/// uninstall, and the checks of each.
/// Each step's time is printed, so a slower run says where (the CI
/// budget of scripts/e2e is tight).
async fn scenario(client: &Client) {
    let mut step = Instant::now();
    let mut took = |what: &str| {
        eprintln!("{what}: {:.1}s", step.elapsed().as_secs_f64());
        step = Instant::now();
    };
    // First, so the refused install below fails on the namespace alone.
    let_helm_adopt_the_crd(client).await.unwrap();
    install_refused_without_a_labelled_namespace(client).await;
    took("install refused: no labelled namespace");
    helm_install(client).await;
    took("install of the previous chart");
    let (observer, before) = install_local_volumes(client).await;
    took("the example's driver");
    let written = claim_written(client).await;
    took("claim written");
    upgrade_keeps_the_volume(client, &observer, &before, &written).await;
    took("upgrade and read back");
    delete_the_volume(client, &written).await;
    took("claim deleted");
    uninstall_is_refused_while_the_provisioner_exists(client).await;
    took("uninstall refused, provisioner deleted");
    uninstall_leaves_nothing(client).await;
    took("uninstall");
}

/// `helm install CHART` into the release namespace (made by Helm) with the
/// image scripts/e2e-image loaded and the scenario's selector.
fn install_args(chart: &str) -> Vec<String> {
    [
        "install",
        RELEASE,
        chart,
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        "image.repository=pav",
        "--set",
        "image.tag=dev",
        "--set",
        "image.pullPolicy=Never",
        "--set",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!("selector={SELECTOR}")])
    .collect()
}

/// `helm install` of the previous chart as docs/install.md says, with the
/// image scripts/e2e-image loaded; waits for the controller.
async fn helm_install(client: &Client) {
    let mut args = install_args(&previous_chart());
    args.extend(["--wait", "--timeout", "180s"].map(String::from));
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .unwrap();
    // --create-namespace makes it without labels: this chart's upgrade
    // refuses until it has one, saying the command (docs/install.md).
    let refused = helm(&[
        "upgrade",
        RELEASE,
        &chart(),
        "--namespace",
        RELEASE_NAMESPACE,
        "--reset-then-reuse-values",
    ])
    .await;
    let Err(refusal) = refused else {
        panic!(
            "helm upgrade went on though namespace {RELEASE_NAMESPACE} has no Pod Security label"
        );
    };
    let refusal = format!("{refusal:#}");
    assert!(
        refusal.contains(&format!(
            "namespace {RELEASE_NAMESPACE} has no Pod Security label"
        )) && refusal.contains(&format!(
            "kubectl label namespace {RELEASE_NAMESPACE} {POD_SECURITY_PRIVILEGED} --overwrite"
        )),
        "helm upgrade must say which label to set: {refusal}"
    );
    let history = helm(&[
        "history",
        RELEASE,
        "--namespace",
        RELEASE_NAMESPACE,
        "--output",
        "json",
    ])
    .await
    .unwrap();
    let revisions: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    assert_eq!(
        revisions.len(),
        1,
        "a refused upgrade must record no revision: {history}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let pod_security = serde_json::json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "privileged",
    }}});
    namespaces
        .patch(
            RELEASE_NAMESPACE,
            &PatchParams::default(),
            &Patch::Merge(&pod_security),
        )
        .await
        .unwrap();
    wait_pods(client, "pav controller", CONTROLLER_PODS, &[], false).await;
}

/// `helm install` of this chart with `--create-namespace`, as the previous
/// docs said: refused before Helm records a release or makes the namespace
/// (which would have no Pod Security label), saying the commands that
/// create and label it.
async fn install_refused_without_a_labelled_namespace(client: &Client) {
    // As the install below, so that one the check failed to refuse is
    // cleaned up as the scenario's own.
    let args = install_args(&chart());
    let refused = helm(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let Err(refusal) = refused else {
        panic!("helm install went on into a namespace --create-namespace makes unlabelled");
    };
    let refusal = format!("{refusal:#}");
    for command in [
        format!("kubectl create namespace {RELEASE_NAMESPACE}\n"),
        format!("kubectl label namespace {RELEASE_NAMESPACE} {POD_SECURITY_PRIVILEGED}\n"),
    ] {
        assert!(
            refusal.contains(&command),
            "helm install must say {command:?}: {refusal}"
        );
    }
    assert!(
        !release_exists().await.unwrap(),
        "a refused install left release {RELEASE}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(
        namespaces
            .get_opt(RELEASE_NAMESPACE)
            .await
            .unwrap()
            .is_none(),
        "a refused install made namespace {RELEASE_NAMESPACE}"
    );
}

/// The example's provisioner and class; waits for its driver, every pav pod
/// running the chart's image. Returns the observer of its PaV pods and the
/// pav pods.
async fn install_local_volumes(client: &Client) -> (PodObserver, Vec<Pod>) {
    reset(client, NS, NAME).await.unwrap();
    namespace(client, NS).await.unwrap();
    let observer = PodObserver::start(client, NAME);
    apply(client, &objects()).await.unwrap();
    wait_provisioner_ready(client, NAME, STEP).await.unwrap();
    let before = wait_pav_pods(client, &[], false).await;
    for pod in &before {
        let pav = pav_container(pod).expect("pav pods run a pav container");
        assert_eq!(
            (pav.image.as_deref(), pav.image_pull_policy.as_deref()),
            (Some("pav:dev"), Some("Never")),
            "pod {RELEASE_NAMESPACE}/{}: the chart's image values must reach every pav pod",
            pod.name_any()
        );
    }
    (observer, before)
}

/// A claim, and a writer that keeps using it through the upgrade.
async fn claim_written(client: &Client) -> Written {
    let token = format!(
        "written-before-the-upgrade-{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    apply(client, CLAIM).await.unwrap();
    apply(
        client,
        &client_pod(NS, "writer", "data", &writer_script(&token)),
    )
    .await
    .unwrap();
    let wrote = wait_until(&format!("pod {NS}/writer to write"), STEP, || async {
        let log = logs(client, NS, "writer").await.unwrap_or_default();
        Ok(log.lines().any(|l| l == "written").then_some(()))
    })
    .await;
    or_panic_with_events(client, "pod", "writer", wrote).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let claim = claims.get("data").await.unwrap();
    assert_eq!(claim_phase(&claim), "Bound", "claim {NS}/data");
    let volume = volume_name(&claim).expect("a bound claim names its volume");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let handle = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.volume_handle.clone())
        .expect("a CSI volume");
    assert!(
        image_exists(&handle),
        "no image {VOLUMES_DIR}/{handle}.img for PersistentVolume {volume}"
    );
    Written {
        volume,
        uid: pv.uid(),
        handle,
        token,
    }
}

/// `helm upgrade` to this chart, as docs/upgrade.md says, with another log
/// format and a value the previous chart lacks (`logLevel`): every pav pod
/// is replaced, and the volume is kept.
async fn upgrade_keeps_the_volume(
    client: &Client,
    observer: &PodObserver,
    before: &[Pod],
    written: &Written,
) {
    let Written {
        volume, uid, token, ..
    } = written;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    helm(&[
        "upgrade",
        RELEASE,
        &chart(),
        "--namespace",
        RELEASE_NAMESPACE,
        "--reset-then-reuse-values",
        "--set",
        "logFormat=json",
        "--set",
        "logLevel=debug",
        "--wait",
        "--timeout",
        "180s",
    ])
    .await
    .unwrap();
    let after = wait_pav_pods(client, &uids(before), true).await;
    // A value the previous chart lacks, left unset: the new chart's
    // default reaches the release (`--reuse-values` would drop it).
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let controller = deployments.get("pav-controller").await.unwrap();
    assert_eq!(
        controller.spec.replicas,
        Some(2),
        "controller.replicas' default after the upgrade"
    );
    eprintln!(
        "the upgrade replaced {:?} with {:?}",
        before.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        after.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    wait_provisioner_ready(client, NAME, STEP).await.unwrap();

    // The volume is kept: same claim and volume, the writer read it all
    // along and was never restarted, the volume was not staged again.
    let claim = claims.get("data").await.unwrap();
    assert_eq!(
        (claim_phase(&claim), volume_name(&claim)),
        ("Bound", Some(volume.clone())),
        "claim {NS}/data after the upgrade"
    );
    assert_eq!(
        pvs.get(volume).await.unwrap().uid(),
        *uid,
        "PersistentVolume {volume} was replaced by the upgrade"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let writer = pods.get("writer").await.unwrap();
    assert!(
        pod_phase(&writer) == "Running"
            && container_statuses(&writer)
                .iter()
                .all(|c| c.restart_count == 0),
        "pod {NS}/writer must keep running through the upgrade: {:?}; log: {:?}",
        writer.status,
        logs(client, NS, "writer").await
    );
    assert_eq!(
        observer.runs("staging"),
        1,
        "the upgrade staged the volume again: {:#?}",
        observer.seen()
    );

    // The new node plugin unstages what the old one staged, and stages it
    // again for a new client, which reads the token back.
    delete_and_wait(&pods, "writer", STEP).await.unwrap();
    let read = run_client(client, NS, "reader", "data", "cat /data/token").await;
    assert_eq!(
        read.trim_end(),
        token,
        "pod {NS}/reader must read what pod {NS}/writer wrote before the upgrade"
    );
    observer.assert_succeeded("unstaging");
}

/// The claim deleted: its volume and image go, and its PaV pods.
async fn delete_the_volume(client: &Client, written: &Written) {
    let Written { volume, handle, .. } = written;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    delete_and_wait(&claims, "data", STEP).await.unwrap();
    wait_gone(&pvs, volume, STEP).await.unwrap();
    assert!(
        !image_exists(handle),
        "image {VOLUMES_DIR}/{handle}.img left after its claim was deleted"
    );
    wait_no_pav_pods(client, NAME, STEP).await.unwrap();
}

/// `helm uninstall RELEASE`, waiting for what it deletes.
async fn helm_uninstall() -> anyhow::Result<String> {
    helm(&[
        "uninstall",
        RELEASE,
        "--namespace",
        RELEASE_NAMESPACE,
        "--wait",
        "--timeout",
        "180s",
    ])
    .await
}

/// The termination message of the uninstall check's pod, once it ended
/// with exit code 1.
async fn uninstall_check_message(client: &Client) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let params = ListParams::default().labels(&format!("job-name={UNINSTALL_CHECK}"));
    let listed = pods.list(&params).await.unwrap().items;
    let [pod] = listed.as_slice() else {
        panic!(
            "Job {RELEASE_NAMESPACE}/{UNINSTALL_CHECK} must have run one pod: {:?}",
            listed.iter().map(|p| p.name_any()).collect::<Vec<_>>()
        );
    };
    let terminated = container_statuses(pod)
        .first()
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .unwrap_or_else(|| {
            panic!(
                "pod {RELEASE_NAMESPACE}/{}: no terminated container: {:?}",
                pod.name_any(),
                pod.status
            )
        });
    assert_eq!(
        terminated.exit_code,
        1,
        "pod {RELEASE_NAMESPACE}/{}: exit code of pav uninstall-check",
        pod.name_any()
    );
    terminated.message.unwrap_or_default()
}

/// `helm uninstall` in the wrong order, the PavProvisioner still there:
/// the chart's pre-delete hook refuses, its pod's termination message
/// names the provisioner and the command that deletes it, and nothing of
/// the release is gone. Then the provisioner is deleted as the message
/// says (while the controller runs: its finalizer removes the driver's
/// cluster-scoped objects).
async fn uninstall_is_refused_while_the_provisioner_exists(client: &Client) {
    let refused = helm_uninstall().await;
    let Err(refusal) = refused else {
        panic!("helm uninstall went on while PavProvisioner {NAME} exists");
    };
    let refusal = format!("{refusal:#}");
    // Helm 3.22 says "job pav-uninstall-check failed: BackoffLimitExceeded".
    assert!(
        refusal.contains(&format!("job {UNINSTALL_CHECK} failed")),
        "helm uninstall's error must point to the hook's Job: {refusal}"
    );
    let message = uninstall_check_message(client).await;
    eprintln!("helm uninstall refused: {refusal}\nthe check's message: {message}");
    assert!(
        message.contains(&format!("PavProvisioner(s) with labels {SELECTOR}")),
        "the message must say which provisioners count: {message}"
    );
    let command: Vec<&str> = message
        .lines()
        .find_map(|line| line.trim().strip_prefix("kubectl delete pavprovisioners "))
        .unwrap_or_else(|| panic!("no kubectl delete in the message: {message}"))
        .split_whitespace()
        .collect();
    assert_eq!(command, [NAME], "the provisioners the message names");

    // Nothing was uninstalled: the release, its roles, the controller and
    // the driver are all there.
    assert!(
        release_exists().await.unwrap(),
        "release {RELEASE} is gone though its uninstall was refused"
    );
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    for name in CLUSTER_ROLES {
        assert!(
            cluster_roles.get_opt(name).await.unwrap().is_some(),
            "ClusterRole {name} deleted by a refused uninstall"
        );
    }
    wait_pods(client, "pav controller", CONTROLLER_PODS, &[], true).await;
    wait_provisioner_ready(client, NAME, STEP).await.unwrap();

    // What the message says: kubectl delete, which waits until they are
    // gone, done with the API.
    for name in command {
        delete_provisioner(client, name, STEP).await.unwrap();
    }
    delete(client, &example("storageclass.yaml")).await.unwrap();
    assert_no_leaks(client, NAME, STEP).await;
}

/// Whatever of the driver and the release could be stuck: PavProvisioners
/// of the release's selector, PersistentVolumes and pods of the driver
/// (pav's finalizers hold each), pods in the release namespace; each with
/// its finalizers.
async fn stuck(client: &Client) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let finalizers = |meta: &kube::api::ObjectMeta| meta.finalizers.clone().unwrap_or_default();
    let provisioners = provisioners(client).await?;
    for p in provisioners
        .list(&ListParams::default().labels(SELECTOR))
        .await?
    {
        found.push(format!(
            "PavProvisioner {} {:?}",
            p.name_any(),
            finalizers(&p.metadata)
        ));
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for pv in volumes_of(client, NAME).await? {
        let meta = pvs.get(&pv).await?.metadata;
        found.push(format!("PersistentVolume {pv} {:?}", finalizers(&meta)));
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let of_driver = ListParams::default().labels(&format!("{LABEL_PROVISIONER}={NAME}"));
    let in_release: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let mut left = pods.list(&of_driver).await?.items;
    left.extend(in_release.list(&ListParams::default()).await?.items);
    for pod in left {
        found.push(format!(
            "Pod {}/{} {} {:?}",
            pod.namespace().unwrap_or_default(),
            pod.name_any(),
            pod_phase(&pod),
            finalizers(&pod.metadata)
        ));
    }
    Ok(found)
}

/// Waits until `find` finds nothing left (`None`); panics with what it
/// found last.
async fn wait_nothing_left<F, Fut>(what: &str, mut find: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<String>>>,
{
    let waited = wait_until(what, STEP, || {
        let found = find();
        async move {
            match found.await? {
                None => Ok(Some(())),
                Some(left) => bail!("left: {left}"),
            }
        }
    })
    .await;
    if let Err(e) = waited {
        panic!("{e}");
    }
}

/// `helm uninstall` once the provisioner is gone: the check lets it go
/// on, and what it leaves.
async fn uninstall_leaves_nothing(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    helm_uninstall().await.unwrap();
    assert!(
        !release_exists().await.unwrap(),
        "helm still lists release {RELEASE} in {RELEASE_NAMESPACE}"
    );
    wait_nothing_left(
        "nothing of the driver or the release to be stuck",
        || async {
            let stuck = stuck(client).await?;
            Ok((!stuck.is_empty()).then(|| format!("{stuck:#?}")))
        },
    )
    .await;
    wait_nothing_left("nothing of the release to be left", || async {
        let left = Leftovers::find(client).await?;
        Ok((!left.is_empty()).then(|| format!("{left:#?}")))
    })
    .await;
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    for name in CLUSTER_ROLES {
        assert!(
            cluster_roles.get_opt(name).await.unwrap().is_none(),
            "ClusterRole {name} left after helm uninstall"
        );
    }
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    assert!(
        bindings.get_opt("pav-controller").await.unwrap().is_none(),
        "ClusterRoleBinding pav-controller left after helm uninstall"
    );
    let of_driver = ListParams::default().labels(&format!("{LABEL_PROVISIONER}={NAME}"));
    let driver_bindings: Vec<String> = bindings
        .list(&of_driver)
        .await
        .unwrap()
        .iter()
        .map(|b| b.name_any())
        .collect();
    assert!(
        driver_bindings.is_empty(),
        "ClusterRoleBindings of driver {NAME} left: {driver_bindings:?}"
    );
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    assert!(
        drivers.get_opt(NAME).await.unwrap().is_none(),
        "CSIDriver {NAME} left after its PavProvisioner"
    );
    let csinodes: Api<CSINode> = Api::all(client.clone());
    wait_until(
        &format!("no node to list CSI driver {NAME}"),
        STEP,
        || async {
            let listing: Vec<String> = csinodes
                .list(&ListParams::default())
                .await?
                .iter()
                .filter(|n| n.spec.drivers.iter().any(|d| d.name == NAME))
                .map(|n| n.name_any())
                .collect();
            if listing.is_empty() {
                Ok(Some(()))
            } else {
                bail!("CSINodes listing it: {listing:?}")
            }
        },
    )
    .await
    .unwrap();

    // Kept on purpose: the CRD (deleting it would delete every
    // PavProvisioner), and the namespace --create-namespace made, which
    // Helm never deletes, holding the controller's Lease; a user deletes it
    // as this test does.
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(CRD)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("CRD {CRD} was deleted by helm uninstall: it must be kept"));
    assert_eq!(
        crd.annotations()
            .get("helm.sh/resource-policy")
            .map(String::as_str),
        Some("keep"),
        "CRD {CRD}'s annotations"
    );
    assert!(
        namespaces
            .get_opt(RELEASE_NAMESPACE)
            .await
            .unwrap()
            .is_some(),
        "namespace {RELEASE_NAMESPACE} (made by --create-namespace) is gone: Helm does not delete it"
    );
    delete_and_wait(&namespaces, RELEASE_NAMESPACE, STEP)
        .await
        .unwrap();
}

/// Skipped by `scripts/e2e`'s one-node run (`--skip helm_chart::`), which
/// runs it in a step of its own.
mod helm_chart {
    use super::*;

    #[tokio::test]
    #[ignore = "needs a cluster"]
    async fn install_upgrade_uninstall() {
        let client = cluster().await;
        let started = Instant::now();
        let manifests = ManifestsInstall::read();
        remove_release(&client).await.unwrap();
        let had_manifests = manifests.remove(&client).await.unwrap();

        let outcome = AssertUnwindSafe(scenario(&client)).catch_unwind().await;
        // Whatever happened: the release gone, the manifests install back.
        let removed = remove_release(&client).await;
        let restored = match strip_helm_from_the_crd(&client).await {
            Ok(()) if had_manifests => manifests.restore(&client).await,
            done => done,
        };
        if let Err(panic) = outcome {
            for e in [removed.err(), restored.err()].into_iter().flatten() {
                eprintln!("cleaning up after the failure: {e:#}");
            }
            std::panic::resume_unwind(panic);
        }
        removed.unwrap();
        restored.unwrap();
        eprintln!(
            "helm_chart::install_upgrade_uninstall: {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
}
