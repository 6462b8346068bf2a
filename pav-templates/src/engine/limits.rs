//! The sandbox's bounds: how much one render may spend and print, and the
//! checks that hold a template to them where minijinja's own do not.
//!
//! - Fuel ([`FUEL_PER_FIELD`]), macro and include depth
//!   ([`RECURSION_LIMIT`]) and output size ([`MAX_OUTPUT_BYTES`],
//!   [`MAX_PHASE_OUTPUT_BYTES`]): set on the environment and enforced by
//!   minijinja, or counted by the provisioner's render.
//! - Value depth ([`MAX_VALUE_DEPTH`]): filters that walk a whole value
//!   check it first ([`check_value_shape`]); comparisons as they walk.
//! - What a unit of fuel pays for ([`BYTES_PER_FUEL`],
//!   [`SERIALIZED_BYTES_PER_FUEL`], [`ITEMS_PER_FUEL`]), so that pav's own
//!   filters and methods charge what minijinja's would.
//! - Output-size estimates: what `str.join`, `str.replace` and
//!   `str.format` would build ([`join_size`], [`replace_size`],
//!   [`format_size`]), checked against the remaining fuel before they
//!   allocate, and [`afford`] for pav's own methods that build text.
//!
//! Other bounds have modules of their own: expression depth, checked
//! before parsing ([`expression_depth`](super::expression_depth)); the
//! stack a render runs on ([`stack`](super::stack)); namespaces emptied
//! after each render ([`namespaces`](super::namespaces)).

use minijinja::value::{Value, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, State};

/// Evaluation budget of one field's template, in minijinja fuel units
/// (roughly one per instruction). The encryption example's largest field
/// takes under 100; a loop of a million iterations is refused.
pub const FUEL_PER_FIELD: u64 = 200_000;

/// Deepest nesting of macro calls and includes a template may reach.
pub const RECURSION_LIMIT: usize = 64;

/// Largest output one field's template may produce, in bytes.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// Largest output all the templates of one phase may produce together, in
/// bytes: without it, a few kilobytes of fields each printing 1 MiB add up
/// to gigabytes. An object the API server stores is at most 1.5 MiB.
pub const MAX_PHASE_OUTPUT_BYTES: usize = 4 << 20;

/// Deepest nesting of lists and mappings that `tojson`, `string`, `pprint`
/// and `join` accept: they would also refuse a value containing itself
/// only after an endless walk, and `pprint`'s indentation grows with the
/// square of the depth (35 s at 2,000 levels). Kubernetes objects nest
/// about 15 levels. (The stack is not what this guards: every render has
/// [`RENDER_STACK_BYTES`](super::RENDER_STACK_BYTES), enough for any
/// depth the fuel can build.)
pub const MAX_VALUE_DEPTH: usize = 128;

/// Bytes one unit of fuel pays for (minijinja's `UNITS_PER_FUEL`: fuel is
/// also charged for the data a template makes, a unit per byte).
pub(super) const BYTES_PER_FUEL: u64 = 64;

/// Bytes of serialized output a unit of fuel pays for (minijinja's
/// `SERIALIZED_BYTE_COST`: a quarter of a unit each).
pub(super) const SERIALIZED_BYTES_PER_FUEL: u64 = 4;

/// Items a unit of fuel pays for when a filter visits them (minijinja's
/// `ITEM_COST`: half a unit each).
pub(crate) const ITEMS_PER_FUEL: u64 = 2;

/// Refuses a value nested deeper than [`MAX_VALUE_DEPTH`] (a value that
/// contains itself is infinitely deep), and charges fuel for every list
/// item and mapping entry visited, as minijinja's own filters do: lists
/// that share their items (`[a, a]` of `[b, b]` of …) have exponentially
/// many, so the walk stops when the fuel left is spent. The walk keeps its
/// own stack, so it is safe at any depth.
pub(super) fn check_value_shape(
    state: &State<'_, '_>,
    filter: &str,
    value: &Value,
) -> Result<(), JinjaError> {
    let affordable_nodes = match state.fuel_levels() {
        Some((_, remaining)) => remaining.saturating_mul(ITEMS_PER_FUEL),
        None => u64::MAX,
    };
    let mut nodes = 0u64;
    let mut pending = vec![(value.clone(), 0usize)];
    while let Some((value, depth)) = pending.pop() {
        nodes += 1;
        if nodes > affordable_nodes {
            // The same error as any other overspending.
            state.consume_fuel(affordable_nodes / ITEMS_PER_FUEL + 1)?;
        }
        let children: Vec<Value> = match value.kind() {
            // Not `Iterable`: some iterate only once, and the filter would
            // then see them empty.
            ValueKind::Seq => value.try_iter().into_iter().flatten().collect(),
            ValueKind::Map => value
                .try_iter()
                .into_iter()
                .flatten()
                .flat_map(|key| [value.get_item(&key).unwrap_or_default(), key])
                .collect(),
            _ => continue,
        };
        if children.is_empty() {
            continue;
        }
        if depth >= MAX_VALUE_DEPTH {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "filter '{filter}': value nested more than {MAX_VALUE_DEPTH} levels deep (or containing itself)"
                ),
            ));
        }
        pending.extend(children.into_iter().map(|child| (child, depth + 1)));
    }
    state.consume_fuel(nodes / ITEMS_PER_FUEL)
}

/// Fails with the fuel error when `bytes` more of output cannot be paid for.
pub(super) fn afford(state: &State<'_, '_>, bytes: u64) -> Result<(), JinjaError> {
    if let Some((_, remaining)) = state.fuel_levels()
        && bytes > remaining.saturating_mul(BYTES_PER_FUEL)
    {
        state.consume_fuel(remaining.saturating_add(1))?;
    }
    Ok(())
}

/// Length of a value as `{}` prints it.
pub(super) fn display_len(value: &Value) -> u64 {
    match value.as_str() {
        Some(text) => text.len() as u64,
        None => value.to_string().len() as u64,
    }
}

/// Size of `separator.join(items)`, counted until it passes `limit`.
pub(super) fn join_size(separator: &str, items: &Value, limit: u64) -> u64 {
    let Ok(iter) = items.try_iter() else {
        return 0;
    };
    let mut size = 0u64;
    for (index, item) in iter.enumerate() {
        if index > 0 {
            size = size.saturating_add(separator.len() as u64);
        }
        size = size.saturating_add(display_len(&item));
        if size > limit {
            break;
        }
    }
    size
}

/// Size of `text.replace(old, new[, count])`, or `None` when the arguments
/// are not those (pycompat then reports them).
pub(super) fn replace_size(text: &str, args: &[Value]) -> Option<u64> {
    let old = args.first()?.as_str()?;
    let new = args.get(1)?.as_str()?;
    let count = match args.get(2) {
        Some(count) => i64::try_from(count.clone()).ok()?,
        None => -1,
    };
    // An empty `old` matches before every character and at the end.
    let matches = if old.is_empty() {
        text.chars().count() as u64 + 1
    } else {
        text.matches(old).count() as u64
    };
    let replaced = match u64::try_from(count) {
        Ok(count) => matches.min(count),
        Err(_) => matches,
    };
    Some(
        (text.len() as u64)
            .saturating_sub(replaced.saturating_mul(old.len() as u64))
            .saturating_add(replaced.saturating_mul(new.len() as u64)),
    )
}

/// An upper bound of the size of `text.format(*args, **kwargs)`: every
/// `{` may be a field printing the longest argument padded to every number
/// written inside its braces (width, precision).
pub(super) fn format_size(text: &str, args: &[Value]) -> u64 {
    let longest = args
        .iter()
        .flat_map(|arg| match arg.kind() {
            // Keyword arguments arrive as one map.
            ValueKind::Map => arg
                .try_iter()
                .into_iter()
                .flatten()
                .filter_map(|key| arg.get_item(&key).ok())
                .map(|value| display_len(&value))
                .collect::<Vec<_>>(),
            _ => vec![display_len(arg)],
        })
        .max()
        .unwrap_or(0);
    let mut size = text.len() as u64;
    for field in text.split('{').skip(1) {
        let spec = field.split('}').next().unwrap_or_default();
        let numbers = spec
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|digits| {
                digits
                    .parse::<u64>()
                    .ok()
                    .or((!digits.is_empty()).then_some(u64::MAX))
            })
            .fold(0u64, u64::saturating_add);
        size = size.saturating_add(longest).saturating_add(numbers);
    }
    size
}
