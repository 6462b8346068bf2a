//! The minijinja environment configured with PaV's rules: `environment()`
//! assembles it from the modules below, and `template_source()` is the
//! source it compiles for a template.
//!
//! - `trim_blocks` and `lstrip_blocks`: a line holding only a statement block
//!   disappears from the output.
//! - No auto-escaping: output goes into YAML and shell, not HTML.
//! - Lenient undefined values (`x or 'default'`, `x is defined` work), but
//!   an expression whose *output* is undefined is an error, as is one that is
//!   not a string or a number.
//! - Filters `tobash` and `tojson` with the original PaV's exact output.
//! - Evaluation is bounded by fuel, recursion depth and output size.
//! - Expressions are bounded in depth before they are parsed
//!   ([`expression_depth`]).
//! - Filters that walk a whole value (`tojson`, `string`, `pprint`, `join`)
//!   refuse values nested deeper than [`MAX_VALUE_DEPTH`], cyclic ones
//!   included; namespaces are emptied after each render, so a namespace
//!   holding itself is not leaked.
//! - Every render has [`RENDER_STACK_BYTES`] of stack, enough for
//!   minijinja's own recursive operations on the deepest value the fuel
//!   can build ([`MAX_BUILT_DEPTH`]).
//!
//! Where each part lives, under `src/engine/`:
//!
//! | concept | file |
//! |---|---|
//! | **filters** `tobash`, `string`, `pprint`, `join`, `attr` | `filters.rs` |
//! | Jinja2's text filters (`default`, `indent`, `wordwrap`, `format`, …) and Python's `str` methods | `strings.rs` |
//! | `tojson` | `json.rs` |
//! | globals `lipsum`, `cycler` | `globals.rs` |
//! | filter and function arguments as Jinja2 takes them | `args.rs` |
//! | **Python semantics**: the method callback (`s.split()`, `d.items()`) | `python.rs` |
//! | Python numbers: printing, methods, `int` and `float` filters | `numbers.rs` |
//! | Python `list` and `dict` methods, `bytes` | `collections.rs` |
//! | Python's `str()` and `repr()` | `pyrepr.rs` |
//! | Python comparisons: operators and tests | `comparisons.rs` |
//! | Python ordering: `sort`, `min`, `max`, `unique`, `dictsort`, `groupby` | `ordering.rs` |
//! | **rewrites**: comparisons routed to calls in the template source | `rewrite.rs` |
//! | **sandbox limits**: fuel, output size, value depth, output-size estimates | `limits.rs` |
//! | expression depth, checked before parsing | `expression_depth.rs` |
//! | the stack a render runs on | `stack.rs` |
//! | namespaces emptied after each render | `namespaces.rs` |

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, Output, State};

// Filters and globals.
mod args;
mod filters;
mod globals;
mod json;
mod strings;
// Python semantics.
mod collections;
mod comparisons;
mod numbers;
mod ordering;
mod pyrepr;
mod python;
// Source rewriting.
mod rewrite;
// Sandbox limits.
pub mod expression_depth;
mod limits;
mod namespaces;
mod stack;

pub use filters::tobash;
pub use limits::{
    FUEL_PER_FIELD, MAX_OUTPUT_BYTES, MAX_PHASE_OUTPUT_BYTES, MAX_VALUE_DEPTH, RECURSION_LIMIT,
};
pub(crate) use namespaces::NamespaceTracking;
use numbers::python_number;
pub(crate) use stack::on_render_stack;
pub use stack::{MAX_BUILT_DEPTH, RENDER_STACK_BYTES};

/// PaV's syntax: Jinja2's delimiters, `trim_blocks` and `lstrip_blocks`.
pub(crate) fn syntax() -> SyntaxConfig {
    SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid")
}

/// Builds an environment with PaV's syntax, filters, formatter and limits.
pub(crate) fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_syntax(syntax());
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
    env.set_fuel(Some(FUEL_PER_FIELD));
    env.set_recursion_limit(RECURSION_LIMIT);
    env.set_formatter(format_output);
    env.add_filter("tobash", filters::tobash_filter);
    env.add_filter("tojson", json::tojson_filter);
    env.add_filter("int", numbers::int_filter);
    env.add_filter("float", numbers::float_filter);
    env.add_filter("default", strings::default_filter);
    env.add_filter("d", strings::default_filter);
    env.add_filter("center", strings::center_filter);
    env.add_filter("escape", strings::escape_filter);
    env.add_filter("e", strings::escape_filter);
    env.add_filter("forceescape", strings::escape_filter);
    env.add_filter("urlencode", strings::urlencode_filter);
    env.add_filter("wordcount", strings::wordcount_filter);
    env.add_filter("truncate", strings::truncate_filter);
    env.add_filter("filesizeformat", minijinja_contrib::filters::filesizeformat);
    env.add_filter("striptags", minijinja_contrib::filters::striptags);
    env.add_filter("random", minijinja_contrib::filters::random);
    env.add_filter("indent", strings::indent_filter);
    env.add_filter("xmlattr", strings::xmlattr_filter);
    env.add_filter("wordwrap", strings::wordwrap_filter);
    env.add_filter("format", strings::format_filter);
    env.add_filter("attr", filters::attr_filter);
    env.add_filter("sort", ordering::sort_filter);
    env.add_filter("min", ordering::min_filter);
    env.add_filter("max", ordering::max_filter);
    env.add_filter("unique", ordering::unique_filter);
    env.add_filter("dictsort", ordering::dictsort_filter);
    env.add_filter("groupby", ordering::groupby_filter);
    // The comparison operators (through the source rewrite) and tests.
    comparisons::register(&mut env);
    env.add_function("lipsum", globals::lipsum);
    env.add_function("cycler", globals::cycler);
    env.add_function("joiner", minijinja_contrib::globals::joiner);
    env.add_test("sequence", strings::is_sequence);
    env.add_filter("string", filters::string_filter);
    env.add_filter("pprint", filters::pprint_filter);
    env.add_filter("join", filters::join_filter);
    env.add_function("namespace", namespaces::tracked_namespace);
    // Python methods on strings, lists and dicts (`s.split('-')`,
    // `d.items()`), which PaV templates written for Jinja2 use.
    env.set_unknown_method_callback(python::python_method);
    env
}

/// Whether a field's `source` is a template (holds `{{`, `{%` or `{#`)
/// rather than a literal value: only templates are compiled and rendered.
///
/// ```
/// assert!(pav_templates::engine::has_template_syntax("{{ pvc.metadata.namespace }}"));
/// assert!(!pav_templates::engine::has_template_syntax("storage"));
/// ```
pub fn has_template_syntax(source: &str) -> bool {
    source.contains("{{") || source.contains("{%") || source.contains("{#")
}

/// The source minijinja compiles for a template's `source`: every line
/// ending (`\r\n`, `\r`) written as `\n`, as Jinja2's lexer reads it
/// (its `newline_sequence`), in text and string literals alike; and every
/// comparison routed to Python's rules ([`rewrite`]). Line numbers are
/// unchanged for `\r\n`.
pub(crate) fn template_source(source: &str) -> String {
    let normalized = if source.contains('\r') {
        source.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        source.to_owned()
    };
    rewrite::route_comparisons(&normalized, &syntax())
}

fn format_output(
    out: &mut Output<'_>,
    _state: &mut State<'_, '_>,
    value: &Value,
) -> Result<(), JinjaError> {
    match value.kind() {
        ValueKind::String => std::fmt::Write::write_str(out, value.as_str().unwrap_or_default()),
        ValueKind::Number => std::fmt::Write::write_str(out, &python_number(value)),
        ValueKind::Undefined => {
            return Err(JinjaError::new(
                ErrorKind::UndefinedError,
                "expression evaluated to an undefined value",
            ));
        }
        other => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "expression must evaluate to a string or a number, not {}",
                    kind_name(other)
                ),
            ));
        }
    }
    .map_err(|_| JinjaError::new(ErrorKind::WriteFailure, "could not write output"))
}

/// How a kind of value is named in messages ("a list", "none").
pub(crate) fn kind_name(kind: ValueKind) -> &'static str {
    match kind {
        ValueKind::Undefined => "undefined",
        ValueKind::None => "none",
        ValueKind::Bool => "a boolean",
        ValueKind::Number => "a number",
        ValueKind::String => "a string",
        ValueKind::Bytes => "bytes",
        ValueKind::Seq => "a list",
        ValueKind::Map => "a mapping",
        ValueKind::Iterable => "an iterable",
        ValueKind::Plain => "an object",
        ValueKind::Invalid => "an invalid value",
        _ => "an unsupported value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, ctx: Value) -> Result<String, JinjaError> {
        environment().render_str(source, ctx)
    }

    use crate::context::to_value;

    #[test]
    fn tojson_matches_jinja2() {
        let ctx = to_value(serde_json::json!({
            "m": {"b": 1, "a": [true, null, 1.5, "x<y>&'z\"\n"]},
            "u": "é😀",
        }));
        assert_eq!(
            render("{{ m | tojson }}", ctx.clone()).unwrap(),
            r#"{"a": [true, null, 1.5, "x\u003cy\u003e\u0026\u0027z\"\n"], "b": 1}"#
        );
        assert_eq!(
            render("{{ u | tojson }}", ctx.clone()).unwrap(),
            r#""\u00e9\ud83d\ude00""#
        );
        assert_eq!(
            render("{{ m.a[:2] | tojson(indent=2) }}", ctx).unwrap(),
            "[\n  true,\n  null\n]"
        );
    }

    #[test]
    fn output_must_be_string_or_number() {
        let ctx = to_value(serde_json::json!({
            "s": "x", "i": 3, "f": 2.0, "big": 1e20, "b": false, "l": [], "m": {}, "nil": null
        }));
        assert_eq!(
            render("{{ s }}{{ i }}{{ f }}{{ big }}", ctx.clone()).unwrap(),
            "x32.01e+20"
        );
        for (source, kind) in [
            ("{{ b }}", "a boolean"),
            ("{{ l }}", "a list"),
            ("{{ m }}", "a mapping"),
            ("{{ nil }}", "none"),
        ] {
            let err = render(source, ctx.clone()).unwrap_err();
            assert_eq!(
                err.detail().unwrap(),
                format!("expression must evaluate to a string or a number, not {kind}"),
            );
        }
        let err = render("a\n{{ missing }}", ctx.clone()).unwrap_err();
        assert_eq!(
            err.detail(),
            Some("expression evaluated to an undefined value")
        );
        assert_eq!(err.line(), Some(2));
        // Undefined values may still be tested and defaulted.
        assert_eq!(
            render("{{ missing or 'd' }}{% if missing is defined %}x{% endif %}{{ missing | default(1) }}", ctx).unwrap(),
            "d1"
        );
    }

    #[test]
    fn int_filter_falls_back_like_jinja2() {
        let ctx = to_value(
            serde_json::json!({"s": "42", "f": "3.7", "x": "x", "h": "ff", "n": 2.9, "b": true}),
        );
        assert_eq!(
            render("{{ s | int + 1 }} {{ f | int }} {{ x | int }} {{ x | int(7) }} {{ h | int(base=16) }} {{ n | int }} {{ b | int }} {{ '0x1A' | int(0, 16) }}", ctx).unwrap(),
            "43 3 0 7 255 2 1 26"
        );
    }

    #[test]
    fn python_methods_work_on_strings_and_dicts() {
        let ctx = to_value(serde_json::json!({"h": "pvc-5d2c-8b1a", "m": {"a": "1", "b": "2"}}));
        assert_eq!(
            render("{{ h.split('-')[1] }} {{ 'y' if h.startswith('pvc-') else 'n' }} {% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %} {{ h.upper() }}", ctx).unwrap(),
            "5d2c y a=1;b=2; PVC-5D2C-8B1A"
        );
    }

    #[test]
    fn no_html_escaping() {
        let ctx = to_value(serde_json::json!({"s": "<a href='x'>&</a>"}));
        assert_eq!(render("{{ s }}", ctx).unwrap(), "<a href='x'>&</a>");
    }
}
