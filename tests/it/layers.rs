//! The crate's layering, checked on its sources: each top-level module imports only the
//! modules below it (lib.rs gives the order), so no import cycle can form between layers.

use std::collections::{BTreeMap, BTreeSet};

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
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
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
