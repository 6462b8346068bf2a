//! Helpers shared by the integration tests.

use pav_templates::{CompiledProvisioner, Phase, samples};

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
