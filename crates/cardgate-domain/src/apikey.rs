//! API keys and roles: who may do what.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ids::ApiKeyId;
use super::time::Timestamp;

/// Roles, ordered: each includes what the ones below it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Read decisions, callees, the ledger.
    Reader,
    /// Also submit violation reports.
    Reporter,
    /// Also manage callees, probes, jobs and keys.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Reporter => "reporter",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Role::Reader, Role::Reporter, Role::Admin]
            .into_iter()
            .find(|r| r.as_str() == s)
    }

    /// Whether a caller with this role may do what `required` allows.
    pub fn allows(self, required: Role) -> bool {
        self >= required
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A key as stored (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub name: String,
    pub role: Role,
    pub prefix: String,
    pub key_hash: String,
    pub created_at: Timestamp,
    pub created_by: String,
    pub revoked_at: Option<Timestamp>,
}

/// A new key's secret, returned to its creator once.
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(****)")
    }
}

/// Length of the shown prefix.
const PREFIX_LEN: usize = 10;

/// A fresh key: `cg_` and 32 random bytes, base64url.
pub fn generate(name: &str, role: Role, created_by: &str, now: Timestamp) -> (ApiKey, Secret) {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("cg_{}", URL_SAFE_NO_PAD.encode(bytes));
    let key = ApiKey {
        id: ApiKeyId::new(),
        name: name.to_string(),
        role,
        prefix: secret[..PREFIX_LEN].to_string(),
        key_hash: hash(&secret),
        created_at: now,
        created_by: created_by.to_string(),
        revoked_at: None,
    };
    (key, Secret(secret))
}

/// The stored form of a key. Keys are 256 random bits, so a plain sha256 is enough: there is
/// nothing to brute-force, and lookups stay one indexed query.
pub fn hash(secret: &str) -> String {
    // Into a buffer, not through `hex::encode`'s char iterator: every authenticated request
    // hashes its key, and that iterator was a visible share of a decision's cost
    // (BENCHMARKS.md, issue 30).
    let mut out = [0; 64];
    hex::encode_to_slice(Sha256::digest(secret.as_bytes()), &mut out)
        .expect("32 bytes are 64 hex digits");
    String::from_utf8_lossy(&out).into_owned()
}

pub const MAX_NAME_LEN: usize = 100;

pub fn validate_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_LEN {
        return Err(format!("name must be 1 to {MAX_NAME_LEN} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("name must not contain control characters".into());
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_the_ones_below() {
        assert!(Role::Admin.allows(Role::Reporter) && Role::Admin.allows(Role::Reader));
        assert!(Role::Reporter.allows(Role::Reader) && !Role::Reporter.allows(Role::Admin));
        assert!(!Role::Reader.allows(Role::Reporter));
    }

    #[test]
    fn keys_are_random_and_stored_only_as_hashes() {
        let (a, secret_a) = generate("a", Role::Reader, "cli", crate::time::now());
        let (_, secret_b) = generate("b", Role::Reader, "cli", crate::time::now());
        assert_ne!(secret_a.0, secret_b.0);
        assert!(secret_a.0.starts_with("cg_") && secret_a.0.len() == 46);
        assert_eq!(a.key_hash, hash(&secret_a.0));
        assert!(!a.key_hash.contains(&secret_a.0[3..]));
        assert!(secret_a.0.starts_with(&a.prefix));
        assert_eq!(format!("{secret_a:?}"), "Secret(****)");
    }

    #[test]
    fn a_hash_is_the_lowercase_hex_sha256_stored_keys_were_made_with() {
        // FIPS 180-2's "abc" vector.
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
