//! The optional A2A capabilities a caller can depend on, each gated behind its own probe.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How one capability fared in a probe run: what the probe judged, and what decisions read.
/// Reasons are boxed: the read model holds three outcomes per subject (issue 30).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum CapabilityOutcome {
    Passed,
    Failed { reason: Box<str> },
    NotAdvertised,
    NotExercised { reason: Box<str> },
}

/// A card capability flag whose semantics cardgate verifies by probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Capability {
    #[serde(rename = "streaming")]
    Streaming,
    #[serde(rename = "pushNotifications")]
    PushNotifications,
    /// Exists only on v0.2/v0.3 cards; removed in A2A v1.0 (#1396).
    #[serde(rename = "stateTransitionHistory")]
    StateTransitionHistory,
}

impl Capability {
    pub const ALL: [Capability; 3] = [
        Capability::Streaming,
        Capability::PushNotifications,
        Capability::StateTransitionHistory,
    ];

    /// The name as it appears in `capabilities` on a card and in `requires=` queries.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Streaming => "streaming",
            Capability::PushNotifications => "pushNotifications",
            Capability::StateTransitionHistory => "stateTransitionHistory",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown capability `{0}`; expected one of streaming, pushNotifications, stateTransitionHistory"
)]
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCapability(s.to_string()))
    }
}

impl Capability {
    /// Its place in [`Capability::ALL`] (and in `Ord`).
    const fn index(self) -> usize {
        self as usize
    }
}

/// A value per capability, held inline: one slot each, in [`Capability::ALL`]'s order, which
/// is the order a `BTreeMap` keeps them in (and serializes them in). Decisions hold several
/// per subject; a `BTreeMap`'s node is a heap allocation of some hundreds of bytes for at most
/// three entries (issue 30: a read model of at most 1 KB per subject).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CapabilityMap<V>([Option<V>; 3]);

impl<V> Default for CapabilityMap<V> {
    fn default() -> Self {
        Self([None, None, None])
    }
}

impl<V> CapabilityMap<V> {
    pub fn get(&self, capability: &Capability) -> Option<&V> {
        self.0[capability.index()].as_ref()
    }

    /// Sets `capability`'s value; the value it had.
    pub fn insert(&mut self, capability: Capability, value: V) -> Option<V> {
        self.0[capability.index()].replace(value)
    }

    pub fn remove(&mut self, capability: &Capability) -> Option<V> {
        self.0[capability.index()].take()
    }

    /// `capability`'s value, set to `value` first if it had none (a `BTreeMap` entry's
    /// `or_insert`).
    pub fn get_or_insert(&mut self, capability: Capability, value: V) -> &mut V {
        self.0[capability.index()].get_or_insert(value)
    }

    pub fn clear(&mut self) {
        self.0 = [None, None, None];
    }

    pub fn contains_key(&self, capability: &Capability) -> bool {
        self.0[capability.index()].is_some()
    }

    /// The capabilities that have a value, with it, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&'static Capability, &V)> + Clone {
        Capability::ALL
            .iter()
            .zip(&self.0)
            .filter_map(|(c, v)| v.as_ref().map(|v| (c, v)))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &'static Capability> + Clone {
        self.iter().map(|(c, _)| c)
    }

    pub fn len(&self) -> usize {
        self.0.iter().filter(|v| v.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

impl<V> FromIterator<(Capability, V)> for CapabilityMap<V> {
    fn from_iter<I: IntoIterator<Item = (Capability, V)>>(iter: I) -> Self {
        let mut map = Self::default();
        map.extend(iter);
        map
    }
}

impl<V> Extend<(Capability, V)> for CapabilityMap<V> {
    fn extend<I: IntoIterator<Item = (Capability, V)>>(&mut self, iter: I) {
        for (capability, value) in iter {
            self.insert(capability, value);
        }
    }
}

impl<V: fmt::Debug> fmt::Debug for CapabilityMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Serialize> Serialize for CapabilityMap<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for CapabilityMap<V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through a BTreeMap: only at load, and it refuses what a map of capabilities would.
        let map = std::collections::BTreeMap::<Capability, V>::deserialize(deserializer)?;
        Ok(map.into_iter().collect())
    }
}

/// A set of capabilities, a bit each: what a `BTreeSet<Capability>` held, in one byte.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CapabilitySet(u8);

impl CapabilitySet {
    pub fn insert(&mut self, capability: Capability) {
        self.0 |= 1 << capability.index();
    }

    pub fn contains(&self, capability: &Capability) -> bool {
        self.0 & (1 << capability.index()) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The capabilities in the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'static Capability> + use<> {
        let bits = self.0;
        Capability::ALL
            .iter()
            .filter(move |c| bits & (1 << c.index()) != 0)
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let mut set = Self::default();
        for capability in iter {
            set.insert(capability);
        }
        set
    }
}

impl fmt::Debug for CapabilitySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests;
