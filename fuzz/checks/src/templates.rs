//! pav-templates' targets: arbitrary template source, and arbitrary
//! PavProvisioner YAML; both render whatever compiles in every phase with
//! fixed contexts, and check every rendering the same way.

use std::sync::OnceLock;

use pav_templates::CompiledProvisioner;
use pav_templates::Phase;
use pav_templates::engine::MAX_OUTPUT_BYTES;
use pav_templates::phase::{
    Attach, Capacity, Creation, Deletion, Detach, Expansion, GroupSnapshotCreation,
    GroupSnapshotDeletion, Health, Modification, NodeExpansion, SnapshotCreation, SnapshotDeletion,
    Staging, Unstaging, Validation,
};
use pav_templates::samples::{self, Contexts};
use serde_json::json;

/// Arbitrary template source, compiled by pav-templates as a field of a
/// PavProvisioner and rendered in every phase with the sample contexts.
/// Must never panic; output must respect the limits (fuel and recursion
/// bound time, which libFuzzer's -timeout catches; size is checked here).
pub fn template_render(data: &[u8]) {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    // The same source as a scalar field, as a whole pod template (where it
    // may set `yaml`) and as a whole phase.
    let object = json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1",
        "kind": "PavProvisioner",
        "metadata": {"name": "fuzz"},
        "spec": {
            "provisioningModes": ["Dynamic", "Static"],
            "getPvcNamespaces": ["team"],
            "volumeValidation": source,
            "volumeCreation": {"handle": source, "capacity": "1Gi"},
            "volumeDeletion": {"podTemplate": source},
            "volumeStaging": {"podTemplate": {"metadata": {"annotations": {"t": source}}}},
        },
    });
    match CompiledProvisioner::from_json(object) {
        Ok(provisioner) => render_every_phase(&provisioner),
        Err(problems) => assert!(!problems.0.is_empty()),
    }
}

/// Arbitrary bytes as PavProvisioner YAML through
/// `CompiledProvisioner::from_yaml`; when it compiles, every phase is
/// rendered with the sample contexts. Must never panic, hang or exhaust
/// memory (YAML aliases are bounded too).
pub fn provisioner_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match CompiledProvisioner::from_yaml(text) {
        Ok(provisioner) => render_every_phase(&provisioner),
        Err(problems) => {
            assert!(!problems.0.is_empty(), "an error without a problem");
            let _ = problems.to_string();
        }
    }
}

/// The sample contexts, with a `get_pvc` lookup that knows the sample
/// claim and one claim in another namespace (`team/data`).
fn contexts() -> &'static Contexts {
    static CONTEXTS: OnceLock<Contexts> = OnceLock::new();
    CONTEXTS.get_or_init(|| samples::contexts(samples::pvc_lookup()))
}

/// Every string in a rendered tree is at most one template's output, so
/// none may exceed the output limit.
fn assert_within_limits(value: &serde_json::Value) {
    match value {
        serde_json::Value::String(s) => assert!(
            s.len() <= MAX_OUTPUT_BYTES,
            "a rendered string of {} bytes passed the {MAX_OUTPUT_BYTES}-byte limit",
            s.len()
        ),
        serde_json::Value::Array(items) => items.iter().for_each(assert_within_limits),
        serde_json::Value::Object(map) => map.values().for_each(assert_within_limits),
        _ => {}
    }
}

/// Renders every phase the provisioner has with the sample contexts, raw
/// and typed. Errors are fine; panics, hangs and oversized output are not.
fn render_every_phase(provisioner: &CompiledProvisioner) {
    let contexts = contexts();
    for phase in Phase::ALL {
        if !provisioner.has_phase(phase) {
            continue;
        }
        let value = match phase {
            Phase::Validation => contexts.validation.value(),
            Phase::Creation | Phase::Deletion => contexts.creation.value(),
            Phase::Staging
            | Phase::Unstaging
            | Phase::NodeExpansion
            | Phase::Health
            | Phase::Attach
            | Phase::Detach => contexts.staging.value(),
            Phase::Expansion => contexts.expansion.value(),
            Phase::SnapshotCreation => contexts.snapshot_creation.value(),
            Phase::SnapshotDeletion => contexts.snapshot_deletion.value(),
            Phase::Capacity => contexts.capacity.value(),
            Phase::Modification => contexts.modification.value(),
            Phase::GroupSnapshotCreation => contexts.group_snapshot_creation.value(),
            Phase::GroupSnapshotDeletion => contexts.group_snapshot_deletion.value(),
            Phase::Population => contexts.population.value(),
        };
        if let Ok(raw) = provisioner.render_raw(phase, value) {
            assert_within_limits(&raw);
        }
    }
    let _ = provisioner.render::<Validation>(&contexts.validation);
    let _ = provisioner.render::<Validation>(&contexts.static_validation);
    if let Ok(creation) = provisioner.render::<Creation>(&contexts.creation)
        && let Some(handle) = &creation.handle
    {
        assert!(!handle.is_empty() && handle.len() <= MAX_OUTPUT_BYTES);
    }
    let _ = provisioner.render::<Deletion>(&contexts.creation);
    let _ = provisioner.render::<Staging>(&contexts.staging);
    let _ = provisioner.render::<Capacity>(&contexts.capacity);
    let _ = provisioner.render::<Modification>(&contexts.modification);
    let _ = provisioner.render::<Unstaging>(&contexts.staging);
    let _ = provisioner.render::<Expansion>(&contexts.expansion);
    let _ = provisioner.render::<NodeExpansion>(&contexts.staging);
    let _ = provisioner.render::<Health>(&contexts.staging);
    let _ = provisioner.render::<Attach>(&contexts.staging);
    let _ = provisioner.render::<Detach>(&contexts.staging);
    let _ = provisioner.render::<SnapshotCreation>(&contexts.snapshot_creation);
    let _ = provisioner.render::<SnapshotDeletion>(&contexts.snapshot_deletion);
    let _ = provisioner.render::<GroupSnapshotCreation>(&contexts.group_snapshot_creation);
    let _ = provisioner.render::<GroupSnapshotDeletion>(&contexts.group_snapshot_deletion);
}
