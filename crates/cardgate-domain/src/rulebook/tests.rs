use super::*;
use crate::probe::checks::evaluate;
use crate::probe::{Finding, Observations, Verdict};

fn policy(rules: &[(Rule, bool)]) -> Policy {
    Policy {
        rules: rules
            .iter()
            .map(|(rule, blocks)| (*rule, RulePolicy { blocks: *blocks }))
            .collect(),
    }
}

#[test]
fn the_version_is_stable_and_moves_with_the_rule_table_and_the_policy() {
    let a = Rulebook::trust_model();
    assert_eq!(a.version(), Rulebook::trust_model().version());
    assert_eq!(a.version().len(), 64);
    // A changed rule table (one rule fewer) is another version.
    let fewer: Vec<Rule> = Rule::ALL
        .iter()
        .copied()
        .filter(|r| *r != Rule::Cancel)
        .collect();
    assert_ne!(
        a.version(),
        Rulebook::of(&fewer, Policy::default()).version()
    );
    // So is a policy that makes a rule block; one that restates the trust model is not.
    let strict = Rulebook::new(policy(&[(Rule::Cancel, true)]));
    assert_ne!(a.version(), strict.version());
    let restated = Rulebook::new(policy(&[(Rule::Timestamps, true)]));
    assert_eq!(a.version(), restated.version());
}

#[test]
fn each_rule_says_whether_it_blocks_and_by_what() {
    let book = Rulebook::new(policy(&[(Rule::Cancel, true)]));
    let entry = |code: Rule| book.rules().iter().find(|r| r.code == code).unwrap();
    let must = entry(Rule::TerminalStays);
    assert_eq!(
        (must.blocks, must.blocks_by, must.class),
        (
            true,
            Some(BlocksBy::TrustModel),
            Some(DemotionClass::Terminal)
        )
    );
    let by_policy = entry(Rule::Cancel);
    assert_eq!(
        (by_policy.blocks, by_policy.blocks_by, by_policy.class),
        (true, Some(BlocksBy::Policy), Some(DemotionClass::Policy))
    );
    let should = entry(Rule::Resubscribe);
    assert_eq!((should.blocks, should.blocks_by), (false, None));
    assert_eq!(entry(Rule::TimestampFormat).level_v0, Some(Level::Should));
}

#[test]
fn a_policy_can_make_a_rule_block_but_never_unblock_what_the_trust_model_requires() {
    assert!(
        policy(&[(Rule::Cancel, true), (Rule::TimestampFormat, true)])
            .check()
            .is_ok()
    );
    for rule in [
        Rule::Timestamps,
        Rule::TerminalStays,
        Rule::TerminalNoTimestamp,
        Rule::Push,
    ] {
        let err = policy(&[(rule, false)]).check().unwrap_err();
        assert!(err.to_string().contains("cannot be unblocked"), "{err}");
        assert!(err.to_string().contains(rule.code()), "{err}");
    }
    // Saying a SHOULD does not block is what the trust model says already.
    assert!(policy(&[(Rule::Resubscribe, false)]).check().is_ok());
}

/// A passing judgement with one SHOULD finding failed.
fn passing_with_failed(code: Rule) -> Judgement {
    let mut judgement = evaluate(
        &Observations::default(),
        ProtocolVersion::new(1, 0),
        &Default::default(),
    );
    judgement.findings = vec![Finding {
        code,
        level: Level::Should,
        status: FindingStatus::Fail,
        message: "the cancel left the task working".into(),
        trigger: None,
    }];
    judgement.verdict = Verdict {
        passed: true,
        reasons: Vec::new(),
        triggers: Vec::new(),
        lifecycle: Ok(()),
        untimestamped: Vec::new(),
        unexercised: None,
        extended_card: None,
        rulebook: None,
        trials: None,
    };
    judgement
}

#[test]
fn a_should_finding_a_policy_makes_blocking_fails_the_verdict_with_the_policy_class() {
    let plain = Rulebook::trust_model().apply(passing_with_failed(Rule::Cancel));
    assert!(plain.verdict.passed);
    assert_eq!(
        plain.verdict.rulebook.as_deref(),
        Some(Rulebook::trust_model().version())
    );

    let book = Rulebook::new(policy(&[(Rule::Cancel, true)]));
    let strict = book.apply(passing_with_failed(Rule::Cancel));
    assert!(!strict.verdict.passed);
    assert_eq!(strict.verdict.triggers.len(), 1);
    let (class, reason) = &strict.verdict.triggers[0];
    assert_eq!(*class, DemotionClass::Policy);
    assert!(
        reason.starts_with("LC-CANCEL (blocks by policy)"),
        "{reason}"
    );
    assert_eq!(strict.verdict.rulebook.as_deref(), Some(book.version()));
}
