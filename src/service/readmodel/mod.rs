//! The read model: everything a decision and an API-key check need, held in memory, so that
//! answering a caller touches no database, whether it names the callee by id or by card URL.
//!
//! Built at start from the store, then kept current by the change feed: every write a
//! decision depends on records a change row in its own transaction (`storage::changes`).
//! [`ReadModel::sync`] applies the rows after the last one applied, reloading each callee they
//! name. This process calls it right after each of its own writes (a caller that wrote reads
//! its write back from the same replica) and whenever the feed signals a change made elsewhere
//! (another replica, the CLI). Rows are applied in commit order, so the model always reflects
//! a prefix of the store's history, and it knows the ledger seq that prefix ends at.
//!
//! A service starts answering before the callees are loaded ([`ReadModel::start`]): keys
//! first (so authentication works), then the callees in pages in the background. Until they
//! are in, decisions answer 503 with `Retry-After` and `/readyz` says the model is loading;
//! a million subjects take some 15 s.

mod answers;

pub use answers::{Answers, DEFAULT_CAPACITY as DEFAULT_ANSWERS};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{Mutex, watch};

use crate::domain::apikey::ApiKey;
use crate::domain::callee::CardUrl;
use crate::domain::card::CardSnapshot;
use crate::domain::decision::record::RecordAsk;
use crate::domain::decision::{self, CardFacts, Decision, DecisionInput, Posture, ProbeFacts};
use crate::domain::gate::Subject;
use crate::domain::ids::CalleeId;
use crate::domain::probe::track::{self, RunRecord, TrackRecord};
use crate::domain::time::{Clock, SystemClock, Timestamp};
use crate::domain::version::ProtocolVersion;
use crate::storage::{Changed, FeedHead, Store, StoreError};

/// Callees loaded per round of the bulk load (four queries each).
const LOAD_PAGE: u32 = 2_000;
/// Other spellings of card URLs remembered once resolved (about 40 B each).
const MAX_ALIASES: usize = 4_096;
/// Change rows applied per round of a catch-up.
const SYNC_PAGE: u32 = 1_000;

/// The in-memory decisions and keys of this process. Cheap to clone (shared).
#[derive(Clone)]
pub struct ReadModel {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    callees: RwLock<HashMap<CalleeId, Arc<CalleeInputs>>>,
    /// Callees by their normalized card URL (`CardUrl`'s form, as registration stores it), so
    /// a caller that knows only the URL is answered from memory too. A callee's URL never
    /// changes and callees are never deleted: entries are only added. Keyed by the URL's
    /// digest ([`url_key`]), not its text: no allocation per callee.
    card_urls: RwLock<HashMap<UrlKey, CalleeId>>,
    /// Other spellings of registered card URLs that resolved to a callee (at most
    /// [`MAX_ALIASES`]). Safe to keep: a URL never changes and a callee is never deleted.
    aliases: RwLock<HashMap<UrlKey, CalleeId>>,
    /// Live keys by the hash of their secret.
    keys: RwLock<HashMap<String, Arc<ApiKey>>>,
    /// The last change row applied and the ledger seq everything applied reflects.
    applied: watch::Sender<FeedHead>,
    /// One catch-up at a time: rows are applied in order, and a reload that read older data
    /// never overwrites one that read newer.
    syncing: Arc<Mutex<()>>,
    /// Whether the callees are loaded (until then decisions are not answered).
    loaded: AtomicBool,
    /// The window of runs each subject's track record folds, back from `clock`'s now when the
    /// subject is (re)loaded.
    track: TrackWindow,
}

/// The window a track record covers, and the clock it ends at.
#[derive(Clone)]
pub struct TrackWindow {
    pub days: u32,
    pub clock: Arc<dyn Clock>,
}

impl TrackWindow {
    fn since(&self) -> Timestamp {
        self.clock.now() - chrono::Duration::days(i64::from(self.days))
    }
}

impl Default for TrackWindow {
    fn default() -> Self {
        Self {
            days: track::DEFAULT_WINDOW_DAYS,
            clock: Arc::new(SystemClock),
        }
    }
}

/// One callee's decision inputs, ready to evaluate, per subject; and its card facts, for a
/// version it has no subject for. A callee has a handful of versions at most, so they are a
/// boxed slice searched in order: a hash map's smallest table holds four entries, which cost
/// about 1 KB per subject at a million subjects (BENCHMARKS.md, issue 30).
#[derive(Debug, Clone, PartialEq)]
struct CalleeInputs {
    card: Option<Arc<CardFacts>>,
    subjects: Box<[(ProtocolVersion, DecisionInput, TrackRecord)]>,
}

impl CalleeInputs {
    /// The subject for `version`: its decision inputs and track record.
    fn subject(&self, version: ProtocolVersion) -> Option<(&DecisionInput, &TrackRecord)> {
        self.subjects
            .iter()
            .find(|(v, ..)| *v == version)
            .map(|(_, input, record)| (input, record))
    }

    fn decide(&self, posture: &Posture) -> Decision {
        match self.subject(posture.caller_version) {
            Some((input, _)) => decision::evaluate(posture, input),
            // No subject for the caller's version: what the card alone says.
            None => decision::evaluate(posture, &decision::input(self.card.as_ref(), None, None)),
        }
    }

    /// [`Self::decide`] with the conditions `ask` names judged at `now`, and the subject's
    /// track record they were judged on.
    fn evaluate(
        &self,
        posture: &Posture,
        ask: &RecordAsk,
        now: Timestamp,
    ) -> (Decision, Option<&TrackRecord>) {
        let record = self
            .subject(posture.caller_version)
            .map(|(_, record)| record);
        let decision = decision::record::apply(self.decide(posture), record, ask, now);
        (decision, record)
    }

    fn build(
        snapshot: Option<&CardSnapshot>,
        subjects: Vec<Subject>,
        mut probes: HashMap<ProtocolVersion, ProbeFacts>,
        mut records: HashMap<ProtocolVersion, TrackRecord>,
    ) -> Self {
        let card: Option<Arc<CardFacts>> = snapshot.map(|s| Arc::new(decision::card_facts(s)));
        let mut subjects: Vec<_> = subjects
            .into_iter()
            .map(|subject| {
                let version = subject.protocol_version;
                let probe = probes.remove(&version);
                let input = decision::input(card.as_ref(), Some(&subject), probe);
                (version, input, records.remove(&version).unwrap_or_default())
            })
            .collect();
        // One order whichever way the store listed them, so that equal models compare equal.
        subjects.sort_by_key(|(version, ..)| *version);
        Self {
            card,
            subjects: subjects.into_boxed_slice(),
        }
    }
}

/// A card URL as the model keys it: the first 128 bits of its SHA-256. Two registered URLs
/// sharing one would take some 2^64 attempts to find, both the finder's own; matching
/// somebody else's URL, 2^128.
type UrlKey = [u8; 16];

fn url_key(url: &str) -> UrlKey {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(url.as_bytes());
    let mut key = UrlKey::default();
    key.copy_from_slice(&digest[..16]);
    key
}

/// How a ledger seq stands with the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reflection {
    Reflected,
    /// The ledger had no such seq when the model caught up; `head` is where it ended.
    Ahead {
        head: i64,
    },
    /// The model could not catch up in time (the database is slow or unreachable).
    Behind,
}

/// What the model holds, for `/v1/status` and the start-up log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelStats {
    pub callees: usize,
    pub subjects: usize,
    pub live_keys: usize,
    pub applied: FeedHead,
}

impl ReadModel {
    fn empty(store: Store, track: TrackWindow) -> Self {
        Self {
            inner: Arc::new(Inner {
                track,
                store,
                callees: RwLock::default(),
                card_urls: RwLock::default(),
                aliases: RwLock::default(),
                keys: RwLock::default(),
                applied: watch::Sender::new(FeedHead::default()),
                syncing: Arc::new(Mutex::new(())),
                loaded: AtomicBool::new(false),
            }),
        }
    }

    /// Loads everything from the store before returning.
    pub async fn load(store: Store, track: TrackWindow) -> Result<Self, StoreError> {
        let model = Self::empty(store, track);
        {
            let _one_at_a_time = model.inner.syncing.lock().await;
            model.reload_all().await?;
        }
        model.inner.loaded.store(true, Ordering::Release);
        Ok(model)
    }

    /// Loads the keys now and the callees in the background, so that a service can listen at
    /// once; [`Self::is_loaded`] says when they are in. A load the database interrupts is
    /// started again after a pause.
    pub async fn start(store: Store, track: TrackWindow) -> Result<Self, StoreError> {
        let model = Self::empty(store, track);
        // Held from here until the callees are in: a catch-up waits for the load, which reads
        // the feed head first, so nothing committed meanwhile is missed.
        let syncing = model.inner.syncing.clone().lock_owned().await;
        model.reload_keys().await?;
        let loading = model.clone();
        tokio::spawn(async move {
            let _one_at_a_time = syncing;
            let started = std::time::Instant::now();
            while let Err(e) = loading.reload_all().await {
                tracing::warn!(error = %e, "loading the read model failed; trying again in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            loading.inner.loaded.store(true, Ordering::Release);
            let loaded = loading.stats();
            tracing::info!(
                callees = loaded.callees,
                subjects = loaded.subjects,
                keys = loaded.live_keys,
                ledger_seq = loaded.applied.ledger_seq,
                millis = started.elapsed().as_millis(),
                "read model loaded"
            );
            // What was committed while the load ran.
            if let Err(e) = loading.apply_changes().await {
                tracing::warn!(error = %e, "the read model could not catch up; it will on the next change");
            }
        });
        Ok(model)
    }

    /// The subject's track record as of its last (re)load, if the callee has that subject.
    pub fn track_record(&self, callee: CalleeId, version: ProtocolVersion) -> Option<TrackRecord> {
        let inputs = self.inputs(callee)?;
        inputs.subject(version).map(|(_, record)| *record)
    }

    /// How many subjects are in each track-record class.
    pub fn classes(&self) -> [(track::Class, usize); 4] {
        let mut counts = track::Class::ALL.map(|c| (c, 0));
        for inputs in read(&self.inner.callees).values() {
            for (.., record) in inputs.subjects.iter() {
                if let Some(slot) = counts.iter_mut().find(|(c, _)| *c == record.class) {
                    slot.1 += 1;
                }
            }
        }
        counts
    }

    /// Folds again the track records a run has aged out of since they were folded (a record is
    /// otherwise folded only when its subject changes), one callee at a time, so that catch-ups
    /// and `min_seq` waits are not held up by a long sweep. Returns how many callees it reloaded.
    pub async fn refold_aged(&self) -> Result<usize, StoreError> {
        if !self.is_loaded() {
            return Ok(0);
        }
        let since = self.inner.track.since();
        let aged: Vec<CalleeId> = read(&self.inner.callees)
            .iter()
            .filter(|(_, inputs)| inputs.subjects.iter().any(|(.., r)| r.aged(since)))
            .map(|(id, _)| *id)
            .collect();
        for &id in &aged {
            let _one_at_a_time = self.inner.syncing.lock().await;
            self.reload_callee(id).await?;
        }
        Ok(aged.len())
    }

    /// Whether the callees are loaded: until then there is no decision to give.
    pub fn is_loaded(&self) -> bool {
        self.inner.loaded.load(Ordering::Acquire)
    }

    /// The decision for `posture` about `callee`, or `None` if no such callee is known.
    pub fn decide(&self, callee: CalleeId, posture: &Posture) -> Option<Decision> {
        let inputs = self.inputs(callee)?;
        Some(inputs.decide(posture))
    }

    /// The decision for `posture` about `callee` as `render` makes it, from `answers` while
    /// the callee's inputs are the ones it was rendered from; `None` if no such callee is
    /// known. A failed rendering is returned, not kept.
    pub fn answer<T: Clone, E>(
        &self,
        answers: &Answers<T>,
        (callee, posture, ask): (CalleeId, &Posture, &RecordAsk),
        now: Timestamp,
        render: impl FnOnce(Decision, Option<&TrackRecord>) -> Result<T, E>,
    ) -> Option<Result<T, E>> {
        let inputs = self.inputs(callee)?;
        let question = (callee, posture, ask.key());
        if let Some(answer) = answers.get(question, &inputs, now) {
            return Some(Ok(answer));
        }
        let (decision, record) = inputs.evaluate(posture, ask, now);
        let answer = render(decision, record);
        if let Ok(answer) = &answer {
            let until = decision::record::valid_until(record, ask, now);
            answers.put(question, &inputs, until, answer.clone());
        }
        Some(answer)
    }

    /// The decision for `posture` about `callee` with the conditions `ask` names judged at
    /// `now`, evaluated afresh, and the subject's track record; `None` if no such callee is
    /// known.
    pub fn evaluate(
        &self,
        (callee, posture, ask): (CalleeId, &Posture, &RecordAsk),
        now: Timestamp,
    ) -> Option<(Decision, Option<TrackRecord>)> {
        let inputs = self.inputs(callee)?;
        let (decision, record) = inputs.evaluate(posture, ask, now);
        Some((decision, record.copied()))
    }

    fn inputs(&self, callee: CalleeId) -> Option<Arc<CalleeInputs>> {
        read(&self.inner.callees).get(&callee).cloned()
    }

    /// The callee registered with `card_url` (normalized as at registration), if this model
    /// knows it.
    ///
    /// A caller usually sends the URL as registered, already normalized, so that text is
    /// looked up as it is first: normalizing is idempotent, so a hit is the callee the
    /// normalized form would find, without parsing a URL per request.
    pub fn callee_by_card_url(&self, card_url: &str) -> Option<CalleeId> {
        let key = url_key(card_url);
        if let Some(id) = read(&self.inner.card_urls).get(&key) {
            return Some(*id);
        }
        // Another spelling of a registered URL (an origin, a legacy path) resolved before:
        // found without parsing and normalizing it again on every request.
        if let Some(id) = read(&self.inner.aliases).get(&key) {
            return Some(*id);
        }
        let normalized = CardUrl::parse(card_url).ok()?;
        let found = {
            let card_urls = read(&self.inner.card_urls);
            std::iter::once(normalized.as_str().to_string())
                .chain(normalized.equivalents())
                .find_map(|spelling| card_urls.get(&url_key(&spelling)).copied())
        }?;
        // Every spelling that resolves is kept, up to a bound: callers could make up endless
        // spellings of one URL, and the bound keeps that from growing the model.
        let mut aliases = write(&self.inner.aliases);
        if aliases.len() >= MAX_ALIASES {
            aliases.clear();
        }
        aliases.insert(key, found);
        Some(found)
    }

    /// The live key whose secret hashes to `key_hash`.
    pub fn live_key(&self, key_hash: &str) -> Option<Arc<ApiKey>> {
        read(&self.inner.keys).get(key_hash).cloned()
    }

    /// Changes to where the model stands: wakes whoever follows the ledger live.
    pub fn subscribe(&self) -> watch::Receiver<FeedHead> {
        self.inner.applied.subscribe()
    }

    /// Where the model stands in the feed and the ledger.
    pub fn applied(&self) -> FeedHead {
        *self.inner.applied.borrow()
    }

    pub fn stats(&self) -> ModelStats {
        let callees = read(&self.inner.callees);
        ModelStats {
            callees: callees.len(),
            subjects: callees.values().map(|c| c.subjects.len()).sum(),
            live_keys: read(&self.inner.keys).len(),
            applied: self.applied(),
        }
    }

    /// Whether the model reflects ledger seq `seq`. If not yet, it catches up at once (rather
    /// than wait for the feed's signal), taking at most `within`.
    pub async fn reflect(&self, seq: i64, within: Duration) -> Reflection {
        if !self.is_loaded() {
            return Reflection::Behind;
        }
        if self.applied().ledger_seq >= seq {
            return Reflection::Reflected;
        }
        let caught_up = tokio::time::timeout(within, async {
            let _one_at_a_time = self.inner.syncing.lock().await;
            self.apply_changes().await
        })
        .await;
        match caught_up {
            Ok(Ok(())) => {
                let head = self.applied().ledger_seq;
                // Every committed ledger event came with a change row this catch-up applied:
                // a seq still ahead was not in the ledger when it looked.
                if head >= seq {
                    Reflection::Reflected
                } else {
                    Reflection::Ahead { head }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "catching up the read model");
                Reflection::Behind
            }
            Err(_) => Reflection::Behind,
        }
    }

    /// Applies every change committed since the last one applied. Called after each write of
    /// this process, and on each signal of the change feed. A failure (the database went away)
    /// is logged: the write it follows has committed, and the next signal catches up.
    pub async fn sync(&self) {
        // While the load runs, a write must not wait for it: the load catches up when done.
        if !self.is_loaded() {
            return;
        }
        let _one_at_a_time = self.inner.syncing.lock().await;
        if let Err(e) = self.apply_changes().await {
            tracing::warn!(error = %e, "the read model could not catch up; it will on the next change");
        }
    }

    /// Applies change rows in order until none is left. Holds `syncing`.
    async fn apply_changes(&self) -> Result<(), StoreError> {
        loop {
            let applied = self.applied();
            let changes = self
                .inner
                .store
                .changes_after(applied.change_seq, SYNC_PAGE)
                .await?;
            let (Some(first), Some(last)) = (changes.first(), changes.last()) else {
                return Ok(());
            };
            if first.seq > applied.change_seq + 1 {
                // Rows this model never applied are gone (pruned while it was cut off) or were
                // rolled back; it cannot tell which, so it starts over from the store.
                tracing::info!(
                    applied = applied.change_seq,
                    next = first.seq,
                    "gap in the change feed; reloading the read model"
                );
                return self.reload_all().await;
            }
            let mut callees: Vec<CalleeId> = Vec::new();
            let mut keys = false;
            for change in &changes {
                match change.what {
                    Changed::Callee(id) if !callees.contains(&id) => callees.push(id),
                    Changed::Callee(_) => {}
                    Changed::Keys => keys = true,
                }
            }
            for id in callees {
                self.reload_callee(id).await?;
            }
            if keys {
                self.reload_keys().await?;
            }
            let ledger_seq = changes
                .iter()
                .map(|c| c.ledger_head)
                .fold(applied.ledger_seq, i64::max);
            self.inner.applied.send_replace(FeedHead {
                change_seq: last.seq,
                ledger_seq,
            });
        }
    }

    /// Replaces everything with what the store holds now. Holds `syncing`.
    async fn reload_all(&self) -> Result<(), StoreError> {
        let store = &self.inner.store;
        // Read first: whatever loads next is at least this new, and every later change is
        // applied on top by the next catch-up.
        let head = store.feed_head().await?;
        let mut fresh: HashMap<CalleeId, Arc<CalleeInputs>> = HashMap::new();
        let mut urls: HashMap<UrlKey, CalleeId> = HashMap::new();
        let mut after = None;
        loop {
            let ids = store.callee_ids(after, LOAD_PAGE).await?;
            let (Some(&from), Some(&to)) = (ids.first(), ids.last()) else {
                break;
            };
            let (inputs, card_urls) = self.load_range(from, to, &ids).await?;
            fresh.extend(inputs);
            urls.extend(card_urls.into_iter().map(|(id, url)| (url_key(&url), id)));
            after = Some(to);
        }
        *write(&self.inner.callees) = fresh;
        *write(&self.inner.card_urls) = urls;
        self.reload_keys().await?;
        self.inner.applied.send_replace(head);
        Ok(())
    }

    /// Reloads one callee. Callees are never deleted, so one the store does not have is not
    /// committed yet (or never will be) and is left out.
    async fn reload_callee(&self, id: CalleeId) -> Result<(), StoreError> {
        if !self.inner.store.callee_exists(id).await? {
            return Ok(());
        }
        let (inputs, card_urls) = self.load_range(id, id, &[id]).await?;
        write(&self.inner.callees).extend(inputs);
        write(&self.inner.card_urls)
            .extend(card_urls.into_iter().map(|(id, url)| (url_key(&url), id)));
        Ok(())
    }

    /// The inputs of the callees `ids`, all within `from..=to`, and their card URLs: five
    /// queries for the range.
    async fn load_range(
        &self,
        from: CalleeId,
        to: CalleeId,
        ids: &[CalleeId],
    ) -> Result<(Vec<(CalleeId, Arc<CalleeInputs>)>, Vec<(CalleeId, String)>), StoreError> {
        let store = &self.inner.store;
        // One window for the whole range, so every record in it ends at the same moment.
        let since = self.inner.track.since();
        // Five reads on five connections: the database works on one while this process
        // parses another (the bulk load of 100,000 subjects is bound by both).
        let (subject_rows, snapshot_rows, probe_rows, card_urls, run_records) = tokio::try_join!(
            store.subjects_between(from, to),
            store.newest_snapshots(from, to),
            store.newest_probe_facts(from, to),
            store.card_urls_between(from, to),
            store.run_records_between(from, to, since),
        )?;
        let mut runs: HashMap<(CalleeId, ProtocolVersion), Vec<RunRecord>> = HashMap::new();
        for (callee, version, run) in run_records {
            runs.entry((callee, version)).or_default().push(run);
        }
        let mut records: HashMap<CalleeId, HashMap<ProtocolVersion, TrackRecord>> = HashMap::new();
        for ((callee, version), runs) in runs {
            records
                .entry(callee)
                .or_default()
                .insert(version, TrackRecord::of(&runs, since));
        }
        let mut subjects: HashMap<CalleeId, Vec<Subject>> = HashMap::new();
        for subject in subject_rows {
            subjects.entry(subject.callee_id).or_default().push(subject);
        }
        let mut snapshots: HashMap<CalleeId, CardSnapshot> = snapshot_rows
            .into_iter()
            .map(|s| (s.callee_id, s))
            .collect();
        let mut probes: HashMap<CalleeId, HashMap<ProtocolVersion, ProbeFacts>> = HashMap::new();
        for (callee, version, facts) in probe_rows {
            probes.entry(callee).or_default().insert(version, facts);
        }
        let inputs = ids
            .iter()
            .map(|id| {
                let inputs = CalleeInputs::build(
                    snapshots.remove(id).as_ref(),
                    subjects.remove(id).unwrap_or_default(),
                    probes.remove(id).unwrap_or_default(),
                    records.remove(id).unwrap_or_default(),
                );
                (*id, Arc::new(inputs))
            })
            .collect();
        Ok((inputs, card_urls))
    }

    async fn reload_keys(&self) -> Result<(), StoreError> {
        let keys = self
            .inner
            .store
            .live_keys()
            .await?
            .into_iter()
            .map(|k| (k.key_hash.clone(), Arc::new(k)))
            .collect();
        *write(&self.inner.keys) = keys;
        Ok(())
    }
}

/// A poisoned lock still holds a whole map: every writer replaces entries in one step.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}
