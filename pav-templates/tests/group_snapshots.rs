//! `spec.groupSnapshotCreation` and `spec.groupSnapshotDeletion`: what
//! `pav check` refuses, what they evaluate to with their members, and
//! hostile templates in them.

mod common;
use common::provisioner;

use std::time::Duration;

use pav_templates::phase::{GroupSnapshotCreation, GroupSnapshotDeletion};
use pav_templates::samples;

const BASE: &str = "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n";

fn problems(spec: &str) -> Vec<String> {
    common::problems(&format!("{BASE}{spec}"))
}

#[test]
fn check_requires_the_creation_pod_and_creation_for_deletion() {
    assert_eq!(
        problems("groupSnapshotCreation: {handle: g}\n"),
        ["provisioner \"p\", field spec.groupSnapshotCreation.podTemplate: is required"]
    );
    assert_eq!(
        problems("groupSnapshotDeletion: {}\n"),
        [
            "provisioner \"p\", field spec.groupSnapshotDeletion: may only be specified together with spec.groupSnapshotCreation"
        ]
    );
    assert_eq!(
        problems("groupSnapshotCreation: {podTemplate: {}, size: 1Gi}\n"),
        [
            "provisioner \"p\", field spec.groupSnapshotCreation.size: unknown field (allowed: handle, podTemplate, timeout)"
        ]
    );
    assert_eq!(
        problems(
            "groupSnapshotCreation: {podTemplate: {}, timeout: 1m}\ngroupSnapshotDeletion: {}\n"
        ),
        Vec::<String>::new()
    );
}

#[test]
fn creation_sees_each_member_and_deletion_each_snapshot() {
    let compiled = provisioner(&format!(
        "{BASE}groupSnapshotCreation:\n  handle: \"{{{{ groupSnapshotName }}}}.g\"\n  podTemplate:\n    spec:\n      containers: [{{name: g, image: g, args: [\"{{{{ sourceHandles | join(',') }}}}\", \"{{% for s in sources %}}{{{{ s.capacity }}}} {{{{ s.pvc.metadata.name }}}}{{% endfor %}}\"]}}]\ngroupSnapshotDeletion:\n  podTemplate:\n    spec:\n      containers: [{{name: d, image: d, args: [\"{{{{ groupSnapshotHandle }}}}\", \"{{% for s in snapshots %}}{{{{ s.handle }}}}<{{{{ s.sourceHandle }}}}{{% endfor %}}\"]}}]\n"
    ))
    .unwrap_or_else(|p| panic!("{p}"));
    let handle = samples::pv().spec.unwrap().csi.unwrap().volume_handle;
    let claim = samples::pvc().metadata.name.unwrap();
    let creation = compiled
        .render::<GroupSnapshotCreation>(&samples::group_snapshot_creation_context())
        .unwrap();
    assert_eq!(
        creation.handle.as_deref(),
        Some(format!("{}.g", samples::GROUP_SNAPSHOT_NAME).as_str())
    );
    let args = creation.pod_template.spec.unwrap().containers[0]
        .args
        .clone();
    assert_eq!(
        args,
        Some(vec![handle.clone(), format!("1073741824 {claim}")])
    );
    let deletion = compiled
        .render::<GroupSnapshotDeletion>(&samples::group_snapshot_deletion_context())
        .unwrap();
    let args = deletion.pod_template.unwrap().spec.unwrap().containers[0]
        .args
        .clone();
    assert_eq!(
        args,
        Some(vec![
            samples::GROUP_SNAPSHOT_NAME.to_owned(),
            format!("{}<{handle}", samples::SNAPSHOT_NAME)
        ])
    );
}

#[test]
fn a_hostile_group_template_is_a_bounded_error_naming_the_field() {
    let compiled = provisioner(&format!(
        "{BASE}groupSnapshotCreation:\n  handle: \"{{% for s in sources %}}{{% for i in range(100000000) %}}{{% for j in range(100000000) %}}x{{% endfor %}}{{% endfor %}}{{% endfor %}}\"\n  podTemplate: {{}}\n"
    ))
    .unwrap_or_else(|p| panic!("{p}"));
    let started = std::time::Instant::now();
    let error = compiled
        .render::<GroupSnapshotCreation>(&samples::group_snapshot_creation_context())
        .unwrap_err()
        .to_string();
    assert!(error.contains("spec.groupSnapshotCreation"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(30), "{error}");
}
