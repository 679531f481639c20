//! Unit tests of `cardgate_domain::credential`.

use serde_json::json;

use super::*;
use crate::card::security::card_security;

fn security() -> CardSecurity {
    card_security(
        json!({
            "securitySchemes": {
                "bearer": {"httpAuthSecurityScheme": {"scheme": "bearer"}},
                "key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}},
                "oauth": {"oauth2SecurityScheme": {"flows": {}}},
            },
            "securityRequirements": [
                {"schemes": {"oauth": {"list": ["a2a.invoke"]}}},
                {"schemes": {"bearer": {}, "key": {}}},
            ],
        })
        .as_object()
        .expect("object"),
    )
}

fn kinds(list: &[(&str, CredentialKind)]) -> BTreeMap<String, CredentialKind> {
    list.iter().map(|(n, k)| (n.to_string(), *k)).collect()
}

#[test]
fn the_first_alternative_the_credentials_complete_is_presented() {
    let s = security();
    let plan_for = |list: &[(&str, CredentialKind)]| plan(&s, &kinds(list));
    match plan_for(&[
        ("bearer", CredentialKind::Bearer),
        ("key", CredentialKind::ApiKey),
    ]) {
        AuthPlan::Present {
            requirement: Some(1),
            schemes,
        } => assert_eq!(schemes.len(), 2),
        other => panic!("{other:?}"),
    }
    match plan_for(&[("oauth", CredentialKind::OAuth2ClientCredentials)]) {
        AuthPlan::Present {
            requirement: Some(0),
            schemes,
        } => assert_eq!(schemes[0].scopes, vec!["a2a.invoke".to_string()]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn what_is_missing_is_said() {
    let s = security();
    assert_eq!(
        plan(&s, &kinds(&[])),
        AuthPlan::Missing(
            "the card requires `oauth`, or `bearer` + `key`; no credentials are configured".into()
        )
    );
    assert_eq!(
        plan(&s, &kinds(&[("bearer", CredentialKind::Bearer)])),
        AuthPlan::Missing(
            "the card requires `oauth`, or `bearer` + `key`; credentials are configured for `bearer` only"
                .into()
        )
    );
    // A credential of the wrong kind satisfies nothing.
    assert!(matches!(
        plan(&s, &kinds(&[("oauth", CredentialKind::Bearer)])),
        AuthPlan::Missing(_)
    ));
}

#[test]
fn a_card_that_requires_nothing_is_probed_anonymously_unless_credentials_are_set() {
    let open = CardSecurity::default();
    assert_eq!(plan(&open, &kinds(&[])), AuthPlan::Anonymous);
    let mut declared = security();
    declared.requirements.clear();
    match plan(&declared, &kinds(&[("bearer", CredentialKind::Bearer)])) {
        AuthPlan::Present {
            requirement: None,
            schemes,
        } => assert_eq!(schemes[0].name, "bearer"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn kinds_fit_their_schemes_only() {
    let s = security();
    assert!(
        CredentialKind::Bearer
            .fits("bearer", &s.schemes["bearer"])
            .is_ok()
    );
    assert_eq!(
        CredentialKind::Bearer.fits("key", &s.schemes["key"]),
        Err("the card's scheme `key` is apiKey; a `bearer` credential does not fit it".into())
    );
    assert!(
        CredentialKind::OAuth2ClientCredentials
            .fits("oauth", &s.schemes["oauth"])
            .is_ok()
    );
}

#[test]
fn secrets_never_show_in_debug_and_fingerprints_are_short_and_stable() {
    let c: Credential =
        serde_json::from_value(json!({"kind": "bearer", "token": "s3cr3t-value"})).expect("parses");
    assert!(!format!("{c:?}").contains("s3cr3t"));
    let again: Credential =
        serde_json::from_value(json!({"kind": "bearer", "token": "s3cr3t-value"})).unwrap();
    assert_eq!(c.fingerprint(), again.fingerprint());
    assert_eq!(c.fingerprint().len(), "sha256:".len() + 16);
    let other = Credential::Bearer {
        token: Secret::new("another"),
    };
    assert_ne!(c.fingerprint(), other.fingerprint());
}

#[test]
fn validation_names_the_field_and_never_the_value() {
    let bad = Credential::Bearer {
        token: Secret::new("line\nbreak"),
    };
    let why = bad.validate().expect_err("refused");
    assert!(why.contains("`token`") && !why.contains("line"));
    let mtls = Credential::Mtls {
        certificate_pem: "nope".into(),
        private_key_pem: Secret::new("-----BEGIN PRIVATE KEY-----"),
    };
    assert!(
        mtls.validate()
            .expect_err("no cert")
            .contains("certificate_pem")
    );
    let kinds: Vec<_> = ["bearer", "api-key", "oauth2-client-credentials", "mtls"]
        .iter()
        .filter_map(|k| CredentialKind::parse(k))
        .collect();
    assert_eq!(kinds.len(), 4);
}
