//! Issue 7: what pav's service accounts may do, as the API server itself
//! answers it, compared with the checked-in `e2e/expected/rbac.txt`.
//!
//! For pav's controller and for the CSI controller and node plugin of a
//! PavProvisioner (their service accounts found from the Deployments and
//! the DaemonSet), the test impersonates the account and asks for a
//! SelfSubjectRulesReview in the pav namespace and in `default`. What an
//! unprivileged service account of the pav namespace gets (discovery,
//! self reviews, ...) is computed the same way and subtracted, so the list
//! is exactly what pav's roles grant. A rule seen in both namespaces is
//! cluster-wide (`*`), one seen only in `pav` comes from a Role there.
//!
//! `PAV_UPDATE_RBAC=1` rewrites the expectation, keeping the comment above
//! each line. Every line's comment names the code that calls its verbs;
//! a comment marking a verb `unused:` fails the test, so the roles stay
//! minimal. Independently of the file, no account may read Secrets
//! (SelfSubjectAccessReview, so every authorizer is asked) and no rule may
//! use a wildcard.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use pav_e2e::*;

const NAME: &str = "e2e-rbac";
/// The namespace next to pav's own that is reviewed: rules granted there
/// and in `pav` are cluster-wide.
const OTHER_NAMESPACE: &str = "default";
/// A service account name no binding mentions: what it may do, every
/// service account of the pav namespace may do.
const BASELINE_ACCOUNT: &str = "e2e-rbac-unprivileged";
const EXPECTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/expected/rbac.txt");

fn provisioner() -> String {
    let path = format!(
        "{}/../examples/hello-world/provisioner.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .replace("name: hello-world", &format!("name: {NAME}"))
}

/// A client acting as service account `namespace/name`, with the groups
/// the API server gives every service account token.
async fn impersonating(namespace: &str, name: &str) -> Client {
    let mut config = kube::Config::infer().await.expect("kubeconfig");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".to_owned(),
    ]);
    Client::try_from(config).expect("impersonating client")
}

/// One permission: API group (`core` for the core group, `nonResourceURL`
/// for URLs), resource (with `/subresource`, or the URL), resource names
/// (`[a,b]`, empty for all) and one verb.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    group: String,
    resource: String,
    names: String,
    verb: String,
}

/// Everything the impersonated account may do in `namespace`, one verb at a
/// time, and whether the API server said the list is incomplete.
async fn rules(client: &Client, namespace: &str) -> (BTreeSet<Grant>, bool) {
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_owned()),
        },
        ..Default::default()
    };
    let status = api
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectRulesReview")
        .status
        .expect("a review has a status");
    if let Some(error) = &status.evaluation_error {
        eprintln!("rules review in {namespace}: evaluation error: {error}");
    }
    let mut grants = BTreeSet::new();
    for rule in &status.resource_rules {
        let mut names = rule.resource_names.clone().unwrap_or_default();
        names.sort();
        let names = if names.is_empty() {
            String::new()
        } else {
            format!("[{}]", names.join(","))
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    grants.insert(Grant {
                        group: if group.is_empty() {
                            "core".to_owned()
                        } else {
                            group.clone()
                        },
                        resource: resource.clone(),
                        names: names.clone(),
                        verb: verb.clone(),
                    });
                }
            }
        }
    }
    for rule in &status.non_resource_rules {
        for url in rule.non_resource_urls.iter().flatten() {
            for verb in &rule.verbs {
                grants.insert(Grant {
                    group: "nonResourceURL".to_owned(),
                    resource: url.clone(),
                    names: String::new(),
                    verb: verb.clone(),
                });
            }
        }
    }
    (grants, status.incomplete)
}

/// The expectation lines of one account: `<account> <scope> <group>
/// <resource>[names] <verbs>`, scope `*` for cluster-wide, sorted.
fn lines(
    account: &str,
    pav: &BTreeSet<Grant>,
    other: &BTreeSet<Grant>,
) -> (Vec<String>, BTreeSet<Grant>) {
    let mut grouped: BTreeMap<(String, String, String, String), BTreeSet<String>> = BTreeMap::new();
    for grant in pav.union(other) {
        let scope = match (pav.contains(grant), other.contains(grant)) {
            (true, true) => "*".to_owned(),
            (true, false) => PAV_NAMESPACE.to_owned(),
            _ => OTHER_NAMESPACE.to_owned(),
        };
        grouped
            .entry((
                scope,
                grant.group.clone(),
                grant.resource.clone(),
                grant.names.clone(),
            ))
            .or_default()
            .insert(grant.verb.clone());
    }
    let lines = grouped
        .into_iter()
        .map(|((scope, group, resource, names), verbs)| {
            let verbs: Vec<String> = verbs.into_iter().collect();
            format!(
                "{account} {scope} {group} {resource}{names} {}",
                verbs.join(",")
            )
        })
        .collect();
    (lines, pav.union(other).cloned().collect())
}

/// The expectation file: rule lines, and the comment block above each (the
/// key is the line without its verbs, so a comment survives a verb change).
struct Expectation {
    header: String,
    rules: Vec<String>,
    comments: BTreeMap<String, String>,
}

fn key(line: &str) -> String {
    line.rsplit_once(' ').map_or(line, |(k, _)| k).to_owned()
}

impl Expectation {
    fn parse(text: &str) -> Expectation {
        let mut header = String::new();
        let mut body = text;
        if let Some(end) = text.find("\n\n") {
            header = text[..end + 1].to_owned();
            body = &text[end + 2..];
        }
        let mut rules = Vec::new();
        let mut comments = BTreeMap::new();
        let mut block = String::new();
        for line in body.lines() {
            if line.starts_with('#') {
                block.push_str(line);
                block.push('\n');
            } else if !line.trim().is_empty() {
                if !block.is_empty() {
                    comments.insert(key(line), std::mem::take(&mut block));
                }
                rules.push(line.trim().to_owned());
            }
        }
        Expectation {
            header,
            rules,
            comments,
        }
    }

    /// The file for `rules`, with the comments of lines that stay.
    fn render(&self, rules: &[String]) -> String {
        let mut out = format!("{}\n", self.header.trim_end());
        for (i, line) in rules.iter().enumerate() {
            let comment = self.comments.get(&key(line));
            // A blank line after the header and before each comment block.
            if i == 0 || comment.is_some() {
                out.push('\n');
            }
            if let Some(comment) = comment {
                out.push_str(comment);
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

const HEADER: &str = "\
# What pav's service accounts may do, as the API server reports it
# (SelfSubjectRulesReview while impersonating each account, in namespaces
# `pav` and `default`), minus what any service account of namespace `pav`
# may do anyway. Checked by e2e/tests/rbac.rs; after a deliberate change run
#   PAV_UPDATE_RBAC=1 cargo test -p pav-e2e --test rbac
# and explain each new line in a comment above it (comments are kept).
#
# <account> <namespace, * = cluster-wide> <API group, core = \"\"> <resource> <verbs>
";

/// Service account of the one object of `api` matching `selector`.
async fn account_of<K>(
    api: &Api<K>,
    selector: &str,
    account: impl Fn(&K) -> Option<String>,
) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let items = api
        .list(&ListParams::default().labels(selector))
        .await
        .expect("listing pav's workloads")
        .items;
    assert_eq!(
        items.len(),
        1,
        "expected one object labelled {selector}, found {:?}",
        items.iter().map(|o| o.name_any()).collect::<Vec<_>>()
    );
    account(&items[0]).unwrap_or_else(|| "default".to_owned())
}

/// Whether the impersonated account may `verb` `resource` (core group) in
/// `namespace` (`None`: in every namespace at once), asking every
/// authorizer, as `kubectl auth can-i --as` does.
async fn may(client: &Client, namespace: Option<&str>, verb: &str, resource: &str) -> bool {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: namespace.map(str::to_owned),
                verb: Some(verb.to_owned()),
                resource: Some(resource.to_owned()),
                group: Some(String::new()),
                version: Some("v1".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test]
#[ignore = "needs a cluster"]
async fn service_accounts_have_exactly_the_expected_permissions() {
    let client = cluster().await;
    let started = Instant::now();
    delete_provisioner(&client, NAME, STEP).await.unwrap();
    apply(&client, &provisioner()).await.unwrap();
    wait_provisioner_ready(&client, NAME, STEP).await.unwrap();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), PAV_NAMESPACE);
    let deployment_account = |d: &Deployment| {
        d.spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
    };
    let controller = account_of(
        &deployments,
        "app.kubernetes.io/name=pav,app.kubernetes.io/component=controller",
        deployment_account,
    )
    .await;
    let csi_controller = account_of(
        &deployments,
        &format!("{LABEL_PROVISIONER}={NAME},app.kubernetes.io/component=csi-controller"),
        deployment_account,
    )
    .await;
    let csi_node = account_of(
        &daemon_sets,
        &format!("{LABEL_PROVISIONER}={NAME},app.kubernetes.io/component=csi-node"),
        |d: &DaemonSet| {
            d.spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
        },
    )
    .await;
    let placeholder = |account: &str| account.replace(&format!("-{NAME}-"), "-<provisioner>-");

    let baseline = impersonating(PAV_NAMESPACE, BASELINE_ACCOUNT).await;
    let (base_pav, _) = rules(&baseline, PAV_NAMESPACE).await;
    let (base_other, _) = rules(&baseline, OTHER_NAMESPACE).await;
    eprintln!(
        "baseline (any service account of {PAV_NAMESPACE}): {} permissions in {PAV_NAMESPACE}, {} in {OTHER_NAMESPACE}",
        base_pav.len(),
        base_other.len()
    );

    let mut actual = Vec::new();
    let mut problems = Vec::new();
    let mut permissions = 0;
    for account in [&controller, &csi_controller, &csi_node] {
        let client = impersonating(PAV_NAMESPACE, account).await;
        let (pav, incomplete_pav) = rules(&client, PAV_NAMESPACE).await;
        let (other, incomplete_other) = rules(&client, OTHER_NAMESPACE).await;
        // An authorizer that cannot list rules (a webhook) would make the
        // list a lower bound; the access reviews below still ask it.
        if incomplete_pav || incomplete_other {
            eprintln!("{account}: the API server marks its rule list incomplete");
        }
        let pav: BTreeSet<Grant> = pav.difference(&base_pav).cloned().collect();
        let other: BTreeSet<Grant> = other.difference(&base_other).cloned().collect();
        let (account_lines, grants) = lines(&placeholder(account), &pav, &other);
        permissions += grants.len();
        eprintln!(
            "{account}: {} permissions (verb x resource) in {} lines",
            grants.len(),
            account_lines.len()
        );
        for grant in &grants {
            if grant.resource == "secrets" {
                problems.push(format!("{account} has {} on secrets", grant.verb));
            }
            if grant.group == "*" || grant.resource.contains('*') || grant.verb == "*" {
                problems.push(format!("{account} has a wildcard rule: {grant:?}"));
            }
        }
        for namespace in [Some(PAV_NAMESPACE), Some(OTHER_NAMESPACE), None] {
            for verb in ["get", "list", "watch"] {
                if may(&client, namespace, verb, "secrets").await {
                    problems.push(format!(
                        "{account} may {verb} secrets in {}",
                        namespace.unwrap_or("every namespace")
                    ));
                }
            }
        }
        actual.extend(account_lines);
    }
    // A node plugin may make pods only where its node phases' pods go (here
    // the pav namespace): not in kube-system, where a pod could run as
    // anything the cluster runs.
    let node = impersonating(PAV_NAMESPACE, &csi_node).await;
    for verb in ["create", "patch", "delete"] {
        for (namespace, allowed) in [
            (PAV_NAMESPACE, true),
            ("kube-system", false),
            (OTHER_NAMESPACE, false),
        ] {
            if may(&node, Some(namespace), verb, "pods").await != allowed {
                problems.push(format!(
                    "{csi_node} {} {verb} pods in {namespace}",
                    if allowed { "may not" } else { "may" }
                ));
            }
        }
    }
    actual.sort();
    if problems.is_empty() {
        eprintln!(
            "no account may get, list or watch secrets (9 access reviews each), no wildcards; \
             the node plugin may create, patch and delete pods in {PAV_NAMESPACE} only; \
             {permissions} permissions in {} lines",
            actual.len()
        );
    }

    let text = std::fs::read_to_string(EXPECTED).unwrap_or_default();
    let mut expected = Expectation::parse(&text);
    if expected.header.is_empty() {
        expected.header = HEADER.to_owned();
    }
    if std::env::var_os("PAV_UPDATE_RBAC").is_some_and(|v| v == "1") {
        std::fs::write(EXPECTED, expected.render(&actual)).unwrap();
        eprintln!("rewrote {EXPECTED}");
    } else {
        for (line, comment) in &expected.comments {
            if comment.contains("unused:") {
                problems.push(format!(
                    "{EXPECTED} marks verbs of `{line}` unused: take them out of the roles"
                ));
            }
        }
        for line in &expected.rules {
            if !expected.comments.contains_key(&key(line)) {
                problems.push(format!(
                    "{EXPECTED}: `{line}` has no comment saying who uses it"
                ));
            }
        }
        let want: BTreeSet<&String> = expected.rules.iter().collect();
        let have: BTreeSet<&String> = actual.iter().collect();
        if want == have {
            eprintln!("{} lines match {EXPECTED}", actual.len());
        } else {
            let mut diff = String::new();
            for line in want.difference(&have) {
                diff.push_str(&format!("- {line}\n"));
            }
            for line in have.difference(&want) {
                diff.push_str(&format!("+ {line}\n"));
            }
            problems.push(format!(
                "the service accounts' permissions differ from {EXPECTED} \
                 (- expected only, + granted only):\n{diff}\
                 If the change is intended: PAV_UPDATE_RBAC=1 cargo test -p pav-e2e --test rbac, \
                 then explain the new lines in the file"
            ));
        }
    }

    delete_provisioner(&client, NAME, STEP).await.unwrap();
    assert_no_leaks(&client, NAME, Duration::from_secs(120)).await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "service_accounts_have_exactly_the_expected_permissions: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// Issue 45: RBAC cannot limit the controller's `create`, `patch` and
/// `delete` of ClusterRoleBindings to the drivers' (their names are not
/// known in advance), so an admission policy does (`pav manifests`'
/// `pav-controller-cluster-role-bindings`). As the controller's
/// ServiceAccount, server-side dry runs (admission runs, nothing is
/// stored): a ClusterRoleBinding it did not make may not be patched or
/// deleted, and one it makes must carry its label; the same binding with
/// the label is allowed, so the policy, not RBAC, is what refuses.
#[tokio::test]
#[ignore = "needs a cluster"]
async fn the_controller_may_change_only_the_cluster_role_bindings_it_made() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::{DeleteParams, Patch, PatchParams};

    const FOREIGN: &str = "e2e-rbac-foreign";
    let binding = |name: &str, labels: serde_json::Value| -> ClusterRoleBinding {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": { "name": name, "labels": labels },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "pav-csi-node",
            },
            // An account no one uses: the binding grants nothing in use.
            "subjects": [{
                "kind": "ServiceAccount",
                "name": "e2e-rbac-nobody",
                "namespace": PAV_NAMESPACE,
            }],
        }))
        .unwrap()
    };
    let admin: Api<ClusterRoleBinding> = Api::all(cluster().await);
    let apply = PatchParams::apply("e2e-rbac").force();
    admin
        .patch(
            FOREIGN,
            &apply,
            &Patch::Apply(binding(FOREIGN, serde_json::json!({}))),
        )
        .await
        .unwrap();

    let controller: Api<ClusterRoleBinding> =
        Api::all(impersonating(PAV_NAMESPACE, "pav-controller").await);
    let refused = |result: Result<(), kube::Error>, what: &str, message: &str| match result {
        Err(kube::Error::Api(status)) if status.message.contains(message) => {
            eprintln!("{what}: refused: {}", status.message);
        }
        other => panic!("{what}: not refused by the policy: {other:?}"),
    };
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let deleted = controller.delete(FOREIGN, &dry_delete).await.map(drop);
    refused(
        deleted,
        "deleting an unlabelled binding",
        "may only change or delete the role bindings it made",
    );
    let label = serde_json::json!({ "metadata": { "labels": {
        "app.kubernetes.io/managed-by": "pav-controller",
    } } });
    let patched = controller
        .patch(
            FOREIGN,
            &PatchParams::default().dry_run(),
            &Patch::Merge(&label),
        )
        .await
        .map(drop);
    refused(
        patched,
        "labelling an unlabelled binding as its own",
        "may only change or delete the role bindings it made",
    );
    let made = binding("e2e-rbac-made", serde_json::json!({}));
    let created = (controller.create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &made,
    ))
    .await
    .map(drop);
    refused(
        created,
        "making an unlabelled binding",
        "may only make role bindings labelled",
    );
    let labelled = binding(
        "e2e-rbac-made",
        serde_json::json!({ "app.kubernetes.io/managed-by": "pav-controller" }),
    );
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    controller
        .create(&params, &labelled)
        .await
        .expect("a binding labelled as the controller's is allowed");

    admin
        .delete(FOREIGN, &DeleteParams::default())
        .await
        .unwrap();
}

/// A templated namespace for the node plugin's pods, rendered per volume.
const STAGING_NAME: &str = "e2e-rbac-staging";
/// Where the claim and the client pod are.
const STAGING_CLAIMS: &str = "e2e-rbac-staging-claims";
/// Where the StorageClass parameter puts the staging pods.
const STAGING_PODS: &str = "e2e-rbac-staging-pods";

const STAGING_OBJECTS: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata:
  name: e2e-rbac-staging
spec:
  provisioningModes: [Dynamic]
  volumeCreation:
    capacity: "{{ requestedMinCapacity }}"
  volumeStaging:
    podTemplate:
      metadata:
        namespace: "{{ params.stagingNamespace }}"
      spec:
        containers:
          - name: stage
            image: busybox:stable
            imagePullPolicy: IfNotPresent
            command: [sh, -c, "mkdir -p /pav/volume; echo staged > /pav/volume/file"]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-rbac-staging
provisioner: e2e-rbac-staging
parameters:
  stagingNamespace: e2e-rbac-staging-pods
"#;

const STAGING_CLIENT: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: e2e-rbac-staging-claims
spec:
  storageClassName: e2e-rbac-staging
  accessModes: [ReadWriteOnce]
  resources: { requests: { storage: 1Mi } }
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: e2e-rbac-staging-claims
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

/// Issue 45: a node plugin may make pods only where its node phases' pods
/// go. Here a StorageClass parameter names the staging pods' namespace,
/// so the controller renders it for the volume and binds the node plugin
/// there, not in the claim's namespace; the client reads what staging
/// wrote, and once the volume and its staging pod are gone the binding
/// goes too.
#[tokio::test]
#[ignore = "needs a cluster"]
async fn the_node_plugin_is_bound_where_a_template_puts_its_pods() {
    let client = cluster().await;
    let started = Instant::now();
    namespace(&client, STAGING_PODS).await.unwrap();
    let observer = start_scenario(&client, STAGING_CLAIMS, STAGING_NAME, STAGING_OBJECTS).await;
    apply(&client, STAGING_CLIENT).await.unwrap();

    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client.clone(), STAGING_CLAIMS);
    let finished = wait_for(&pods, "client", STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await;
    let finished = match finished {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{e}; events: {:#?}; {}",
            event_lines(&client, STAGING_CLAIMS, "client").await,
            diagnosis(&client, STAGING_CLAIMS, STAGING_NAME).await
        ),
    };
    assert_eq!(pod_phase(&finished), "Succeeded", "{:#?}", finished.status);
    assert_eq!(
        logs(&client, STAGING_CLAIMS, "client")
            .await
            .unwrap()
            .trim(),
        "staged"
    );
    let staged_in: Vec<String> = observer
        .seen()
        .iter()
        .filter(|p| p.pav_phase == "staging")
        .map(|p| p.namespace.clone())
        .collect();
    assert!(
        !staged_in.is_empty() && staged_in.iter().all(|ns| ns == STAGING_PODS),
        "staging pods in {staged_in:?}"
    );

    let node_account = format!("pav-{STAGING_NAME}-node");
    let node = impersonating(PAV_NAMESPACE, &node_account).await;
    assert!(may(&node, Some(STAGING_PODS), "create", "pods").await);
    assert!(!may(&node, Some(STAGING_CLAIMS), "create", "pods").await);
    let bindings =
        |ns: &str| Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), ns);
    assert!(
        bindings(STAGING_PODS)
            .get_opt(&node_account)
            .await
            .unwrap()
            .is_some(),
        "no binding where the staging pods go"
    );

    delete(&client, STAGING_CLIENT).await.unwrap();
    wait_no_pav_pods(&client, STAGING_NAME, STEP).await.unwrap();
    wait_until("the binding gone with the volume", STEP, || async {
        let left = bindings(STAGING_PODS).get_opt(&node_account).await?;
        let volumes = volumes_of(&client, STAGING_NAME).await?;
        match left {
            None => Ok(Some(())),
            Some(_) => anyhow::bail!("binding still there; volumes {volumes:?}"),
        }
    })
    .await
    .unwrap();
    delete(&client, STAGING_OBJECTS).await.unwrap();
    delete_provisioner(&client, STAGING_NAME, STEP)
        .await
        .unwrap();
    assert_no_leaks(&client, STAGING_NAME, Duration::from_secs(120)).await;
    eprintln!(
        "the_node_plugin_is_bound_where_a_template_puts_its_pods: {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
