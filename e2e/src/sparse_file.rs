//! examples/sparse-file deployed from examples/sparse-file/deploy/, for the
//! scenarios that run it with the standard sidecars, and the client pods
//! they mount its claims with.

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::example_driver::ExampleDriver;
use crate::{STEP, apply, event_lines, logs, pod_phase, wait_for};

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

/// The driver as its deploy directory installs it.
pub const EXAMPLE: ExampleDriver = ExampleDriver {
    example: "sparse-file",
    driver: DRIVER,
    namespace: DRIVER_NS,
};

/// One file of examples/sparse-file/deploy/.
pub fn deploy_file(file: &str) -> String {
    EXAMPLE.deploy_file(file)
}

/// [`ExampleDriver::install`] of `files`.
pub async fn install(client: &Client, files: &[&str]) {
    EXAMPLE.install(client, files).await;
}

/// [`ExampleDriver::uninstall`] of `files`.
pub async fn uninstall(client: &Client, files: &[&str]) {
    EXAMPLE.uninstall(client, files).await;
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
