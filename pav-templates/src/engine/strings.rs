//! Jinja2's text filters that minijinja lacks or writes differently, and
//! the Python `str` methods minijinja-contrib's pycompat lacks.
//!
//! Contract: anything that builds text of a size the template chooses
//! (`center(10**9)`, `zfill`, `expandtabs`) checks that size against the
//! remaining fuel before allocating ([`afford`]), as
//! [`python_method`](super::python::python_method) does.

use minijinja::value::{ArgType, Kwargs, Rest, Value, ValueKind, ValueOrKwargs, from_args};
use minijinja::{Error as JinjaError, ErrorKind, State};

use super::args::{keyword, keywords};
use super::limits::{afford, format_size};
use super::pyrepr::{python_repr, python_str};

fn text_of(filter: &str, value: &Value) -> Result<String, JinjaError> {
    match value.kind() {
        ValueKind::Undefined => Err(JinjaError::new(
            ErrorKind::UndefinedError,
            format!("filter '{filter}' may not be applied to an undefined value"),
        )),
        _ => Ok(python_str(value)),
    }
}

/// Python's `str.center(width, fill)`: the odd padding goes left when the
/// width is odd, right otherwise (CPython's rule).
fn center(state: &State<'_, '_>, text: &str, width: i64, fill: char) -> Result<String, JinjaError> {
    let len = text.chars().count() as i64;
    if width <= len {
        return Ok(text.to_owned());
    }
    afford(state, width as u64 * fill.len_utf8() as u64)?;
    let margin = width - len;
    let left = margin / 2 + (margin & width & 1);
    let fill = fill.to_string();
    Ok(format!(
        "{}{text}{}",
        fill.repeat(left as usize),
        fill.repeat((margin - left) as usize)
    ))
}

/// Jinja2's `center(width=80)`.
pub(crate) fn center_filter(
    state: &State<'_, '_>,
    value: &Value,
    width: Option<i64>,
) -> Result<String, JinjaError> {
    center(state, &text_of("center", value)?, width.unwrap_or(80), ' ')
}

/// MarkupSafe's escaping, which Jinja2's `escape` (`e`) and `forceescape`
/// use: `&<>"'` only, quotes as decimal references.
pub(crate) fn escape_filter(value: &Value) -> Result<Value, JinjaError> {
    if value.is_safe() {
        return Ok(value.clone());
    }
    Ok(Value::from_safe_string(escape(&text_of("escape", value)?)))
}

/// MarkupSafe's `escape` of a text.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Jinja2's `xmlattr(autospace=true)`: `key="value"` pairs, values escaped,
/// none and undefined values left out, keys holding whitespace, `/`, `>`
/// or `=` refused.
pub(crate) fn xmlattr_filter(value: &Value, autospace: Option<bool>) -> Result<String, JinjaError> {
    if value.kind() != ValueKind::Map {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!(
                "filter 'xmlattr' expects a mapping, not {}",
                super::kind_name(value.kind())
            ),
        ));
    }
    let mut pairs = Vec::new();
    for key in value.try_iter()? {
        let item = value.get_item(&key)?;
        if matches!(item.kind(), ValueKind::None | ValueKind::Undefined) {
            continue;
        }
        let key = python_str(&key);
        if key
            .chars()
            .any(|c| c.is_ascii_whitespace() || "/>=".contains(c) || c == '\x0b')
        {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("filter 'xmlattr': invalid character in attribute name {key:?}"),
            ));
        }
        pairs.push(format!(
            "{}=\"{}\"",
            escape(&key),
            escape(&python_str(&item))
        ));
    }
    let attributes = pairs.join(" ");
    Ok(if autospace.unwrap_or(true) && !attributes.is_empty() {
        format!(" {attributes}")
    } else {
        attributes
    })
}

/// Jinja2's `format` (Python's `%` formatting) on minijinja's: `%r`
/// conversions print the argument's Python `repr`, which minijinja's lacks.
pub(crate) fn format_filter(
    state: &mut State<'_, '_>,
    value: &Value,
    arguments: Rest<ValueOrKwargs>,
) -> Result<Value, JinjaError> {
    let Some(format) = value.as_str() else {
        return minijinja::filters::format(state, value, arguments);
    };
    let Some((format, reprs)) = repr_conversions(format) else {
        return minijinja::filters::format(state, value, arguments);
    };
    let shown = |item: Value, conversion: Conversion| {
        if reprs.contains(&conversion) {
            Value::from(python_repr(&item, false))
        } else {
            item
        }
    };
    let mut position = 0usize;
    let mut converted = Vec::new();
    for argument in arguments.0 {
        let argument = argument.into_value();
        // Keyword arguments arrive as one value, minijinja's `Kwargs`.
        converted.push(ValueOrKwargs::from(
            match <Kwargs as ArgType>::from_value(Some(&argument)) {
                Ok(kwargs) => {
                    let mut pairs = Vec::new();
                    for name in kwargs.args() {
                        let item = kwargs.peek::<Value>(name)?;
                        pairs.push((name, shown(item, Conversion::Name(name.to_owned()))));
                    }
                    Value::from(Kwargs::from_iter(pairs))
                }
                Err(_) => {
                    position += 1;
                    shown(argument, Conversion::Position(position - 1))
                }
            },
        ));
    }
    minijinja::filters::format(state, &Value::from(format), Rest(converted))
}

/// Which argument a `%` conversion takes.
#[derive(Debug, PartialEq)]
enum Conversion {
    Position(usize),
    Name(String),
}

/// `format` with each `%r` written as `%s`, and the arguments those
/// conversions take; `None` when it has no `%r`.
fn repr_conversions(format: &str) -> Option<(String, Vec<Conversion>)> {
    if !format.contains('%') {
        return None;
    }
    let mut out = String::with_capacity(format.len());
    let mut reprs = Vec::new();
    let mut position = 0usize;
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '%' {
            continue;
        }
        let mut name = None;
        if chars.peek() == Some(&'(') {
            let mut key = String::new();
            for c in chars.by_ref() {
                out.push(c);
                if c == ')' {
                    break;
                }
                if c != '(' {
                    key.push(c);
                }
            }
            name = Some(key);
        }
        // Flags, width, precision and length; a `*` takes an argument.
        while let Some(&c) = chars.peek() {
            if !"#0- +.*hlL".contains(c) && !c.is_ascii_digit() {
                break;
            }
            if c == '*' {
                position += 1;
            }
            out.push(c);
            chars.next();
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(conversion) => {
                let taken = match name {
                    Some(name) => Conversion::Name(name),
                    None => {
                        position += 1;
                        Conversion::Position(position - 1)
                    }
                };
                if conversion == 'r' {
                    out.push('s');
                    reprs.push(taken);
                } else {
                    out.push(conversion);
                }
            }
            None => {}
        }
    }
    (!reprs.is_empty()).then_some((out, reprs))
}

/// Jinja2's `urlencode`: a string quoted with `/` kept, or a mapping (or
/// list of pairs) as a query string.
pub(crate) fn urlencode_filter(value: &Value) -> Result<String, JinjaError> {
    fn quote(text: &str, safe: &[u8], plus_for_space: bool) -> String {
        let mut out = String::new();
        for byte in text.bytes() {
            if byte.is_ascii_alphanumeric() || b"_.-~".contains(&byte) || safe.contains(&byte) {
                out.push(byte as char);
            } else if byte == b' ' && plus_for_space {
                out.push('+');
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
        out
    }
    let pair = |key: &Value, item: &Value| {
        format!(
            "{}={}",
            quote(&python_str(key), b"", true),
            quote(&python_str(item), b"", true)
        )
    };
    match value.kind() {
        ValueKind::Undefined => text_of("urlencode", value),
        ValueKind::Map => Ok(value
            .try_iter()?
            .map(|key| pair(&key, &value.get_item(&key).unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("&")),
        ValueKind::Seq | ValueKind::Iterable => {
            let mut pairs = Vec::new();
            for item in value.try_iter()? {
                let (key, item): (Value, Value) = from_args(&item.try_iter()?.collect::<Vec<_>>())?;
                pairs.push(pair(&key, &item));
            }
            Ok(pairs.join("&"))
        }
        _ => Ok(quote(&python_str(value), b"/", false)),
    }
}

/// Jinja2's `wordwrap(width=79, break_long_words=true, wrapstring='\n',
/// break_on_hyphens=true)`: each line of the text (Python's
/// `splitlines`) wrapped by Python's `textwrap.wrap` (first fit, tabs and
/// whitespace kept, whitespace dropped at line ends), all joined with
/// `wrapstring`.
pub(crate) fn wordwrap_filter(
    state: &State<'_, '_>,
    value: &Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<String, JinjaError> {
    let kwargs = keywords(
        &[
            "width",
            "break_long_words",
            "wrapstring",
            "break_on_hyphens",
        ],
        &positional,
        kwargs,
    )?;
    let width = keyword::<i64>(&kwargs, "width")?.unwrap_or(79);
    let break_long_words = keyword::<bool>(&kwargs, "break_long_words")?.unwrap_or(true);
    let wrapstring = keyword::<String>(&kwargs, "wrapstring")?;
    let break_on_hyphens = keyword::<bool>(&kwargs, "break_on_hyphens")?.unwrap_or(true);
    kwargs.assert_all_used()?;
    let wrapstring = wrapstring.as_deref().unwrap_or("\n");
    let text = text_of("wordwrap", value)?;
    if width <= 0 {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("filter 'wordwrap': invalid width {width} (must be > 0)"),
        ));
    }
    // At worst a line per character, each followed by `wrapstring`.
    afford(
        state,
        (text.len() as u64 + 1).saturating_mul(wrapstring.len() as u64 + 1),
    )?;
    let width = usize::try_from(width).unwrap_or(usize::MAX);
    let lines: Vec<String> = python_splitlines(&text)
        .into_iter()
        .map(|line| wrap_line(line, width, break_long_words, break_on_hyphens).join(wrapstring))
        .collect();
    Ok(lines.join(wrapstring))
}

/// Python's `str.splitlines()`: the lines without their endings.
fn python_splitlines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find([
            '\n', '\r', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\u{85}', '\u{2028}', '\u{2029}',
        ]) {
            Some(end) => {
                lines.push(&rest[..end]);
                let ending = if rest[end..].starts_with("\r\n") {
                    2
                } else {
                    rest[end..].chars().next().map_or(1, char::len_utf8)
                };
                rest = &rest[end + ending..];
            }
            None => {
                lines.push(rest);
                break;
            }
        }
    }
    lines
}

/// `textwrap`'s whitespace (ASCII only).
fn is_wrap_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0b' | '\x0c' | '\r' | ' ')
}

/// `textwrap`'s letters (`[^\d\W]`).
fn is_wrap_letter(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

/// `textwrap`'s chunks of `line`: runs of whitespace, and words, split
/// after the hyphens of hyphenated words when `break_on_hyphens` (a hyphen
/// after two letters, or after letter-hyphen-letter, and before a letter,
/// an optional hyphen and a letter).
fn wrap_chunks(line: &str, break_on_hyphens: bool) -> Vec<Vec<char>> {
    let chars: Vec<char> = line.chars().collect();
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let space = is_wrap_space(chars[start]);
        let mut end = start + 1;
        while end < chars.len() && is_wrap_space(chars[end]) == space {
            if !space && break_on_hyphens && chars[end - 1] == '-' && end - 1 > start {
                let hyphen = end - 1;
                // Python's lookbehind sees the whole line, before this
                // chunk too.
                let at = |back: usize| hyphen.checked_sub(back).and_then(|index| chars.get(index));
                let letter = |c: Option<&char>| c.is_some_and(|c| is_wrap_letter(*c));
                let behind = (letter(at(1)) && letter(at(2)))
                    || (letter(at(1)) && at(2) == Some(&'-') && letter(at(3)));
                let ahead = letter(chars.get(end))
                    && (letter(chars.get(end + 1))
                        || (chars.get(end + 1) == Some(&'-') && letter(chars.get(end + 2))));
                if behind && ahead {
                    break;
                }
            }
            end += 1;
        }
        chunks.push(chars[start..end].to_vec());
        start = end;
    }
    chunks
}

/// Python's `textwrap.wrap(line, width, expand_tabs=False,
/// replace_whitespace=False, ...)`: chunks placed first fit.
fn wrap_line(
    line: &str,
    width: usize,
    break_long_words: bool,
    break_on_hyphens: bool,
) -> Vec<String> {
    let is_space = |chunk: &[char]| chunk.iter().all(|c| is_wrap_space(*c));
    let mut chunks = wrap_chunks(line, break_on_hyphens);
    chunks.reverse();
    let mut lines: Vec<String> = Vec::new();
    while !chunks.is_empty() {
        let mut current: Vec<Vec<char>> = Vec::new();
        let mut length = 0;
        if !lines.is_empty() && chunks.last().is_some_and(|chunk| is_space(chunk)) {
            chunks.pop();
        }
        while let Some(chunk) = chunks.last() {
            if length + chunk.len() > width {
                break;
            }
            length += chunk.len();
            current.push(chunks.pop().unwrap_or_default());
        }
        if let Some(chunk) = chunks.last_mut()
            && chunk.len() > width
        {
            // textwrap's `_handle_long_word`.
            let space_left = width.saturating_sub(length).max(1);
            if break_long_words {
                let mut end = space_left;
                if break_on_hyphens && chunk.len() > space_left {
                    let hyphen = chunk[..space_left].iter().rposition(|c| *c == '-');
                    if let Some(hyphen) = hyphen
                        && hyphen > 0
                        && chunk[..hyphen].iter().any(|c| *c != '-')
                    {
                        end = hyphen + 1;
                    }
                }
                current.push(chunk[..end].to_vec());
                chunk.drain(..end);
            } else if current.is_empty() {
                current.push(chunks.pop().unwrap_or_default());
            }
        }
        if current.last().is_some_and(|chunk| is_space(chunk)) {
            current.pop();
        }
        if !current.is_empty() {
            lines.push(current.concat().into_iter().collect());
        }
    }
    lines
}

/// Jinja2's `indent(width=4, first=False, blank=False)`: lines after the
/// first (all with `first`) prefixed, blank ones too with `blank`; the
/// text's last newline is kept.
pub(crate) fn indent_filter(
    state: &State<'_, '_>,
    value: &Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<String, JinjaError> {
    let kwargs = keywords(&["width", "first", "blank"], &positional, kwargs)?;
    let width = keyword::<Value>(&kwargs, "width")?;
    let first = keyword::<bool>(&kwargs, "first")?.unwrap_or(false);
    let blank = keyword::<bool>(&kwargs, "blank")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let text = text_of("indent", value)?;
    let indentation = match width {
        None => "    ".to_owned(),
        Some(width) if width.kind() == ValueKind::String => {
            width.as_str().unwrap_or_default().to_owned()
        }
        Some(width) => {
            let width = usize::try_from(width)?;
            afford(state, width as u64)?;
            " ".repeat(width)
        }
    };
    // The whole output, before it is built: one indentation per line.
    let lines = text.lines().count() as u64 + 1;
    afford(
        state,
        (text.len() as u64).saturating_add(lines.saturating_mul(indentation.len() as u64)),
    )?;
    // Python's `splitlines()` of the text with a newline appended: the
    // text's own last newline ends its last line.
    let with_newline = format!("{text}\n");
    let lines: Vec<&str> = with_newline.lines().collect();
    let mut out = String::new();
    for (index, line) in lines.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        if (index > 0 || first) && (blank || !line.is_empty()) {
            out.push_str(&indentation);
        }
        out.push_str(line);
    }
    Ok(out)
}

/// Jinja2's `wordcount`: runs of word characters (Python's `\w+`).
pub(crate) fn wordcount_filter(value: &Value) -> Result<usize, JinjaError> {
    let text = text_of("wordcount", value)?;
    Ok(text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .count())
}

/// Jinja2's `truncate(length=255, killwords=False, end='...', leeway=5)`.
pub(crate) fn truncate_filter(
    value: &Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<String, JinjaError> {
    let (length, killwords, end, leeway): (
        Option<usize>,
        Option<bool>,
        Option<String>,
        Option<usize>,
    ) = from_args(&positional)?;
    let length = match length {
        Some(length) => length,
        None => keyword::<usize>(&kwargs, "length")?.unwrap_or(255),
    };
    let killwords = match killwords {
        Some(killwords) => killwords,
        None => keyword::<bool>(&kwargs, "killwords")?.unwrap_or(false),
    };
    let end = match end {
        Some(end) => end,
        None => keyword::<String>(&kwargs, "end")?.unwrap_or_else(|| "...".to_owned()),
    };
    let leeway = match leeway {
        Some(leeway) => leeway,
        None => keyword::<usize>(&kwargs, "leeway")?.unwrap_or(5),
    };
    kwargs.assert_all_used()?;
    let text = text_of("truncate", value)?;
    let chars: Vec<char> = text.chars().collect();
    let end_len = end.chars().count();
    if length < end_len {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("truncate(): expected length >= {end_len}, got {length}"),
        ));
    }
    if chars.len() <= length.saturating_add(leeway) {
        return Ok(text);
    }
    let kept: String = chars[..length - end_len].iter().collect();
    if killwords {
        return Ok(kept + &end);
    }
    let kept = match kept.rsplit_once(' ') {
        Some((before, _)) => before.to_owned(),
        None => kept,
    };
    Ok(kept + &end)
}

/// Jinja2's `default(default_value='', boolean=False)` (also `d`).
pub(crate) fn default_filter(
    value: &Value,
    default_value: Option<Value>,
    boolean: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let default_value = match default_value {
        Some(default_value) => default_value,
        None => keyword::<Value>(&kwargs, "default_value")?.unwrap_or(Value::from("")),
    };
    let boolean = match boolean {
        Some(boolean) => boolean,
        None => keyword::<bool>(&kwargs, "boolean")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    if value.is_undefined() || (boolean && !value.is_true()) {
        Ok(default_value)
    } else {
        Ok(value.clone())
    }
}

/// Jinja2's `sequence` test: anything with a length and items (strings,
/// lists, mappings).
pub(crate) fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String | ValueKind::Seq | ValueKind::Map
    )
}

fn find(haystack: &[char], needle: &[char], from_end: bool) -> Option<usize> {
    if needle.len() > haystack.len() {
        return None;
    }
    let mut starts = 0..=haystack.len() - needle.len();
    let matches = |start: &usize| haystack[*start..*start + needle.len()] == *needle;
    if from_end {
        starts.rev().find(matches)
    } else {
        starts.find(matches)
    }
}

/// The Python `str` methods pycompat does not provide, or `None` to leave
/// `method` to it; one function per group of methods below.
pub(crate) fn str_method(
    state: &mut State<'_, '_>,
    text: &str,
    method: &str,
    args: &[Value],
) -> Option<Result<Value, JinjaError>> {
    case_method(text, method, args)
        .or_else(|| predicate_method(text, method, args))
        .or_else(|| search_method(text, method, args))
        .or_else(|| split_method(text, method, args))
        .or_else(|| padding_method(state, text, method, args))
        .or_else(|| conversion_method(state, text, method, args))
}

/// `str.swapcase()` and `str.casefold()`.
fn case_method(text: &str, method: &str, args: &[Value]) -> Option<Result<Value, JinjaError>> {
    let result = match method {
        "swapcase" => from_args::<()>(args).map(|()| {
            Value::from(
                text.chars()
                    .flat_map(|c| {
                        if c.is_uppercase() {
                            c.to_lowercase().collect::<Vec<_>>()
                        } else {
                            c.to_uppercase().collect()
                        }
                    })
                    .collect::<String>(),
            )
        }),
        "casefold" => from_args::<()>(args).map(|()| Value::from(text.to_lowercase())),
        _ => return None,
    };
    Some(result)
}

/// The `str.is…()` predicates pycompat lacks: `istitle`, `isdecimal`,
/// `isidentifier`, `isprintable`.
fn predicate_method(text: &str, method: &str, args: &[Value]) -> Option<Result<Value, JinjaError>> {
    let result = match method {
        "istitle" => from_args::<()>(args).map(|()| {
            // Uppercase letters only at the start of words, lowercase
            // only after a cased letter, and at least one cased letter.
            let (mut previous_cased, mut any_cased) = (false, false);
            for c in text.chars() {
                if c.is_uppercase() {
                    if previous_cased {
                        return Value::from(false);
                    }
                    previous_cased = true;
                    any_cased = true;
                } else if c.is_lowercase() {
                    if !previous_cased {
                        return Value::from(false);
                    }
                    any_cased = true;
                } else {
                    previous_cased = false;
                }
            }
            Value::from(any_cased)
        }),
        "isdecimal" => from_args::<()>(args)
            .map(|()| Value::from(!text.is_empty() && text.chars().all(|c| c.is_ascii_digit()))),
        "isidentifier" => from_args::<()>(args).map(|()| {
            let mut chars = text.chars();
            Value::from(
                chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
                    && chars.all(|c| c.is_alphanumeric() || c == '_'),
            )
        }),
        "isprintable" => from_args::<()>(args).map(|()| {
            Value::from(
                text.chars()
                    .all(|c| !c.is_control() && (c == ' ' || !c.is_whitespace())),
            )
        }),
        _ => return None,
    };
    Some(result)
}

/// Finding and removing substrings: `str.index()`, `str.rindex()`,
/// `str.count()` with bounds, `str.removeprefix()`, `str.removesuffix()`.
fn search_method(text: &str, method: &str, args: &[Value]) -> Option<Result<Value, JinjaError>> {
    let result = match method {
        "index" | "rindex" => from_args::<(&str,)>(args).and_then(|(needle,)| {
            let haystack: Vec<char> = text.chars().collect();
            let needle: Vec<char> = needle.chars().collect();
            find(&haystack, &needle, method == "rindex")
                .map(Value::from)
                .ok_or_else(|| JinjaError::new(ErrorKind::InvalidOperation, "substring not found"))
        }),
        // pycompat counts in the whole string only.
        "count" if args.len() > 1 => {
            from_args::<(&str, Option<i64>, Option<i64>)>(args).map(|(needle, start, end)| {
                let chars: Vec<char> = text.chars().collect();
                let bound = |index: Option<i64>, default: usize| match index {
                    None => default,
                    Some(index) if index < 0 => {
                        chars.len().saturating_sub(index.unsigned_abs() as usize)
                    }
                    Some(index) => (index as usize).min(chars.len()),
                };
                let (start, end) = (bound(start, 0), bound(end, chars.len()));
                let window: String = chars[start.min(end)..end].iter().collect();
                Value::from(if needle.is_empty() {
                    window.chars().count() + 1
                } else {
                    window.matches(needle).count()
                })
            })
        }
        "removeprefix" => from_args::<(&str,)>(args)
            .map(|(prefix,)| Value::from(text.strip_prefix(prefix).unwrap_or(text))),
        "removesuffix" => from_args::<(&str,)>(args)
            .map(|(suffix,)| Value::from(text.strip_suffix(suffix).unwrap_or(text))),
        _ => return None,
    };
    Some(result)
}

/// Splitting: `str.partition()`, `str.rpartition()`, `str.rsplit()`.
fn split_method(text: &str, method: &str, args: &[Value]) -> Option<Result<Value, JinjaError>> {
    let result = match method {
        "partition" | "rpartition" => from_args::<(&str,)>(args).and_then(|(sep,)| {
            if sep.is_empty() {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "empty separator",
                ));
            }
            let parts = if method == "partition" {
                text.split_once(sep)
            } else {
                text.rsplit_once(sep)
            };
            let parts: [&str; 3] = match parts {
                Some((before, after)) => [before, sep, after],
                None if method == "partition" => [text, "", ""],
                None => ["", "", text],
            };
            Ok(Value::from_iter(parts.map(Value::from)))
        }),
        "rsplit" => from_args::<(Option<Value>, Option<i64>)>(args).map(|(sep, maxsplit)| {
            let maxsplit = maxsplit.unwrap_or(-1);
            let limit = usize::try_from(maxsplit).ok();
            let mut parts: Vec<Value> = match sep.as_ref().and_then(Value::as_str) {
                Some(sep) => match limit {
                    Some(limit) => text.rsplitn(limit + 1, sep).map(Value::from).collect(),
                    None => text.rsplit(sep).map(Value::from).collect(),
                },
                None => {
                    // Runs of whitespace; leading whitespace is kept in the
                    // last (leftmost) part when the limit is reached.
                    let mut parts = Vec::new();
                    let mut rest = text.trim_end();
                    while !rest.is_empty() {
                        if limit.is_some_and(|limit| parts.len() == limit) {
                            parts.push(Value::from(rest));
                            break;
                        }
                        match rest.rfind(char::is_whitespace) {
                            Some(at) => {
                                let space = rest[at..].chars().next().map_or(1, char::len_utf8);
                                parts.push(Value::from(&rest[at + space..]));
                                rest = rest[..at].trim_end();
                            }
                            None => {
                                parts.push(Value::from(rest));
                                rest = "";
                            }
                        }
                    }
                    parts
                }
            };
            parts.reverse();
            Value::from(parts)
        }),
        _ => return None,
    };
    Some(result)
}

/// Padding, each checked against the remaining fuel before it
/// allocates ([`afford`]): `str.zfill()`, `str.center()`, `str.ljust()`,
/// `str.rjust()`, `str.expandtabs()`.
fn padding_method(
    state: &State<'_, '_>,
    text: &str,
    method: &str,
    args: &[Value],
) -> Option<Result<Value, JinjaError>> {
    let result = match method {
        "zfill" => from_args::<(i64,)>(args).and_then(|(width,)| {
            let len = text.chars().count() as i64;
            if width <= len {
                return Ok(Value::from(text));
            }
            afford(state, width as u64)?;
            let (sign, digits) = match text.strip_prefix(['+', '-']) {
                Some(rest) => (&text[..1], rest),
                None => ("", text),
            };
            Ok(Value::from(format!(
                "{sign}{}{digits}",
                "0".repeat((width - len) as usize)
            )))
        }),
        "center" | "ljust" | "rjust" => {
            from_args::<(i64, Option<&str>)>(args).and_then(|(width, fill)| {
                let fill = fill.unwrap_or(" ");
                let mut chars = fill.chars();
                let (Some(fill), None) = (chars.next(), chars.next()) else {
                    return Err(JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "the fill character must be exactly one character long",
                    ));
                };
                let len = text.chars().count() as i64;
                if width <= len {
                    return Ok(Value::from(text));
                }
                let padding = || {
                    afford(state, width as u64 * fill.len_utf8() as u64)
                        .map(|()| fill.to_string().repeat((width - len) as usize))
                };
                Ok(Value::from(match method {
                    "center" => center(state, text, width, fill)?,
                    "ljust" => format!("{text}{}", padding()?),
                    _ => format!("{}{text}", padding()?),
                }))
            })
        }
        "expandtabs" => from_args::<(Option<i64>,)>(args).and_then(|(tabsize,)| {
            let tabsize = tabsize.unwrap_or(8).max(0) as u64;
            let tabs = text.matches('\t').count() as u64;
            afford(
                state,
                (text.len() as u64).saturating_add(tabs.saturating_mul(tabsize)),
            )?;
            let mut out = String::new();
            let mut column = 0u64;
            for c in text.chars() {
                match c {
                    '\t' if tabsize > 0 => {
                        let spaces = tabsize - column % tabsize;
                        out.extend(std::iter::repeat_n(' ', spaces as usize));
                        column += spaces;
                    }
                    '\t' => {}
                    '\n' | '\r' => {
                        out.push(c);
                        column = 0;
                    }
                    c => {
                        out.push(c);
                        column += 1;
                    }
                }
            }
            Ok(Value::from(out))
        }),
        _ => return None,
    };
    Some(result)
}

/// Conversions: `str.encode()`, `str.format_map()`, `str.maketrans()`,
/// `str.translate()`.
fn conversion_method(
    state: &mut State<'_, '_>,
    text: &str,
    method: &str,
    args: &[Value],
) -> Option<Result<Value, JinjaError>> {
    let result = match method {
        "encode" => {
            from_args::<(Option<&str>, Option<&str>)>(args).and_then(|(encoding, _)| match encoding
                .map(|name| name.to_ascii_lowercase().replace(['-', '_'], ""))
            {
                None => Ok(super::collections::python_bytes(text.as_bytes())),
                Some(name) if name == "utf8" => {
                    Ok(super::collections::python_bytes(text.as_bytes()))
                }
                Some(name) if name == "ascii" && text.is_ascii() => {
                    Ok(super::collections::python_bytes(text.as_bytes()))
                }
                Some(name) if name == "ascii" => Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "str.encode(): 'ascii' codec can't encode a character beyond 127",
                )),
                Some(_) => Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "str.encode(): pav encodes as UTF-8 or ASCII only",
                )),
            })
        }
        "format_map" => from_args::<(Value,)>(args).and_then(|(mapping,)| {
            if mapping.kind() != ValueKind::Map {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "str.format_map(): the argument must be a mapping",
                ));
            }
            afford(state, format_size(text, std::slice::from_ref(&mapping)))?;
            let mut pairs = Vec::new();
            for key in mapping.try_iter()? {
                let item = mapping.get_item(&key)?;
                pairs.push((python_str(&key), item));
            }
            let kwargs =
                Kwargs::from_iter(pairs.iter().map(|(key, item)| (key.as_str(), item.clone())));
            minijinja_contrib::pycompat::unknown_method_callback(
                state,
                &Value::from(text),
                "format",
                &[Value::from(kwargs)],
            )
        }),
        // `str.maketrans(x[, y[, z]])`, a static method: the receiver is
        // not used.
        "maketrans" => from_args::<(Value, Option<&str>, Option<&str>)>(args)
            .and_then(|(from, to, delete)| maketrans(&from, to, delete)),
        "translate" => {
            from_args::<(Value,)>(args).and_then(|(table,)| translate(state, text, &table))
        }
        _ => return None,
    };
    Some(result)
}

fn maketrans_error(message: &str) -> JinjaError {
    JinjaError::new(
        ErrorKind::InvalidOperation,
        format!("str.maketrans(): {message}"),
    )
}

/// Python's `str.maketrans`: a mapping of code points to what `translate`
/// puts in their place (a code point, a string, or none to delete).
fn maketrans(from: &Value, to: Option<&str>, delete: Option<&str>) -> Result<Value, JinjaError> {
    let code = |c: char| Value::from(c as u32);
    let mut pairs = Vec::new();
    match (from.as_str(), to) {
        (Some(from), Some(to)) => {
            if from.chars().count() != to.chars().count() {
                return Err(maketrans_error(
                    "the first two arguments must have equal length",
                ));
            }
            pairs.extend(
                from.chars()
                    .zip(to.chars())
                    .map(|(a, b)| (code(a), code(b))),
            );
            pairs.extend(
                delete
                    .unwrap_or_default()
                    .chars()
                    .map(|c| (code(c), Value::from(()))),
            );
        }
        (_, None) if from.kind() == ValueKind::Map && delete.is_none() => {
            for key in from.try_iter()? {
                let item = from.get_item(&key)?;
                let key = match key.as_str() {
                    Some(text) => {
                        let mut chars = text.chars();
                        match (chars.next(), chars.next()) {
                            (Some(c), None) => code(c),
                            _ => return Err(maketrans_error("string keys must be of length 1")),
                        }
                    }
                    None if key.is_integer() => key,
                    None => return Err(maketrans_error("keys must be strings or integers")),
                };
                pairs.push((key, item));
            }
        }
        _ => return Err(maketrans_error("takes a dict, or two or three strings")),
    }
    Ok(super::collections::ordered_map(pairs))
}

/// Python's `str.translate(table)`: each character looked up by code point
/// in `table`; a string or code point replaces it, none deletes it, no
/// entry keeps it.
fn translate(state: &State<'_, '_>, text: &str, table: &Value) -> Result<Value, JinjaError> {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let replacement = table.get_item(&Value::from(c as u32)).unwrap_or_default();
        match replacement.kind() {
            ValueKind::Undefined => out.push(c),
            ValueKind::None => {}
            ValueKind::String => {
                let replacement = replacement.as_str().unwrap_or_default();
                // A long replacement of every character multiplies the size.
                afford(state, (out.len() + replacement.len()) as u64)?;
                out.push_str(replacement);
            }
            ValueKind::Number => {
                let replaced = u32::try_from(replacement.clone())
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| {
                        JinjaError::new(
                            ErrorKind::InvalidOperation,
                            "str.translate(): character mapping must be in range(0x110000)",
                        )
                    })?;
                out.push(replaced);
            }
            _ => {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "str.translate(): character mapping must return integer, None or str",
                ));
            }
        }
    }
    Ok(Value::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_as_python_textwrap() {
        let wrap = |line, width, long, hyphens| wrap_line(line, width, long, hyphens).join("|");
        assert_eq!(
            wrap("the quick brown fox", 10, true, true),
            "the quick|brown fox"
        );
        assert_eq!(wrap("abcdefghijkl mn", 5, false, true), "abcdefghijkl|mn");
        assert_eq!(wrap("abcdefghijkl mn", 5, true, true), "abcde|fghij|kl mn");
        assert_eq!(
            wrap("a well-known x-ray", 7, true, true),
            "a well-|known|x-ray"
        );
        assert_eq!(wrap("well-known", 6, true, false), "well-k|nown");
        assert_eq!(wrap("  lead", 3, true, true), "  l|ead");
    }

    #[test]
    fn splits_lines_as_python() {
        assert_eq!(
            python_splitlines("a\r\nb\rc\n\nd\u{2028}e\n"),
            ["a", "b", "c", "", "d", "e"]
        );
        assert!(python_splitlines("").is_empty());
    }

    #[test]
    fn finds_repr_conversions() {
        assert_eq!(
            repr_conversions("%r %%r %(k)r %5.2f %*r"),
            Some((
                "%s %%r %(k)s %5.2f %*s".to_owned(),
                vec![
                    Conversion::Position(0),
                    Conversion::Name("k".to_owned()),
                    Conversion::Position(3)
                ]
            ))
        );
        assert_eq!(repr_conversions("%s %d"), None);
    }
}
