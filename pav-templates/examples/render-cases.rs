//! Renders template cases with pav-templates, for the differential suite
//! against Jinja2 (`benches/differential.py`).
//!
//! Reads from stdin a JSON document `{"context": {...}, "cases": [{"name",
//! "template"}, ...]}` and prints a JSON list with, for each case in order,
//! `{"output": <what the field rendered to>}` or `{"error": "<message>",
//! "kind": "<kind>"}`, the kind being what the differential suite compares
//! with Jinja2's exception: `syntax` (the template does not compile, or
//! names an unknown filter or test), `undefined` (an undefined value or
//! unknown function used, printed or passed where it cannot go), `yaml` (`yaml = true` output that is no YAML)
//! or `evaluation` (any other failure while evaluating).
//! Each template is one field of a provisioner (`volumeStaging`'s
//! `podTemplate.metadata.annotations.case`), rendered as pav renders every
//! field: the same environment, limits and `yaml = true` handling.

use std::io::Read;

use pav_templates::{CompiledProvisioner, Phase};
use serde_json::{Value as Json, json};

fn render(template: &str, context: &minijinja::Value) -> Json {
    let object = json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1",
        "kind": "PavProvisioner",
        "metadata": {"name": "case"},
        "spec": {
            "provisioningModes": ["Static"],
            "volumeStaging": {"podTemplate": {"metadata": {"annotations": {"case": template}}}},
        },
    });
    let rendered = CompiledProvisioner::from_json(object)
        .map_err(|problems| (problems.to_string(), "syntax"))
        .and_then(|provisioner| {
            provisioner
                .render_raw(Phase::Staging, context)
                .map_err(|err| (err.to_string(), kind(&err)))
        });
    match rendered {
        Ok(rendered) => {
            json!({"output": rendered["podTemplate"]["metadata"]["annotations"]["case"]})
        }
        Err((error, kind)) => json!({"error": error, "kind": kind}),
    }
}

/// The kind of a rendering error, as the module's documentation lists.
fn kind(error: &pav_templates::Error) -> &'static str {
    use pav_templates::Error;
    match error {
        Error::Syntax { .. } => "syntax",
        Error::Yaml { .. } => "yaml",
        // minijinja resolves filters and tests when it renders; Jinja2
        // refuses unknown ones when it compiles. An unknown function is an
        // undefined name to both.
        Error::Render { message, .. }
            if message.contains(" is unknown")
                && (message.contains("filter ") || message.contains("test ")) =>
        {
            "syntax"
        }
        // An undefined value used, printed or passed where it cannot go.
        Error::Render { message, .. }
            if message.to_lowercase().contains("undefined") || message.contains(" is unknown") =>
        {
            "undefined"
        }
        _ => "evaluation",
    }
}

fn main() {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .expect("reading stdin");
    let input: Json = serde_json::from_str(&input).expect("stdin holds JSON");
    let context = minijinja::Value::from(minijinja::value::Serde(&input["context"]));
    let results: Vec<Json> = input["cases"]
        .as_array()
        .expect("cases is a list")
        .iter()
        .map(|case| {
            render(
                case["template"].as_str().expect("template is a string"),
                &context,
            )
        })
        .collect();
    println!("{}", Json::Array(results));
}
