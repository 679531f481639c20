//! From a card's JSON to [`NormalizedCard`], with errors that name the exact field.

use serde_json::{Map, Value};

use super::{CardCapabilities, CardInterface, Generation, NormalizedCard, SkillSummary};
use crate::version::ProtocolVersion;

/// What is wrong with a card, and where (`supportedInterfaces[1].protocolVersion is missing`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} {problem}")]
pub struct CardError {
    pub path: String,
    pub problem: String,
}

impl CardError {
    fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            problem: problem.into(),
        }
    }
}

/// Fields of the v1.0 `AgentCard` (a2a.proto).
const V1_TOP_LEVEL: [&str; 14] = [
    "name",
    "description",
    "supportedInterfaces",
    "provider",
    "version",
    "documentationUrl",
    "capabilities",
    "securitySchemes",
    "securityRequirements",
    "defaultInputModes",
    "defaultOutputModes",
    "skills",
    "signatures",
    "iconUrl",
];

/// Parses and validates a card document.
pub fn parse_card(card: &Value) -> Result<NormalizedCard, CardError> {
    let obj = card
        .as_object()
        .ok_or_else(|| CardError::new("card", "is not a JSON object"))?;
    let name = required_str(obj, "name", "name")?;
    let has_interfaces = obj.contains_key("supportedInterfaces");
    let has_legacy = obj.contains_key("url") || obj.contains_key("protocolVersion");

    let (generation, interfaces) = if has_interfaces {
        let generation = if has_legacy {
            Generation::Hybrid
        } else {
            Generation::V1
        };
        (generation, v1_interfaces(obj)?)
    } else if obj.contains_key("url") {
        legacy_interfaces(obj)?
    } else {
        return Err(CardError::new(
            "supportedInterfaces",
            "is missing (and there is no legacy top-level `url` either)",
        ));
    };

    let capabilities = capabilities(obj)?;
    let skills = skills(obj)?;
    let legacy_fields = obj
        .keys()
        .filter(|k| match generation {
            Generation::V1 | Generation::Hybrid => !V1_TOP_LEVEL.contains(&k.as_str()),
            Generation::V03 | Generation::V02 => false,
        })
        .cloned()
        .collect();
    Ok(NormalizedCard {
        generation,
        name,
        description: optional_str(obj, "description", "description")?,
        agent_version: optional_str(obj, "version", "version")?,
        interfaces,
        capabilities,
        skills,
        default_input_modes: string_list(obj, "defaultInputModes")?,
        default_output_modes: string_list(obj, "defaultOutputModes")?,
        legacy_fields,
        security: super::security::card_security(obj),
    })
}

fn v1_interfaces(obj: &Map<String, Value>) -> Result<Vec<CardInterface>, CardError> {
    let list = obj["supportedInterfaces"]
        .as_array()
        .ok_or_else(|| CardError::new("supportedInterfaces", "is not an array"))?;
    if list.is_empty() {
        return Err(CardError::new(
            "supportedInterfaces",
            "is empty; a card must offer at least one interface",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let path = format!("supportedInterfaces[{i}]");
            let iface = item
                .as_object()
                .ok_or_else(|| CardError::new(&path, "is not an object"))?;
            let version_text =
                required_str(iface, "protocolVersion", &format!("{path}.protocolVersion"))?;
            Ok(CardInterface {
                url: required_str(iface, "url", &format!("{path}.url"))?,
                binding: required_str(
                    iface,
                    "protocolBinding",
                    &format!("{path}.protocolBinding"),
                )?,
                version: version(&version_text, &format!("{path}.protocolVersion"))?,
                tenant: optional_str(iface, "tenant", &format!("{path}.tenant"))?
                    .filter(|t| !t.is_empty()),
            })
        })
        .collect()
}

/// v0.2/v0.3: one main interface (`url` + `preferredTransport`, default JSONRPC) plus
/// `additionalInterfaces[]`, all at the card's `protocolVersion`.
fn legacy_interfaces(
    obj: &Map<String, Value>,
) -> Result<(Generation, Vec<CardInterface>), CardError> {
    let (generation, version) = match optional_str(obj, "protocolVersion", "protocolVersion")? {
        // protocolVersion appeared in 0.2.5; earlier 0.2.x cards have none.
        None => (Generation::V02, ProtocolVersion::new(0, 2)),
        Some(text) => {
            let v = version(&text, "protocolVersion")?;
            if !v.is_pre_1_0() {
                return Err(CardError::new(
                    "supportedInterfaces",
                    format!(
                        "is missing, but protocolVersion {text} requires it (v1.0 cards list interfaces)"
                    ),
                ));
            }
            (
                if v.minor >= 3 {
                    Generation::V03
                } else {
                    Generation::V02
                },
                v,
            )
        }
    };
    let main = CardInterface {
        url: required_str(obj, "url", "url")?,
        binding: optional_str(obj, "preferredTransport", "preferredTransport")?
            .unwrap_or_else(|| "JSONRPC".into()),
        version,
        tenant: None,
    };
    let mut interfaces = vec![main];
    if let Some(extra) = obj.get("additionalInterfaces").filter(|v| !v.is_null()) {
        let list = extra
            .as_array()
            .ok_or_else(|| CardError::new("additionalInterfaces", "is not an array"))?;
        for (i, item) in list.iter().enumerate() {
            let path = format!("additionalInterfaces[{i}]");
            let iface = item
                .as_object()
                .ok_or_else(|| CardError::new(&path, "is not an object"))?;
            let candidate = CardInterface {
                url: required_str(iface, "url", &format!("{path}.url"))?,
                binding: required_str(iface, "transport", &format!("{path}.transport"))?,
                version,
                tenant: None,
            };
            // 0.3 cards often repeat the main interface here.
            if !interfaces.contains(&candidate) {
                interfaces.push(candidate);
            }
        }
    }
    Ok((generation, interfaces))
}

fn capabilities(obj: &Map<String, Value>) -> Result<CardCapabilities, CardError> {
    let Some(caps) = obj.get("capabilities").filter(|v| !v.is_null()) else {
        return Ok(CardCapabilities {
            extended_agent_card: flag(
                obj,
                "supportsAuthenticatedExtendedCard",
                "supportsAuthenticatedExtendedCard",
            )?,
            ..CardCapabilities::default()
        });
    };
    let caps = caps
        .as_object()
        .ok_or_else(|| CardError::new("capabilities", "is not an object"))?;
    Ok(CardCapabilities {
        streaming: flag(caps, "streaming", "capabilities.streaming")?,
        push_notifications: flag(caps, "pushNotifications", "capabilities.pushNotifications")?,
        state_transition_history: flag(
            caps,
            "stateTransitionHistory",
            "capabilities.stateTransitionHistory",
        )?,
        extended_agent_card: flag(caps, "extendedAgentCard", "capabilities.extendedAgentCard")?
            || flag(
                obj,
                "supportsAuthenticatedExtendedCard",
                "supportsAuthenticatedExtendedCard",
            )?,
    })
}

fn skills(obj: &Map<String, Value>) -> Result<Vec<SkillSummary>, CardError> {
    let Some(list) = obj.get("skills").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| CardError::new("skills", "is not an array"))?;
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let path = format!("skills[{i}]");
            let skill = item
                .as_object()
                .ok_or_else(|| CardError::new(&path, "is not an object"))?;
            Ok(SkillSummary {
                id: required_str(skill, "id", &format!("{path}.id"))?,
                name: optional_str(skill, "name", &format!("{path}.name"))?,
            })
        })
        .collect()
}

fn string_list(obj: &Map<String, Value>, key: &str) -> Result<Vec<String>, CardError> {
    let Some(value) = obj.get(key).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = value
        .as_array()
        .ok_or_else(|| CardError::new(key, "is not an array"))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| CardError::new(format!("{key}[{i}]"), "is not a string"))
        })
        .collect()
}

fn required_str(obj: &Map<String, Value>, key: &str, path: &str) -> Result<String, CardError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(CardError::new(path, "is missing")),
        Some(Value::String(s)) if s.trim().is_empty() => Err(CardError::new(path, "is empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(CardError::new(path, "is not a string")),
    }
}

fn optional_str(
    obj: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, CardError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(CardError::new(path, "is not a string")),
    }
}

fn flag(obj: &Map<String, Value>, key: &str, path: &str) -> Result<bool, CardError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(CardError::new(path, "is not a boolean")),
    }
}

fn version(text: &str, path: &str) -> Result<ProtocolVersion, CardError> {
    ProtocolVersion::parse_lenient(text).map_err(|_| {
        CardError::new(
            path,
            format!("`{text}` is not a protocol version (Major.Minor)"),
        )
    })
}

#[cfg(test)]
mod tests;
