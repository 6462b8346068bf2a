//! Every templating rule of the PaV user guide, one test (or more) each.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use pav_templates::phase::{Creation, Deletion, Staging, Unstaging, Validation};
use pav_templates::{
    AccessMode, CompiledProvisioner, CreationContext, Error, Phase, PvcMap, StagingContext,
    ValidationContext, VolumeMode, samples,
};
use serde_json::{Value as Json, json};

/// A provisioner whose spec is `spec_yaml` (indented under `spec:`).
fn provisioner(spec_yaml: &str) -> Result<CompiledProvisioner, pav_templates::Problems> {
    let mut yaml = String::from(
        "apiVersion: pav.albertofaria.github.io/v1alpha1\nkind: PavProvisioner\nmetadata:\n  name: test-prov\nspec:\n",
    );
    for line in spec_yaml.lines() {
        yaml.push_str("  ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    CompiledProvisioner::from_yaml(&yaml)
}

fn compiled(spec_yaml: &str) -> CompiledProvisioner {
    provisioner(spec_yaml).unwrap_or_else(|problems| panic!("unexpected problems:\n{problems}"))
}

/// A Dynamic provisioner whose `volumeCreation.handle` is `template`.
fn with_handle(template: &str) -> CompiledProvisioner {
    let spec = json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": {"handle": template, "capacity": "1Gi"},
        "volumeStaging": {"podTemplate": {}},
    });
    from_spec(spec)
}

fn from_spec(spec: Json) -> CompiledProvisioner {
    CompiledProvisioner::from_json(json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1",
        "kind": "PavProvisioner",
        "metadata": {"name": "test-prov"},
        "spec": spec,
    }))
    .unwrap_or_else(|problems| panic!("unexpected problems:\n{problems}"))
}

fn render_handle(template: &str) -> Result<Option<String>, Error> {
    with_handle(template)
        .render::<Creation>(&samples::creation_context())
        .map(|c| c.handle)
}

fn handle(template: &str) -> String {
    render_handle(template).unwrap().unwrap()
}

fn raw_staging(spec_yaml: &str) -> Json {
    compiled(spec_yaml)
        .render_raw(Phase::Staging, samples::staging_context().value())
        .unwrap()
}

const STAGING_PREFIX: &str = "provisioningModes: [Static]\n";

#[test]
fn every_string_field_however_nested_is_a_template_and_other_scalars_stay() {
    let raw = raw_staging(&format!(
        "{STAGING_PREFIX}volumeStaging:\n  podTemplate:\n    spec:\n      containers:\n        - name: \"{{{{ handle[:3] }}}}\"\n          args: [\"x{{{{ 1 + 1 }}}}\", plain]\n          env: [{{name: A, value: \"{{{{ capacity }}}}\"}}]\n          securityContext: {{runAsUser: 7, privileged: true}}\n      activeDeadlineSeconds: 5\n      nodeName: null\n"
    ));
    assert_eq!(
        raw,
        json!({"podTemplate": {"spec": {
            "containers": [{
                "name": "pvc",
                "args": ["x2", "plain"],
                "env": [{"name": "A", "value": "1073741824"}],
                "securityContext": {"runAsUser": 7, "privileged": true},
            }],
            "activeDeadlineSeconds": 5,
            "nodeName": null,
        }}})
    );
}

#[test]
fn provisioning_modes_are_not_templates() {
    let problems =
        provisioner("provisioningModes: [\"{{ 'Dynamic' }}\"]\nvolumeStaging: {podTemplate: {}}\n")
            .unwrap_err();
    assert_eq!(
        problems.to_string(),
        "provisioner \"test-prov\", field spec.provisioningModes[0]: \"{{ 'Dynamic' }}\" is not one of Dynamic, Static"
    );
}

#[test]
fn expressions_yield_strings_or_numbers() {
    assert_eq!(
        handle("{{ 'a' }}-{{ 42 }}-{{ 2.5 }}-{{ 10 / 4 }}-{{ 7 // 2 }}"),
        "a-42-2.5-2.5-3"
    );
    for (template, what) in [
        ("{{ true }}", "a boolean"),
        ("{{ requestedAccessModes }}", "a list"),
        ("{{ params }}", "a mapping"),
        ("{{ none }}", "none"),
        ("{{ requestedMaxCapacity }}", "none"),
    ] {
        let err = render_handle(template).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "provisioner \"test-prov\", field spec.volumeCreation.handle, line 1: expression must evaluate to a string or a number, not {what}"
            ),
            "{template}"
        );
    }
}

#[test]
fn errors_name_the_field_path_and_line() {
    let provisioner = compiled(
        r#"provisioningModes: [Dynamic]
volumeCreation:
  podTemplate:
    spec:
      containers:
        - name: c
          args:
            - fine
            - "first line\n{{ nope }}"
volumeStaging: {podTemplate: {}}
"#,
    );
    let err = provisioner
        .render::<Creation>(&samples::creation_context())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "provisioner \"test-prov\", field spec.volumeCreation.podTemplate.spec.containers[0].args[1], line 2: expression evaluated to an undefined value"
    );
    let location = err.location();
    assert_eq!(location.provisioner, "test-prov");
    assert_eq!(
        location.path,
        "spec.volumeCreation.podTemplate.spec.containers[0].args[1]"
    );
    assert_eq!(location.line, Some(2));
}

#[test]
fn undefined_values_may_be_tested_but_not_output() {
    assert_eq!(
        handle("{{ params.missing or 'fallback' }}{% if params.missing is defined %}!{% endif %}"),
        "fallback"
    );
    assert_eq!(handle("{{ params.missing | default('d') }}"), "d");
    let err = render_handle("{{ params.missing }}").unwrap_err();
    assert!(
        err.to_string()
            .ends_with("expression evaluated to an undefined value"),
        "{err}"
    );
    // Attribute access on an undefined value is an error, as in Jinja2.
    let err = render_handle("{{ params.missing.deeper }}").unwrap_err();
    assert!(matches!(err, Error::Render { .. }), "{err}");
    assert_eq!(err.location().path, "spec.volumeCreation.handle");
}

#[test]
fn yaml_mode_parses_the_output() {
    let raw = raw_staging(&format!(
        "{STAGING_PREFIX}volumeStaging:\n  podTemplate:\n    spec:\n      nodeSelector: \"{{% set yaml = true %}}{{{{ {{'a': capacity}} | tojson }}}}\"\n      n: \"{{% set yaml = true %}}{{{{ capacity }}}}\"\n      s: \"{{{{ capacity }}}}\"\n      l: |\n        {{% set yaml = true %}}\n        - {{{{ handle }}}}\n        - {{{{ 1 }}}}\n"
    ));
    let spec = &raw["podTemplate"]["spec"];
    assert_eq!(spec["nodeSelector"], json!({"a": 1073741824}));
    assert_eq!(spec["n"], json!(1073741824));
    assert_eq!(spec["s"], json!("1073741824"));
    assert_eq!(
        spec["l"],
        json!(["pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21", 1])
    );
}

#[test]
fn yaml_mode_is_not_recursive() {
    let raw = raw_staging(&format!(
        "{STAGING_PREFIX}volumeStaging:\n  podTemplate:\n    spec:\n      x: \"{{% set yaml = true %}}inner: \\\"{{{{ '{{{{' }}}} handle }}}}\\\"\"\n"
    ));
    assert_eq!(
        raw["podTemplate"]["spec"]["x"],
        json!({"inner": "{{ handle }}"})
    );
}

#[test]
fn yaml_mode_set_conditionally_or_false() {
    assert_eq!(
        handle("{% if true %}{% set yaml = true %}{% endif %}'x: 1'"),
        "x: 1"
    );
    assert_eq!(handle("{% set yaml = false %}[1]"), "[1]");
    let err = render_handle("{% set yaml = 'yes' %}1").unwrap_err();
    assert_eq!(
        err.to_string(),
        "provisioner \"test-prov\", field spec.volumeCreation.handle: variable `yaml` must be true or false, not string"
    );
}

#[test]
fn yaml_mode_invalid_yaml_is_an_error_naming_the_field() {
    let err = render_handle("{% set yaml = true %}[unclosed").unwrap_err();
    assert!(matches!(err, Error::Yaml { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("provisioner \"test-prov\", field spec.volumeCreation.handle: output of template with `yaml = true` is not valid YAML"),
        "{err}"
    );
}

#[test]
fn yaml_mode_may_produce_a_whole_phase_or_list() {
    let provisioner = from_spec(json!({
        "provisioningModes": ["Dynamic"],
        "volumeValidation": "{% set yaml = true %}\nvolumeModes: [{{ params.mode | default('Block') }}]\nminCapacity: 1Ki\n",
        "volumeCreation": {"capacity": "{% set yaml = true %}{{ requestedMinCapacity * 2 }}"},
        "volumeStaging": {"podTemplate": {}},
    }));
    let validation = provisioner
        .render::<Validation>(&samples::validation_context())
        .unwrap();
    assert_eq!(validation.volume_modes, vec![VolumeMode::Block]);
    assert_eq!(validation.min_capacity, 1024);
    let creation = provisioner
        .render::<Creation>(&samples::creation_context())
        .unwrap();
    assert_eq!(creation.capacity, Some(2 << 30));
}

#[test]
fn block_lines_disappear_and_indentation_before_blocks_is_stripped() {
    let template = "set -e\n    {% if true %}\n    echo yes\n    {% endif %}\n  {% for i in [1, 2] %}\nn={{ i }}\n  {% endfor %}\ndone\n";
    assert_eq!(handle(template), "set -e\n    echo yes\nn=1\nn=2\ndone");
}

#[test]
fn a_single_trailing_newline_is_dropped_including_in_plain_strings() {
    assert_eq!(handle("{{ 'a' }}\n"), "a");
    assert_eq!(handle("{{ 'a' }}\n\n"), "a\n");
    let raw = raw_staging(&format!(
        "{STAGING_PREFIX}volumeStaging:\n  podTemplate:\n    metadata:\n      annotations:\n        x: |\n          plain text\n"
    ));
    assert_eq!(
        raw["podTemplate"]["metadata"]["annotations"]["x"],
        json!("plain text")
    );
}

#[test]
fn variable_expressions_keep_surrounding_whitespace() {
    assert_eq!(handle("  {{ 'a' }}  \n  b"), "  a  \n  b");
}

#[test]
fn literal_delimiters_are_escaped_jinja_style() {
    assert_eq!(
        handle("{{ '{{' }} x }} {{ '{%' }} {{ '{#' }}"),
        "{{ x }} {% {#"
    );
    assert_eq!(handle("{% raw %}{{ kept }}{% endraw %}"), "{{ kept }}");
    assert_eq!(handle("{# a comment #}c"), "c");
}

#[test]
fn tobash_escapes_newlines_quotes_empty_and_unicode() {
    let cases = [
        ("{{ '' | tobash }}", "''"),
        ("{{ 'plain' | tobash }}", "plain"),
        ("{{ 'two\\nlines' | tobash }}", "two$'\\n'lines"),
        ("{{ \"it's\" | tobash }}", "'it'\"'\"'s'"),
        ("{{ 'ü ñ 😀' | tobash }}", "'ü ñ 😀'"),
        ("{{ 12 | tobash }}", "12"),
    ];
    for (template, expected) in cases {
        assert_eq!(handle(template), expected, "{template}");
    }
}

/// `bash -c "printf %s $(tobash s)"` must print `s` exactly.
#[test]
fn tobash_round_trips_through_real_bash() {
    let inputs = [
        "",
        "plain",
        "two words",
        "a\nb",
        "\n",
        "\n\nx\n\n",
        "it's \"quoted\"",
        "$(touch /tmp/pav-pwned) `id` $HOME ${x}",
        "back\\slash",
        "tab\there",
        "*?[]{}~!#&|;<>()",
        "ünïcødé 😀",
        "-n",
        "'",
        "\r\n",
    ];
    for input in inputs {
        let token = pav_templates::engine::tobash(input);
        assert!(!token.contains('\n'), "{token:?} contains a newline");
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {token}"))
            .output()
            .expect("bash runs");
        assert!(
            output.status.success(),
            "{token:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            input,
            "token {token:?}"
        );
    }
    assert!(!std::path::Path::new("/tmp/pav-pwned").exists());
}

#[test]
fn tojson_output_has_no_newlines_and_mixes_with_yaml() {
    let out = handle("{{ {'k': 'line1\\nline2', 'a': [1, 'x']} | tojson }}");
    assert_eq!(out, r#"{"a": [1, "x"], "k": "line1\nline2"}"#);
    assert!(!out.contains('\n'));
}

/// A Dynamic provisioner whose `volumeCreation.handle` is `template` and
/// whose `spec.getPvcNamespaces` is `namespaces`.
fn with_handle_reading(template: &str, namespaces: Json) -> CompiledProvisioner {
    from_spec(json!({
        "provisioningModes": ["Dynamic"],
        "getPvcNamespaces": namespaces,
        "volumeCreation": {"handle": template, "capacity": "1Gi"},
        "volumeStaging": {"podTemplate": {}},
    }))
}

fn claim(namespace: &str, name: &str) -> PersistentVolumeClaim {
    let mut pvc = PersistentVolumeClaim::default();
    pvc.metadata.name = Some(name.into());
    pvc.metadata.namespace = Some(namespace.into());
    pvc.metadata.annotations = Some([("size".to_owned(), format!("{namespace}-size"))].into());
    pvc
}

#[test]
fn get_pvc_reads_through_the_lookup() {
    let provisioner = with_handle_reading(
        "{{ get_pvc('data', 'team').metadata.annotations.size }}-{{ get_pvc('data', 'team').kind }}",
        json!(["team"]),
    );
    let context = samples::creation_context()
        .with_pvc_lookup(Arc::new(PvcMap::from_iter([claim("team", "data")])));
    let creation = provisioner.render::<Creation>(&context).unwrap();
    assert_eq!(
        creation.handle.as_deref(),
        Some("team-size-PersistentVolumeClaim")
    );

    let missing = with_handle_reading("{{ get_pvc('nope', 'team').kind }}", json!(["team"]))
        .render::<Creation>(&context)
        .unwrap_err();
    assert_eq!(
        missing.to_string(),
        "provisioner \"test-prov\", field spec.volumeCreation.handle, line 1: get_pvc(): PersistentVolumeClaim team/nope does not exist"
    );
    let no_lookup = render_handle("{{ get_pvc('data', 'default').kind }}").unwrap_err();
    assert_eq!(
        no_lookup.to_string(),
        "provisioner \"test-prov\", field spec.volumeCreation.handle, line 1: get_pvc() has no claim lookup in this evaluation"
    );
}

/// Without `spec.getPvcNamespaces` only the claim's own namespace may be
/// read; listed namespaces and `"*"` widen that, in every phase.
#[test]
fn get_pvc_reads_the_claims_namespace_and_listed_ones() {
    let lookup = Arc::new(PvcMap::from_iter([
        claim("default", "data"),
        claim("team", "data"),
        claim("other", "data"),
    ]));
    let read = |namespaces: Json, namespace: &str| {
        let template =
            format!("{{{{ get_pvc('data', '{namespace}').metadata.annotations.size }}}}");
        with_handle_reading(&template, namespaces)
            .render::<Creation>(&samples::creation_context().with_pvc_lookup(lookup.clone()))
            .map(|c| c.handle.unwrap())
            .map_err(|e| e.to_string())
    };
    assert_eq!(read(Json::Null, "default").unwrap(), "default-size");
    assert_eq!(read(json!([]), "default").unwrap(), "default-size");
    assert_eq!(read(json!(["team"]), "team").unwrap(), "team-size");
    assert_eq!(read(json!(["team", "*"]), "other").unwrap(), "other-size");
    for (namespaces, namespace) in [
        (Json::Null, "team"),
        (json!([]), "team"),
        (json!(["team"]), "other"),
    ] {
        assert_eq!(
            read(namespaces.clone(), namespace).unwrap_err(),
            format!(
                "provisioner \"test-prov\", field spec.volumeCreation.handle, line 1: get_pvc(): may not read PersistentVolumeClaim {namespace}/data: namespace \"{namespace}\" is not the claim's namespace \"default\" and is not listed in spec.getPvcNamespaces"
            ),
            "{namespaces} {namespace}"
        );
    }

    // Staging reads relative to the claim through which the volume is used.
    let staging = |namespaces: Json| {
        from_spec(json!({
            "provisioningModes": ["Static"],
            "getPvcNamespaces": namespaces,
            "volumeStaging": {"podTemplate": {"metadata": {"annotations": {
                "own": "{{ get_pvc('data', pvc.metadata.namespace).metadata.annotations.size }}",
                "team": "{{ get_pvc('data', 'team').metadata.annotations.size }}",
            }}}},
        }))
        .render::<Staging>(&samples::staging_context().with_pvc_lookup(lookup.clone()))
        .map(|s| s.pod_template.metadata.unwrap().annotations.unwrap())
        .map_err(|e| e.to_string())
    };
    let annotations = staging(json!(["team"])).unwrap();
    assert_eq!(annotations["own"], "default-size");
    assert_eq!(annotations["team"], "team-size");
    assert_eq!(
        staging(Json::Null).unwrap_err(),
        "provisioner \"test-prov\", field spec.volumeStaging.podTemplate.metadata.annotations.team, line 1: get_pvc(): may not read PersistentVolumeClaim team/data: namespace \"team\" is not the claim's namespace \"default\" and is not listed in spec.getPvcNamespaces"
    );

    // Static validation has no claim: only listed namespaces.
    let static_validation = |namespaces: Json| {
        from_spec(json!({
            "provisioningModes": ["Static"],
            "getPvcNamespaces": namespaces,
            "volumeValidation": {"minCapacity": "{{ get_pvc('data', 'default').metadata.annotations.size | length }}"},
            "volumeStaging": {"podTemplate": {}},
        }))
        .render::<Validation>(
            &ValidationContext::static_pv(&samples::pv())
                .unwrap()
                .with_pvc_lookup(lookup.clone()),
        )
        .map(|v| v.min_capacity)
        .map_err(|e| e.to_string())
    };
    assert_eq!(static_validation(json!(["default"])).unwrap(), 12);
    assert_eq!(static_validation(json!(["*"])).unwrap(), 12);
    assert_eq!(
        static_validation(Json::Null).unwrap_err(),
        "provisioner \"test-prov\", field spec.volumeValidation.minCapacity, line 1: get_pvc(): may not read PersistentVolumeClaim default/data: this phase has no claim, and namespace \"default\" is not listed in spec.getPvcNamespaces"
    );
}

/// A template cannot widen what `get_pvc` may read: the policy lives in a
/// global whose name is not an identifier, and the claim's namespace is
/// fixed when the context is built, not read from `pvc` at call time.
#[test]
fn templates_cannot_widen_get_pvc() {
    let lookup = Arc::new(PvcMap::from_iter([claim("team", "data")]));
    for template in [
        "{% set getPvcNamespaces = ['*'] %}{{ get_pvc('data', 'team').kind }}",
        "{% set pvc = {'metadata': {'namespace': 'team'}} %}{{ get_pvc('data', 'team').kind }}",
        "{% with pvc = {'metadata': {'namespace': 'team'}} %}{{ get_pvc('data', 'team').kind }}{% endwith %}",
    ] {
        let err = with_handle_reading(template, Json::Null)
            .render::<Creation>(&samples::creation_context().with_pvc_lookup(lookup.clone()))
            .unwrap_err();
        assert!(
            err.to_string().ends_with(
                "get_pvc(): may not read PersistentVolumeClaim team/data: namespace \"team\" is not the claim's namespace \"default\" and is not listed in spec.getPvcNamespaces"
            ),
            "{template}: {err}"
        );
    }
}

#[test]
fn dynamic_validation_context() {
    let provisioner = with_handle(
        "{{ requestedVolumeMode }}|{{ requestedAccessModes | join(',') }}|{{ requestedMinCapacity }}|{{ 'none' if requestedMaxCapacity is none else 'set' }}|{{ params | length }}|{{ sc.metadata.name }}|{{ pvc.spec.storageClassName }}|{{ pvc.apiVersion }}/{{ pvc.kind }}|{{ defaultHandle }}",
    );
    let creation = provisioner
        .render::<Creation>(&samples::creation_context())
        .unwrap();
    assert_eq!(
        creation.handle.as_deref(),
        Some(
            "Filesystem|ReadWriteOnce|1073741824|none|0|sample-class|sample-class|v1/PersistentVolumeClaim|pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21"
        )
    );
    let names: Vec<String> = samples::validation_context()
        .value()
        .try_iter()
        .unwrap()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(
        names,
        [
            "requestedVolumeMode",
            "requestedAccessModes",
            "requestedMinCapacity",
            "requestedMaxCapacity",
            "params",
            "sc",
            "pvc",
            "get_pvc"
        ]
    );
}

#[test]
fn limits_and_requests_are_rounded_up_to_bytes() {
    let mut pvc = samples::pvc();
    let resources = pvc.spec.as_mut().unwrap().resources.as_mut().unwrap();
    resources.requests.as_mut().unwrap().insert(
        "storage".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1500m".into()),
    );
    resources.limits = Some(
        [(
            "storage".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("2k".into()),
        )]
        .into(),
    );
    let context = CreationContext::new(&pvc, &samples::storage_class()).unwrap();
    let creation = with_handle("{{ requestedMinCapacity }}-{{ requestedMaxCapacity }}")
        .render::<Creation>(&context)
        .unwrap();
    assert_eq!(creation.handle.as_deref(), Some("2-2000"));
}

#[test]
fn static_validation_context() {
    let provisioner = from_spec(json!({
        "provisioningModes": ["Static"],
        "volumeValidation": {"podTemplate": {"metadata": {"name":
            "{{ requestedVolumeMode }}|{{ requestedAccessModes | join(',') }}|{{ requestedMinCapacity }}|{{ requestedMaxCapacity }}|{{ handle }}|{{ pv.metadata.name }}|{{ 'sc' if sc is defined else '-' }}|{{ 'pvc' if pvc is defined else '-' }}"}}},
        "volumeStaging": {"podTemplate": {}},
    }));
    let context = ValidationContext::static_pv(&samples::pv()).unwrap();
    let validation = provisioner.render::<Validation>(&context).unwrap();
    let name = validation
        .pod_template
        .unwrap()
        .metadata
        .unwrap()
        .name
        .unwrap();
    assert_eq!(
        name,
        "Filesystem|ReadWriteOnce|1073741824|1073741824|pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21|pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21|-|-"
    );
}

#[test]
fn staging_context() {
    let mut pv = samples::pv();
    pv.spec
        .as_mut()
        .unwrap()
        .csi
        .as_mut()
        .unwrap()
        .volume_attributes = Some([("k".to_owned(), "v".to_owned())].into());
    let context = StagingContext::new(&samples::pvc(), &pv, &samples::node(), true).unwrap();
    let provisioner = compiled(
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    metadata:\n      name: \"{{ volumeMode }}|{{ accessModes | join(',') }}|{{ capacity }}|{{ params.k }}|{{ handle }}|{{ 'ro' if readOnly else 'rw' }}|{{ pvc.metadata.name }}|{{ pv.kind }}|{{ node.metadata.labels['kubernetes.io/hostname'] }}\"\n",
    );
    let staging = provisioner.render::<Staging>(&context).unwrap();
    assert_eq!(
        staging.pod_template.metadata.unwrap().name.unwrap(),
        "Filesystem|ReadWriteOnce|1073741824|v|pvc-6c1b1c5e-6f0e-4b7a-9d2e-5a1f3c0d8e21|ro|sample-claim|PersistentVolume|sample-node"
    );
}

#[test]
fn validation_defaults_follow_the_guide() {
    let provisioner = compiled(
        "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
    );
    let validation = provisioner
        .render::<Validation>(&samples::validation_context())
        .unwrap();
    assert_eq!(validation.volume_modes, vec![VolumeMode::Filesystem]);
    assert_eq!(validation.access_modes, AccessMode::DEFAULT.to_vec());
    assert_eq!(validation.min_capacity, 1);
    assert_eq!(validation.max_capacity, None);
    assert_eq!(validation.pod_template, None);
}

/// `ReadWriteOncePod` (newer than the guide) is served only when named.
#[test]
fn read_write_once_pod_is_admitted_only_when_named() {
    let rwop = [AccessMode::ReadWriteOncePod];
    let by_default = compiled(
        "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
    );
    let rules = (by_default.render::<Validation>(&samples::validation_context())).unwrap();
    let refused = rules
        .admits(VolumeMode::Filesystem, &rwop, 1, None)
        .unwrap_err();
    assert!(
        refused.to_string().contains("ReadWriteOncePod"),
        "{refused}"
    );
    let named = compiled(
        "provisioningModes: [Dynamic]\nvolumeValidation: {accessModes: [ReadWriteOnce, ReadWriteOncePod]}\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
    );
    let rules = (named.render::<Validation>(&samples::validation_context())).unwrap();
    assert!(rules.admits(VolumeMode::Filesystem, &rwop, 1, None).is_ok());
}

#[test]
fn capacities_are_quantities_converted_to_bytes() {
    let provisioner = compiled(
        "provisioningModes: [Dynamic]\nvolumeValidation:\n  minCapacity: 1.5Ki\n  maxCapacity: \"{{ 2 }}Gi\"\nvolumeCreation: {capacity: 1e3}\nvolumeStaging: {podTemplate: {}}\n",
    );
    let validation = provisioner
        .render::<Validation>(&samples::validation_context())
        .unwrap();
    assert_eq!(
        (validation.min_capacity, validation.max_capacity),
        (1536, Some(2 << 30))
    );
    let creation = provisioner
        .render::<Creation>(&samples::creation_context())
        .unwrap();
    assert_eq!(creation.capacity, Some(1000));
}

#[test]
fn min_capacity_above_max_is_refused_when_written_and_when_evaluated() {
    let problems = provisioner(
        "provisioningModes: [Dynamic]\nvolumeValidation: {minCapacity: 2Gi, maxCapacity: 1Gi}\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
    )
    .unwrap_err();
    assert_eq!(
        problems.to_string(),
        "provisioner \"test-prov\", field spec.volumeValidation.maxCapacity: is 1073741824 bytes, less than minCapacity (2147483648 bytes)"
    );
    let provisioner = compiled(
        "provisioningModes: [Dynamic]\nvolumeValidation: {minCapacity: 2Gi, maxCapacity: \"{{ 1 }}Gi\"}\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n",
    );
    let err = provisioner
        .render::<Validation>(&samples::validation_context())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "provisioner \"test-prov\", field spec.volumeValidation.maxCapacity: evaluates to 1073741824 bytes, less than minCapacity (2147483648 bytes)"
    );
}

#[test]
fn dynamic_only_fields_and_mandatory_staging() {
    let problems = provisioner(
        "provisioningModes: [Static]\nvolumeCreation: {capacity: 1Gi}\nvolumeDeletion: {}\n",
    )
    .unwrap_err();
    let messages: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "provisioner \"test-prov\", field spec.volumeCreation: may only be specified if spec.provisioningModes contains Dynamic",
            "provisioner \"test-prov\", field spec.volumeDeletion: may only be specified if spec.provisioningModes contains Dynamic",
            "provisioner \"test-prov\", field spec.volumeStaging: is required (volumeStaging.podTemplate is mandatory)",
        ]
    );
    let problems = provisioner("provisioningModes: [Dynamic]\nvolumeStaging: {}\n").unwrap_err();
    let messages: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "provisioner \"test-prov\", field spec.volumeStaging.podTemplate: is required",
            "provisioner \"test-prov\", field spec.volumeCreation: must specify capacity or podTemplate (or both) when spec.provisioningModes contains Dynamic",
        ]
    );
}

#[test]
fn schema_problems_are_all_reported_with_paths() {
    let problems = provisioner(
        "provisioningModes: [Dynamic, Dynamic, Sometimes]\nvolumeValidation:\n  volumeModes: [Filesystem, Tape]\n  accessModes: []\n  minCapacity: lots\n  podTemplat: {}\nvolumeCreation: {capacity: 0, handle: 5}\nvolumeStaging: {podTemplate: 3}\nextra: 1\n",
    )
    .unwrap_err();
    let messages: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "provisioner \"test-prov\", field spec.provisioningModes[1]: is listed twice",
            "provisioner \"test-prov\", field spec.provisioningModes[2]: \"Sometimes\" is not one of Dynamic, Static",
            "provisioner \"test-prov\", field spec.extra: unknown field",
            "provisioner \"test-prov\", field spec.volumeValidation.volumeModes[1]: \"Tape\" is not one of Filesystem, Block",
            "provisioner \"test-prov\", field spec.volumeValidation.accessModes: must not be empty",
            "provisioner \"test-prov\", field spec.volumeValidation.minCapacity: \"lots\" is not a valid quantity: no digits",
            "provisioner \"test-prov\", field spec.volumeValidation.podTemplat: unknown field (allowed: volumeModes, accessModes, minCapacity, maxCapacity, podTemplate, timeout)",
            "provisioner \"test-prov\", field spec.volumeCreation.capacity: must be a positive quantity, not number 0",
            "provisioner \"test-prov\", field spec.volumeCreation.handle: must be a string, not number 5",
            "provisioner \"test-prov\", field spec.volumeStaging.podTemplate: must be a PodTemplateSpec object or a template, not number 3",
        ]
    );
}

#[test]
fn header_problems_are_reported() {
    let problems = CompiledProvisioner::from_yaml("apiVersion: v1\nkind: Pod\nmetadata: {name: Not_A_Label}\nspec:\n  provisioningModes: [Static]\n  volumeStaging: {podTemplate: {}}\n").unwrap_err();
    let messages: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "provisioner \"Not_A_Label\", field apiVersion: is \"v1\", expected \"pav.albertofaria.github.io/v1alpha1\"",
            "provisioner \"Not_A_Label\", field kind: is \"Pod\", expected \"PavProvisioner\"",
            "provisioner \"Not_A_Label\", field metadata.name: must be a DNS label: at most 63 lowercase alphanumerics or '-', starting and ending with an alphanumeric",
        ]
    );
    let malformed = CompiledProvisioner::from_yaml("spec: [unclosed").unwrap_err();
    assert!(
        malformed
            .to_string()
            .starts_with("provisioner \"<unparsed>\", field <document>: "),
        "{malformed}"
    );
}

#[test]
fn syntax_errors_are_found_at_compile_time_with_line() {
    let problems = provisioner(
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec:\n      containers:\n        - args: [\"ok\", \"line one\\n{% if %}\"]\n",
    )
    .unwrap_err();
    assert_eq!(problems.0.len(), 1);
    let err = &problems.0[0];
    assert!(matches!(err, Error::Syntax { .. }));
    assert_eq!(
        err.location().path,
        "spec.volumeStaging.podTemplate.spec.containers[0].args[1]"
    );
    assert_eq!(err.location().line, Some(2));
    assert!(err.to_string().contains("template syntax error"), "{err}");
}

#[test]
fn pod_template_fields_are_checked_when_written() {
    let problems = provisioner(
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec:\n      containers:\n        - name: c\n          comand: [sh]\n",
    )
    .unwrap_err();
    assert_eq!(
        problems.to_string(),
        "provisioner \"test-prov\", field spec.volumeStaging.podTemplate.spec.containers[0].comand: unknown field"
    );
    let problems = provisioner(
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec:\n      activeDeadlineSeconds: \"{{ 5 }}\"\n",
    )
    .unwrap_err();
    let message = problems.to_string();
    assert!(
        message.starts_with("provisioner \"test-prov\", field spec.volumeStaging.podTemplate.spec.activeDeadlineSeconds: invalid type: string"),
        "{message}"
    );
    assert!(
        message.ends_with(
            "(a template here yields a string; add `{% set yaml = true %}` for other types)"
        ),
        "{message}"
    );
}

#[test]
fn pod_templates_shaped_by_yaml_mode_are_checked_when_evaluated() {
    let provisioner = compiled(
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec: \"{% set yaml = true %}containers: [{name: c, comand: [sh]}]\"\n",
    );
    let err = provisioner
        .render::<Staging>(&samples::staging_context())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "provisioner \"test-prov\", field spec.volumeStaging.podTemplate.spec.containers[0].comand: unknown field"
    );
    let provisioner = compiled(
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec:\n      activeDeadlineSeconds: \"{% set yaml = true %}{{ 'soon' }}\"\n",
    );
    let err = provisioner
        .render::<Staging>(&samples::staging_context())
        .unwrap_err();
    assert!(
        err.to_string().starts_with("provisioner \"test-prov\", field spec.volumeStaging.podTemplate.spec.activeDeadlineSeconds: invalid type"),
        "{err}"
    );
    let provisioner = compiled(
        "provisioningModes: [Static]\nvolumeStaging:\n  podTemplate:\n    spec:\n      activeDeadlineSeconds: \"{% set yaml = true %}{{ capacity // 1073741824 }}\"\n",
    );
    let staging = provisioner
        .render::<Staging>(&samples::staging_context())
        .unwrap();
    assert_eq!(
        staging.pod_template.spec.unwrap().active_deadline_seconds,
        Some(1)
    );
}

#[test]
fn unknown_fields_produced_by_yaml_mode_are_refused() {
    let provisioner = from_spec(json!({
        "provisioningModes": ["Dynamic"],
        "volumeCreation": "{% set yaml = true %}{capacity: 1Gi, size: 2Gi}",
        "volumeStaging": {"podTemplate": {}},
    }));
    let err = provisioner
        .render::<Creation>(&samples::creation_context())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "provisioner \"test-prov\", field spec.volumeCreation.size: unknown field (allowed: handle, capacity, topology, podTemplate, timeout)"
    );
}

#[test]
fn templates_that_loop_forever_run_out_of_fuel() {
    let err = render_handle(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("evaluation budget exhausted"),
        "{err}"
    );
}

#[test]
fn recursion_is_bounded() {
    let err = render_handle("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").unwrap_err();
    assert!(matches!(err, Error::Render { .. }), "{err}");
}

#[test]
fn huge_outputs_are_refused() {
    let err = render_handle("{{ 'x' * 2000000 }}").unwrap_err();
    assert!(matches!(err, Error::Render { .. }), "{err}");
}

#[test]
fn compiled_once_rendered_for_many_volumes() {
    let provisioner = with_handle("vol-{{ pvc.metadata.name }}");
    let mut handles = Vec::new();
    for name in ["a", "b", "c"] {
        let mut pvc = samples::pvc();
        pvc.metadata.name = Some(name.into());
        let context = CreationContext::new(&pvc, &samples::storage_class()).unwrap();
        handles.push(
            provisioner
                .render::<Creation>(&context)
                .unwrap()
                .handle
                .unwrap(),
        );
    }
    assert_eq!(handles, ["vol-a", "vol-b", "vol-c"]);
}

#[test]
fn context_objects_are_checked() {
    let mut pvc = samples::pvc();
    pvc.spec.as_mut().unwrap().resources = None;
    let err = CreationContext::new(&pvc, &samples::storage_class()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "provisioner \"PersistentVolumeClaim default/sample-claim\", field spec.resources.requests.storage: is required"
    );
}

#[test]
fn the_examples_check_and_render_every_phase_they_have() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for example in ["hello-world", "cloud-bucket", "block-encryption"] {
        let dir = root.join(example);
        let text = std::fs::read_to_string(dir.join("provisioner.yaml")).unwrap();
        let provisioner =
            CompiledProvisioner::from_yaml(&text).unwrap_or_else(|p| panic!("{example}: {p}"));
        let pvc: PersistentVolumeClaim =
            serde_yaml::from_str(&std::fs::read_to_string(dir.join("pvc.yaml")).unwrap()).unwrap();
        let sc: k8s_openapi::api::storage::v1::StorageClass =
            serde_yaml::from_str(&std::fs::read_to_string(dir.join("storageclass.yaml")).unwrap())
                .unwrap();
        // As dynamic provisioning does: the volume carries the class parameters.
        let mut pv = samples::pv();
        let pv_spec = pv.spec.as_mut().unwrap();
        pv_spec.volume_mode = pvc.spec.as_ref().unwrap().volume_mode.clone();
        pv_spec.csi.as_mut().unwrap().volume_attributes = sc.parameters.clone();
        let validation = provisioner
            .render::<Validation>(&ValidationContext::dynamic(&pvc, &sc).unwrap())
            .unwrap();
        let requested_mode = pvc.spec.as_ref().unwrap().volume_mode.as_deref().unwrap();
        let mode = if requested_mode == "Block" {
            VolumeMode::Block
        } else {
            VolumeMode::Filesystem
        };
        validation
            .admits(mode, &[], 1, None)
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        let creation_context = CreationContext::new(&pvc, &sc).unwrap();
        provisioner
            .render::<Creation>(&creation_context)
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        provisioner
            .render::<Deletion>(&creation_context)
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        let staging_context = StagingContext::new(&pvc, &pv, &samples::node(), false).unwrap();
        provisioner
            .render::<Staging>(&staging_context)
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        provisioner
            .render::<Unstaging>(&staging_context)
            .unwrap_or_else(|e| panic!("{example}: {e}"));
    }
}

#[test]
fn phases_may_set_a_timeout() {
    let timed = compiled(
        "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi, timeout: \"{{ params.timeout | default('10m') }}\"}\nvolumeStaging: {podTemplate: {}, timeout: 90s}\n",
    );
    let creation = timed
        .render::<Creation>(&samples::creation_context())
        .unwrap();
    assert_eq!(creation.timeout, Some(std::time::Duration::from_secs(600)));
    let staging = timed
        .render::<Staging>(&samples::staging_context())
        .unwrap();
    assert_eq!(staging.timeout, Some(std::time::Duration::from_secs(90)));
    let validation = timed
        .render::<Validation>(&samples::validation_context())
        .unwrap();
    assert_eq!(validation.timeout, None);

    let problems = provisioner(
        "provisioningModes: [Static]\nvolumeStaging: {podTemplate: {}, timeout: soon}\n",
    )
    .unwrap_err();
    assert_eq!(
        problems.to_string(),
        "provisioner \"test-prov\", field spec.volumeStaging.timeout: \"soon\" is not a duration such as 90s, 5m or 1h30m"
    );
}
