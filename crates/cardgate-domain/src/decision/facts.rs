//! What decisions read, reduced from the stored records: the newest card snapshot, a subject's
//! folded state and its newest finished probe become one [`DecisionInput`]. Pure, so the
//! in-memory read model and a decision read straight from the store reduce the same way.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use url::Url;

use super::{
    CardFacts, CardTrust, DecisionInput, OfferedInterface, ProbeFacts, ProbeRemarks, SubjectFacts,
};
use crate::capability::{CapabilityMap, CapabilityOutcome};
use crate::card::signature::SignatureVerdict;
use crate::card::{CardSnapshot, origin_text};
use crate::gate::{ProbeStart, Subject};
use crate::ids::ProbeRunId;
use crate::probe::{Judgement, ProbeRun};

/// The part of a judgement decisions read, in the judgement's own JSON shape: stored beside
/// each judgement, it is a few hundred bytes where the judgement is kilobytes, and it reads
/// from either (a whole judgement is a superset of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgementFacts {
    pub verdict: VerdictFacts,
    pub capabilities: CapabilityMap<CapabilityOutcome>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictFacts {
    pub lifecycle: Result<(), String>,
    pub untimestamped: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexercised: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_card: Option<String>,
}

impl From<&Judgement> for JudgementFacts {
    fn from(j: &Judgement) -> Self {
        Self {
            verdict: VerdictFacts {
                lifecycle: j.verdict.lifecycle.clone(),
                untimestamped: j.verdict.untimestamped.clone(),
                unexercised: j.verdict.unexercised.clone(),
                extended_card: j.verdict.extended_card.clone(),
            },
            capabilities: j
                .capabilities
                .iter()
                .map(|(c, o)| (*c, o.clone()))
                .collect(),
        }
    }
}

impl JudgementFacts {
    /// The facts of run `id`, which started at `start`.
    pub fn of_run(self, id: ProbeRunId, start: ProbeStart) -> ProbeFacts {
        // Boxed: exact-sized, and a word smaller each, held per subject in the read model.
        let remarks = ProbeRemarks {
            lifecycle: self.verdict.lifecycle.map_err(String::into_boxed_str),
            untimestamped: self
                .verdict
                .untimestamped
                .into_iter()
                .map(String::into_boxed_str)
                .collect(),
            unexercised: self.verdict.unexercised.map(String::into_boxed_str),
            extended_card: self.verdict.extended_card.map(String::into_boxed_str),
        };
        ProbeFacts::new(id, start, self.capabilities, remarks)
    }
}

/// What the newest snapshot says on its own, before any subject's later fetch failure.
pub fn card_facts(snapshot: &CardSnapshot) -> CardFacts {
    let a = &snapshot.assessment;
    let card_url = Url::parse(&snapshot.url).ok();
    let trust = match (&a.problem, &a.signature) {
        (Some(problem), _) => CardTrust::Untrusted {
            reason: problem.as_str().into(),
        },
        (
            None,
            SignatureVerdict::Verified {
                index,
                kid,
                alg,
                key_source,
            },
        ) => CardTrust::Verified {
            detail: format!("signature {index}, kid `{kid}`, {alg}, key from {key_source}")
                .into_boxed_str(),
        },
        (None, _) => CardTrust::UnsignedAdmitted,
    };
    let interfaces = a
        .card
        .iter()
        .flat_map(|card| {
            card.interfaces.iter().map(|i| OfferedInterface {
                url: i.url.as_str().into(),
                binding: i.binding.as_str().into(),
                version: i.version,
                same_origin: card_url.as_ref().is_some_and(|u| i.same_origin_as(u)),
                advertised: card.advertised_for(i.version).into_iter().collect(),
            })
        })
        .collect();
    CardFacts {
        snapshot_id: snapshot.id,
        card_origin: card_url
            .as_ref()
            .map_or_else(|| snapshot.url.clone(), origin_text)
            .into_boxed_str(),
        trust,
        interfaces,
    }
}

/// What decisions read from a finished run; `None` for a run that has not finished.
pub fn probe_facts(run: &ProbeRun) -> Option<ProbeFacts> {
    let judgement = run.judgement()?;
    let start = run.start()?;
    let start = ProbeStart {
        head_seq: start.seq,
        at: start.at,
    };
    Some(JudgementFacts::from(judgement).of_run(run.id, start))
}

/// One decision's input. A fetch failure recorded on the subject after the newest good
/// snapshot takes precedence over that snapshot's trust.
pub fn input(
    card: Option<&Arc<CardFacts>>,
    subject: Option<&Subject>,
    probe: Option<ProbeFacts>,
) -> DecisionInput {
    let card = card.map(
        |card| match subject.and_then(|s| s.state.card_untrusted.as_ref()) {
            Some(reason) => Arc::new(CardFacts {
                trust: CardTrust::Untrusted {
                    reason: reason.as_str().into(),
                },
                ..CardFacts::clone(card)
            }),
            None => Arc::clone(card),
        },
    );
    DecisionInput {
        card,
        subject: subject.map(|s| SubjectFacts::new(&s.state, s.last_seq, &s.last_hash)),
        probe,
    }
}
