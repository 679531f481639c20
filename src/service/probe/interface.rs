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
use crate::remote::a2a::{A2aClient, CallLimits, Wire};
use crate::remote::presentation::Authenticator;

use super::credentials::{Credentials, FetchedCard};
use super::credentials::{certificate_refused, extended_card};
use super::cycle::{Cycle, Target};
use super::progress::{self, Progress, Redacting, redacted};
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
    let (outbound, auth, presented) = match presented {
        None => (outbound.clone(), None, None),
        Some((auth, outbound, how)) => (outbound, Some(auth), Some(how)),
    };
    // The run's transcript budget is shared equally by its trials.
    let trials = settings.trials.max(1);
    let limits = CallLimits {
        transcript_exchanges: (settings.limits.transcript_exchanges / trials as usize).max(1),
        transcript_bytes: settings.limits.transcript_bytes / trials as usize,
        ..settings.limits
    };
    let new_client = || {
        let client = A2aClient::new(outbound.clone(), url.clone(), wire, version, limits);
        match &auth {
            Some(auth) => client.with_auth(auth.clone()),
            None => client,
        }
    };
    let mut client = new_client();
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
    // Trial 1 is the whole cycle; the others run the lifecycle task alone, started with it,
    // each over its own client (its own calls and transcript).
    let mut others: Vec<A2aClient> = (1..trials).map(|_| new_client()).collect();
    let named: Vec<progress::Trial<'_>> = (2..)
        .take(others.len())
        .map(|n| progress::Trial { inner: progress, n })
        .collect();
    let first = Cycle::new(&mut client, settings, progress).run(&target, inbox);
    let rest = futures::future::join_all(
        others
            .iter_mut()
            .zip(&named)
            .map(|(client, progress)| Cycle::new(client, settings, progress).run_alone(&target)),
    );
    let (first, rest) = tokio::join!(first, rest);
    let mut observations = finish_trial(
        first,
        &client,
        auth.as_deref(),
        presented.as_deref(),
        progress,
    );
    observations.extended_card = extended;
    let mut transcript = trial_transcript(&client, None);
    for ((n, trial), (client, progress)) in (2..).zip(rest).zip(others.iter().zip(&named)) {
        observations.trials.push(finish_trial(
            trial,
            client,
            auth.as_deref(),
            presented.as_deref(),
            progress,
        ));
        if let (Value::Array(all), Value::Array(more)) =
            (&mut transcript, trial_transcript(client, Some(n)))
        {
            all.extend(more);
        }
    }
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

/// What a trial saw, completed by what its client knows: what its transcript left out, the
/// credentials it presented, and whether the callee refused them.
fn finish_trial(
    mut observations: Observations,
    client: &A2aClient,
    auth: Option<&Authenticator>,
    presented: Option<&str>,
    progress: &dyn Progress,
) -> Observations {
    observations.transcript_omitted = client.omitted().map(|o| {
        format!(
            "{} exchanges, {} bodies and {} stream events ({} bytes) were left out of the transcript",
            o.exchanges, o.bodies, o.frames, o.bytes
        )
    });
    observations.access.presented = presented.map(str::to_string);
    let refused = client.refused().map(str::to_string).or_else(|| {
        auth.filter(|a| a.identity().is_some())
            .and_then(|_| certificate_refused(client.transcript()))
    });
    if let Some(reason) = refused {
        progress.step(&format!("  ! credentials refused: {reason}"));
        observations.access.blocked = Some(AccessBlock::Refused { reason });
    }
    observations
}

/// A client's exchanges as the run records them; those of a further trial carry its number.
fn trial_transcript(client: &A2aClient, trial: Option<u32>) -> Value {
    let mut transcript = serde_json::to_value(client.transcript()).unwrap_or(Value::Null);
    if let (Some(n), Value::Array(exchanges)) = (trial, &mut transcript) {
        for exchange in exchanges {
            if let Value::Object(fields) = exchange {
                fields.insert("trial".into(), Value::from(n));
            }
        }
    }
    transcript
}

#[cfg(test)]
mod tests;
