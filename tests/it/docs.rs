//! The documents that restate the code: the README's table of probe rules is the one
//! `Rule::markdown_table` writes, and every citation of `docs/trust-model.md` in the sources
//! names a section (or a numbered rule) that the document has.

use cardgate::domain::probe::Rule;

use crate::support::{repo_path, rust_sources};

const START: &str = "<!-- rules: generated from crates/cardgate-domain/src/probe/rule.rs; `UPDATE_README=1 cargo test --test it docs` rewrites it -->\n";
const END: &str = "<!-- /rules -->";

#[test]
fn readme_lists_every_rule_as_the_code_defines_it() {
    let path = repo_path("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let a = readme.find(START).expect("the README's rules block") + START.len();
    let b = a + readme[a..].find(END).expect("the end of the rules block");
    let table = Rule::markdown_table();
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!("{}{table}{}", &readme[..a], &readme[b..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        readme[a..b],
        table,
        "the README's rules table is stale: run UPDATE_README=1 cargo test --test it docs"
    );
}

#[test]
fn every_trust_model_citation_names_a_section_it_has() {
    let doc = std::fs::read_to_string(repo_path("docs/trust-model.md")).unwrap();
    let headings: Vec<String> = doc
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_lowercase())
        .collect();
    let mut files = Vec::new();
    rust_sources(&repo_path("src"), &mut files);
    rust_sources(&repo_path("crates"), &mut files);
    rust_sources(&repo_path("tests"), &mut files);
    files.push(repo_path("README.md"));
    let mut cited = 0;
    let mut missing = Vec::new();
    for file in files
        .into_iter()
        .filter(|f| !f.ends_with("tests/it/docs.rs"))
    {
        // Comments wrap: read each file as one line.
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("\n", " ")
            .replace("/// ", "")
            .replace("//! ", "")
            .replace("// ", "");
        for (i, _) in text.match_indices("docs/trust-model.md, ") {
            let rest = &text[i + "docs/trust-model.md, ".len()..];
            let target = if let Some(quoted) = rest.strip_prefix('"') {
                quoted.split('"').next().unwrap_or_default().to_lowercase()
            } else if let Some(rule) = rest.strip_prefix("rule ").or(rest.strip_prefix("rules ")) {
                let n: String = rule.chars().take_while(char::is_ascii_digit).collect();
                format!("rule {n}:")
            } else if let Some(n) = rest.chars().next().filter(char::is_ascii_digit) {
                format!("rule {n}:")
            } else {
                rest.split([')', ';', ':'])
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_lowercase()
            };
            cited += 1;
            if !headings.iter().any(|h| h.starts_with(&target)) {
                missing.push(format!("{}: {target}", file.display()));
            }
        }
    }
    assert!(cited > 15, "only {cited} citations found");
    assert!(
        missing.is_empty(),
        "citations of sections the document lacks:\n{}",
        missing.join("\n")
    );
}
