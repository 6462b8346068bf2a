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
//! - Expressions are bounded in depth before they are parsed ([`nesting`]).
//! - Filters that walk a whole value (`tojson`, `string`, `pprint`, `join`)
//!   refuse values nested deeper than [`MAX_VALUE_DEPTH`], cyclic ones
//!   included; namespaces are emptied after each render
//!   (`NamespaceTracking`), so a namespace holding itself is not leaked.

use minijinja::syntax::SyntaxConfig;
use std::cell::RefCell;

use minijinja::value::{Kwargs, StringInput, Value, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, Output, State};

pub mod nesting;

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
/// and `join` accept. They recurse once per level: a 20,000-deep list (a
/// loop of `{% set ns.l = [ns.l] %}` builds one within the fuel) overflowed
/// a 2 MiB stack, and `pprint`'s indentation grows with the square of the
/// depth (35 s at 2,000 levels). Kubernetes objects nest about 15 levels.
pub const MAX_VALUE_DEPTH: usize = 128;

/// Builds an environment with PaV's syntax, filters, formatter and limits.
pub(crate) fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
    env.set_fuel(Some(FUEL_PER_FIELD));
    env.set_recursion_limit(RECURSION_LIMIT);
    env.set_formatter(format_output);
    env.add_filter("tobash", tobash_filter);
    env.add_filter("tojson", tojson_filter);
    env.add_filter("int", int_filter);
    env.add_filter("string", string_filter);
    env.add_filter("pprint", pprint_filter);
    env.add_filter("join", join_filter);
    env.add_function("namespace", tracked_namespace);
    // Python methods on strings, lists and dicts (`s.split('-')`,
    // `d.items()`), which PaV templates written for Jinja2 use.
    env.set_unknown_method_callback(python_method);
    env
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

/// Renders numbers the way Python's `str()` does, so shell commands built by
/// existing PaV templates see the same text (`1.0`, `1e+16`, `1e-05`).
fn python_number(value: &Value) -> String {
    // Serialising is the public way to tell 2.0 from 2.
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Number(n)) if n.is_f64() => {
            python_float(n.as_f64().unwrap_or(f64::NAN))
        }
        Ok(serde_json::Value::Number(n)) => n.to_string(),
        _ => match f64::try_from(value.clone()) {
            Ok(float) => python_float(float),
            Err(_) => value.to_string(),
        },
    }
}

fn python_float(float: f64) -> String {
    if float.is_nan() {
        return "nan".to_owned();
    }
    if float.is_infinite() {
        return if float > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // `{:e}` gives the shortest digits that round-trip, as Python's repr does.
    let scientific = format!("{float:e}");
    let (mantissa, exp) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let (int_part, frac_part) = if point <= 0 {
            let zeros = "0".repeat(point.unsigned_abs() as usize);
            ("0".to_owned(), format!("{zeros}{digits}"))
        } else {
            let point = point as usize;
            if digits.len() > point {
                (digits[..point].to_owned(), digits[point..].to_owned())
            } else {
                (format!("{digits:0<point$}"), String::new())
            }
        };
        let frac_part = if frac_part.is_empty() {
            "0".to_owned()
        } else {
            frac_part
        };
        format!("{sign}{int_part}.{frac_part}")
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.unsigned_abs())
    }
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

/// Jinja2's `int`: numbers are truncated, strings parsed in `base` (or as a
/// float, then truncated), and anything that does not parse gives `default`
/// (0) instead of an error, as existing templates expect.
fn int_filter(
    value: &Value,
    default: Option<Value>,
    base: Option<u32>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let default = match default {
        Some(default) => default,
        None => kwargs
            .get::<Option<Value>>("default")?
            .unwrap_or(Value::from(0)),
    };
    let base: u32 = match base {
        Some(base) => base,
        None => kwargs.get::<Option<u32>>("base")?.unwrap_or(10),
    };
    kwargs.assert_all_used()?;
    if !(2..=36).contains(&base) {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "int(): base must be between 2 and 36",
        ));
    }
    let parsed = match value.kind() {
        ValueKind::Bool => Some(Value::from(i64::from(value.is_true()))),
        ValueKind::Number => match serde_json::to_value(value) {
            Ok(serde_json::Value::Number(n)) if n.is_f64() => {
                n.as_f64().map(|f| Value::from(f.trunc() as i64))
            }
            _ => Some(value.clone()),
        },
        ValueKind::String => {
            let text = value.as_str().unwrap_or_default().trim().replace('_', "");
            let unprefixed = match base {
                16 => text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")),
                8 => text.strip_prefix("0o").or_else(|| text.strip_prefix("0O")),
                2 => text.strip_prefix("0b").or_else(|| text.strip_prefix("0B")),
                _ => None,
            }
            .unwrap_or(&text);
            i64::from_str_radix(unprefixed, base)
                .ok()
                .map(Value::from)
                .or_else(|| {
                    (base == 10)
                        .then(|| text.parse::<f64>().ok())
                        .flatten()
                        .filter(|f| f.is_finite())
                        .map(|f| Value::from(f.trunc() as i64))
                })
        }
        _ => None,
    };
    Ok(parsed.unwrap_or(default))
}

fn tojson_filter(
    state: &State<'_, '_>,
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    check_value_shape(state, "tojson", value)?;
    let indent = match indent {
        Some(indent) => Some(indent),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    let json = serde_json::to_value(value).map_err(|err| {
        JinjaError::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(err)
    })?;
    // Indentation is repeated on every line, so `indent=1000000000` would
    // allocate gigabytes before fuel is charged for the result: check first.
    if let (Some(width), Some((_, remaining))) = (indent, state.fuel_levels()) {
        let affordable = remaining.saturating_mul(BYTES_PER_FUEL);
        if indentation_bytes(&json, width as u64, 0) > affordable {
            state.consume_fuel(remaining.saturating_add(1))?;
        }
    }
    let mut out = String::new();
    write_python_json(&mut out, &json, indent, 0);
    Ok(Value::from(out))
}

/// minijinja's `string`, for values [`check_value_shape`] accepts.
fn string_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, JinjaError> {
    check_value_shape(state, "string", value)?;
    minijinja::filters::string(state, value)
}

/// minijinja's `pprint`, for values [`check_value_shape`] accepts.
fn pprint_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, JinjaError> {
    check_value_shape(state, "pprint", value)?;
    let text = minijinja::filters::pprint(value);
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
    minijinja::filters::join(state, value, joiner, attribute, kwargs)
}

/// Bytes of serialized output a unit of fuel pays for (minijinja's
/// `SERIALIZED_BYTE_COST`: a quarter of a unit each).
const SERIALIZED_BYTES_PER_FUEL: u64 = 4;

/// Items a unit of fuel pays for when a filter visits them (minijinja's
/// `ITEM_COST`: half a unit each).
const ITEMS_PER_FUEL: u64 = 2;

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
/// Dropping a list drops its items, recursively: a list 20,000 deep (a
/// loop of `{% set ns.l = [ns.l] %}` builds one within the fuel) overflowed
/// the stack when its namespace was dropped. Lists are taken apart here
/// one level at a time instead. (Mappings cannot be: minijinja does not
/// expose their type.)
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

/// Spaces `write_python_json` writes for indentation at `depth`.
fn indentation_bytes(value: &serde_json::Value, width: u64, depth: u64) -> u64 {
    let children: Box<dyn Iterator<Item = &serde_json::Value>> = match value {
        serde_json::Value::Array(items) if !items.is_empty() => Box::new(items.iter()),
        serde_json::Value::Object(map) if !map.is_empty() => Box::new(map.values()),
        _ => return 0,
    };
    // Each child on its own line one level deeper; the closing bracket at
    // this level.
    children
        .map(|child| {
            width
                .saturating_mul(depth + 1)
                .saturating_add(indentation_bytes(child, width, depth + 1))
        })
        .fold(width.saturating_mul(depth), u64::saturating_add)
}

/// Writes JSON as Jinja2's `tojson` does: `json.dumps(sort_keys=True)` with
/// ASCII-only output, then `<`, `>`, `&` and `'` escaped, so the text is safe
/// inside YAML, HTML and single-quoted shell strings alike.
fn write_python_json(
    out: &mut String,
    value: &serde_json::Value,
    indent: Option<usize>,
    depth: usize,
) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * depth));
        }
    };
    let (item_sep, key_sep) = if indent.is_some() {
        (",", ": ")
    } else {
        (", ", ": ")
    };
    match value {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => out.push_str(&python_number(&Value::from(f))),
            _ => out.push_str(&n.to_string()),
        },
        J::String(s) => write_python_json_string(out, s),
        J::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_python_json(out, item, indent, depth + 1);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_python_json_string(out, key);
                out.push_str(key_sep);
                write_python_json(out, item, indent, depth + 1);
            }
            newline(out, depth);
            out.push('}');
        }
    }
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
    fn floats_print_as_python_str() {
        let cases = [
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e20, "1.5e+20"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123.456, "123.456"),
            (0.0, "0.0"),
        ];
        for (float, text) in cases {
            assert_eq!(python_float(float), text, "{float}");
        }
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
