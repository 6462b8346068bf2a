//! The namespaces a driver's node plugin needs pods in beyond those its
//! spec names ([`NodePodNamespaces::fixed`]): where templates put its node
//! phases' pods, volume by volume, and where pods of volumes it staged
//! already are (they must be unstaged there, whatever the spec says now).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::{Api, Client, ResourceExt as _};
use pav_templates::{CompiledProvisioner, PavProvisioner, Phase, StagingContext};
use serde_json::Value;

use super::Error;
use crate::manifests::driver::NodePodNamespaces;
use crate::pods::ANNOTATION_UNSTAGING;

/// Templated namespaces as evaluated, per volume UID and provisioner
/// generation: a volume's claim and parameters are set when it is made,
/// so its pods' namespaces change only with the spec.
#[derive(Debug, Default)]
pub(super) struct Evaluations(Mutex<HashMap<(String, i64), BTreeSet<String>>>);

impl Evaluations {
    fn cached(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i64), BTreeSet<String>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every namespace provisioner `p`'s node plugin needs pods in besides
    /// `spec_namespaces.fixed`: its templated node phases rendered for each
    /// of its `volumes` (name, UID), and the namespaces of its staging pods
    /// and of the unstaging pods they recorded.
    pub(super) async fn namespaces(
        &self,
        client: &Client,
        p: &PavProvisioner,
        spec_namespaces: &NodePodNamespaces,
        volumes: &[(String, String)],
        default_namespace: &str,
    ) -> Result<BTreeSet<String>, Error> {
        let mut namespaces = staged_namespaces(client, &p.name_any(), default_namespace).await?;
        if spec_namespaces.templated.is_empty() {
            return Ok(namespaces);
        }
        let Ok(compiled) = CompiledProvisioner::new(p) else {
            return Ok(namespaces);
        };
        let generation = p.metadata.generation.unwrap_or_default();
        let alive: BTreeSet<&String> = volumes.iter().map(|(_, uid)| uid).collect();
        self.cached()
            .retain(|(uid, g), _| *g == generation && alive.contains(uid));
        for (name, uid) in volumes {
            let key = (uid.clone(), generation);
            if let Some(known) = self.cached().get(&key) {
                namespaces.extend(known.iter().cloned());
                continue;
            }
            let Some(evaluated) = evaluate(
                client,
                &compiled,
                &spec_namespaces.templated,
                name,
                default_namespace,
            )
            .await?
            else {
                continue;
            };
            namespaces.extend(evaluated.iter().cloned());
            self.cached().insert(key, evaluated);
        }
        Ok(namespaces)
    }
}

/// Renders `phases` for volume `name` as its node plugin would stage it
/// (with its claim and PersistentVolume; the node is not known here, so a
/// namespace must not depend on it) and reads their pods' namespaces; a
/// phase that does not render puts its pod in the claim's namespace, the
/// most a template without the node could mean. `None` for a volume that
/// is gone or not bound to a claim yet (nothing stages it), or that the
/// controller may not read.
async fn evaluate(
    client: &Client,
    compiled: &CompiledProvisioner,
    phases: &[Phase],
    name: &str,
    default_namespace: &str,
) -> Result<Option<BTreeSet<String>>, Error> {
    let Some(pv) = readable(
        Api::<PersistentVolume>::all(client.clone())
            .get_opt(name)
            .await,
    )?
    else {
        return Ok(None);
    };
    let Some(claim) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(None);
    };
    let (Some(claim_namespace), Some(claim_name)) = (&claim.namespace, &claim.name) else {
        return Ok(None);
    };
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), claim_namespace);
    let Some(pvc) = readable(claims.get_opt(claim_name).await)? else {
        return Ok(None);
    };
    let node = Node {
        metadata: kube::api::ObjectMeta {
            name: Some(String::new()),
            ..Default::default()
        },
        ..Default::default()
    };
    let context = match StagingContext::new(&pvc, &pv, &node, false) {
        Ok(context) => context,
        Err(e) => {
            tracing::warn!(volume = name, error = %e, "no staging context to evaluate its pods' namespace: the claim's namespace is assumed");
            return Ok(Some(BTreeSet::from([claim_namespace.clone()])));
        }
    };
    let mut namespaces = BTreeSet::new();
    for phase in phases {
        let namespace = match compiled.render_raw(*phase, context.value()) {
            Ok(rendered) => pod_namespace(&rendered["podTemplate"], default_namespace),
            Err(e) => {
                tracing::warn!(volume = name, phase = phase.name(), error = %e, "its pods' namespace does not render without the node: the claim's namespace is assumed");
                Some(claim_namespace.clone())
            }
        };
        namespaces.extend(namespace);
    }
    Ok(Some(namespaces))
}

/// `found`, or `None` when the controller may not read it: RBAC older
/// than this image, whose node plugins may make pods in every namespace
/// anyway, so nothing needs evaluating.
fn readable<K>(found: kube::Result<Option<K>>) -> Result<Option<K>, Error> {
    match found {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::warn!(error = %status.message, "cannot read a volume or claim to render its node pods' namespace");
            Ok(None)
        }
        found => Ok(found?),
    }
}

/// The namespace of a pod built from `template` (a rendered
/// `podTemplate`): its own, else the default; none without a template.
fn pod_namespace(template: &Value, default_namespace: &str) -> Option<String> {
    if !template.is_object() {
        return None;
    }
    let named = template["metadata"]["namespace"].as_str();
    Some(crate::pods::namespace_of(named, default_namespace))
}

/// The namespaces of provisioner `name`'s staging pods and of the
/// unstaging pods they recorded: unstaging happens there, even after the
/// volume (and its evaluation) is gone or the spec moved its pods.
async fn staged_namespaces(
    client: &Client,
    name: &str,
    default_namespace: &str,
) -> Result<BTreeSet<String>, Error> {
    let mut namespaces = BTreeSet::new();
    for pod in &super::in_use::staging_pods(client, name).await? {
        namespaces.extend(pod.namespace());
        let unstaging = pod.annotations().get(ANNOTATION_UNSTAGING);
        if let Some(template) = unstaging.and_then(|json| serde_json::from_str::<Value>(json).ok())
        {
            namespaces.extend(pod_namespace(&template, default_namespace));
        }
    }
    Ok(namespaces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_goes_to_its_templates_namespace_else_the_default() {
        let named = serde_json::json!({"metadata": {"namespace": "storage"}, "spec": {}});
        assert_eq!(pod_namespace(&named, "pav").as_deref(), Some("storage"));
        let unnamed = serde_json::json!({"metadata": {"namespace": ""}, "spec": {}});
        assert_eq!(pod_namespace(&unnamed, "pav").as_deref(), Some("pav"));
        assert_eq!(
            pod_namespace(&serde_json::json!({"spec": {}}), "pav").as_deref(),
            Some("pav")
        );
        assert_eq!(pod_namespace(&Value::Null, "pav"), None, "no pod");
    }
}
