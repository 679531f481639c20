//! The bytes an agent card signature covers (A2A §8.4.1), computed as the official SDKs compute
//! them (a2a-sdk 1.3.0 `_canonicalize_agent_card`, @a2a-js/sdk 1.3.0 `canonicalizeAgentCard`):
//!
//! 1. map legacy v0.3 fields onto the v1.0 model (`parse_agent_card`): `url`,
//!    `preferredTransport`, `protocolVersion` and `additionalInterfaces` become
//!    `supportedInterfaces` only when the card has none, and are dropped in every case;
//!    `security` and skill `security` become `securityRequirements`; `securitySchemes[*].type`
//!    becomes the oneof wrapper; `supportsAuthenticatedExtendedCard` becomes
//!    `capabilities.extendedAgentCard`;
//! 2. keep only fields the v1.0 proto knows (ProtoJSON parse with unknown fields ignored), and
//!    drop implicit-presence scalars at their default (`false` for non-`optional` bools);
//! 3. drop `signatures`; recursively drop `""`, `[]`, `{}` and `null`;
//! 4. RFC 8785.
//!
//! The spec's own worked example keeps empty required fields; no SDK does, and signatures in
//! the wild follow the SDKs (upstream a2aproject/A2A#2122). Everything the model drops is
//! reported as *uncovered*, so a verified signature never claims more than it covers.

use serde_json::{Map, Number, Value};

use crate::jcs;

/// Why a card has no canonical form (the SDKs would refuse to parse it too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    #[error("the card does not fit the v1.0 model: {0}")]
    Model(String),
    #[error(transparent)]
    Jcs(#[from] jcs::JcsError),
}

/// The canonical payload and what the signature does not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    pub payload: Vec<u8>,
    /// Card fields (paths like `url`, `skills[0].security`) absent from the signed form.
    pub uncovered: Vec<String>,
}

/// How a field's value is read, per the v1.0 proto.
#[derive(Clone, Copy)]
enum Kind {
    /// `string` (implicit presence) or `optional string`: a string either way in JSON.
    Str,
    /// `bool` with implicit presence: `false` is the default and is dropped.
    Bool,
    /// `optional bool`: kept when set, `false` included.
    OptBool,
    RepeatedStr,
    Message(&'static [Field]),
    RepeatedMessage(&'static [Field]),
    MapOfMessage(&'static [Field]),
    MapOfStr,
    /// `google.protobuf.Struct`: free JSON; numbers become doubles.
    Struct,
}

struct Field {
    name: &'static str,
    /// The proto field name, which ProtoJSON parsers also accept.
    proto: &'static str,
    kind: Kind,
    /// Members of one oneof (at most one may be set).
    oneof: bool,
}

const fn f(name: &'static str, proto: &'static str, kind: Kind) -> Field {
    Field {
        name,
        proto,
        kind,
        oneof: false,
    }
}

const fn one(name: &'static str, proto: &'static str, kind: Kind) -> Field {
    Field {
        name,
        proto,
        kind,
        oneof: true,
    }
}

use Kind::*;

// a2aproject/A2A v1.0.1 specification/a2a.proto, messages reachable from AgentCard.
const AGENT_CARD: &[Field] = &[
    f("name", "name", Str),
    f("description", "description", Str),
    f(
        "supportedInterfaces",
        "supported_interfaces",
        RepeatedMessage(AGENT_INTERFACE),
    ),
    f("provider", "provider", Message(AGENT_PROVIDER)),
    f("version", "version", Str),
    f("documentationUrl", "documentation_url", Str),
    f("capabilities", "capabilities", Message(AGENT_CAPABILITIES)),
    f(
        "securitySchemes",
        "security_schemes",
        MapOfMessage(SECURITY_SCHEME),
    ),
    f(
        "securityRequirements",
        "security_requirements",
        RepeatedMessage(SECURITY_REQUIREMENT),
    ),
    f("defaultInputModes", "default_input_modes", RepeatedStr),
    f("defaultOutputModes", "default_output_modes", RepeatedStr),
    f("skills", "skills", RepeatedMessage(AGENT_SKILL)),
    f(
        "signatures",
        "signatures",
        RepeatedMessage(AGENT_CARD_SIGNATURE),
    ),
    f("iconUrl", "icon_url", Str),
];
const AGENT_INTERFACE: &[Field] = &[
    f("url", "url", Str),
    f("protocolBinding", "protocol_binding", Str),
    f("tenant", "tenant", Str),
    f("protocolVersion", "protocol_version", Str),
];
const AGENT_PROVIDER: &[Field] = &[f("url", "url", Str), f("organization", "organization", Str)];
const AGENT_CAPABILITIES: &[Field] = &[
    f("streaming", "streaming", OptBool),
    f("pushNotifications", "push_notifications", OptBool),
    f("extensions", "extensions", RepeatedMessage(AGENT_EXTENSION)),
    f("extendedAgentCard", "extended_agent_card", OptBool),
];
const AGENT_EXTENSION: &[Field] = &[
    f("uri", "uri", Str),
    f("description", "description", Str),
    f("required", "required", Bool),
    f("params", "params", Struct),
];
const AGENT_SKILL: &[Field] = &[
    f("id", "id", Str),
    f("name", "name", Str),
    f("description", "description", Str),
    f("tags", "tags", RepeatedStr),
    f("examples", "examples", RepeatedStr),
    f("inputModes", "input_modes", RepeatedStr),
    f("outputModes", "output_modes", RepeatedStr),
    f(
        "securityRequirements",
        "security_requirements",
        RepeatedMessage(SECURITY_REQUIREMENT),
    ),
];
const AGENT_CARD_SIGNATURE: &[Field] = &[
    f("protected", "protected", Str),
    f("signature", "signature", Str),
    f("header", "header", Struct),
];
const SECURITY_REQUIREMENT: &[Field] = &[f("schemes", "schemes", MapOfMessage(STRING_LIST))];
const STRING_LIST: &[Field] = &[f("list", "list", RepeatedStr)];
const SECURITY_SCHEME: &[Field] = &[
    one(
        "apiKeySecurityScheme",
        "api_key_security_scheme",
        Message(API_KEY_SCHEME),
    ),
    one(
        "httpAuthSecurityScheme",
        "http_auth_security_scheme",
        Message(HTTP_AUTH_SCHEME),
    ),
    one(
        "oauth2SecurityScheme",
        "oauth2_security_scheme",
        Message(OAUTH2_SCHEME),
    ),
    one(
        "openIdConnectSecurityScheme",
        "open_id_connect_security_scheme",
        Message(OIDC_SCHEME),
    ),
    one(
        "mtlsSecurityScheme",
        "mtls_security_scheme",
        Message(MTLS_SCHEME),
    ),
];
const API_KEY_SCHEME: &[Field] = &[
    f("description", "description", Str),
    f("location", "location", Str),
    f("name", "name", Str),
];
const HTTP_AUTH_SCHEME: &[Field] = &[
    f("description", "description", Str),
    f("scheme", "scheme", Str),
    f("bearerFormat", "bearer_format", Str),
];
const OAUTH2_SCHEME: &[Field] = &[
    f("description", "description", Str),
    f("flows", "flows", Message(OAUTH_FLOWS)),
    f("oauth2MetadataUrl", "oauth2_metadata_url", Str),
];
const OIDC_SCHEME: &[Field] = &[
    f("description", "description", Str),
    f("openIdConnectUrl", "open_id_connect_url", Str),
];
const MTLS_SCHEME: &[Field] = &[f("description", "description", Str)];
const OAUTH_FLOWS: &[Field] = &[
    one(
        "authorizationCode",
        "authorization_code",
        Message(AUTHORIZATION_CODE_FLOW),
    ),
    one(
        "clientCredentials",
        "client_credentials",
        Message(CLIENT_CREDENTIALS_FLOW),
    ),
    one("implicit", "implicit", Message(IMPLICIT_FLOW)),
    one("password", "password", Message(PASSWORD_FLOW)),
    one("deviceCode", "device_code", Message(DEVICE_CODE_FLOW)),
];
const AUTHORIZATION_CODE_FLOW: &[Field] = &[
    f("authorizationUrl", "authorization_url", Str),
    f("tokenUrl", "token_url", Str),
    f("refreshUrl", "refresh_url", Str),
    f("scopes", "scopes", MapOfStr),
    f("pkceRequired", "pkce_required", Bool),
];
const CLIENT_CREDENTIALS_FLOW: &[Field] = &[
    f("tokenUrl", "token_url", Str),
    f("refreshUrl", "refresh_url", Str),
    f("scopes", "scopes", MapOfStr),
];
const IMPLICIT_FLOW: &[Field] = &[
    f("authorizationUrl", "authorization_url", Str),
    f("refreshUrl", "refresh_url", Str),
    f("scopes", "scopes", MapOfStr),
];
const PASSWORD_FLOW: &[Field] = &[
    f("tokenUrl", "token_url", Str),
    f("refreshUrl", "refresh_url", Str),
    f("scopes", "scopes", MapOfStr),
];
const DEVICE_CODE_FLOW: &[Field] = &[
    f("deviceAuthorizationUrl", "device_authorization_url", Str),
    f("tokenUrl", "token_url", Str),
    f("refreshUrl", "refresh_url", Str),
    f("scopes", "scopes", MapOfStr),
];

/// The payload the card's signatures cover, and what they leave out.
pub fn canonicalize_card(card: &Value) -> Result<Canonical, CanonicalError> {
    let Value::Object(raw) = card else {
        return Err(CanonicalError::Model(
            "the card is not a JSON object".into(),
        ));
    };
    let mut uncovered = Vec::new();
    if let Some(Value::Array(sigs)) = raw.get("signatures") {
        for (i, sig) in sigs.iter().enumerate() {
            if sig.get("header").is_some_and(|h| !h.is_null()) {
                uncovered.push(format!("signatures[{i}].header"));
            }
        }
    }
    let mapped = map_legacy(raw.clone(), &mut uncovered)?;
    let mut model = read_message(&mapped, AGENT_CARD, "", &mut uncovered)?;
    model.remove("signatures");
    let cleaned = clean_empty(Value::Object(model), "", 1, &mut uncovered)?
        .unwrap_or(Value::Object(Map::new()));
    uncovered.sort();
    uncovered.dedup();
    Ok(Canonical {
        payload: jcs::canonicalize(&cleaned)?,
        uncovered,
    })
}

/// Step 1: a2a-sdk `parse_agent_card`'s compatibility mapping.
///
/// Long on purpose: it is the SDK's mapping, one legacy field after another in the SDK's own
/// order, so that it can be checked against that source line by line; split, it could not.
fn map_legacy(
    mut card: Map<String, Value>,
    uncovered: &mut Vec<String>,
) -> Result<Map<String, Value>, CanonicalError> {
    // supportsAuthenticatedExtendedCard → capabilities.extendedAgentCard (when truthy).
    if let Some(flag) = card.remove("supportsAuthenticatedExtendedCard")
        && truthy(&flag)
    {
        let caps = card
            .entry("capabilities")
            .or_insert_with(|| Value::Object(Map::new()));
        let caps = caps
            .as_object_mut()
            .ok_or_else(|| CanonicalError::Model("capabilities is not an object".into()))?;
        if caps.contains_key("extendedAgentCard") {
            uncovered.push("supportsAuthenticatedExtendedCard".into());
        } else {
            caps.insert("extendedAgentCard".into(), Value::Bool(true));
        }
    }

    // url / preferredTransport / protocolVersion / additionalInterfaces.
    let main_url = card.remove("url");
    let transport = card.remove("preferredTransport");
    let version = card.remove("protocolVersion");
    let additional = card.remove("additionalInterfaces");
    let legacy_present: Vec<&str> = [
        ("url", &main_url),
        ("preferredTransport", &transport),
        ("protocolVersion", &version),
        ("additionalInterfaces", &additional),
    ]
    .into_iter()
    .filter(|(_, v)| v.is_some())
    .map(|(k, _)| k)
    .collect();
    let maps = !card.contains_key("supportedInterfaces") && main_url.as_ref().is_some_and(truthy);
    if maps {
        let version = version.unwrap_or_else(|| Value::String("0.3.0".into()));
        let mut interfaces = vec![interface(
            main_url,
            transport.unwrap_or_else(|| "JSONRPC".into()),
            &version,
        )];
        match additional {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for item in list {
                    let item = item.as_object().ok_or_else(|| {
                        CanonicalError::Model("additionalInterfaces entries must be objects".into())
                    })?;
                    interfaces.push(interface(
                        item.get("url").cloned(),
                        item.get("transport").cloned().unwrap_or(Value::Null),
                        &version,
                    ));
                }
            }
            Some(other) if !truthy(&other) => {}
            Some(_) => {
                return Err(CanonicalError::Model(
                    "additionalInterfaces is not an array".into(),
                ));
            }
        }
        card.insert("supportedInterfaces".into(), Value::Array(interfaces));
    } else {
        uncovered.extend(legacy_present.into_iter().map(String::from));
    }

    // security → securityRequirements, on the card and on each skill.
    map_security(&mut card, "", uncovered)?;
    if let Some(Value::Array(skills)) = card.get_mut("skills") {
        for (i, skill) in skills.iter_mut().enumerate() {
            if let Some(skill) = skill.as_object_mut() {
                map_security(skill, &format!("skills[{i}]."), uncovered)?;
            }
        }
    }

    // securitySchemes[*].type → the oneof wrapper (apiKey's `in` becomes `location`).
    if let Some(Value::Object(schemes)) = card.get_mut("securitySchemes") {
        for scheme in schemes.values_mut() {
            let Some(obj) = scheme.as_object_mut() else {
                continue;
            };
            let wrapper = match obj.get("type").and_then(Value::as_str) {
                Some("apiKey") => "apiKeySecurityScheme",
                Some("http") => "httpAuthSecurityScheme",
                Some("oauth2") => "oauth2SecurityScheme",
                Some("openIdConnect") => "openIdConnectSecurityScheme",
                Some("mutualTLS") => "mtlsSecurityScheme",
                _ => {
                    obj.remove("type");
                    continue;
                }
            };
            obj.remove("type");
            if wrapper == "apiKeySecurityScheme"
                && let Some(location) = obj.remove("in")
            {
                obj.insert("location".into(), location);
            }
            let inner = std::mem::take(obj);
            obj.insert(wrapper.into(), Value::Object(inner));
        }
    }
    Ok(card)
}

fn interface(url: Option<Value>, binding: Value, version: &Value) -> Value {
    let mut iface = Map::new();
    iface.insert("url".into(), url.unwrap_or(Value::Null));
    iface.insert("protocolBinding".into(), binding);
    iface.insert("protocolVersion".into(), version.clone());
    Value::Object(iface)
}

fn map_security(
    obj: &mut Map<String, Value>,
    path: &str,
    uncovered: &mut Vec<String>,
) -> Result<(), CanonicalError> {
    let Some(legacy) = obj.remove("security") else {
        return Ok(());
    };
    if obj.contains_key("securityRequirements") || legacy.is_null() {
        if !legacy.is_null() {
            uncovered.push(format!("{path}security"));
        }
        return Ok(());
    }
    let list = legacy
        .as_array()
        .ok_or_else(|| CanonicalError::Model(format!("{path}security is not an array")))?;
    let mapped = list
        .iter()
        .map(|req| {
            let req = req.as_object().ok_or_else(|| {
                CanonicalError::Model(format!("{path}security entries must be objects"))
            })?;
            let schemes: Map<String, Value> = req
                .iter()
                .map(|(name, scopes)| (name.clone(), serde_json::json!({ "list": scopes })))
                .collect();
            Ok(serde_json::json!({ "schemes": schemes }))
        })
        .collect::<Result<Vec<_>, CanonicalError>>()?;
    obj.insert("securityRequirements".into(), Value::Array(mapped));
    Ok(())
}

/// Python truthiness, as the SDK's `if main_url` and `if flag` use it.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Step 2 for one message: known fields only, read as their kind, in their JSON names.
fn read_message(
    obj: &Map<String, Value>,
    fields: &'static [Field],
    path: &str,
    uncovered: &mut Vec<String>,
) -> Result<Map<String, Value>, CanonicalError> {
    let mut out = Map::new();
    let mut oneof_set: Option<&str> = None;
    for (key, value) in obj {
        let Some(field) = fields.iter().find(|f| f.name == key || f.proto == key) else {
            uncovered.push(format!("{path}{key}"));
            continue;
        };
        if out.contains_key(field.name) {
            return Err(CanonicalError::Model(format!(
                "{path}{} is given twice",
                field.name
            )));
        }
        let here = format!("{path}{}", field.name);
        // ProtoJSON: null means "not set" for every field kind used here.
        if value.is_null() {
            continue;
        }
        if field.oneof {
            if let Some(other) = oneof_set {
                return Err(CanonicalError::Model(format!(
                    "{here} and {path}{other} are both set, but only one may be"
                )));
            }
            oneof_set = Some(field.name);
        }
        if let Some(read) = read_value(value, field.kind, &here, uncovered)? {
            out.insert(field.name.to_string(), read);
        }
    }
    Ok(out)
}

/// One value read as its model `kind` says, in the proto JSON form the SDK signs.
///
/// Long on purpose: one arm per kind of the model, each a few lines; the match is the table.
fn read_value(
    value: &Value,
    kind: Kind,
    path: &str,
    uncovered: &mut Vec<String>,
) -> Result<Option<Value>, CanonicalError> {
    let wrong = |what: &str| CanonicalError::Model(format!("{path} is not {what}"));
    Ok(match kind {
        Str => Some(Value::String(
            value.as_str().ok_or_else(|| wrong("a string"))?.to_string(),
        )),
        Bool => {
            let b = value.as_bool().ok_or_else(|| wrong("a boolean"))?;
            // Implicit presence: the default is not serialized.
            b.then_some(Value::Bool(true))
        }
        OptBool => Some(Value::Bool(
            value.as_bool().ok_or_else(|| wrong("a boolean"))?,
        )),
        RepeatedStr => {
            let list = value.as_array().ok_or_else(|| wrong("an array"))?;
            let items = list
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_str()
                        .map(|s| Value::String(s.to_string()))
                        .ok_or_else(|| {
                            CanonicalError::Model(format!("{path}[{i}] is not a string"))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(Value::Array(items))
        }
        Message(fields) => {
            let obj = value.as_object().ok_or_else(|| wrong("an object"))?;
            Some(Value::Object(read_message(
                obj,
                fields,
                &format!("{path}."),
                uncovered,
            )?))
        }
        RepeatedMessage(fields) => {
            let list = value.as_array().ok_or_else(|| wrong("an array"))?;
            let items = list
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let here = format!("{path}[{i}]");
                    let obj = v
                        .as_object()
                        .ok_or_else(|| CanonicalError::Model(format!("{here} is not an object")))?;
                    read_message(obj, fields, &format!("{here}."), uncovered).map(Value::Object)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(Value::Array(items))
        }
        MapOfMessage(fields) => {
            let obj = value.as_object().ok_or_else(|| wrong("an object"))?;
            let mut out = Map::new();
            for (k, v) in obj {
                let here = format!("{path}.{k}");
                let inner = v
                    .as_object()
                    .ok_or_else(|| CanonicalError::Model(format!("{here} is not an object")))?;
                out.insert(
                    k.clone(),
                    Value::Object(read_message(inner, fields, &format!("{here}."), uncovered)?),
                );
            }
            Some(Value::Object(out))
        }
        MapOfStr => {
            let obj = value.as_object().ok_or_else(|| wrong("an object"))?;
            let mut out = Map::new();
            for (k, v) in obj {
                let s = v
                    .as_str()
                    .ok_or_else(|| CanonicalError::Model(format!("{path}.{k} is not a string")))?;
                out.insert(k.clone(), Value::String(s.to_string()));
            }
            Some(Value::Object(out))
        }
        Struct => {
            value.as_object().ok_or_else(|| wrong("an object"))?;
            Some(doubles(value))
        }
    })
}

/// A Struct's numbers are doubles after a protobuf round trip.
fn doubles(v: &Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(Number::from_f64)
            .map_or_else(|| v.clone(), Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(doubles).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), doubles(v))).collect())
        }
        other => other.clone(),
    }
}

/// Nesting the SDKs accept (a2a-sdk `_jcs.MAX_DEPTH`).
const MAX_DEPTH: usize = 128;

/// Step 3: drop `""`, `[]`, `{}` and `null`, repeatedly upward. A container that held something
/// and is dropped because all of it was empty is reported (the outermost one only): its
/// existence is not signed, for example a security requirement with empty scopes.
fn clean_empty(
    v: Value,
    path: &str,
    depth: usize,
    uncovered: &mut Vec<String>,
) -> Result<Option<Value>, CanonicalError> {
    if matches!(v, Value::Object(_) | Value::Array(_)) && depth > MAX_DEPTH {
        return Err(jcs::JcsError::TooDeep.into());
    }
    Ok(match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Object(map) => {
            let had_entries = !map.is_empty();
            let reported_before = uncovered.len();
            let mut out = Map::new();
            for (k, item) in map {
                let here = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if let Some(kept) = clean_empty(item, &here, depth + 1, uncovered)? {
                    out.insert(k, kept);
                }
            }
            if out.is_empty() {
                if had_entries && !path.is_empty() {
                    uncovered.truncate(reported_before);
                    uncovered.push(path.to_string());
                }
                None
            } else {
                Some(Value::Object(out))
            }
        }
        Value::Array(items) => {
            let had_items = !items.is_empty();
            let reported_before = uncovered.len();
            let mut out = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                if let Some(kept) =
                    clean_empty(item, &format!("{path}[{i}]"), depth + 1, uncovered)?
                {
                    out.push(kept);
                }
            }
            if out.is_empty() {
                if had_items {
                    uncovered.truncate(reported_before);
                    uncovered.push(path.to_string());
                }
                None
            } else {
                Some(Value::Array(out))
            }
        }
        other => Some(other),
    })
}

#[cfg(test)]
mod tests;
