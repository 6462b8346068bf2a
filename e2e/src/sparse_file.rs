//! examples/sparse-file deployed from examples/sparse-file/deploy/, for the
//! scenarios that run it with the standard sidecars, and the client pods
//! they mount its claims with.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{Api, Client};

use crate::{
    STEP, apply, delete, event_lines, logs, pod_phase, volumes_of, wait_driver_registered,
    wait_for, wait_gone, wait_until,
};

/// The driver's name, as its StorageClasses name it.
pub const DRIVER: &str = "sparse-file.pav.example.com";
/// Namespace of the driver's controller and node plugin.
pub const DRIVER_NS: &str = "sparse-file";
/// Where the driver keeps volume and snapshot images on the node.
pub const VOLUMES_DIR: &str = "/var/lib/sparse-file";

/// The names of the driver's files on the node (volume and snapshot
/// images, group manifests), sorted.
pub fn files_on_node() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(VOLUMES_DIR)
        .map(|dir| {
            dir.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// One file of examples/sparse-file/deploy/.
pub fn deploy_file(file: &str) -> String {
    crate::example_file("sparse-file", &format!("deploy/{file}"))
}

/// Applies `files` of the deploy directory (driver.yaml first) and waits
/// until the controller is available, the node plugin ready on every node
/// and the driver registered with the kubelet.
pub async fn install(client: &Client, files: &[&str]) {
    for file in files {
        apply(client, &deploy_file(file)).await.unwrap();
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), DRIVER_NS);
    wait_for(
        &deployments,
        "sparse-file-controller",
        STEP,
        "available",
        |d| d.status.as_ref().and_then(|s| s.available_replicas) >= Some(1),
    )
    .await
    .unwrap();
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), DRIVER_NS);
    wait_for(&daemon_sets, "sparse-file-node", STEP, "ready", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.desired_number_scheduled > 0 && s.number_ready == s.desired_number_scheduled
        })
    })
    .await
    .unwrap();
    wait_driver_registered(client, DRIVER, STEP).await.unwrap();
}

/// Removes what `files` of the deploy directory made (the driver's
/// namespace with its pods, the CSIDriver, RBAC, classes), waiting until
/// its pods are gone, so the next install runs the image just loaded under
/// the same name. First waits until no PersistentVolume of the driver is
/// left: a claim's deletion ends with external-provisioner removing the
/// volume after DeleteVolume, which an uninstalled driver never would (a
/// scenario once saw its image deleted and the volume left).
pub async fn uninstall(client: &Client, files: &[&str]) {
    wait_until("the driver's volumes gone before it is", STEP, || async {
        let left = volumes_of(client, DRIVER).await?;
        match left.is_empty() {
            true => Ok(Some(())),
            false => anyhow::bail!("volumes left: {left:?}"),
        }
    })
    .await
    .unwrap();
    for file in files.iter().rev() {
        delete(client, &deploy_file(file)).await.unwrap();
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_gone(&namespaces, DRIVER_NS, STEP).await.unwrap();
}

/// A busybox pod in `namespace` that runs `script` with claim `claim`
/// mounted at /data.
pub fn client_pod(namespace: &str, name: &str, claim: &str, script: &str) -> String {
    client_pod_with(namespace, name, &[(claim, "/data")], script)
}

/// A busybox pod in `namespace` that runs `script` with each claim of
/// `mounts` (`(claim, path)`) mounted at its path: volume `data` for the
/// first, `data-1`, `data-2`, ... for the others.
pub fn client_pod_with(
    namespace: &str,
    name: &str,
    mounts: &[(&str, &str)],
    script: &str,
) -> String {
    let volume = |i: usize| {
        if i == 0 {
            "data".to_string()
        } else {
            format!("data-{i}")
        }
    };
    let mut volume_mounts = String::new();
    let mut volumes = String::new();
    for (i, (claim, path)) in mounts.iter().enumerate() {
        let volume = volume(i);
        volume_mounts.push_str(&format!(
            "        - {{ name: {volume}, mountPath: {path} }}\n"
        ));
        volumes.push_str(&format!(
            "    - name: {volume}\n      persistentVolumeClaim: {{ claimName: {claim} }}\n"
        ));
    }
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: busybox:stable
      imagePullPolicy: IfNotPresent
      command: [sh, -c, {script:?}]
      volumeMounts:
{volume_mounts}  volumes:
{volumes}"#
    )
}

/// Runs [`client_pod`] to completion, asserts it succeeded, deletes it and
/// returns its output.
pub async fn run_client(
    client: &Client,
    namespace: &str,
    name: &str,
    claim: &str,
    script: &str,
) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    apply(client, &client_pod(namespace, name, claim, script))
        .await
        .unwrap();
    let done = wait_for(&pods, name, STEP, "finished", |p| {
        matches!(pod_phase(p), "Succeeded" | "Failed")
    })
    .await;
    let pod = match done {
        Ok(pod) => pod,
        Err(e) => panic!(
            "{e}; events: {:#?}",
            event_lines(client, namespace, name).await
        ),
    };
    let output = logs(client, namespace, name).await.unwrap();
    assert_eq!(
        pod_phase(&pod),
        "Succeeded",
        "{name}: {output}; events: {:#?}",
        event_lines(client, namespace, name).await
    );
    crate::delete_and_wait(&pods, name, STEP).await.unwrap();
    output
}
