//! The claim behind a `CreateVolume`, completed from the API server
//! (feature `kube`): labels, annotations and selected node, which the CSI
//! request does not carry.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use pav_sdk::Claim;
use tonic::Code;

/// The annotation the scheduler sets on a `WaitForFirstConsumer` claim.
pub(crate) const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The API client claims are read with; `kube::Client` has no `Debug`.
#[derive(Clone)]
pub(crate) struct ClaimLookup(pub(crate) kube::Client);

impl std::fmt::Debug for ClaimLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClaimLookup")
    }
}

/// Why a claim could not be completed, naming it
/// (`PersistentVolumeClaim <namespace>/<name>`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimError {
    /// The API server did not answer (`UNAVAILABLE`: external-provisioner
    /// retries). kube's error is printed as it prints itself (its own
    /// sources are not added).
    #[error("reading {claim}: {error}")]
    Unreachable { claim: String, error: kube::Error },
    /// The claim is gone (`FAILED_PRECONDITION`: final, there is nothing
    /// left to provision for).
    #[error("{claim} does not exist")]
    Gone { claim: String },
}

impl ClaimError {
    /// The code of a `CreateVolume` that failed for it.
    pub(crate) fn code(&self) -> Code {
        match self {
            ClaimError::Unreachable { .. } => Code::Unavailable,
            ClaimError::Gone { .. } => Code::FailedPrecondition,
        }
    }
}

/// Fills `claim`'s labels, annotations and selected node from the claim
/// object.
pub(crate) async fn complete(client: &kube::Client, claim: &mut Claim) -> Result<(), ClaimError> {
    let api = kube::Api::<PersistentVolumeClaim>::namespaced(client.clone(), &claim.namespace);
    let what = format!("PersistentVolumeClaim {}/{}", claim.namespace, claim.name);
    let pvc = api
        .get_opt(&claim.name)
        .await
        .map_err(|error| ClaimError::Unreachable {
            claim: what.clone(),
            error,
        })?
        .ok_or(ClaimError::Gone { claim: what })?;
    claim.labels = pvc.metadata.labels.unwrap_or_default();
    claim.annotations = pvc.metadata.annotations.unwrap_or_default();
    claim.selected_node = claim.annotations.get(SELECTED_NODE).cloned();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response, StatusCode};
    use kube::client::Body;

    /// A client whose API server answers every GET with `status` and `body`,
    /// recording the paths asked for.
    fn client(status: StatusCode, body: &'static str) -> kube::Client {
        let service = tower::service_fn(move |req: Request<Body>| async move {
            assert_eq!(
                req.uri().path(),
                "/api/v1/namespaces/apps/persistentvolumeclaims/data"
            );
            let mut response = Response::new(Body::from(body.as_bytes().to_vec()));
            *response.status_mut() = status;
            Ok::<_, std::convert::Infallible>(response)
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn labels_annotations_and_selected_node_come_from_the_claim() {
        let body = r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim",
            "metadata":{"name":"data","namespace":"apps","labels":{"tier":"db"},
            "annotations":{"volume.kubernetes.io/selected-node":"node-3","note":"x"}}}"#;
        let mut claim = Claim::new("apps", "data");
        complete(&client(StatusCode::OK, body), &mut claim)
            .await
            .unwrap();
        assert_eq!(claim.labels.get("tier").map(String::as_str), Some("db"));
        assert_eq!(claim.annotations.len(), 2);
        assert_eq!(claim.selected_node.as_deref(), Some("node-3"));
    }

    #[tokio::test]
    async fn a_missing_claim_is_final_and_a_failing_server_is_retried() {
        let gone = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"not found"}"#;
        let mut claim = Claim::new("apps", "data");
        let status = complete(&client(StatusCode::NOT_FOUND, gone), &mut claim)
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        let broken = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500,"message":"boom"}"#;
        let status = complete(
            &client(StatusCode::INTERNAL_SERVER_ERROR, broken),
            &mut claim,
        )
        .await
        .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
    }
}
