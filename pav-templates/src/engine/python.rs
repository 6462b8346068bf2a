//! Python semantics on values: the methods templates written for Jinja2
//! call (`s.split('-')`, `d.items()`, `n.bit_length()`), dispatched by
//! [`python_method`], minijinja's unknown-method callback.
//!
//! Each kind of value has its methods next to its other Python rules:
//! `str` in [`strings`], `int` and `float` in [`numbers`], `list` and
//! `dict` in [`collections`]; the rest are minijinja-contrib's pycompat.
//! Python's `str()` and `repr()` are in [`pyrepr`](super::pyrepr), its
//! comparisons in [`comparisons`](super::comparisons) and
//! [`ordering`](super::ordering).

use minijinja::value::{Value, ValueKind};
use minijinja::{Error as JinjaError, State};

use super::limits::{BYTES_PER_FUEL, format_size, join_size, replace_size};
use super::{collections, numbers, strings};

/// Python methods (minijinja-contrib's pycompat), with what `str.join`,
/// `str.replace` and `str.format` would build checked against the remaining
/// fuel first. minijinja checks its own operators and filters before they
/// allocate, but charges a method only for the value it returned, so
/// `b.join([b] * 1000)` with a 2 MB `b` allocated 4 GB, and
/// `'{:>999999999}'.format(x)` 2 GB, before fuel stopped them.
pub(super) fn python_method(
    state: &mut State<'_, '_>,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, JinjaError> {
    if let (Some(text), Some((_, remaining))) = (value.as_str(), state.fuel_levels()) {
        let affordable = remaining.saturating_mul(BYTES_PER_FUEL);
        let size = match method {
            "join" => args.first().map(|items| join_size(text, items, affordable)),
            "replace" => replace_size(text, args),
            "format" => Some(format_size(text, args)),
            _ => None,
        };
        if size.is_some_and(|size| size > affordable) {
            // Exhausts the fuel: the same error as any other overspending.
            state.consume_fuel(remaining.saturating_add(1))?;
        }
    }
    if let Some(text) = value.as_str()
        && let Some(result) = strings::str_method(state, text, method, args)
    {
        return result;
    }
    if value.kind() == ValueKind::Number
        && let Some(result) = numbers::number_method(value, method, args)
    {
        return result;
    }
    if let Some(result) = collections::collection_method(value, method, args) {
        return result;
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}
