//! Server-side applying and deleting the objects of a provisioner's driver.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Resource};
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

/// Server-side applies every object of a driver; returns the Deployment
/// and DaemonSet as the API server has them (with status).
pub(super) async fn apply_driver(
    client: &Client,
    ns: &str,
    objects: &DriverObjects,
) -> Result<(Deployment, DaemonSet), Error> {
    apply_one(&Api::<CSIDriver>::all(client.clone()), &objects.csi_driver).await?;
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    for account in &objects.service_accounts {
        apply_one(&accounts, account).await?;
    }
    let cluster_bindings = Api::<ClusterRoleBinding>::all(client.clone());
    for binding in &objects.cluster_role_bindings {
        apply_binding(&cluster_bindings, binding).await?;
    }
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns);
    for binding in &objects.role_bindings {
        apply_binding(&bindings, binding).await?;
    }
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
    Ok((deployment, daemon_set))
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
