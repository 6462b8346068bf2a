//! Helpers shared by the integration tests (each test file uses some).
#![allow(dead_code)]

use pav_templates::{CompiledProvisioner, Phase, samples};

/// A provisioner `p` whose spec is `spec_yaml` (indented under `spec:`).
pub fn provisioner(spec_yaml: &str) -> Result<CompiledProvisioner, pav_templates::Problems> {
    let mut yaml = String::from(
        "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata:\n  name: p\nspec:\n",
    );
    for line in spec_yaml.lines() {
        yaml.push_str("  ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    CompiledProvisioner::from_yaml(&yaml)
}

/// What `pav check` says of [`provisioner`]`(spec_yaml)`: none when valid.
pub fn problems(spec_yaml: &str) -> Vec<String> {
    match provisioner(spec_yaml) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.0.iter().map(ToString::to_string).collect(),
    }
}

/// Compiles `template` as one field (the staging pod's name) of a
/// PavProvisioner named `provisioner` and renders it with the sample
/// staging context: its output, or the message of its error.
pub fn render_field(provisioner: &str, template: &str) -> Result<String, String> {
    let compiled = CompiledProvisioner::from_json(serde_json::json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1",
        "kind": "PavProvisioner",
        "metadata": {"name": provisioner},
        "spec": {
            "provisioningModes": ["Static"],
            "volumeStaging": {"podTemplate": {"metadata": {"name": template}}},
        },
    }))
    .map_err(|problems| problems.to_string())?;
    let raw = compiled
        .render_raw(Phase::Staging, samples::staging_context().value())
        .map_err(|err| err.to_string())?;
    Ok(raw["podTemplate"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}
