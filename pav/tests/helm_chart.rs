//! charts/pav installs exactly what `pav manifests` prints.
//!
//! The comparison renders the chart with the real helm (`helm template`),
//! so it is `#[ignore = "needs helm"]`; `.ci/run` builds helm into a cache
//! and runs it with `PAV_HELM` naming the binary (default: `helm` on the
//! PATH). The checks that need no helm run with every `cargo test`.
//!
//! Each case is a set of chart values and the `pav manifests` flags that
//! say the same. Objects are compared parsed, sorted by kind, namespace and
//! name, with what only Helm adds taken out: its labels
//! (`helm.sh/chart`, `app.kubernetes.io/managed-by: Helm`,
//! `app.kubernetes.io/instance`, `app.kubernetes.io/version`), the CRD's
//! `helm.sh/resource-policy: keep` and the hooks (the uninstall check:
//! `pav manifests` has no uninstall), which a test of their own checks.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser as _;
use serde_json::Value;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    workspace().join("charts/pav")
}

fn helm() -> String {
    std::env::var("PAV_HELM").unwrap_or_else(|_| "helm".to_owned())
}

/// Runs helm with `args`, returning its stdout; panics with its stderr.
fn run_helm(args: &[&str]) -> String {
    let output = Command::new(helm())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (set PAV_HELM): {e}", helm()));
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The repository `pav manifests`' default image names, which the chart
/// requires to be set.
const REPOSITORY: &str = "image.repository=pav";

/// `helm template pav charts/pav --namespace NAMESPACE` with
/// [`REPOSITORY`], `values` (YAML) and `extra` arguments.
fn helm_template(namespace: &str, values: &str, extra: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let values_file = dir.path().join("values.yaml");
    std::fs::write(&values_file, values).unwrap();
    let chart = chart();
    let mut args = vec![
        "template",
        "pav",
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
        "--values",
        values_file.to_str().unwrap(),
        "--set",
        REPOSITORY,
    ];
    args.extend(extra);
    parse(&run_helm(&args))
}

/// `pav manifests FLAGS`.
fn pav_manifests(flags: &[&str]) -> Vec<Value> {
    let cli = pav::cli::Cli::try_parse_from(
        ["pav", "manifests"]
            .iter()
            .copied()
            .chain(flags.iter().copied()),
    )
    .expect("pav manifests flags parse");
    let pav::cli::Command::Manifests(args) = cli.command else {
        unreachable!()
    };
    parse(&pav::manifests::render(&args).expect("manifests render"))
}

/// Every non-empty document of a YAML stream.
fn parse(yaml: &str) -> Vec<Value> {
    use serde::Deserialize as _;
    serde_yaml::Deserializer::from_str(yaml)
        .map(|document| Value::deserialize(document).expect("YAML"))
        .filter(|value| !value.is_null())
        .collect()
}

/// Whether `object` is a Helm hook (annotation `helm.sh/hook`).
fn is_hook(object: &Value) -> bool {
    object["metadata"]["annotations"]["helm.sh/hook"].is_string()
}

/// Takes out what Helm alone adds, hooks included, and sorts by kind,
/// namespace, name.
fn normalized(objects: Vec<Value>) -> Vec<Value> {
    let mut objects: Vec<Value> = objects
        .into_iter()
        .filter(|object| !is_hook(object))
        .map(|mut object| {
            let metadata = object["metadata"].as_object_mut().expect("metadata");
            if let Some(Value::Object(labels)) = metadata.get_mut("labels") {
                labels.remove("helm.sh/chart");
                labels.remove("app.kubernetes.io/instance");
                labels.remove("app.kubernetes.io/version");
                if labels.get("app.kubernetes.io/managed-by") == Some(&Value::from("Helm")) {
                    labels.remove("app.kubernetes.io/managed-by");
                }
                if labels.is_empty() {
                    metadata.remove("labels");
                }
            }
            if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
                annotations.remove("helm.sh/resource-policy");
                if annotations.is_empty() {
                    metadata.remove("annotations");
                }
            }
            object
        })
        .collect();
    objects.sort_by_key(key);
    objects
}

fn key(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

/// Asserts both lists hold the same objects, naming the first that differs.
fn assert_same(chart: Vec<Value>, pav: Vec<Value>, case: &str) {
    let chart = normalized(chart);
    let pav = normalized(pav);
    let keys = |objects: &[Value]| objects.iter().map(key).collect::<Vec<_>>();
    assert_eq!(
        keys(&chart),
        keys(&pav),
        "{case}: the chart (left) and `pav manifests` (right) install different objects"
    );
    for (from_chart, from_pav) in chart.iter().zip(&pav) {
        assert!(
            from_chart == from_pav,
            "{case}: {:?} differs between the chart and `pav manifests`\n\
             --- helm template:\n{}\n--- pav manifests:\n{}",
            key(from_chart),
            serde_yaml::to_string(from_chart).unwrap(),
            serde_yaml::to_string(from_pav).unwrap(),
        );
    }
}

/// Values that change every setting, and the flags that say the same.
const CHANGED_VALUES: &str = r#"
namespace:
  create: true
  podSecurity: baseline
image:
  registry: registry.example.com/storage/
  repository: pav
  tag: 0.1.0-rc.1
  pullPolicy: Always
imagePullSecrets:
  - name: regcred
  - name: mirror
kubeletDir: /var/lib/k0s/kubelet
logFormat: json
logLevel: debug
kubeApi:
  qps: 20.5
  burst: 40
selector: pav.example.com/canary=true
metrics:
  port: 9090
controller:
  replicas: 3
  priorityClassName: pav-controller-critical
  resources:
    requests: {cpu: 50m, memory: 64Mi}
    limits: {cpu: "1", memory: 512Mi}
  nodeSelector:
    node-role.kubernetes.io/control-plane: ""
  tolerations:
    - key: node-role.kubernetes.io/control-plane
      operator: Exists
      effect: NoSchedule
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - key: kubernetes.io/arch
                operator: In
                values: [amd64, arm64]
csiController:
  resources:
    requests: {cpu: 20m, memory: 48Mi}
    limits: {memory: 128Mi}
nodePlugin:
  priorityClassName: ""
  resources:
    requests: {cpu: 30m, memory: 40Mi}
    limits: {memory: 200Mi}
  nodeSelector:
    storage: "true"
  tolerations:
    - key: storage
      operator: Equal
      value: dedicated
      effect: NoExecute
      tolerationSeconds: 300
  affinity: {}
sidecars:
  # Helm merges values into the defaults: cpu replaces the default's,
  # its memory stays; null takes the defaults out.
  provisioner:
    image: mirror.example.com/csi-provisioner:v6.4.0
    resources: {requests: {cpu: 1m}}
  resizer:
    image: mirror.example.com/csi-resizer:v2.3.0
    resources: null
  snapshotter:
    image: mirror.example.com/csi-snapshotter:v8.7.0
    resources: {limits: {memory: 64Mi}}
  attacher:
    image: mirror.example.com/csi-attacher:v4.13.0
    resources: {requests: {cpu: 3m}}
  registrar:
    image: mirror.example.com/csi-node-driver-registrar:v2.15.0
    resources: {requests: {cpu: 2m, memory: 8Mi}}
"#;

const CHANGED_FLAGS: &[&str] = &[
    "--namespace=storage",
    "--pod-security=baseline",
    "--image=registry.example.com/storage/pav:0.1.0-rc.1",
    "--image-pull-policy=Always",
    "--image-pull-secret=regcred",
    "--image-pull-secret=mirror",
    "--kubelet-dir=/var/lib/k0s/kubelet",
    "--log-format=json",
    "--log-level=debug",
    "--kube-api-qps=20.5",
    "--kube-api-burst=40",
    "--selector=pav.example.com/canary=true",
    "--metrics-addr=0.0.0.0:9090",
    "--controller-replicas=3",
    "--controller-priority-class=pav-controller-critical",
    r#"--controller-resources={"requests":{"cpu":"50m","memory":"64Mi"},"limits":{"cpu":"1","memory":"512Mi"}}"#,
    r#"--controller-node-selector={"node-role.kubernetes.io/control-plane":""}"#,
    r#"--controller-tolerations=[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]"#,
    r#"--controller-affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/arch","operator":"In","values":["amd64","arm64"]}]}]}}}"#,
    r#"--csi-controller-resources={"requests":{"cpu":"20m","memory":"48Mi"},"limits":{"memory":"128Mi"}}"#,
    "--node-plugin-priority-class=",
    r#"--node-plugin-resources={"requests":{"cpu":"30m","memory":"40Mi"},"limits":{"memory":"200Mi"}}"#,
    r#"--node-plugin-node-selector={"storage":"true"}"#,
    r#"--node-plugin-tolerations=[{"key":"storage","operator":"Equal","value":"dedicated","effect":"NoExecute","tolerationSeconds":300}]"#,
    "--node-plugin-affinity={}",
    "--provisioner-image=mirror.example.com/csi-provisioner:v6.4.0",
    r#"--provisioner-resources={"requests":{"cpu":"1m","memory":"32Mi"}}"#,
    "--resizer-image=mirror.example.com/csi-resizer:v2.3.0",
    "--resizer-resources={}",
    "--snapshotter-image=mirror.example.com/csi-snapshotter:v8.7.0",
    r#"--snapshotter-resources={"limits":{"memory":"64Mi"},"requests":{"cpu":"10m","memory":"32Mi"}}"#,
    "--attacher-image=mirror.example.com/csi-attacher:v4.13.0",
    r#"--attacher-resources={"requests":{"cpu":"3m","memory":"32Mi"}}"#,
    "--registrar-image=mirror.example.com/csi-node-driver-registrar:v2.15.0",
    r#"--registrar-resources={"requests":{"cpu":"2m","memory":"8Mi"}}"#,
];

#[test]
#[ignore = "needs helm"]
fn chart_with_default_values_installs_what_pav_manifests_prints() {
    let chart = helm_template("pav", "{}", &[]);
    // The Namespace is Helm's (--create-namespace) unless namespace.create.
    let pav: Vec<Value> = pav_manifests(&[])
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    assert_same(chart, pav, "default values");
}

#[test]
#[ignore = "needs helm"]
fn chart_with_every_value_changed_installs_what_the_same_flags_print() {
    let chart = helm_template("storage", CHANGED_VALUES, &[]);
    assert_same(chart, pav_manifests(CHANGED_FLAGS), "changed values");
}

/// The namespace object, with its Pod Security label, is opt-in.
#[test]
#[ignore = "needs helm"]
fn chart_namespace_carries_the_pod_security_label() {
    let chart = helm_template("pav", "namespace: {create: true}", &[]);
    let namespace = chart
        .iter()
        .find(|o| o["kind"] == "Namespace")
        .expect("namespace.create renders the Namespace");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    assert_same(chart, pav_manifests(&[]), "namespace.create");
}

/// ServiceMonitor and PodMonitor: only when enabled and served.
#[test]
#[ignore = "needs helm"]
fn chart_monitors_need_values_and_the_api() {
    let kinds = |objects: &[Value]| -> Vec<String> {
        let mut kinds: Vec<String> = objects
            .iter()
            .filter(|o| o["apiVersion"] == "monitoring.coreos.com/v1")
            .map(|o| o["kind"].as_str().unwrap().to_owned())
            .collect();
        kinds.sort();
        kinds
    };
    let enabled = "metrics: {serviceMonitor: {enabled: true}, podMonitor: {enabled: true}}";
    let served = [
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
        "--api-versions",
        "monitoring.coreos.com/v1/PodMonitor",
    ];
    assert!(kinds(&helm_template("pav", enabled, &[])).is_empty());
    assert!(kinds(&helm_template("pav", "{}", &served)).is_empty());
    let both = helm_template("pav", enabled, &served);
    assert_eq!(kinds(&both), ["PodMonitor", "ServiceMonitor"]);
    // Every port they scrape is one the Service or the pods name.
    let service = both.iter().find(|o| o["kind"] == "Service").unwrap();
    let ports: Vec<&Value> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    for monitor in both.iter().filter(|o| o["kind"] == "ServiceMonitor") {
        for endpoint in monitor["spec"]["endpoints"].as_array().unwrap() {
            assert!(ports.contains(&&endpoint["port"]), "{endpoint}");
        }
    }
}

/// `pav`'s command line of a rendered pod's `pav` container.
fn pav_command(pod_spec: &Value) -> pav::cli::Command {
    let container = pod_spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "pav")
        .expect("a pav container");
    assert_eq!(
        container["command"],
        serde_json::json!(["/usr/local/bin/pav"])
    );
    let args = container["args"].as_array().unwrap();
    let words = std::iter::once("pav").chain(args.iter().map(|a| a.as_str().unwrap()));
    pav::cli::Cli::try_parse_from(words)
        .unwrap_or_else(|e| panic!("pav refuses the arguments {args:?}: {e}"))
        .command
}

/// The pre-delete hook runs `pav uninstall-check` with the controller's
/// image, pull settings and selector, so it counts exactly the
/// PavProvisioners the release's controller reconciles; as an
/// unprivileged pod (once, no retries) whose account may only list
/// PavProvisioners; its RBAC is created before its Job (lower weights),
/// and all of it is deleted when the check passes and kept when it fails
/// (its pod holds the message), until the next uninstall replaces it.
#[test]
#[ignore = "needs helm"]
fn chart_uninstall_hook_checks_what_the_controller_serves() {
    for (values, namespace, selector) in [
        ("{}", "pav", None),
        (
            CHANGED_VALUES,
            "storage",
            Some("pav.example.com/canary=true"),
        ),
    ] {
        let objects = helm_template(namespace, values, &[]);
        let hooks: Vec<&Value> = objects.iter().filter(|o| is_hook(o)).collect();
        let summary: Vec<(String, String, String)> = hooks
            .iter()
            .map(|h| {
                let annotations = &h["metadata"]["annotations"];
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                assert_eq!(
                    (
                        text(&annotations["helm.sh/hook"]),
                        text(&annotations["helm.sh/hook-delete-policy"])
                    ),
                    (
                        "pre-delete".to_owned(),
                        "before-hook-creation,hook-succeeded".to_owned()
                    ),
                    "{} {}: hook annotations",
                    text(&h["kind"]),
                    text(&h["metadata"]["name"])
                );
                (
                    text(&h["kind"]),
                    text(&h["metadata"]["name"]),
                    text(&annotations["helm.sh/hook-weight"]),
                )
            })
            .collect();
        let hook = |kind: &str, weight: &str| {
            (
                kind.to_owned(),
                "pav-uninstall-check".to_owned(),
                weight.to_owned(),
            )
        };
        assert_eq!(
            summary,
            [
                hook("ServiceAccount", "-10"),
                hook("ClusterRole", "-10"),
                hook("ClusterRoleBinding", "-5"),
                hook("Job", "0"),
            ],
            "the hooks, RBAC first (Helm creates them by weight)"
        );
        let role = hooks[1];
        assert_eq!(
            role["rules"],
            serde_json::json!([{
                "apiGroups": ["pav.albertofaria.github.io"],
                "resources": ["pavprovisioners"],
                "verbs": ["list"],
            }]),
            "ClusterRole pav-uninstall-check: rules"
        );
        let binding = hooks[2];
        assert_eq!(binding["roleRef"]["name"], "pav-uninstall-check");
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{
                "kind": "ServiceAccount", "name": "pav-uninstall-check", "namespace": namespace,
            }])
        );
        let job = hooks[3];
        assert_eq!(job["metadata"]["namespace"], namespace);
        assert_eq!(
            job["spec"]["backoffLimit"], 0,
            "Job pav-uninstall-check: spec.backoffLimit"
        );
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "pav-uninstall-check");
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"], 65532);

        let controller = objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "pav-controller")
            .expect("the controller's Deployment");
        let controller_pod = &controller["spec"]["template"]["spec"];
        for field in ["image", "imagePullPolicy"] {
            assert_eq!(
                pod["containers"][0][field], controller_pod["containers"][0][field],
                "Job pav-uninstall-check: {field} of the controller"
            );
        }
        assert_eq!(pod["imagePullSecrets"], controller_pod["imagePullSecrets"]);
        let pav::cli::Command::Controller(served) = pav_command(controller_pod) else {
            panic!("the controller runs pav controller");
        };
        let pav::cli::Command::UninstallCheck(check) = pav_command(pod) else {
            panic!("the hook runs pav uninstall-check");
        };
        assert_eq!(served.selector.as_deref(), selector);
        assert_eq!(
            check.selector, served.selector,
            "the check counts the PavProvisioners the controller serves"
        );
        let message_path = pod["containers"][0]["terminationMessagePath"].as_str();
        assert_eq!(
            check.termination_message_path.as_deref(),
            message_path.map(Path::new),
            "the check writes the container's termination message"
        );
    }
}

/// No registry publishes the pav image, so the chart has no default for
/// its repository: rendering without one fails, saying what to set and
/// how to build and push the image, instead of installing pods that can
/// only end in ImagePullBackOff.
#[test]
#[ignore = "needs helm"]
fn chart_without_an_image_repository_says_how_to_make_one() {
    let chart = chart();
    let output = Command::new(helm())
        .args(["template", "pav", chart.to_str().unwrap()])
        .output()
        .expect("running helm");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "rendered without image.repository"
    );
    let version = env!("CARGO_PKG_VERSION");
    for expected in [
        "image.repository is required".to_owned(),
        "push it to a registry your nodes pull from".to_owned(),
        "--set image.repository=REGISTRY/pav".to_owned(),
        format!("image.tag defaults to {version}"),
        format!("docker build -t REGISTRY/pav:{version} ."),
        "scripts/e2e-image".to_owned(),
        "docs/install.md".to_owned(),
    ] {
        assert!(stderr.contains(&expected), "no {expected:?} in: {stderr}");
    }
}

#[test]
#[ignore = "needs helm"]
fn chart_lints() {
    let chart = chart();
    run_helm(&["lint", "--strict", chart.to_str().unwrap()]);
    run_helm(&[
        "lint",
        "--strict",
        chart.to_str().unwrap(),
        "--set",
        "namespace.create=true,logFormat=json,image.repository=pav",
    ]);
}

/// Values of the wrong type or name are refused when the chart renders
/// (values.schema.json), naming the value, instead of reaching the
/// controller as flags it cannot parse (a map for `tolerations`
/// crash-looped it).
#[test]
#[ignore = "needs helm"]
fn chart_refuses_values_of_the_wrong_type() {
    let chart = chart();
    for (values, expected) in [
        (
            "controller: {tolerations: {key: x}}",
            "at '/controller/tolerations': got object, want array",
        ),
        (
            "logFormat: yaml",
            "at '/logFormat': value must be one of 'text', 'json'",
        ),
        (
            "kubeApi: {qps: fast}",
            "at '/kubeApi/qps': got string, want number",
        ),
        (
            "imageTag: v1",
            "additional properties 'imageTag' not allowed",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("values.yaml");
        std::fs::write(&file, values).unwrap();
        let output = Command::new(helm())
            .args(["template", "pav", chart.to_str().unwrap(), "--values"])
            .arg(&file)
            .output()
            .expect("running helm");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{values}: rendered");
        assert!(stderr.contains(expected), "{values}: {stderr}");
    }
}

/// The chart and the image are versioned as the workspace.
#[test]
fn chart_version_is_the_workspace_version() {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).unwrap();
    let chart: Value = serde_yaml::from_str(&text).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version);
    assert_eq!(chart["appVersion"], version);
    assert_eq!(pav::manifests::DEFAULT_IMAGE, format!("pav:{version}"));
}

/// charts/pav/files/crd.yaml is `pav crd`. Regenerate it with
/// `cargo run -p pav -- crd > charts/pav/files/crd.yaml`, or run this test
/// with `PAV_UPDATE_MANIFESTS=1`.
#[test]
fn chart_crd_is_generated() {
    let path: &Path = &chart().join("files/crd.yaml");
    let generated = serde_yaml::to_string(&pav_templates::PavProvisioner::definition()).unwrap();
    if std::env::var_os("PAV_UPDATE_MANIFESTS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "charts/pav/files/crd.yaml differs from `pav crd`; regenerate it with \
         `cargo run -p pav -- crd > charts/pav/files/crd.yaml`"
    );
}

/// The names of pav's own metrics, as its two registries export them
/// (the `_total` of a counter, the `_bucket` of a histogram included).
fn exported_metrics() -> Vec<String> {
    let csi = std::sync::Arc::new(pav::csi::metrics::Metrics::default());
    csi.start(pav_templates::Phase::Creation)
        .finish(&Ok::<(), ()>(()));
    let text = csi.encode();
    let controller = pav::operator::metrics::Metrics::default();
    controller.reconciled(
        pav::operator::metrics::Outcome::Applied,
        std::time::Duration::from_millis(1),
    );
    controller.set_volumes("p", Some(1));
    (text + &controller.encode())
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// The alert rules and the dashboard ask only for metrics pav exports
/// (`pav_*`), or the sidecars' and Prometheus' own: a renamed metric
/// would silence an alert without anyone noticing.
#[test]
#[ignore = "needs helm"]
fn alerts_and_dashboard_use_the_metrics_pav_exports() {
    let values = "metrics: {prometheusRule: {enabled: true}, dashboard: {enabled: true}}";
    let served = ["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"];
    let objects = helm_template("pav", values, &served);
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("the PrometheusRule, when enabled and served");
    let dashboard = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "pav-dashboard")
        .expect("the dashboard ConfigMap, when enabled");
    let mut queries: Vec<String> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect();
    let board: Value =
        serde_json::from_str(dashboard["data"]["pav.json"].as_str().unwrap()).unwrap();
    for panel in board["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    let exported = exported_metrics();
    let mut used = 0;
    for query in &queries {
        let names = query
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.starts_with("pav_"));
        for name in names {
            used += 1;
            assert!(
                exported.iter().any(|m| m == name),
                "{name} (in {query}) is not a metric pav exports: {exported:?}"
            );
        }
    }
    assert!(used >= 8, "only {used} uses of pav metrics found");
}
