//! `tojson` as Jinja2 writes it: `json.dumps(value, sort_keys=True)` with
//! `<`, `>`, `&` and `'` escaped, so the text is safe inside YAML, HTML and
//! single-quoted shell strings alike.
//!
//! The value is written straight from the template value, not through
//! `serde_json`, so integers up to 128 bits stay exact, as Python's do.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, State};

use super::args::keyword;
use super::kind_name;
use super::limits::{BYTES_PER_FUEL, check_value_shape};
use super::numbers::python_number;

pub(crate) fn tojson_filter(
    state: &State<'_, '_>,
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    check_value_shape(state, "tojson", value)?;
    let indent = match indent {
        Some(indent) => Some(indent),
        None => keyword::<Value>(&kwargs, "indent")?,
    };
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    // Indentation is repeated on every line, so `indent=1000000000` would
    // allocate gigabytes before fuel is charged for the result: check first.
    if let (Some(width), Some((_, remaining))) = (indent, state.fuel_levels()) {
        let affordable = remaining.saturating_mul(BYTES_PER_FUEL);
        if indentation_bytes(value, width as u64, 0) > affordable {
            state.consume_fuel(remaining.saturating_add(1))?;
        }
    }
    let mut out = String::new();
    write_python_json(&mut out, value, indent, 0)?;
    Ok(Value::from(out))
}

fn children(value: &Value) -> Vec<Value> {
    match value.kind() {
        ValueKind::Seq | ValueKind::Iterable => value.try_iter().into_iter().flatten().collect(),
        ValueKind::Map => value
            .try_iter()
            .into_iter()
            .flatten()
            .map(|key| value.get_item(&key).unwrap_or_default())
            .collect(),
        _ => Vec::new(),
    }
}

/// Spaces `write_python_json` writes for indentation at `depth`.
fn indentation_bytes(value: &Value, width: u64, depth: u64) -> u64 {
    let children = children(value);
    if children.is_empty() {
        return 0;
    }
    // Each child on its own line one level deeper; the closing bracket at
    // this level.
    children
        .iter()
        .map(|child| {
            width
                .saturating_mul(depth + 1)
                .saturating_add(indentation_bytes(child, width, depth + 1))
        })
        .fold(width.saturating_mul(depth), u64::saturating_add)
}

fn not_serializable(value: &Value) -> JinjaError {
    JinjaError::new(
        ErrorKind::InvalidOperation,
        format!(
            "filter 'tojson': {} is not JSON serializable",
            kind_name(value.kind())
        ),
    )
}

/// A float as Python's `json` writes it.
fn json_float(value: &Value) -> String {
    match f64::try_from(value.clone()) {
        Ok(f) if f.is_nan() => "NaN".to_owned(),
        Ok(f) if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned(),
        _ => python_number(value),
    }
}

fn write_python_json(
    out: &mut String,
    value: &Value,
    indent: Option<usize>,
    depth: usize,
) -> Result<(), JinjaError> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&json_float(value)),
        ValueKind::String => write_python_json_string(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            let items = children(value);
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_python_json(out, item, indent, depth + 1)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter().into_iter().flatten().collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            // Python sorts the keys themselves, then writes each as text;
            // keys of different kinds cannot be sorted.
            let kind = keys[0].kind();
            if keys.iter().any(|key| key.kind() != kind) {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "filter 'tojson': mapping keys of different types cannot be sorted",
                ));
            }
            keys.sort();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                let key_text = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
                    ValueKind::Number => json_float(key),
                    ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_owned(),
                    ValueKind::None => "null".to_owned(),
                    _ => return Err(not_serializable(key)),
                };
                write_python_json_string(out, &key_text);
                out.push_str(": ");
                write_python_json(out, &value.get_item(key)?, indent, depth + 1)?;
            }
            newline(out, depth);
            out.push('}');
        }
        _ => return Err(not_serializable(value)),
    }
    Ok(())
}

fn write_python_json_string(out: &mut String, s: &str) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\'' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}
