//! `spec.volumeHealth`, the staged volume's periodic check: what `pav
//! check` refuses, and what it evaluates to with the staging context.

mod common;
use common::provisioner;

use std::time::Duration;

use pav_templates::phase::Health;
use pav_templates::samples;

const BASE: &str = "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n";

fn problems(spec: &str) -> Vec<String> {
    common::problems(&format!("{BASE}{spec}"))
}

#[test]
fn check_requires_the_pod_and_a_positive_interval() {
    assert_eq!(
        problems("volumeHealth: {every: 1m}\n"),
        ["provisioner \"p\", field spec.volumeHealth.podTemplate: is required"]
    );
    let bad = problems("volumeHealth: {every: 0s, timeout: soon, podTemplate: {}, cacheFor: 1m}\n");
    assert_eq!(bad.len(), 3, "{bad:#?}");
    for (field, needle) in [
        ("spec.volumeHealth.every", "positive"),
        ("spec.volumeHealth.timeout", "duration"),
        (
            "spec.volumeHealth.cacheFor",
            "unknown field (allowed: podTemplate, timeout, every)",
        ),
    ] {
        assert!(
            bad.iter()
                .any(|p| p.contains(&format!("field {field}:")) && p.contains(needle)),
            "{field}: {bad:#?}"
        );
    }
    assert_eq!(
        problems("volumeHealth: {podTemplate: {}}\n"),
        Vec::<String>::new()
    );
}

#[test]
fn the_check_sees_the_staging_context_and_its_interval_is_templated() {
    let compiled = provisioner(&format!(
        "{BASE}volumeHealth:\n  every: \"{{{{ params.every | default('90s') }}}}\"\n  timeout: 2m\n  podTemplate:\n    spec:\n      containers: [{{name: check, image: c, args: [\"{{{{ handle }}}}\", \"{{{{ 'ro' if readOnly else 'rw' }}}}\"]}}]\n"
    ))
    .unwrap_or_else(|p| panic!("{p}"));
    let evaluated = compiled
        .render::<Health>(&samples::staging_context())
        .unwrap();
    assert_eq!(evaluated.every, Some(Duration::from_secs(90)));
    assert_eq!(evaluated.timeout, Some(Duration::from_secs(120)));
    let containers = evaluated.pod_template.spec.unwrap().containers;
    let handle = samples::pv().spec.unwrap().csi.unwrap().volume_handle;
    assert_eq!(containers[0].args, Some(vec![handle, "rw".to_owned()]));
}

#[test]
fn a_hostile_check_template_is_a_bounded_error_naming_the_field() {
    let compiled = provisioner(&format!(
        "{BASE}volumeHealth:\n  every: \"{{% for i in range(100000000) %}}{{% for j in range(100000000) %}}x{{% endfor %}}{{% endfor %}}\"\n  podTemplate: {{}}\n"
    ))
    .unwrap_or_else(|p| panic!("{p}"));
    let started = std::time::Instant::now();
    let error = compiled
        .render::<Health>(&samples::staging_context())
        .unwrap_err()
        .to_string();
    assert!(error.contains("spec.volumeHealth"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(30), "{error}");
}
