//! Unit tests of `cardgate::service::probe::interface`.

use serde_json::json;

use super::*;
use crate::domain::card::parse_card;

fn card(interfaces: serde_json::Value) -> NormalizedCard {
    parse_card(&json!({
        "name": "a", "description": "d", "version": "1", "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
        "supportedInterfaces": interfaces,
    }))
    .expect("a v1.0 card")
}

const V1: &str = "1.0";

fn v1() -> ProtocolVersion {
    ProtocolVersion::parse_exact(V1).expect("version")
}

#[test]
fn json_rpc_is_preferred_and_grpc_is_probed_when_it_is_all_there_is() {
    let both = card(json!([
        {"url": "http://a/grpc", "protocolBinding": "GRPC", "protocolVersion": V1},
        {"url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": V1},
    ]));
    let (chosen, wire) = choose_interface(&both, v1(), None).expect("chosen");
    assert_eq!(
        (chosen.binding.as_str(), wire),
        ("JSONRPC", Wire::JsonRpcV1)
    );

    let only_grpc = card(json!([
        {"url": "http://a:50051", "protocolBinding": "GRPC", "protocolVersion": V1},
    ]));
    let (chosen, wire) = choose_interface(&only_grpc, v1(), None).expect("chosen");
    assert_eq!(
        (chosen.url.as_str(), wire),
        ("http://a:50051", Wire::GrpcV1)
    );
}

#[test]
fn an_asked_for_binding_is_probed_or_refused_by_name() {
    let both = card(json!([
        {"url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": V1},
        {"url": "http://a/grpc", "protocolBinding": "grpc", "protocolVersion": V1},
    ]));
    let (chosen, wire) = choose_interface(&both, v1(), Some(Binding::Grpc)).expect("chosen");
    assert_eq!((chosen.url.as_str(), wire), ("http://a/grpc", Wire::GrpcV1));

    let why = choose_interface(&both, v1(), Some(Binding::HttpJson)).expect_err("not offered");
    assert_eq!(
        why,
        "the card offers no HTTP+JSON interface for 1.0 (bindings: JSONRPC, grpc)"
    );
}
