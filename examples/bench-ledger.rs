//! The ledger's cost at scale: grows a ledger to N events (default 1,000,000) through the
//! store's own append path, then measures what one more append costs and, when the build has
//! the Merkle tree, what proofs and checkpoints cost at that size.
//!
//! `cargo run --release --example bench-ledger -- [events]`
//! `BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --release --example bench-ledger`
//!
//! Only `Store::append` is needed for the append figures, so the same file (with
//! `examples/support/bench_db.rs`, and its proof part stubbed out) builds on a commit
//! from before the tree (BENCH_NO_TREE=1 skips the proof part): the "without" column.

#[path = "support/bench_db.rs"]
mod bench_db;

use std::time::{Duration, Instant};

use cardgate::domain::callee::{Callee, CardUrl};
use cardgate::domain::capability::Capability;
use cardgate::domain::ids::{CalleeId, SnapshotId};
use cardgate::domain::ledger::{EventBody, NewEvent};
use cardgate::domain::version::ProtocolVersion;
use cardgate::storage::{PoolSettings, Store};

/// Subjects the events are spread over.
const CALLEES: usize = 100;
/// Events per load transaction.
const LOAD_BATCH: usize = 2000;

fn republished(callee: CalleeId, n: usize) -> NewEvent {
    NewEvent {
        callee_id: callee,
        protocol_version: ProtocolVersion::new(1, 0),
        body: EventBody::CardRepublished {
            snapshot_id: SnapshotId::new(),
            sha256: format!("{n:064x}"),
        },
        actor: "system".into(),
    }
}

fn percentiles(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    format!(
        "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms (n={})",
        at(0.5).as_secs_f64() * 1e3,
        at(0.9).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        samples.len()
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let events: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let work = tempfile::tempdir()?;
    let db = bench_db::BenchDb::open("cardgate_ledgerbench", work.path()).await?;
    let target = db.target.clone();
    println!("backend: {target:?}, {events} events");
    let store = Store::connect(&target, &PoolSettings::default()).await?;
    store.migrate().await?;

    let now = chrono::Utc::now();
    let mut callees = Vec::with_capacity(CALLEES);
    let mut appeared = Vec::with_capacity(CALLEES);
    for n in 0..CALLEES {
        let callee = Callee {
            id: CalleeId::new(),
            card_url: CardUrl::parse(&format!("https://agent{n}.example"))?,
            name: None,
            created_at: now,
            trusted_keys: None,
            probe_script: None,
            fetch: Default::default(),
            refresh_generation: 0,
        };
        store.insert_callee(&callee, now).await?;
        appeared.push(NewEvent {
            callee_id: callee.id,
            protocol_version: ProtocolVersion::new(1, 0),
            body: EventBody::VersionAppeared {
                snapshot_id: SnapshotId::new(),
                advertised: vec![Capability::Streaming],
            },
            actor: "system".into(),
        });
        callees.push(callee.id);
    }
    store.append(&appeared, now).await?;

    let started = Instant::now();
    let mut written = CALLEES;
    while written < events {
        let batch: Vec<NewEvent> = (written..(written + LOAD_BATCH).min(events))
            .map(|n| republished(callees[n % CALLEES], n))
            .collect();
        written += batch.len();
        store.append(&batch, chrono::Utc::now()).await?;
        if written % 100_000 < LOAD_BATCH {
            println!(
                "  loaded {written} events ({:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    let load = started.elapsed();
    println!(
        "load: {written} events in {:.1} s ({:.0} events/s, batches of {LOAD_BATCH})",
        load.as_secs_f64(),
        written as f64 / load.as_secs_f64()
    );

    // One event per transaction, as a probe's verdict or a refresh appends.
    let mut appends = Vec::new();
    for n in 0..2000 {
        let event = republished(callees[n % CALLEES], written + n);
        let t = Instant::now();
        store.append(&[event], chrono::Utc::now()).await?;
        appends.push(t.elapsed());
    }
    println!("append one event at {written}: {}", percentiles(appends));

    if std::env::var_os("BENCH_NO_TREE").is_none() {
        bench_proofs(&store, &work).await?;
    }

    store.close().await;
    db.drop_database().await?;
    Ok(())
}

async fn bench_proofs(store: &Store, work: &tempfile::TempDir) -> anyhow::Result<()> {
    use cardgate::service::transparency::{Transparency, TransparencySettings};
    let transparency = Transparency::load(&TransparencySettings {
        signing_key_file: work.path().join("key.pem"),
        origin: "bench.example/ledger".into(),
    })?;
    let size = store.tree_size().await?;
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |bound: u64| {
        // xorshift: reproducible, and no dependency for the example.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % bound
    };

    let mut inclusion = Vec::new();
    let mut path_len = 0;
    for _ in 0..2000 {
        let seq = next(size) + 1;
        let t = Instant::now();
        let proof = transparency.inclusion(store, seq, Some(size)).await?;
        inclusion.push(t.elapsed());
        path_len = path_len.max(proof.audit_path.len());
    }
    println!(
        "inclusion proof in a tree of {size}: {} (audit path up to {path_len} hashes)",
        percentiles(inclusion)
    );

    let mut consistency = Vec::new();
    for _ in 0..2000 {
        let first = next(size) + 1;
        let t = Instant::now();
        transparency.consistency(store, first, Some(size)).await?;
        consistency.push(t.elapsed());
    }
    println!(
        "consistency proof to a tree of {size}: {}",
        percentiles(consistency)
    );

    let mut checkpoints = Vec::new();
    for _ in 0..500 {
        let t = Instant::now();
        // A new size each time would hit the root cache only by chance; this measures the
        // uncached path by asking for a tree one leaf smaller than the last.
        let at = size - checkpoints.len() as u64;
        transparency.sign_at(store, at, chrono::Utc::now()).await?;
        checkpoints.push(t.elapsed());
    }
    println!(
        "signed checkpoint (root + Ed25519): {}",
        percentiles(checkpoints)
    );

    let t = Instant::now();
    let report = cardgate::service::ledger::verify(store).await?;
    println!(
        "GET /v1/ledger/verify's walk: {} events in {:.1} s, ok={}",
        report.checked,
        t.elapsed().as_secs_f64(),
        report.ok
    );
    Ok(())
}
