//! Server-side applying and deleting the objects of a provisioner's driver.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Error;
use crate::manifests::FIELD_MANAGER;
use crate::manifests::driver::{self, DriverObjects};

pub(super) async fn apply_one<K>(api: &Api<K>, object: &K) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    Ok(api.patch(&name, &params, &Patch::Apply(object)).await?)
}

/// [`apply_one`] for a role binding, replacing one that refers to another
/// role: the API server refuses to change `roleRef` (422, Invalid), and
/// drivers created before `pav manifests` installed the shared roles have
/// bindings to roles of their own. Whether the roleRef is the trouble is
/// read from the existing binding, not from the refusal's message.
pub(super) async fn apply_binding<K>(api: &Api<K>, binding: &K) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match apply_one(api, binding).await {
        Err(Error::Kube(kube::Error::Api(status))) if status.code == 422 => {
            let name = binding.meta().name.clone().unwrap_or_default();
            let existing = api.get_opt(&name).await?;
            if existing.is_none_or(|existing| role_ref(&existing) == role_ref(binding)) {
                return Err(Error::Kube(kube::Error::Api(status)));
            }
            tracing::info!(binding = %name, "replacing a binding to another role");
            delete_named(api, &name).await?;
            apply_one(api, binding).await
        }
        applied => applied,
    }
}

/// The `roleRef` of a RoleBinding or ClusterRoleBinding.
pub(super) fn role_ref<K: Serialize>(binding: &K) -> serde_json::Value {
    serde_json::to_value(binding)
        .map(|mut value| value["roleRef"].take())
        .unwrap_or_default()
}

/// What applying a driver gave: its Deployment and DaemonSet as the API
/// server has them (with status), and the objects the controller was
/// forbidden to apply ([`unless_forbidden`]).
#[derive(Debug, Clone)]
pub(super) struct Applied {
    pub(super) deployment: Deployment,
    pub(super) daemon_set: DaemonSet,
    pub(super) forbidden: Vec<String>,
}

/// Server-side applies every object of a driver.
pub(super) async fn apply_driver(
    client: &Client,
    ns: &str,
    objects: &DriverObjects,
) -> Result<Applied, Error> {
    apply_one(&Api::<CSIDriver>::all(client.clone()), &objects.csi_driver).await?;
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    for account in &objects.service_accounts {
        apply_one(&accounts, account).await?;
    }
    let cluster_bindings = Api::<ClusterRoleBinding>::all(client.clone());
    for binding in &objects.cluster_role_bindings {
        apply_binding(&cluster_bindings, binding).await?;
    }
    let mut forbidden = Vec::new();
    for binding in &objects.role_bindings {
        let namespace = binding.metadata.namespace.as_deref().unwrap_or(ns);
        let bindings = Api::<RoleBinding>::namespaced(client.clone(), namespace);
        let applied = role_missing_as_forbidden(apply_binding(&bindings, binding).await, binding);
        forbidden.extend(unless_forbidden(applied, || described(binding))?);
    }
    let pruned = prune_node_bindings(
        client,
        &objects.csi_driver.name_any(),
        &objects.role_bindings,
    )
    .await;
    forbidden.extend(unless_forbidden(pruned, stale_node_bindings)?);
    let deployment = apply_one(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        &objects.deployment,
    )
    .await?;
    let daemon_set = apply_one(
        &Api::<DaemonSet>::namespaced(client.clone(), ns),
        &objects.daemon_set,
    )
    .await?;
    let budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns);
    let applied = apply_one(&budgets, &objects.disruption_budget).await;
    forbidden.extend(unless_forbidden(applied, || {
        described(&objects.disruption_budget)
    })?);
    Ok(Applied {
        deployment,
        daemon_set,
        forbidden,
    })
}

/// What applying `object` gave, for an object the driver works without
/// and that the controller's RBAC may not grant yet: a newer controller
/// image under an older chart's or `pav manifests`' roles, until they are
/// upgraded. Forbidden (403), it names the object (`None` when it
/// succeeded) instead of failing the driver; not a 403 for a namespace
/// being deleted, which no upgrade mends.
fn unless_forbidden<T>(
    result: Result<T, Error>,
    what: impl FnOnce() -> String,
) -> Result<Option<String>, Error> {
    match result {
        Ok(_) => Ok(None),
        Err(Error::Kube(kube::Error::Api(status)))
            if status.code == 403 && !status.message.contains("being terminated") =>
        {
            let what = what();
            tracing::warn!(object = %what, error = %status.message, "forbidden");
            Ok(Some(what))
        }
        Err(e) => Err(e),
    }
}

/// A binding's role not found (404, naming the role) as the 403 it means:
/// an installation older than the controller image has no such role yet.
fn role_missing_as_forbidden<K>(
    applied: Result<K, Error>,
    binding: &RoleBinding,
) -> Result<K, Error> {
    match applied {
        Err(Error::Kube(kube::Error::Api(mut status)))
            if status.code == 404
                && status
                    .details
                    .as_ref()
                    .is_some_and(|d| d.name == binding.role_ref.name) =>
        {
            status.code = 403;
            status.message = format!(
                "ClusterRole {} not found: {}",
                binding.role_ref.name, status.message
            );
            Err(Error::Kube(kube::Error::Api(status)))
        }
        applied => applied,
    }
}

/// `Kind namespace/name` of `object`.
fn described<K: Resource<DynamicType = ()>>(object: &K) -> String {
    match &object.meta().namespace {
        Some(ns) => format!("{} {ns}/{}", K::kind(&()), object.name_any()),
        None => format!("{} {}", K::kind(&()), object.name_any()),
    }
}

fn stale_node_bindings() -> String {
    "the node plugin's RoleBindings where its pods no longer go (list, delete)".to_owned()
}

/// Deletes the node plugin's RoleBindings of driver `name` in namespaces
/// none of `kept` is in: its pods no longer go there.
async fn prune_node_bindings(
    client: &Client,
    name: &str,
    kept: &[RoleBinding],
) -> Result<(), Error> {
    let bound = node_bindings(client, name).await?;
    for binding in bound.iter().filter(|b| {
        !kept.iter().any(|k| {
            k.metadata.namespace == b.metadata.namespace && k.metadata.name == b.metadata.name
        })
    }) {
        let namespace = binding.metadata.namespace.as_deref().unwrap_or_default();
        tracing::info!(binding = %binding.name_any(), namespace, "its node plugin's pods no longer go there: deleting the binding");
        delete_named(
            &Api::<RoleBinding>::namespaced(client.clone(), namespace),
            &binding.name_any(),
        )
        .await?;
    }
    Ok(())
}

/// The node plugin's RoleBindings of driver `name`, in every namespace.
async fn node_bindings(client: &Client, name: &str) -> Result<Vec<RoleBinding>, Error> {
    let selector = format!(
        "{},{}=csi-node",
        driver::selector(name),
        crate::manifests::LABEL_COMPONENT
    );
    Ok(Api::<RoleBinding>::all(client.clone())
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
        .items)
}

pub(super) async fn delete_named<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Deletes every object of a provisioner's driver (namespaced ones too,
/// rather than waiting for the garbage collector).
pub(super) async fn delete_driver(client: &Client, ns: &str, name: &str) -> Result<(), Error> {
    let controller = driver::controller_name(name);
    let node = driver::node_name(name);
    delete_named(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        &controller,
    )
    .await?;
    delete_named(&Api::<DaemonSet>::namespaced(client.clone(), ns), &node).await?;
    delete_named(
        &Api::<RoleBinding>::namespaced(client.clone(), ns),
        &controller,
    )
    .await?;
    // Forbidden under an older controller's RBAC, which never made them
    // either; the garbage collector takes them otherwise.
    let budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns);
    unless_forbidden(delete_named(&budgets, &controller).await, String::new)?;
    unless_forbidden(prune_node_bindings(client, name, &[]).await, String::new)?;
    for account in [&controller, &node] {
        delete_named(
            &Api::<ServiceAccount>::namespaced(client.clone(), ns),
            account,
        )
        .await?;
        delete_named(&Api::<ClusterRoleBinding>::all(client.clone()), account).await?;
    }
    delete_named(&Api::<CSIDriver>::all(client.clone()), name).await?;
    Ok(())
}
