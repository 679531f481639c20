//! One cycle against one interface of a card: choosing the interface, presenting credentials,
//! running the cycle and judging what it saw. Shared by the service and `cardgate probe`.

use std::collections::BTreeSet;

use serde_json::Value;
use url::Url;

use crate::domain::binding::Binding;
use crate::domain::capability::Capability;
use crate::domain::card::{CardInterface, NormalizedCard};
use crate::domain::probe::{AccessBlock, ExtendedCard, Judgement, Observations, ProbeScript};
use crate::domain::version::ProtocolVersion;
use crate::remote::Outbound;
use crate::remote::a2a::{A2aClient, Wire};

use super::credentials::{Credentials, FetchedCard};
use super::credentials::{certificate_refused, extended_card};
use super::cycle::{Cycle, Target};
use super::progress::{Progress, Redacting, redacted};
use super::push::PushInbox;
use super::settings::ProbeSettings;

/// The outcome of a cycle against one interface.
pub struct CycleOutput {
    pub interface: CardInterface,
    pub wire: Wire,
    pub observations: Observations,
    pub judgement: Judgement,
    pub transcript: Value,
    /// The authenticated extended card as fetched, and how it was judged.
    pub extended_card: Option<FetchedCard>,
}

/// The interface to probe for `version`: the one over `wanted` when asked, else the first
/// in [`Binding::PREFERRED`] order that cardgate speaks.
pub fn choose_interface(
    card: &NormalizedCard,
    version: ProtocolVersion,
    wanted: Option<Binding>,
) -> Result<(CardInterface, Wire), String> {
    let offered: Vec<&CardInterface> = card
        .interfaces
        .iter()
        .filter(|i| i.version == version)
        .collect();
    if offered.is_empty() {
        return Err(format!("the card offers no interface for {version}"));
    }
    let bindings = || {
        offered
            .iter()
            .map(|i| i.binding.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let order: &[Binding] = match &wanted {
        Some(b) => std::slice::from_ref(b),
        None => &Binding::PREFERRED,
    };
    for binding in order {
        if let Some(i) = offered.iter().find(|i| binding.names(&i.binding)) {
            match Wire::for_interface(version, *binding) {
                Some(wire) => return Ok(((*i).clone(), wire)),
                None if wanted.is_some() => {
                    return Err(format!("cardgate does not speak {binding} for {version}"));
                }
                None => {}
            }
        }
    }
    Err(match wanted {
        Some(b) => format!(
            "the card offers no {b} interface for {version} (bindings: {})",
            bindings()
        ),
        None => format!(
            "cardgate cannot speak any {version} interface on the card (bindings: {})",
            bindings()
        ),
    })
}

/// What one cycle needs: where to send, how, what the card offers, and where to report.
pub struct CycleInput<'a> {
    pub outbound: &'a Outbound,
    pub settings: &'a ProbeSettings,
    pub card: &'a NormalizedCard,
    pub version: ProtocolVersion,
    /// Probe the interface over this binding instead of the preferred one.
    pub binding: Option<Binding>,
    pub script: &'a ProbeScript,
    /// cardgate's webhook for the run and its token, when push can be probed.
    pub push: Option<(Url, String)>,
    pub inbox: &'a dyn PushInbox,
    pub progress: &'a dyn Progress,
    pub credentials: &'a Credentials,
}

/// Runs one cycle: the part shared by the service and `cardgate probe`.
pub async fn probe_interface(input: CycleInput<'_>) -> Result<CycleOutput, String> {
    let CycleInput {
        outbound,
        settings,
        card,
        version,
        binding,
        script,
        push,
        inbox,
        progress,
        credentials,
    } = input;
    let (interface, wire) = choose_interface(card, version, binding)?;
    let url = interface
        .location()
        .map_err(|e| format!("interface URL {}: {e}", interface.url))?;
    let advertised: BTreeSet<Capability> = card.advertised_for(version);
    let presented = match credentials.present(outbound, &card.security) {
        Ok(presented) => presented,
        Err(block) => {
            // Nothing is sent: a call without the credentials the card requires proves
            // nothing about the lifecycle (docs/trust-model.md, "Gate states").
            progress.step(&format!(
                "not probing {version} at {}: {}",
                interface.url,
                block.reason()
            ));
            let mut observations = Observations::default();
            observations.access.blocked = Some(block);
            let judgement = settings.rulebook.judge(&observations, version, &advertised);
            return Ok(CycleOutput {
                interface,
                wire,
                observations,
                judgement,
                transcript: Value::Array(Vec::new()),
                extended_card: None,
            });
        }
    };
    progress.step(&format!(
        "probing {version} at {} over {} ({}){}",
        interface.url,
        interface.binding,
        wire.as_str(),
        presented
            .as_ref()
            .map(|(_, _, how)| format!(": {how}"))
            .unwrap_or_default()
    ));
    let (mut client, auth, presented) = match presented {
        None => (
            A2aClient::new(
                outbound.clone(),
                url.clone(),
                wire,
                version,
                settings.limits,
            ),
            None,
            None,
        ),
        Some((auth, outbound, how)) => (
            A2aClient::new(outbound, url.clone(), wire, version, settings.limits)
                .with_auth(auth.clone()),
            Some(auth),
            Some(how),
        ),
    };
    // The extended card, for authenticated callers only: fetched when credentials are
    // presented, and judged by in place of the public card's capabilities.
    let mut advertised = advertised;
    let mut extended = None;
    let mut fetched_card = None;
    if card.capabilities.extended_agent_card {
        extended = Some(match (&auth, &credentials.cards) {
            (Some(_), Some(check)) => {
                let (outcome, card, fetched) = extended_card(&mut client, check, &url).await;
                if let Some(card) = card {
                    advertised = card.advertised_for(version);
                }
                fetched_card = fetched;
                outcome
            }
            _ => ExtendedCard::Skipped {
                reason: "the card offers an extended card to authenticated callers, and no credentials are presented".into(),
            },
        });
    }
    let target = Target {
        advertised: &advertised,
        script,
        push,
    };
    let redacting;
    let progress: &dyn Progress = match &auth {
        Some(auth) => {
            redacting = Redacting {
                inner: progress,
                auth,
            };
            &redacting
        }
        None => progress,
    };
    let mut observations = Cycle::new(&mut client, settings, progress)
        .run(&target, inbox)
        .await;
    observations.transcript_omitted = client.omitted().map(|o| {
        format!(
            "{} exchanges, {} bodies and {} stream events ({} bytes) were left out of the transcript",
            o.exchanges, o.bodies, o.frames, o.bytes
        )
    });
    observations.access.presented = presented;
    observations.extended_card = extended;
    let refused = client.refused().map(str::to_string).or_else(|| {
        auth.as_ref()
            .filter(|a| a.identity().is_some())
            .and_then(|_| certificate_refused(client.transcript()))
    });
    if let Some(reason) = refused {
        progress.step(&format!("  ! credentials refused: {reason}"));
        observations.access.blocked = Some(AccessBlock::Refused { reason });
    }
    let mut transcript = serde_json::to_value(client.transcript()).unwrap_or(Value::Null);
    if let Some(auth) = &auth {
        observations = redacted(observations, auth);
        transcript = redacted(transcript, auth);
    }
    let judgement = settings.rulebook.judge(&observations, version, &advertised);
    Ok(CycleOutput {
        interface,
        wire,
        observations,
        judgement,
        transcript,
        extended_card: fetched_card,
    })
}

#[cfg(test)]
mod tests;
