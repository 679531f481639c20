//! Parsing real and constructed cards of every generation.

use serde_json::{Value, json};

use super::*;
use crate::capability::Capability;

use crate::card::sdk_fixture as fixture;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn v(s: &str) -> ProtocolVersion {
    ProtocolVersion::parse_exact(s).unwrap()
}

#[test]
fn the_sdk_fixture_cards_all_normalize_to_the_same_view() {
    let cards = [
        fixture!("card/agent-card.json.v-none.json"),
        fixture!("card/agent-card.json.v-0.3.json"),
        fixture!("card/agent-card.json.v-1.0.json"),
        fixture!("card/agent.json.legacy-path.json"),
    ];
    let views: Vec<NormalizedCard> = cards
        .iter()
        .map(|c| parse_card(&json(c)).unwrap())
        .collect();
    for view in &views[1..] {
        assert_eq!(view, &views[0]);
    }
    let view = &views[0];
    assert_eq!(view.generation, Generation::Hybrid);
    assert_eq!(view.name, "Peer Python Agent");
    assert_eq!(
        view.versions().into_iter().collect::<Vec<_>>(),
        [v("0.3"), v("1.0")]
    );
    assert_eq!(view.interfaces[0].binding, "JSONRPC");
    assert_eq!(
        view.legacy_fields,
        ["preferredTransport", "protocolVersion", "url"]
    );
    assert_eq!(
        view.advertised_for(v("1.0"))
            .into_iter()
            .collect::<Vec<_>>(),
        [Capability::Streaming, Capability::PushNotifications]
    );
    assert_eq!(view.skills[0].id, "echo");
}

#[test]
fn a_v03_card_becomes_interfaces_at_its_protocol_version() {
    let card = json!({
        "name": "Legacy", "description": "d", "version": "2.0",
        "url": "https://agent.example/a2a", "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
        "additionalInterfaces": [
            {"url": "https://agent.example/a2a", "transport": "JSONRPC"},
            {"url": "https://agent.example/rest", "transport": "HTTP+JSON"}
        ],
        "capabilities": {"streaming": true, "stateTransitionHistory": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "S", "description": "d", "tags": []}]
    });
    let view = parse_card(&card).unwrap();
    assert_eq!(view.generation, Generation::V03);
    assert_eq!(
        view.interfaces.len(),
        2,
        "the repeated main interface is kept once"
    );
    assert_eq!(view.interfaces[1].binding, "HTTP+JSON");
    assert!(view.interfaces.iter().all(|i| i.version == v("0.3")));
    assert!(
        view.advertised_for(v("0.3"))
            .contains(&Capability::StateTransitionHistory)
    );
}

#[test]
fn state_transition_history_only_applies_before_v1() {
    let card = json!({
        "name": "H", "supportedInterfaces": [
            {"url": "https://a.example/1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "https://a.example/0", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
        ],
        "capabilities": {"stateTransitionHistory": true}
    });
    let view = parse_card(&card).unwrap();
    assert!(
        !view
            .advertised_for(v("1.0"))
            .contains(&Capability::StateTransitionHistory)
    );
    assert!(
        view.advertised_for(v("0.3"))
            .contains(&Capability::StateTransitionHistory)
    );
}

#[test]
fn v02_cards_with_and_without_protocol_version() {
    let bare = json!({"name": "Old", "url": "https://old.example/rpc", "capabilities": {"pushNotifications": true}});
    let view = parse_card(&bare).unwrap();
    assert_eq!(view.generation, Generation::V02);
    assert_eq!(view.versions().into_iter().collect::<Vec<_>>(), [v("0.2")]);
    assert_eq!(
        view.interfaces[0].binding, "JSONRPC",
        "preferredTransport defaults to JSONRPC"
    );

    let versioned =
        json!({"name": "Old", "url": "https://old.example/rpc", "protocolVersion": "0.2.5"});
    assert_eq!(parse_card(&versioned).unwrap().generation, Generation::V02);
}

#[test]
fn malformed_cards_name_the_field() {
    let iface = |version: Value| json!({"url": "https://a.example", "protocolBinding": "JSONRPC", "protocolVersion": version});
    let cases: Vec<(Value, &str)> = vec![
        (json!([1, 2]), "card is not a JSON object"),
        (json!({"supportedInterfaces": []}), "name is missing"),
        (json!({"name": "  "}), "name is empty"),
        (json!({"name": 5}), "name is not a string"),
        (
            json!({"name": "x"}),
            "supportedInterfaces is missing (and there is no legacy top-level `url` either)",
        ),
        (
            json!({"name": "x", "supportedInterfaces": {}}),
            "supportedInterfaces is not an array",
        ),
        (
            json!({"name": "x", "supportedInterfaces": []}),
            "supportedInterfaces is empty; a card must offer at least one interface",
        ),
        (
            json!({"name": "x", "supportedInterfaces": [iface(json!("1.0")), {"url": "https://a.example", "protocolBinding": "JSONRPC"}]}),
            "supportedInterfaces[1].protocolVersion is missing",
        ),
        (
            json!({"name": "x", "supportedInterfaces": [iface(json!("one"))]}),
            "supportedInterfaces[0].protocolVersion `one` is not a protocol version (Major.Minor)",
        ),
        (
            json!({"name": "x", "supportedInterfaces": [iface(json!(1.0))]}),
            "supportedInterfaces[0].protocolVersion is not a string",
        ),
        (
            json!({"name": "x", "supportedInterfaces": ["https://a"]}),
            "supportedInterfaces[0] is not an object",
        ),
        (
            json!({"name": "x", "supportedInterfaces": [iface(json!("1.0"))], "capabilities": {"streaming": "yes"}}),
            "capabilities.streaming is not a boolean",
        ),
        (
            json!({"name": "x", "supportedInterfaces": [iface(json!("1.0"))], "skills": [{"name": "no id"}]}),
            "skills[0].id is missing",
        ),
        (
            json!({"name": "x", "url": "https://a.example", "protocolVersion": "1.0"}),
            "supportedInterfaces is missing, but protocolVersion 1.0 requires it (v1.0 cards list interfaces)",
        ),
        (
            json!({"name": "x", "url": "https://a.example", "additionalInterfaces": [{"url": "https://b"}]}),
            "additionalInterfaces[0].transport is missing",
        ),
        (
            json!({"name": "x", "supportedInterfaces": [iface(json!("1.0"))], "defaultInputModes": ["text", 3]}),
            "defaultInputModes[1] is not a string",
        ),
    ];
    for (card, expected) in cases {
        let err = parse_card(&card).expect_err(expected);
        assert_eq!(err.to_string(), expected);
    }
}
