//! The operator's policy file (`CARDGATE_POLICY_FILE`, TOML): read, checked against the trust
//! model, and turned into the rulebook every verdict is judged under.
//!
//! ```toml
//! [rules."LC-TIMESTAMP-FORMAT"]
//! blocks = true   # a failure blocks promotion, and demotes a trusted subject (class `policy`)
//! ```

use std::path::Path;

use crate::domain::rulebook::{Policy, Rulebook};

/// Reads and checks the policy at `path`: a clear message when it cannot be read, does not
/// parse (an unknown rule code, an unknown key) or unblocks what the trust model requires.
pub fn read(path: &Path) -> anyhow::Result<Policy> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("the policy file {} cannot be read: {e}", path.display()))?;
    parse(&text).map_err(|e| anyhow::anyhow!("the policy file {}: {e}", path.display()))
}

/// Parses and checks a policy's TOML.
pub fn parse(text: &str) -> anyhow::Result<Policy> {
    let policy: Policy = toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    policy.check()?;
    Ok(policy)
}

/// The rulebook under the policy at `path`, or the trust model's alone.
pub fn rulebook(path: Option<&Path>) -> anyhow::Result<Rulebook> {
    Ok(match path {
        Some(path) => Rulebook::new(read(path)?),
        None => Rulebook::trust_model(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_parses_and_is_checked() {
        let policy = parse("[rules.\"LC-CANCEL\"]\nblocks = true\n").unwrap();
        assert!(policy.blocks(crate::domain::probe::Rule::Cancel));
        let unblock = parse("[rules.\"LC-TIMESTAMPS\"]\nblocks = false\n").unwrap_err();
        assert!(
            unblock.to_string().contains("cannot be unblocked"),
            "{unblock}"
        );
        let unknown = parse("[rules.\"LC-NOPE\"]\nblocks = true\n").unwrap_err();
        assert!(unknown.to_string().contains("LC-NOPE"), "{unknown}");
        let typo = parse("[rules.\"LC-CANCEL\"]\nblock = true\n").unwrap_err();
        assert!(typo.to_string().contains("block"), "{typo}");
    }
}
