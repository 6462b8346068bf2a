//! A `tonic::Status` is built in one place per RPC: the
//! `impl From<...> for Status` of its error enum, in `controller/`,
//! `node/` or `group_controller/`, and in `error.rs` (the provisioner's
//! codes, a panicked call). Every other failure is a typed error that an
//! RPC's enum wraps, so that one mapping per RPC decides its codes.
//!
//! The test reads pav-csi's sources (comments, strings and `#[cfg(test)]`
//! items aside) and lists every `Status::<constructor>` outside those
//! places; `Status::from` (going through a mapping) is fine anywhere.

use std::path::{Path, PathBuf};

/// Where a `Status` may be built although no RPC's mapping is there:
/// (file under `src/`, constructor, why).
const ALLOWED: &[(&str, &str, &str)] = &[(
    "testing/context.rs",
    "deadline_exceeded",
    "the test kit is a CSI client: its own deadline stands in for the one a client's \
     transport answers, never for an answer of the driver",
)];

/// Directories whose `impl From<...> for Status` are the RPCs' mappings.
const RPC_DIRS: &[&str] = &["controller/", "node/", "group_controller/"];

/// A `Status::<constructor>` outside a mapping.
#[derive(Debug)]
struct Site {
    file: String,
    line: usize,
    constructor: String,
}

#[test]
fn status_is_built_only_where_errors_are_mapped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 20, "read only {} files", files.len());
    let mut stray = Vec::new();
    for file in &files {
        let name = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if name == "error.rs" || name.starts_with("error/") {
            continue;
        }
        let source = std::fs::read_to_string(file).unwrap();
        let in_rpc_dir = RPC_DIRS.iter().any(|dir| name.starts_with(dir));
        for site in built_outside_mappings(&name, &source, in_rpc_dir) {
            let allowed = ALLOWED.iter().any(|(file, constructor, _)| {
                *file == site.file && *constructor == site.constructor
            });
            if !allowed {
                stray.push(site);
            }
        }
    }
    let listed: Vec<String> = (stray.iter())
        .map(|s| format!("  src/{}:{}: Status::{}", s.file, s.line, s.constructor))
        .collect();
    assert!(
        stray.is_empty(),
        "a Status is built outside the error mappings; return a typed error (a variant of \
         the RPC's error enum, or a shared check's error it wraps) and let the RPC's \
         `impl From<...> for Status` pick the code:\n{}",
        listed.join("\n")
    );
}

/// The scan itself: it finds a stray constructor, and skips the mappings,
/// tests, comments and strings.
#[test]
fn the_scan_finds_what_it_must() {
    let source = r#"
//! `Status::internal` in a comment.
use tonic::Status;
fn stray() -> Status {
    let text = "Status::aborted in a string {";
    let _ = '{';
    Status::internal(text)
}
fn mapped(e: E) -> Status {
    tonic::Status::from(e)
}
impl From<E> for Status {
    fn from(e: E) -> Status {
        Status::new(e.code(), format!("{e}: {{"))
    }
}
fn also(x: Result<(), String>) -> Result<(), Status> {
    x.map_err(tonic::Status::unavailable)
}
#[cfg(test)]
mod tests {
    fn f() { let _ = Status::not_found("x"); }
}
"#;
    let found = |in_rpc_dir| {
        let sites = built_outside_mappings("x.rs", source, in_rpc_dir);
        sites
            .iter()
            .map(|s| format!("{}:{}", s.line, s.constructor))
            .collect::<Vec<_>>()
    };
    assert_eq!(found(true), ["7:internal", "18:unavailable"]);
    assert_eq!(found(false), ["7:internal", "14:new", "18:unavailable"]);
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The `Status::<constructor>` sites of `source` outside `#[cfg(test)]`
/// items and (when `mappings_allowed`) `impl From<...> for Status` blocks.
fn built_outside_mappings(file: &str, source: &str, mappings_allowed: bool) -> Vec<Site> {
    let code = code_only(source);
    let bytes = code.as_bytes();
    let mut skipped = vec![false; bytes.len()];
    for start in find_all(&code, "#[cfg(test)]") {
        let end = item_end(bytes, start + "#[cfg(test)]".len());
        skipped[start..end].fill(true);
    }
    if mappings_allowed {
        for start in find_all(&code, "impl From<") {
            let Some(open) = code[start..].find('{').map(|i| start + i) else {
                continue;
            };
            let header: Vec<&str> = code[start..open].split_whitespace().collect();
            let target = header.iter().rev().take_while(|w| **w != "for").last();
            if matches!(target, Some(&"Status" | &"tonic::Status")) {
                skipped[start..block_end(bytes, open)].fill(true);
            }
        }
    }
    let mut sites = Vec::new();
    for at in find_all(&code, "Status::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') || skipped[at] {
            continue;
        }
        let rest = &code[at + "Status::".len()..];
        let constructor: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if constructor != "from" {
            sites.push(Site {
                file: file.to_owned(),
                line: code[..at].matches('\n').count() + 1,
                constructor,
            });
        }
    }
    sites
}

/// Byte offsets of every `needle` in `haystack`.
fn find_all(haystack: &str, needle: &str) -> Vec<usize> {
    haystack.match_indices(needle).map(|(i, _)| i).collect()
}

/// The end of the item that starts after `from` (its attributes first):
/// past its `;`, or past the `}` closing its first `{`.
fn item_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'#' if bytes.get(i + 1) == Some(&b'[') => i = block_end(bytes, i + 1),
            b';' => return i + 1,
            b'{' => return block_end(bytes, i),
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Past the bracket that closes the one at `open` (`{` or `[`).
fn block_end(bytes: &[u8], open: usize) -> usize {
    let (opening, closing) = match bytes[open] {
        b'[' => (b'[', b']'),
        _ => (b'{', b'}'),
    };
    let mut depth = 0usize;
    for (i, b) in bytes.iter().enumerate().skip(open) {
        if *b == opening {
            depth += 1;
        } else if *b == closing {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    bytes.len()
}

/// `source` with comments removed and the insides of string and char
/// literals blanked (newlines kept, so that lines still count).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                out.push(blank(chars[i]));
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_prefix(&chars, i) {
            // A raw string: r"..." or r#"..."# (br, cr too); not r#ident.
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push('"');
            i += 2 + hashes;
            let close: Vec<char> = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&close) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push('"');
            i += close.len();
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(c) = chars.get(i) {
                    out.push(blank(*c));
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (chars.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A char literal ('{', '\n', '\u{7f}'); a lifetime has no closing quote.
            out.push_str("' '");
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether the `r` at `chars[i]` ends a raw string's prefix (`r`, `br`
/// or `cr`), not a longer identifier.
fn raw_prefix(chars: &[char], i: usize) -> bool {
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    let start = chars[..i].iter().rev().take_while(|c| ident(c)).count();
    let word: String = chars[i - start..=i].iter().collect();
    matches!(word.as_str(), "r" | "br" | "cr")
}
