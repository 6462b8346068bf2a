//! The documentation shows this example's files, and tmpfs's provisioner,
//! verbatim: each copy must stay identical to the file CI compiles and
//! runs csi-sanity against. The guide also shows its dependencies, which
//! must be the ones it builds with, and pav-sdk's README those that build
//! its `main` in a crate of their own.

use std::collections::{BTreeMap, BTreeSet};
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

fn read(path: &str) -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(repo.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn assert_copied(doc_path: &str, prefix: &str, file: &str) {
    let doc = read(doc_path);
    let source = read(file);
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
fn pav_sdk_front_page_shows_the_tmpfs_provisioner() {
    assert_copied(
        "pav-sdk/src/lib.rs",
        "//! ",
        "examples/tmpfs/src/provisioner.rs",
    );
}

#[test]
fn pav_csi_front_page_shows_the_main() {
    assert_copied("pav-csi/src/lib.rs", "//! ", "examples/hostdir/src/main.rs");
}

#[test]
fn pav_csi_testing_shows_the_conformance_test() {
    assert_copied(
        "pav-csi/src/testing/mod.rs",
        "//! ",
        "examples/hostdir/tests/conformance.rs",
    );
}

#[test]
fn the_guide_shows_the_conformance_test() {
    assert_copied(
        "docs/writing-a-provisioner.md",
        "",
        "examples/hostdir/tests/conformance.rs",
    );
}

#[test]
fn the_guide_shows_the_main() {
    assert_copied(
        "docs/writing-a-provisioner.md",
        "",
        "examples/hostdir/src/main.rs",
    );
}

/// One dependency of a Cargo.toml: its features, and the version it asks
/// for when it names one.
#[derive(Debug, PartialEq)]
struct Dependency {
    features: BTreeSet<String>,
    version: Option<String>,
}

/// The `[dependencies]` of a Cargo.toml (one line each, as ours are
/// written); a `workspace = true` one has the features `workspace` (the
/// root Cargo.toml) gives it too.
fn dependencies(manifest: &str, workspace: &str) -> BTreeMap<String, Dependency> {
    let section = |text: &str, name: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| l.trim() != name)
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(str::to_owned)
            .collect()
    };
    let name_of = |line: &str| -> String {
        line.split(['.', ' ', '='])
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let features_of = |line: &str| -> BTreeSet<String> {
        line.split_once("features = [")
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(list, _)| {
                list.split(',')
                    .map(|f| f.trim().trim_matches('"').to_owned())
                    .filter(|f| !f.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let version_of = |line: &str| -> Option<String> {
        let (_, value) = line.split_once('=')?;
        let value = value.trim();
        let quoted = match value.strip_prefix('{') {
            Some(table) => table.split_once("version = ")?.1,
            None => value,
        };
        Some(quoted.strip_prefix('"')?.split('"').next()?.to_owned())
    };
    let shared = section(workspace, "[workspace.dependencies]");
    section(manifest, "[dependencies]")
        .iter()
        .map(|line| {
            let name = name_of(line);
            let mut features = features_of(line);
            if line.contains("workspace = true") {
                let declared = shared
                    .iter()
                    .find(|l| name_of(l) == name)
                    .unwrap_or_else(|| panic!("{name} is no workspace dependency"));
                features.extend(features_of(declared));
            }
            (
                name,
                Dependency {
                    features,
                    version: version_of(line),
                },
            )
        })
        .collect()
}

/// Where the guide shows the dependencies.
const DEPENDENCIES_MARKER: &str = "<!-- dependencies of examples/hostdir/Cargo.toml -->";

/// The guide's `[dependencies]` are this example's, with their features
/// (a `main` using `pav_csi::logging` needs pav-csi's `logging`), and ask
/// for this version of pav-sdk and pav-csi.
#[test]
fn the_guide_shows_the_dependencies() {
    let doc_path = "docs/writing-a-provisioner.md";
    let shown = copy_in(&read(doc_path), DEPENDENCIES_MARKER, "")
        .unwrap_or_else(|| panic!("{doc_path} has no code block marked {DEPENDENCIES_MARKER}"));
    let workspace = read("Cargo.toml");
    let shown = dependencies(&shown, &workspace);
    let built = dependencies(&read("examples/hostdir/Cargo.toml"), &workspace);
    let features = |deps: &BTreeMap<String, Dependency>| -> BTreeMap<String, BTreeSet<String>> {
        deps.iter()
            .map(|(name, dep)| (name.clone(), dep.features.clone()))
            .collect()
    };
    assert_eq!(
        features(&shown),
        features(&built),
        "{doc_path}: the dependencies shown (left) and examples/hostdir/Cargo.toml's (right) differ"
    );
    let version = env!("CARGO_PKG_VERSION");
    for crate_name in ["pav-sdk", "pav-csi"] {
        let asked = shown[crate_name].version.as_deref().unwrap_or_default();
        assert!(
            version.starts_with(&format!("{asked}.")) || version == asked,
            "{doc_path}: {crate_name} = {asked:?} does not ask for pav's version {version}"
        );
    }
}

/// pav-sdk/README.md's dependency block builds the driver the crates'
/// front pages document: a crate of those dependencies alone, whose
/// `main` and provisioner are this example's (pav-csi's front page shows
/// the `main`), checks offline, with pav-sdk and pav-csi patched to this
/// workspace's and the versions of its Cargo.lock. The workspace's own
/// build cannot tell: a feature one member lacks another may enable
/// (pav-csi's `logging` was missing from the README, and its `main`
/// failed with E0433 in a crate of its own). pav's `tests/docs.rs`
/// checks that they are this example's crates, no more.
///
/// Its build directory is kept in `CARGO_TARGET_TMPDIR`, so a later run
/// checks only what changed (a second); the first builds pav-csi and
/// its dependencies for it alone, minutes on two cores, which is why it
/// is left to `--ignored` runs (.ci/run's, with the root tests).
#[test]
#[ignore = "builds a crate of its own, minutes the first time: .ci/run runs it"]
fn pav_sdk_readme_dependencies_build_the_documented_main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = repo.canonicalize().unwrap();
    let readme = read("pav-sdk/README.md");
    let (_, block) = readme.split_once("```toml\n").expect("a toml block");
    let (block, _) = block.split_once("```").expect("its end");
    let driver = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pav-sdk-readme-driver");
    std::fs::create_dir_all(driver.join("src")).unwrap();
    let patch = |name: &str| format!("{name} = {{ path = {:?} }}\n", repo.join(name));
    let manifest = format!(
        "[package]\nname = \"readme-driver\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n# Its own workspace, wherever its directory is.\n[workspace]\n\n\
         {block}\n[patch.crates-io]\n{}{}",
        patch("pav-sdk"),
        patch("pav-csi"),
    );
    std::fs::write(driver.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(repo.join("Cargo.lock"), driver.join("Cargo.lock")).unwrap();
    for file in ["main.rs", "provisioner.rs"] {
        let source = repo.join("examples/hostdir/src").join(file);
        std::fs::copy(source, driver.join("src").join(file)).unwrap();
    }
    let checked = std::process::Command::new(env!("CARGO"))
        .args(["check", "--offline", "--quiet", "--manifest-path"])
        .arg(driver.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", driver.join("target"))
        .output()
        .expect("cargo runs");
    assert!(
        checked.status.success(),
        "pav-sdk/README.md's dependencies do not build the documented main:\n{}",
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn dependencies_are_read_with_the_workspace_features() {
    let workspace =
        "[workspace.dependencies]\nclap = { version = \"4.5\", features = [\"derive\"] }\n";
    let manifest = "[dependencies]\n# a comment\nclap.workspace = true\n\
                    x = { version = \"0.1\", features = [\"a\", \"b\"] }\ny = \"2\"\n[dev-dependencies]\nz = \"1\"\n";
    let deps = dependencies(manifest, workspace);
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(deps.keys().collect::<Vec<_>>(), ["clap", "x", "y"]);
    assert_eq!(deps["clap"].features, set(&["derive"]));
    assert_eq!(
        deps["x"],
        Dependency {
            features: set(&["a", "b"]),
            version: Some("0.1".into())
        }
    );
    assert_eq!(deps["y"].version.as_deref(), Some("2"));
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
