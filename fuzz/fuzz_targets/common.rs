//! What both targets share: fixed contexts, and the checks every rendering
//! must pass.

use std::sync::OnceLock;

use pav_templates::engine::MAX_OUTPUT_BYTES;
use pav_templates::samples::{self, Contexts};
use pav_templates::{CompiledProvisioner, Phase};

/// The sample contexts, with a `get_pvc` lookup that knows the sample
/// claim and one claim in another namespace (`team/data`).
pub fn contexts() -> &'static Contexts {
    static CONTEXTS: OnceLock<Contexts> = OnceLock::new();
    CONTEXTS.get_or_init(|| samples::contexts(samples::pvc_lookup()))
}

/// Every string in a rendered tree is at most one template's output, so
/// none may exceed the output limit.
pub fn assert_within_limits(value: &serde_json::Value) {
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
pub fn render_every_phase(provisioner: &CompiledProvisioner) {
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
        };
        if let Ok(raw) = provisioner.render_raw(phase, value) {
            assert_within_limits(&raw);
        }
    }
    let _ = provisioner.render_validation(&contexts.validation);
    let _ = provisioner.render_validation(&contexts.static_validation);
    if let Ok(creation) = provisioner.render_creation(&contexts.creation) {
        if let Some(handle) = &creation.handle {
            assert!(!handle.is_empty() && handle.len() <= MAX_OUTPUT_BYTES);
        }
    }
    let _ = provisioner.render_deletion(&contexts.creation);
    let _ = provisioner.render_staging(&contexts.staging);
    let _ = provisioner.render_capacity(&contexts.capacity);
    let _ = provisioner.render_modification(&contexts.modification);
    let _ = provisioner.render_unstaging(&contexts.staging);
    let _ = provisioner.render_expansion(&contexts.expansion);
    let _ = provisioner.render_node_expansion(&contexts.staging);
    let _ = provisioner.render_health(&contexts.staging);
    let _ = provisioner.render_attach(&contexts.staging);
    let _ = provisioner.render_detach(&contexts.staging);
    let _ = provisioner.render_snapshot_creation(&contexts.snapshot_creation);
    let _ = provisioner.render_snapshot_deletion(&contexts.snapshot_deletion);
    let _ = provisioner.render_group_snapshot_creation(&contexts.group_snapshot_creation);
    let _ = provisioner.render_group_snapshot_deletion(&contexts.group_snapshot_deletion);
}
