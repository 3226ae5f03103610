//! The agent's modules form layers: no module reaches, through `crate::` paths, a module that
//! reaches it back. Each file under `src/` belongs to its top-level module (`src/cmd/pin.rs`
//! to `cmd`); every `crate::name` outside a comment, in code or tests, is an edge. Run with
//! `--nocapture` to see the layers, lowest first. docs/agent.md ("Modules") names every
//! module and lists these layers; two tests here keep it so.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("src/ is readable").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The top-level module a file belongs to; `None` for the crate roots (`lib.rs` declares the
/// modules, `main.rs` is the binary that wires them).
fn module_of(path: &Path) -> Option<String> {
    let relative = path.strip_prefix(source_dir()).expect("a file under src/");
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first.strip_suffix(".rs") {
        Some("lib" | "main") => None,
        Some(name) => Some(name.to_owned()),
        None => Some(first.to_owned()),
    }
}

/// The source without `//` comments (doc comments included: a link is not a dependency).
fn code(text: &str) -> String {
    let lines = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""));
    lines.collect::<Vec<_>>().join("\n")
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The modules named by `crate::name` and `crate::{a, b::c, …}` in `code`.
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => found.extend(group_heads(group).map(str::to_owned)),
            None => {
                found.insert(identifier(rest).to_owned());
            }
        }
    }
    found
}

/// The first name of each item of a `{…}` group, given what follows its `{`: `a` and `c`
/// in `a::{b, c}, c::d}`.
fn group_heads(group: &str) -> impl Iterator<Item = &str> {
    let (mut depth, mut start, mut items) = (0usize, 0, Vec::new());
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..at]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .map(|item| identifier(item.trim()))
        .filter(|name| !name.is_empty())
}

fn graph() -> Graph {
    let mut graph = Graph::new();
    for path in rust_files(&source_dir()) {
        let Some(module) = module_of(&path) else {
            continue;
        };
        let references = crate_references(&code(
            &fs::read_to_string(&path).expect("a readable source file"),
        ));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(references.into_iter().filter(|name| *name != module));
    }
    graph
}

/// The modules in layers: each depends only on modules of the layers before it. `Err` with
/// the modules left over when some of them depend on each other in a circle.
fn layers(graph: &Graph) -> Result<Vec<Vec<String>>, Graph> {
    let mut placed = BTreeSet::new();
    let mut layers = Vec::new();
    while placed.len() < graph.len() {
        let layer: Vec<String> = graph
            .iter()
            .filter(|(module, edges)| !placed.contains(*module) && edges.is_subset(&placed))
            .map(|(module, _)| module.clone())
            .collect();
        if layer.is_empty() {
            let left = graph.iter().filter(|(module, _)| !placed.contains(*module));
            return Err(left.map(|(m, e)| (m.clone(), e.clone())).collect());
        }
        placed.extend(layer.iter().cloned());
        layers.push(layer);
    }
    Ok(layers)
}

#[test]
fn the_modules_have_no_circles() {
    let graph = graph();
    // The reader finds what it should: a known edge, and every edge names a module.
    assert!(graph["stream"].contains("fanout"), "{graph:#?}");
    for (module, edges) in &graph {
        for edge in edges {
            assert!(
                graph.contains_key(edge),
                "{module} names crate::{edge}, not a module"
            );
        }
    }
    match layers(&graph) {
        Ok(layers) => {
            for (depth, layer) in layers.iter().enumerate() {
                println!("layer {depth}: {}", layer.join(", "));
            }
        }
        Err(left) => panic!("modules in a circle, or above one (module → what it uses): {left:#?}"),
    }
}

#[test]
fn a_circle_is_found() {
    let mut graph = Graph::new();
    graph.insert("a".into(), ["b".to_owned()].into());
    graph.insert("b".into(), ["a".to_owned()].into());
    graph.insert("c".into(), BTreeSet::new());
    let left = layers(&graph).unwrap_err();
    assert_eq!(left.keys().collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn grouped_and_nested_paths_are_read_and_comments_are_not() {
    let source =
        "use crate::{a::{B, C}, c,\n    g};\nx(crate::d::e()); // crate::f\n/// [`crate::h`]";
    let names = crate_references(&code(source));
    assert_eq!(names, ["a", "c", "d", "g"].map(str::to_owned).into());
}

fn modules_section() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/agent.md");
    let doc = fs::read_to_string(path).expect("docs/agent.md is readable");
    let section = doc.split("\n## Modules").nth(1).expect("a Modules section");
    section.split("\n## ").next().unwrap_or(section).to_owned()
}

/// docs/agent.md's module table names every module (`name.rs`, or `name/` for a directory).
#[test]
fn the_module_table_names_every_module() {
    let section = modules_section();
    for module in graph().keys() {
        let (file, dir) = (format!("`{module}.rs`"), format!("`{module}/`"));
        assert!(
            section.contains(&file) || section.contains(&dir),
            "docs/agent.md's module table does not name {module}"
        );
    }
}

/// docs/agent.md's layer table (`| n | `a`, `b` |`, highest first) is the layers found here.
#[test]
fn the_documented_layers_are_the_layers() {
    let section = modules_section();
    let rows = section.lines().filter_map(|line| {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let depth: usize = cells.get(1)?.parse().ok()?;
        let modules = cells[2].split(", ").map(|m| m.trim_matches('`').to_owned());
        Some((depth, modules.collect::<Vec<_>>()))
    });
    let mut documented: Vec<(usize, Vec<String>)> = rows.collect();
    documented.sort();
    let layers = layers(&graph()).expect("no circles");
    let found: Vec<(usize, Vec<String>)> = layers.into_iter().enumerate().collect();
    assert_eq!(documented, found);
}
