//! Which network addresses the registry may reach.
//!
//! Everything cardgate fetches is named by someone else (card URLs, `jku`, interface URLs,
//! push endpoints), so by default it never connects to loopback, private, link-local, CGNAT,
//! multicast, reserved or unspecified addresses, IPv4 and IPv6 alike, with IPv4 embedded in
//! IPv6 (mapped, compatible, NAT64, 6to4) judged as the IPv4 address it carries. An operator can
//! allow ranges explicitly (`CARDGATE_ALLOW_NETWORKS`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// The IPv4 address carried inside an IPv6 one, for the forms that route to it.
fn embedded_v4(addr: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = addr else { return None };
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated)
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] if !(s[6] == 0 && s[7] <= 1) => {
            Some(tail)
        }
        // 64:ff9b::a.b.c.d (NAT64)
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        // 2002:AABB:CCDD::/48 (6to4)
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// The named range a denied address falls in.
fn denied_range(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(v4) => denied_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(addr) {
            Some(v4) => denied_v4(v4).or(if is_6to4(v6) { Some("6to4") } else { None }),
            None => denied_v6(v6),
        },
    }
}

fn is_6to4(v6: Ipv6Addr) -> bool {
    v6.segments()[0] == 0x2002
}

fn denied_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    Some(match o {
        [0, ..] => "unspecified (0.0.0.0/8)",
        [10, ..] => "private (10.0.0.0/8)",
        [100, b, ..] if (64..128).contains(&b) => "carrier-grade NAT (100.64.0.0/10)",
        [127, ..] => "loopback (127.0.0.0/8)",
        [169, 254, ..] => "link-local (169.254.0.0/16)",
        [172, b, ..] if (16..32).contains(&b) => "private (172.16.0.0/12)",
        [192, 0, 0, _] => "IETF protocol assignment (192.0.0.0/24)",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "documentation",
        [192, 88, 99, _] => "6to4 relay (192.88.99.0/24)",
        [192, 168, ..] => "private (192.168.0.0/16)",
        [198, b, ..] if b == 18 || b == 19 => "benchmarking (198.18.0.0/15)",
        [224..=239, ..] => "multicast (224.0.0.0/4)",
        [240..=255, ..] => "reserved or broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn denied_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified (::)",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback (::1)",
        [0x100, 0, 0, 0, ..] => "discard-only (100::/64)",
        [0x64, 0xff9b, 1, ..] => "local-use NAT64 (64:ff9b:1::/48)",
        [0x2001, 0xdb8, ..] => "documentation (2001:db8::/32)",
        [0x2001, b, ..] if b < 0x200 => "IETF protocol assignment (2001::/23)",
        [a0, ..] if a0 & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        [a0, ..] if a0 & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        [a0, ..] if a0 & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        [a0, ..] if a0 & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn denied_and_public_addresses() {
        let denied = [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "192.0.2.5",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "64:ff9b:1::1",
            "fec0::1",
        ];
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2a00:1450:4001::200e",
        ];
        let policy = NetworkPolicy::default();
        for addr in denied {
            assert!(policy.check(ip(addr)).is_err(), "{addr} should be denied");
        }
        for addr in public {
            assert!(policy.check(ip(addr)).is_ok(), "{addr} should be allowed");
        }
    }

    #[test]
    fn the_operator_can_allow_ranges_including_their_mapped_forms() {
        let allowed = NetworkPolicy::parse_allowed("127.0.0.0/8, ::1/128,10.9.9.9").unwrap();
        let policy = NetworkPolicy::new(allowed);
        for addr in ["127.0.0.1", "::1", "::ffff:127.0.0.1", "10.9.9.9"] {
            assert!(policy.check(ip(addr)).is_ok(), "{addr}");
        }
        for addr in ["10.9.9.8", "169.254.169.254", "192.168.0.1"] {
            assert!(policy.check(ip(addr)).is_err(), "{addr}");
        }
        assert!(NetworkPolicy::parse_allowed("localhost").is_err());
    }

    #[test]
    fn reasons_name_the_range() {
        let err = NetworkPolicy::default()
            .check(ip("169.254.169.254"))
            .unwrap_err();
        assert_eq!(
            err,
            "169.254.169.254 is a link-local (169.254.0.0/16) address"
        );
    }
}
