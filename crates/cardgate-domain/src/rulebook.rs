//! The rulebook: every probe rule with its level, the demotion class its failure fires,
//! whether a failure blocks promotion and by what (the trust model, or the operator's policy),
//! and the source it enforces. Rendered canonically (RFC 8785 JSON), its SHA-256 is the
//! **rulebook version** that every verdict names, so a verdict says which rules judged it.
//!
//! Pure: the policy arrives already parsed ([`Policy`] is format-free; the service reads it
//! from TOML); [`Rulebook::apply`] re-judges a cycle's findings under the policy.

pub mod policy;
pub mod rejudge;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use policy::{Policy, PolicyError, RulePolicy};
pub use rejudge::{Rejudgement, Standing, rejudge};

use std::collections::BTreeSet;

use crate::capability::Capability;
use crate::demotion::DemotionClass;
use crate::probe::{FindingStatus, Judgement, Level, Observations, Rule, checks};
use crate::version::ProtocolVersion;

/// What makes a rule's failure block promotion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlocksBy {
    /// A spec MUST or a registry policy of the trust model (docs/trust-model.md).
    TrustModel,
    /// The operator's policy file.
    Policy,
}

/// One rule as the rulebook states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleEntry {
    pub code: Rule,
    /// Its level on v1.0 subjects.
    pub level: Level,
    /// Its level on v0.x subjects, where it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_v0: Option<Level>,
    /// The demotion class a failure fires: the trust model's, or `policy` for a rule that
    /// blocks only by policy.
    pub class: Option<DemotionClass>,
    /// Whether a failure blocks promotion (on v1.0 subjects).
    pub blocks: bool,
    pub blocks_by: Option<BlocksBy>,
    pub source: &'static str,
}

/// The rules in force, and the version that names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rulebook {
    rules: Vec<RuleEntry>,
    policy: Policy,
    version: String,
}

/// The rulebook's canonical form, hashed into its version.
#[derive(Serialize)]
struct Canonical<'a> {
    rules: &'a [RuleEntry],
}

impl Rulebook {
    /// The rulebook of `rules` (the trust model's, [`Rule::ALL`]) under `policy`, which must
    /// already be [`Policy::check`]ed.
    pub fn new(policy: Policy) -> Self {
        Self::of(&Rule::ALL, policy)
    }

    /// The rulebook of the rule table `rules` under `policy` (a table other than
    /// [`Rule::ALL`] is a test's).
    pub fn of(rules: &[Rule], policy: Policy) -> Self {
        let v0 = ProtocolVersion::new(0, 3);
        let rules: Vec<RuleEntry> = rules
            .iter()
            .map(|&rule| {
                let by_model = blocks_by_model(rule, rule.level());
                let by_policy = !by_model && policy.blocks(rule);
                RuleEntry {
                    code: rule,
                    level: rule.level(),
                    level_v0: Some(rule.level_at(v0)).filter(|l| *l != rule.level()),
                    class: if by_policy {
                        Some(DemotionClass::Policy)
                    } else {
                        rule.trigger()
                    },
                    blocks: by_model || by_policy,
                    blocks_by: if by_model {
                        Some(BlocksBy::TrustModel)
                    } else if by_policy {
                        Some(BlocksBy::Policy)
                    } else {
                        None
                    },
                    source: rule.source(),
                }
            })
            .collect();
        let canonical = serde_json::to_value(Canonical { rules: &rules })
            .ok()
            .and_then(|v| crate::jcs::canonicalize(&v).ok())
            .unwrap_or_default();
        let version = hex::encode(Sha256::digest(&canonical));
        Self {
            rules,
            policy,
            version,
        }
    }

    /// The trust model's rules with no operator policy.
    pub fn trust_model() -> Self {
        Self::new(Policy::default())
    }

    /// The SHA-256 (hex) of the canonical rule table: the rulebook version.
    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn rules(&self) -> &[RuleEntry] {
        &self.rules
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Judges a cycle's observations (of a subject at `version` whose interface advertised
    /// `advertised`) under this rulebook: the trust model's checks, then the policy, for each
    /// of its trials; the cycle's judgement is theirs merged ([`crate::probe::trials::merge`]).
    pub fn judge(
        &self,
        obs: &Observations,
        version: ProtocolVersion,
        advertised: &BTreeSet<Capability>,
    ) -> Judgement {
        let first = self.apply(checks::evaluate(obs, version, advertised));
        if obs.trials.is_empty() {
            return first;
        }
        // The further trials ran the lifecycle task alone: push is the first trial's to
        // exercise, so they are judged as if it were not advertised.
        let mut alone = advertised.clone();
        alone.remove(&Capability::PushNotifications);
        let mut judged = vec![first];
        judged.extend(
            obs.trials
                .iter()
                .map(|trial| self.apply(checks::evaluate(trial, version, &alone))),
        );
        crate::probe::trials::merge(judged)
    }

    /// Re-judges `judgement` under this rulebook: a failure of a
    /// rule the policy makes blocking blocks promotion and fires the `policy` class, naming the
    /// rule; the verdict names this rulebook. The trust model's own reasons and triggers stand.
    pub fn apply(&self, mut judgement: Judgement) -> Judgement {
        let verdict = &mut judgement.verdict;
        if verdict.unexercised.is_none() {
            for finding in &judgement.findings {
                let by_policy = finding.status == FindingStatus::Fail
                    && !blocks_by_model(finding.code, finding.level)
                    && self.policy.blocks(finding.code);
                if !by_policy {
                    continue;
                }
                let reason = format!("{} (blocks by policy): {}", finding.code, finding.message);
                verdict.reasons.push(reason.clone());
                if !verdict
                    .triggers
                    .iter()
                    .any(|(class, _)| *class == DemotionClass::Policy)
                {
                    verdict.triggers.push((DemotionClass::Policy, reason));
                }
            }
            verdict.passed = verdict.reasons.is_empty();
        }
        verdict.rulebook = Some(self.version.clone());
        judgement
    }
}

/// Whether the trust model itself makes a failure of `rule`, reported at `level`, block:
/// a spec MUST or a registry policy does, a SHOULD does not.
fn blocks_by_model(rule: Rule, level: Level) -> bool {
    matches!(level, Level::Must | Level::Policy) || rule.required()
}

#[cfg(test)]
mod tests;
