//! The documentation shows this example's files verbatim: each copy must
//! stay identical to the file CI compiles and runs csi-sanity against.

use std::path::Path;

/// Where a copy is marked: an HTML comment naming the file, right before
/// the code block that holds it.
fn marker(file: &str) -> String {
    format!("<!-- {file} -->")
}

/// The code block after `marker` in `doc`, with each line's `prefix`
/// (`//! ` in a crate's front page) removed.
fn copy_in(doc: &str, marker: &str, prefix: &str) -> Option<String> {
    let strip = |line: &str| -> String {
        let bare = prefix.trim_end();
        match line.strip_prefix(prefix) {
            Some(rest) => rest.to_owned(),
            None if line == bare => String::new(),
            None => line.to_owned(),
        }
    };
    let mut lines = doc.lines().map(strip).skip_while(|l| l.trim() != marker);
    lines.next()?;
    let fence = lines.next()?;
    if !fence.starts_with("```") {
        return None;
    }
    let body: Vec<String> = lines.take_while(|l| !l.starts_with("```")).collect();
    Some(body.iter().map(|l| format!("{l}\n")).collect())
}

fn assert_copied(doc_path: &str, prefix: &str, file: &str) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(repo.join(doc_path)).unwrap();
    let source = std::fs::read_to_string(repo.join(file)).unwrap();
    let copy = copy_in(&doc, &marker(file), prefix)
        .unwrap_or_else(|| panic!("{doc_path} has no code block marked {}", marker(file)));
    assert!(
        copy == source,
        "{doc_path}: the copy of {file} differs from the file; paste the file again"
    );
}

#[test]
fn pav_sdk_front_page_shows_the_provisioner() {
    assert_copied(
        "pav-sdk/src/lib.rs",
        "//! ",
        "examples/hostdir/src/provisioner.rs",
    );
}

#[test]
fn pav_csi_front_page_shows_the_main() {
    assert_copied("pav-csi/src/lib.rs", "//! ", "examples/hostdir/src/main.rs");
}

#[test]
fn the_guide_shows_the_main() {
    assert_copied(
        "docs/writing-a-provisioner.md",
        "",
        "examples/hostdir/src/main.rs",
    );
}

#[test]
fn a_changed_copy_is_noticed() {
    let doc = "//! <!-- f.rs -->\n//! ```\n//! a\n//!\n//!     b\n//! ```\n";
    assert_eq!(
        copy_in(doc, "<!-- f.rs -->", "//! ").as_deref(),
        Some("a\n\n    b\n")
    );
    assert_eq!(copy_in(doc, "<!-- g.rs -->", "//! "), None);
}
