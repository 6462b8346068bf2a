//! `spec.volumeAttach`, `spec.volumeDetach` and `spec.volumeLifecycleModes`:
//! what `pav check` refuses, what they evaluate to, and staging's
//! `publishContext`.

mod common;
use common::provisioner;

use pav_templates::phase::{Attach, Detach, Staging};
use pav_templates::samples;

const BASE: &str = "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\n";

fn problems(spec: &str) -> Vec<String> {
    common::problems(&format!("{BASE}{spec}"))
}

#[test]
fn check_requires_the_attach_pod_and_attach_for_detach() {
    let staging = "volumeStaging: {podTemplate: {}}\n";
    assert_eq!(
        problems(&format!("{staging}volumeAttach: {{timeout: 1m}}\n")),
        ["provisioner \"p\", field spec.volumeAttach.podTemplate: is required"]
    );
    assert_eq!(
        problems(&format!("{staging}volumeDetach: {{}}\n")),
        [
            "provisioner \"p\", field spec.volumeDetach: may only be specified together with spec.volumeAttach"
        ]
    );
    assert_eq!(
        problems(&format!(
            "{staging}volumeAttach: {{podTemplate: {{}}, publishContext: {{}}}}\n"
        )),
        [
            "provisioner \"p\", field spec.volumeAttach.publishContext: unknown field (allowed: podTemplate, timeout)"
        ]
    );
    assert_eq!(
        problems(&format!(
            "{staging}volumeAttach: {{podTemplate: {{}}}}\nvolumeDetach: {{}}\n"
        )),
        Vec::<String>::new()
    );
}

#[test]
fn attach_and_detach_see_the_volume_and_node_and_staging_the_publish_context() {
    let compiled = provisioner(&format!(
        "{BASE}volumeStaging:\n  podTemplate:\n    spec:\n      containers: [{{name: s, image: s, args: [\"{{{{ publishContext.device | default('none') }}}}\"]}}]\nvolumeAttach:\n  podTemplate:\n    spec:\n      containers: [{{name: a, image: a, args: [\"{{{{ handle }}}}\", \"{{{{ node.metadata.name }}}}\"]}}]\nvolumeDetach: {{}}\n"
    ))
    .unwrap_or_else(|p| panic!("{p}"));
    let context = samples::staging_context();
    let attach = compiled.render::<Attach>(&context).unwrap();
    let args = attach.pod_template.spec.unwrap().containers[0].args.clone();
    let handle = samples::pv().spec.unwrap().csi.unwrap().volume_handle;
    let node = samples::node().metadata.name.unwrap();
    assert_eq!(args, Some(vec![handle, node]));
    assert_eq!(
        compiled.render::<Detach>(&context).unwrap().pod_template,
        None
    );

    let args = |context: &pav_templates::StagingContext| {
        let staging = compiled.render::<Staging>(context).unwrap();
        staging.pod_template.spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap()
    };
    assert_eq!(args(&context), ["none"], "not attached: empty");
    let published = [("device".to_owned(), "/dev/sdb".to_owned())].into();
    assert_eq!(args(&context.attached_with(&published)), ["/dev/sdb"]);
}

#[test]
fn lifecycle_modes_are_persistent_unless_the_spec_lists_them() {
    use pav_templates::LifecycleMode;
    let staging = "volumeStaging: {podTemplate: {}}\n";
    let modes = |extra: &str| {
        provisioner(&format!("{BASE}{staging}{extra}"))
            .unwrap_or_else(|p| panic!("{p}"))
            .lifecycle_modes()
            .to_vec()
    };
    assert_eq!(modes(""), [LifecycleMode::Persistent]);
    assert_eq!(
        modes("volumeLifecycleModes: [Persistent, Ephemeral]\n"),
        [LifecycleMode::Persistent, LifecycleMode::Ephemeral]
    );
    let bad = problems(&format!(
        "{staging}volumeLifecycleModes: [Ephemeral, Ephemeral, Inline]\n"
    ));
    assert_eq!(
        bad,
        [
            "provisioner \"p\", field spec.volumeLifecycleModes[1]: is listed twice",
            "provisioner \"p\", field spec.volumeLifecycleModes[2]: \"Inline\" is not one of Persistent, Ephemeral",
        ]
    );
}

#[test]
fn staging_is_per_pod_unless_the_spec_says_node() {
    use pav_templates::StagingPer;
    let staging = "volumeStaging: {podTemplate: {}}\n";
    let per = |extra: &str| {
        provisioner(&format!("{BASE}{staging}{extra}"))
            .unwrap_or_else(|p| panic!("{p}"))
            .staging_per()
    };
    assert_eq!(per(""), StagingPer::Pod);
    assert_eq!(per("stagingPer: Pod\n"), StagingPer::Pod);
    assert_eq!(per("stagingPer: Node\n"), StagingPer::Node);
    for bad in ["Client", "{{ 'Node' }}"] {
        assert_eq!(
            problems(&format!("{staging}stagingPer: \"{bad}\"\n")),
            [format!(
                "provisioner \"p\", field spec.stagingPer: must be Pod or Node (it is not a template), not \"{bad}\""
            )]
        );
    }
}

#[test]
fn the_crd_keeps_staging_per_as_it_was_created() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(pav_templates::PavProvisioner::crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["properties"]["stagingPer"]["enum"],
        serde_json::json!(["Pod", "Node"])
    );
    let rules = spec["x-kubernetes-validations"]
        .as_array()
        .expect("rules on spec");
    assert!(
        rules
            .iter()
            .any(|r| r["rule"].as_str().unwrap().contains("oldSelf.stagingPer")),
        "{rules:#?}"
    );
}
