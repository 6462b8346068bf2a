//! An example driver deployed from its `deploy/` directory (a controller
//! Deployment `<example>-controller`, a node plugin DaemonSet
//! `<example>-node`, in a namespace of its own): installed and removed
//! the same way for every example the scenarios run.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

use crate::{
    STEP, apply, delete, volumes_of, wait_driver_registered, wait_for, wait_gone, wait_until,
};

/// An example's driver and where its deploy directory puts it.
#[derive(Debug, Clone, Copy)]
pub struct ExampleDriver {
    /// The directory under examples/.
    pub example: &'static str,
    /// The driver's name, as its StorageClasses name it.
    pub driver: &'static str,
    /// Namespace of the driver's controller and node plugin.
    pub namespace: &'static str,
}

impl ExampleDriver {
    /// One file of the example's deploy/ directory.
    pub fn deploy_file(&self, file: &str) -> String {
        crate::example_file(self.example, &format!("deploy/{file}"))
    }

    /// Applies `files` of the deploy directory (driver.yaml first) and
    /// waits until the controller is available, the node plugin ready on
    /// every node and the driver registered with the kubelet.
    pub async fn install(&self, client: &Client, files: &[&str]) {
        for file in files {
            apply(client, &self.deploy_file(file)).await.unwrap();
        }
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), self.namespace);
        let controller = format!("{}-controller", self.example);
        wait_for(&deployments, &controller, STEP, "available", |d| {
            d.status.as_ref().and_then(|s| s.available_replicas) >= Some(1)
        })
        .await
        .unwrap();
        let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), self.namespace);
        let node = format!("{}-node", self.example);
        wait_for(&daemon_sets, &node, STEP, "ready", |d| {
            d.status.as_ref().is_some_and(|s| {
                s.desired_number_scheduled > 0 && s.number_ready == s.desired_number_scheduled
            })
        })
        .await
        .unwrap();
        wait_driver_registered(client, self.driver, STEP)
            .await
            .unwrap();
    }

    /// Removes what `files` of the deploy directory made (the driver's
    /// namespace with its pods, the CSIDriver, RBAC, classes), waiting
    /// until its pods are gone, so the next install runs the image just
    /// loaded under the same name. First waits until no
    /// PersistentVolume of the driver is left: a claim's deletion ends
    /// with external-provisioner removing the volume after DeleteVolume,
    /// which an uninstalled driver never would (a scenario once saw its
    /// image deleted and the volume left).
    pub async fn uninstall(&self, client: &Client, files: &[&str]) {
        wait_until("the driver's volumes gone before it is", STEP, || async {
            let left = volumes_of(client, self.driver).await?;
            match left.is_empty() {
                true => Ok(Some(())),
                false => anyhow::bail!("volumes left: {left:?}"),
            }
        })
        .await
        .unwrap();
        for file in files.iter().rev() {
            delete(client, &self.deploy_file(file)).await.unwrap();
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        wait_gone(&namespaces, self.namespace, STEP).await.unwrap();
    }
}
