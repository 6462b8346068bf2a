//! Ordering as Python has it: the filters `sort`, `min`, `max`, `unique`,
//! `dictsort` and the comparison tests (`lt`, `<`, `in`, ...) refuse what
//! Python refuses, then let minijinja compute the result.
//!
//! minijinja orders every pair of values (a total order across types);
//! Jinja2 compares with Python's operators, which raise `TypeError` for
//! `'a' < 1`, `None < None`, `{} < {}` and `UndefinedError` for an
//! undefined value. Templates that fail in PaV must fail in pav too, so
//! these filters first check that every pair of keys they compare is one
//! Python can order. (The operators `<`, `in`, ... themselves have no hook
//! in minijinja: see docs/templates.md.)
//!
//! Contract: a comparison sort compares each pair of neighbours of its
//! result, so sorting the keys with [`python_less`] fails exactly when
//! some neighbouring pair cannot be ordered: for the classes of values
//! Python can order among themselves (numbers and booleans; strings;
//! lists; tuples) that is when two classes meet, as in Python's `sorted`,
//! `min` and `max`.

use std::cmp::Ordering;

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, State};

use super::keywords;

/// Python's name of a value's type, as its `TypeError`s write it.
fn python_type(value: &Value) -> &'static str {
    match value.kind() {
        ValueKind::Undefined => "Undefined",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::String => "str",
        ValueKind::Seq if value.is_tuple() => "tuple",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        _ => "object",
    }
}

fn undefined_error() -> JinjaError {
    JinjaError::new(
        ErrorKind::UndefinedError,
        "an undefined value may not be compared",
    )
}

fn unorderable(operator: &str, left: &Value, right: &Value) -> JinjaError {
    JinjaError::new(
        ErrorKind::InvalidOperation,
        format!(
            "'{operator}' not supported between instances of '{}' and '{}'",
            python_type(left),
            python_type(right)
        ),
    )
}

/// Python's `left < right` (and, through the ordering it returns, `<=`,
/// `>`, `>=`): numbers and booleans with each other, strings with strings,
/// lists with lists and tuples with tuples (item by item), an error for
/// anything else. `operator` names the comparison in the error.
pub(crate) fn python_order(
    operator: &str,
    left: &Value,
    right: &Value,
) -> Result<Ordering, JinjaError> {
    Ok(first_difference(operator, left, right)?.unwrap_or(Ordering::Equal))
}

/// [`python_order`], or `None` for two sequences equal item by item.
///
/// Python skips the items that are equal and orders the first pair that
/// is not. Testing a pair of sequences for equality and then ordering them
/// walks their items twice, and again at every level below: quadratic in
/// the depth (`[l, [l]] | sort` of a 3,000-deep list took 10 s, and the
/// fuel builds 130,000 levels). Here each pair of nested sequences is
/// walked once, equality and order together.
fn first_difference(
    operator: &str,
    left: &Value,
    right: &Value,
) -> Result<Option<Ordering>, JinjaError> {
    let numeric = |value: &Value| matches!(value.kind(), ValueKind::Number | ValueKind::Bool);
    let same_sequence_type = |a: &Value, b: &Value| {
        a.kind() == ValueKind::Seq && b.kind() == ValueKind::Seq && a.is_tuple() == b.is_tuple()
    };
    match (left.kind(), right.kind()) {
        (ValueKind::Undefined, _) | (_, ValueKind::Undefined) => Err(undefined_error()),
        _ if numeric(left) && numeric(right) => Ok(Some(left.cmp(right))),
        (ValueKind::String, ValueKind::String) => Ok(Some(left.cmp(right))),
        _ if same_sequence_type(left, right) => {
            let left_items: Vec<Value> = left.try_iter()?.collect();
            let right_items: Vec<Value> = right.try_iter()?.collect();
            for (a, b) in left_items.iter().zip(&right_items) {
                if same_sequence_type(a, b) && !same_list(a, b) {
                    if let Some(order) = first_difference(operator, a, b)? {
                        return Ok(Some(order));
                    }
                } else if a != b {
                    return python_order(operator, a, b).map(Some);
                }
            }
            // Without an unequal pair, the shorter sequence is the smaller.
            Ok(match left_items.len().cmp(&right_items.len()) {
                Ordering::Equal => None,
                order => Some(order),
            })
        }
        _ => Err(unorderable(operator, left, right)),
    }
}

/// Whether `a` and `b` are the same list object (equal without a walk, as
/// `==` finds them).
fn same_list(a: &Value, b: &Value) -> bool {
    match (
        a.downcast_object_ref::<Vec<Value>>(),
        b.downcast_object_ref::<Vec<Value>>(),
    ) {
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        _ => false,
    }
}

/// Python's `left < right`.
fn python_less(left: &Value, right: &Value) -> Result<bool, JinjaError> {
    Ok(python_order("<", left, right)? == Ordering::Less)
}

/// Fails as Python's `sorted(keys)`, `min(keys)` or `max(keys)` would.
fn check_orderable(mut keys: Vec<Value>) -> Result<(), JinjaError> {
    let mut first_error = None;
    keys.sort_by(|a, b| match python_order("<", a, b) {
        Ok(order) => order,
        Err(error) => {
            first_error.get_or_insert(error);
            Ordering::Equal
        }
    });
    first_error.map_or(Ok(()), Err)
}

/// Jinja2's `ignore_case`: strings lowered unless `case_sensitive`.
fn folded(value: Value, case_sensitive: bool) -> Value {
    match value.as_str() {
        Some(text) if !case_sensitive => Value::from(text.to_lowercase()),
        _ => value,
    }
}

/// `item`'s value at a dotted `path` (`a.b`, `1.name`), undefined where it
/// has none, as Jinja2's attribute getters read it.
fn at_path(item: &Value, path: &str) -> Value {
    path.split('.').fold(item.clone(), |value, part| {
        let found = match part.parse::<i64>() {
            Ok(index) => value.get_item(&Value::from(index)),
            Err(_) => value.get_attr(part),
        };
        found.unwrap_or(Value::UNDEFINED)
    })
}

/// The key Jinja2's `sort`, `min`, `max` and `unique` order `item` by:
/// `attribute` (a dotted path, or several separated by commas, which make
/// a tuple) or the item itself, with strings lowered unless
/// `case_sensitive`.
fn sort_key(item: &Value, attribute: Option<&str>, case_sensitive: bool) -> Value {
    let Some(attribute) = attribute else {
        return folded(item.clone(), case_sensitive);
    };
    let paths: Vec<&str> = attribute
        .split(',')
        .map(str::trim)
        .filter(|path| !path.is_empty())
        .collect();
    if paths.len() > 1 {
        Value::from_iter(
            paths
                .iter()
                .map(|path| folded(at_path(item, path), case_sensitive)),
        )
    } else {
        folded(at_path(item, attribute), case_sensitive)
    }
}

/// `value` with its items in a list (an iterable may iterate only once,
/// and both the check and minijinja's filter read it) and their keys, or
/// `value` alone when it is not a list of items (minijinja's filter then
/// reports it).
fn items_and_keys(
    value: Value,
    kwargs: &Kwargs,
) -> Result<(Value, Option<Vec<Value>>), JinjaError> {
    if !matches!(
        value.kind(),
        ValueKind::Seq | ValueKind::Iterable | ValueKind::String
    ) {
        return Ok((value, None));
    }
    let attribute = kwargs.get::<Option<String>>("attribute")?;
    let case_sensitive = kwargs
        .get::<Option<bool>>("case_sensitive")?
        .unwrap_or(false);
    let items: Vec<Value> = value.try_iter()?.collect();
    let keys = items
        .iter()
        .map(|item| sort_key(item, attribute.as_deref(), case_sensitive))
        .collect();
    let value = match value.kind() {
        ValueKind::String => value,
        _ => Value::from(items),
    };
    Ok((value, Some(keys)))
}

/// `value`, once the keys of its items are checked as Python's `sorted`,
/// `min` and `max` would.
fn orderable(value: Value, kwargs: &Kwargs) -> Result<Value, JinjaError> {
    let (value, keys) = items_and_keys(value, kwargs)?;
    if let Some(keys) = keys {
        check_orderable(keys)?;
    }
    Ok(value)
}

/// Jinja2's `sort(reverse=false, case_sensitive=false, attribute=none)`.
pub(crate) fn sort_filter(
    state: &State<'_, '_>,
    value: Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(
        &["reverse", "case_sensitive", "attribute"],
        &positional,
        kwargs,
    )?;
    // Jinja2's `sort` orders by lists of key parts (its multi-attribute
    // getter), so equal keys are never compared with `<`: `[none, none]`
    // sorts, `[none, 1]` does not.
    let (value, keys) = items_and_keys(value, &kwargs)?;
    if let Some(keys) = keys {
        check_orderable(keys.into_iter().map(|key| Value::from(vec![key])).collect())?;
    }
    minijinja::filters::sort(state, value, kwargs)
}

/// Jinja2's `min(case_sensitive=false, attribute=none)`.
pub(crate) fn min_filter(
    state: &State<'_, '_>,
    value: Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["case_sensitive", "attribute"], &positional, kwargs)?;
    let value = orderable(value, &kwargs)?;
    minijinja::filters::min(state, value, kwargs)
}

/// Jinja2's `max(case_sensitive=false, attribute=none)`.
pub(crate) fn max_filter(
    state: &State<'_, '_>,
    value: Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["case_sensitive", "attribute"], &positional, kwargs)?;
    let value = orderable(value, &kwargs)?;
    minijinja::filters::max(state, value, kwargs)
}

/// Python's `hash(key)` fails for lists and dicts (tuples hash when their
/// items do).
fn check_hashable(key: &Value) -> Result<(), JinjaError> {
    match key.kind() {
        ValueKind::Seq if key.is_tuple() => {
            key.try_iter()?.try_for_each(|item| check_hashable(&item))
        }
        ValueKind::Seq | ValueKind::Map => Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("unhashable type: '{}'", python_type(key)),
        )),
        _ => Ok(()),
    }
}

/// Jinja2's `unique(case_sensitive=false, attribute=none)`: its keys go
/// into a Python set, so lists and dicts are refused.
pub(crate) fn unique_filter(
    state: &State<'_, '_>,
    value: Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["case_sensitive", "attribute"], &positional, kwargs)?;
    let (value, keys) = items_and_keys(value, &kwargs)?;
    keys.iter().flatten().try_for_each(check_hashable)?;
    minijinja::filters::unique(state, value, kwargs)
}

/// Jinja2's `dictsort(case_sensitive=false, by='key', reverse=false)`.
pub(crate) fn dictsort_filter(
    value: &Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["case_sensitive", "by", "reverse"], &positional, kwargs)?;
    if value.kind() == ValueKind::Map {
        let case_sensitive = kwargs
            .get::<Option<bool>>("case_sensitive")?
            .unwrap_or(false);
        let by_value = kwargs.get::<Option<&str>>("by")? == Some("value");
        let keys = value
            .try_iter()?
            .map(|key| {
                let sorted_by = if by_value {
                    value.get_item(&key).unwrap_or_default()
                } else {
                    key
                };
                folded(sorted_by, case_sensitive)
            })
            .collect();
        check_orderable(keys)?;
    }
    minijinja::filters::dictsort(value, kwargs)
}

/// Jinja2's tests `lt`, `lessthan` and `<`.
pub(crate) fn is_lt(value: &Value, other: &Value) -> Result<bool, JinjaError> {
    python_less(value, other)
}

/// Jinja2's tests `le` and `<=`.
pub(crate) fn is_le(value: &Value, other: &Value) -> Result<bool, JinjaError> {
    Ok(python_order("<=", value, other)? != Ordering::Greater)
}

/// Jinja2's tests `gt`, `greaterthan` and `>`.
pub(crate) fn is_gt(value: &Value, other: &Value) -> Result<bool, JinjaError> {
    Ok(python_order(">", value, other)? == Ordering::Greater)
}

/// Jinja2's tests `ge` and `>=`.
pub(crate) fn is_ge(value: &Value, other: &Value) -> Result<bool, JinjaError> {
    Ok(python_order(">=", value, other)? != Ordering::Less)
}

/// Jinja2's test `in`: Python's `value in container`, which needs a string
/// to look for in a string and a hashable key in a dict.
pub(crate) fn is_in(
    state: &State<'_, '_>,
    value: &Value,
    container: &Value,
) -> Result<bool, JinjaError> {
    match container.kind() {
        ValueKind::String if value.kind() != ValueKind::String => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "'in <string>' requires string as left operand, not {}",
                    python_type(value)
                ),
            ));
        }
        ValueKind::Map => check_hashable(value)?,
        _ => {}
    }
    minijinja::tests::is_in(state, value, container)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(json: serde_json::Value) -> Value {
        Value::from(minijinja::value::Serde(json))
    }

    fn list(items: serde_json::Value) -> Vec<Value> {
        json(items).try_iter().unwrap().collect()
    }

    #[test]
    fn orders_what_python_orders() {
        for keys in [
            serde_json::json!([3, 1.5, true]),
            serde_json::json!(["b", "a"]),
            serde_json::json!([[1, "a"], [1], [0, 2]]),
            serde_json::json!([null]),
        ] {
            assert!(check_orderable(list(keys.clone())).is_ok(), "{keys}");
        }
    }

    #[test]
    fn refuses_what_python_refuses() {
        for (keys, message) in [
            (
                serde_json::json!([1, "a"]),
                "'<' not supported between instances of",
            ),
            (serde_json::json!([null, null]), "'NoneType' and 'NoneType'"),
            (serde_json::json!([{}, {}]), "'dict' and 'dict'"),
            (
                serde_json::json!([[1], ["a"]]),
                "instances of 'str' and 'int'",
            ),
        ] {
            let error = check_orderable(list(keys.clone())).unwrap_err();
            assert!(
                error.detail().unwrap_or_default().contains(message),
                "{keys}: {error}"
            );
        }
        assert_eq!(
            check_orderable(vec![Value::from(1), Value::UNDEFINED])
                .unwrap_err()
                .kind(),
            ErrorKind::UndefinedError
        );
    }

    #[test]
    fn only_hashable_keys_are_unique() {
        assert!(check_hashable(&Value::from("a")).is_ok());
        for unhashable in [serde_json::json!([1]), serde_json::json!({"a": 1})] {
            assert!(check_hashable(&json(unhashable)).is_err());
        }
    }
}
