//! The canonicalizer against the SDK's own bytes and the documented edge cases.

use serde_json::{Value, json};

use super::*;

use crate::card::sdk_fixture as fixture;

fn canon(card: &Value) -> String {
    String::from_utf8(canonicalize_card(card).unwrap().payload).unwrap()
}

#[test]
fn matches_the_sdk_canonical_payload_byte_for_byte() {
    for (card, expected) in [
        (
            fixture!("signed/python-card.v-1.0.json"),
            fixture!("signed/python-card.v-1.0.canonical-payload.json"),
        ),
        (
            fixture!("signed/python-card.v-none.json"),
            fixture!("signed/python-card.v-none.canonical-payload.json"),
        ),
    ] {
        let card: Value = serde_json::from_str(card).unwrap();
        assert_eq!(canon(&card), expected);
    }
}

#[test]
fn hybrid_cards_report_their_legacy_fields_as_uncovered() {
    let card: Value = serde_json::from_str(fixture!("signed/python-card.v-1.0.json")).unwrap();
    let canonical = canonicalize_card(&card).unwrap();
    assert_eq!(
        canonical.uncovered,
        ["preferredTransport", "protocolVersion", "url"]
    );
}

#[test]
fn naive_canonicalization_of_the_served_card_differs() {
    // The served card minus `signatures`, straight through JCS, keeps the legacy fields.
    let mut card: Value = serde_json::from_str(fixture!("signed/python-card.v-1.0.json")).unwrap();
    card.as_object_mut().unwrap().remove("signatures");
    let naive = String::from_utf8(crate::jcs::canonicalize(&card).unwrap()).unwrap();
    assert_ne!(
        naive,
        fixture!("signed/python-card.v-1.0.canonical-payload.json")
    );
}

#[test]
fn the_documented_tricky_card_matches_both_sdks() {
    // a2a-protocol.md §2.2: byte-identical in a2a-sdk 1.3.0 and @a2a-js/sdk 1.3.0.
    let card = json!({
        "name": "T", "description": "", "version": "1",
        "supportedInterfaces": [{"url": "https://a.example", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": ""}],
        "capabilities": {"streaming": false, "extensions": [
            {"uri": "urn:x", "required": false, "params": {"big": 1e21, "n": 1.0, "s": "é😀", "small": 1e-7}}
        ]},
        "skills": [],
        "url": "https://legacy.example", "somethingElse": {"x": 1}
    });
    let out = canon(&card);
    assert!(
        out.starts_with(r#"{"capabilities":{"extensions":[{"params":{"big":1e+21,"n":1,"s":"é😀","small":1e-7},"uri":"urn:x"}],"streaming":false},"#),
        "{out}"
    );
    assert!(
        !out.contains("description") && !out.contains("skills") && !out.contains("tenant"),
        "{out}"
    );
    assert!(
        !out.contains("somethingElse") && !out.contains("legacy.example"),
        "{out}"
    );
}

#[test]
fn v03_cards_are_mapped_onto_v1_interfaces_and_stay_covered() {
    let card = json!({
        "name": "L", "url": "https://a.example/rpc", "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
        "additionalInterfaces": [{"url": "https://a.example/rest", "transport": "HTTP+JSON"}],
        "supportsAuthenticatedExtendedCard": true,
        "security": [{"oauth": ["read"]}],
        "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Key"}},
        "capabilities": {"stateTransitionHistory": true}
    });
    let canonical = canonicalize_card(&card).unwrap();
    let out: Value = serde_json::from_slice(&canonical.payload).unwrap();
    assert_eq!(
        out["supportedInterfaces"],
        json!([
            {"url": "https://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
            {"url": "https://a.example/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3.0"}
        ])
    );
    assert_eq!(out["capabilities"], json!({"extendedAgentCard": true}));
    assert_eq!(
        out["securityRequirements"],
        json!([{"schemes": {"oauth": {"list": ["read"]}}}])
    );
    assert_eq!(
        out["securitySchemes"],
        json!({"key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}}})
    );
    // stateTransitionHistory is not in the v1.0 model: the signature does not cover it.
    assert_eq!(canonical.uncovered, ["capabilities.stateTransitionHistory"]);
}

#[test]
fn empty_scope_security_requirements_are_reported_uncovered() {
    let card = json!({
        "name": "S", "supportedInterfaces": [{"url": "https://a.example", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "securityRequirements": [{"schemes": {"key": {"list": []}}}],
        "signatures": [{"protected": "e30", "signature": "AA", "header": {"kid": "x"}}]
    });
    let canonical = canonicalize_card(&card).unwrap();
    assert_eq!(
        canonical.uncovered,
        ["securityRequirements", "signatures[0].header"]
    );
}

#[test]
fn cards_the_sdks_would_not_parse_have_no_canonical_form() {
    let base = || json!({"name": "x", "supportedInterfaces": [{"url": "https://a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
    let mut wrong_type = base();
    wrong_type["capabilities"] = json!({"streaming": "yes"});
    let mut two_oneofs = base();
    two_oneofs["securitySchemes"] =
        json!({"s": {"apiKeySecurityScheme": {"name": "a"}, "mtlsSecurityScheme": {}}});
    let mut bad_struct = base();
    bad_struct["capabilities"] = json!({"extensions": [{"uri": "u", "params": [1]}]});
    for (card, expected) in [
        (json!("card"), "the card is not a JSON object"),
        (wrong_type, "capabilities.streaming is not a boolean"),
        (two_oneofs, "are both set"),
        (
            bad_struct,
            "capabilities.extensions[0].params is not an object",
        ),
    ] {
        let err = canonicalize_card(&card).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
    }
}

#[test]
fn snake_case_proto_names_are_read_like_protojson_does() {
    let camel = json!({"name": "x", "supportedInterfaces": [{"url": "https://a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
    let snake = json!({"name": "x", "supported_interfaces": [{"url": "https://a", "protocol_binding": "JSONRPC", "protocol_version": "1.0"}]});
    assert_eq!(canon(&camel), canon(&snake));
}
