//! Input that used to overflow the stack, spin or leak, each run where the
//! drivers render: on a thread with a 2 MiB stack (tokio's blocking
//! threads). Every case must end in a clear error, in work bounded by the
//! limits it names; a regression aborts the whole test binary (stack
//! overflow) instead of failing one assertion.

use pav_templates::engine::nesting::MAX_EXPRESSION_DEPTH;
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
