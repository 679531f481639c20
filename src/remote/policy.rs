//! Which network addresses the registry may reach.
//!
//! Everything cardgate fetches is named by someone else (card URLs, `jku`, interface URLs,
//! push endpoints), so by default it never connects to loopback, private, link-local, CGNAT,
//! multicast, reserved or unspecified addresses, nor any other range of the IANA IPv4 and IPv6
//! special-purpose registries, with IPv4 embedded in IPv6 (mapped, compatible, SIIT, NAT64,
//! 6to4, Teredo) judged as the IPv4 address it carries. An operator can allow ranges
//! explicitly (`CARDGATE_ALLOW_NETWORKS`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::LazyLock;

use ipnet::IpNet;

/// The address policy plus optional fixed name → address mappings (like curl's `--resolve`).
#[derive(Debug, Clone, Default)]
pub struct NetworkPolicy {
    allowed: Vec<IpNet>,
    overrides: HashMap<String, Vec<IpAddr>>,
}

impl NetworkPolicy {
    /// A policy that also allows `allowed` ranges.
    pub fn new(allowed: Vec<IpNet>) -> Self {
        Self {
            allowed,
            overrides: HashMap::new(),
        }
    }

    /// Parses `CARDGATE_ALLOW_NETWORKS` (comma-separated CIDRs; bare addresses allowed).
    pub fn parse_allowed(text: &str) -> Result<Vec<IpNet>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!(
                            "`{s}` is not a network (expected CIDR like 127.0.0.0/8 or ::1/128)"
                        )
                    })
            })
            .collect()
    }

    /// Resolves `host` to these addresses instead of asking DNS. The addresses are still checked.
    pub fn with_override(mut self, host: &str, addrs: Vec<IpAddr>) -> Self {
        self.overrides.insert(host.to_ascii_lowercase(), addrs);
        self
    }

    pub fn override_for(&self, host: &str) -> Option<&[IpAddr]> {
        self.overrides
            .get(&host.to_ascii_lowercase())
            .map(Vec::as_slice)
    }

    /// `Err(reason)` if the registry must not connect to `addr`.
    pub fn check(&self, addr: IpAddr) -> Result<(), String> {
        if self.is_allowed(addr) {
            return Ok(());
        }
        match denied_range(addr) {
            None => Ok(()),
            Some(range) => Err(format!("{addr} is a {range} address")),
        }
    }

    /// Explicitly allowed by the operator (directly, or as the IPv4 address it embeds).
    pub fn is_allowed(&self, addr: IpAddr) -> bool {
        let embedded = embedded_v4(addr).map(IpAddr::V4);
        self.allowed
            .iter()
            .any(|net| net.contains(&addr) || embedded.is_some_and(|v4| net.contains(&v4)))
    }
}

/// The IPv4 address carried inside an IPv6 one, for every form that embeds one: mapped
/// (`::ffff:0:0/96`), compatible (`::/96`), SIIT (`::ffff:0:0:0/96`), NAT64 (`64:ff9b::/96`),
/// 6to4 (`2002::/16`) and Teredo (`2001::/32`, the client address, stored inverted).
fn embedded_v4(addr: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = addr else { return None };
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo]
        | [0, 0, 0, 0, 0, 0, hi, lo]
        | [0, 0, 0, 0, 0xffff, 0, hi, lo]
        | [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        [0x2001, 0, _, _, _, _, hi, lo] => Some(v4(!hi, !lo)),
        _ => None,
    }
}

/// The IANA IPv4 and IPv6 special-purpose address registries (every entry not globally
/// reachable), plus multicast and the deprecated site-local range; the most specific first so
/// that a reason names the narrowest range.
const DENIED: &[(&str, &str)] = &[
    ("0.0.0.0/8", "\"this network\" (0.0.0.0/8)"),
    ("10.0.0.0/8", "private (10.0.0.0/8)"),
    ("100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)"),
    ("127.0.0.0/8", "loopback (127.0.0.0/8)"),
    ("169.254.0.0/16", "link-local (169.254.0.0/16)"),
    ("172.16.0.0/12", "private (172.16.0.0/12)"),
    ("192.0.0.0/24", "IETF protocol assignment (192.0.0.0/24)"),
    ("192.0.2.0/24", "documentation (192.0.2.0/24)"),
    ("192.31.196.0/24", "AS112 (192.31.196.0/24)"),
    ("192.52.193.0/24", "AMT (192.52.193.0/24)"),
    ("192.88.99.0/24", "6to4 relay (192.88.99.0/24)"),
    ("192.168.0.0/16", "private (192.168.0.0/16)"),
    (
        "192.175.48.0/24",
        "AS112 direct delegation (192.175.48.0/24)",
    ),
    ("198.18.0.0/15", "benchmarking (198.18.0.0/15)"),
    ("198.51.100.0/24", "documentation (198.51.100.0/24)"),
    ("203.0.113.0/24", "documentation (203.0.113.0/24)"),
    ("224.0.0.0/4", "multicast (224.0.0.0/4)"),
    ("240.0.0.0/4", "reserved or broadcast (240.0.0.0/4)"),
    ("::/128", "unspecified (::)"),
    ("::1/128", "loopback (::1)"),
    ("::ffff:0:0/96", "IPv4-mapped (::ffff:0:0/96)"),
    ("::ffff:0:0:0/96", "IPv4-translated (::ffff:0:0:0/96)"),
    ("::/96", "IPv4-compatible (::/96)"),
    ("64:ff9b:1::/48", "local-use NAT64 (64:ff9b:1::/48)"),
    ("100::/64", "discard-only (100::/64)"),
    ("100:0:0:1::/64", "dummy prefix (100:0:0:1::/64)"),
    ("2001::/32", "Teredo (2001::/32)"),
    ("2001:db8::/32", "documentation (2001:db8::/32)"),
    ("2001::/23", "IETF protocol assignment (2001::/23)"),
    ("2002::/16", "6to4 (2002::/16)"),
    (
        "2620:4f:8000::/48",
        "AS112 direct delegation (2620:4f:8000::/48)",
    ),
    ("3fff::/20", "documentation (3fff::/20)"),
    ("5f00::/16", "SRv6 SIDs (5f00::/16)"),
    ("fc00::/7", "unique local (fc00::/7)"),
    ("fe80::/10", "link-local (fe80::/10)"),
    ("fec0::/10", "site-local (fec0::/10)"),
    ("ff00::/8", "multicast (ff00::/8)"),
];

static DENIED_NETS: LazyLock<Vec<(IpNet, &'static str)>> = LazyLock::new(|| {
    DENIED
        .iter()
        .map(|(net, name)| (net.parse().expect("a valid CIDR in DENIED"), *name))
        .collect()
});

/// The named range a denied address falls in. An IPv6 address that embeds an IPv4 one is
/// judged as that IPv4 address first (`::ffff:127.0.0.1` is loopback), and refused anyway if
/// the embedding range is itself special: only NAT64 (`64:ff9b::/96`) carries public IPv4.
fn denied_range(addr: IpAddr) -> Option<&'static str> {
    let lookup = |a: IpAddr| {
        DENIED_NETS
            .iter()
            .find(|(net, _)| net.contains(&a))
            .map(|(_, name)| *name)
    };
    if addr.is_unspecified() || addr.is_loopback() {
        return lookup(addr); // `::` and `::1` are named as themselves, not as `0.0.0.x`
    }
    embedded_v4(addr)
        .and_then(|v4| lookup(IpAddr::V4(v4)))
        .or_else(|| lookup(addr))
}

#[cfg(test)]
mod tests;
