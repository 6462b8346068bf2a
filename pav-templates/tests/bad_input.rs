//! Hostile and broken input, one table row each: the exact message a user
//! sees (full string equality, so a change of wording fails here), and
//! nothing produced — no compiled provisioner, no pod template.
//!
//! `PAV_PRINT_MESSAGES=1 cargo test -p pav-templates --test bad_input --
//! --nocapture` prints every row's actual message.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use pav_templates::phase::{Creation, Deletion, Staging, Unstaging, Validation};
use pav_templates::samples::{self, Contexts};
use pav_templates::{CompiledProvisioner, Phase};

const HEADER: &str = "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata:\n  name: bad\n";

/// A whole object: `HEADER` and `spec:` with `spec` indented under it.
fn object(spec: &str) -> String {
    let mut yaml = format!("{HEADER}spec:\n");
    for line in spec.lines() {
        yaml.push_str("  ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    yaml
}

fn print_messages() -> bool {
    std::env::var_os("PAV_PRINT_MESSAGES").is_some()
}

/// Objects that must not compile: (row, YAML, every problem, one a line).
const COMPILE_ROWS: &[(&str, &str, &str)] = &[
    (
        "malformed YAML: unclosed flow sequence",
        "apiVersion: [pav\nkind: PavProvisioner\n",
        "provisioner \"<unparsed>\", field <document>: did not find expected ',' or ']' at line 2 column 5, while parsing a flow sequence at line 1 column 13",
    ),
    (
        "malformed YAML: tab indentation",
        "apiVersion: pav.albertofaria.github.io/v1alpha1\nspec:\n\tprovisioningModes: [Static]\n",
        "provisioner \"<unparsed>\", field <document>: found character that cannot start any token at line 3 column 1, while scanning for the next token",
    ),
    (
        "malformed YAML: duplicate key",
        "kind: PavProvisioner\nkind: PavProvisioner\n",
        "provisioner \"<unparsed>\", field <document>: duplicate entry with key \"kind\"",
    ),
    (
        "malformed YAML: alias to an undefined anchor",
        "apiVersion: *nowhere\n",
        "provisioner \"<unparsed>\", field <document>: unknown anchor at line 1 column 13",
    ),
    (
        "empty document",
        "",
        "provisioner \"<unnamed>\", field <document>: must be an object\nprovisioner \"<unnamed>\", field spec: is required",
    ),
    (
        "not an object",
        "- just\n- a list\n",
        "provisioner \"<unnamed>\", field <document>: must be an object\nprovisioner \"<unnamed>\", field spec: is required",
    ),
    (
        "a string",
        "PavProvisioner",
        "provisioner \"<unnamed>\", field <document>: must be an object\nprovisioner \"<unnamed>\", field spec: is required",
    ),
    (
        "alias bomb: 2,000 aliases of a 2,000-item list",
        "@BOMB@",
        "provisioner \"<unparsed>\", field <document>: b[131][162]: aliases expand the document by more than 8388608 bytes (are they repeated too often?) at line 5 column 332",
    ),
    (
        "wrong type: spec is a list",
        "@HEADER@spec: [1, 2]\n",
        "provisioner \"bad\", field spec: must be an object",
    ),
    (
        "wrong type: provisioningModes is a string",
        "@SPEC@provisioningModes: Dynamic\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.provisioningModes: must be a list of Dynamic and/or Static (it is not a template)",
    ),
    (
        "wrong type: volumeStaging is a number",
        "@SPEC@provisioningModes: [Static]\nvolumeStaging: 5\n",
        "provisioner \"bad\", field spec.volumeStaging: must be an object or a template, not number 5",
    ),
    (
        "wrong type: capacity is a list",
        "@SPEC@provisioningModes: [Dynamic]\nvolumeCreation: {capacity: [1]}\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.volumeCreation.capacity: must be a positive quantity, not a list",
    ),
    (
        "half a byte of capacity: passed the check, then failed at render",
        "@SPEC@provisioningModes: [Dynamic]\nvolumeCreation: {capacity: \"0.5\"}\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.volumeCreation.capacity: must be a positive capacity (at least 1 byte once rounded)",
    ),
    (
        "half a byte of minCapacity",
        "@SPEC@provisioningModes: [Dynamic]\nvolumeValidation: {minCapacity: \"0.5\"}\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.volumeValidation.minCapacity: must be a positive capacity (at least 1 byte once rounded)",
    ),
    (
        "wrong type: volumeModes is a plain string",
        "@SPEC@provisioningModes: [Static]\nvolumeValidation: {volumeModes: Filesystem}\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.volumeValidation.volumeModes: must be a list or a template, not \"Filesystem\"",
    ),
    (
        "wrong type: timeout is a boolean",
        "@SPEC@provisioningModes: [Static]\nvolumeStaging: {podTemplate: {}, timeout: true}\n",
        "provisioner \"bad\", field spec.volumeStaging.timeout: must be a duration such as 5m, not boolean true",
    ),
    (
        "wrong type: container args is a string",
        "@SPEC@provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec:\n      containers: [{name: c, image: busybox, args: echo}]\n",
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.spec.containers[0].args: invalid type: string \"echo\", expected a sequence (a template here yields a string; add `{% set yaml = true %}` for other types)",
    ),
    (
        "wrong type: getPvcNamespaces is a string",
        "@SPEC@provisioningModes: [Static]\ngetPvcNamespaces: team\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.getPvcNamespaces: must be a list of namespace names or \"*\" (it is not a template), not \"team\"",
    ),
    (
        "wrong value: getPvcNamespaces holds a non-namespace, a template and a repeat",
        "@SPEC@provisioningModes: [Static]\ngetPvcNamespaces: [Team_A, \"{{ pvc.metadata.namespace }}\", team, team, 7]\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.getPvcNamespaces[0]: \"Team_A\" is not a namespace name (a DNS label) or \"*\"\nprovisioner \"bad\", field spec.getPvcNamespaces[1]: \"{{ pvc.metadata.namespace }}\" is not a namespace name (a DNS label) or \"*\"\nprovisioner \"bad\", field spec.getPvcNamespaces[3]: is listed twice\nprovisioner \"bad\", field spec.getPvcNamespaces[4]: number 7 is not a namespace name (a DNS label) or \"*\"",
    ),
    (
        "unknown field at the top",
        "@HEADER@spex: {}\nspec:\n  provisioningModes: [Static]\n  volumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spex: unknown field",
    ),
    (
        "unknown field in spec",
        "@SPEC@provisioningModes: [Static]\nvolumeStagin: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.volumeStagin: unknown field\nprovisioner \"bad\", field spec.volumeStaging: is required (volumeStaging.podTemplate is mandatory)",
    ),
    (
        "unknown field in a phase",
        "@SPEC@provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi, size: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
        "provisioner \"bad\", field spec.volumeCreation.size: unknown field (allowed: handle, capacity, topology, podTemplate, timeout)",
    ),
    (
        "unknown field in a pod template",
        "@SPEC@provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec:\n      containers: [{name: c, image: busybox, comand: [sh]}]\n",
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.spec.containers[0].comand: unknown field",
    ),
    (
        "template syntax error",
        "@SPEC@provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    metadata:\n      name: \"a\\n{{ unclosed\"\n",
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 2: template syntax error: unexpected end of input, expected end of variable block",
    ),
];

/// Expands the row shorthands `@HEADER@`, `@SPEC@` (the rest is the spec)
/// and `@BOMB@`.
fn expand(text: &str) -> String {
    if let Some(spec) = text.strip_prefix("@SPEC@") {
        return object(spec);
    }
    if text == "@BOMB@" {
        let items = vec!["x"; 2000].join(",");
        let aliases = vec!["*a"; 2000].join(",");
        return format!("{HEADER}a: &a [{items}]\nb: [{aliases}]\n");
    }
    text.replace("@HEADER@", HEADER)
}

#[test]
fn bad_objects_are_refused_with_exact_messages() {
    let mut wrong = Vec::new();
    for (row, text, expected) in COMPILE_ROWS {
        let message = match CompiledProvisioner::from_yaml(&expand(text)) {
            Ok(provisioner) => {
                wrong.push(format!("{row}: compiled ({provisioner:?})"));
                continue;
            }
            Err(problems) => problems.to_string(),
        };
        if print_messages() {
            eprintln!("{row}\n    {message:?}");
        }
        if message != *expected {
            wrong.push(format!(
                "{row}:\n  got      {message:?}\n  expected {expected:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What a phase produced: the pod template, if any.
type Produced = Option<PodTemplateSpec>;

/// The sample contexts; `get_pvc` knows the sample claim
/// (`default/sample-claim`) and `team/data`.
fn contexts() -> Contexts {
    samples::contexts(samples::pvc_lookup())
}

/// Which evaluation a row runs.
#[derive(Clone, Copy, Debug)]
enum Eval {
    /// Dynamic validation (the claim `default/sample-claim`).
    Validation,
    /// Static validation: a PersistentVolume and no claim.
    StaticValidation,
    Creation,
    Deletion,
    Staging,
    Unstaging,
}

fn evaluate(
    provisioner: &CompiledProvisioner,
    eval: Eval,
    contexts: &Contexts,
) -> Result<Produced, pav_templates::Error> {
    Ok(match eval {
        Eval::Validation => {
            provisioner
                .render::<Validation>(&contexts.validation)?
                .pod_template
        }
        Eval::StaticValidation => {
            provisioner
                .render::<Validation>(&contexts.static_validation)?
                .pod_template
        }
        Eval::Creation => {
            provisioner
                .render::<Creation>(&contexts.creation)?
                .pod_template
        }
        Eval::Deletion => {
            provisioner
                .render::<Deletion>(&contexts.creation)?
                .pod_template
        }
        Eval::Staging => Some(
            provisioner
                .render::<Staging>(&contexts.staging)?
                .pod_template,
        ),
        Eval::Unstaging => {
            provisioner
                .render::<Unstaging>(&contexts.staging)?
                .pod_template
        }
    })
}

fn phase_of(eval: Eval) -> Phase {
    match eval {
        Eval::Validation | Eval::StaticValidation => Phase::Validation,
        Eval::Creation => Phase::Creation,
        Eval::Deletion => Phase::Deletion,
        Eval::Staging => Phase::Staging,
        Eval::Unstaging => Phase::Unstaging,
    }
}

/// Objects that compile but whose evaluation must fail: (row, spec YAML,
/// evaluation, message). Each template sits in a pod template, so success
/// would produce a pod.
const RENDER_ROWS: &[(&str, &str, Eval, &str)] = &[
    (
        "template that loops forever runs out of fuel",
        "@STAGING@{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: evaluation budget exhausted (does the template loop without end?)",
    ),
    (
        "template that recurses without end",
        "@STAGING@{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: recursion limit exceeded",
    ),
    (
        "huge output from one expression",
        "@STAGING@{{ 'x' * 2000000 }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name: output is more than the limit of 1048576 bytes",
    ),
    (
        "huge output from a loop, stopped while it grows",
        "@STAGING@{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name: output is more than the limit of 1048576 bytes",
    ),
    (
        "many fields adding up past the phase's output limit",
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    metadata:\n      annotations: {a: \"{{ 'x' * 1000000 }}\", b: \"{{ 'x' * 1000000 }}\", c: \"{{ 'x' * 1000000 }}\", d: \"{{ 'x' * 1000000 }}\", e: \"{{ 'x' * 1000000 }}\"}\n",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.annotations.e: the templates of spec.volumeStaging output more than 4194304 bytes in all",
    ),
    (
        "undefined variable printed",
        "@STAGING@{{ nosuchvariable }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: expression evaluated to an undefined value",
    ),
    (
        "attribute of an undefined variable",
        "@STAGING@{{ nosuchvariable.field }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: undefined value (something undefined was indexed or called; test it with `is defined` or give it a `default`)",
    ),
    (
        "undefined function called",
        "@STAGING@{{ nosuchfunction() }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: nosuchfunction is unknown",
    ),
    (
        "get_pvc of a claim that does not exist",
        "@STAGING@{{ get_pvc('nope', 'default').metadata.name }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: get_pvc(): PersistentVolumeClaim default/nope does not exist",
    ),
    (
        "get_pvc in another namespace than the claim's (staging)",
        "@STAGING@{{ get_pvc('data', 'team').metadata.name }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: get_pvc(): may not read PersistentVolumeClaim team/data: namespace \"team\" is not the claim's namespace \"default\" and is not listed in spec.getPvcNamespaces",
    ),
    (
        "get_pvc in another namespace than the claim's (creation)",
        "provisioningModes: [Dynamic]\nvolumeCreation:\n  capacity: 1Gi\n  podTemplate:\n    metadata:\n      name: \"{{ get_pvc('data', 'team').metadata.name }}\"\nvolumeStaging: {podTemplate: {}}\n",
        Eval::Creation,
        "provisioner \"bad\", field spec.volumeCreation.podTemplate.metadata.name, line 1: get_pvc(): may not read PersistentVolumeClaim team/data: namespace \"team\" is not the claim's namespace \"default\" and is not listed in spec.getPvcNamespaces",
    ),
    (
        "get_pvc in a namespace not listed in getPvcNamespaces",
        "provisioningModes: [Dynamic]\ngetPvcNamespaces: [other]\nvolumeCreation: {capacity: 1Gi}\nvolumeDeletion:\n  podTemplate:\n    metadata:\n      name: \"{{ get_pvc('data', 'team').metadata.name }}\"\nvolumeStaging: {podTemplate: {}}\n",
        Eval::Deletion,
        "provisioner \"bad\", field spec.volumeDeletion.podTemplate.metadata.name, line 1: get_pvc(): may not read PersistentVolumeClaim team/data: namespace \"team\" is not the claim's namespace \"default\" and is not listed in spec.getPvcNamespaces",
    ),
    (
        "get_pvc in static validation, which has no claim",
        "provisioningModes: [Static]\nvolumeValidation:\n  podTemplate:\n    metadata:\n      name: \"{{ get_pvc('sample-claim', 'default').metadata.name }}\"\nvolumeStaging: {podTemplate: {}}\n",
        Eval::StaticValidation,
        "provisioner \"bad\", field spec.volumeValidation.podTemplate.metadata.name, line 1: get_pvc(): may not read PersistentVolumeClaim default/sample-claim: this phase has no claim, and namespace \"default\" is not listed in spec.getPvcNamespaces",
    ),
    (
        "get_pvc with a namespace that is not a string",
        "@STAGING@{{ get_pvc('data', 5).metadata.name }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: get_pvc(name, namespace): namespace must be a string, not a number",
    ),
    (
        "yaml = true with output that is not YAML",
        "@STAGING@{% set yaml = true %}key: [unclosed",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name: output of template with `yaml = true` is not valid YAML: did not find expected ',' or ']' at line 2 column 1, while parsing a flow sequence at line 1 column 6",
    ),
    (
        "yaml = true with an alias bomb",
        "@STAGING@{% set yaml = true %}a: &a [{{ 'x,' * 2000 }}x]\nb: [{{ '*a,' * 2000 }}*a]",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name: output of template with `yaml = true` is not valid YAML: b[67][675]: aliases expand the document by more than 4184287 bytes (are they repeated too often?) at line 1 column 1358",
    ),
    (
        "yaml set to a string",
        "@STAGING@{% set yaml = 'yes' %}a: 1",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name: variable `yaml` must be true or false, not string",
    ),
    (
        "yaml = true making a pod template of the wrong shape",
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate: \"{% set yaml = true %}spec: {containers: 5}\"\n",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.spec.containers: invalid type: integer `5`, expected a sequence",
    ),
    (
        "yaml = true making a pod template with a typo",
        "provisioningModes: [Static]\nvolumeUnstaging:\n  podTemplate: \"{% set yaml = true %}spec: {containers: [{name: c, image: i, comand: [x]}]}\"\nvolumeStaging: {podTemplate: {}}\n",
        Eval::Unstaging,
        "provisioner \"bad\", field spec.volumeUnstaging.podTemplate.spec.containers[0].comand: unknown field",
    ),
    (
        "boolean printed",
        "@STAGING@{{ readOnly }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: expression must evaluate to a string or a number, not a boolean",
    ),
    (
        "tobash of a list",
        "@STAGING@{{ accessModes | tobash }}",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.podTemplate.metadata.name, line 1: filter 'tobash' expects a string or a number, not a list",
    ),
    (
        "capacity that evaluates to no quantity",
        "provisioningModes: [Dynamic]\nvolumeValidation:\n  minCapacity: \"{{ 'lots' }}\"\n  podTemplate: {}\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
        Eval::Validation,
        "provisioner \"bad\", field spec.volumeValidation.minCapacity: \"lots\" is not a valid quantity: no digits",
    ),
    (
        "handle that evaluates to the empty string",
        "provisioningModes: [Dynamic]\nvolumeCreation:\n  handle: \"{{ '' }}\"\n  capacity: 1Gi\n  podTemplate: {}\nvolumeStaging: {podTemplate: {}}\n",
        Eval::Creation,
        "provisioner \"bad\", field spec.volumeCreation.handle: must evaluate to a non-empty string, not \"\"",
    ),
    (
        "timeout that evaluates to no duration",
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate: {}\n  timeout: \"{{ 'forever' }}\"\n",
        Eval::Staging,
        "provisioner \"bad\", field spec.volumeStaging.timeout: \"forever\" is not a duration such as 90s, 5m or 1h30m",
    ),
];

/// `@STAGING@T`: a Static provisioner whose staging pod name is template T.
fn expand_spec(spec: &str) -> String {
    match spec.strip_prefix("@STAGING@") {
        Some(template) => format!(
            "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    metadata:\n      name: {}\n",
            serde_json::to_string(template).unwrap()
        ),
        None => spec.to_owned(),
    }
}

#[test]
fn bad_evaluations_fail_with_exact_messages_and_produce_nothing() {
    let contexts = contexts();
    let mut wrong = Vec::new();
    for (row, spec, eval, expected) in RENDER_ROWS {
        let provisioner = CompiledProvisioner::from_yaml(&object(&expand_spec(spec)))
            .unwrap_or_else(|problems| panic!("{row}: does not compile:\n{problems}"));
        let message = match evaluate(&provisioner, *eval, &contexts) {
            Ok(produced) => {
                wrong.push(format!("{row}: evaluated, producing {produced:?}"));
                continue;
            }
            Err(err) => err.to_string(),
        };
        if print_messages() {
            eprintln!("{row}\n    {message:?}");
        }
        if message != *expected {
            wrong.push(format!(
                "{row}:\n  got      {message:?}\n  expected {expected:?}"
            ));
        }
        // Raw rendering produces nothing either, unless the fault is in the
        // shape of the result rather than in a template.
        let context = match eval {
            Eval::Validation => contexts.validation.value(),
            Eval::StaticValidation => contexts.static_validation.value(),
            Eval::Creation | Eval::Deletion => contexts.creation.value(),
            Eval::Staging | Eval::Unstaging => contexts.staging.value(),
        };
        if let Ok(raw) = provisioner.render_raw(phase_of(*eval), context) {
            let shape_only = [
                "pod template of the wrong shape",
                "pod template with a typo",
                "capacity",
                "handle",
                "timeout",
            ];
            if !shape_only.iter().any(|s| row.contains(s)) {
                wrong.push(format!("{row}: raw rendering produced {raw}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
