//! What judging one card costs: parsing, SDK-compatible canonicalization, ES256 verification,
//! and the whole fetch-and-assess through the guarded client against a card server on loopback.
//!
//! `cargo bench --bench cards`

// A benchmark whose setup fails should stop right there.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use axum::Router;
use axum::routing::get;
use cardgate::domain::callee::CardUrl;
use cardgate::domain::card::canonical::canonicalize_card;
use cardgate::domain::card::parse_card;
use cardgate::domain::card::signature::{
    KeySet, KeySource, parse_jwks, read_signatures, verdict, verify_entry,
};
use cardgate::remote::{NetworkPolicy, Outbound, OutboundSettings};
use cardgate::service::discovery::{Discovery, DiscoverySettings, Fetch};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::Value;

const CARD: &str =
    include_str!("../tests/fixtures/a2a-sdk-python-1.3.0/signed/python-card.v-1.0.json");
const JWKS: &str = include_str!("../tests/fixtures/a2a-sdk-python-1.3.0/signed/jwks.json");

fn pure(c: &mut Criterion) {
    let card: Value = serde_json::from_str(CARD).unwrap();
    let keys = KeySet {
        source: KeySource::Pinned,
        keys: parse_jwks(&serde_json::from_str(JWKS).unwrap()).unwrap(),
    };
    c.bench_function("parse bytes to JSON", |b| {
        b.iter(|| serde_json::from_str::<Value>(black_box(CARD)).unwrap())
    });
    c.bench_function("normalize card", |b| {
        b.iter(|| parse_card(black_box(&card)).unwrap())
    });
    c.bench_function("canonicalize card (SDK rules + JCS)", |b| {
        b.iter(|| canonicalize_card(black_box(&card)).unwrap())
    });
    c.bench_function("verify ES256 signature", |b| {
        let payload = canonicalize_card(&card).unwrap().payload;
        let entries = read_signatures(&card).unwrap();
        b.iter(|| verify_entry(black_box(&entries[0]), black_box(&payload), &keys))
    });
    c.bench_function("judge card: parse + canonicalize + verify", |b| {
        b.iter(|| {
            let value: Value = serde_json::from_str(black_box(CARD)).unwrap();
            parse_card(&value).unwrap();
            let payload = canonicalize_card(&value).unwrap().payload;
            let outcomes = read_signatures(&value)
                .unwrap()
                .iter()
                .map(|e| (e.index, verify_entry(e, &payload, &keys)))
                .collect();
            verdict(outcomes)
        })
    });
}

fn fetched(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route(
                "/.well-known/agent-card.json",
                get(|| async { ([("content-type", "application/json")], CARD) }),
            )
            .route(
                "/.well-known/jwks.json",
                get(|| async { ([("content-type", "application/json")], JWKS) }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    });
    let policy = NetworkPolicy::new(NetworkPolicy::parse_allowed("127.0.0.0/8").unwrap());
    let outbound = Outbound::new(OutboundSettings {
        policy,
        ..OutboundSettings::default()
    })
    .unwrap();
    let discovery = Discovery::new(outbound, DiscoverySettings::default());
    let url = CardUrl::parse(&format!("http://{addr}/")).unwrap();
    let jwks: Value = serde_json::from_str(JWKS).unwrap();
    c.bench_function("fetch + assess over loopback (pinned key)", |b| {
        b.to_async(&rt).iter(|| async {
            let Ok(Fetch::Body { url, bytes, .. }) = discovery.fetch(&url, None).await else {
                panic!("fetch")
            };
            let assessment = discovery.assess(&url, &bytes, Some(&jwks)).await;
            assert!(assessment.trusted);
        })
    });
}

criterion_group!(benches, pure, fetched);
criterion_main!(benches);
