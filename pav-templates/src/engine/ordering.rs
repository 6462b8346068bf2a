//! Comparing as Python does: the comparison operators and tests
//! ([`comparisons`](super::comparisons)) and the filters `sort`, `min`, `max`,
//! `unique`, `dictsort` refuse what Python refuses (the filters then let
//! minijinja compute the result).
//!
//! minijinja orders every pair of values (a total order across types);
//! Jinja2 compares with Python's operators, which raise `TypeError` for
//! `'a' < 1`, `None < None`, `{} < {}` and `UndefinedError` for an
//! undefined value. Templates that fail in PaV must fail in pav too, so
//! these filters first check that every pair of keys they compare is one
//! Python can order.
//!
//! Contract: a comparison sort compares each pair of neighbours of its
//! result, so sorting the keys with [`Walk::order`] fails exactly when
//! some neighbouring pair cannot be ordered: for the classes of values
//! Python can order among themselves (numbers and booleans; strings;
//! lists; tuples) that is when two classes meet, as in Python's `sorted`,
//! `min` and `max`.

use std::cmp::Ordering;

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, State};

use super::MAX_VALUE_DEPTH;
use super::args::{keyword, keywords};
use super::limits::ITEMS_PER_FUEL;

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

/// What one comparison walks, charged as it goes: every pair of items
/// visited costs fuel as minijinja's filters charge items
/// ([`ITEMS_PER_FUEL`]), and no pair may lie deeper than
/// [`MAX_VALUE_DEPTH`] (Jinja2 fails there too, past Python's recursion
/// limit). minijinja's own comparisons walked nested values by recursion
/// at no cost: 20,000 comparisons of a list 20,000 levels deep took
/// minutes within one field's fuel.
pub(crate) struct Walk<'a, 's, 'e> {
    state: &'a State<'s, 'e>,
    /// Pairs the fuel left pays for.
    affordable: u64,
    visited: u64,
}

impl<'a, 's, 'e> Walk<'a, 's, 'e> {
    pub(crate) fn new(state: &'a State<'s, 'e>) -> Self {
        let affordable = match state.fuel_levels() {
            Some((_, remaining)) => remaining.saturating_mul(ITEMS_PER_FUEL),
            None => u64::MAX,
        };
        Walk {
            state,
            affordable,
            visited: 0,
        }
    }

    /// Counts a pair of values `depth` levels down.
    pub(crate) fn visit(&mut self, depth: usize) -> Result<(), JinjaError> {
        self.visited += 1;
        if self.visited > self.affordable {
            // The same error as any other overspending.
            self.state
                .consume_fuel(self.affordable / ITEMS_PER_FUEL + 1)?;
        }
        if depth > MAX_VALUE_DEPTH {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "value nested more than {MAX_VALUE_DEPTH} levels deep (or containing itself) compared or used as a key"
                ),
            ));
        }
        Ok(())
    }

    /// Charges the fuel for the pairs visited.
    pub(crate) fn finish(self) -> Result<(), JinjaError> {
        self.state.consume_fuel(self.visited / ITEMS_PER_FUEL)
    }

    /// Walks every item of `value` (a value minijinja is about to compare
    /// with its own `==`, as `loop.changed` does).
    pub(crate) fn walk_all(&mut self, value: &Value, depth: usize) -> Result<(), JinjaError> {
        self.visit(depth)?;
        match value.kind() {
            ValueKind::Seq => value
                .try_iter()?
                .try_for_each(|item| self.walk_all(&item, depth + 1)),
            ValueKind::Map => value.try_iter()?.try_for_each(|key| {
                self.walk_all(&value.get_item(&key).unwrap_or_default(), depth + 1)
            }),
            _ => Ok(()),
        }
    }

    /// Python's `left == right`: lists (and tuples) item by item, mappings
    /// key by key, anything else as minijinja compares it (which walks
    /// nothing then).
    pub(crate) fn equal(
        &mut self,
        left: &Value,
        right: &Value,
        depth: usize,
    ) -> Result<bool, JinjaError> {
        self.visit(depth)?;
        let sequence = |v: &Value| matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable);
        if sequence(left) && sequence(right) && left.is_tuple() == right.is_tuple() {
            if same_list(left, right) {
                return Ok(true);
            }
            if let (Some(a), Some(b)) = (left.len(), right.len())
                && a != b
            {
                return Ok(false);
            }
            let mut right_items = right.try_iter()?;
            for a in left.try_iter()? {
                match right_items.next() {
                    Some(b) if self.equal(&a, &b, depth + 1)? => {}
                    _ => return Ok(false),
                }
            }
            return Ok(right_items.next().is_none());
        }
        if left.kind() == ValueKind::Map && right.kind() == ValueKind::Map {
            if left.len() != right.len() {
                return Ok(false);
            }
            for key in left.try_iter()? {
                // A mapping holds no undefined value: undefined is missing.
                let b = right.get_item(&key)?;
                if b.is_undefined() {
                    return Ok(false);
                }
                let a = left.get_item(&key).unwrap_or_default();
                if !self.equal(&a, &b, depth + 1)? {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        Ok(left == right)
    }

    /// Python's `left < right` (and, through the ordering it returns,
    /// `<=`, `>`, `>=`): numbers and booleans with each other, strings with
    /// strings, lists with lists and tuples with tuples (item by item), an
    /// error for anything else. `operator` names the comparison in the
    /// error.
    pub(crate) fn order(
        &mut self,
        operator: &str,
        left: &Value,
        right: &Value,
        depth: usize,
    ) -> Result<Ordering, JinjaError> {
        Ok(self
            .first_difference(operator, left, right, depth)?
            .unwrap_or(Ordering::Equal))
    }

    /// [`Walk::order`], or `None` for two sequences equal item by item.
    ///
    /// Python skips the items that are equal and orders the first pair
    /// that is not. Testing a pair of sequences for equality and then
    /// ordering them walks their items twice, and again at every level
    /// below: quadratic in the depth. Here each pair of nested sequences is
    /// walked once, equality and order together.
    fn first_difference(
        &mut self,
        operator: &str,
        left: &Value,
        right: &Value,
        depth: usize,
    ) -> Result<Option<Ordering>, JinjaError> {
        self.visit(depth)?;
        let numeric = |value: &Value| matches!(value.kind(), ValueKind::Number | ValueKind::Bool);
        let same_sequence_type = |a: &Value, b: &Value| {
            a.kind() == ValueKind::Seq && b.kind() == ValueKind::Seq && a.is_tuple() == b.is_tuple()
        };
        match (left.kind(), right.kind()) {
            (ValueKind::Undefined, _) | (_, ValueKind::Undefined) => Err(undefined_error()),
            _ if numeric(left) && numeric(right) => Ok(Some(left.cmp(right))),
            (ValueKind::String, ValueKind::String) => Ok(Some(left.cmp(right))),
            _ if same_sequence_type(left, right) => {
                if same_list(left, right) {
                    return Ok(None);
                }
                let left_items: Vec<Value> = left.try_iter()?.collect();
                let right_items: Vec<Value> = right.try_iter()?.collect();
                for (a, b) in left_items.iter().zip(&right_items) {
                    if same_sequence_type(a, b) {
                        if let Some(order) = self.first_difference(operator, a, b, depth + 1)? {
                            return Ok(Some(order));
                        }
                    } else if !self.equal(a, b, depth + 1)? {
                        return self.order(operator, a, b, depth + 1).map(Some);
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
}

/// Whether `a` and `b` are the same list object (equal without a walk, as
/// Python finds them).
fn same_list(a: &Value, b: &Value) -> bool {
    match (
        a.downcast_object_ref::<Vec<Value>>(),
        b.downcast_object_ref::<Vec<Value>>(),
    ) {
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        _ => false,
    }
}

/// Python's `value in container`: a string looked for in a string, a
/// hashable key in a mapping, an item equal to `value` in a list.
pub(crate) fn contains(
    walk: &mut Walk<'_, '_, '_>,
    state: &State<'_, '_>,
    container: &Value,
    value: &Value,
) -> Result<bool, JinjaError> {
    match container.kind() {
        ValueKind::String if value.kind() != ValueKind::String => Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!(
                "'in <string>' requires string as left operand, not {}",
                python_type(value)
            ),
        )),
        ValueKind::Map => {
            check_hashable(walk, value, 0)?;
            minijinja::tests::is_in(state, value, container)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            for item in container.try_iter()? {
                if walk.equal(value, &item, 0)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        // Jinja2's undefined iterates as empty.
        ValueKind::Undefined => Ok(false),
        ValueKind::None | ValueKind::Bool | ValueKind::Number => Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!(
                "argument of type '{}' is not iterable",
                python_type(container)
            ),
        )),
        _ => minijinja::tests::is_in(state, value, container),
    }
}

/// Fails as Python's `sorted(keys)`, `min(keys)` or `max(keys)` would.
fn check_orderable(state: &State<'_, '_>, mut keys: Vec<Value>) -> Result<(), JinjaError> {
    let mut walk = Walk::new(state);
    let mut first_error = None;
    keys.sort_by(|a, b| {
        if first_error.is_some() {
            return Ordering::Equal;
        }
        match walk.order("<", a, b, 0) {
            Ok(order) => order,
            Err(error) => {
                first_error = Some(error);
                Ordering::Equal
            }
        }
    });
    walk.finish()?;
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
    let attribute = keyword::<String>(kwargs, "attribute")?;
    let case_sensitive = keyword::<bool>(kwargs, "case_sensitive")?.unwrap_or(false);
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
fn orderable(state: &State<'_, '_>, value: Value, kwargs: &Kwargs) -> Result<Value, JinjaError> {
    let (value, keys) = items_and_keys(value, kwargs)?;
    if let Some(keys) = keys {
        check_orderable(state, keys)?;
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
        check_orderable(
            state,
            keys.into_iter().map(|key| Value::from(vec![key])).collect(),
        )?;
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
    let value = orderable(state, value, &kwargs)?;
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
    let value = orderable(state, value, &kwargs)?;
    minijinja::filters::max(state, value, kwargs)
}

/// Jinja2's `groupby(attribute, default=none, case_sensitive=false)`: its
/// items sorted by their keys as Python's `sorted` would, then grouped
/// (minijinja's filter, once the keys are checked: minijinja orders any
/// pair, by recursion at no cost).
pub(crate) fn groupby_filter(
    state: &State<'_, '_>,
    value: Value,
    attribute: Option<String>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let attribute = match attribute {
        Some(attribute) => attribute,
        None => kwargs.get::<String>("attribute")?,
    };
    let default = keyword::<Value>(&kwargs, "default")?.unwrap_or_default();
    let case_sensitive = keyword::<bool>(&kwargs, "case_sensitive")?.unwrap_or(false);
    let value = if matches!(value.kind(), ValueKind::Seq | ValueKind::Iterable) {
        let items: Vec<Value> = value.try_iter()?.collect();
        let keys = items
            .iter()
            .map(|item| {
                let key = at_path(item, &attribute);
                let key = if key.is_undefined() {
                    default.clone()
                } else {
                    key
                };
                folded(key, case_sensitive)
            })
            .collect();
        check_orderable(state, keys)?;
        Value::from(items)
    } else {
        value
    };
    minijinja::filters::groupby(value, Some(&attribute), kwargs)
}

/// Python's `hash(key)` fails for lists and dicts (tuples hash when their
/// items do). `depth` levels down a key (tuples nest too); the items are
/// charged to `walk` as a comparison's.
pub(crate) fn check_hashable(
    walk: &mut Walk<'_, '_, '_>,
    key: &Value,
    depth: usize,
) -> Result<(), JinjaError> {
    walk.visit(depth)?;
    match key.kind() {
        ValueKind::Seq if key.is_tuple() => key
            .try_iter()?
            .try_for_each(|item| check_hashable(walk, &item, depth + 1)),
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
    let mut walk = Walk::new(state);
    let checked = keys
        .iter()
        .flatten()
        .try_for_each(|key| check_hashable(&mut walk, key, 0));
    walk.finish()?;
    checked?;
    minijinja::filters::unique(state, value, kwargs)
}

/// Jinja2's `dictsort(case_sensitive=false, by='key', reverse=false)`.
pub(crate) fn dictsort_filter(
    state: &State<'_, '_>,
    value: &Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["case_sensitive", "by", "reverse"], &positional, kwargs)?;
    if value.kind() == ValueKind::Map {
        let case_sensitive = keyword::<bool>(&kwargs, "case_sensitive")?.unwrap_or(false);
        let by_value = keyword::<&str>(&kwargs, "by")? == Some("value");
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
        check_orderable(state, keys)?;
    }
    minijinja::filters::dictsort(value, kwargs)
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
        let env = minijinja::Environment::new();
        let state = env.empty_state();
        for keys in [
            serde_json::json!([3, 1.5, true]),
            serde_json::json!(["b", "a"]),
            serde_json::json!([[1, "a"], [1], [0, 2]]),
            serde_json::json!([null]),
        ] {
            assert!(
                check_orderable(&state, list(keys.clone())).is_ok(),
                "{keys}"
            );
        }
    }

    #[test]
    fn refuses_what_python_refuses() {
        let env = minijinja::Environment::new();
        let state = env.empty_state();
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
            let error = check_orderable(&state, list(keys.clone())).unwrap_err();
            assert!(
                error.detail().unwrap_or_default().contains(message),
                "{keys}: {error}"
            );
        }
        assert_eq!(
            check_orderable(&state, vec![Value::from(1), Value::UNDEFINED])
                .unwrap_err()
                .kind(),
            ErrorKind::UndefinedError
        );
    }

    #[test]
    fn only_hashable_keys_are_unique() {
        let env = minijinja::Environment::new();
        let state = env.empty_state();
        let mut walk = Walk::new(&state);
        assert!(check_hashable(&mut walk, &Value::from("a"), 0).is_ok());
        for unhashable in [serde_json::json!([1]), serde_json::json!({"a": 1})] {
            assert!(check_hashable(&mut walk, &json(unhashable), 0).is_err());
        }
    }
}
