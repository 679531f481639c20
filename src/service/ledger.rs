//! Reading and verifying the ledger.

use std::collections::HashMap;

use serde::Serialize;

use super::ServiceError;
use crate::domain::ids::CalleeId;
use crate::domain::ledger::EventRecord;
use crate::domain::ledger::{BrokenLink, ChainVerifier};
use crate::domain::merkle::{self, Frontier, Hash, Plan};
use crate::domain::version::ProtocolVersion;
use crate::storage::{CheckpointRecord, Store};

/// The outcome of walking the whole chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The chain verified, and so did everything below.
    pub ok: bool,
    /// Events whose links verified, from seq 1.
    pub checked: u64,
    /// The last event that verified (0 when none).
    pub head_seq: i64,
    pub head_hash: String,
    pub first_broken: Option<BrokenLink>,
    /// The Merkle tree recomputed from the chain against the stored tree.
    pub merkle: MerkleCheck,
    /// Recorded checkpoints whose root was recomputed from the chain.
    pub checkpoints_checked: u64,
    /// Subjects whose stored head (`last_seq`, `last_hash`) was compared with the chain.
    pub subjects_checked: u64,
    /// Every disagreement found beyond the chain itself, in words.
    pub problems: Vec<String>,
}

/// The tree recomputed from the verified events, and whether the stored tree agrees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MerkleCheck {
    pub tree_size: u64,
    pub root_hash: Hash,
    pub stored_tree_size: u64,
    pub matches: bool,
}

/// Rows read per round trip while verifying: memory stays bounded however long the ledger is
/// (but for one head per subject).
const VERIFY_PAGE: u32 = 1000;

/// Walks the chain from the first event and reports the first broken link, if any; rebuilds
/// the Merkle tree as it goes and compares it with the stored tree and every recorded
/// checkpoint; then compares each subject's stored head with its newest event.
///
/// It judges one state while writers append: the walk stops at the head the stored tree had
/// when it began (`bound`, reported as `head_seq`), and what moved on meanwhile (a checkpoint
/// recorded, a subject appended to after `bound`) is not compared with a chain that does not
/// reach it. What no later append explains (past the tree's size at the end) still is.
pub async fn verify(store: &Store) -> Result<VerifyReport, ServiceError> {
    let bound = store.tree_size().await?;
    let mut verifier = ChainVerifier::default();
    let mut frontier = Frontier::default();
    let mut heads: HashMap<(CalleeId, String), (i64, String)> = HashMap::new();
    let mut problems = Vec::new();
    let mut checkpoints = Checkpoints::new(store);
    let mut after = 0;
    let first_broken = 'walk: loop {
        let page = store.ledger(None, after, VERIFY_PAGE).await?;
        let Some(last) = page.last() else { break None };
        after = last.seq;
        for event in &page {
            if frontier.size() == bound {
                break 'walk None;
            }
            if let Err(broken) = verifier.check(event) {
                break 'walk Some(broken);
            }
            let leaf =
                merkle::event_leaf(&event.hash).map_err(|e| ServiceError::Internal(e.into()))?;
            frontier.push(leaf);
            checkpoints.check(&frontier, &mut problems).await?;
            heads.insert(
                (event.callee_id, event.protocol_version.clone()),
                (event.seq, event.hash.clone()),
            );
        }
    };
    let checkpoints_checked = checkpoints.checked;
    let beyond = checkpoints.next().await?.map(|cp| cp.tree_size);

    // The stored tree as it stood at `bound` (its nodes never change once written).
    let stored_root = if bound == frontier.size() {
        let plan = Plan::root(bound);
        let ids: Vec<_> = plan.nodes().into_iter().collect();
        plan.resolve(&store.merkle_nodes(&ids).await?)
            .ok()
            .map(|r| r[0])
    } else {
        None
    };
    let matches = stored_root == Some(frontier.root());
    if !matches {
        problems.push(format!(
            "the stored Merkle tree ({bound} leaves) does not match the tree of the \
             verified chain ({} leaves)",
            frontier.size()
        ));
    }

    let (head_seq, head_hash) = verifier.head();
    let (subjects_checked, moved_on) =
        check_subjects(store, &heads, head_seq, &mut problems).await?;
    // Read last: every checkpoint and subject head read above was written at or below it, so
    // what lies past it was not written by an append.
    let now = store.tree_size().await?;
    if let Some(size) = beyond.filter(|&size| size <= bound || size > now) {
        problems.push(format!(
            "a checkpoint was recorded at tree size {size} but the verified ledger has only {} \
             events: its tail is missing",
            frontier.size()
        ));
    }
    for (callee, version, last_seq) in moved_on {
        if u64::try_from(last_seq).is_ok_and(|seq| seq > now) {
            problems.push(format!(
                "subject {callee} {version} says its newest event is seq {last_seq}, past the \
                 ledger's {now} events"
            ));
        }
    }
    Ok(VerifyReport {
        ok: first_broken.is_none() && problems.is_empty(),
        checked: verifier.checked(),
        head_seq,
        head_hash: head_hash.to_string(),
        first_broken,
        merkle: MerkleCheck {
            tree_size: frontier.size(),
            root_hash: frontier.root(),
            stored_tree_size: bound,
            matches,
        },
        checkpoints_checked,
        subjects_checked,
        problems,
    })
}

/// Recorded checkpoints, read a page at a time as the walk reaches their sizes.
struct Checkpoints<'a> {
    store: &'a Store,
    pending: std::collections::VecDeque<CheckpointRecord>,
    read_after: u64,
    exhausted: bool,
    checked: u64,
}

impl<'a> Checkpoints<'a> {
    fn new(store: &'a Store) -> Self {
        Self {
            store,
            pending: Default::default(),
            read_after: 0,
            exhausted: false,
            checked: 0,
        }
    }

    async fn next(&mut self) -> Result<Option<&CheckpointRecord>, ServiceError> {
        if self.pending.is_empty() && !self.exhausted {
            let page = self.store.checkpoints(self.read_after, VERIFY_PAGE).await?;
            self.exhausted = page.len() < VERIFY_PAGE as usize;
            if let Some(last) = page.last() {
                self.read_after = last.tree_size;
            }
            self.pending.extend(page);
        }
        Ok(self.pending.front())
    }

    /// Compares the checkpoint at the frontier's size, if one was recorded.
    async fn check(
        &mut self,
        frontier: &Frontier,
        problems: &mut Vec<String>,
    ) -> Result<(), ServiceError> {
        let size = frontier.size();
        while let Some(cp) = self.next().await? {
            if cp.tree_size > size {
                break;
            }
            if cp.tree_size == size && cp.root_hash != frontier.root() {
                problems.push(format!(
                    "checkpoint at tree size {size} (issued {}) does not match the ledger: \
                     the first {size} events were changed since",
                    crate::domain::time::format(cp.issued_at)
                ));
            }
            self.checked += 1;
            self.pending.pop_front();
        }
        Ok(())
    }
}

/// Compares each stored subject's head with its newest event in the chain verified up to
/// `head_seq`, a page of callees at a time. A subject whose head lies past `head_seq` may have
/// been appended to meanwhile: it is returned, to be judged against the ledger's size once
/// every head has been read.
async fn check_subjects(
    store: &Store,
    heads: &HashMap<(CalleeId, String), (i64, String)>,
    head_seq: i64,
    problems: &mut Vec<String>,
) -> Result<(u64, Vec<(CalleeId, String, i64)>), ServiceError> {
    let mut checked = 0;
    let mut moved_on = Vec::new();
    let mut after = None;
    loop {
        let ids = store.callee_ids(after, VERIFY_PAGE).await?;
        let (Some(&from), Some(&to)) = (ids.first(), ids.last()) else {
            break;
        };
        after = Some(to);
        for subject in store.subjects_between(from, to).await? {
            let version = subject.protocol_version.to_string();
            if subject.last_seq > head_seq {
                moved_on.push((subject.callee_id, version, subject.last_seq));
                continue;
            }
            checked += 1;
            match heads.get(&(subject.callee_id, version.clone())) {
                Some((seq, hash)) if *seq == subject.last_seq && *hash == subject.last_hash => {}
                Some((seq, _)) => problems.push(format!(
                    "subject {} {version} says its newest event is seq {}, the chain says {seq}",
                    subject.callee_id, subject.last_seq
                )),
                None => problems.push(format!(
                    "subject {} {version} has no event in the verified chain",
                    subject.callee_id
                )),
            }
        }
    }
    Ok((checked, moved_on))
}

/// Events in ledger order after `after`, of one callee or of all.
pub async fn page(
    store: &Store,
    callee: Option<CalleeId>,
    after: i64,
    limit: u32,
) -> Result<Vec<EventRecord>, ServiceError> {
    Ok(store.ledger(callee, after, limit).await?)
}

/// One subject's events before `before` (or from the newest), newest first: its timeline.
pub async fn timeline(
    store: &Store,
    callee: CalleeId,
    version: ProtocolVersion,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<EventRecord>, ServiceError> {
    Ok(store
        .subject_events_before(callee, version, before.unwrap_or(i64::MAX), limit)
        .await?)
}

/// The events at `seqs` (a probe run's, say), in that order; seqs of other callees are skipped.
pub async fn events_at(
    store: &Store,
    callee: CalleeId,
    seqs: &[i64],
) -> Result<Vec<EventRecord>, ServiceError> {
    let mut events = Vec::with_capacity(seqs.len());
    for seq in seqs {
        events.extend(store.ledger(Some(callee), seq - 1, 1).await?);
    }
    Ok(events)
}
