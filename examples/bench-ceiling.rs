//! The ceiling for the trust-endpoint load benchmark: a trivial axum JSON handler, built with
//! the same axum, tokio and release profile as cardgate, so `bench/trust-load.sh` can put
//! cardgate's figures next to what this stack does with no work at all.
//!
//! `cargo run --release --example bench-ceiling -- 127.0.0.1:9090`

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

async fn decision() -> Json<Value> {
    Json(json!({"authoritative": true, "gate_state": "lifecycle-trusted", "conditions": []}))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9090".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("ceiling on http://{}", listener.local_addr()?);
    axum::serve(listener, Router::new().route("/v1/trust", get(decision))).await
}
