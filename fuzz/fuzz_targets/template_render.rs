//! Arbitrary template source, compiled by pav-templates as a field of a
//! PavProvisioner and rendered in every phase with the sample contexts.
//! Must never panic; output must respect the limits (fuel and recursion
//! bound time, caught by libFuzzer's -timeout; size is checked here).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pav_templates::CompiledProvisioner;
use serde_json::json;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
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
        Ok(provisioner) => common::render_every_phase(&provisioner),
        Err(problems) => assert!(!problems.0.is_empty()),
    }
});
