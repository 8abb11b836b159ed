//! Decoding of RTM_NEWLINK and RTM_NEWADDR replies into [`Link`] and addresses.
//!
//! Only the attributes the plugin uses are read; everything else is skipped unparsed, so a
//! kernel newer than netlink-packet-route (new attributes, grown structs inside
//! IFLA_AF_SPEC or IFLA_LINKINFO data) cannot break a lookup or a dump.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_core::NlasIterator;
use netlink_packet_route::address::AddressHeader;
use netlink_packet_route::link::{LinkFlags, LinkHeader};

use super::Link;

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_PROP_LIST: u16 = 52;
const IFLA_ALT_IFNAME: u16 = 53;
const IFLA_PERM_ADDRESS: u16 = 54;
const IFLA_PARENT_DEV_NAME: u16 = 56;
const IFLA_PARENT_DEV_BUS_NAME: u16 = 57;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;

const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;

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

    #[test]
    fn ipv6_address_without_local() {
        let mut p = vec![10u8, 64, 0, 0];
        p.extend_from_slice(&4u32.to_ne_bytes());
        let ip: Ipv6Addr = "fd00::2".parse().unwrap();
        p.extend(nla(IFA_ADDRESS, &ip.octets()));
        assert_eq!(address(&p).unwrap(), (4, "fd00::2/64".parse().unwrap()));
    }
}
