//! The crate's layering, checked on its sources: each top-level module imports only the
//! modules below it (lib.rs gives the order), so no import cycle can form between layers; and
//! at every depth, no module imports one that imports it back, directly or round a loop
//! (`x/mod.rs` counts as the top of `x`).

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
    // types (`remote::grpc_transport::proto`): one definition of the wire for both ends.
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

/// A module's path from the crate root (`["service", "probe"]`).
type Module = Vec<String>;
/// Who names whom.
type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// A source file's module path: `service/probe/mod.rs` and `service/probe.rs` are
/// `service::probe`, `lib.rs` is the crate root (empty).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if !["mod", "lib", "main"].contains(&stem) {
        parts.push(stem.to_string());
    }
    parts
}

/// Every path a use tree names, expanded: `a::{b::C, d}` gives `a::b::C` and `a::d`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn parse(chars: &[char], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            while *at < chars.len() && chars[*at].is_whitespace() {
                *at += 1;
            }
            if chars.get(*at) == Some(&'{') {
                *at += 1;
                loop {
                    parse(chars, at, &path, out);
                    while *at < chars.len() && chars[*at].is_whitespace() {
                        *at += 1;
                    }
                    match chars.get(*at) {
                        Some(',') => *at += 1,
                        Some('}') => {
                            *at += 1;
                            return;
                        }
                        _ => return,
                    }
                    while *at < chars.len() && chars[*at].is_whitespace() {
                        *at += 1;
                    }
                    if chars.get(*at) == Some(&'}') {
                        *at += 1;
                        return;
                    }
                }
            }
            let start = *at;
            while *at < chars.len() && (chars[*at].is_ascii_alphanumeric() || chars[*at] == '_') {
                *at += 1;
            }
            if *at == start {
                break;
            }
            path.push(chars[start..*at].iter().collect());
            if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
                *at += 2;
            } else {
                break;
            }
        }
        out.push(path);
    }
    let chars: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    parse(&chars, &mut 0, &[], &mut out);
    out
}

/// The modules a file of module `own` names, as absolute module paths (unresolved: the longest
/// known prefix is taken later): `crate::…`, `super::…` (any number of them) and `self::…`.
fn named_paths(source: &str, own: &[String]) -> Vec<Vec<String>> {
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    // `super` is the parent of the file's module, whether the file is `x.rs` or `x/mod.rs`.
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let rest = &code[i..];
        let (base, skip): (Vec<String>, usize) = if boundary && rest.starts_with("crate::") {
            (Vec::new(), "crate::".len())
        } else if boundary && rest.starts_with("self::") {
            (own.to_vec(), "self::".len())
        } else if boundary && rest.starts_with("super::") {
            let mut base = own.to_vec();
            let mut skip = 0;
            while code[i + skip..].starts_with("super::") {
                base.pop();
                skip += "super::".len();
            }
            (base, skip)
        } else {
            i += 1;
            continue;
        };
        for tail in expand(&code[i + skip..]) {
            let mut path = base.clone();
            path.extend(tail);
            found.push(path);
        }
        i += skip;
    }
    found
}

/// The module graph of the crate: an edge from each module to every module it names, except its
/// own ancestors and descendants (a module declares its children and they use its items).
fn module_graph(src: &Path) -> (BTreeSet<Module>, Graph) {
    let mut files = Vec::new();
    rust_sources(src, &mut files);
    let files: Vec<_> = files
        .into_iter()
        .filter(|f| !f.ends_with("tests.rs") && !f.components().any(|c| c.as_os_str() == "tests"))
        .collect();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(src).unwrap()))
        .collect();
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(src).unwrap();
        let own = module_of(relative);
        let source = std::fs::read_to_string(file).unwrap();
        for path in named_paths(&source, &own) {
            let Some(target) = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let related = target.starts_with(&own) || own.starts_with(&target);
            if !related {
                graph.entry(own.clone()).or_default().insert(target);
            }
        }
    }
    (modules, graph)
}

/// A circle among `nodes` in `graph`, if there is one, as the path around it.
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

/// At every depth, the children of one module form a graph: `a → b` when anything in `a`'s
/// subtree names anything in `b`'s. None of those graphs may have a circle, so no module,
/// however deep, imports one that imports it back (directly or round a longer loop).
fn circles_at_every_depth(modules: &BTreeSet<Module>, graph: &Graph) -> Vec<String> {
    let parents: BTreeSet<Vec<String>> = modules
        .iter()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    let mut found = Vec::new();
    for parent in parents {
        let depth = parent.len();
        let mut siblings: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, targets) in graph {
            if from.len() <= depth || !from.starts_with(&parent) {
                continue;
            }
            for to in targets {
                if to.len() <= depth || !to.starts_with(&parent) || to[depth] == from[depth] {
                    continue;
                }
                siblings
                    .entry(from[depth].clone())
                    .or_default()
                    .insert(to[depth].clone());
            }
        }
        if let Some(around) = circle(&siblings) {
            let at = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            found.push(format!("in {at}: {}", around.join(" → ")));
        }
    }
    found
}

#[test]
fn no_module_imports_one_that_imports_it_back_at_any_depth() {
    for (root, at_least) in [("src", 80), ("crates/cardgate-domain/src", 30)] {
        let (modules, graph) = module_graph(&repo_path(root));
        assert!(
            modules.len() > at_least,
            "{root}: only {} modules found",
            modules.len()
        );
        let circles = circles_at_every_depth(&modules, &graph);
        assert!(
            circles.is_empty(),
            "{root}: module circles:\n{}",
            circles.join("\n")
        );
    }
    // `http/mod.rs` is `http` itself: what it names counts for the module.
    let (_, graph) = module_graph(&repo_path("src"));
    assert!(
        graph
            .get(&vec!["http".to_string()])
            .is_some_and(|to| to.contains(&vec!["service".to_string()])),
        "http/mod.rs must be read as the top of `http`"
    );
}

#[test]
fn the_domain_crate_cannot_reach_io() {
    // The compiler keeps the domain pure as long as its manifest names none of these.
    let manifest = std::fs::read_to_string(repo_path("crates/cardgate-domain/Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_default();
    let named: Vec<&str> = deps
        .lines()
        .filter_map(|l| l.split('=').next())
        .map(str::trim)
        .filter(|n| !n.is_empty() && !n.starts_with('#'))
        .collect();
    assert!(
        named.contains(&"serde_json"),
        "dependencies not read: {named:?}"
    );
    for io in [
        "tokio",
        "sqlx",
        "axum",
        "reqwest",
        "tonic",
        "hyper",
        "tokio-util",
        "tower",
    ] {
        assert!(!named.contains(&io), "the domain crate depends on {io}");
    }
}

#[test]
fn the_circle_check_sees_a_circle_deep_down_and_through_mod_rs() {
    // service::credentials → service::probe (a folder with mod.rs) → back: the circle the
    // old check missed.
    let m = |p: &str| p.split("::").map(str::to_string).collect::<Vec<_>>();
    let modules: BTreeSet<_> = [
        "service",
        "service::probe",
        "service::probe::execute",
        "service::credentials",
        "service::probe::cycle",
    ]
    .into_iter()
    .map(m)
    .collect();
    let mut graph = BTreeMap::new();
    graph.insert(
        m("service::credentials"),
        BTreeSet::from([m("service::probe")]),
    );
    graph.insert(
        m("service::probe::execute"),
        BTreeSet::from([m("service::credentials")]),
    );
    let circles = circles_at_every_depth(&modules, &graph);
    assert_eq!(circles, ["in service: credentials → probe → credentials"]);
    // And the paths a file names are resolved from grouped and relative imports.
    let named = named_paths(
        "use super::{credentials, cycle::{Cycle, Target}};\nuse crate::service::discovery::X;",
        &m("service::probe::execute"),
    );
    assert!(
        named.contains(&m("service::probe::credentials")),
        "{named:?}"
    );
    assert!(
        named.contains(&m("service::probe::cycle::Cycle")),
        "{named:?}"
    );
    assert!(named.contains(&m("service::discovery::X")), "{named:?}");
}
