//! Decoding of RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE and RTM_NEWRULE replies into [`Link`],
//! addresses, [`RouteSpec`], [`RuleSpec`] and a link's [`Ipv4Conf`].
//!
//! Only the attributes the plugin uses are read; everything else is skipped unparsed, so a
//! kernel newer than netlink-packet-route (new attributes, grown structs inside
//! IFLA_AF_SPEC or IFLA_LINKINFO data) cannot break a lookup or a dump.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_core::NlasIterator;
use netlink_packet_route::address::AddressHeader;
use netlink_packet_route::link::{LinkFlags, LinkHeader};

use super::{Ipv4Conf, Link, RouteSpec, RuleSpec};

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_IFALIAS: u16 = super::request::IFLA_IFALIAS;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_PROP_LIST: u16 = 52;
const IFLA_ALT_IFNAME: u16 = 53;
const IFLA_PERM_ADDRESS: u16 = 54;
const IFLA_PARENT_DEV_NAME: u16 = 56;
const IFLA_PARENT_DEV_BUS_NAME: u16 = 57;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;

const IFLA_AF_SPEC: u16 = 26;
const IFLA_INET_CONF: u16 = 1;
const AF_INET: u16 = 2;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_METRICS: u16 = 8;
const RTA_TABLE: u16 = 15;
const RTAX_MTU: u16 = 2;

const FRA_SRC: u16 = 2;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
/// FRA_PROTOCOL: who added the rule, in every dumped rule; it changes nothing it matches.
const FRA_PROTOCOL: u16 = 21;
/// FRA_SUPPRESS_PREFIXLEN, in every dumped rule: -1 when unset.
const FRA_SUPPRESS_PREFIXLEN: u16 = 14;
/// What a rule of [`RuleSpec`]'s shape carries in a dump: anything else (a destination, an
/// interface, a mark, ports, a goto) makes it another rule.
const FRA_PLAIN: [u16; 4] = [FRA_SRC, FRA_PRIORITY, FRA_TABLE, FRA_PROTOCOL];
const FR_ACT_TO_TBL: u8 = 1;

const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;
const RTMSG_LEN: usize = 12;
const FIB_RULE_HDR_LEN: usize = 12;

fn nul_string(value: &[u8]) -> String {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

fn u32_value(value: &[u8], what: &str) -> Result<u32, String> {
    value
        .get(..4)
        .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| format!("{what} is {} bytes, expected 4", value.len()))
}

/// Decodes the payload of an RTM_NEWLINK message (ifinfomsg + attributes).
pub fn link(payload: &[u8]) -> Result<Link, String> {
    let header = LinkHeader::parse(payload).map_err(|e| format!("link header: {e}"))?;
    let mut link = Link {
        index: header.index,
        up: header.flags.contains(LinkFlags::Up),
        link_type: u16::from(header.link_layer_type),
        ..Link::default()
    };
    let mut have_name = false;
    for nla in NlasIterator::new(&payload[IFINFOMSG_LEN..]) {
        let nla = nla.map_err(|e| format!("link {} attributes: {e}", header.index))?;
        let value = nla.value();
        match nla.kind() {
            IFLA_IFNAME => {
                link.name = nul_string(value);
                have_name = true;
            }
            IFLA_MTU => link.mtu = u32_value(value, "IFLA_MTU")?,
            IFLA_ADDRESS => link.hwaddr = value.to_vec(),
            IFLA_PERM_ADDRESS => link.perm_hwaddr = Some(value.to_vec()),
            IFLA_LINK => link.link = Some(u32_value(value, "IFLA_LINK")?),
            IFLA_LINK_NETNSID => {
                link.link_netnsid = Some(u32_value(value, "IFLA_LINK_NETNSID")? as i32)
            }
            IFLA_IFALIAS => link.alias = Some(nul_string(value)),
            IFLA_PARENT_DEV_NAME => link.parent_dev = Some(nul_string(value)),
            IFLA_PARENT_DEV_BUS_NAME => link.parent_bus = Some(nul_string(value)),
            IFLA_LINKINFO => {
                for info in NlasIterator::new(value) {
                    let info = info.map_err(|e| format!("IFLA_LINKINFO: {e}"))?;
                    match info.kind() {
                        IFLA_INFO_KIND => link.kind = Some(nul_string(info.value())),
                        IFLA_INFO_DATA => {
                            for data in NlasIterator::new(info.value()) {
                                let data = data.map_err(|e| format!("IFLA_INFO_DATA: {e}"))?;
                                link.info_data.push((data.kind(), data.value().to_vec()));
                            }
                        }
                        _ => {}
                    }
                }
            }
            IFLA_PROP_LIST => {
                for prop in NlasIterator::new(value) {
                    let prop = prop.map_err(|e| format!("IFLA_PROP_LIST: {e}"))?;
                    if prop.kind() == IFLA_ALT_IFNAME {
                        link.altnames.push(nul_string(prop.value()));
                    }
                }
            }
            _ => {}
        }
    }
    if !have_name {
        return Err(format!("link {} has no IFLA_IFNAME", header.index));
    }
    Ok(link)
}

/// Whether an RTM_NEWLINK payload carries `addr` as its IFLA_ADDRESS or IFLA_PERM_ADDRESS:
/// read straight off the attribute headers, so a dump can keep only the links a `hwaddr`
/// selector names instead of copying and decoding all of them. A malformed payload matches
/// nothing (`link` reports it when it is decoded).
pub fn link_has_hwaddr(payload: &[u8], addr: &[u8]) -> bool {
    let Some(attrs) = payload.get(IFINFOMSG_LEN..) else {
        return false;
    };
    NlasIterator::new(attrs)
        .map_while(Result::ok)
        .any(|nla| matches!(nla.kind(), IFLA_ADDRESS | IFLA_PERM_ADDRESS) && nla.value() == addr)
}

/// Decodes the payload of an RTM_NEWADDR message into (ifindex, address/prefix).
///
/// IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point
/// links and equals IFA_LOCAL otherwise. IPv6 sends IFA_LOCAL only when there is a peer.
pub fn address(payload: &[u8]) -> Result<(u32, IpNetwork), String> {
    let header = AddressHeader::parse(payload).map_err(|e| format!("address header: {e}"))?;
    let mut local = None;
    let mut address = None;
    for nla in NlasIterator::new(&payload[IFADDRMSG_LEN..]) {
        let nla = nla.map_err(|e| format!("address attributes: {e}"))?;
        match nla.kind() {
            IFA_LOCAL => local = Some(ip_value(nla.value())?),
            IFA_ADDRESS => address = Some(ip_value(nla.value())?),
            _ => {}
        }
    }
    let ip = local.or(address).ok_or_else(|| {
        format!(
            "address on ifindex {} has no IFA_LOCAL/IFA_ADDRESS",
            header.index
        )
    })?;
    let net = IpNetwork::new(ip, header.prefix_len)
        .map_err(|e| format!("address {ip}/{}: {e}", header.prefix_len))?;
    Ok((header.index, net))
}

/// The per-interface IPv4 values in an RTM_NEWLINK payload (IFLA_AF_SPEC, AF_INET,
/// IFLA_INET_CONF: an array of u32); empty when the link has none (no IPv4 on it).
pub fn ipv4_conf(payload: &[u8]) -> Result<Ipv4Conf, String> {
    let attrs = payload
        .get(IFINFOMSG_LEN..)
        .ok_or("link message shorter than its header")?;
    for nla in NlasIterator::new(attrs) {
        let nla = nla.map_err(|e| format!("link attributes: {e}"))?;
        if nla.kind() != IFLA_AF_SPEC {
            continue;
        }
        for family in NlasIterator::new(nla.value()) {
            let family = family.map_err(|e| format!("IFLA_AF_SPEC: {e}"))?;
            if family.kind() != AF_INET {
                continue;
            }
            for conf in NlasIterator::new(family.value()) {
                let conf = conf.map_err(|e| format!("IFLA_AF_SPEC AF_INET: {e}"))?;
                if conf.kind() == IFLA_INET_CONF {
                    let values = conf
                        .value()
                        .chunks_exact(4)
                        .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
                        .collect();
                    return Ok(Ipv4Conf(values));
                }
            }
        }
    }
    Ok(Ipv4Conf::default())
}

/// Decodes the payload of an RTM_NEWROUTE message (rtmsg + attributes). The table is RTA_TABLE
/// when present (tables above 255 are only there), else the header's; the metric MTU is the
/// only metric read. A multipath route has no RTA_OIF: its `oif` is 0.
pub fn route(payload: &[u8]) -> Result<RouteSpec, String> {
    let header = payload
        .get(..RTMSG_LEN)
        .ok_or_else(|| format!("route message of {} bytes", payload.len()))?;
    let (family, dst_len, table, scope) = (header[0], header[1], header[4], header[6]);
    let mut route = RouteSpec {
        dst: unspecified_net(family, dst_len)?,
        gateway: None,
        oif: 0,
        metric: None,
        mtu: None,
        table: Some(u32::from(table)),
        scope: Some(scope),
    };
    for nla in NlasIterator::new(&payload[RTMSG_LEN..]) {
        let nla = nla.map_err(|e| format!("route attributes: {e}"))?;
        let value = nla.value();
        match nla.kind() {
            RTA_DST => {
                route.dst = IpNetwork::new(ip_value(value)?, dst_len)
                    .map_err(|e| format!("route destination: {e}"))?
            }
            RTA_GATEWAY => route.gateway = Some(ip_value(value)?),
            RTA_OIF => route.oif = u32_value(value, "RTA_OIF")?,
            RTA_PRIORITY => route.metric = Some(u32_value(value, "RTA_PRIORITY")?),
            RTA_TABLE => route.table = Some(u32_value(value, "RTA_TABLE")?),
            RTA_METRICS => {
                for metric in NlasIterator::new(value) {
                    let metric = metric.map_err(|e| format!("RTA_METRICS: {e}"))?;
                    if metric.kind() == RTAX_MTU {
                        route.mtu = Some(u32_value(metric.value(), "RTAX_MTU")?);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(route)
}

/// The all-zero network of a family with `len` bits: a route's destination before RTA_DST (a
/// default route has none).
fn unspecified_net(family: u8, len: u8) -> Result<IpNetwork, String> {
    let ip = match family {
        2 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        10 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        other => return Err(format!("route of address family {other}")),
    };
    IpNetwork::new(ip, len).map_err(|e| format!("route prefix: {e}"))
}

/// Decodes the payload of an RTM_NEWRULE message (fib_rule_hdr + attributes) when the rule is
/// of [`RuleSpec`]'s shape: a source and a table lookup, matching on nothing else (no
/// destination, TOS, interface, mark, port or goto). Other rules are None.
pub fn rule(payload: &[u8]) -> Result<Option<RuleSpec>, String> {
    let header = payload
        .get(..FIB_RULE_HDR_LEN)
        .ok_or_else(|| format!("rule message of {} bytes", payload.len()))?;
    let (src_len, tos, header_table, action) = (header[2], header[3], header[4], header[7]);
    let flags = u32::from_ne_bytes(header[8..12].try_into().expect("4 bytes"));
    let (mut src, mut table, mut priority) = (None, u32::from(header_table), 0);
    let mut plain = action == FR_ACT_TO_TBL && tos == 0 && header[1] == 0 && flags == 0;
    for nla in NlasIterator::new(&payload[FIB_RULE_HDR_LEN..]) {
        let nla = nla.map_err(|e| format!("rule attributes: {e}"))?;
        let value = nla.value();
        match nla.kind() {
            FRA_SRC => src = Some(ip_value(value)?),
            FRA_TABLE => table = u32_value(value, "FRA_TABLE")?,
            FRA_PRIORITY => priority = u32_value(value, "FRA_PRIORITY")?,
            FRA_SUPPRESS_PREFIXLEN => {
                plain &= u32_value(value, "FRA_SUPPRESS_PREFIXLEN")? == u32::MAX
            }
            kind if !FRA_PLAIN.contains(&kind) => plain = false,
            _ => {}
        }
    }
    let Some(ip) = src.filter(|_| plain) else {
        return Ok(None);
    };
    let src = IpNetwork::new(ip, src_len).map_err(|e| format!("rule source: {e}"))?;
    Ok(Some(RuleSpec {
        src,
        table,
        priority,
    }))
}

fn ip_value(value: &[u8]) -> Result<IpAddr, String> {
    match value.len() {
        4 => Ok(IpAddr::V4(Ipv4Addr::from(
            <[u8; 4]>::try_from(value).expect("4 bytes"),
        ))),
        16 => Ok(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(value).expect("16 bytes"),
        ))),
        n => Err(format!("address attribute of {n} bytes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testutil::nla;

    fn ifinfomsg(index: u32, link_type: u16, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8, 0];
        h.extend_from_slice(&link_type.to_ne_bytes());
        h.extend_from_slice(&index.to_ne_bytes());
        h.extend_from_slice(&flags.to_ne_bytes());
        h.extend_from_slice(&0u32.to_ne_bytes());
        h
    }

    #[test]
    fn hwaddr_match_reads_the_current_and_the_permanent_address_only() {
        let mut p = ifinfomsg(9, 1, 0);
        p.extend(nla(IFLA_IFNAME, b"ens1f0v3\0"));
        p.extend(nla(IFLA_ADDRESS, &[2, 0, 0, 0, 0, 9]));
        p.extend(nla(IFLA_BROADCAST_FOR_TEST, &[0xff; 6]));
        p.extend(nla(IFLA_PERM_ADDRESS, &[4, 0, 0, 0, 0, 9]));
        assert!(link_has_hwaddr(&p, &[2, 0, 0, 0, 0, 9]));
        assert!(link_has_hwaddr(&p, &[4, 0, 0, 0, 0, 9]));
        // The broadcast address is not the device's address.
        assert!(!link_has_hwaddr(&p, &[0xff; 6]));
        // A prefix of the address is not the address (IPoIB addresses are 20 bytes).
        assert!(!link_has_hwaddr(&p, &[2, 0, 0, 0, 0]));
        assert!(!link_has_hwaddr(&p, &[2, 0, 0, 0, 0, 8]));
        // Cut inside the permanent address: no match, no panic.
        assert!(!link_has_hwaddr(&p[..p.len() - 6], &[4, 0, 0, 0, 0, 9]));
        assert!(!link_has_hwaddr(&p[..10], &[2, 0, 0, 0, 0, 9]));
    }

    const IFLA_BROADCAST_FOR_TEST: u16 = 2;

    #[test]
    fn decodes_the_fields_link_carries() {
        let mut p = ifinfomsg(7, 32, 0x1 | 0x1000);
        p.extend(nla(IFLA_IFNAME, b"ib0\0"));
        p.extend(nla(IFLA_MTU, &2044u32.to_ne_bytes()));
        p.extend(nla(IFLA_ADDRESS, &[0x80; 20]));
        p.extend(nla(IFLA_PERM_ADDRESS, &[0x81; 20]));
        p.extend(nla(IFLA_LINK, &3u32.to_ne_bytes()));
        p.extend(nla(IFLA_PARENT_DEV_NAME, b"0000:3b:00.2\0"));
        p.extend(nla(IFLA_PARENT_DEV_BUS_NAME, b"pci\0"));
        let mut info = nla(IFLA_INFO_KIND, b"ipoib\0");
        let mut data = nla(1, &0x8001u16.to_ne_bytes());
        data.extend(nla(2, &1u16.to_ne_bytes()));
        data.extend(nla(3, &0u16.to_ne_bytes()));
        info.extend(nla(IFLA_INFO_DATA, &data));
        p.extend(nla(IFLA_LINKINFO, &info));
        let mut props = nla(IFLA_ALT_IFNAME, b"enp59s0f2\0");
        props.extend(nla(IFLA_ALT_IFNAME, b"a-very-long-alternative-name\0"));
        p.extend(nla(IFLA_PROP_LIST | 0x8000, &props));
        // The kernel puts the alias with its NUL (rtnetlink.c `nla_put_ifalias`).
        p.extend(nla(IFLA_IFALIAS, b"uplink to leaf 3\0"));
        // An attribute this decoder does not know, with a body no parser would accept.
        p.extend(nla(200, &[0xff; 3]));

        let link = link(&p).unwrap();
        assert_eq!(
            link,
            Link {
                index: 7,
                name: "ib0".into(),
                mtu: 2044,
                hwaddr: vec![0x80; 20],
                perm_hwaddr: Some(vec![0x81; 20]),
                up: true,
                kind: Some("ipoib".into()),
                link_type: 32,
                altnames: vec!["enp59s0f2".into(), "a-very-long-alternative-name".into()],
                parent_dev: Some("0000:3b:00.2".into()),
                parent_bus: Some("pci".into()),
                link: Some(3),
                link_netnsid: None,
                alias: Some("uplink to leaf 3".into()),
                info_data: vec![
                    (1, 0x8001u16.to_ne_bytes().to_vec()),
                    (2, 1u16.to_ne_bytes().to_vec()),
                    (3, 0u16.to_ne_bytes().to_vec()),
                ],
            }
        );
        assert_eq!(link.pci_address(), Some("0000:3b:00.2"));
        assert_eq!(
            link.ipoib_info(),
            Some(crate::kernel::rtnetlink::IpoibInfo {
                pkey: Some(0x8001),
                mode: Some(1),
                umcast: Some(0)
            })
        );
        assert_eq!(link.macvlan_mode(), None);
    }

    /// `ip link add link envd0 name envm0 netns envt1 type macvlan` seen from envt1 on 6.18:
    /// `envm0@if1343 ... link-netnsid 0`.
    #[test]
    fn a_child_made_in_a_pod_names_its_lower_by_index_and_netns_id() {
        let mut p = ifinfomsg(2, 1, 0x1002);
        p.extend(nla(IFLA_IFNAME, b"envm0\0"));
        p.extend(nla(IFLA_LINK, &1343u32.to_ne_bytes()));
        p.extend(nla(IFLA_LINK_NETNSID, &0i32.to_ne_bytes()));
        let child = link(&p).unwrap();
        assert_eq!((child.link, child.link_netnsid), (Some(1343), Some(0)));
        let mut p = ifinfomsg(2, 1, 0x1002);
        p.extend(nla(IFLA_IFNAME, b"envm0\0"));
        p.extend(nla(IFLA_LINK_NETNSID, &(-1i32).to_ne_bytes()));
        assert_eq!(link(&p).unwrap().link_netnsid, Some(-1));
        p.extend(nla(IFLA_LINK_NETNSID, &[0; 2]));
        assert!(link(&p).unwrap_err().contains("IFLA_LINK_NETNSID"));
    }

    #[test]
    fn down_link_without_extras() {
        let mut p = ifinfomsg(2, 1, 0x1000);
        p.extend(nla(IFLA_IFNAME, b"eth0\0"));
        let link = link(&p).unwrap();
        assert!(!link.up);
        assert_eq!(link.kind, None);
        assert_eq!(link.link, None);
        assert!(link.altnames.is_empty());
    }

    #[test]
    fn link_without_name_is_an_error() {
        let p = ifinfomsg(2, 1, 0);
        assert!(link(&p).unwrap_err().contains("no IFLA_IFNAME"));
        assert!(link(&[0; 4]).is_err());
    }

    #[test]
    fn address_prefers_local_over_peer() {
        let mut p = vec![2u8, 32, 0, 0];
        p.extend_from_slice(&9u32.to_ne_bytes());
        p.extend(nla(IFA_ADDRESS, &[10, 0, 0, 2]));
        p.extend(nla(IFA_LOCAL, &[10, 0, 0, 1]));
        assert_eq!(address(&p).unwrap(), (9, "10.0.0.1/32".parse().unwrap()));
    }

    fn rtmsg(family: u8, dst_len: u8, table: u8, scope: u8) -> Vec<u8> {
        vec![family, dst_len, 0, 0, table, 3, scope, 1, 0, 0, 0, 0]
    }

    #[test]
    fn route_reads_destination_gateway_link_metric_mtu_and_table() {
        let mut p = rtmsg(2, 14, 0, 0);
        p.extend(nla(RTA_TABLE, &1005u32.to_ne_bytes()));
        p.extend(nla(RTA_DST, &[10, 100, 0, 0]));
        p.extend(nla(RTA_GATEWAY, &[10, 100, 0, 1]));
        p.extend(nla(RTA_PRIORITY, &100u32.to_ne_bytes()));
        p.extend(nla(RTA_OIF, &9u32.to_ne_bytes()));
        p.extend(nla(RTA_METRICS, &nla(RTAX_MTU, &1400u32.to_ne_bytes())));
        assert_eq!(
            route(&p).unwrap(),
            RouteSpec {
                dst: "10.100.0.0/14".parse().unwrap(),
                gateway: Some("10.100.0.1".parse().unwrap()),
                oif: 9,
                metric: Some(100),
                mtu: Some(1400),
                table: Some(1005),
                scope: Some(0),
            }
        );
        // A default route has no RTA_DST; the table is the header's without RTA_TABLE.
        let mut p = rtmsg(10, 0, 254, 0);
        p.extend(nla(RTA_OIF, &3u32.to_ne_bytes()));
        let r = route(&p).unwrap();
        assert_eq!(
            (r.dst, r.table, r.oif),
            ("::/0".parse().unwrap(), Some(254), 3)
        );
        assert!(route(&p[..8]).is_err());
        assert!(route(&rtmsg(7, 0, 0, 0)).is_err(), "an unknown family");
    }

    fn rule_hdr(family: u8, src_len: u8, table: u8, action: u8) -> Vec<u8> {
        vec![family, 0, src_len, 0, table, 0, 0, action, 0, 0, 0, 0]
    }

    #[test]
    fn rule_reads_a_source_lookup_and_skips_every_other_shape() {
        // What kernel 6.18 dumps for `ip rule add from 10.1.0.2 lookup 1005 priority 1000`:
        // rtm_table RT_TABLE_COMPAT (252), FRA_TABLE, FRA_SUPPRESS_PREFIXLEN -1 (unset),
        // FRA_PROTOCOL, FRA_PRIORITY, FRA_SRC.
        let mut p = rule_hdr(2, 32, 252, FR_ACT_TO_TBL);
        p.extend(nla(FRA_TABLE, &1005u32.to_ne_bytes()));
        p.extend(nla(FRA_SUPPRESS_PREFIXLEN, &u32::MAX.to_ne_bytes()));
        p.extend(nla(FRA_PROTOCOL, &[0]));
        p.extend(nla(FRA_PRIORITY, &1000u32.to_ne_bytes()));
        p.extend(nla(FRA_SRC, &[10, 1, 0, 2]));
        let want = RuleSpec {
            src: "10.1.0.2/32".parse().unwrap(),
            table: 1005,
            priority: 1000,
        };
        assert_eq!(rule(&p).unwrap(), Some(want));
        // A table below 256 in the header alone.
        let mut small = rule_hdr(2, 32, 100, FR_ACT_TO_TBL);
        small.extend(nla(FRA_SRC, &[10, 1, 0, 2]));
        assert_eq!(rule(&small).unwrap().map(|r| r.table), Some(100));
        // The default rules (no source), a rule on an interface (FRA_IIFNAME, 3), a `not from`
        // (FIB_RULE_INVERT), a blackhole: none is of the shape.
        let mut main = rule_hdr(2, 0, 254, FR_ACT_TO_TBL);
        main.extend(nla(FRA_PRIORITY, &32766u32.to_ne_bytes()));
        assert_eq!(rule(&main).unwrap(), None);
        let mut iif = p.clone();
        iif.extend(nla(3, b"net1\0"));
        assert_eq!(rule(&iif).unwrap(), None);
        let mut inverted = p.clone();
        inverted[8] = 2;
        assert_eq!(rule(&inverted).unwrap(), None);
        let mut blackhole = p.clone();
        blackhole[7] = 6;
        assert_eq!(rule(&blackhole).unwrap(), None);
        // `suppress_prefixlength 0`: not a plain lookup.
        let mut suppressing = p.clone();
        let at = FIB_RULE_HDR_LEN + 8 + 4;
        suppressing[at..at + 4].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(rule(&suppressing).unwrap(), None);
        assert!(rule(&p[..6]).is_err());
    }

    #[test]
    fn ipv4_conf_is_read_from_the_inet_part_of_af_spec() {
        let mut values = vec![0u8; 33 * 4];
        values[(19 - 1) * 4] = 1;
        values[(18 - 1) * 4] = 2;
        values[(8 - 1) * 4] = 2;
        let inet6 = nla(10, &nla(1, &[0; 8]));
        let inet = nla(AF_INET, &nla(IFLA_INET_CONF, &values));
        let mut p = ifinfomsg(4, 1, 0);
        p.extend(nla(IFLA_IFNAME, b"net1\0"));
        p.extend(nla(IFLA_AF_SPEC | 0x8000, &[inet6, inet].concat()));
        let conf = ipv4_conf(&p).unwrap();
        use crate::kernel::rtnetlink::Ipv4Setting::*;
        assert_eq!(
            (
                conf.get(ArpIgnore),
                conf.get(ArpAnnounce),
                conf.get(RpFilter)
            ),
            (Some(1), Some(2), Some(2))
        );
        // A link without IPv4 (no AF_INET part): nothing to read, not an error.
        let mut bare = ifinfomsg(4, 1, 0);
        bare.extend(nla(IFLA_IFNAME, b"net1\0"));
        assert_eq!(ipv4_conf(&bare).unwrap().get(ArpIgnore), None);
    }

    #[test]
    fn ipv6_address_without_local() {
        let mut p = vec![10u8, 64, 0, 0];
        p.extend_from_slice(&4u32.to_ne_bytes());
        let ip: Ipv6Addr = "fd00::2".parse().unwrap();
        p.extend(nla(IFA_ADDRESS, &ip.octets()));
        assert_eq!(address(&p).unwrap(), (4, "fd00::2/64".parse().unwrap()));
    }
}
