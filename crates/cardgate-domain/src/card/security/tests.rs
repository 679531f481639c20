//! Unit tests of `cardgate_domain::card::security`.

use serde_json::json;

use super::*;

fn security(card: Value) -> CardSecurity {
    card_security(card.as_object().expect("object"))
}

#[test]
fn v1_wrappers_and_requirements_are_read() {
    let s = security(json!({
        "securitySchemes": {
            "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
            "key": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}},
            "oauth": {"oauth2SecurityScheme": {"flows": {"clientCredentials": {
                "tokenUrl": "https://a/token", "scopes": {"a2a.invoke": "invoke"}}}}},
            "oidc": {"openIdConnectSecurityScheme": {"openIdConnectUrl": "https://a/.well-known/openid-configuration"}},
            "mtls": {"mtlsSecurityScheme": {}},
            "basic": {"httpAuthSecurityScheme": {"scheme": "basic"}},
        },
        "securityRequirements": [
            {"schemes": {"oauth": {"list": ["a2a.invoke"]}}},
            {"schemes": {"bearer": {}, "key": {"list": []}}},
        ],
    }));
    assert_eq!(s.schemes["bearer"], SecurityScheme::HttpBearer);
    assert_eq!(
        s.schemes["key"],
        SecurityScheme::ApiKey {
            location: KeyLocation::Header,
            name: "X-API-Key".into()
        }
    );
    assert_eq!(
        s.schemes["oauth"],
        SecurityScheme::OAuth2 {
            token_url: Some("https://a/token".into())
        }
    );
    assert!(matches!(
        s.schemes["oidc"],
        SecurityScheme::OpenIdConnect { .. }
    ));
    assert_eq!(s.schemes["mtls"], SecurityScheme::MutualTls);
    assert_eq!(
        s.schemes["basic"],
        SecurityScheme::Unsupported {
            kind: "http basic".into()
        }
    );
    assert_eq!(s.requirements.len(), 2);
    assert_eq!(s.requirements[0]["oauth"], vec!["a2a.invoke".to_string()]);
    assert!(s.requirements[1]["bearer"].is_empty());
    assert!(s.requires_credentials());
    assert_eq!(s.describe_requirements(), "`oauth`, or `bearer` + `key`");
}

#[test]
fn v03_types_and_security_are_read() {
    let s = security(json!({
        "securitySchemes": {
            "key": {"type": "apiKey", "in": "query", "name": "api_key"},
            "tls": {"type": "mutualTLS"},
        },
        "security": [{"key": []}, {"tls": []}],
    }));
    assert_eq!(
        s.schemes["key"],
        SecurityScheme::ApiKey {
            location: KeyLocation::Query,
            name: "api_key".into()
        }
    );
    assert_eq!(s.schemes["tls"], SecurityScheme::MutualTls);
    assert_eq!(s.requirements.len(), 2);
}

#[test]
fn no_requirement_or_an_empty_alternative_lets_anyone_in() {
    assert!(!security(json!({})).requires_credentials());
    let optional = security(json!({
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "security": [{"bearer": []}, {}],
    }));
    assert!(!optional.requires_credentials());
}
