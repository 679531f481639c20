//! The operator's policy: which rules block promotion beyond what the trust model asks. A
//! policy can make any rule block; it cannot unblock one the trust model requires.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::probe::Rule;

/// What the operator says of one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulePolicy {
    /// A failure blocks promotion, and demotes a trusted subject (class `policy`).
    pub blocks: bool,
}

/// The operator's policy, as its file states it (`[rules."LC-CANCEL"] blocks = true`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub rules: BTreeMap<Rule, RulePolicy>,
}

/// Why a policy cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "{rule} cannot be unblocked: the trust model requires it ({level} level{required}); a policy can only make rules block"
    )]
    Unblocks {
        rule: Rule,
        level: &'static str,
        required: &'static str,
    },
}

impl Policy {
    /// Refuses a policy that unblocks what the trust model requires (a MUST, a registry
    /// policy, the rules a verdict needs to pass, and the demotion triggers).
    pub fn check(&self) -> Result<(), PolicyError> {
        for (rule, said) in &self.rules {
            if !said.blocks
                && (super::blocks_by_model(*rule, rule.level()) || rule.trigger().is_some())
            {
                return Err(PolicyError::Unblocks {
                    rule: *rule,
                    level: rule.level().as_str(),
                    required: if rule.required() { ", must pass" } else { "" },
                });
            }
        }
        Ok(())
    }

    /// Whether the policy makes a failure of `rule` block.
    pub fn blocks(&self, rule: Rule) -> bool {
        self.rules.get(&rule).is_some_and(|r| r.blocks)
    }
}
