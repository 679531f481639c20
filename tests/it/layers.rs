//! The crate's layering, checked on its sources: each top-level module imports only the
//! modules below it (lib.rs gives the order), so no import cycle can form between layers; and
//! within each layer, no module imports one that imports it back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::{repo_path, rust_sources};

/// What each top-level module may import besides itself.
const ALLOWED: &[(&str, &[&str])] = &[
    ("domain", &[]),
    ("storage", &["domain"]),
    ("remote", &["domain", "metrics"]),
    ("service", &["domain", "storage", "remote", "metrics"]),
    (
        "runtime",
        &["domain", "storage", "remote", "service", "metrics"],
    ),
    // No storage: handlers reach the database only through the services.
    (
        "http",
        &["domain", "remote", "service", "runtime", "metrics"],
    ),
    (
        "app",
        &[
            "domain", "storage", "remote", "service", "runtime", "http", "metrics",
        ],
    ),
    (
        "config",
        &[
            "domain", "storage", "remote", "service", "runtime", "http", "app", "metrics",
        ],
    ),
    (
        "cli",
        &[
            "domain",
            "storage",
            "remote",
            "service",
            "runtime",
            "http",
            "app",
            "config",
            "telemetry",
            "metrics",
        ],
    ),
    ("telemetry", &[]),
    ("metrics", &[]),
    // The fake agent serves the gRPC binding with the client's own generated `lf.a2a.v1`
    // types (`remote::grpc::proto`): one definition of the wire for both ends.
    ("fake_agent", &["domain", "remote"]),
];

/// The top-level modules a source file names through `crate::`, test modules excluded.
fn imports(source: &str) -> BTreeSet<String> {
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    code.match_indices("crate::")
        .map(|(i, _)| {
            code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|m| !m.is_empty())
        .collect()
}

/// The module a path under a folder of modules belongs to: its first component, sans `.rs`.
fn first_module(relative: &Path) -> String {
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

#[test]
fn each_layer_imports_only_the_layers_below_it() {
    let src = repo_path("src");
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut files = Vec::new();
    rust_sources(&src, &mut files);
    let mut checked = 0;
    let mut wrong = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = first_module(relative);
        let Some(may) = allowed.get(top.as_str()) else {
            // lib.rs and main.rs sit above every layer; tests.rs files are unit tests.
            assert!(
                ["lib", "main"].contains(&top.as_str()),
                "{} is in no layer: add it to ALLOWED",
                relative.display()
            );
            continue;
        };
        if relative.ends_with("tests.rs") {
            continue;
        }
        checked += 1;
        let source = std::fs::read_to_string(&file).unwrap();
        for module in imports(&source) {
            if module != top && !may.contains(&module.as_str()) {
                wrong.push(format!("{} imports crate::{module}", relative.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} files found under {}",
        src.display()
    );
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

/// The modules of `layer` (its files and folders, `mod.rs` and `tests.rs` aside).
fn modules_of(layer: &Path) -> BTreeSet<String> {
    std::fs::read_dir(layer)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
        .filter(|m| m != "mod" && m != "tests")
        .collect()
}

/// The modules of the same layer that `source` (a file of module `own`, at the layer's top
/// when `top_level`) names: `crate::<layer>::m…`, and `super::m…` or `super::{m::…}` from a
/// top-level file, where `super` is the layer.
fn sibling_imports(
    source: &str,
    layer: &str,
    own: &str,
    top_level: bool,
    modules: &BTreeSet<String>,
) -> BTreeSet<String> {
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    let mut found = BTreeSet::new();
    let mut take = |rest: &str| {
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if modules.contains(&name) && name != own {
            found.insert(name);
        }
    };
    let absolute = format!("crate::{layer}::");
    for (i, _) in code.match_indices(&absolute) {
        take(&code[i + absolute.len()..]);
    }
    if top_level {
        for (i, _) in code.match_indices("super::") {
            let rest = &code[i + "super::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `super::{a::X, b::{Y, Z}, Store}`: the names followed by `::` are modules.
                let mut depth = 1;
                let end = group
                    .char_indices()
                    .find(|&(_, c)| {
                        depth += match c {
                            '{' => 1,
                            '}' => -1,
                            _ => 0,
                        };
                        depth == 0
                    })
                    .map_or(group.len(), |(i, _)| i);
                let inner = &group[..end];
                for (j, _) in inner.match_indices("::") {
                    let before = &inner[..j];
                    let start = before
                        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .map_or(0, |k| k + 1);
                    take(&before[start..]);
                }
            } else if rest.contains("::") {
                take(rest);
            }
        }
    }
    found
}

/// A module circle in `graph`, if there is one, as the path around it.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut around = path[at..].to_vec();
            around.push(node.to_string());
            return Some(around);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_one_that_imports_it_back_within_a_layer() {
    for layer in [
        "domain", "storage", "service", "remote", "http", "runtime", "cli",
    ] {
        let dir = repo_path("src").join(layer);
        let modules = modules_of(&dir);
        let mut files = Vec::new();
        rust_sources(&dir, &mut files);
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in files {
            let relative = file.strip_prefix(&dir).unwrap();
            let own = first_module(relative);
            if own == "mod" || relative.ends_with("tests.rs") {
                continue; // the layer's root declares every module; unit tests sit outside
            }
            let top_level = relative.components().count() == 1;
            let source = std::fs::read_to_string(&file).unwrap();
            graph
                .entry(own.clone())
                .or_default()
                .extend(sibling_imports(&source, layer, &own, top_level, &modules));
        }
        assert!(
            graph.len() > 3,
            "{layer}: only {} modules found",
            graph.len()
        );
        if let Some(around) = circle(&graph) {
            panic!("{layer}: a module circle: {}", around.join(" → "));
        }
    }
}
