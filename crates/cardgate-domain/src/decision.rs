//! Decision evaluation: may this caller derive lifecycle semantics from this callee?
//!
//! A pure function of the caller's posture and the facts the registry holds about one subject
//! (docs/trust-model.md, "Decisions"). Every condition is reported with a reason, `unknown` never
//! counts as `pass`, and the answer is authoritative only when every condition passes.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;

use super::capability::{Capability, CapabilityMap, CapabilityOutcome, CapabilitySet};
use super::demotion::DemotionClass;
use super::gate::{EffectiveGate, GateState, ProbeStart, SubjectState};
use super::ids::{ProbeRunId, SnapshotId};
use super::time::{self, Timestamp};
use super::version::ProtocolVersion;

mod facts;
pub mod record;
pub use facts::{JudgementFacts, VerdictFacts, card_facts, input, probe_facts};

/// How the caller deduplicates terminal events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dedup {
    /// By `status.timestamp`: every transition must carry one.
    #[default]
    Timestamp,
    /// Not by timestamp: missing timestamps do not matter to this caller.
    None,
}

/// The caller's side of the question: a few bytes, copied freely (it keys cached answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Posture {
    pub caller_version: ProtocolVersion,
    pub dedup: Dedup,
    pub requires: CapabilitySet,
}

/// Whether the latest card snapshot may be used at all. Texts are boxed, exact-sized: the read
/// model holds one per callee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardTrust {
    /// Signature verified; `detail` names the signature (kid, alg, key source).
    Verified { detail: Box<str> },
    /// Unsigned, admitted because the operator turned off the signature requirement.
    UnsignedAdmitted,
    /// Fetch, parse or required signature check failed.
    Untrusted { reason: Box<str> },
}

/// One interface the card offers, as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedInterface {
    pub url: Box<str>,
    pub binding: Box<str>,
    pub version: ProtocolVersion,
    /// Same scheme, host and port as the card's URL.
    pub same_origin: bool,
    /// Capabilities the card advertises for this interface (per card generation).
    pub advertised: CapabilitySet,
}

/// The latest card snapshot, reduced to what decisions read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardFacts {
    pub snapshot_id: SnapshotId,
    pub card_origin: Box<str>,
    pub trust: CardTrust,
    pub interfaces: Box<[OfferedInterface]>,
}

/// The subject's most recent finished probe cycle, reduced to what decisions read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeFacts {
    pub probe_run_id: ProbeRunId,
    /// Where the probe started, in ledger order.
    pub start: ProbeStart,
    pub capabilities: CapabilityMap<CapabilityOutcome>,
    /// What set the run apart from a clean one, boxed and absent when nothing did: the read
    /// model holds one of these per subject, and most runs have nothing to say here (issue 30).
    remarks: Option<Box<ProbeRemarks>>,
}

/// The parts of a probe's facts a clean run leaves empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRemarks {
    /// `Ok` when submitted → working → exactly one terminal was observed with nothing after it;
    /// otherwise what was missing or wrong.
    pub lifecycle: Result<(), Box<str>>,
    /// Transitions that carried no (parseable) `status.timestamp`, e.g. `submitted (stream)`.
    pub untimestamped: Vec<Box<str>>,
    /// Credentials kept the probe from the callee: why (the lifecycle is then unknown).
    pub unexercised: Option<Box<str>>,
    /// The sha256 of the authenticated extended card the probe judged capabilities by.
    pub extended_card: Option<Box<str>>,
}

impl ProbeRemarks {
    const CLEAN: Self = Self {
        lifecycle: Ok(()),
        untimestamped: Vec::new(),
        unexercised: None,
        extended_card: None,
    };
}

impl ProbeFacts {
    pub fn new(
        probe_run_id: ProbeRunId,
        start: ProbeStart,
        capabilities: CapabilityMap<CapabilityOutcome>,
        remarks: ProbeRemarks,
    ) -> Self {
        Self {
            probe_run_id,
            start,
            capabilities,
            remarks: (remarks != ProbeRemarks::CLEAN).then(|| Box::new(remarks)),
        }
    }

    fn remarks(&self) -> &ProbeRemarks {
        static CLEAN: ProbeRemarks = ProbeRemarks::CLEAN;
        self.remarks.as_deref().unwrap_or(&CLEAN)
    }

    /// The remarks, to change them (tests build unclean runs this way).
    pub fn remarks_mut(&mut self) -> &mut ProbeRemarks {
        self.remarks
            .get_or_insert_with(|| Box::new(ProbeRemarks::CLEAN))
    }
}

/// The subject's folded ledger state as the conditions read it, and the ledger position it
/// was folded up to. Only what they read: the read model holds one per subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectFacts {
    /// What callers are told of the gate ([`SubjectState::effective`]).
    pub gate: EffectiveGate,
    /// While the gate is `demoted` (whatever the card's trust): when, and for what.
    pub demotion: Option<Box<Demotion>>,
    /// Each capability the card advertises for the subject: since when, and the ledger seq of
    /// the event that started the advertisement (`None` on states folded before seqs were
    /// kept).
    pub advertised: CapabilityMap<(Timestamp, Option<i64>)>,
    pub ledger_seq: i64,
    pub ledger_hash: LedgerHash,
}

/// A demoted subject's last trigger and every class since it was last trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demotion {
    pub at: Timestamp,
    pub classes: BTreeSet<DemotionClass>,
}

impl SubjectFacts {
    pub fn new(state: &SubjectState, ledger_seq: i64, ledger_hash: &str) -> Self {
        Self {
            gate: state.effective(),
            demotion: match &state.gate {
                GateState::Demoted { at, classes, .. } => Some(Box::new(Demotion {
                    at: *at,
                    classes: classes.clone(),
                })),
                GateState::CardTrusted | GateState::LifecycleTrusted => None,
            },
            advertised: state
                .advertised
                .iter()
                .map(|(c, since)| (*c, (*since, state.advertised_seq.get(c).copied())))
                .collect(),
            ledger_seq,
            ledger_hash: LedgerHash::new(ledger_hash),
        }
    }
}

/// The ledger hash a decision cites. The read model holds one per subject: as its 32 bytes it
/// takes no allocation, where the 64 hex digits took a `String` and 64 B of heap. Any other
/// text (the ledger only writes lowercase hex, but a decision cites what is stored) is kept
/// as it is, so it is always written back exactly.
#[derive(Clone, PartialEq, Eq)]
pub enum LedgerHash {
    Sha256([u8; 32]),
    Other(Box<str>),
}

impl LedgerHash {
    pub fn new(text: &str) -> Self {
        let mut bytes = [0u8; 32];
        match hex::decode_to_slice(text, &mut bytes) {
            Ok(()) if hex::encode(bytes) == text => Self::Sha256(bytes),
            _ => Self::Other(text.into()),
        }
    }
}

impl std::fmt::Display for LedgerHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sha256(bytes) => f.write_str(&hex::encode(bytes)),
            Self::Other(text) => f.write_str(text),
        }
    }
}

impl std::fmt::Debug for LedgerHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Everything one decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionInput {
    /// Shared by every input of one callee (its subjects and the no-subject answer) unless a
    /// subject's own fetch failure overrides its trust: the read model holds one per callee.
    pub card: Option<Arc<CardFacts>>,
    pub subject: Option<SubjectFacts>,
    pub probe: Option<ProbeFacts>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConditionStatus {
    Pass,
    Fail,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    pub id: String,
    pub status: ConditionStatus,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    pub card_snapshot_id: Option<SnapshotId>,
    pub probe_run_id: Option<ProbeRunId>,
    pub ledger_seq: Option<i64>,
    pub ledger_hash: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub authoritative: bool,
    /// `None` when the callee has no subject for the caller's version.
    pub gate_state: Option<EffectiveGate>,
    pub conditions: Vec<Condition>,
    pub evidence: Evidence,
}

fn cond(id: impl Into<String>, status: ConditionStatus, reason: impl Into<String>) -> Condition {
    Condition {
        id: id.into(),
        status,
        reason: reason.into(),
    }
}

use ConditionStatus::{Fail, Pass, Unknown};

/// Evaluates every condition for `posture` against `input`.
pub fn evaluate(posture: &Posture, input: &DecisionInput) -> Decision {
    let interface = input.card.as_deref().and_then(|card| {
        card.interfaces
            .iter()
            .find(|i| i.version == posture.caller_version)
    });
    let mut conditions = vec![
        card_trusted(input.card.as_deref()),
        version_match(posture, input.card.as_deref(), interface),
        same_origin(posture, input.card.as_deref(), interface),
        lifecycle_probe(posture, input),
    ];
    conditions.extend(
        posture
            .requires
            .iter()
            .map(|cap| capability(*cap, posture, interface, input)),
    );
    conditions.push(not_demoted(posture, input.subject.as_ref()));

    let gate_state = input.subject.as_ref().map(|s| {
        let card_untrusted = matches!(
            input.card.as_deref().map(|c| &c.trust),
            Some(CardTrust::Untrusted { .. })
        );
        if card_untrusted {
            EffectiveGate::Untrusted
        } else {
            s.gate
        }
    });
    Decision {
        authoritative: conditions.iter().all(|c| c.status == Pass),
        gate_state,
        conditions,
        evidence: Evidence {
            card_snapshot_id: input.card.as_deref().map(|c| c.snapshot_id),
            probe_run_id: input.probe.as_ref().map(|p| p.probe_run_id),
            ledger_seq: input.subject.as_ref().map(|s| s.ledger_seq),
            ledger_hash: input.subject.as_ref().map(|s| s.ledger_hash.to_string()),
        },
    }
}

fn card_trusted(card: Option<&CardFacts>) -> Condition {
    const ID: &str = "card-trusted";
    match card.map(|c| &c.trust) {
        None => cond(
            ID,
            Unknown,
            "no card snapshot has been recorded for this callee yet",
        ),
        Some(CardTrust::Verified { detail }) => cond(
            ID,
            Pass,
            format!("the card's signature verified ({detail})"),
        ),
        Some(CardTrust::UnsignedAdmitted) => cond(
            ID,
            Pass,
            "the card is unsigned; it is admitted only because the operator set \
             CARDGATE_REQUIRE_SIGNED_CARDS=false",
        ),
        Some(CardTrust::Untrusted { reason }) => cond(
            ID,
            Fail,
            format!("the current card cannot be trusted: {reason}"),
        ),
    }
}

fn version_match(
    posture: &Posture,
    card: Option<&CardFacts>,
    interface: Option<&OfferedInterface>,
) -> Condition {
    const ID: &str = "version-match";
    let want = posture.caller_version;
    let Some(card) = card else {
        return cond(
            ID,
            Unknown,
            "no card snapshot has been recorded for this callee yet",
        );
    };
    if let Some(i) = interface {
        return cond(
            ID,
            Pass,
            format!("the card offers {want} on {} {}", i.binding, i.url),
        );
    }
    let offered: BTreeSet<String> = card
        .interfaces
        .iter()
        .map(|i| i.version.to_string())
        .collect();
    let offered = if offered.is_empty() {
        "no versions".to_string()
    } else {
        offered.into_iter().collect::<Vec<_>>().join(", ")
    };
    let same_major = card
        .interfaces
        .iter()
        .any(|i| i.version.major == want.major);
    let reason = if same_major {
        format!(
            "the card offers {offered}: major {} matches but no interface offers exactly {want}, \
             and a major-only match is not enough",
            want.major
        )
    } else {
        format!("the card offers {offered}, not {want}")
    };
    cond(ID, Fail, reason)
}

fn same_origin(
    posture: &Posture,
    card: Option<&CardFacts>,
    interface: Option<&OfferedInterface>,
) -> Condition {
    const ID: &str = "same-origin";
    match (card, interface) {
        (None, _) => cond(
            ID,
            Unknown,
            "no card snapshot has been recorded for this callee yet",
        ),
        (Some(_), None) => cond(
            ID,
            Unknown,
            format!(
                "no interface offers {}, so there is no task endpoint to compare",
                posture.caller_version
            ),
        ),
        (Some(card), Some(i)) if i.same_origin => cond(
            ID,
            Pass,
            format!("{} is on the card's origin {}", i.url, card.card_origin),
        ),
        (Some(card), Some(i)) => cond(
            ID,
            Fail,
            format!(
                "{} is not on the card's origin {}: the card may describe another backend",
                i.url, card.card_origin
            ),
        ),
    }
}

fn lifecycle_probe(posture: &Posture, input: &DecisionInput) -> Condition {
    const ID: &str = "lifecycle-probe";
    if input.subject.is_none() {
        return cond(
            ID,
            Unknown,
            format!("the callee has no subject for {}", posture.caller_version),
        );
    }
    let Some(probe) = &input.probe else {
        return cond(
            ID,
            Unknown,
            "no probe cycle has finished for this subject yet",
        );
    };
    let remarks = probe.remarks();
    if let Some(why) = &remarks.unexercised {
        return cond(
            ID,
            Unknown,
            format!(
                "probe {} could not exercise the lifecycle: {why}",
                probe.probe_run_id
            ),
        );
    }
    if let Err(what) = &remarks.lifecycle {
        return cond(
            ID,
            Fail,
            format!(
                "probe {} did not observe the full lifecycle: {what}",
                probe.probe_run_id
            ),
        );
    }
    match (posture.dedup, remarks.untimestamped.is_empty()) {
        (_, true) => cond(
            ID,
            Pass,
            format!(
                "probe {} observed submitted → working → terminal with a timestamp on every transition",
                probe.probe_run_id
            ),
        ),
        (Dedup::None, false) => cond(
            ID,
            Pass,
            format!(
                "probe {} observed the full lifecycle; transitions without status.timestamp ({}) \
                 do not matter with dedup=none",
                probe.probe_run_id,
                remarks.untimestamped.join(", ")
            ),
        ),
        (Dedup::Timestamp, false) => cond(
            ID,
            Fail,
            format!(
                "probe {} observed transitions without status.timestamp: {}; a caller that \
                 deduplicates by timestamp cannot rely on them",
                probe.probe_run_id,
                remarks.untimestamped.join(", ")
            ),
        ),
    }
}

fn capability(
    cap: Capability,
    posture: &Posture,
    interface: Option<&OfferedInterface>,
    input: &DecisionInput,
) -> Condition {
    let id = format!("capability:{cap}");
    let Some(interface) = interface else {
        return cond(
            id,
            Unknown,
            format!("no interface offers {}", posture.caller_version),
        );
    };
    // A capability the extended card offers authenticated callers, and the probe judged.
    let extended = input
        .probe
        .as_ref()
        .filter(|p| p.remarks().extended_card.is_some() && p.capabilities.contains_key(&cap));
    if let Some(probe) = extended.filter(|_| !interface.advertised.contains(&cap)) {
        return probed(id, cap, probe);
    }
    if !interface.advertised.contains(&cap) {
        let why = if cap == Capability::StateTransitionHistory && !interface.version.is_pre_1_0() {
            " (A2A v1.0 removed it; only v0.2/v0.3 cards can advertise it)"
        } else {
            ""
        };
        return cond(
            id,
            Fail,
            format!(
                "the card does not advertise {cap} for {}{why}",
                interface.version
            ),
        );
    }
    let Some(probe) = &input.probe else {
        return cond(
            id,
            Unknown,
            format!("{cap} is advertised but no probe has checked it yet"),
        );
    };
    // Advertised since the probe started, in ledger order: the probe says nothing about it.
    let advertised = input.subject.as_ref().and_then(|s| {
        let (since, seq) = *s.advertised.get(&cap)?;
        Some((seq, since))
    });
    if let Some((seq, since)) =
        advertised.filter(|(seq, since)| !probe.start.is_after(*seq, Some(*since)))
    {
        return cond(
            id,
            Unknown,
            format!(
                "{cap} has been advertised since {}{}, after probe {} started; it is unverified until probed again",
                time::format(since),
                seq.map(|s| format!(" (ledger seq {s})"))
                    .unwrap_or_default(),
                probe.probe_run_id
            ),
        );
    }
    probed(id, cap, probe)
}

/// What the probe found of an advertised `cap` it covered (and by which card, when it was
/// the authenticated extended one).
fn probed(id: String, cap: Capability, probe: &ProbeFacts) -> Condition {
    let condition = probed_as_declared(id, cap, probe);
    match &probe.remarks().extended_card {
        Some(sha256) => Condition {
            reason: format!(
                "{}, as the authenticated extended card (sha256 {}) declares it",
                condition.reason,
                &sha256[..16.min(sha256.len())]
            ),
            ..condition
        },
        None => condition,
    }
}

fn probed_as_declared(id: String, cap: Capability, probe: &ProbeFacts) -> Condition {
    let run = probe.probe_run_id;
    match probe.capabilities.get(&cap) {
        Some(CapabilityOutcome::Passed) => cond(id, Pass, format!("probe {run} verified {cap}")),
        Some(CapabilityOutcome::Failed { reason }) => cond(
            id,
            Fail,
            format!("probe {run} found {cap} broken: {reason}"),
        ),
        Some(CapabilityOutcome::NotExercised { reason }) => cond(
            id,
            Unknown,
            format!("probe {run} could not exercise {cap}: {reason}"),
        ),
        Some(CapabilityOutcome::NotAdvertised) | None => {
            cond(id, Unknown, format!("probe {run} did not check {cap}"))
        }
    }
}

fn not_demoted(posture: &Posture, subject: Option<&SubjectFacts>) -> Condition {
    const ID: &str = "not-demoted";
    let Some(subject) = subject else {
        return cond(
            ID,
            Unknown,
            format!("the callee has no subject for {}", posture.caller_version),
        );
    };
    let Some(Demotion { at, classes }) = subject.demotion.as_deref() else {
        return cond(ID, Pass, "the subject has not been demoted");
    };
    let applicable: Vec<&str> = classes
        .iter()
        .filter(|c| !(posture.dedup == Dedup::None && **c == DemotionClass::Timestamp))
        .map(|c| c.as_str())
        .collect();
    let at = time::format(*at);
    if applicable.is_empty() {
        cond(
            ID,
            Pass,
            format!(
                "demoted at {at} for timestamp only, which does not apply to a dedup=none caller"
            ),
        )
    } else {
        cond(
            ID,
            Fail,
            format!(
                "demoted at {at} ({}); only a fresh passing probe re-promotes",
                applicable.join(", ")
            ),
        )
    }
}

#[cfg(test)]
mod tests;
