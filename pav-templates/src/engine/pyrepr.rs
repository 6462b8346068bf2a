//! Values as Python writes them: `str()` (the `string` and `join` filters)
//! and `repr()` (inside lists and mappings, `pprint`).
//!
//! Callers bound the value's depth and size first (`check_value_shape`):
//! these functions recurse once per level.

use minijinja::value::{Value, ValueKind};

use super::numbers::python_number;

/// Python's `str(value)`.
pub(crate) fn python_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_owned(),
        // Jinja2's undefined prints as the empty string.
        ValueKind::Undefined => String::new(),
        _ => python_repr(value, false),
    }
}

/// Python's `repr(value)`; with `sort_keys`, mappings in key order, as
/// `pprint` writes them.
pub(crate) fn python_repr(value: &Value, sort_keys: bool) -> String {
    let mut out = String::new();
    write_repr(&mut out, value, sort_keys);
    out
}

fn write_repr(out: &mut String, value: &Value, sort_keys: bool) {
    match value.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&python_number(value)),
        ValueKind::String => write_string_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            let tuple = value.is_tuple();
            let items: Vec<Value> = value.try_iter().into_iter().flatten().collect();
            out.push(if tuple { '(' } else { '[' });
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item, sort_keys);
            }
            if tuple && items.len() == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter().into_iter().flatten().collect();
            if sort_keys {
                keys.sort();
            }
            out.push('{');
            for (index, key) in keys.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                write_repr(out, key, sort_keys);
                out.push_str(": ");
                write_repr(out, &value.get_item(key).unwrap_or_default(), sort_keys);
            }
            out.push('}');
        }
        _ => out.push_str(&value.to_string()),
    }
}

/// A string as Python's `repr` quotes it: single quotes unless the text
/// holds one and no double quote.
fn write_string_repr(out: &mut String, text: &str) {
    use std::fmt::Write;
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python() {
        let value = Value::from(minijinja::value::Serde(serde_json::json!({
            "b": [1, 2.5, null, true, "it's"], "a": {"x": "q\"'\n"}
        })));
        assert_eq!(
            python_repr(&value, false),
            r#"{'b': [1, 2.5, None, True, "it's"], 'a': {'x': 'q"\'\n'}}"#
        );
        assert_eq!(
            python_repr(&value, true),
            r#"{'a': {'x': 'q"\'\n'}, 'b': [1, 2.5, None, True, "it's"]}"#
        );
        assert_eq!(python_str(&Value::from("x")), "x");
        assert_eq!(python_str(&Value::from(1e16)), "1e+16");
    }
}
