//! The minijinja environment configured with PaV's rules.
//!
//! - `trim_blocks` and `lstrip_blocks`: a line holding only a statement block
//!   disappears from the output.
//! - No auto-escaping: output goes into YAML and shell, not HTML.
//! - Lenient undefined values (`x or 'default'`, `x is defined` work), but
//!   an expression whose *output* is undefined is an error, as is one that is
//!   not a string or a number.
//! - Filters `tobash` and `tojson` with the original PaV's exact output.
//! - Evaluation is bounded by fuel, recursion depth and output size.
//! - Expressions are bounded in depth before they are parsed ([`expression_depth`]).
//! - Filters that walk a whole value (`tojson`, `string`, `pprint`, `join`)
//!   refuse values nested deeper than [`MAX_VALUE_DEPTH`], cyclic ones
//!   included; namespaces are emptied after each render
//!   (`NamespaceTracking`), so a namespace holding itself is not leaked.
//! - Every render has [`RENDER_STACK_BYTES`] of stack, enough for
//!   minijinja's own recursive operations on the deepest value the fuel
//!   can build ([`MAX_BUILT_DEPTH`]).

use minijinja::syntax::SyntaxConfig;
use std::cell::RefCell;

use minijinja::value::{ArgType, Kwargs, StringInput, Value, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, Output, State};

mod collections;
mod comparisons;
mod globals;
mod json;
pub mod expression_depth;
mod numbers;
mod rewrite;
mod ordering;
mod pyrepr;
mod stack;
mod strings;

use numbers::python_number;
pub(crate) use stack::on_render_stack;
pub use stack::{MAX_BUILT_DEPTH, RENDER_STACK_BYTES};

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
/// [`RENDER_STACK_BYTES`], enough for any depth the fuel can build.)
pub const MAX_VALUE_DEPTH: usize = 128;

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
    env.add_filter("tobash", tobash_filter);
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
    env.add_filter("attr", attr_filter);
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
    env.add_filter("string", string_filter);
    env.add_filter("pprint", pprint_filter);
    env.add_filter("join", join_filter);
    env.add_function("namespace", tracked_namespace);
    // Python methods on strings, lists and dicts (`s.split('-')`,
    // `d.items()`), which PaV templates written for Jinja2 use.
    env.set_unknown_method_callback(python_method);
    env
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

/// Bytes one unit of fuel pays for (minijinja's `UNITS_PER_FUEL`: fuel is
/// also charged for the data a template makes, a unit per byte).
const BYTES_PER_FUEL: u64 = 64;

/// Python methods (minijinja-contrib's pycompat), with what `str.join`,
/// `str.replace` and `str.format` would build checked against the remaining
/// fuel first. minijinja checks its own operators and filters before they
/// allocate, but charges a method only for the value it returned, so
/// `b.join([b] * 1000)` with a 2 MB `b` allocated 4 GB, and
/// `'{:>999999999}'.format(x)` 2 GB, before fuel stopped them.
fn python_method(
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

/// Length of a value as `{}` prints it.
fn display_len(value: &Value) -> u64 {
    match value.as_str() {
        Some(text) => text.len() as u64,
        None => value.to_string().len() as u64,
    }
}

/// Size of `separator.join(items)`, counted until it passes `limit`.
fn join_size(separator: &str, items: &Value, limit: u64) -> u64 {
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
fn replace_size(text: &str, args: &[Value]) -> Option<u64> {
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
fn format_size(text: &str, args: &[Value]) -> u64 {
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

fn tobash_filter(value: &Value) -> Result<String, JinjaError> {
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

/// Keyword argument `name` of a filter or function, if given. minijinja's
/// `Kwargs::get` allocates on every lookup (the key as a value, and again
/// as a string to mark it used), so calls without keywords, nearly all of
/// them, skip it: `default('x')` in every field must not cost that.
pub(crate) fn keyword<'a, T>(kwargs: &'a Kwargs, name: &'a str) -> Result<Option<T>, JinjaError>
where
    Option<T>: ArgType<'a, Output = Option<T>>,
{
    if kwargs.args().next().is_none() {
        return Ok(None);
    }
    kwargs.get::<Option<T>>(name)
}

/// `kwargs` with the positional arguments added under `names`, in order:
/// Jinja2 takes these filters' arguments either way, minijinja's builtins
/// as keywords only.
fn keywords(names: &[&str], positional: &[Value], kwargs: Kwargs) -> Result<Kwargs, JinjaError> {
    if positional.len() > names.len() {
        return Err(JinjaError::from(ErrorKind::TooManyArguments));
    }
    if positional.is_empty() {
        return Ok(kwargs);
    }
    let mut merged: Vec<(String, Value)> = names
        .iter()
        .zip(positional)
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .collect();
    for name in kwargs.args() {
        if names[..positional.len()].contains(&name) {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("argument {name} given twice"),
            ));
        }
        merged.push((name.to_owned(), kwargs.get::<Value>(name)?));
    }
    Ok(Kwargs::from_iter(
        merged
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone())),
    ))
}

/// Jinja2's `attr`: an attribute only, never an item, so a mapping's keys
/// are not attributes (`{'a': 1} | attr('a')` is undefined).
fn attr_filter(value: &Value, name: &str) -> Result<Value, JinjaError> {
    match value.kind() {
        ValueKind::Map => Ok(Value::UNDEFINED),
        _ => value.get_attr(name),
    }
}

/// minijinja's `string`, for values [`check_value_shape`] accepts.
fn string_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, JinjaError> {
    check_value_shape(state, "string", value)?;
    if value.is_safe() {
        return Ok(value.clone());
    }
    Ok(Value::from(pyrepr::python_str(value)))
}

/// minijinja's `pprint`, for values [`check_value_shape`] accepts.
fn pprint_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, JinjaError> {
    check_value_shape(state, "pprint", value)?;
    let text = pyrepr::python_repr(value, true);
    // Charged as minijinja charges its own `pprint`.
    state.consume_fuel(text.len() as u64 / SERIALIZED_BYTES_PER_FUEL)?;
    Ok(Value::from(text))
}

/// minijinja's `join`, for lists whose items [`check_value_shape`] accepts
/// (each item is printed whole).
fn join_filter(
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

/// Bytes of serialized output a unit of fuel pays for (minijinja's
/// `SERIALIZED_BYTE_COST`: a quarter of a unit each).
const SERIALIZED_BYTES_PER_FUEL: u64 = 4;

/// Items a unit of fuel pays for when a filter visits them (minijinja's
/// `ITEM_COST`: half a unit each).
pub(crate) const ITEMS_PER_FUEL: u64 = 2;

/// Refuses a value nested deeper than [`MAX_VALUE_DEPTH`] (a value that
/// contains itself is infinitely deep), and charges fuel for every list
/// item and mapping entry visited, as minijinja's own filters do: lists
/// that share their items (`[a, a]` of `[b, b]` of …) have exponentially
/// many, so the walk stops when the fuel left is spent. The walk keeps its
/// own stack, so it is safe at any depth.
fn check_value_shape(state: &State<'_, '_>, filter: &str, value: &Value) -> Result<(), JinjaError> {
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

thread_local! {
    /// The namespaces made so far by the render [`NamespaceTracking`]
    /// tracks on this thread, if any.
    static NAMESPACES: RefCell<Option<Vec<Value>>> = const { RefCell::new(None) };
}

/// minijinja's `namespace()`, remembering what it made for
/// [`NamespaceTracking`].
fn tracked_namespace(defaults: Option<ValueOrKwargs>) -> Result<Value, JinjaError> {
    let namespace = minijinja::functions::namespace(defaults)?;
    NAMESPACES.with_borrow_mut(|tracked| {
        if let Some(tracked) = tracked {
            tracked.push(namespace.clone());
        }
    });
    Ok(namespace)
}

/// Empties, when dropped, every namespace made on this thread since it was
/// created.
///
/// `{% set ns.n = ns %}` makes a reference cycle that outlives the render:
/// memory leaked on every evaluation. minijinja offers no hook on
/// assignment to refuse it, and only its own `{% set %}` can change a
/// namespace, so once the render is over each attribute is set to none by
/// a small generated template, which breaks every cycle: a cycle's last
/// link is always such an assignment (values are immutable otherwise).
#[must_use = "namespaces are emptied when this is dropped"]
pub(crate) struct NamespaceTracking(());

impl NamespaceTracking {
    /// Starts tracking the namespaces made on this thread.
    pub(crate) fn start() -> Self {
        NAMESPACES.set(Some(Vec::new()));
        NamespaceTracking(())
    }
}

impl Drop for NamespaceTracking {
    fn drop(&mut self) {
        let namespaces = NAMESPACES.take().unwrap_or_default();
        if namespaces.is_empty() {
            return;
        }
        let mut source = String::new();
        // What the namespaces hold, released below one level at a time.
        let mut contents = Vec::new();
        for (index, namespace) in namespaces.iter().enumerate() {
            // `{% set %}` only ever made attributes named as identifiers;
            // others came from `namespace(...)`'s arguments and cannot
            // close a cycle.
            let keys: Vec<Value> = namespace
                .try_iter()
                .into_iter()
                .flatten()
                .filter(|key| key.as_str().is_some_and(is_identifier))
                .collect();
            if keys.is_empty() {
                continue;
            }
            source.push_str(&format!("{{% set n = namespaces[{index}] %}}"));
            for key in keys {
                contents.extend(namespace.get_item(&key).ok());
                source.push_str(&format!("{{% set n.{key} = none %}}"));
            }
        }
        // An environment without fuel: the render may have spent it all.
        let result = Environment::new().render_str(
            &source,
            minijinja::context! { namespaces => Value::from(namespaces) },
        );
        debug_assert!(result.is_ok(), "emptying namespaces: {result:?}");
        release_iteratively(contents);
    }
}

/// Drops `values` without recursing into the lists only they hold.
///
/// Dropping a list drops its items, recursively: 368 bytes of stack per
/// level in a debug build. Lists held by namespaces are taken apart here
/// one level at a time instead, so emptying them touches no more stack
/// than a shallow value. (Mappings cannot be: minijinja does not expose
/// their type. Nor can values the render dropped itself. Both drop by
/// recursion within [`RENDER_STACK_BYTES`], which `tests/deep_values.rs`
/// checks at the deepest the fuel allows.)
fn release_iteratively(mut values: Vec<Value>) {
    while let Some(value) = values.pop() {
        let Some(list) = value.downcast_object::<Vec<Value>>() else {
            continue;
        };
        drop(value);
        // Only when nothing else holds the list; otherwise dropping our
        // reference frees nothing.
        if let Ok(items) = std::sync::Arc::try_unwrap(list) {
            values.extend(items);
        }
    }
}

fn is_identifier(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, ctx: Value) -> Result<String, JinjaError> {
        environment().render_str(source, ctx)
    }

    use crate::context::to_value;

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
