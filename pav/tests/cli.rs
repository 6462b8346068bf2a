//! `pav check`, `pav render` and `pav crd`, run as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn pav(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pav"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("pav runs")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

const EXAMPLES: [&str; 4] = [
    "hello-world",
    "cloud-bucket",
    "block-encryption",
    "local-volumes",
];

#[test]
fn check_accepts_every_example() {
    for example in EXAMPLES {
        let path = format!("examples/{example}/provisioner.yaml");
        let output = pav(&["check", &path]);
        assert!(
            output.status.success(),
            "{path}: {}{}",
            stdout(&output),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            stdout(&output),
            format!("{path}: provisioner {example:?} is valid\n")
        );
    }
}

#[test]
fn check_prints_every_problem_with_its_path_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata: {name: bad}\nspec:\n  provisioningModes: [Static]\n  volumeCreation: {capacity: 1Gi}\n  volumeStaging:\n    podTemplate:\n      spec:\n        containers:\n          - args: [\"{{ oops\"]\n",
    )
    .unwrap();
    let output = pav(&["check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].ends_with(
        "bad.yaml: provisioner \"bad\", field spec.volumeCreation: may only be specified if spec.provisioningModes contains Dynamic"
    ));
    assert!(
        lines[1].contains("provisioner \"bad\", field spec.volumeStaging.podTemplate.spec.containers[0].args[0], line 1: template syntax error"),
        "{text}"
    );
}

fn render(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["render"];
    all.extend_from_slice(args);
    let output = pav(&all);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_yaml::from_str(&stdout(&output)).unwrap()
}

#[test]
fn render_works_out_of_the_box_with_sample_objects() {
    let creation = render(&[
        "examples/hello-world/provisioner.yaml",
        "--phase",
        "creation",
    ]);
    assert_eq!(creation["provisioner"], "hello-world");
    assert_eq!(creation["phase"], "creation");
    assert_eq!(creation["evaluated"]["capacity"], 1u64 << 30);
    assert_eq!(creation["pods"], serde_json::json!([]));

    let staging = render(&[
        "examples/hello-world/provisioner.yaml",
        "--phase",
        "staging",
    ]);
    let pod: Pod = serde_json::from_value(staging["pods"][0].clone()).unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("sample-node"));
    assert_eq!(
        spec.containers[0].command.as_ref().unwrap()[2],
        "mkdir -p /pav/volume\nprintf '%s\\n' 'Hello world!' > /pav/volume/greeting"
    );
    assert!(
        spec.volumes
            .unwrap()
            .iter()
            .any(|v| v.name == "pav" && v.host_path.is_some())
    );
}

#[test]
fn render_uses_the_objects_given() {
    let staging = render(&[
        "examples/block-encryption/provisioner.yaml",
        "--phase",
        "staging",
        "--pvc",
        "examples/block-encryption/pvc.yaml",
        "--pv",
        "examples/block-encryption/pv.yaml",
        "--read-only",
    ]);
    let pod: Pod = serde_json::from_value(staging["pods"][0].clone()).unwrap();
    assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
    let spec = pod.spec.unwrap();
    let script = &spec.containers[0].args.as_ref().unwrap()[0];
    assert!(
        script.contains("dev=pvc-5d2c8b1a-9e7f-4a6b-b3c2-1d0e9f8a7b6c\n"),
        "{script}"
    );
    assert!(script.contains("blockdev --setro"), "{script}");
    let volumes = spec.volumes.unwrap();
    assert_eq!(
        volumes[1]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "plain-disk"
    );
    let mounts = spec.containers[0].volume_mounts.as_ref().unwrap();
    let pav_mount = mounts.iter().find(|m| m.mount_path == "/pav").unwrap();
    assert_eq!(
        pav_mount.mount_propagation.as_deref(),
        Some("Bidirectional")
    );

    for phase in ["validation", "creation", "deletion", "unstaging"] {
        let rendered = render(&[
            "examples/block-encryption/provisioner.yaml",
            "--phase",
            phase,
            "--pvc",
            "examples/block-encryption/pvc.yaml",
            "--pv",
            "examples/block-encryption/pv.yaml",
        ]);
        assert_eq!(rendered["phase"], phase);
    }
}

/// The one pod `pav render` prints for a phase of examples/local-volumes,
/// with the example's claim, volume and class.
fn local_volumes_pod(phase: &str) -> Pod {
    let rendered = render(&[
        "examples/local-volumes/provisioner.yaml",
        "--phase",
        phase,
        "--pvc",
        "examples/local-volumes/pvc.yaml",
        "--pv",
        "examples/local-volumes/pv.yaml",
        "--sc",
        "examples/local-volumes/storageclass.yaml",
    ]);
    assert_eq!(rendered["phase"], phase);
    let pods = rendered["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{phase}: {pods:?}");
    serde_json::from_value(pods[0].clone()).unwrap()
}

/// The step the example's script runs (`sh -c SCRIPT local-volumes STEP`)
/// and the value of environment variable `name`, if set literally.
fn step_and_env(pod: &Pod, name: &str) -> (String, Option<String>) {
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let command = container.command.as_ref().unwrap();
    let value = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone());
    (command[4].clone(), value)
}

#[test]
fn render_places_the_local_volumes_pods_on_the_volumes_node() {
    // The example's volume lives on sample-node: its handle says so.
    let handle = "pvc-3f9c2d1e-8b7a-4c6d-9e5f-0a1b2c3d4e5f.sample-node";
    for (phase, step, variable) in [
        ("deletion", "delete", "HANDLE"),
        ("expansion", "expand", "HANDLE"),
        ("snapshot-creation", "snapshot", "SOURCE_HANDLE"),
        ("staging", "stage", "HANDLE"),
        ("unstaging", "unstage", "HANDLE"),
        ("node-expansion", "node-expand", "HANDLE"),
        ("health", "health", "HANDLE"),
        // A group of the one volume.
        (
            "group-snapshot-creation",
            "group-snapshot",
            "SOURCE_HANDLES",
        ),
    ] {
        let pod = local_volumes_pod(phase);
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("sample-node"),
            "{phase}"
        );
        assert_eq!(
            step_and_env(&pod, variable),
            (step.to_owned(), Some(handle.to_owned())),
            "{phase}"
        );
    }
    // Deletion reads the loop devices' backing files (device and inode)
    // to refuse an attached image: privileged, with the node's /dev.
    let pod = local_volumes_pod("deletion");
    let spec = pod.spec.as_ref().unwrap();
    let container = &spec.containers[0];
    assert_eq!(
        container.security_context.as_ref().unwrap().privileged,
        Some(true)
    );
    let dev = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/dev")
        .expect("the node's /dev is mounted");
    let volume = spec.volumes.iter().flatten().find(|v| v.name == dev.name);
    assert_eq!(
        volume
            .and_then(|v| v.host_path.as_ref())
            .map(|h| h.path.as_str()),
        Some("/dev")
    );
    // Node expansion sees the staged volume at /pav/volume, privileged.
    let pod = local_volumes_pod("node-expansion");
    let container = &pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        container.security_context.as_ref().unwrap().privileged,
        Some(true)
    );
    let staged = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/pav/volume")
        .expect("the staged volume is mounted");
    assert_eq!(staged.mount_propagation.as_deref(), Some("HostToContainer"));

    // Creation without a selected node: no nodeName, and the script is
    // told so (it refuses); with one, the pod runs there.
    let pod = local_volumes_pod("creation");
    assert_eq!(pod.spec.as_ref().unwrap().node_name, None);
    assert_eq!(
        step_and_env(&pod, "SELECTED_NODE"),
        ("create".to_owned(), Some(String::new()))
    );
    let dir = tempfile::tempdir().unwrap();
    let claim = dir.path().join("pvc.yaml");
    let example = std::fs::read_to_string(repo_root().join("examples/local-volumes/pvc.yaml"))
        .unwrap()
        .replace(
            "  namespace: default\n",
            "  namespace: default\n  annotations:\n    volume.kubernetes.io/selected-node: node-a\n",
        );
    std::fs::write(&claim, example).unwrap();
    let rendered = render(&[
        "examples/local-volumes/provisioner.yaml",
        "--phase",
        "creation",
        "--pvc",
        claim.to_str().unwrap(),
        "--sc",
        "examples/local-volumes/storageclass.yaml",
    ]);
    let pod: Pod = serde_json::from_value(rendered["pods"][0].clone()).unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-a")
    );
    assert_eq!(
        step_and_env(&pod, "SELECTED_NODE"),
        ("create".to_owned(), Some("node-a".to_owned()))
    );
    assert_eq!(rendered["evaluated"]["capacity"], 64u64 << 20);
}

#[test]
fn render_reports_template_errors_with_the_field() {
    // The encryption example reads claim annotations the claim lacks (a
    // Block claim: its validation refuses the sample Filesystem one first).
    let dir = tempfile::tempdir().unwrap();
    let claim = dir.path().join("claim.yaml");
    std::fs::write(
        &claim,
        "metadata: {name: data, namespace: ns, uid: 5d2c8b1a}\nspec: {volumeMode: Block, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n",
    )
    .unwrap();
    let output = pav(&[
        "render",
        "examples/block-encryption/provisioner.yaml",
        "--phase",
        "creation",
        "--pvc",
        claim.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(
            "error: provisioner \"block-encryption\", field spec.volumeCreation.podTemplate.spec.volumes[0].secret.secretName, line 1:"
        ),
        "{stderr}"
    );
}

#[test]
fn render_refuses_phases_a_static_provisioner_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("static.yaml");
    std::fs::write(
        &path,
        "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata: {name: static-only}\nspec:\n  provisioningModes: [Static]\n  volumeValidation: {podTemplate: {metadata: {name: \"check-{{ handle }}\"}}}\n  volumeStaging: {podTemplate: {}}\n",
    )
    .unwrap();
    let output = pav(&["render", path.to_str().unwrap(), "--phase", "creation"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: PavProvisioner static-only has no creation phase: spec.provisioningModes does not contain Dynamic\n"
    );
    // Validation of a Static-only provisioner uses the static context.
    let validation = render(&[path.to_str().unwrap(), "--phase", "validation"]);
    assert_eq!(
        validation["evaluated"]["podTemplate"]["metadata"]["name"],
        "check-pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21"
    );
}

#[test]
fn render_prints_the_attach_and_detach_pods() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attaching.yaml");
    std::fs::write(
        &path,
        "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata: {name: disks}\nspec:\n  provisioningModes: [Dynamic]\n  volumeCreation: {capacity: 1Gi}\n  volumeStaging: {podTemplate: {}}\n  volumeAttach: {podTemplate: {spec: {nodeName: \"{{ node.metadata.name }}\", containers: [{name: attach, image: a, args: [\"{{ handle }}\"]}]}}}\n  volumeDetach: {}\n",
    )
    .unwrap();
    let attach = render(&[path.to_str().unwrap(), "--phase", "attach"]);
    let pod: Pod = serde_json::from_value(attach["pods"][0].clone()).unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("sample-node"));
    assert_eq!(
        spec.containers[0].args.as_deref(),
        Some(&["pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21".to_owned()][..]),
        "the sample volume's handle"
    );
    let detach = render(&[path.to_str().unwrap(), "--phase", "detach"]);
    assert_eq!(detach["pods"], serde_json::json!([]), "no detach pod");
}

#[test]
fn crd_is_printed_from_the_types() {
    let output = pav(&["crd"]);
    assert!(output.status.success());
    let crd: CustomResourceDefinition = serde_yaml::from_str(&stdout(&output)).unwrap();
    assert_eq!(crd.spec.group, "pav.albertofaria.github.io");
    assert_eq!(crd.spec.names.plural, "pavprovisioners");
    assert_eq!(crd.spec.versions[0].name, "v1alpha1");
}

/// examples/local-volumes' capacity pod runs on the node given, the
/// script's `capacity` step; its modification is templates only, and
/// refuses what the example does not know.
#[test]
fn render_prints_the_capacity_pod_and_the_modification_refusal() {
    let capacity = render(&[
        "examples/local-volumes/provisioner.yaml",
        "--phase",
        "capacity",
    ]);
    assert_eq!(capacity["evaluated"]["cacheFor"], "120s");
    let pod: Pod = serde_json::from_value(capacity["pods"][0].clone()).unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("sample-node")
    );
    assert_eq!(step_and_env(&pod, "NODE").0, "capacity");

    let accepted = render(&[
        "examples/local-volumes/provisioner.yaml",
        "--phase",
        "modification",
    ]);
    assert_eq!(
        accepted["evaluated"],
        serde_json::json!({}),
        "mode ro is known"
    );
    assert_eq!(accepted["pods"], serde_json::json!([]));
    let dir = tempfile::tempdir().unwrap();
    let vac = dir.path().join("vac.yaml");
    std::fs::write(
        &vac,
        "apiVersion: storage.k8s.io/v1\nkind: VolumeAttributesClass\nmetadata: {name: x}\ndriverName: local-volumes\nparameters: {speed: fast}\n",
    )
    .unwrap();
    // Refused as ModifyVolume refuses it: exit 1 with the driver's words.
    let refused = pav(&[
        "render",
        "examples/local-volumes/provisioner.yaml",
        "--phase",
        "modification",
        "--vac",
        vac.to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.starts_with(
            "error: PavProvisioner local-volumes refuses the mutable parameters {\"speed\": \"fast\"}: "
        ) && stderr.contains("unknown parameter \"speed\""),
        "{stderr}"
    );
}

/// `pav render` previews what the driver does, so it fails where the
/// driver refuses the evaluated fields, with the driver's message: a
/// claim its validation rules refuse (capacity, access mode), at
/// validation and at creation, and an expansion to less than the claim
/// asks for (it rendered with exit 0 while ControllerExpandVolume failed).
#[test]
fn render_fails_where_the_driver_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let provisioner = dir.path().join("p.yaml");
    std::fs::write(
        &provisioner,
        "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata: {name: p}\nspec:\n  provisioningModes: [Dynamic]\n  volumeValidation: {accessModes: [ReadWriteOnce], maxCapacity: 2Gi}\n  volumeCreation: {handle: h, capacity: 1Gi}\n  volumeExpansion: {capacity: 1Mi}\n  volumeStaging: {podTemplate: {}}\n",
    )
    .unwrap();
    let claim = |name: &str, mode: &str, size: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("metadata: {{name: data, namespace: ns, uid: 5d2c8b1a}}\nspec: {{accessModes: [{mode}], resources: {{requests: {{storage: {size}}}}}}}\n"),
        )
        .unwrap();
        path.to_str().unwrap().to_owned()
    };
    let fails = |phase: &str, pvc: &str, expected: &str| {
        let output = pav(&[
            "render",
            provisioner.to_str().unwrap(),
            "--phase",
            phase,
            "--pvc",
            pvc,
        ]);
        assert_eq!(output.status.code(), Some(1), "{phase} of {pvc}");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!("error: {expected}\n")
        );
    };
    let fits = claim("fits.yaml", "ReadWriteOnce", "1Gi");
    let too_big = claim("big.yaml", "ReadWriteOnce", "3Gi");
    let shared = claim("shared.yaml", "ReadWriteMany", "1Gi");
    for phase in ["validation", "creation"] {
        render(&[
            provisioner.to_str().unwrap(),
            "--phase",
            phase,
            "--pvc",
            &fits,
        ]);
        fails(
            phase,
            &too_big,
            "requested capacity 3221225472 bytes exceeds the maximum of 2147483648 bytes",
        );
        fails(
            phase,
            &shared,
            "access mode ReadWriteMany is not supported (supported: ReadWriteOnce)",
        );
    }
    fails(
        "expansion",
        &fits,
        "the volume grew to 1048576 bytes, less than the 1073741824 bytes requested",
    );
}

/// examples/local-volumes' population pod for populated-pvc.yaml's claim
/// and files: in pav's namespace, owned by the prime claim, the volume at
/// /pav/volume through it, and each file's name and text as arguments,
/// every `$` doubled so that Kubernetes' expansion gives them back as
/// written.
#[test]
fn render_fills_the_local_volumes_claim_from_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let example =
        std::fs::read_to_string(repo_root().join("examples/local-volumes/populated-pvc.yaml"))
            .unwrap();
    let (files, claim) = example.split_once("\n---\n").unwrap();
    let files = files.replace(
        "hello: \"Hello world!\\n\"",
        "hello: \"Hello world!\\n\"\n    price: \"$(HOME) $$5\"",
    );
    let claim = claim.replace(
        "  namespace: default\n",
        "  namespace: default\n  uid: 9d2c7b1a-0e3f-4a5b-8c6d-7e8f9a0b1c2d\n",
    );
    let (files_path, claim_path) = (dir.path().join("files.yaml"), dir.path().join("pvc.yaml"));
    std::fs::write(&files_path, files).unwrap();
    std::fs::write(&claim_path, claim).unwrap();
    let rendered = render(&[
        "examples/local-volumes/provisioner.yaml",
        "--phase",
        "population",
        "--pvc",
        claim_path.to_str().unwrap(),
        "--data-source",
        files_path.to_str().unwrap(),
    ]);
    let pod: Pod = serde_json::from_value(rendered["pods"][0].clone()).unwrap();
    let prime = "prime-9d2c7b1a-0e3f-4a5b-8c6d-7e8f9a0b1c2d";
    assert_eq!(pod.metadata.namespace.as_deref(), Some("pav"));
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("PersistentVolumeClaim", prime)
    );
    let spec = pod.spec.as_ref().unwrap();
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "pav-volume")
        .unwrap();
    assert_eq!(
        volume.persistent_volume_claim.as_ref().unwrap().claim_name,
        prime
    );
    let container = &spec.containers[0];
    assert!(
        container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "pav-volume" && m.mount_path == "/pav/volume"),
        "{:?}",
        container.volume_mounts
    );
    assert_eq!(
        container.args.as_deref(),
        Some(
            &[
                "hello".to_owned(),
                "Hello world!\n".to_owned(),
                "price".to_owned(),
                "$$(HOME) $$$$5".to_owned()
            ][..]
        )
    );
}
