//! `google.protobuf.Timestamp` with the proto3 JSON mapping done to the letter.
//!
//! On the gRPC wire a status timestamp is two integers, not text; the transcript and the checks
//! read it through its JSON mapping, which the protobuf specification fixes: RFC 3339,
//! normalized to `Z`, with 0, 3, 6 or 9 fractional digits. (pbjson's own type writes `+00:00`,
//! which the timestamp-format check would blame on the agent.) A value no RFC 3339 text can
//! carry (out of the year 1–9999 range, or nanos outside 0..1e9) is written as a description
//! that the checks reject as a timestamp, so the evidence keeps what was sent.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Seconds and nanoseconds since the Unix epoch, as `google.protobuf.Timestamp` encodes them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, ::prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// The earliest and latest seconds the mapping allows (0001-01-01, 9999-12-31T23:59:59).
const MIN_SECONDS: i64 = -62_135_596_800;
const MAX_SECONDS: i64 = 253_402_300_799;

impl Timestamp {
    /// The instant, when it is one RFC 3339 can write.
    pub fn instant(&self) -> Option<DateTime<Utc>> {
        let nanos = u32::try_from(self.nanos)
            .ok()
            .filter(|n| *n < 1_000_000_000)?;
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&self.seconds) {
            return None;
        }
        DateTime::from_timestamp(self.seconds, nanos)
    }

    /// The proto3 JSON text.
    pub fn to_json_text(&self) -> String {
        match self.instant() {
            Some(at) => {
                let digits = match self.nanos {
                    0 => SecondsFormat::Secs,
                    n if n % 1_000_000 == 0 => SecondsFormat::Millis,
                    n if n % 1_000 == 0 => SecondsFormat::Micros,
                    _ => SecondsFormat::Nanos,
                };
                at.to_rfc3339_opts(digits, true)
            }
            None => format!(
                "(not a valid Timestamp: seconds={}, nanos={})",
                self.seconds, self.nanos
            ),
        }
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(at: DateTime<Utc>) -> Self {
        Self {
            seconds: at.timestamp(),
            nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_json_text())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 timestamp")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Timestamp, E> {
                DateTime::parse_from_rfc3339(text)
                    .map(|at| Timestamp::from(at.with_timezone(&Utc)))
                    .map_err(|e| E::custom(format!("`{text}`: {e}")))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(seconds: i64, nanos: i32) -> String {
        Timestamp { seconds, nanos }.to_json_text()
    }

    #[test]
    fn writes_z_with_0_3_6_or_9_digits() {
        assert_eq!(text(1_780_000_000, 0), "2026-05-28T20:26:40Z");
        assert_eq!(text(1_780_000_000, 21_000_000), "2026-05-28T20:26:40.021Z");
        assert_eq!(
            text(1_780_000_000, 21_500_000),
            "2026-05-28T20:26:40.021500Z"
        );
        assert_eq!(text(1_780_000_000, 1), "2026-05-28T20:26:40.000000001Z");
    }

    #[test]
    fn values_no_text_can_carry_are_described_not_dropped() {
        assert!(text(MAX_SECONDS + 1, 0).starts_with("(not a valid Timestamp"));
        assert!(text(0, -1).starts_with("(not a valid Timestamp"));
        assert!(text(0, 1_000_000_000).starts_with("(not a valid Timestamp"));
    }

    #[test]
    fn reads_any_offset_back_to_the_same_instant() {
        let t: Timestamp = serde_json::from_str("\"2026-05-28T22:26:40.5+02:00\"").expect("parses");
        assert_eq!(
            t,
            Timestamp {
                seconds: 1_780_000_000,
                nanos: 500_000_000
            }
        );
        assert!(serde_json::from_str::<Timestamp>("\"yesterday\"").is_err());
    }
}
