//! Issue 7: Secret values reach PaV pods only by reference, never as text
//! pav renders, logs, records in events, annotations, statuses or errors.
//!
//! A Secret holds a random canary (new every run). The PavProvisioner's
//! creation and staging pods read it through `env.valueFrom.secretKeyRef`,
//! the Secret's name coming from a StorageClass parameter, and print only
//! its SHA-256: the creation pod makes it the volume handle, the staging pod
//! writes it into the volume, where a client pod reads it. The staging pod
//! first fails on purpose (while the claim carries an annotation), with
//! `/pav/error` holding the SHA-256, so an error travels through pav's
//! events and kubelet's FailedMount. The class also names the Secret in
//! `csi.storage.k8s.io/node-publish-secret-*`, so kubelet hands the value
//! to pav's node plugin in NodePublishVolume; a second class names it in
//! `csi.storage.k8s.io/provisioner-secret-*`, which external-provisioner
//! may not read (pav grants no Secret access): its claim must fail with
//! "forbidden".
//!
//! Scanned for the canary (and for its base64 form, as a Secret's `data`
//! holds it): every version of every Pod, PersistentVolumeClaim,
//! PersistentVolume, StorageClass, PavProvisioner (status included) and
//! Event in the cluster seen while the test runs, and all Events at the
//! end; the logs of every container of every PaV pod and of the client
//! pod, of pav's controller, of the provisioner's CSI controller
//! (`pav`, external-provisioner) and node plugin (`pav`,
//! node-driver-registrar); and the kubelet's log lines written meanwhile.
//!
//! The PavProvisioner also asks for the client pod's service-account token
//! (`tokenRequests`, audience [`AUDIENCE`]): its staging pod prints the
//! token's SHA-256 from `/pav/tokens/`, the test reads the token from the
//! staging pod's directory on the node, the API server's TokenReview says
//! it is the client pod's, and the token (whole, and its signature) is a
//! canary too, looked for in everything scanned before and after it was
//! known.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Seek as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use pav_e2e::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

const NAME: &str = "e2e-secret-canary";
const NS: &str = "e2e-secret-canary";
const SECRET: &str = "canary";
const FAIL_ANNOTATION: &str = "e2e.pav/fail-staging";
const KUBELET_LOG: &str = "/var/run/pav-cluster/logs/kubelet.log";
/// The audience of the service-account token the staging pod receives.
const AUDIENCE: &str = "e2e-canary";
/// Where the node plugin keeps each PaV pod's `/pav` on the node.
const HOST_POD_DIR: &str = "/var/lib/pav/pods";

const PROVISIONER: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-secret-canary
spec:
  provisioningModes: [Dynamic]
  tokenRequests:
    - audience: e2e-canary
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
    podTemplate:
      metadata:
        namespace: "{{ pvc.metadata.namespace }}"
      spec:
        restartPolicy: Never
        containers:
          - name: create
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            env:
              - name: TOKEN
                valueFrom:
                  secretKeyRef:
                    name: "{{ params.secretName }}"
                    key: token
            command:
              - sh
              - -c
              - |
                sum=$(printf %s "$TOKEN" | sha256sum | cut -d ' ' -f 1)
                echo "creation: token sha256 $sum"
                printf 'sha256-%s' "$sum" > /pav/handle
  volumeStaging:
    podTemplate:
      metadata:
        namespace: "{{ pvc.metadata.namespace }}"
      spec:
        restartPolicy: Never
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            env:
              - name: TOKEN
                valueFrom:
                  secretKeyRef:
                    name: "{{ params.secretName }}"
                    key: token
              - name: FAIL
                value: "{{ pvc.metadata.annotations['e2e.pav/fail-staging'] | default('no') }}"
            command:
              - sh
              - -c
              - |
                sum=$(printf %s "$TOKEN" | sha256sum | cut -d ' ' -f 1)
                echo "staging: token sha256 $sum"
                jwt=$(sha256sum < /pav/tokens/e2e-canary | cut -d ' ' -f 1)
                echo "staging: service-account token sha256 $jwt"
                if [ "$FAIL" = yes ]; then
                  echo "failing on purpose; token sha256 $sum" > /pav/error
                  exit 1
                fi
                mkdir -p /pav/volume
                echo "$sum" > /pav/volume/token.sha256
"#;

const CLASSES: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-secret-canary
provisioner: e2e-secret-canary
parameters:
  secretName: canary
  csi.storage.k8s.io/node-publish-secret-name: canary
  csi.storage.k8s.io/node-publish-secret-namespace: "${pvc.namespace}"
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-secret-canary-provisioner-secret
provisioner: e2e-secret-canary
parameters:
  secretName: canary
  csi.storage.k8s.io/provisioner-secret-name: canary
  csi.storage.k8s.io/provisioner-secret-namespace: "${pvc.namespace}"
"#;

const CLAIMS_AND_CLIENT: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: e2e-secret-canary
  annotations: { e2e.pav/fail-staging: "yes" }
spec:
  storageClassName: e2e-secret-canary
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: provisioner-secret
  namespace: e2e-secret-canary
spec:
  storageClassName: e2e-secret-canary-provisioner-secret
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: e2e-secret-canary
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      # Runs on until deleted: the staging pod's directory, where the
      # test reads the service-account token, stays while it does.
      command: [sh, -c, "cat /volume/token.sha256 && exec sleep 3600"]
      volumeMounts: [{ name: data, mountPath: /volume }]
  volumes:
    - name: data
      persistentVolumeClaim: { claimName: data }
"#;

/// What was scanned for the canary, and where it was found.
#[derive(Debug, Default)]
struct Scan {
    /// The canary and its base64 form.
    needles: Vec<String>,
    /// `where: excerpt` of every hit (an object seen twice unchanged, once).
    hits: BTreeSet<String>,
    /// Object versions scanned (every watch event counts).
    versions: usize,
    /// Distinct objects scanned, `Kind namespace/name`.
    objects: BTreeSet<String>,
    /// Log lines scanned.
    log_lines: usize,
    /// Logs scanned, `namespace/pod/container`, with their line counts.
    logs: BTreeMap<String, usize>,
    /// Log containers already fetched after terminating (uid, container,
    /// restart count).
    fetched: BTreeSet<(String, String, i32)>,
    /// The text of the logs of PaV pods and the client, by `pod/container`.
    texts: BTreeMap<String, String>,
    /// The last version seen of each PaV pod of the provisioner, by uid.
    pav_pods: BTreeMap<String, Pod>,
    /// Everything scanned, `(where, text)`, for a needle found later.
    scanned: Vec<(String, String)>,
}

type Shared = Arc<Mutex<Scan>>;

impl Scan {
    fn text(&mut self, place: &str, text: &str) {
        self.scanned.push((place.to_owned(), text.to_owned()));
        self.find(place, text, 0);
    }

    /// Looks for `needle` from now on, and in everything scanned before.
    fn add_needle(&mut self, needle: String) {
        self.needles.push(needle);
        let scanned = std::mem::take(&mut self.scanned);
        for (place, text) in &scanned {
            self.find(place, text, self.needles.len() - 1);
        }
        self.scanned = scanned;
    }

    /// Records the hits in `text` of the needles from index `first` on.
    fn find(&mut self, place: &str, text: &str, first: usize) {
        for needle in &self.needles[first..] {
            let mut from = 0;
            while let Some(at) = text[from..].find(needle.as_str()) {
                let at = from + at;
                let mut start = at.saturating_sub(60);
                while !text.is_char_boundary(start) {
                    start -= 1;
                }
                let mut end = (at + needle.len() + 60).min(text.len());
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                self.hits
                    .insert(format!("{place}: ...{}...", &text[start..end]));
                from = at + needle.len();
            }
        }
    }

    fn object<K: Resource + Serialize>(&mut self, kind: &str, object: &K) {
        let meta = object.meta();
        let id = format!(
            "{kind} {}/{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("")
        );
        let json = serde_json::to_string(object).expect("objects serialise");
        self.text(&id, &json);
        self.versions += 1;
        self.objects.insert(id);
    }

    fn log(&mut self, source: &str, text: &str) {
        self.text(source, text);
        let lines = text.lines().count();
        self.log_lines += lines;
        *self.logs.entry(source.to_owned()).or_default() += lines;
    }
}

/// Scans every version of every `K` in the cluster until the test ends.
fn watch_all<K>(api: Api<K>, kind: &'static str, scan: Shared)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(event) = stream.next().await {
            if let Ok(
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o),
            ) = event
            {
                scan.lock().expect("not poisoned").object(kind, &o);
            }
        }
    });
}

/// Whether `pod` is one whose logs the test reads as they end: a PaV pod
/// of the provisioner or a pod of the scenario's namespace.
fn followed(pod: &Pod) -> bool {
    pod.namespace().as_deref() == Some(NS)
        || pod.labels().get(LABEL_PROVISIONER).map(String::as_str) == Some(NAME)
}

/// Scans every version of every Pod, and the logs of each container of a
/// followed pod once it has terminated (before pav deletes the pod).
fn watch_pods(client: Client, scan: Shared) {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::all(client.clone());
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(event) = stream.next().await {
            let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
                continue;
            };
            let mut guard = scan.lock().expect("not poisoned");
            guard.object("Pod", &pod);
            if !followed(&pod) {
                continue;
            }
            let uid = pod.uid().unwrap_or_default();
            if pod.labels().contains_key(LABEL_PHASE) {
                guard.pav_pods.insert(uid.clone(), pod.clone());
            }
            for status in container_statuses(&pod) {
                let ended = status
                    .state
                    .as_ref()
                    .is_some_and(|s| s.terminated.is_some());
                let key = (uid.clone(), status.name.clone(), status.restart_count);
                if ended && guard.fetched.insert(key) {
                    let (client, scan, pod) = (client.clone(), scan.clone(), pod.clone());
                    let container = status.name.clone();
                    tokio::spawn(async move {
                        scan_logs(&client, &scan, &pod, &container, false).await;
                    });
                }
            }
        }
    });
}

/// Scans the log of one container of `pod` (`previous`: of its last
/// restart).
async fn scan_logs(client: &Client, scan: &Shared, pod: &Pod, container: &str, previous: bool) {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let params = LogParams {
        container: Some(container.to_owned()),
        previous,
        ..LogParams::default()
    };
    let source = format!(
        "log {namespace}/{}/{container}{}",
        pod.name_any(),
        if previous { " (previous)" } else { "" }
    );
    match api.logs(&pod.name_any(), &params).await {
        Ok(text) => {
            let mut scan = scan.lock().expect("not poisoned");
            scan.log(&source, &text);
            if followed(pod) {
                scan.texts
                    .entry(format!("{}/{container}", pod.name_any()))
                    .or_default()
                    .push_str(&text);
            }
        }
        Err(e) => eprintln!("cannot read {source}: {e}"),
    }
}

/// Scans the logs of every container (and of its previous run, if it
/// restarted) of the pods in `namespace` matching `selector`.
async fn scan_pod_logs(client: &Client, scan: &Shared, namespace: &str, selector: &str) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api
        .list(&ListParams::default().labels(selector))
        .await
        .expect("listing pods")
        .items;
    for pod in &pods {
        for status in container_statuses(pod) {
            scan_logs(client, scan, pod, &status.name, false).await;
            if status.restart_count > 0 {
                scan_logs(client, scan, pod, &status.name, true).await;
            }
        }
    }
    pods.len()
}

/// Scans every Event of every namespace as it is now.
async fn scan_events(client: &Client, scan: &Shared) {
    let api: Api<Event> = Api::all(client.clone());
    let events = api
        .list(&ListParams::default())
        .await
        .expect("listing events");
    let mut scan = scan.lock().expect("not poisoned");
    for event in &events.items {
        scan.object("Event", event);
    }
}

/// The last lines of the CSI controller's containers, for failure messages.
async fn driver_logs(client: &Client) -> String {
    let api: Api<Pod> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let selector = format!("{LABEL_PROVISIONER}={NAME},app.kubernetes.io/component=csi-controller");
    let mut out = String::new();
    let pods = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(e) => return format!("(cannot list the CSI controller: {e})"),
    };
    for pod in pods {
        for container in ["pav", "csi-provisioner"] {
            let params = LogParams {
                container: Some(container.to_owned()),
                tail_lines: Some(30),
                ..LogParams::default()
            };
            let text = api
                .logs(&pod.name_any(), &params)
                .await
                .unwrap_or_else(|e| format!("(cannot read: {e})"));
            out.push_str(&format!("--- {}/{container}\n{text}", pod.name_any()));
        }
    }
    out
}

/// 16 random bytes in hex, prefixed so a hit is easy to recognise.
fn canary() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("reading /dev/urandom");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("pav-canary-{hex}")
}

/// SHA-256 of `text` in hex, as the pods compute it (`sha256sum`).
fn sha256(text: &str) -> String {
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running sha256sum");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())
        .expect("writing to sha256sum");
    let output = child.wait_with_output().expect("sha256sum");
    String::from_utf8(output.stdout)
        .expect("hex")
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_owned()
}

/// Size of the kubelet's log now, to scan only what is written afterwards.
fn kubelet_log_len() -> u64 {
    std::fs::metadata(KUBELET_LOG).map_or(0, |m| m.len())
}

fn scan_kubelet_log(scan: &Shared, from: u64) {
    let Ok(mut file) = std::fs::File::open(KUBELET_LOG) else {
        eprintln!("no {KUBELET_LOG}: kubelet log not scanned");
        return;
    };
    let mut bytes = Vec::new();
    file.seek(std::io::SeekFrom::Start(from))
        .and_then(|_| file.read_to_end(&mut bytes))
        .expect("reading the kubelet log");
    scan.lock()
        .expect("not poisoned")
        .log("kubelet log", &String::from_utf8_lossy(&bytes));
}

/// The service-account token in the running staging pod's `/pav/tokens/`,
/// read on the node (this machine).
async fn staging_pod_token(client: &Client) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = format!("{LABEL_PROVISIONER}={NAME},{LABEL_PHASE}=staging");
    let staging = pods.list(&ListParams::default().labels(&selector)).await;
    let staging = staging.expect("listing staging pods").items;
    let [pod] = &staging[..] else {
        panic!("one staging pod, not {}", staging.len());
    };
    let path = format!("{HOST_POD_DIR}/{}/tokens/{AUDIENCE}", pod.name_any());
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The API server's TokenReview of `token` for [`AUDIENCE`]: the user
/// it authenticates, and the pod it is bound to.
async fn review_token(client: &Client, token: &str) -> (Option<String>, Vec<String>) {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_owned(),
            audiences: Some(vec![AUDIENCE.to_owned()]),
        },
        ..TokenReview::default()
    };
    let api: Api<TokenReview> = Api::all(client.clone());
    let reviewed = api
        .create(&PostParams::default(), &review)
        .await
        .expect("TokenReview");
    let status = reviewed.status.expect("a reviewed token has a status");
    assert_eq!(status.authenticated, Some(true), "{:?}", status.error);
    let user = status.user.unwrap_or_default();
    let pod = (user.extra.unwrap_or_default())
        .remove("authentication.kubernetes.io/pod-name")
        .unwrap_or_default();
    (user.username, pod)
}

/// The `TOKEN` variables of a pod: (container, literal value, Secret named
/// by `secretKeyRef`).
fn token_env(pod: &Pod) -> Vec<(String, Option<String>, Option<String>)> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| {
            c.env
                .iter()
                .flatten()
                .filter(|e| e.name == "TOKEN")
                .map(|e| {
                    (
                        c.name.clone(),
                        e.value.clone(),
                        e.value_from
                            .as_ref()
                            .and_then(|v| v.secret_key_ref.as_ref())
                            .map(|r| r.name.clone()),
                    )
                })
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn secret_values_never_appear_in_logs_events_or_objects() {
    let client = cluster().await;
    let started = Instant::now();
    reset(&client, NS, NAME).await.unwrap();
    namespace(&client, NS).await.unwrap();

    let canary = canary();
    let sha = sha256(&canary);
    let base64 = serde_json::to_value(ByteString(canary.clone().into_bytes()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    eprintln!("canary sha256 {sha}");
    let scan: Shared = Arc::new(Mutex::new(Scan {
        needles: vec![canary.clone(), base64],
        ..Scan::default()
    }));
    let kubelet_from = kubelet_log_len();
    watch_pods(client.clone(), scan.clone());
    watch_all(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        "PersistentVolumeClaim",
        scan.clone(),
    );
    watch_all(
        Api::<PersistentVolume>::all(client.clone()),
        "PersistentVolume",
        scan.clone(),
    );
    watch_all(
        Api::<StorageClass>::all(client.clone()),
        "StorageClass",
        scan.clone(),
    );
    watch_all(Api::<Event>::all(client.clone()), "Event", scan.clone());
    watch_all(
        provisioners(&client).await.unwrap(),
        "PavProvisioner",
        scan.clone(),
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    delete_and_wait(&secrets, SECRET, STEP).await.unwrap();
    let mut secret = Secret::default();
    secret.metadata.name = Some(SECRET.to_owned());
    secret.data = Some([("token".to_owned(), ByteString(canary.clone().into_bytes()))].into());
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    apply(&client, PROVISIONER).await.unwrap();
    apply(&client, CLASSES).await.unwrap();
    wait_provisioner_ready(&client, NAME, STEP).await.unwrap();
    apply(&client, CLAIMS_AND_CLIENT).await.unwrap();

    // The creation pod got the value: the handle is its digest.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pvc = match wait_for(&claims, "data", STEP, "Bound", |c| {
        claim_phase(c) == "Bound"
    })
    .await
    {
        Ok(pvc) => pvc,
        Err(e) => panic!(
            "{e}; claim events: {:#?}\n{}",
            event_lines(&client, NS, "data").await,
            driver_logs(&client).await
        ),
    };
    let volume = volume_name(&pvc).unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.unwrap();
    let csi = pv.spec.as_ref().and_then(|s| s.csi.clone()).unwrap();
    assert_eq!(csi.volume_handle, format!("sha256-{sha}"));
    // external-provisioner names the Secret on the volume for kubelet.
    let reference = csi.node_publish_secret_ref.expect("nodePublishSecretRef");
    assert_eq!(
        (reference.name.as_deref(), reference.namespace.as_deref()),
        (Some(SECRET), Some(NS))
    );

    // The staging pod got it too, and its error (the digest) reaches the
    // client pod's events.
    let failed = wait_event(&client, NS, "client", &["FailedMount", &sha], STEP)
        .await
        .unwrap();
    eprintln!("client event: {failed}");
    let staging_failed = wait_event(&client, NS, "client", &["StagingFailed", &sha], STEP)
        .await
        .unwrap();
    eprintln!("pav event: {staging_failed}");

    // A class asking external-provisioner to read the Secret: forbidden.
    let refused = wait_event(
        &client,
        NS,
        "provisioner-secret",
        &["ProvisioningFailed", "cannot get resource \"secrets\""],
        STEP,
    )
    .await
    .unwrap();
    eprintln!("provisioner-secret claim: {refused}");
    let pending = claims.get("provisioner-secret").await.unwrap();
    assert_eq!(claim_phase(&pending), "Pending");

    // Let staging succeed: the client reads the digest from the volume.
    claims
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": { "annotations": { FAIL_ANNOTATION: null } }
            })),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let read = wait_until("the client to print the digest", STEP, || async {
        let printed = logs(&client, NS, "client").await.unwrap_or_default();
        Ok((!printed.is_empty()).then_some(printed))
    })
    .await;
    let read = match read {
        Ok(read) => read,
        Err(e) => panic!(
            "{e}; client events: {:#?}",
            event_lines(&client, NS, "client").await
        ),
    };
    assert_eq!(read.trim_end(), sha);

    // The staging pod's service-account token: the client pod's, for the
    // audience asked, and a canary from now on.
    let token = staging_pod_token(&client).await;
    let review = review_token(&client, &token).await;
    let username = format!("system:serviceaccount:{NS}:default");
    assert_eq!(review.0.as_deref(), Some(username.as_str()), "{review:?}");
    assert_eq!(
        review.1,
        ["client".to_owned()],
        "the token is bound to the client pod"
    );
    let token_sha = sha256(&token);
    eprintln!("service-account token sha256 {token_sha}");
    let signature = token.rsplit('.').next().expect("a JWT").to_owned();
    {
        let mut scan = scan.lock().expect("not poisoned");
        scan.add_needle(token.clone());
        scan.add_needle(signature);
    }

    delete_and_wait(&pods, "client", STEP).await.unwrap();
    delete_and_wait(&claims, "data", STEP).await.unwrap();
    delete_and_wait(&claims, "provisioner-secret", STEP)
        .await
        .unwrap();
    wait_gone(&pvs, &volume, STEP).await.unwrap();
    wait_no_pav_pods(&client, NAME, STEP).await.unwrap();

    // The long-running components, before the driver goes.
    let controllers = scan_pod_logs(
        &client,
        &scan,
        PAV_NAMESPACE,
        "app.kubernetes.io/name=pav,app.kubernetes.io/component=controller",
    )
    .await;
    let drivers = scan_pod_logs(
        &client,
        &scan,
        PAV_NAMESPACE,
        &format!(
            "{LABEL_PROVISIONER}={NAME},app.kubernetes.io/component in (csi-controller,csi-node)"
        ),
    )
    .await;
    assert!(controllers >= 1 && drivers >= 2, "pav's pods not found");

    delete(&client, CLASSES).await.unwrap();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    delete_and_wait(&secrets, SECRET, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    scan_events(&client, &scan).await;
    scan_kubelet_log(&scan, kubelet_from);

    let scan = scan.lock().expect("not poisoned");
    // Every PaV pod carried the reference, never the value.
    let mut phases = BTreeSet::new();
    for pod in scan.pav_pods.values() {
        let phase = pod.labels().get(LABEL_PHASE).cloned().unwrap_or_default();
        for (container, value, secret) in token_env(pod) {
            assert_eq!(
                (value.as_deref(), secret.as_deref()),
                (None, Some(SECRET)),
                "{phase} pod {} container {container}: TOKEN must be a secretKeyRef",
                pod.name_any()
            );
        }
        phases.insert(phase);
    }
    assert_eq!(
        phases,
        BTreeSet::from(["creation".to_owned(), "staging".to_owned()]),
        "PaV pods seen"
    );
    // What the pods printed shows they had the values.
    let lines = [
        ("create", format!("creation: token sha256 {sha}")),
        ("stage", format!("staging: token sha256 {sha}")),
        (
            "stage",
            format!("staging: service-account token sha256 {token_sha}"),
        ),
    ];
    for (container, line) in lines {
        let found = scan.texts.iter().any(|(source, text)| {
            source.ends_with(&format!("/{container}")) && text.contains(&line)
        });
        assert!(
            found,
            "no log of a {container} container says {line:?}; logs read: {:?}",
            scan.texts.keys().collect::<Vec<_>>()
        );
    }
    let kinds: BTreeMap<&str, usize> = scan.objects.iter().fold(BTreeMap::new(), |mut m, id| {
        *m.entry(id.split(' ').next().unwrap_or("")).or_default() += 1;
        m
    });
    eprintln!(
        "scanned {} object versions of {} objects {kinds:?}, {} log lines from {} logs:",
        scan.versions,
        scan.objects.len(),
        scan.log_lines,
        scan.logs.len()
    );
    for (source, lines) in &scan.logs {
        eprintln!("  {lines:6} {source}");
    }
    assert!(
        scan.hits.is_empty(),
        "the canary leaked {} times:\n{}",
        scan.hits.len(),
        scan.hits.iter().cloned().collect::<Vec<_>>().join("\n")
    );
    eprintln!(
        "secret_values_never_appear_in_logs_events_or_objects: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
