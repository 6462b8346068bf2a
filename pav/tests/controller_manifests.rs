//! `deploy/pav.yaml` is exactly what `pav manifests` prints.
//!
//! After changing the manifests, regenerate the file with
//! `cargo run -p pav -- manifests > deploy/pav.yaml`, or run this test with
//! `PAV_UPDATE_MANIFESTS=1`.

use std::path::PathBuf;

#[test]
fn checked_in_manifests_are_generated() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/pav.yaml");
    let generated = pav::manifests::render(&Default::default()).expect("manifests render");
    if std::env::var_os("PAV_UPDATE_MANIFESTS").is_some() {
        std::fs::write(&path, &generated).expect("write deploy/pav.yaml");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "deploy/pav.yaml differs from `pav manifests`; regenerate it with \
         `cargo run -p pav -- manifests > deploy/pav.yaml` (or PAV_UPDATE_MANIFESTS=1 cargo test -p pav --test controller_manifests)"
    );
}

#[test]
fn manifests_hold_every_install_object() {
    let generated = pav::manifests::render(&Default::default()).unwrap();
    for needle in [
        "kind: Namespace",
        "name: pavprovisioners.pav.albertofaria.github.io",
        "kind: ClusterRole\n",
        "kind: Deployment",
        "- controller\n",
        "imagePullPolicy: IfNotPresent",
    ] {
        assert!(generated.contains(needle), "{needle:?} missing");
    }
    // Every document parses as a Kubernetes object with apiVersion and kind.
    for document in generated.split("\n---\n").skip(1) {
        let value: serde_json::Value = serde_yaml::from_str(document).unwrap();
        assert!(
            value["apiVersion"].is_string() && value["kind"].is_string(),
            "{document}"
        );
    }
}
