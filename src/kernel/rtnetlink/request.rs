//! The rtnetlink requests [`RealKernel`](super::RealKernel) sends, built as pure values so
//! tests can compare them byte for byte with what iproute2 sends for the same command.
//!
//! Attribute order follows iproute2 6.1 (options parsed inline first, then IFLA_LINK,
//! IFLA_IFNAME and IFLA_LINKINFO for links; RTA_OIF and RTA_METRICS last for routes). The
//! kernel does not care about order; matching it keeps the captures directly comparable.

use std::net::IpAddr;
use std::os::fd::RawFd;

use ipnetwork::IpNetwork;
use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLA_F_NESTED, NLM_F_ACK,
    NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoIpoib, InfoKind, InfoMacVlan, IpoibMode, LinkAttribute, LinkExtentMask,
    LinkFlags, LinkInfo, LinkMessage, MacVlanMode, Prop,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol,
    RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Ipv4Setting, LinkKind, MacvlanMode, RouteSpec, RuleSpec};

/// A message and the NLM_F_* flags it goes out with (NLM_F_REQUEST and, for non-dumps,
/// NLM_F_ACK are added by [`frame`]).
pub type Request = (RouteNetlinkMessage, u16);

/// Serializes `msg` as one netlink message. NLM_F_REQUEST is always set, and NLM_F_ACK for
/// anything but a dump, so every exchange ends with either NLMSG_DONE or NLMSG_ERROR (an
/// ACK is an NLMSG_ERROR with error 0). The port id stays 0: the kernel addresses replies
/// by the socket's bound port, not by this field.
pub fn frame(msg: RouteNetlinkMessage, flags: u16, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = final_flags(flags);
    header.sequence_number = seq;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);
    buf
}

fn final_flags(flags: u16) -> u16 {
    if flags & NLM_F_DUMP == NLM_F_DUMP {
        NLM_F_REQUEST | flags
    } else {
        NLM_F_REQUEST | NLM_F_ACK | flags
    }
}

/// IFLA_ALT_IFNAME (linux/if_link.h).
const IFLA_ALT_IFNAME: u16 = 53;
/// IFNAMSIZ - 1: IFLA_IFNAME's policy rejects longer strings, so longer names (only
/// altnames can be) must be looked up through IFLA_ALT_IFNAME (up to ALTIFNAMSIZ - 1 = 127).
const IFNAME_MAX: usize = 15;
/// RT_SCOPE_LINK / RT_SCOPE_UNIVERSE / RT_SCOPE_NOWHERE (linux/rtnetlink.h).
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;

fn link_message(index: u32) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg
}

/// RTEXT_FILTER_SKIP_STATS: without it every link reply carries IFLA_STATS64, IFLA_STATS
/// and per-family stats, roughly doubling its size. iproute2 also sets RTEXT_FILTER_VF,
/// which adds one IFLA_VFINFO_LIST entry per VF: large on SR-IOV PFs, and not needed here.
fn ext_mask() -> LinkAttribute {
    LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats])
}

/// RTM_GETLINK for one name; the kernel matches primary names and altnames alike.
pub fn get_link_by_name(name: &str) -> Request {
    let mut msg = link_message(0);
    msg.attributes.push(ext_mask());
    if name.len() > IFNAME_MAX {
        let mut value = name.as_bytes().to_vec();
        value.push(0);
        msg.attributes.push(LinkAttribute::Other(DefaultNla::new(
            IFLA_ALT_IFNAME,
            value,
        )));
    } else {
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
    }
    (RouteNetlinkMessage::GetLink(msg), 0)
}

pub fn get_link_by_index(index: u32) -> Request {
    let mut msg = link_message(index);
    msg.attributes.push(ext_mask());
    (RouteNetlinkMessage::GetLink(msg), 0)
}

/// IFLA_TARGET_NETNSID (linux/if_link.h, alias of IFLA_IF_NETNSID).
const IFLA_TARGET_NETNSID: u16 = 46;

/// RTM_GETLINK for an ifindex of the netns the sending socket's netns knows as `netnsid` (an
/// upper device's IFLA_LINK_NETNSID). The kernel answers only a sender with CAP_NET_ADMIN
/// over that netns and EACCES otherwise (rtnetlink.c `rtnl_get_net_ns_capable`).
pub fn get_link_by_index_in_netnsid(index: u32, netnsid: i32) -> Request {
    let mut msg = link_message(index);
    msg.attributes.push(ext_mask());
    msg.attributes.push(LinkAttribute::Other(DefaultNla::new(
        IFLA_TARGET_NETNSID,
        netnsid.to_ne_bytes().to_vec(),
    )));
    (RouteNetlinkMessage::GetLink(msg), 0)
}

pub fn dump_links() -> Request {
    let mut msg = link_message(0);
    msg.attributes.push(ext_mask());
    (RouteNetlinkMessage::GetLink(msg), NLM_F_DUMP)
}

/// What one RTM_NEWLINK on an existing link changes; `netns_fd` is an fd of the target
/// namespace in this process.
#[derive(Debug, Clone, Default)]
pub struct SetLink<'a> {
    pub netns_fd: Option<RawFd>,
    pub name: Option<&'a str>,
    pub mtu: Option<u32>,
    pub up: Option<bool>,
}

/// RTM_NEWLINK without NLM_F_CREATE on an ifindex: what `ip link set` sends.
pub fn set_link(index: u32, change: &SetLink<'_>) -> Request {
    let mut msg = link_message(index);
    if let Some(up) = change.up {
        msg.header.change_mask = LinkFlags::Up;
        msg.header.flags = if up {
            LinkFlags::Up
        } else {
            LinkFlags::empty()
        };
    }
    if let Some(fd) = change.netns_fd {
        msg.attributes.push(LinkAttribute::NetNsFd(fd));
    }
    if let Some(mtu) = change.mtu {
        msg.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(name) = change.name {
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
    }
    (RouteNetlinkMessage::NewLink(msg), 0)
}

/// IFLA_IFALIAS (linux/if_link.h).
pub const IFLA_IFALIAS: u16 = 20;

/// RTM_NEWLINK setting the link's alias, as `ip link set dev X alias TEXT` sends it: the text
/// without a NUL (netlink-packet-route's `IfAlias` adds one), so that an empty text is a
/// zero-length attribute, which the kernel takes as "no alias" (`dev_set_alias`).
pub fn set_alias(index: u32, alias: &str) -> Request {
    let mut msg = link_message(index);
    msg.attributes.push(LinkAttribute::Other(DefaultNla::new(
        IFLA_IFALIAS,
        alias.as_bytes().to_vec(),
    )));
    (RouteNetlinkMessage::NewLink(msg), 0)
}

/// RTM_DELLINKPROP removing one alternative name.
pub fn del_altname(index: u32, altname: &str) -> Request {
    let mut msg = link_message(index);
    msg.attributes
        .push(LinkAttribute::PropList(vec![Prop::AltIfName(
            altname.to_string(),
        )]));
    (RouteNetlinkMessage::DelLinkProp(msg), 0)
}

/// A child link to create; `parent_index` is resolved in the socket's namespace even when
/// `netns_fd` puts the child elsewhere.
#[derive(Debug, Clone)]
pub struct CreateLink<'a> {
    pub name: &'a str,
    pub kind: LinkKind,
    pub parent_index: u32,
    pub netns_fd: Option<RawFd>,
    pub mtu: Option<u32>,
    pub hwaddr: Option<&'a [u8]>,
}

pub fn create_link(spec: &CreateLink<'_>) -> Request {
    let mut msg = link_message(0);
    if let Some(fd) = spec.netns_fd {
        msg.attributes.push(LinkAttribute::NetNsFd(fd));
    }
    if let Some(mtu) = spec.mtu {
        msg.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(addr) = spec.hwaddr {
        msg.attributes.push(LinkAttribute::Address(addr.to_vec()));
    }
    msg.attributes.push(LinkAttribute::Link(spec.parent_index));
    msg.attributes
        .push(LinkAttribute::IfName(spec.name.to_string()));
    let (kind, data) = match spec.kind {
        LinkKind::Macvlan { mode } => (
            InfoKind::MacVlan,
            Some(InfoData::MacVlan(vec![InfoMacVlan::Mode(macvlan_mode(
                mode,
            ))])),
        ),
        LinkKind::Ipoib { pkey, mode, umcast } => {
            let mut nlas = Vec::new();
            if let Some(pkey) = pkey {
                nlas.push(InfoIpoib::Pkey(pkey));
            }
            if let Some(mode) = mode {
                nlas.push(InfoIpoib::Mode(IpoibMode::from(mode)));
            }
            if let Some(umcast) = umcast {
                nlas.push(InfoIpoib::UmCast(umcast));
            }
            let data = if nlas.is_empty() {
                None
            } else {
                Some(InfoData::Ipoib(nlas))
            };
            (InfoKind::Ipoib, data)
        }
    };
    let mut info = vec![LinkInfo::Kind(kind)];
    if let Some(data) = data {
        info.push(LinkInfo::Data(data));
    }
    msg.attributes.push(LinkAttribute::LinkInfo(info));
    (RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
}

fn macvlan_mode(mode: MacvlanMode) -> MacVlanMode {
    match mode {
        MacvlanMode::Private => MacVlanMode::Private,
        MacvlanMode::Vepa => MacVlanMode::Vepa,
        MacvlanMode::Bridge => MacVlanMode::Bridge,
        MacvlanMode::Passthru => MacVlanMode::Passthrough,
    }
}

pub fn delete_link(index: u32) -> Request {
    (RouteNetlinkMessage::DelLink(link_message(index)), 0)
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// The body iproute2 sends for `ip addr add|del ADDR/LEN dev X`: IFA_LOCAL and IFA_ADDRESS
/// both set to the address, for IPv4 and IPv6 alike. The kernel reads IFA_LOCAL as the
/// address and IFA_ADDRESS as the peer only when the two differ, so equal values mean "no
/// peer" for both families.
fn address_message(index: u32, addr: IpNetwork) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = family(addr.ip());
    msg.header.prefix_len = addr.prefix();
    msg.header.index = index;
    msg.attributes.push(AddressAttribute::Local(addr.ip()));
    msg.attributes.push(AddressAttribute::Address(addr.ip()));
    msg
}

/// RTM_NEWADDR. IPv6 addresses get IFA_F_NODAD: otherwise they stay "tentative" (not
/// usable as a source) for the ~1-2 s duplicate address detection takes after link up.
pub fn add_address(index: u32, addr: IpNetwork) -> Request {
    let mut msg = address_message(index, addr);
    if addr.is_ipv6() {
        msg.header.flags = AddressHeaderFlags::Nodad;
    }
    (
        RouteNetlinkMessage::NewAddress(msg),
        NLM_F_CREATE | NLM_F_EXCL,
    )
}

pub fn del_address(index: u32, addr: IpNetwork) -> Request {
    (
        RouteNetlinkMessage::DelAddress(address_message(index, addr)),
        0,
    )
}

/// RTM_GETADDR dump; with NETLINK_GET_STRICT_CHK the kernel filters on ifa_index itself.
pub fn dump_addresses(index: u32) -> Request {
    let mut msg = AddressMessage::default();
    msg.header.index = index;
    (RouteNetlinkMessage::GetAddress(msg), NLM_F_DUMP)
}

/// Tables above 255 do not fit rtm_table: they go in RTA_TABLE with rtm_table unset.
fn set_table(msg: &mut RouteMessage, table: Option<u32>) {
    match table {
        None => msg.header.table = RouteHeader::RT_TABLE_MAIN,
        Some(t) if t < 256 => msg.header.table = t as u8,
        Some(t) => {
            msg.header.table = RouteHeader::RT_TABLE_UNSPEC;
            msg.attributes.push(RouteAttribute::Table(t));
        }
    }
}

fn route_message(route: &RouteSpec) -> RouteMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = family(route.dst.ip());
    msg.header.destination_prefix_length = route.dst.prefix();
    // A default route has no RTA_DST, like iproute2's `default`.
    if route.dst.prefix() > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(
                route.dst.ip(),
            )));
    }
    if let Some(gw) = route.gateway {
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
    }
    if let Some(metric) = route.metric {
        msg.attributes.push(RouteAttribute::Priority(metric));
    }
    set_table(&mut msg, route.table);
    msg.attributes.push(RouteAttribute::Oif(route.oif));
    msg
}

/// RTM_NEWROUTE, protocol boot (what iproute2 marks routes it adds with). Without a gateway
/// the destination is on-link, so scope link; through a gateway, scope universe.
pub fn add_route(route: &RouteSpec) -> Request {
    let mut msg = route_message(route);
    msg.header.protocol = RouteProtocol::Boot;
    msg.header.kind = RouteType::Unicast;
    let scope = route.scope.unwrap_or(if route.gateway.is_some() {
        RT_SCOPE_UNIVERSE
    } else {
        RT_SCOPE_LINK
    });
    msg.header.scope = RouteScope::from(scope);
    if let Some(mtu) = route.mtu {
        msg.attributes
            .push(RouteAttribute::Metrics(vec![RouteMetric::Mtu(mtu)]));
    }
    (
        RouteNetlinkMessage::NewRoute(msg),
        NLM_F_CREATE | NLM_F_EXCL,
    )
}

/// RTM_DELROUTE. Protocol unspec, type unspec and scope nowhere are the kernel's wildcards,
/// so the route is found whatever it was added with (as `ip route del` does).
pub fn del_route(route: &RouteSpec) -> Request {
    let mut msg = route_message(route);
    msg.header.protocol = RouteProtocol::Unspec;
    msg.header.kind = RouteType::Unspec;
    msg.header.scope = route
        .scope
        .map(RouteScope::from)
        .unwrap_or(RouteScope::NoWhere);
    (RouteNetlinkMessage::DelRoute(msg), 0)
}

/// RTM_GETROUTE dump of one table, every family: with NETLINK_GET_STRICT_CHK the kernel
/// filters on RTA_TABLE itself, and a family asked through AF_UNSPEC answers nothing, rather
/// than ENOENT, for a table it does not have. `ip route show table N` sends the same with its
/// family.
pub fn dump_routes(table: u32) -> Request {
    let mut msg = RouteMessage::default();
    msg.header.table = RouteHeader::RT_TABLE_UNSPEC;
    msg.attributes.push(RouteAttribute::Table(table));
    (RouteNetlinkMessage::GetRoute(msg), NLM_F_DUMP)
}

/// The body iproute2 sends for `ip rule add|del from SRC lookup TABLE priority PRIO`: the
/// source's length in the header, FRA_SRC, FRA_TABLE when the table does not fit the header's
/// byte (as for routes), FRA_PRIORITY.
fn rule_message(rule: &RuleSpec) -> RuleMessage {
    let mut msg = RuleMessage::default();
    msg.header.family = family(rule.src.ip());
    msg.header.src_len = rule.src.prefix();
    msg.attributes.push(RuleAttribute::Source(rule.src.ip()));
    match u8::try_from(rule.table) {
        Ok(small) => msg.header.table = small,
        Err(_) => msg.attributes.push(RuleAttribute::Table(rule.table)),
    }
    msg.attributes.push(RuleAttribute::Priority(rule.priority));
    msg
}

/// RTM_NEWRULE, action FR_ACT_TO_TBL (a lookup in the table); NLM_F_EXCL makes an identical
/// rule EEXIST instead of a second copy.
pub fn add_rule(rule: &RuleSpec) -> Request {
    let mut msg = rule_message(rule);
    msg.header.action = RuleAction::ToTable;
    (RouteNetlinkMessage::NewRule(msg), NLM_F_CREATE | NLM_F_EXCL)
}

/// RTM_DELRULE. Action unspec is the kernel's wildcard, as `ip rule del` sends it.
pub fn del_rule(rule: &RuleSpec) -> Request {
    (RouteNetlinkMessage::DelRule(rule_message(rule)), 0)
}

/// RTM_GETRULE dump; AF_UNSPEC dumps the rules of every family.
pub fn dump_rules() -> Request {
    (
        RouteNetlinkMessage::GetRule(RuleMessage::default()),
        NLM_F_DUMP,
    )
}

/// IFLA_AF_SPEC (linux/if_link.h), the per-family attributes of a link.
const IFLA_AF_SPEC: u16 = 26;
/// AF_INET's attributes inside IFLA_AF_SPEC (linux/if_link.h: IFLA_INET_CONF).
const IFLA_INET_CONF: u16 = 1;
const AF_INET: u16 = 2;

fn nested(kind: u16, inner: &[DefaultNla]) -> DefaultNla {
    let mut value = vec![0u8; inner.buffer_len()];
    inner.emit(&mut value);
    DefaultNla::new(kind | NLA_F_NESTED, value)
}

/// RTM_NEWLINK setting per-interface IPv4 values: IFLA_AF_SPEC { AF_INET { IFLA_INET_CONF {
/// IPV4_DEVCONF_<id>: u32, ... } } }. The kernel (inet_set_link_af) sets each as a write of
/// /proc/sys/net/ipv4/conf/<if>/<name> would, and marks it set so a later change of
/// `conf/default` leaves it alone. iproute2 has no command that sends it.
pub fn set_ipv4_conf(index: u32, values: &[(Ipv4Setting, u32)]) -> Request {
    let items: Vec<DefaultNla> = values
        .iter()
        .map(|(setting, value)| DefaultNla::new(setting.id(), value.to_ne_bytes().to_vec()))
        .collect();
    let inet = nested(AF_INET, &[nested(IFLA_INET_CONF, &items)]);
    let mut msg = link_message(index);
    msg.attributes
        .push(LinkAttribute::Other(nested(IFLA_AF_SPEC, &[inet])));
    (RouteNetlinkMessage::NewLink(msg), 0)
}

/// Requests compared byte for byte with what iproute2 6.1.0 (`ip -V`: iproute2-6.1.0,
/// libbpf 1.1.2, Debian 12) sent for the same command, captured with
/// `strace -f -e trace=sendmsg,sendto -e write=all ip ...` against a scratch veth pair
/// (`cap0`, ifindex 8) and netns (`nlcap`, opened by ip as fd 4) on kernel 6.18.
/// Sequence number and port id are zeroed on both sides before comparing.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::hex;

    fn normalized(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes[8..16].fill(0);
        bytes
    }

    fn assert_bytes(req: Request, captured: &str) {
        assert_bytes_vec(req, hex(captured));
    }

    fn assert_bytes_vec(req: Request, captured: Vec<u8>) {
        let (msg, flags) = req;
        let ours = normalized(frame(msg, flags, 0x6b0c_e8c2));
        let theirs = normalized(captured);
        assert_eq!(
            ours.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            theirs
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
    }

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    /// `ip link set dev cap0 netns nlcap name net1 mtu 1300`
    const MOVE: &str = "3c000000 10000500 c2e80c6b 00000000 00000000 08000000 00000000 00000000
        08001c00 04000000 08000400 14050000 09000300 6e657431 00000000";

    #[test]
    fn move_rename_mtu_matches_iproute2() {
        let change = SetLink {
            netns_fd: Some(4),
            name: Some("net1"),
            mtu: Some(1300),
            up: None,
        };
        assert_bytes(set_link(8, &change), MOVE);
    }

    /// `ip link set dev cap0 up`
    const UP: &str = "20000000 10000500 c2e80c6b 00000000 00000000 08000000 01000000 01000000";
    /// `ip link set dev cap0 down`
    const DOWN: &str = "20000000 10000500 c2e80c6b 00000000 00000000 08000000 00000000 01000000";

    #[test]
    fn up_and_down_match_iproute2() {
        let up = SetLink {
            up: Some(true),
            ..SetLink::default()
        };
        assert_bytes(set_link(8, &up), UP);
        let down = SetLink {
            up: Some(false),
            ..SetLink::default()
        };
        assert_bytes(set_link(8, &down), DOWN);
    }

    /// `ip link set dev qv0 alias "rdma-ns roceQos dscp=26 ecn=1 priority=3"` (qv0: ifindex
    /// 1763), captured the same way on 2026-12-03: the text without a NUL.
    const ALIAS: &str = "4c000000 10000500 1a87116b 00000000 00000000 e3060000 00000000 00000000
        2c001400 72646d61 2d6e7320 726f6365 516f7320 64736370 3d323620 65636e3d 31207072
        696f7269 74793d33";
    /// `ip link set dev qv0 alias ""`: an empty attribute, which removes the alias.
    const NO_ALIAS: &str = "24000000 10000500 1a87116b 00000000 00000000 e3060000 00000000 00000000
        04001400";

    #[test]
    fn an_alias_is_set_and_removed_as_iproute2_does() {
        let text = "rdma-ns roceQos dscp=26 ecn=1 priority=3";
        assert_bytes(set_alias(1763, text), ALIAS);
        assert_bytes(set_alias(1763, ""), NO_ALIAS);
    }

    /// `ip addr add 10.1.2.3/24 dev cap0`
    const ADDR4: &str = "28000000 14000506 c2e80c6b 00000000 02180000 08000000
        08000200 0a010203 08000100 0a010203";
    /// `ip addr del 10.1.2.3/24 dev cap0`
    const ADDR4_DEL: &str = "28000000 15000500 c2e80c6b 00000000 02180000 08000000
        08000200 0a010203 08000100 0a010203";

    #[test]
    fn ipv4_address_matches_iproute2() {
        assert_bytes(add_address(8, net("10.1.2.3/24")), ADDR4);
        assert_bytes(del_address(8, net("10.1.2.3/24")), ADDR4_DEL);
    }

    /// `ip -6 addr add fd00::2/64 dev cap0 nodad`: ifa_flags = IFA_F_NODAD (0x02), and
    /// iproute2 sends IFA_LOCAL as well as IFA_ADDRESS for IPv6 too.
    const ADDR6: &str = "40000000 14000506 c2e80c6b 00000000 0a400200 08000000
        14000200 fd000000 00000000 00000000 00000002
        14000100 fd000000 00000000 00000000 00000002";
    /// `ip -6 addr del fd00::2/64 dev cap0`
    const ADDR6_DEL: &str = "40000000 15000500 d5e80c6b 00000000 0a400000 08000000
        14000200 fd000000 00000000 00000000 00000002
        14000100 fd000000 00000000 00000000 00000002";

    #[test]
    fn ipv6_address_with_nodad_matches_iproute2() {
        assert_bytes(add_address(8, net("fd00::2/64")), ADDR6);
        assert_bytes(del_address(8, net("fd00::2/64")), ADDR6_DEL);
    }

    fn route(dst: &str, gw: Option<&str>) -> RouteSpec {
        RouteSpec {
            dst: net(dst),
            gateway: gw.map(|g| g.parse().unwrap()),
            oif: 8,
            metric: None,
            mtu: None,
            table: None,
            scope: None,
        }
    }

    /// `ip route add 10.9.0.0/16 via 10.1.2.1 dev cap0`: table main (0xfe), protocol
    /// boot (3), scope universe (0), type unicast (1); RTA_DST, RTA_GATEWAY, RTA_OIF.
    const ROUTE4: &str = "34000000 18000506 c2e80c6b 00000000 02100000 fe030001 00000000
        08000100 0a090000 08000500 0a010201 08000400 08000000";
    /// `ip route del 10.9.0.0/16 via 10.1.2.1 dev cap0`: protocol 0 and scope nowhere
    /// (0xff), the wildcards.
    const ROUTE4_DEL: &str = "34000000 19000500 c2e80c6b 00000000 02100000 fe00ff00 00000000
        08000100 0a090000 08000500 0a010201 08000400 08000000";

    #[test]
    fn route_via_gateway_matches_iproute2() {
        let r = route("10.9.0.0/16", Some("10.1.2.1"));
        assert_bytes(add_route(&r), ROUTE4);
        assert_bytes(del_route(&r), ROUTE4_DEL);
    }

    /// `ip route add 10.9.0.0/16 via 10.1.2.1 dev cap0 metric 100 mtu 1400`: RTA_PRIORITY
    /// before RTA_OIF, RTA_METRICS { RTAX_MTU } last.
    const ROUTE4_METRIC_MTU: &str = "48000000 18000506 d5e80c6b 00000000 02100000 fe030001
        00000000 08000100 0a090000 08000500 0a010201 08000600 64000000 08000400 08000000
        0c000800 08000200 78050000";

    #[test]
    fn route_metric_and_mtu_match_iproute2() {
        let r = RouteSpec {
            metric: Some(100),
            mtu: Some(1400),
            ..route("10.9.0.0/16", Some("10.1.2.1"))
        };
        assert_bytes(add_route(&r), ROUTE4_METRIC_MTU);
    }

    /// `ip route add 10.8.0.0/16 dev cap0`: no gateway, so scope link (0xfd).
    const ROUTE4_LINK: &str = "2c000000 18000506 d5e80c6b 00000000 02100000 fe03fd01
        00000000 08000100 0a080000 08000400 08000000";
    /// `ip route add 10.7.0.0/16 dev cap0 table 1000`: rtm_table 0 and RTA_TABLE 1000.
    const ROUTE4_TABLE: &str = "34000000 18000506 d5e80c6b 00000000 02100000 0003fd01
        00000000 08000100 0a070000 08000f00 e8030000 08000400 08000000";

    #[test]
    fn onlink_route_and_big_table_match_iproute2() {
        assert_bytes(add_route(&route("10.8.0.0/16", None)), ROUTE4_LINK);
        let r = RouteSpec {
            table: Some(1000),
            ..route("10.7.0.0/16", None)
        };
        assert_bytes(add_route(&r), ROUTE4_TABLE);
    }

    /// `ip -6 route add fd01::/64 via fd00::1 dev cap0`
    const ROUTE6: &str = "4c000000 18000506 d5e80c6b 00000000 0a400000 fe030001 00000000
        14000100 fd010000 00000000 00000000 00000000
        14000500 fd000000 00000000 00000000 00000001 08000400 08000000";

    #[test]
    fn ipv6_route_matches_iproute2() {
        assert_bytes(add_route(&route("fd01::/64", Some("fd00::1"))), ROUTE6);
    }

    /// Intended difference: iproute2 sends IFLA_INFO_KIND without its NUL (nla_len 4 +
    /// strlen); netlink-packet-route includes the NUL (one more in nla_len, same padded
    /// bytes). The kernel's policy for IFLA_INFO_KIND is NLA_STRING, which takes both (the
    /// root tests create macvlans with this encoding). `kind_at` is the offset of that
    /// attribute's nla_len in the capture.
    fn with_kind_nul(captured: &str, kind_at: usize) -> Vec<u8> {
        let mut bytes = hex(captured);
        bytes[kind_at] += 1;
        bytes
    }

    /// `ip link add link ib0 name ib0.8001 type ipoib pkey 0x8001 mode connected umcast 1`
    /// with a veth named ib0 at ifindex 10 (the kernel then refuses: no ipoib driver).
    /// IFLA_LINKINFO and IFLA_INFO_DATA go without NLA_F_NESTED, as iproute2 sends them.
    const IPOIB: &str = "64000000 10000506 c2e80c6b 00000000 00000000 00000000 00000000 00000000
        08000500 0a000000 0d000300 6962302e 38303031 00000000
        2c001200 09000100 69706f69 62000000 1c000200 06000100 01800000
        06000200 01000000 06000300 01000000";

    #[test]
    fn ipoib_child_matches_iproute2() {
        let spec = CreateLink {
            name: "ib0.8001",
            kind: LinkKind::Ipoib {
                pkey: Some(0x8001),
                mode: Some(1),
                umcast: Some(1),
            },
            parent_index: 10,
            netns_fd: None,
            mtu: None,
            hwaddr: None,
        };
        assert_bytes_vec(create_link(&spec), with_kind_nul(IPOIB, 0x3c));
    }

    /// `ip link add link cap0 name mv0 netns nlcap type macvlan mode bridge`
    const MACVLAN: &str = "54000000 10000506 c2e80c6b 00000000 00000000 00000000 00000000 00000000
        08001c00 04000000 08000500 08000000 08000300 6d763000
        1c001200 0b000100 6d616376 6c616e00 0c000200 08000100 04000000";
    /// `ip link add link cap0 name mv1 netns nlcap mtu 1400 address 02:00:00:00:00:01
    /// type macvlan mode private`
    const MACVLAN_MTU_ADDR: &str = "68000000 10000506 d5e80c6b 00000000 00000000 00000000 00000000
        00000000 08001c00 04000000 08000400 78050000 0a000100 02000000 00010000
        08000500 08000000 08000300 6d763100 1c001200 0b000100 6d616376 6c616e00
        0c000200 08000100 01000000";

    #[test]
    fn macvlan_child_in_netns_matches_iproute2() {
        let spec = CreateLink {
            name: "mv0",
            kind: LinkKind::Macvlan {
                mode: MacvlanMode::Bridge,
            },
            parent_index: 8,
            netns_fd: Some(4),
            mtu: None,
            hwaddr: None,
        };
        assert_bytes_vec(create_link(&spec), with_kind_nul(MACVLAN, 0x3c));
        let mac = [2, 0, 0, 0, 0, 1];
        let spec = CreateLink {
            name: "mv1",
            kind: LinkKind::Macvlan {
                mode: MacvlanMode::Private,
            },
            mtu: Some(1400),
            hwaddr: Some(&mac),
            ..spec
        };
        assert_bytes_vec(create_link(&spec), with_kind_nul(MACVLAN_MTU_ADDR, 0x50));
    }

    /// `ip -n nlcap link del dev mv0` (mv0 was ifindex 2 in nlcap)
    const DEL: &str = "20000000 11000500 c2e80c6b 00000000 00000000 02000000 00000000 00000000";
    /// `ip link property del dev cap0 altname capalt0`: IFLA_PROP_LIST with NLA_F_NESTED.
    const ALTNAME_DEL: &str = "30000000 6d000500 c2e80c6b 00000000 00000000 08000000 00000000
        00000000 10003480 0c003500 63617061 6c743000";

    #[test]
    fn delete_link_and_altname_match_iproute2() {
        assert_bytes(delete_link(2), DEL);
        assert_bytes(del_altname(8, "capalt0"), ALTNAME_DEL);
    }

    /// The lookup iproute2 does before each command above (`dev cap0`): RTM_GETLINK with
    /// IFLA_EXT_MASK = RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS (9) and no NLM_F_ACK.
    const GETLINK: &str = "34000000 12000100 c2e80c6b 00000000 00000000 00000000 00000000
        00000000 08001d00 09000000 09000300 63617030 00000000";

    #[test]
    fn getlink_by_name_differs_from_iproute2_only_where_intended() {
        let mut expected = hex(GETLINK);
        // Intended difference 1: NLM_F_ACK (flags 0x0005, not 0x0001), so every non-dump
        // request ends with an NLMSG_ERROR the socket can wait for.
        expected[6] = 0x05;
        // Intended difference 2: ext mask 8 (RTEXT_FILTER_SKIP_STATS) without
        // RTEXT_FILTER_VF: VF lists are large on SR-IOV PFs and not used.
        expected[0x24] = 0x08;
        let (msg, flags) = get_link_by_name("cap0");
        assert_eq!(
            normalized(frame(msg, flags, 1)),
            normalized(expected),
            "RTM_GETLINK by name"
        );
    }

    #[test]
    fn long_names_are_looked_up_as_altnames() {
        // IFLA_IFNAME's policy caps names at 15 bytes, so a longer name goes out as
        // IFLA_ALT_IFNAME (53), which the kernel resolves through the same name table.
        let (msg, flags) = get_link_by_name("a-twenty-byte-altnam");
        let bytes = frame(msg, flags, 1);
        let attr = &bytes[0x28..];
        assert_eq!(&attr[..4], &[25, 0, 53, 0]);
        assert_eq!(&attr[4..25], b"a-twenty-byte-altnam\0");
    }

    #[test]
    fn index_lookup_and_dumps() {
        let (msg, flags) = get_link_by_index(8);
        assert_eq!(
            normalized(frame(msg, flags, 1)),
            normalized(hex(
                "28000000 12000500 00000000 00000000 00000000 08000000 00000000 00000000
                 08001d00 08000000"
            ))
        );
        // The same in the netns the socket's netns calls 0: IFLA_TARGET_NETNSID (46), s32.
        let (msg, flags) = get_link_by_index_in_netnsid(1343, 0);
        assert_eq!(
            normalized(frame(msg, flags, 1)),
            normalized(hex(
                "30000000 12000500 00000000 00000000 00000000 3f050000 00000000 00000000
                 08001d00 08000000 08002e00 00000000"
            ))
        );
        // NLM_F_DUMP (0x300), no ACK; ifinfomsg all zero as strict checking requires.
        let (msg, flags) = dump_links();
        assert_eq!(
            normalized(frame(msg, flags, 1)),
            normalized(hex(
                "28000000 12000103 00000000 00000000 00000000 00000000 00000000 00000000
                 08001d00 08000000"
            ))
        );
        // RTM_GETADDR dump, family unspec, ifa_index as the filter.
        let (msg, flags) = dump_addresses(8);
        assert_eq!(
            normalized(frame(msg, flags, 1)),
            normalized(hex("18000000 16000103 00000000 00000000 00000000 08000000"))
        );
    }

    #[test]
    fn ipoib_child_without_options_sends_no_data() {
        let spec = CreateLink {
            name: "ib0.8002",
            kind: LinkKind::Ipoib {
                pkey: None,
                mode: None,
                umcast: None,
            },
            parent_index: 10,
            netns_fd: None,
            mtu: None,
            hwaddr: None,
        };
        let (msg, flags) = create_link(&spec);
        let bytes = frame(msg, flags, 1);
        // The last attribute is IFLA_LINKINFO holding only IFLA_INFO_KIND "ipoib\0".
        assert_eq!(
            &bytes[bytes.len() - 16..],
            &hex("10001200 0a000100 69706f69 62000000")[..]
        );
    }

    #[test]
    fn default_route_has_no_destination() {
        let (msg, flags) = add_route(&route("0.0.0.0/0", Some("10.1.2.1")));
        assert_eq!(
            normalized(frame(msg, flags, 1)),
            normalized(hex(
                "2c000000 18000506 00000000 00000000 02000000 fe030001 00000000
                 08000500 0a010201 08000400 08000000"
            ))
        );
    }

    /// `ip rule add from 10.1.0.2 lookup 1005 priority 1000`: family AF_INET, src_len 32,
    /// rtm_table 0 with FRA_TABLE 1005 (15), action FR_ACT_TO_TBL (1); FRA_SRC (2) and
    /// FRA_PRIORITY (6). Captured in a scratch netns with `strace -f -s 4096 -e trace=sendmsg
    /// -xx ip -n ... rule ...` (iproute2 6.1.0, kernel 6.18).
    const RULE4: &str = "34000000 20000506 c2e80c6b 00000000 02002000 00000001 00000000
        08000200 0a010002 08000f00 ed030000 08000600 e8030000";
    /// `ip rule del from 10.1.0.2 lookup 1005 priority 1000`: action 0, the wildcard.
    const RULE4_DEL: &str = "34000000 21000500 c2e80c6b 00000000 02002000 00000000 00000000
        08000200 0a010002 08000f00 ed030000 08000600 e8030000";
    /// `ip rule add from 10.1.0.2 lookup 100 priority 1000`: a table below 256 goes in the
    /// header, without FRA_TABLE.
    const RULE4_SMALL_TABLE: &str = "2c000000 20000506 c2e80c6b 00000000 02002000 64000001
        00000000 08000200 0a010002 08000600 e8030000";
    /// `ip -6 rule add from fd00::2 lookup 1005 priority 1000` and its `del`.
    const RULE6: &str = "40000000 20000506 c2e80c6b 00000000 0a008000 00000001 00000000
        14000200 fd000000 00000000 00000000 00000002 08000f00 ed030000 08000600 e8030000";
    const RULE6_DEL: &str = "40000000 21000500 c2e80c6b 00000000 0a008000 00000000 00000000
        14000200 fd000000 00000000 00000000 00000002 08000f00 ed030000 08000600 e8030000";

    fn rule(src: &str, table: u32) -> RuleSpec {
        RuleSpec {
            src: net(src),
            table,
            priority: 1000,
        }
    }

    #[test]
    fn rules_match_iproute2() {
        assert_bytes(add_rule(&rule("10.1.0.2/32", 1005)), RULE4);
        assert_bytes(del_rule(&rule("10.1.0.2/32", 1005)), RULE4_DEL);
        assert_bytes(add_rule(&rule("10.1.0.2/32", 100)), RULE4_SMALL_TABLE);
        assert_bytes(add_rule(&rule("fd00::2/128", 1005)), RULE6);
        assert_bytes(del_rule(&rule("fd00::2/128", 1005)), RULE6_DEL);
    }

    /// `ip route show table 1005` and `ip rule show`: RTM_GETROUTE with RTA_TABLE, and
    /// RTM_GETRULE, as dumps.
    const ROUTE_DUMP_TABLE: &str = "24000000 1a000103 c2e80c6b 00000000 02000000 00000000
        00000000 08000f00 ed030000";
    const RULE_DUMP: &str = "1c000000 22000103 c2e80c6b 00000000 02000000 00000000 00000000";

    #[test]
    fn table_and_rule_dumps_differ_from_iproute2_only_in_the_family() {
        // Intended difference: AF_UNSPEC (0), not AF_INET, so one dump answers for IPv4 and
        // IPv6 (iproute2 dumps one family per command, `-6` for the other).
        let mut table = hex(ROUTE_DUMP_TABLE);
        table[16] = 0;
        assert_bytes_vec(dump_routes(1005), table);
        let mut rules = hex(RULE_DUMP);
        rules[16] = 0;
        assert_bytes_vec(dump_rules(), rules);
    }

    /// IFLA_AF_SPEC (26) { AF_INET (2) { IFLA_INET_CONF (1) { IPV4_DEVCONF_ARP_IGNORE (19): 1,
    /// IPV4_DEVCONF_ARP_ANNOUNCE (18): 2, IPV4_DEVCONF_RP_FILTER (8): 0 } } }, each nest with
    /// NLA_F_NESTED, on ifindex 8. iproute2 has no command that sends IFLA_INET_CONF, so the
    /// expected bytes are laid out here from linux/if_link.h and linux/ip.h; the root tier's
    /// netlink test reads what the kernel made of them back from /proc/sys.
    const IPV4_CONF: &str = "44000000 10000500 c2e80c6b 00000000 00000000 08000000 00000000
        00000000 24001a80 20000280 1c000180 08001300 01000000 08001200 02000000 08000800
        00000000";

    #[test]
    fn ipv4_conf_request_is_the_uapi_layout() {
        let values = [
            (Ipv4Setting::ArpIgnore, 1),
            (Ipv4Setting::ArpAnnounce, 2),
            (Ipv4Setting::RpFilter, 0),
        ];
        assert_bytes(set_ipv4_conf(8, &values), IPV4_CONF);
    }

    #[test]
    fn flags_add_ack_except_for_dumps() {
        assert_eq!(final_flags(0), NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(final_flags(NLM_F_DUMP), NLM_F_REQUEST | NLM_F_DUMP);
    }
}
