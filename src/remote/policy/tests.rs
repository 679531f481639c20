//! Unit tests of `cardgate::remote::policy`.

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
        // The forms that used to slip through, and the rest of the special registries.
        "::ffff:0.0.0.0",
        "::ffff:0:7f00:1",
        "::ffff:0:0:0",
        "::0.0.0.0",
        "::8.8.8.8",
        "::ffff:8.8.8.8",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
        "2002:808:808::1",
        "3fff::1",
        "5f00::1",
        "100:0:0:1::1",
        "2620:4f:8000::1",
        "192.31.196.1",
        "192.52.193.1",
        "192.175.48.1",
        "192.0.0.9",
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
        "64:ff9b::8.8.8.8",
        "2600::1",
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
fn embedded_forms_are_judged_as_the_ipv4_address_they_carry() {
    let policy = NetworkPolicy::default();
    for (addr, reason) in [
        ("::ffff:0.0.0.0", "\"this network\" (0.0.0.0/8)"),
        ("::ffff:127.0.0.1", "loopback (127.0.0.0/8)"),
        ("::ffff:0:127.0.0.1", "loopback (127.0.0.0/8)"),
        ("::127.0.0.1", "loopback (127.0.0.0/8)"),
        ("64:ff9b::169.254.169.254", "link-local (169.254.0.0/16)"),
        ("2002:7f00:1::", "loopback (127.0.0.0/8)"),
        // Teredo stores the client address inverted: !127.0.0.1 = 128.255.255.254.
        ("2001:0:1:2::80ff:fffe", "loopback (127.0.0.0/8)"),
        ("::1", "loopback (::1)"),
        ("::", "unspecified (::)"),
    ] {
        assert_eq!(
            policy.check(ip(addr)),
            Err(format!("{} is a {reason} address", ip(addr))),
            "{addr}"
        );
    }
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
