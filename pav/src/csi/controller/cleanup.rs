//! The validation and creation pods of claims that no longer need them:
//! deleted once the claim is bound or gone, and by a sweep at startup.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::{Api, ResourceExt};
use pav_templates::Phase;

use crate::csi::context::DriverContext;
use crate::pods::results::PodState;
use crate::pods::{ANNOTATION_CLAIM, LABEL_PHASE, LABEL_VOLUME};

/// The claim's UID label value for cleanup (the claim may be gone: then
/// whatever pods the sweep finds are cleaned up by it).
pub(super) async fn claim_uid_label(
    driver: &DriverContext,
    namespace: &str,
    name: &str,
) -> Option<String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(driver.client.clone(), namespace);
    api.get_opt(name).await.ok().flatten().and_then(|p| p.uid())
}

/// True once a claim is bound to a volume, or when the object is another
/// claim of the same name.
pub(super) fn claim_settled(pvc: &PersistentVolumeClaim, uid: &str) -> bool {
    pvc.uid().as_deref() != Some(uid)
        || pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
}

/// Deletes this provisioner's pods of claim `uid` in `phases`.
pub(super) async fn clean_claim_pods(driver: &DriverContext, uid: &str, phases: &[Phase]) {
    match driver.pods.list(&[(LABEL_VOLUME, uid.to_owned())]).await {
        Ok(pods) => {
            for pod in pods {
                let phase = pod.labels().get(LABEL_PHASE).cloned().unwrap_or_default();
                if phases.iter().any(|p| p.name() == phase)
                    && let Err(e) = driver
                        .pods
                        .delete(&pod.namespace().unwrap_or_default(), &pod.name_any())
                        .await
                {
                    tracing::warn!(pod = %pod.name_any(), error = %pav_csi::error_chain(&e), "cannot delete PaV pod");
                }
            }
        }
        Err(e) => tracing::warn!(error = %pav_csi::error_chain(&e), "cannot list PaV pods"),
    }
}

/// At startup: deletes validation and creation pods whose claim is bound
/// or gone (left by a run that stopped before cleaning up).
pub async fn sweep(driver: Arc<DriverContext>) {
    let pods = match driver.pods.list(&[]).await {
        Ok(pods) => pods,
        Err(e) => {
            tracing::warn!(error = %pav_csi::error_chain(&e), "startup sweep: cannot list PaV pods");
            return;
        }
    };
    for pod in pods {
        let labels = pod.labels();
        let phase = labels.get(LABEL_PHASE).map(String::as_str);
        if !matches!(phase, Some("validation") | Some("creation"))
            || !PodState::of(&pod).is_terminated()
        {
            continue;
        }
        let (Some(uid), Some(claim)) = (
            labels.get(LABEL_VOLUME).cloned(),
            pod.annotations().get(ANNOTATION_CLAIM).cloned(),
        ) else {
            continue;
        };
        let Some((namespace, name)) = crate::pods::parse_claim(&claim) else {
            continue;
        };
        let api: Api<PersistentVolumeClaim> = Api::namespaced(driver.client.clone(), namespace);
        let settled = match api.get_opt(name).await {
            Ok(None) => true,
            Ok(Some(pvc)) => claim_settled(&pvc, &uid),
            Err(_) => false,
        };
        if settled {
            tracing::info!(pod = %pod.name_any(), "startup sweep: deleting a finished PaV pod");
            let _ = driver
                .pods
                .delete(&pod.namespace().unwrap_or_default(), &pod.name_any())
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;

    #[test]
    fn settled_claims() {
        let mut pvc = PersistentVolumeClaim::default();
        pvc.metadata.uid = Some("u-1".into());
        assert!(!claim_settled(&pvc, "u-1"));
        assert!(claim_settled(&pvc, "u-2"));
        pvc.spec = Some(PersistentVolumeClaimSpec {
            volume_name: Some("pvc-u-1".into()),
            ..Default::default()
        });
        assert!(claim_settled(&pvc, "u-1"));
    }
}
