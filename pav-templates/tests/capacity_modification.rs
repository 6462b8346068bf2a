//! The sections pav adds for storage capacity and VolumeAttributesClass
//! changes: what `pav check` refuses, what each context holds, how each
//! evaluates, and where a volume's mutable parameters are recorded.

mod common;
use common::provisioner;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use pav_templates::context::MUTABLE_PARAMETERS_KEY;
use pav_templates::phase::{Capacity, Creation, Modification, Staging};
use pav_templates::{
    CapacityContext, CompiledProvisioner, CreationContext, ModificationContext, StagingContext,
    samples,
};

const BASE: &str = "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n";

fn problems(spec: &str) -> Vec<String> {
    common::problems(spec)
}

fn compiled(extra: &str) -> CompiledProvisioner {
    provisioner(&format!("{BASE}{extra}")).unwrap_or_else(|p| panic!("unexpected problems:\n{p}"))
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn node_segment(node: &str) -> BTreeMap<String, String> {
    map(&[("topology.pav.albertofaria.github.io/node", node)])
}

#[test]
fn check_refuses_capacity_without_an_answer_or_dynamic_and_bad_literals() {
    assert_eq!(
        problems(&format!("{BASE}storageCapacity: {{cacheFor: 1m}}\n")),
        [
            "provisioner \"p\", field spec.storageCapacity: must specify availableCapacity or podTemplate (or both)"
        ]
    );
    assert_eq!(
        problems(
            "provisioningModes: [Static]\nvolumeStaging: {podTemplate: {}}\nstorageCapacity: {availableCapacity: 1Gi}\n"
        ),
        [
            "provisioner \"p\", field spec.storageCapacity: may only be specified if spec.provisioningModes contains Dynamic (capacity places new volumes)"
        ]
    );
    let bad = problems(&format!(
        "{BASE}storageCapacity: {{availableCapacity: lots, maximumVolumeSize: 0, cacheFor: soon, podTemplat: {{}}}}\nvolumeModification: {{refusal: [no], timeout: 1m}}\n"
    ));
    assert_eq!(bad.len(), 5, "{bad:#?}");
    for (field, needle) in [
        ("spec.storageCapacity.availableCapacity", "quantity"),
        ("spec.storageCapacity.maximumVolumeSize", "positive"),
        ("spec.storageCapacity.cacheFor", "duration"),
        ("spec.storageCapacity.podTemplat", "unknown field"),
        ("spec.volumeModification.refusal", "must be a string"),
    ] {
        assert!(
            bad.iter()
                .any(|p| p.contains(&format!("field {field}:")) && p.contains(needle)),
            "{field}: {bad:#?}"
        );
    }
    // No room at all is an answer; templates-only modification is a section.
    assert!(
        problems(&format!(
            "{BASE}storageCapacity: {{availableCapacity: 0}}\nvolumeModification: {{}}\n"
        ))
        .is_empty()
    );
}

#[test]
fn capacity_sees_the_segment_and_class_and_evaluates_its_fields() {
    let provisioner = compiled(
        "storageCapacity:\n  availableCapacity: \"{{ params.room }}\"\n  maximumVolumeSize: \"{{ 1 if nodeName == 'n1' else 2 }}Gi\"\n  cacheFor: 30s\n  podTemplate:\n    metadata: {labels: {segment: \"{{ topology['topology.pav.albertofaria.github.io/node'] }}\"}}\n",
    );
    let segment = node_segment("n1");
    let context = CapacityContext::new(Some(&segment), Some("n1"), &map(&[("room", "5Gi")]));
    let phase = provisioner.render::<Capacity>(&context).unwrap();
    assert_eq!(phase.available_capacity, Some(5 << 30));
    assert_eq!(phase.maximum_volume_size, Some(1 << 30));
    assert_eq!(phase.cache_for, Some(std::time::Duration::from_secs(30)));
    let labels = phase
        .pod_template
        .unwrap()
        .metadata
        .unwrap()
        .labels
        .unwrap();
    assert_eq!(labels["segment"], "n1");
    // All the storage: no segment, no node.
    let everywhere = CapacityContext::new(None, None, &map(&[("room", "0")]));
    let error = provisioner
        .render::<Capacity>(&everywhere)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("spec.storageCapacity.podTemplate"),
        "{error}"
    );
}

#[test]
fn hostile_capacity_templates_get_the_bounded_errors_of_every_phase() {
    let provisioner = compiled(
        "storageCapacity:\n  availableCapacity: \"{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}\"\n",
    );
    let context = samples::capacity_context();
    let error = provisioner
        .render::<Capacity>(&context)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("spec.storageCapacity.availableCapacity")
            && (error.contains("budget") || error.contains("limit")),
        "{error}"
    );
    let negative = compiled("storageCapacity: {availableCapacity: \"{{ -1 }}\"}\n");
    let error = negative
        .render::<Capacity>(&context)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("spec.storageCapacity.availableCapacity"),
        "{error}"
    );
}

#[test]
fn modification_sees_the_parameters_before_and_after_and_may_refuse() {
    let provisioner = compiled(
        "volumeModification:\n  refusal: \"{% if requestedMutableParams.mode not in ['ro', 'rw'] %}bad mode {{ requestedMutableParams.mode }}{% endif %}\"\n  podTemplate:\n    metadata:\n      labels: {from: \"{{ previousMutableParams.mode }}\", to: \"{{ mutableParams.mode }}\", tier: \"{{ mutableParams.tier }}\", handle: \"{{ handle }}\"}\n",
    );
    let mut pv: PersistentVolume = samples::pv();
    pv.metadata.annotations = Some(
        [(
            MUTABLE_PARAMETERS_KEY.to_owned(),
            r#"{"mode":"rw","tier":"gold"}"#.to_owned(),
        )]
        .into(),
    );
    let context =
        ModificationContext::new(&pv, Some(&samples::pvc()), &map(&[("mode", "ro")])).unwrap();
    // Keys the class does not name keep their values.
    assert_eq!(
        context.mutable_parameters_after(),
        &map(&[("mode", "ro"), ("tier", "gold")])
    );
    let phase = provisioner.render::<Modification>(&context).unwrap();
    assert_eq!(phase.refusal, None);
    let labels = phase
        .pod_template
        .unwrap()
        .metadata
        .unwrap()
        .labels
        .unwrap();
    assert_eq!(
        (
            labels["from"].as_str(),
            labels["to"].as_str(),
            labels["tier"].as_str()
        ),
        ("rw", "ro", "gold")
    );
    let refused = ModificationContext::new(&pv, None, &map(&[("mode", "rx")])).unwrap();
    assert_eq!(
        provisioner
            .render::<Modification>(&refused)
            .unwrap()
            .refusal
            .as_deref(),
        Some("bad mode rx")
    );
}

#[test]
fn mutable_parameters_are_recorded_at_creation_then_on_the_volume_and_hidden_from_params() {
    let provisioner = provisioner(
        "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging:\n  podTemplate:\n    metadata:\n      labels: {mode: \"{{ mutableParams.mode | default('none') }}\", keys: \"{{ params | length }}\"}\n",
    )
    .unwrap();
    let mode_and_keys = |pv: &PersistentVolume| {
        let context = StagingContext::new(&samples::pvc(), pv, &samples::node(), false).unwrap();
        let labels = provisioner
            .render::<Staging>(&context)
            .unwrap()
            .pod_template
            .metadata
            .unwrap()
            .labels
            .unwrap();
        (labels["mode"].clone(), labels["keys"].clone())
    };
    let mut pv = samples::pv();
    let params = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .and_then(|c| c.volume_attributes.as_ref())
        .map_or(0, BTreeMap::len)
        .to_string();
    assert_eq!(mode_and_keys(&pv), ("none".to_owned(), params.clone()));
    // At creation: in the volume context, which `params` does not show.
    let csi = pv.spec.as_mut().unwrap().csi.as_mut().unwrap();
    csi.volume_attributes
        .get_or_insert_with(Default::default)
        .insert(
            MUTABLE_PARAMETERS_KEY.to_owned(),
            r#"{"mode":"rw"}"#.to_owned(),
        );
    assert_eq!(mode_and_keys(&pv), ("rw".to_owned(), params.clone()));
    // Once modified: the PersistentVolume's annotation wins.
    pv.metadata.annotations = Some(
        [(
            MUTABLE_PARAMETERS_KEY.to_owned(),
            r#"{"mode":"ro"}"#.to_owned(),
        )]
        .into(),
    );
    assert_eq!(mode_and_keys(&pv), ("ro".to_owned(), params));

    let creation = self::provisioner(
        "provisioningModes: [Dynamic]\nvolumeStaging: {podTemplate: {}}\nvolumeCreation:\n  capacity: 1Gi\n  handle: \"h-{{ mutableParams.mode | default('none') }}\"\n",
    )
    .unwrap();
    let context = CreationContext::new(&samples::pvc(), &samples::storage_class()).unwrap();
    assert_eq!(
        creation
            .render::<Creation>(&context)
            .unwrap()
            .handle
            .as_deref(),
        Some("h-none")
    );
    let context = context.with_mutable_parameters(&map(&[("mode", "ro")]));
    assert_eq!(
        creation
            .render::<Creation>(&context)
            .unwrap()
            .handle
            .as_deref(),
        Some("h-ro")
    );
}
