//! PaV's own filters, and Jinja2's that minijinja writes differently
//! around whole values: `tobash` (a Bash token, PaV's), `string`,
//! `pprint` and `join` (Python's `str()` and `repr()` of the value, its
//! depth checked first) and `attr` (attributes only, never items).
//!
//! Other filters live with the semantics they share: text filters in
//! [`strings`](super::strings), `int` and `float` in
//! [`numbers`](super::numbers), `tojson` in [`json`](super::json), `sort`
//! and its kin in [`ordering`](super::ordering).

use minijinja::value::{Kwargs, StringInput, Value, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, State};

use super::args::keyword;
use super::kind_name;
use super::limits::{SERIALIZED_BYTES_PER_FUEL, check_value_shape};
use super::numbers::python_number;
use super::pyrepr;

fn scalar_text(filter: &str, value: &Value) -> Result<String, JinjaError> {
    match value.kind() {
        ValueKind::String => Ok(value.as_str().unwrap_or_default().to_owned()),
        ValueKind::Number => Ok(python_number(value)),
        ValueKind::Undefined => Err(JinjaError::new(
            ErrorKind::UndefinedError,
            format!("filter '{filter}' may not be applied to an undefined value"),
        )),
        other => Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!(
                "filter '{filter}' expects a string or a number, not {}",
                kind_name(other)
            ),
        )),
    }
}

pub(super) fn tobash_filter(value: &Value) -> Result<String, JinjaError> {
    Ok(tobash(&scalar_text("tobash", value)?))
}

/// Quotes `text` as one Bash token with no newline in it.
///
/// Each line is quoted as Python's `shlex.quote` does (left bare when it
/// holds only `[A-Za-z0-9_@%+=:,./-]`, single-quoted otherwise) and lines are
/// joined with `$'\n'`, Bash's ANSI-C quoting of a newline, so the token
/// fits on one line of a script. The empty string becomes `''`.
///
/// ```
/// use pav_templates::engine::tobash;
/// assert_eq!(tobash("plain-word"), "plain-word");
/// assert_eq!(tobash("it's"), r#"'it'"'"'s'"#);
/// assert_eq!(tobash("a b\nc"), r"'a b'$'\n'c");
/// assert_eq!(tobash(""), "''");
/// ```
pub fn tobash(text: &str) -> String {
    if text.is_empty() {
        return "''".to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (index, line) in text.split('\n').enumerate() {
        if index > 0 {
            out.push_str("$'\\n'");
        }
        if line.is_empty() {
            continue;
        }
        let safe = line
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
        if safe {
            out.push_str(line);
        } else {
            out.push('\'');
            out.push_str(&line.replace('\'', r#"'"'"'"#));
            out.push('\'');
        }
    }
    out
}

/// Jinja2's `attr`: an attribute only, never an item, so a mapping's keys
/// are not attributes (`{'a': 1} | attr('a')` is undefined).
pub(super) fn attr_filter(value: &Value, name: &str) -> Result<Value, JinjaError> {
    match value.kind() {
        ValueKind::Map => Ok(Value::UNDEFINED),
        _ => value.get_attr(name),
    }
}

/// minijinja's `string`, for values [`check_value_shape`] accepts.
pub(super) fn string_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, JinjaError> {
    check_value_shape(state, "string", value)?;
    if value.is_safe() {
        return Ok(value.clone());
    }
    Ok(Value::from(pyrepr::python_str(value)))
}

/// minijinja's `pprint`, for values [`check_value_shape`] accepts.
pub(super) fn pprint_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, JinjaError> {
    check_value_shape(state, "pprint", value)?;
    let text = pyrepr::python_repr(value, true);
    // Charged as minijinja charges its own `pprint`.
    state.consume_fuel(text.len() as u64 / SERIALIZED_BYTES_PER_FUEL)?;
    Ok(Value::from(text))
}

/// minijinja's `join`, for lists whose items [`check_value_shape`] accepts
/// (each item is printed whole).
pub(super) fn join_filter(
    state: &mut State<'_, '_>,
    value: &Value,
    joiner: Option<StringInput<'_>>,
    attribute: Option<&str>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    check_value_shape(state, "join", value)?;
    if value.kind() == ValueKind::String {
        return minijinja::filters::join(state, value, joiner, attribute, kwargs);
    }
    let attribute = match attribute {
        Some(attribute) => Some(attribute.to_owned()),
        None => keyword::<String>(&kwargs, "attribute")?,
    };
    kwargs.assert_all_used()?;
    // Items (or their `attribute`, a dotted path) as Python's `str()`
    // writes them (`1e-05`, `True`, `None`).
    let items = value
        .try_iter()?
        .map(|item| {
            let item = match &attribute {
                Some(path) => {
                    path.split('.')
                        .try_fold(item, |item, part| match part.parse::<i64>() {
                            Ok(index) => item.get_item(&Value::from(index)),
                            Err(_) => item.get_attr(part),
                        })?
                }
                None => item,
            };
            Ok(match item.kind() {
                ValueKind::String => item,
                _ => Value::from(pyrepr::python_str(&item)),
            })
        })
        .collect::<Result<Vec<Value>, JinjaError>>()?;
    minijinja::filters::join(
        state,
        &Value::from(items),
        joiner,
        None,
        Kwargs::from_iter(std::iter::empty::<(&str, Value)>()),
    )
}

#[cfg(test)]
mod tests {
    use minijinja::Error as JinjaError;
    use minijinja::value::Value;

    use super::tobash;
    use crate::context::to_value;
    use crate::engine::environment;

    fn render(source: &str, ctx: Value) -> Result<String, JinjaError> {
        environment().render_str(source, ctx)
    }

    #[test]
    fn tobash_matches_shlex_quote_per_line() {
        let cases = [
            ("", "''"),
            ("abc", "abc"),
            ("a_b@c%d+e=f:g,h.i/j-k", "a_b@c%d+e=f:g,h.i/j-k"),
            ("a b", "'a b'"),
            ("it's", r#"'it'"'"'s'"#),
            ("\n", r"$'\n'"),
            ("a\n", r"a$'\n'"),
            ("\na", r"$'\n'a"),
            ("a\n\nb", r"a$'\n'$'\n'b"),
            ("$(rm -rf /)", "'$(rm -rf /)'"),
            ("`id`", "'`id`'"),
            ("ünï", "'ünï'"),
            ("\t", "'\t'"),
        ];
        for (input, expected) in cases {
            assert_eq!(tobash(input), expected, "{input:?}");
        }
    }

    #[test]
    fn tobash_filter_accepts_numbers_and_refuses_the_rest() {
        let ctx = to_value(serde_json::json!({
            "n": 42, "f": 1.5, "b": true, "l": [1], "nil": null
        }));
        assert_eq!(
            render("{{ n | tobash }} {{ f | tobash }}", ctx.clone()).unwrap(),
            "42 1.5"
        );
        for (source, message) in [
            (
                "{{ b | tobash }}",
                "filter 'tobash' expects a string or a number, not a boolean",
            ),
            (
                "{{ l | tobash }}",
                "filter 'tobash' expects a string or a number, not a list",
            ),
            (
                "{{ nil | tobash }}",
                "filter 'tobash' expects a string or a number, not none",
            ),
            (
                "{{ missing | tobash }}",
                "filter 'tobash' may not be applied to an undefined value",
            ),
        ] {
            let err = render(source, ctx.clone()).unwrap_err();
            assert_eq!(err.detail(), Some(message), "{source}");
        }
    }
}
