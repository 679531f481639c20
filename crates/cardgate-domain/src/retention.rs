//! What retention may drop. A finished probe run's transcript (its raw exchanges, the bulk of
//! what a run stores) is kept while the run is one of the newest of its subject, and for as
//! long as the ledger cites the run as evidence: a promotion or a demotion it caused. A public
//! card snapshot's raw bytes are kept while the snapshot is one of its callee's newest, and for
//! as long as the ledger cites it as the card a subject started from or whose trust changed.
//! Pure: the store lists candidates and the events, this decides.

use std::collections::BTreeSet;

use serde_json::Value;

use super::ids::{ProbeRunId, SnapshotId};

/// A finished run past its subject's newest, with the ledger events it appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub run: ProbeRunId,
    pub ledger_seqs: Vec<i64>,
}

/// The ledger kinds that cite a run as the evidence for a change of trust.
pub const EVIDENCE_KINDS: [&str; 2] = ["promoted", "demoted"];

/// The runs whose transcripts may go: those that appended none of the `evidence` events (the
/// seqs of promotions and demotions among the candidates' events).
pub fn prunable(candidates: &[Candidate], evidence: &BTreeSet<i64>) -> Vec<ProbeRunId> {
    candidates
        .iter()
        .filter(|c| !c.ledger_seqs.iter().any(|seq| evidence.contains(seq)))
        .map(|c| c.run)
        .collect()
}

/// The span of ledger seqs the candidates appended, to read the evidence among them in one
/// query; `None` when they appended nothing.
pub fn seq_span(candidates: &[Candidate]) -> Option<(i64, i64)> {
    let seqs = candidates
        .iter()
        .flat_map(|c| c.ledger_seqs.iter().copied());
    let (min, max) = seqs.fold((i64::MAX, i64::MIN), |(lo, hi), s| (lo.min(s), hi.max(s)));
    (min <= max).then_some((min, max))
}

/// The ledger kinds that cite a snapshot as evidence: the card a subject started from, and the
/// cards its trust was lost, restored or withdrawn on. Republished cards and capability changes
/// cite their snapshot too, but move no gate: past the newest few, their bytes go, and the
/// `sha256` the event and the snapshot keep still names them.
pub const SNAPSHOT_EVIDENCE_KINDS: [&str; 4] = [
    "version-appeared",
    "version-withdrawn",
    "card-untrusted",
    "card-trust-restored",
];

/// The snapshot an event's `data` cites, if any.
pub fn cited_snapshot(data: &Value) -> Option<SnapshotId> {
    let id: uuid::Uuid = data.get("snapshot_id")?.as_str()?.parse().ok()?;
    Some(id.into())
}

/// The snapshots whose bytes may go: the candidates no evidence event cites.
pub fn prunable_snapshots(
    candidates: &[SnapshotId],
    cited: &BTreeSet<SnapshotId>,
) -> Vec<SnapshotId> {
    candidates
        .iter()
        .filter(|s| !cited.contains(s))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_cited_as_evidence_keeps_its_bytes() {
        let (a, b, c) = (SnapshotId::new(), SnapshotId::new(), SnapshotId::new());
        let cited: BTreeSet<SnapshotId> = [
            serde_json::json!({"snapshot_id": a.to_string(), "advertised": []}),
            serde_json::json!({"snapshot_id": null, "reason": "fetch failed"}),
            serde_json::json!({"probe_run_id": ProbeRunId::new().to_string()}),
            serde_json::json!({"snapshot_id": "not an id"}),
        ]
        .iter()
        .filter_map(cited_snapshot)
        .collect();
        assert_eq!(cited, BTreeSet::from([a]));
        assert_eq!(prunable_snapshots(&[a, b, c], &cited), vec![b, c]);
    }

    #[test]
    fn a_run_cited_as_evidence_keeps_its_transcript() {
        let (a, b, c) = (ProbeRunId::new(), ProbeRunId::new(), ProbeRunId::new());
        let candidates = [
            // Finished, promoted at 11.
            Candidate {
                run: a,
                ledger_seqs: vec![10, 11],
            },
            // Finished, nothing else.
            Candidate {
                run: b,
                ledger_seqs: vec![20],
            },
            // Finished, demoted at 32.
            Candidate {
                run: c,
                ledger_seqs: vec![30, 31, 32],
            },
        ];
        let evidence = BTreeSet::from([11, 32]);
        assert_eq!(prunable(&candidates, &evidence), vec![b]);
        assert_eq!(seq_span(&candidates), Some((10, 32)));
        assert_eq!(seq_span(&[]), None);
        assert_eq!(
            seq_span(&[Candidate {
                run: a,
                ledger_seqs: vec![]
            }]),
            None
        );
    }
}
