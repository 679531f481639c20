//! `Major.Minor` protocol versions: the second half of a subject's identity.
//!
//! A2A puts the version on each interface (`supportedInterfaces[].protocolVersion`, v1.0) or on
//! the card (`protocolVersion`, v0.2.5+), sometimes with a patch ("0.3.0"). The patch never
//! matters for compatibility (A2A v1.0 §3.6.2), so a subject is keyed on `Major.Minor`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A protocol version reduced to `Major.Minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolVersion {
    pub major: u16,
    pub minor: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("`{0}` is not a version of the form Major.Minor (for example 1.0)")]
    Malformed(String),
    #[error("`{0}` names only a major version; give Major.Minor (for example {0}.0)")]
    MajorOnly(String),
}

impl ProtocolVersion {
    pub const fn new(major: u16, minor: u16) -> Self {
        Self { major, minor }
    }

    /// Parses exactly `Major.Minor`, as a caller must state its own version.
    pub fn parse_exact(s: &str) -> Result<Self, VersionError> {
        let (major, minor) = s.split_once('.').ok_or_else(|| {
            if parse_component(s).is_some() {
                VersionError::MajorOnly(s.to_string())
            } else {
                VersionError::Malformed(s.to_string())
            }
        })?;
        match (parse_component(major), parse_component(minor)) {
            (Some(major), Some(minor)) => Ok(Self { major, minor }),
            _ => Err(VersionError::Malformed(s.to_string())),
        }
    }

    /// Parses a version as cards write it: `Major.Minor` or `Major.Minor.Patch`, patch dropped.
    pub fn parse_lenient(s: &str) -> Result<Self, VersionError> {
        let mut parts = s.trim().split('.');
        let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
            return Self::parse_exact(s.trim());
        };
        let patch_ok = match parts.next() {
            None => true,
            Some(patch) => parse_component(patch).is_some() && parts.next().is_none(),
        };
        match (parse_component(major), parse_component(minor), patch_ok) {
            (Some(major), Some(minor), true) => Ok(Self { major, minor }),
            _ => Err(VersionError::Malformed(s.to_string())),
        }
    }

    /// v0.x cards are the generation that still had `stateTransitionHistory`.
    pub fn is_pre_1_0(self) -> bool {
        self.major == 0
    }
}

fn parse_component(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for ProtocolVersion {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_exact(s)
    }
}

impl Serialize for ProtocolVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse_exact(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_parsing_accepts_only_major_minor() {
        let table = [
            ("1.0", Ok(ProtocolVersion::new(1, 0))),
            ("0.3", Ok(ProtocolVersion::new(0, 3))),
            ("10.12", Ok(ProtocolVersion::new(10, 12))),
            ("1", Err(VersionError::MajorOnly("1".into()))),
            ("1.0.0", Err(VersionError::Malformed("1.0.0".into()))),
            ("", Err(VersionError::Malformed("".into()))),
            ("a.b", Err(VersionError::Malformed("a.b".into()))),
            ("1.", Err(VersionError::Malformed("1.".into()))),
            ("-1.0", Err(VersionError::Malformed("-1.0".into()))),
            ("+1.0", Err(VersionError::Malformed("+1.0".into()))),
            ("99999.0", Err(VersionError::Malformed("99999.0".into()))),
        ];
        for (input, expected) in table {
            assert_eq!(ProtocolVersion::parse_exact(input), expected, "{input:?}");
        }
    }

    #[test]
    fn lenient_parsing_drops_the_patch() {
        assert_eq!(
            ProtocolVersion::parse_lenient("0.3.0"),
            Ok(ProtocolVersion::new(0, 3))
        );
        assert_eq!(
            ProtocolVersion::parse_lenient("0.2.6"),
            Ok(ProtocolVersion::new(0, 2))
        );
        assert_eq!(
            ProtocolVersion::parse_lenient("1.0"),
            Ok(ProtocolVersion::new(1, 0))
        );
        assert!(ProtocolVersion::parse_lenient("1.0.0.0").is_err());
        assert!(ProtocolVersion::parse_lenient("1").is_err());
    }

    #[test]
    fn displays_as_major_minor() {
        assert_eq!(ProtocolVersion::new(1, 0).to_string(), "1.0");
    }
}
