//! Input that used to overflow the stack, spin, leak or parse in
//! quadratic time, each run where the drivers render: on a thread with a
//! 2 MiB stack (tokio's blocking threads). Every case must end in a clear
//! error, in work bounded by the limits it names; a stack regression
//! aborts the whole test binary instead of failing one assertion.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use minijinja::value::{Object, Value};
use pav_templates::engine::MAX_VALUE_DEPTH;
use pav_templates::engine::expression_depth::MAX_EXPRESSION_DEPTH;
use pav_templates::yaml::MAX_YAML_FLOW_DEPTH;
use pav_templates::{CompiledProvisioner, Phase, Problems, samples};

/// The stack of tokio's blocking threads, on which the drivers render.
const DRIVER_STACK_BYTES: usize = 2 << 20;

const FIELD: &str = "spec.volumeStaging.podTemplate.metadata.name";

/// Runs `work` on a thread with the drivers' stack.
fn on_driver_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(DRIVER_STACK_BYTES)
        .spawn(work)
        .unwrap()
        .join()
        .unwrap()
}

/// A provisioner whose staging pod's name is `template`.
fn compile(template: &str) -> Result<CompiledProvisioner, Problems> {
    CompiledProvisioner::from_json(serde_json::json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1",
        "kind": "PavProvisioner",
        "metadata": {"name": "deep"},
        "spec": {
            "provisioningModes": ["Static"],
            "volumeStaging": {"podTemplate": {"metadata": {"name": template}}},
        },
    }))
}

/// Compiles `template` and renders its staging phase: the message of the
/// first error, or the rendered pod name.
fn compile_and_render(template: String) -> Result<String, String> {
    on_driver_stack(move || {
        let provisioner = compile(&template).map_err(|problems| problems.to_string())?;
        let raw = provisioner
            .render_raw(Phase::Staging, samples::staging_context().value())
            .map_err(|err| err.to_string())?;
        Ok(raw["podTemplate"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    })
}

/// Chains of 30,000 operators (60 KB or more, 10,000 overflowed 2 MiB):
/// (row, template).
fn long_chains() -> Vec<(&'static str, String)> {
    const TERMS: usize = 30_000;
    vec![
        ("sum", format!("{{{{ 1{} }}}}", "+1".repeat(TERMS))),
        ("not", format!("{{{{ {}1 }}}}", "not ".repeat(TERMS))),
        ("unary minus", format!("{{{{ {}1 }}}}", "-".repeat(TERMS))),
        (
            "filters",
            format!("{{{{ 'a'{} }}}}", "|upper".repeat(TERMS)),
        ),
        ("attributes", format!("{{{{ x{} }}}}", ".x".repeat(TERMS))),
        ("subscripts", format!("{{{{ x{} }}}}", "[0]".repeat(TERMS))),
        (
            "concatenation",
            format!("{{{{ 'a'{} }}}}", "~'a'".repeat(TERMS)),
        ),
        ("and", format!("{{{{ 1{} }}}}", " and 1".repeat(TERMS))),
        (
            "conditional expressions",
            format!("{{{{ {}1 }}}}", "1 if x else ".repeat(TERMS)),
        ),
        (
            "in a block tag, on line 2",
            format!("a\n{{% if 1{} %}}x{{% endif %}}", "+1".repeat(TERMS)),
        ),
    ]
}

#[test]
fn long_operator_chains_are_refused_at_compile_time() {
    for (row, template) in long_chains() {
        let line = if row.ends_with("line 2") { 2 } else { 1 };
        assert_eq!(
            compile_and_render(template),
            Err(format!(
                "provisioner \"deep\", field {FIELD}, line {line}: template syntax error: expression nested more than {MAX_EXPRESSION_DEPTH} levels (operators, filters, attributes or brackets in a chain); split it with {{% set %}}"
            )),
            "{row}"
        );
    }
}

#[test]
fn chains_at_the_limit_compile_and_render_inside_nested_blocks() {
    // The deepest blocks minijinja's parser accepts (it counts blocks and
    // brackets together against 150), around the deepest chain allowed.
    let blocks = 70;
    let chain = format!("1{}", "+1".repeat(MAX_EXPRESSION_DEPTH));
    let template = format!(
        "{}{{{{ {chain} }}}}{}",
        "{% if true %}".repeat(blocks),
        "{% endif %}".repeat(blocks)
    );
    assert_eq!(
        compile_and_render(template),
        Ok((MAX_EXPRESSION_DEPTH + 1).to_string())
    );
    let negations = format!("{{{{ {}1 }}}}", "-".repeat(MAX_EXPRESSION_DEPTH));
    assert_eq!(compile_and_render(negations), Ok("1".to_owned()));
}

/// `{% set ns.l = [ns.l] %}` `depth` times, then `{{ OUTPUT }}`, in
/// which `ns.l` is a list that deep.
fn deep_list(depth: usize, output: &str) -> String {
    format!(
        "{{% set ns = namespace(l=[]) %}}{{% for i in range({depth}) %}}{{% set ns.l = [ns.l] %}}{{% endfor %}}{{{{ {output} }}}}"
    )
}

fn value_too_deep(filter: &str) -> String {
    format!(
        "provisioner \"deep\", field {FIELD}, line 1: filter '{filter}': value nested more than {MAX_VALUE_DEPTH} levels deep (or containing itself)"
    )
}

#[test]
fn deep_values_are_refused_by_the_filters_that_walk_them() {
    // `tojson`, `string`, `join` and `pprint` overflowed the stack (`pprint`
    // took 35 s at 2,000 levels), and so did dropping the list at the end
    // of the render.
    for filter in ["tojson", "string", "pprint", "join"] {
        let template = deep_list(20_000, &format!("ns.l | {filter} | length"));
        assert_eq!(
            compile_and_render(template),
            Err(value_too_deep(filter)),
            "{filter}"
        );
    }
    // At the limit, they still work.
    let at_limit = deep_list(MAX_VALUE_DEPTH, "ns.l | tojson");
    let brackets = MAX_VALUE_DEPTH + 1;
    let expected = format!("{}{}", "[".repeat(brackets), "]".repeat(brackets));
    assert_eq!(compile_and_render(at_limit), Ok(expected));
}

#[test]
fn values_sharing_their_items_exponentially_are_refused_by_fuel() {
    // 2^60 nodes in 60 lists of two: walked naively, never done.
    let template = "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | string | length }}";
    assert_eq!(
        compile_and_render(template.to_owned()),
        Err(format!(
            "provisioner \"deep\", field {FIELD}, line 1: evaluation budget exhausted (does the template loop without end?)"
        ))
    );
}

#[test]
fn cyclic_values_are_refused() {
    // `tojson` and `string` overflowed the stack, `pprint` never ended.
    let cycle = "{% set ns = namespace(x=[]) %}{% set l = [ns] %}{% set ns.x = l %}";
    for filter in ["tojson", "string", "pprint", "join"] {
        assert_eq!(
            compile_and_render(format!("{cycle}{{{{ l | {filter} | length }}}}")),
            Err(value_too_deep(filter)),
            "{filter}"
        );
    }
}

/// Counts its instances that were not dropped yet.
#[derive(Debug)]
struct Probe(Arc<AtomicUsize>);

impl Object for Probe {}

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn namespaces_holding_themselves_are_not_leaked() {
    // Each of these kept the namespace, and the probe it holds, alive
    // after the render: leaked on every evaluation (LeakSanitizer in the
    // fuzz step of .ci/run).
    let cycles = [
        "{% set ns = namespace(n=0) %}{% set ns.n = ns %}",
        "{% set ns = namespace() %}{% set other = namespace(back=[ns]) %}{% set ns.n = {'k': other} %}",
        "{% set ns = namespace() %}{% for x in [ns] %}{% set ns.l = loop %}{% endfor %}",
        "{% set ns = namespace() %}{% macro m() %}{{ ns }}{% endmacro %}{% set ns.m = m %}",
        // Attributes named as keywords, or not as identifiers at all.
        "{% set ns = namespace({'if': 1, 'true': 2, 'loop': 3, 'not': 4, '0': 5, 'a b': 6}) %}{% set ns.n = ns %}",
        // Also when the render fails afterwards.
        "{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ missing.attribute }}",
    ];
    for cycle in cycles {
        let alive = Arc::new(AtomicUsize::new(1));
        let provisioner = compile(&format!("{cycle}{{% set ns.probe = probe %}}x")).unwrap();
        let context = minijinja::context! {
            probe => Value::from_object(Probe(alive.clone())),
            ..samples::staging_context().value().clone()
        };
        let _ = provisioner.render_raw(Phase::Staging, &context);
        drop(context);
        assert_eq!(alive.load(Ordering::SeqCst), 0, "{cycle}");
    }
}

#[test]
fn deeply_nested_yaml_is_refused_before_parsing() {
    let too_deep = format!(
        "flow collections (`[` and `{{`) nested more than {MAX_YAML_FLOW_DEPTH} levels at byte"
    );
    // A template's output with `yaml = true` (a claim annotation of 250 KB
    // of `[` took 75 s per evaluation).
    let template = "{% set yaml = true %}{{ '[' * 250000 }}".to_owned();
    assert_eq!(
        compile_and_render(template),
        Err(format!(
            "provisioner \"deep\", field {FIELD}: output of template with `yaml = true` is not valid YAML: {too_deep} {MAX_YAML_FLOW_DEPTH}"
        ))
    );
    // The PavProvisioner itself (100,000 levels took 22 s).
    let document = format!("x: {}", "[".repeat(100_000));
    let problems = on_driver_stack(move || CompiledProvisioner::from_yaml(&document).unwrap_err());
    assert_eq!(
        problems.to_string(),
        format!(
            "provisioner \"<unparsed>\", field <document>: {too_deep} {}",
            MAX_YAML_FLOW_DEPTH + 3
        )
    );
}
