//! Answers already rendered: a bounded cache of what a decision became (the HTTP layer's
//! body and tag), per callee and caller posture, each valid exactly while the model still
//! holds the callee's inputs it was rendered from.
//!
//! A decision is a pure function of the posture and the callee's inputs, and the model never
//! changes inputs in place: a change to a callee replaces its whole `Arc<CalleeInputs>`. So an
//! entry keeps a `Weak` to the inputs it came from, and is current when that is still the
//! callee's `Arc`. The `Weak` keeps the old allocation's address from being reused, so
//! comparing addresses cannot mistake new inputs for old ones; no version numbers are kept
//! per callee, and nothing has to be told to invalidate.
//!
//! Callers ask the same question before every task, so a popular callee's answer is rendered
//! once per change instead of once per request (BENCHMARKS.md, issue 30).

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};

use super::{CalleeInputs, read, write};
use crate::domain::decision::Posture;
use crate::domain::decision::record::AskKey;
use crate::domain::ids::CalleeId;
use crate::domain::time::Timestamp;

/// What an answer is the answer to: a callee, a posture, and what was asked of the record.
type Question = (CalleeId, Posture, AskKey);

/// Entries kept by default: a popular callee's few postures, for some thousands of callees.
/// Each is a rendered answer (about 1.5 KB for `/v1/trust`), so a full cache is a few MB.
pub const DEFAULT_CAPACITY: usize = 4_096;

/// Rendered answers of type `T` (cheap to clone: shared bytes).
pub struct Answers<T> {
    entries: RwLock<HashMap<Question, Entry<T>>>,
    capacity: usize,
}

struct Entry<T> {
    from: Weak<CalleeInputs>,
    /// An answer that asked for freshness stands only until then.
    until: Option<Timestamp>,
    answer: T,
}

impl<T: Clone> Answers<T> {
    /// A cache of at most `capacity` answers; 0 keeps none (every answer is rendered).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: RwLock::default(),
            capacity,
        }
    }

    /// The answer rendered from `inputs`, if there is one.
    pub(super) fn get(
        &self,
        (callee, posture, ask): (CalleeId, &Posture, AskKey),
        inputs: &Arc<CalleeInputs>,
        now: Timestamp,
    ) -> Option<T> {
        let entries = read(&self.entries);
        let entry = entries.get(&(callee, *posture, ask))?;
        (std::ptr::eq(entry.from.as_ptr(), Arc::as_ptr(inputs))
            && entry.until.is_none_or(|until| now < until))
        .then(|| entry.answer.clone())
    }

    /// Keeps `answer`, rendered from `inputs`. When full, answers whose inputs are gone
    /// leave first, then an arbitrary half: a bound, not a ranking (a popular answer is
    /// rendered again on its next request).
    pub(super) fn put(
        &self,
        (callee, posture, ask): (CalleeId, &Posture, AskKey),
        inputs: &Arc<CalleeInputs>,
        until: Option<Timestamp>,
        answer: T,
    ) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = write(&self.entries);
        if entries.len() >= self.capacity {
            entries.retain(|_, e| e.from.strong_count() > 0);
            if entries.len() >= self.capacity {
                let mut keep = false;
                entries.retain(|_, _| {
                    keep = !keep;
                    keep
                });
            }
        }
        entries.insert(
            (callee, *posture, ask),
            Entry {
                from: Arc::downgrade(inputs),
                until,
                answer,
            },
        );
    }

    /// How many answers are held.
    pub fn len(&self) -> usize {
        read(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::decision::Dedup;
    use crate::domain::version::ProtocolVersion;

    const NONE: AskKey = (None, None, None);

    fn now() -> Timestamp {
        crate::domain::time::now()
    }

    fn inputs() -> Arc<CalleeInputs> {
        Arc::new(CalleeInputs {
            card: None,
            subjects: Box::new([]),
        })
    }

    fn posture(version: &str) -> Posture {
        Posture {
            caller_version: ProtocolVersion::parse_exact(version).unwrap(),
            dedup: Dedup::Timestamp,
            requires: Default::default(),
        }
    }

    #[test]
    fn an_answer_stands_only_while_its_inputs_are_the_callees() {
        let answers = Answers::new(16);
        let callee = CalleeId(uuid::Uuid::now_v7());
        let (first, later) = (inputs(), inputs());
        assert_eq!(first, later, "equal content, yet another rendering");
        answers.put(
            (callee, &posture("1.0"), NONE),
            &first,
            None,
            "rendered from first",
        );
        assert_eq!(
            answers.get((callee, &posture("1.0"), NONE), &first, now()),
            Some("rendered from first")
        );
        assert_eq!(
            answers.get((callee, &posture("1.1"), NONE), &first, now()),
            None
        );
        assert_eq!(
            answers.get((callee, &posture("1.0"), NONE), &later, now()),
            None
        );
        let other = CalleeId(uuid::Uuid::now_v7());
        assert_eq!(
            answers.get((other, &posture("1.0"), NONE), &first, now()),
            None
        );

        // The old inputs dropped and new ones made: the entry's `Weak` holds the allocation,
        // so the new inputs cannot take its address and pass for it.
        let address = Arc::as_ptr(&first);
        drop(first);
        let replaced: Vec<_> = (0..64).map(|_| inputs()).collect();
        assert!(replaced.iter().all(|i| Arc::as_ptr(i) != address));
        for i in &replaced {
            assert_eq!(answers.get((callee, &posture("1.0"), NONE), i, now()), None);
        }
    }

    #[test]
    fn an_answer_asking_for_freshness_stands_until_its_moment() {
        let answers = Answers::new(16);
        let callee = CalleeId(uuid::Uuid::now_v7());
        let kept = inputs();
        let fresh = (Some(3), None, Some(60));
        let until = now() + chrono::Duration::seconds(30);
        answers.put(
            (callee, &posture("1.0"), fresh),
            &kept,
            Some(until),
            "fresh",
        );
        let before = until - chrono::Duration::seconds(1);
        assert_eq!(
            answers.get((callee, &posture("1.0"), fresh), &kept, before),
            Some("fresh")
        );
        assert_eq!(
            answers.get((callee, &posture("1.0"), fresh), &kept, until),
            None
        );
        // Another ask is another question.
        assert_eq!(
            answers.get((callee, &posture("1.0"), NONE), &kept, before),
            None
        );
    }

    #[test]
    fn the_cache_stays_within_its_capacity_and_a_zero_capacity_keeps_nothing() {
        let answers = Answers::new(8);
        let kept = inputs();
        let callees: Vec<_> = (0..100).map(|_| CalleeId(uuid::Uuid::now_v7())).collect();
        for (n, callee) in callees.iter().enumerate() {
            answers.put((*callee, &posture("1.0"), NONE), &kept, None, n);
            assert!(answers.len() <= 8, "{} after {n}", answers.len());
        }
        let last = callees.last().unwrap();
        assert_eq!(
            answers.get((*last, &posture("1.0"), NONE), &kept, now()),
            Some(99)
        );

        // Answers whose inputs are gone leave first.
        let gone = inputs();
        let fresh = Answers::new(2);
        fresh.put((callees[0], &posture("1.0"), NONE), &gone, None, 0);
        fresh.put((callees[1], &posture("1.0"), NONE), &kept, None, 1);
        drop(gone);
        fresh.put((callees[2], &posture("1.0"), NONE), &kept, None, 2);
        assert_eq!(
            fresh.get((callees[1], &posture("1.0"), NONE), &kept, now()),
            Some(1)
        );
        assert_eq!(
            fresh.get((callees[2], &posture("1.0"), NONE), &kept, now()),
            Some(2)
        );

        let none = Answers::new(0);
        none.put((callees[0], &posture("1.0"), NONE), &kept, None, 0);
        assert!(none.is_empty());
    }
}
