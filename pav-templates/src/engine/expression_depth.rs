//! A linear pre-scan that bounds how deeply a template's expressions nest,
//! before minijinja parses them.
//!
//! minijinja's parser refuses more than 150 levels of its own recursion
//! (parentheses, list literals, nested blocks), but builds operator chains
//! in loops: `1+1+…+1`, `x|upper|upper…`, `x.a.b…` and `x[0][0]…` give a
//! tree as deep as the chain is long, and `not not …`, `- - …` and
//! `a if b else c if d else …` recurse once per operator while parsing.
//! Compiling that tree and dropping it recurse once per level as well, so
//! 10,000 `+1` overflowed a 2 MiB thread stack. This scan runs first and
//! refuses any tag whose expression tree may be deeper than
//! [`MAX_EXPRESSION_DEPTH`].
//!
//! The depth is over-estimated, never under-estimated: within one bracket
//! group, an item (between commas and colons) is at most as deep as the
//! operators it holds plus its deepest inner group, and a group is one
//! level more than its deepest item. The scan recognises tags, comments,
//! raw blocks and strings exactly as minijinja's lexer does with the
//! default delimiters, so nothing minijinja parses as an expression is
//! skipped here.

/// Deepest expression tree a template tag may hold, in operators and
/// brackets along one path. PaV's examples stay under 20; 1,000 levels
/// still compiled and rendered on a 2 MiB stack in a debug build (3,000
/// did not), so this keeps a margin of four for nested blocks and larger
/// frames.
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// A tag whose expression may nest deeper than [`MAX_EXPRESSION_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expression nested more than {MAX_EXPRESSION_DEPTH} levels (operators, filters, attributes or brackets in a chain); split it with {{% set %}}"
)]
pub struct TooDeep {
    /// 1-based line of the tag in the template.
    pub line: usize,
}

/// Checks every tag of `source` against [`MAX_EXPRESSION_DEPTH`], in time
/// linear in its length.
pub fn check_expression_depth(source: &str) -> Result<(), TooDeep> {
    let bytes = source.as_bytes();
    let mut at = 0;
    while let Some(offset) = find_start_marker(&bytes[at..]) {
        let start = at + offset;
        // Past `{{`, `{%` or `{#` and an optional whitespace modifier.
        let mut inner = start + 2;
        if matches!(bytes.get(inner), Some(b'-' | b'+')) {
            inner += 1;
        }
        at = match bytes[start + 1] {
            b'#' => match find(&bytes[inner..], b"#}") {
                Some(end) => inner + end + 2,
                None => return Ok(()),
            },
            b'%' if basic_tag_len(&bytes[inner..], b"raw", false).is_some() => {
                match end_of_raw_block(bytes, inner) {
                    Some(end) => end,
                    None => return Ok(()),
                }
            }
            marker => {
                let end_marker: &[u8] = if marker == b'{' { b"}}" } else { b"%}" };
                let (depth, end) = scan_tag(bytes, inner, end_marker);
                if depth > MAX_EXPRESSION_DEPTH {
                    let line = 1 + bytes[..start].iter().filter(|&&b| b == b'\n').count();
                    return Err(TooDeep { line });
                }
                end
            }
        };
    }
    Ok(())
}

/// The next `{{`, `{%` or `{#`.
fn find_start_marker(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(2)
        .position(|pair| pair[0] == b'{' && matches!(pair[1], b'{' | b'%' | b'#'))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Length of `[-+]? \s* NAME \s* [-+]? %}` at the start of `bytes` (the
/// modifier before NAME only when `modifier_first`), as minijinja's lexer
/// matches `raw` and `endraw` tags.
fn basic_tag_len(bytes: &[u8], name: &[u8], modifier_first: bool) -> Option<usize> {
    let mut at = 0;
    if modifier_first && matches!(bytes.first(), Some(b'-' | b'+')) {
        at += 1;
    }
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    if !bytes[at..].starts_with(name) {
        return None;
    }
    at += name.len();
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    if matches!(bytes.get(at), Some(b'-' | b'+')) {
        at += 1;
    }
    bytes[at..].starts_with(b"%}").then_some(at + 2)
}

/// Where the text after `{% raw %}` (whose name starts at `from`) ends.
fn end_of_raw_block(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        at += find(&bytes[at..], b"{%")? + 2;
        if let Some(len) = basic_tag_len(&bytes[at..], b"endraw", true) {
            return Some(at + len);
        }
    }
}

/// Keywords that make a node of the expression tree.
const OPERATOR_WORDS: &[&[u8]] = &[b"not", b"and", b"or", b"if", b"else", b"is", b"in"];

/// Two-byte operators, each one node.
const TWO_BYTE_OPERATORS: &[&[u8]] = &[b"//", b"**", b"==", b"!=", b">=", b"<="];

/// One bracket group being scanned (the whole tag is the outermost).
#[derive(Default)]
struct Group {
    /// Deepest item finished so far.
    deepest_item: usize,
    /// Operators of the current item at this level.
    operators: usize,
    /// Deepest group nested in the current item.
    deepest_inner: usize,
}

impl Group {
    fn end_item(&mut self) {
        self.deepest_item = self.deepest(); // before the reset below
        self.operators = 0;
        self.deepest_inner = 0;
    }

    fn deepest(&self) -> usize {
        self.deepest_item
            .max(self.operators.saturating_add(self.deepest_inner))
    }
}

/// Scans one tag from `from` to its end marker; returns the depth bound of
/// its expression and where the tag ends.
fn scan_tag(bytes: &[u8], from: usize, end_marker: &[u8]) -> (usize, usize) {
    let mut groups = vec![Group::default()];
    // As in minijinja's lexer: an end marker counts only outside brackets,
    // and a stray closing bracket makes the balance negative.
    let mut balance: isize = 0;
    let mut at = from;
    let close_group = |groups: &mut Vec<Group>| {
        if groups.len() > 1 {
            let group = groups.pop().expect("more than one group");
            let depth = group.deepest().saturating_add(1);
            let parent = groups.last_mut().expect("the tag's own group");
            parent.deepest_inner = parent.deepest_inner.max(depth);
        }
    };
    while at < bytes.len() {
        let rest = &bytes[at..];
        let byte = rest[0];
        if balance == 0 {
            let modified = matches!(byte, b'-' | b'+') && rest[1..].starts_with(end_marker);
            if modified || rest.starts_with(end_marker) {
                at += end_marker.len() + usize::from(modified);
                break;
            }
        }
        let top = groups.last_mut().expect("the tag's own group");
        match byte {
            b'\'' | b'"' => at += string_len(rest),
            b',' | b':' => {
                top.end_item();
                at += 1;
            }
            b'(' | b'[' | b'{' => {
                // A call, subscript or literal: one node, then its group.
                top.operators += 1;
                groups.push(Group::default());
                balance += 1;
                at += 1;
            }
            b')' | b']' | b'}' => {
                close_group(&mut groups);
                balance -= 1;
                at += 1;
            }
            byte if byte.is_ascii_alphanumeric() || byte == b'_' || !byte.is_ascii() => {
                let len = rest
                    .iter()
                    .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || !b.is_ascii()))
                    .unwrap_or(rest.len());
                if OPERATOR_WORDS.contains(&&rest[..len]) {
                    top.operators += 1;
                }
                at += len;
            }
            byte if byte.is_ascii_whitespace() => at += 1,
            _ => {
                // Every other byte is an operator (`.` of a float included,
                // which only over-estimates).
                top.operators += 1;
                let two_bytes = TWO_BYTE_OPERATORS.iter().any(|op| rest.starts_with(op));
                at += if two_bytes { 2 } else { 1 };
            }
        }
    }
    while groups.len() > 1 {
        close_group(&mut groups);
    }
    (groups[0].deepest(), at)
}

/// Length of the string literal at the start of `rest`, quotes included
/// (to the end when it is not closed: minijinja refuses it then).
fn string_len(rest: &[u8]) -> usize {
    let quote = rest[0];
    let mut escaped = false;
    for (index, &byte) in rest.iter().enumerate().skip(1) {
        match (escaped, byte) {
            (true, _) => escaped = false,
            (false, b'\\') => escaped = true,
            (false, byte) if byte == quote => return index + 1,
            _ => {}
        }
    }
    rest.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(source: &str) -> usize {
        let bytes = source.as_bytes();
        scan_tag(bytes, 2, b"}}").0
    }

    #[test]
    fn depth_counts_operators_and_groups() {
        assert_eq!(depth("{{ x }}"), 0);
        assert_eq!(depth("{{ a + b + c }}"), 2);
        assert_eq!(depth("{{ not not x }}"), 2);
        assert_eq!(depth("{{ x.a.b | upper }}"), 3);
        assert_eq!(depth("{{ x ** 2 == 4 }}"), 2);
        // Siblings in a group do not add up; the group adds a level.
        assert_eq!(depth("{{ [a + b, c + d, e] }}"), 3);
        assert_eq!(depth("{{ f(a.b, {'k': v|e}) }}"), 5);
        // Brackets and operators inside strings are text.
        assert_eq!(depth("{{ '+((}}' ~ \"\\\"[[\" }}"), 1);
    }

    #[test]
    fn long_chains_are_refused_with_their_line() {
        let chain = format!("a\n\n{{{{ 1{} }}}}", "+1".repeat(MAX_EXPRESSION_DEPTH + 1));
        assert_eq!(check_expression_depth(&chain), Err(TooDeep { line: 3 }));
        let at_limit = format!("{{{{ 1{} }}}}", "+1".repeat(MAX_EXPRESSION_DEPTH));
        assert_eq!(check_expression_depth(&at_limit), Ok(()));
        let flat = format!("{{{{ [{}] }}}}", "1+1,".repeat(10_000));
        assert_eq!(check_expression_depth(&flat), Ok(()));
    }

    #[test]
    fn comments_raw_blocks_and_text_are_skipped() {
        let deep = "+1".repeat(MAX_EXPRESSION_DEPTH + 1);
        for source in [
            format!("{deep} {{# {{{{ 1{deep} }}}} #}}"),
            format!("{{% raw %}}{{{{ 1{deep} }}}}{{%- endraw %}}{{{{ x }}}}"),
            format!("{{{{ '}}}}' }}}}{deep}"),
        ] {
            assert_eq!(check_expression_depth(&source), Ok(()), "{source}");
        }
        // A `}}` inside brackets does not end the tag, as in minijinja.
        let source = format!("{{{{ {{'a': {{'b': 1}}}}[0]{deep} }}}}");
        assert_eq!(check_expression_depth(&source), Err(TooDeep { line: 1 }));
    }
}
