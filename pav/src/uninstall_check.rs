//! `pav uninstall-check`: the Helm chart's `pre-delete` hook, which makes
//! `helm uninstall` refuse while PavProvisioners its controller serves
//! exist.
//!
//! Uninstalling the release deletes the ClusterRoles every driver is bound
//! to and the controller whose finalizer ([`FINALIZER`]) deletes a
//! PavProvisioner's driver. The CRD stays on purpose (deleting it would
//! delete every PavProvisioner), so a PavProvisioner left behind keeps a
//! driver that runs with roles that no longer exist, and deleting it later
//! hangs on a finalizer no controller removes. The check lists the
//! PavProvisioners the release's controller reconciles (its `--selector`,
//! all without one), being deleted or not, and refuses with a message that
//! names each and the `kubectl delete` that removes them while the
//! controller still runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kube::api::{ListParams, PartialObjectMeta};
use kube::{Api, Client, ResourceExt as _};
use pav_templates::PavProvisioner;

use crate::operator::FINALIZER;

/// Flags of `pav uninstall-check`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// The label selector of the controller being uninstalled (its
    /// `--selector`): only the PavProvisioners it reconciles keep it
    /// (default: all).
    #[arg(long, env = "PAV_SELECTOR")]
    pub selector: Option<String>,
    /// A file to write the outcome to as well: the container's termination
    /// message (`/dev/termination-log`), which `kubectl describe pod`
    /// shows where Helm only says that the hook's Job failed.
    #[arg(long)]
    pub termination_message_path: Option<PathBuf>,
}

/// Why an uninstall must wait: the PavProvisioners the controller still
/// serves. Its `Display` is the message the user reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The selector they were listed with (`None`: every PavProvisioner).
    pub selector: Option<String>,
    /// Their names, sorted.
    pub provisioners: Vec<String>,
    /// Those already being deleted (a subset): their finalizer waits for
    /// their volumes, claims, staged volumes or snapshots to go.
    pub deleting: Vec<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let served = match &self.selector {
            Some(selector) => {
                format!(
                    "with labels {selector}, which this release's controller serves, still exist"
                )
            }
            None => {
                "still exist, and this release's controller serves every one (it has no selector)"
                    .to_owned()
            }
        };
        writeln!(
            f,
            "uninstall refused: {} PavProvisioner(s) {served}. \
             Uninstalling now would delete the ClusterRoles their drivers run with and \
             the controller their finalizer {FINALIZER} needs, leaving them stuck. \
             Delete them first, while the controller runs:",
            self.provisioners.len()
        )?;
        writeln!(
            f,
            "  kubectl delete pavprovisioners {}",
            self.provisioners.join(" ")
        )?;
        for name in &self.deleting {
            writeln!(
                f,
                "PavProvisioner {name} is being deleted already: it waits until its volumes, \
                 claims and snapshots are gone (kubectl describe pavprovisioner {name} says which)."
            )?;
        }
        write!(
            f,
            "kubectl waits until each one is gone; then run helm uninstall again."
        )
    }
}

/// Lists the PavProvisioners `selector` selects (all without one): a
/// [`Refusal`] naming them, or `None` when there are none, the CRD
/// included (a cluster without it has nothing to strand). Needs only
/// `list` on PavProvisioners, what the hook's ClusterRole grants.
pub async fn check(client: Client, selector: Option<&str>) -> kube::Result<Option<Refusal>> {
    let api: Api<PavProvisioner> = Api::all(client);
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let listed: Vec<PartialObjectMeta<PavProvisioner>> = match api.list_metadata(&params).await {
        Ok(list) => list.items,
        // By status code: the message is not a contract.
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(err) => return Err(err),
    };
    if listed.is_empty() {
        return Ok(None);
    }
    let mut provisioners: Vec<String> = listed.iter().map(|p| p.name_any()).collect();
    provisioners.sort();
    let mut deleting: Vec<String> = listed
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .map(|p| p.name_any())
        .collect();
    deleting.sort();
    Ok(Some(Refusal {
        selector: selector.map(str::to_owned),
        provisioners,
        deleting,
    }))
}

/// What keeps `pav uninstall-check` from giving its answer. (A refusal is
/// an answer: exit code 1, not an error.)
#[derive(Debug, thiserror::Error)]
pub enum UninstallCheckError {
    /// No API client: the service account's token or the kubeconfig.
    #[error("connecting to the API server")]
    Client(#[source] kube::Error),
    /// Printing the outcome failed.
    #[error("writing the outcome")]
    Output(#[source] std::io::Error),
    /// The termination message could not be written.
    #[error("writing the termination message to {}", path.display())]
    TerminationMessage {
        /// The file (`--termination-message-path`).
        path: PathBuf,
        /// Why it could not be written.
        #[source]
        source: std::io::Error,
    },
}

/// Runs the check with `client`: writes the outcome to `out` and, with
/// `--termination-message-path`, to that file; exits 1 on a refusal or
/// when the PavProvisioners cannot be listed (an uninstall that cannot
/// tell is refused too: `helm uninstall --no-hooks` skips the check).
pub async fn run_with(
    client: Client,
    args: &Args,
    out: &mut dyn Write,
) -> Result<ExitCode, UninstallCheckError> {
    let (code, message) = match check(client, args.selector.as_deref()).await {
        Ok(None) => (
            ExitCode::SUCCESS,
            "no PavProvisioner is served by this release's controller: the uninstall goes on"
                .to_owned(),
        ),
        Ok(Some(refusal)) => (ExitCode::from(1), refusal.to_string()),
        Err(err) => (
            ExitCode::from(1),
            format!(
                "uninstall refused: cannot list PavProvisioners to tell whether any would be \
                 stranded ({}); fix that and run helm uninstall again, or skip this check \
                 with helm uninstall --no-hooks",
                pav_csi::error_chain(&err)
            ),
        ),
    };
    writeln!(out, "{message}").map_err(UninstallCheckError::Output)?;
    if let Some(path) = &args.termination_message_path {
        write_termination_message(path, &message)?;
    }
    Ok(code)
}

/// Writes `message` to the termination message file `path`. The kubelet
/// keeps at most 4096 bytes of it; the message lists names first, so a
/// long list loses only its tail.
fn write_termination_message(path: &Path, message: &str) -> Result<(), UninstallCheckError> {
    std::fs::write(path, message).map_err(|source| UninstallCheckError::TerminationMessage {
        path: path.to_owned(),
        source,
    })
}

/// `pav uninstall-check`: [`run_with`] with the service account's (or
/// kubeconfig's) client.
pub async fn run(args: Args, out: &mut dyn Write) -> Result<ExitCode, UninstallCheckError> {
    let client = crate::client::client(Default::default(), "uninstall-check")
        .await
        .map_err(UninstallCheckError::Client)?;
    run_with(client, &args, out).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::fixtures::{ApiServer, list, status};
    use http::Method;
    use serde_json::{Value, json};

    const PROVISIONERS: &str = "/apis/pav.albertofaria.github.io/v1alpha1/pavprovisioners";

    /// A PavProvisioner's metadata as the API server lists it.
    fn provisioner(name: &str, deleting: bool) -> Value {
        let mut metadata =
            json!({"name": name, "uid": format!("u-{name}"), "finalizers": [FINALIZER]});
        if deleting {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": metadata,
        })
    }

    /// `pav uninstall-check` with `args` against a fake answering the list
    /// with `answer`: exit code, output, termination message and the
    /// query the list was sent with.
    async fn run_against(
        answer: (u16, Value),
        selector: Option<&str>,
    ) -> (ExitCode, String, String, String) {
        let (server, client) = ApiServer::start();
        server.route(Method::GET, PROVISIONERS, answer);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("termination-log");
        let args = Args {
            selector: selector.map(str::to_owned),
            termination_message_path: Some(path.clone()),
        };
        let mut out = Vec::new();
        let code = run_with(client, &args, &mut out).await.unwrap();
        let requests = server.requests();
        assert_eq!(
            requests.iter().map(|r| r.line()).collect::<Vec<_>>(),
            [format!("GET {PROVISIONERS}")],
            "one list, nothing else"
        );
        (
            code,
            String::from_utf8(out).unwrap(),
            std::fs::read_to_string(&path).unwrap(),
            requests[0].query.clone(),
        )
    }

    #[tokio::test]
    async fn no_provisioner_lets_the_uninstall_go_on() {
        let (code, out, message, query) =
            run_against(list("PartialObjectMetadata", vec![]), None).await;
        assert_eq!(code, ExitCode::SUCCESS, "{out}");
        assert_eq!(out.trim_end(), message);
        assert!(message.contains("the uninstall goes on"), "{message}");
        assert!(!query.contains("labelSelector"), "{query}");
    }

    /// Without the CRD nothing can be stranded.
    #[tokio::test]
    async fn a_cluster_without_the_crd_lets_the_uninstall_go_on() {
        let (code, out, _, _) = run_against(status(404, "NotFound", "not found"), None).await;
        assert_eq!(code, ExitCode::SUCCESS, "{out}");
    }

    #[tokio::test]
    async fn provisioners_refuse_the_uninstall_naming_each_and_the_command() {
        let answer = list(
            "PartialObjectMetadata",
            vec![provisioner("zeta", false), provisioner("alpha", true)],
        );
        let (code, out, message, query) =
            run_against(answer, Some("pav.example.com/canary=true")).await;
        assert_eq!(code, ExitCode::from(1), "{out}");
        // The same message in the log and as the termination message.
        assert_eq!(out.trim_end(), message);
        assert!(
            query.contains("labelSelector=pav.example.com%2Fcanary%3Dtrue"),
            "the controller's selector must choose the provisioners: {query}"
        );
        assert_eq!(
            message,
            "uninstall refused: 2 PavProvisioner(s) with labels pav.example.com/canary=true, \
             which this release's controller serves, still exist. Uninstalling now would \
             delete the ClusterRoles their drivers run with and the controller their \
             finalizer pav.albertofaria.github.io/cleanup needs, leaving them stuck. Delete \
             them first, while the controller runs:\n  \
             kubectl delete pavprovisioners alpha zeta\n\
             PavProvisioner alpha is being deleted already: it waits until its volumes, \
             claims and snapshots are gone (kubectl describe pavprovisioner alpha says which).\n\
             kubectl waits until each one is gone; then run helm uninstall again."
        );
    }

    #[tokio::test]
    async fn without_a_selector_every_provisioner_counts() {
        let answer = list("PartialObjectMetadata", vec![provisioner("hello", false)]);
        let (code, _, message, _) = run_against(answer, None).await;
        assert_eq!(code, ExitCode::from(1));
        assert!(
            message.contains(
                "1 PavProvisioner(s) still exist, and this release's controller serves every one"
            ) && message.contains("kubectl delete pavprovisioners hello\n")
                && !message.contains("being deleted"),
            "{message}"
        );
    }

    /// A check that cannot list refuses too, and says how to skip it.
    #[tokio::test]
    async fn a_failed_list_refuses_and_says_why() {
        let answer = status(403, "Forbidden", "pavprovisioners is forbidden: no list");
        let (code, _, message, _) = run_against(answer, None).await;
        assert_eq!(code, ExitCode::from(1));
        assert!(
            message.contains("cannot list PavProvisioners")
                && message.contains("pavprovisioners is forbidden: no list")
                && message.contains("helm uninstall --no-hooks"),
            "{message}"
        );
    }
}
