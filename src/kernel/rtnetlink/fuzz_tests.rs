//! Property-based fuzz tests of the rtnetlink reply decoders: RTM_NEWLINK (and its IPv4
//! values), RTM_NEWADDR, RTM_NEWROUTE and RTM_NEWRULE payloads and NLMSG_ERROR / NLMSG_DONE, built as attribute trees whose lengths, types and
//! nesting are then corrupted. Case counts and the deep mode: docs/testing.md, "Fuzzing".

use proptest::prelude::*;

use super::decode;
use crate::error::Error;
use crate::kernel::netlink::{parse_done, parse_error, NlError};
use crate::kernel::{KernelError, Ns};
use crate::testutil::fuzz::{self, check_rejection};

/// A netlink attribute tree; `len_delta` corrupts the length field the encoder writes.
#[derive(Debug, Clone)]
pub enum Nla {
    Leaf {
        kind: u16,
        value: Vec<u8>,
        len_delta: i8,
    },
    Nest {
        kind: u16,
        children: Vec<Nla>,
        len_delta: i8,
    },
}

pub fn encode(nlas: &[Nla]) -> Vec<u8> {
    let mut out = Vec::new();
    for nla in nlas {
        let (kind, body, delta) = match nla {
            Nla::Leaf {
                kind,
                value,
                len_delta,
            } => (*kind, value.clone(), *len_delta),
            Nla::Nest {
                kind,
                children,
                len_delta,
            } => (*kind, encode(children), *len_delta),
        };
        let len = (4 + body.len() as i64 + i64::from(delta)).clamp(0, 0xffff) as u16;
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&body);
        while out.len() % 4 != 0 {
            out.push(0);
        }
    }
    out
}

/// Attribute values the decoders read: 4-byte ints, C strings, addresses, and anything.
pub fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<u32>().prop_map(|v| v.to_ne_bytes().to_vec()),
        any::<u64>().prop_map(|v| v.to_ne_bytes().to_vec()),
        any::<u8>().prop_map(|v| vec![v]),
        "[a-z0-9_.:]{0,20}".prop_map(|s| format!("{s}\0").into_bytes()),
        prop::collection::vec(any::<u8>(), 0..24),
        any::<[u8; 16]>().prop_map(|v| v.to_vec()),
        any::<[u8; 6]>().prop_map(|v| v.to_vec()),
    ]
}

fn len_delta() -> impl Strategy<Value = i8> {
    prop_oneof![8 => Just(0i8), 1 => -6i8..6, 1 => any::<i8>()]
}

/// Attributes with kinds drawn mostly from `kinds`, nested up to three levels.
pub fn nlas(kinds: Vec<u16>) -> impl Strategy<Value = Vec<Nla>> {
    let kind = move || {
        let kinds = kinds.clone();
        prop_oneof![
            6 => prop::sample::select(kinds),
            1 => any::<u16>(),
        ]
        .prop_flat_map(|k| prop_oneof![8 => Just(k), 1 => Just(k | 0x8000)])
    };
    let leaf = (kind(), value(), len_delta()).prop_map(|(kind, value, len_delta)| Nla::Leaf {
        kind,
        value,
        len_delta,
    });
    let tree = leaf.prop_recursive(3, 24, 5, move |inner| {
        (kind(), prop::collection::vec(inner, 0..5), len_delta()).prop_map(
            |(kind, children, len_delta)| Nla::Nest {
                kind,
                children,
                len_delta,
            },
        )
    });
    prop::collection::vec(tree, 0..8)
}

/// A fixed header (mostly well formed) followed by attributes and maybe trailing bytes.
fn message(header_len: usize, kinds: Vec<u16>) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u8>(), header_len),
        prop_oneof![8 => Just(header_len), 1 => 0..header_len + 4],
        nlas(kinds),
        prop::collection::vec(any::<u8>(), 0..3),
        fuzz::byte_edits(2),
    )
        .prop_map(move |(mut header, keep, attrs, tail, edits)| {
            header.resize(keep, 0);
            header.extend(encode(&attrs));
            header.extend(tail);
            fuzz::apply_byte_edits(header, &edits)
        })
}

/// IFLA_ADDRESS, IFNAME, MTU, LINK, LINKINFO (INFO_KIND/INFO_DATA share 1 and 2), PROP_LIST,
/// ALT_IFNAME, PERM_ADDRESS, PARENT_DEV_NAME, PARENT_DEV_BUS_NAME.
const LINK_KINDS: [u16; 11] = [1, 2, 3, 4, 5, 18, 52, 53, 54, 56, 57];
/// IFA_ADDRESS, IFA_LOCAL, IFA_LABEL.
const ADDR_KINDS: [u16; 3] = [1, 2, 3];
/// IFLA_IFNAME and IFLA_AF_SPEC, whose AF_INET (2) holds IFLA_INET_CONF (1).
const AF_SPEC_KINDS: [u16; 4] = [1, 2, 3, 26];
/// RTA_DST, OIF, GATEWAY, PRIORITY, METRICS (RTAX_MTU 2 inside), TABLE.
const ROUTE_KINDS: [u16; 6] = [1, 2, 4, 5, 6, 8];
/// FRA_SRC, IIFNAME, PRIORITY, SUPPRESS_PREFIXLEN, TABLE, PROTOCOL.
const RULE_KINDS: [u16; 6] = [2, 3, 6, 14, 15, 21];

/// What an undecodable reply becomes before the plugin reports it: code 105 with the
/// decoder's text.
fn reported(msg: String) -> Result<(), TestCaseError> {
    prop_assert!(!msg.trim().is_empty());
    let nl = NlError::decode(msg.clone());
    let err = Error::kernel(
        "list links",
        KernelError::netlink("list links", "all links", Ns::Host, nl),
    );
    check_rejection(&err, &[105])?;
    prop_assert!(err.to_string().contains(&msg), "{}", err);
    Ok(())
}

proptest! {
    #![proptest_config(fuzz::config(3000))]

    /// RTM_NEWLINK: a decoded link carries a name, and the cheap hwaddr filter agrees with
    /// the full decode.
    #[test]
    fn link_decode_never_panics(payload in prop_oneof![6 => message(16, LINK_KINDS.to_vec()), 1 => fuzz::bytes()]) {
        match decode::link(&payload) {
            Ok(link) => {
                if !link.hwaddr.is_empty() {
                    prop_assert!(decode::link_has_hwaddr(&payload, &link.hwaddr));
                }
                if let Some(perm) = link.perm_hwaddr.as_ref().filter(|p| !p.is_empty()) {
                    prop_assert!(decode::link_has_hwaddr(&payload, perm));
                }
                prop_assert!(!link.name.contains('\0'));
                let _ = (link.ipoib_info(), link.macvlan_mode(), link.pci_address());
            }
            Err(msg) => reported(msg)?,
        }
        let _ = decode::link_has_hwaddr(&payload, &[2, 0, 0, 0, 0, 1]);
    }

    /// RTM_NEWADDR: a decoded address has a prefix valid for its family.
    #[test]
    fn address_decode_never_panics(payload in prop_oneof![6 => message(8, ADDR_KINDS.to_vec()), 1 => fuzz::bytes()]) {
        match decode::address(&payload) {
            Ok((_, net)) => {
                let max = if net.is_ipv4() { 32 } else { 128 };
                prop_assert!(net.prefix() <= max);
            }
            Err(msg) => reported(msg)?,
        }
    }

    /// A link's IPv4 values: read, or reported; never a panic.
    #[test]
    fn ipv4_conf_decode_never_panics(payload in prop_oneof![6 => message(16, AF_SPEC_KINDS.to_vec()), 1 => fuzz::bytes()]) {
        match decode::ipv4_conf(&payload) {
            Ok(conf) => {
                let _ = crate::kernel::rtnetlink::Ipv4Setting::ALL.map(|s| conf.get(s));
            }
            Err(msg) => reported(msg)?,
        }
    }

    /// RTM_NEWROUTE: a decoded route's destination has a prefix valid for its family, and a
    /// gateway of a family the decoder read.
    #[test]
    fn route_decode_never_panics(payload in prop_oneof![6 => message(12, ROUTE_KINDS.to_vec()), 1 => fuzz::bytes()]) {
        match decode::route(&payload) {
            Ok(route) => {
                let max = if route.dst.is_ipv4() { 32 } else { 128 };
                prop_assert!(route.dst.prefix() <= max);
                prop_assert!(route.table.is_some());
            }
            Err(msg) => reported(msg)?,
        }
    }

    /// RTM_NEWRULE: a rule of the plain shape has a source whose prefix fits its address.
    #[test]
    fn rule_decode_never_panics(payload in prop_oneof![6 => message(12, RULE_KINDS.to_vec()), 1 => fuzz::bytes()]) {
        match decode::rule(&payload) {
            Ok(Some(rule)) => {
                let max = if rule.src.is_ipv4() { 32 } else { 128 };
                prop_assert!(rule.src.prefix() <= max);
            }
            Ok(None) => {}
            Err(msg) => reported(msg)?,
        }
    }

    /// NLMSG_ERROR and NLMSG_DONE with any flags: an error always has a non-zero errno.
    #[test]
    fn error_and_done_never_panic(
        code in prop_oneof![Just(0i32), -200i32..200, any::<i32>()],
        echoed_len in prop_oneof![Just(16u32), 0u32..64, any::<u32>()],
        tlvs in nlas(vec![1, 2, 3, 4, 5]),
        flags in prop_oneof![Just(0u16), Just(0x100), Just(0x200), Just(0x300), any::<u16>()],
        edits in fuzz::byte_edits(2),
    ) {
        let mut payload = code.to_ne_bytes().to_vec();
        payload.extend_from_slice(&echoed_len.to_ne_bytes());
        payload.extend_from_slice(&[0; 12]);
        payload.extend(encode(&tlvs));
        let payload = fuzz::apply_byte_edits(payload, &edits);
        match parse_error(&payload, flags) {
            Ok(Some(e)) => prop_assert_ne!(e.errno, 0),
            Ok(None) => {}
            Err(e) => reported(e.ext_ack.unwrap_or_default())?,
        }
        if let Some(e) = parse_done(&payload, flags) {
            prop_assert_ne!(e.errno, 0);
        }
    }
}
