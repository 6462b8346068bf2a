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

const EXAMPLES: [&str; 3] = ["hello-world", "cloud-bucket", "block-encryption"];

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

#[test]
fn render_reports_template_errors_with_the_field() {
    // The encryption example reads claim annotations the sample claim lacks.
    let output = pav(&[
        "render",
        "examples/block-encryption/provisioner.yaml",
        "--phase",
        "creation",
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
        "error: provisioner \"static-only\" has no creation phase: spec.provisioningModes does not contain Dynamic\n"
    );
    // Validation of a Static-only provisioner uses the static context.
    let validation = render(&[path.to_str().unwrap(), "--phase", "validation"]);
    assert_eq!(
        validation["evaluated"]["podTemplate"]["metadata"]["name"],
        "check-pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21"
    );
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
