//! No import cycles between modules: in pav, pav-csi, pav-sdk and
//! pav-templates, the modules under one parent use each other without a
//! cycle, so each can be read, and moved, after the ones it uses.
//!
//! The graph is read from the sources with `syn`: every path that starts
//! with `crate::`, `self::` or `super::` (in `use` items and in code, test
//! and doc-only code left out) is an edge from the module of the file it is in to the
//! module it names. An edge between two modules counts between their
//! ancestors that are siblings (`a::x` using `b::y` is `a` using `b`); a
//! module using its own ancestor or descendant is no edge. Paths inside
//! macro calls are not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The crates held to the rule, from the workspace's root.
const CRATES: [&str; 4] = ["pav", "pav-csi", "pav-sdk", "pav-templates"];

type ModulePath = Vec<String>;

/// One use of a module by another: where it is, for the report.
#[derive(Debug, Clone)]
struct Use {
    file: PathBuf,
    path: String,
}

#[test]
fn modules_use_each_other_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for name in CRATES {
        let graph = crate_graph(&root.join(name).join("src"));
        for cycle in cycles(&graph) {
            found.push(describe(name, &cycle, &graph));
        }
    }
    assert!(
        found.is_empty(),
        "import cycles between sibling modules:\n{}",
        found.join("\n")
    );
}

/// The checker itself finds a planted cycle, and no cycle where a child
/// uses its parent.
#[test]
fn a_cycle_between_siblings_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).unwrap();
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\n#[cfg(test)]\nmod tests;\n",
    );
    write("a.rs", "use crate::b::B;\npub struct A;\n");
    write(
        "b.rs",
        "pub struct B(crate::a::A);\nfn f() { super::c::g() }\n",
    );
    write("c.rs", "pub fn g() { let _ = crate::c::g; }\n");
    write("tests.rs", "use crate::c::g;\n");
    let graph = crate_graph(src);
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "{graph:#?}");
    assert_eq!(found[0], ["a", "b"].map(|m| vec![m.to_owned()]));
    write("b.rs", "pub struct B;\n");
    assert!(cycles(&crate_graph(src)).is_empty());
}

/// Edges between sibling modules: (parent, from, to) → an example use.
type Graph = BTreeMap<(ModulePath, String, String), Use>;

/// The module graph of one crate's `src`.
fn crate_graph(src: &Path) -> Graph {
    let files = module_files(src);
    let known: BTreeSet<ModulePath> = files.keys().cloned().collect();
    let mut graph = Graph::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let syntax = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: not Rust syn can parse: {e}", file.display()));
        let mut paths = Paths::default();
        paths.visit_file(&syntax);
        for path in paths.found {
            let Some(absolute) = resolve(module, &path) else {
                continue;
            };
            let Some(target) = longest_module(&known, &absolute) else {
                continue;
            };
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue;
            }
            let parent = module[..common].to_vec();
            graph
                .entry((parent, module[common].clone(), target[common].clone()))
                .or_insert_with(|| Use {
                    file: file.clone(),
                    path: path.join("::"),
                });
        }
    }
    graph
}

/// Every module of the crate, test-only modules (declared under
/// `#[cfg(test)]`) left out, and its file.
fn module_files(src: &Path) -> BTreeMap<ModulePath, PathBuf> {
    let mut files = BTreeMap::new();
    let mut pending = vec![(ModulePath::new(), src.join("lib.rs"))];
    while let Some((module, file)) = pending.pop() {
        let text = std::fs::read_to_string(&file).unwrap();
        let syntax = syn::parse_file(&text).unwrap();
        // A module's children live in its directory: `a.rs`'s in `a/`,
        // `a/mod.rs`'s and `lib.rs`'s beside it.
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "mod.rs") => file.parent().unwrap().to_owned(),
            _ => file.with_extension(""),
        };
        for item in &syntax.items {
            if let syn::Item::Mod(declared) = item
                && declared.content.is_none()
                && !is_test_only(&declared.attrs)
            {
                let name = declared.ident.to_string();
                let child = [
                    dir.join(format!("{name}.rs")),
                    dir.join(&name).join("mod.rs"),
                ]
                .into_iter()
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{}: no file for mod {name}", file.display()));
                let mut path = module.clone();
                path.push(name);
                pending.push((path, child));
            }
        }
        files.insert(module, file);
    }
    files
}

/// Whether `attrs` hold `#[cfg(test)]` or `#[cfg(doc)]`: code that is
/// not part of the build (an import for a doc link is no use).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test" || ident == "doc")
    })
}

/// The paths of a file that start with `crate`, `self` or `super`, from
/// `use` items (groups expanded) and code, outside `#[cfg(test)]` items.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl Paths {
    fn record(&mut self, segments: Vec<String>) {
        if matches!(
            segments.first().map(String::as_str),
            Some("crate" | "self" | "super")
        ) {
            self.found.push(segments);
        }
    }

    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        let with = |name: String| {
            let mut path = prefix.to_vec();
            path.push(name);
            path
        };
        match tree {
            syn::UseTree::Path(p) => {
                let prefix = with(p.ident.to_string());
                self.use_tree(&prefix, &p.tree);
            }
            syn::UseTree::Name(n) => self.record(with(n.ident.to_string())),
            syn::UseTree::Rename(r) => self.record(with(r.ident.to_string())),
            syn::UseTree::Glob(_) => self.record(prefix.to_vec()),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&[], &item.tree);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.record(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }
}

/// `path`, used in `module`, from the crate's root.
fn resolve(module: &ModulePath, path: &[String]) -> Option<ModulePath> {
    let mut absolute = match path.first()?.as_str() {
        "crate" => ModulePath::new(),
        _ => module.clone(),
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        absolute.pop()?;
    }
    while rest.first().map(String::as_str) == Some("super") {
        absolute.pop()?;
        rest = &rest[1..];
    }
    absolute.extend(rest.iter().cloned());
    Some(absolute)
}

/// The longest prefix of `path` that is a module of the crate.
fn longest_module(known: &BTreeSet<ModulePath>, path: &[String]) -> Option<ModulePath> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| known.contains(prefix))
}

/// The cycles of `graph`: each strongly connected set of two or more
/// siblings, as full module paths, sorted.
fn cycles(graph: &Graph) -> Vec<Vec<ModulePath>> {
    let mut by_parent: BTreeMap<&ModulePath, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for (parent, from, to) in graph.keys() {
        by_parent
            .entry(parent)
            .or_default()
            .entry(from.as_str())
            .or_default()
            .insert(to.as_str());
    }
    let mut found = Vec::new();
    for (parent, edges) in by_parent {
        for component in strongly_connected(&edges) {
            found.push(
                component
                    .into_iter()
                    .map(|name| {
                        let mut path = parent.clone();
                        path.push(name.to_owned());
                        path
                    })
                    .collect(),
            );
        }
    }
    found
}

/// Tarjan's strongly connected components of two or more nodes, each
/// sorted.
fn strongly_connected<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a, 'e> {
        edges: &'e BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(state: &mut State<'a, '_>, node: &'a str) {
        let n = state.index.len();
        state.index.insert(node, n);
        state.low.insert(node, n);
        state.stack.push(node);
        for &next in state.edges.get(node).into_iter().flatten() {
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.stack.contains(&next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let at = state.stack.iter().rposition(|&n| n == node).unwrap();
            let mut component = state.stack.split_off(at);
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for &node in edges.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// A cycle, with one use for each of its edges.
fn describe(krate: &str, cycle: &[ModulePath], graph: &Graph) -> String {
    let names: BTreeSet<&str> = cycle.iter().map(|p| p.last().unwrap().as_str()).collect();
    let parent = &cycle[0][..cycle[0].len() - 1];
    let mut lines = vec![format!(
        "{krate}: {}",
        cycle
            .iter()
            .map(|p| p.join("::"))
            .collect::<Vec<_>>()
            .join(" <-> ")
    )];
    for ((edge_parent, from, to), seen) in graph {
        if edge_parent == parent && names.contains(from.as_str()) && names.contains(to.as_str()) {
            lines.push(format!(
                "    {from} uses {to}: {} ({})",
                seen.path,
                seen.file.display()
            ));
        }
    }
    lines.join("\n")
}

/// What `pav render` needs, planning a phase (`phases`, `recipe`, and the
/// pod contract in `pods`), uses nothing of the running driver (`csi`) or
/// controller (`operator`): the offline commands plan without them.
#[test]
fn planning_needs_no_driver() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = crate_graph(&src);
    let offline = ["phases", "recipe", "pods", "driver_error", "snapshots"];
    let running = ["csi", "operator"];
    let uses: Vec<String> = (graph.iter())
        .filter(|((parent, from, to), _)| {
            parent.is_empty() && offline.contains(&from.as_str()) && running.contains(&to.as_str())
        })
        .map(|((_, from, to), seen)| {
            format!("{from} uses {to}: {} ({})", seen.path, seen.file.display())
        })
        .collect();
    assert!(uses.is_empty(), "{}", uses.join("\n"));
}
