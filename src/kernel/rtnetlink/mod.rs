//! rtnetlink (NETLINK_ROUTE): [`NetOps`], what the attachment steps ask of links, addresses and
//! routes, with its value types, and [`RealKernel`], its implementation on netlink sockets.
//!
//! A new request touches this folder and the fake host: its encoder in `request.rs` (and its
//! reply decoder in `decode.rs`), its method on [`NetOps`] and on [`RealKernel`] here, the fake's
//! answer and a `Call` variant in `kernel/fake.rs`, and, when the
//! steps rely on how the kernel behaves, a scenario in `kernel/conformance.rs` that runs on both.
//!
//! One socket per namespace. A netlink socket acts in the namespace it was created in, so
//! the host socket is opened at construction and each pod's socket is created once, by a
//! bare socket(2) while the thread is briefly inside the pod's namespace ([`Netns::run_in`]),
//! then configured and used from the host namespace. An open socket holds a reference on its
//! namespace, so the namespace (and the nsfs inode the cache is keyed by) cannot be freed and
//! reused while it is cached.

mod decode;
mod peer;
mod request;

#[cfg(test)]
pub(crate) mod fuzz_tests;

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use ipnetwork::IpNetwork;
use nix::libc;

use self::request::{CreateLink, SetLink};
use super::netlink::{NlError, NlSocket, Reply, Route};
use super::{KResult, KernelError, Netns, Ns};

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const RTM_NEWRULE: u16 = 32;
/// IFNAMSIZ - 1: the longest primary interface name.
const IFNAME_MAX: usize = 15;
/// ALTIFNAMSIZ - 1: the longest name (an altname) the kernel can hold.
const ALTIFNAME_MAX: usize = 127;

/// What the attachment steps need from rtnetlink, in a given namespace.
///
/// Implementations open their netlink socket inside the namespace they act in (a socket
/// acts in the netns it was created in) and may cache one socket per namespace.
pub trait NetOps {
    /// RTM_GETLINK by name. The kernel also matches alternative names, so the returned
    /// link's `name` may differ from `name`; callers that need the primary name compare.
    fn link_by_name(&self, ns: Ns<'_>, name: &str) -> KResult<Option<Link>>;
    /// RTM_GETLINK by ifindex.
    fn link_by_index(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Link>>;
    /// RTM_GETLINK dump of every link in the namespace.
    fn links(&self, ns: Ns<'_>) -> KResult<Vec<Link>>;
    /// The links whose current or permanent hardware address is `addr`: the same dump, with
    /// only the matching links decoded.
    fn links_with_hwaddr(&self, ns: Ns<'_>, addr: &[u8]) -> KResult<Vec<Link>> {
        Ok(self
            .links(ns)?
            .into_iter()
            .filter(|l| l.hwaddr == addr || l.perm_hwaddr.as_deref() == Some(addr))
            .collect())
    }
    /// One RTM_NEWLINK applying `change` to the link `index` in `ns`.
    ///
    /// The kernel applies the parts in a fixed order (netns move, MTU, name, then IFF_UP) and
    /// stops at the first failure without undoing the earlier parts: after an error the link
    /// may already be in the target namespace, still under its old name (e.g. EEXIST when
    /// the new name is taken there). Callers that roll back must re-read the link. A move
    /// keeps the ifindex unless the target namespace already uses it.
    fn set_link(&self, ns: Ns<'_>, index: u32, change: &LinkChange<'_>) -> KResult<()>;
    /// RTM_DELLINKPROP removing an alternative name (IFLA_ALT_IFNAME).
    fn del_altname(&self, ns: Ns<'_>, index: u32, altname: &str) -> KResult<()>;
    /// Sets the link's alias (IFLA_IFALIAS); an empty one removes it.
    fn set_alias(&self, ns: Ns<'_>, index: u32, alias: &str) -> KResult<()>;
    /// Addresses (RTM_GETADDR dump filtered to `index`), with their prefix length.
    fn addresses(&self, ns: Ns<'_>, index: u32) -> KResult<Vec<IpNetwork>>;
    /// RTM_NEWADDR. IPv6 addresses are added with IFA_F_NODAD so they are usable at once.
    fn add_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()>;
    /// RTM_DELADDR.
    fn del_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()>;
    /// RTM_NEWROUTE (NLM_F_CREATE | NLM_F_EXCL).
    fn add_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()>;
    /// RTM_DELROUTE.
    fn del_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()>;
    /// One RTM_NEWLINK creating a child of `spec.parent_index` (a link in `ns`), named and
    /// placed in its final namespace by the same request.
    fn create_link(&self, ns: Ns<'_>, spec: &NewLink<'_>) -> KResult<()>;
    /// RTM_DELLINK.
    fn delete_link(&self, ns: Ns<'_>, index: u32) -> KResult<()>;
    /// RTM_GETROUTE dump of table `table`, every family; empty when the table does not exist.
    /// Routes leave a table with their link: a link deleted or moved to another netns takes
    /// its routes, in every table, with it.
    fn routes(&self, ns: Ns<'_>, table: u32) -> KResult<Vec<RouteSpec>>;
    /// RTM_NEWRULE (NLM_F_CREATE | NLM_F_EXCL): an identical rule is EEXIST. A rule names no
    /// link, so it stays in its netns until it is deleted or the netns goes.
    fn add_rule(&self, ns: Ns<'_>, rule: &RuleSpec) -> KResult<()>;
    /// RTM_DELRULE; ENOENT when there is no such rule.
    fn del_rule(&self, ns: Ns<'_>, rule: &RuleSpec) -> KResult<()>;
    /// RTM_GETRULE dump of every family: the rules of [`RuleSpec`]'s shape; the others (the
    /// default rules, rules on marks or interfaces) are left out.
    fn rules(&self, ns: Ns<'_>) -> KResult<Vec<RuleSpec>>;
    /// One RTM_NEWLINK setting per-interface IPv4 values of the link `index` (what writing
    /// /proc/sys/net/ipv4/conf/<if>/<name> would do, by ifindex and from the socket's netns).
    /// They go with the link: a link moved to another netns starts from that netns's defaults.
    fn set_ipv4_conf(&self, ns: Ns<'_>, index: u32, values: &[(Ipv4Setting, u32)]) -> KResult<()>;
    /// The link's per-interface IPv4 values, from its RTM_GETLINK reply; None when there is no
    /// such link.
    fn ipv4_conf(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Ipv4Conf>>;
}

/// A policy routing rule of the one shape the attachment steps add: `from <src> lookup
/// <table> priority <priority>` (FRA_SRC, FRA_TABLE, FRA_PRIORITY; action FR_ACT_TO_TBL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleSpec {
    pub src: IpNetwork,
    pub table: u32,
    pub priority: u32,
}

/// A per-interface IPv4 setting (IPV4_DEVCONF_*, linux/ip.h), by its sysctl name under
/// /proc/sys/net/ipv4/conf/<if>/. The kernel applies the larger of `conf/all` and the
/// interface's value for these three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv4Setting {
    RpFilter,
    ArpAnnounce,
    ArpIgnore,
}

impl Ipv4Setting {
    pub const ALL: [Ipv4Setting; 3] = [
        Ipv4Setting::ArpIgnore,
        Ipv4Setting::ArpAnnounce,
        Ipv4Setting::RpFilter,
    ];

    /// IPV4_DEVCONF_RP_FILTER, _ARP_ANNOUNCE, _ARP_IGNORE: the attribute type in
    /// IFLA_INET_CONF, and one more than the value's index in the kernel's array.
    pub const fn id(self) -> u16 {
        match self {
            Ipv4Setting::RpFilter => 8,
            Ipv4Setting::ArpAnnounce => 18,
            Ipv4Setting::ArpIgnore => 19,
        }
    }

    /// Its name under /proc/sys/net/ipv4/conf/<if>/.
    pub const fn sysctl(self) -> &'static str {
        match self {
            Ipv4Setting::RpFilter => "rp_filter",
            Ipv4Setting::ArpAnnounce => "arp_announce",
            Ipv4Setting::ArpIgnore => "arp_ignore",
        }
    }
}

/// The per-interface IPv4 values of a link as the kernel reports them (IFLA_INET_CONF: one u32
/// per IPV4_DEVCONF_*, in id order from 1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ipv4Conf(pub Vec<u32>);

impl Ipv4Conf {
    /// The value of `setting`; None when the kernel's array is too short to hold it.
    pub fn get(&self, setting: Ipv4Setting) -> Option<u32> {
        self.0.get(usize::from(setting.id()) - 1).copied()
    }
}

/// A network interface as rtnetlink reports it (RTM_NEWLINK reply).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mtu: u32,
    /// IFLA_ADDRESS: 6 bytes for Ethernet, 20 for IPoIB.
    pub hwaddr: Vec<u8>,
    /// IFLA_PERM_ADDRESS when the driver has one.
    pub perm_hwaddr: Option<Vec<u8>>,
    /// IFF_UP (administrative state).
    pub up: bool,
    /// IFLA_INFO_KIND for virtual devices (veth, macvlan, ipoib...); None for plain NICs.
    pub kind: Option<String>,
    /// ifi_type: ARPHRD_ETHER = 1, ARPHRD_INFINIBAND = 32.
    pub link_type: u16,
    /// IFLA_PROP_LIST alternative names.
    pub altnames: Vec<String>,
    /// IFLA_PARENT_DEV_NAME, e.g. the PCI address `0000:3b:00.2` or `mlx5_core.sf.4`.
    pub parent_dev: Option<String>,
    /// IFLA_PARENT_DEV_BUS_NAME, e.g. `pci` or `auxiliary`.
    pub parent_bus: Option<String>,
    /// IFLA_LINK: the lower device's ifindex (macvlan/ipoib children, veth peers).
    pub link: Option<u32>,
    /// IFLA_LINK_NETNSID: the id, in this link's netns, of the netns the lower device lives in;
    /// None when it lives in the link's own netns (rtnetlink.c `rtnl_fill_link_netnsid` puts it
    /// only for a lower device elsewhere, as a macvlan made in a pod on a host parent).
    pub link_netnsid: Option<i32>,
    /// IFLA_IFALIAS, which the kernel reports only when the link has one.
    pub alias: Option<String>,
    /// IFLA_INFO_DATA attributes as (type, value), for the kinds whose settings are read back
    /// (ipoib, macvlan): netlink-created IPoIB children have no mode/pkey/umcast in sysfs.
    pub info_data: Vec<(u16, Vec<u8>)>,
}

/// IFLA_IPOIB_* settings of an IPoIB link (linux/if_link.h; all u16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpoibInfo {
    pub pkey: Option<u16>,
    /// IPOIB_MODE_DATAGRAM = 0, IPOIB_MODE_CONNECTED = 1.
    pub mode: Option<u16>,
    pub umcast: Option<u16>,
}

impl Link {
    /// The hardware address in the usual `aa:bb:...` lowercase form.
    pub fn hwaddr_string(&self) -> String {
        format_hwaddr(&self.hwaddr)
    }

    fn info_u16(&self, kind: u16) -> Option<u16> {
        self.info_data
            .iter()
            .find(|(k, v)| *k == kind && v.len() >= 2)
            .map(|(_, v)| u16::from_ne_bytes([v[0], v[1]]))
    }

    fn info_u32(&self, kind: u16) -> Option<u32> {
        self.info_data
            .iter()
            .find(|(k, v)| *k == kind && v.len() >= 4)
            .map(|(_, v)| u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
    }

    /// IPoIB settings, when this is an `ipoib` link.
    pub fn ipoib_info(&self) -> Option<IpoibInfo> {
        (self.kind.as_deref() == Some("ipoib")).then(|| IpoibInfo {
            pkey: self.info_u16(1),
            mode: self.info_u16(2),
            umcast: self.info_u16(3),
        })
    }

    /// IFLA_MACVLAN_MODE (u32), when this is a `macvlan` link.
    pub fn macvlan_mode(&self) -> Option<u32> {
        (self.kind.as_deref() == Some("macvlan"))
            .then(|| self.info_u32(1))
            .flatten()
    }

    /// The PCI address of the device's parent, when its parent is a PCI function.
    pub fn pci_address(&self) -> Option<&str> {
        match (self.parent_bus.as_deref(), self.parent_dev.as_deref()) {
            (Some("pci"), Some(dev)) => Some(dev),
            _ => None,
        }
    }
}

/// Formats a hardware address as lowercase hex pairs joined by `:`.
pub fn format_hwaddr(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Parses `aa:bb:cc:dd:ee:ff` (or `-` separated, any case) into bytes.
pub fn parse_hwaddr(text: &str) -> Option<Vec<u8>> {
    let parts: Vec<&str> = text.split([':', '-']).collect();
    if parts.len() < 2 {
        return None;
    }
    parts
        .iter()
        .map(|p| {
            if p.len() == 2 {
                u8::from_str_radix(p, 16).ok()
            } else {
                None
            }
        })
        .collect()
}

/// One RTM_NEWLINK change. Everything set here goes out in a single request, so a netns move,
/// a rename and an MTU change cost one round trip and one kernel move (the expensive part).
#[derive(Debug, Clone, Default)]
pub struct LinkChange<'a> {
    /// Move to this namespace (IFLA_NET_NS_FD). `Some(Ns::Host)` moves back to the host.
    pub netns: Option<Ns<'a>>,
    /// New name (IFLA_IFNAME). Applied by the kernel in the target netns when moving.
    pub name: Option<String>,
    /// New MTU (IFLA_MTU).
    pub mtu: Option<u32>,
    /// Administrative state (IFF_UP in ifi_flags with ifi_change).
    pub up: Option<bool>,
}

/// A route to install (RTM_NEWROUTE), always through a given interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    pub dst: IpNetwork,
    pub gateway: Option<std::net::IpAddr>,
    pub oif: u32,
    pub metric: Option<u32>,
    pub mtu: Option<u32>,
    pub table: Option<u32>,
    /// RT_SCOPE_* value; None lets the plugin choose (link scope when there is no gateway).
    pub scope: Option<u8>,
}

/// A child interface to create (RTM_NEWLINK with NLM_F_CREATE | NLM_F_EXCL).
#[derive(Debug, Clone)]
pub struct NewLink<'a> {
    /// The child's final name, applied at creation in `target_netns`.
    pub name: String,
    pub kind: LinkKind,
    /// IFLA_LINK: the parent's ifindex in the namespace the request is sent in.
    pub parent_index: u32,
    /// Create the child directly in this namespace (IFLA_NET_NS_FD); None keeps it beside
    /// the parent.
    pub target_netns: Option<Ns<'a>>,
    pub mtu: Option<u32>,
    pub hwaddr: Option<Vec<u8>>,
}

/// What kind of child interface [`NewLink`] creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Macvlan {
        mode: MacvlanMode,
    },
    /// An IPoIB child (P_Key partition); unset fields keep the kernel's defaults.
    Ipoib {
        pkey: Option<u16>,
        /// IPOIB_MODE_DATAGRAM = 0, IPOIB_MODE_CONNECTED = 1.
        mode: Option<u16>,
        umcast: Option<u16>,
    },
}

impl LinkKind {
    /// The IFLA_INFO_KIND string.
    pub fn kind_name(&self) -> &'static str {
        match self {
            LinkKind::Macvlan { .. } => "macvlan",
            LinkKind::Ipoib { .. } => "ipoib",
        }
    }
}

/// IFLA_MACVLAN_MODE values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacvlanMode {
    Private,
    Vepa,
    Bridge,
    Passthru,
}

/// [`NetOps`] against the running kernel.
pub struct RealKernel {
    host: RefCell<NlSocket<Route>>,
    /// The namespace the plugin started in, held open so a link can be moved back to it
    /// by fd (IFLA_NET_NS_FD) from a socket inside a pod.
    host_ns: Netns,
    pods: RefCell<HashMap<(u64, u64), NlSocket<Route>>>,
}

impl RealKernel {
    /// Opens the host socket and a handle on the host namespace, both in the calling
    /// thread's namespace.
    pub fn new() -> io::Result<RealKernel> {
        Ok(RealKernel {
            host: RefCell::new(NlSocket::open()?),
            host_ns: Netns::current()?,
            pods: RefCell::new(HashMap::new()),
        })
    }

    /// Runs `f` with the socket of `ns`, opening it inside the namespace on first use.
    fn with_socket<T>(
        &self,
        ns: Ns<'_>,
        f: impl FnOnce(&mut NlSocket<Route>) -> Result<T, NlError>,
    ) -> Result<T, NlError> {
        match ns {
            Ns::Host => f(&mut self.host.borrow_mut()),
            Ns::Pod(netns) => {
                let key = netns
                    .identity()
                    .map_err(|e| io_error("cannot identify the namespace (fstat on its fd)", e))?;
                let mut pods = self.pods.borrow_mut();
                let sock = match pods.entry(key) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        e.insert(NlSocket::open_in(netns, &self.host_ns).map_err(|e| {
                            io_error("cannot open a netlink socket inside the namespace", e)
                        })?)
                    }
                };
                f(sock)
            }
        }
    }

    fn request(&self, ns: Ns<'_>, req: request::Request) -> Result<Vec<Reply>, NlError> {
        let (msg, flags) = req;
        self.with_socket(ns, |sock| {
            sock.request(|seq| request::frame(msg.clone(), flags, seq))
        })
    }

    fn decode_links(replies: &[Reply]) -> Result<Vec<Link>, NlError> {
        replies
            .iter()
            .filter(|r| r.message_type == RTM_NEWLINK)
            .map(|r| decode::link(&r.payload).map_err(NlError::decode))
            .collect()
    }

    /// The fd the kernel resolves IFLA_NET_NS_FD with. The kernel looks the fd up in the
    /// sending task's fd table, not the socket's namespace, so these fds (opened in this
    /// process) work from every socket.
    fn netns_fd(&self, ns: Ns<'_>) -> RawFd {
        match ns {
            Ns::Host => self.host_ns.fd().as_raw_fd(),
            Ns::Pod(netns) => netns.fd().as_raw_fd(),
        }
    }

    /// `name (ifindex N)` for error messages; only looked up once something has failed.
    fn describe(&self, ns: Ns<'_>, index: u32) -> String {
        match self.link_by_index(ns, index) {
            Ok(Some(link)) => format!("{} (ifindex {index})", link.name),
            Ok(None) => format!("ifindex {index} (no such link in {ns} after the failure)"),
            Err(_) => format!("ifindex {index}"),
        }
    }

    fn get_one_link(&self, ns: Ns<'_>, req: request::Request) -> Result<Option<Link>, NlError> {
        let replies = match self.request(ns, req) {
            Ok(r) => r,
            Err(e) if e.errno == libc::ENODEV => return Ok(None),
            Err(e) => return Err(e),
        };
        match replies.iter().find(|r| r.message_type == RTM_NEWLINK) {
            Some(reply) => decode::link(&reply.payload)
                .map(Some)
                .map_err(NlError::decode),
            None => Err(NlError::decode("RTM_GETLINK answered without a link")),
        }
    }
}

fn io_error(what: &str, e: io::Error) -> NlError {
    NlError::errno(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("{what}: {e}"),
    )
}

fn change_text(change: &LinkChange<'_>) -> String {
    let mut parts = Vec::new();
    if let Some(ns) = change.netns {
        parts.push(format!("move to {ns}"));
    }
    if let Some(mtu) = change.mtu {
        parts.push(format!("mtu {mtu}"));
    }
    if let Some(name) = &change.name {
        parts.push(format!("rename to {name}"));
    }
    match change.up {
        Some(true) => parts.push("set up".to_string()),
        Some(false) => parts.push("set down".to_string()),
        None => {}
    }
    if parts.is_empty() {
        "set link (no change)".to_string()
    } else {
        format!("set link: {}", parts.join(", "))
    }
}

fn route_text(verb: &str, route: &RouteSpec) -> String {
    let mut text = format!("{verb} route {}", route.dst);
    if let Some(gw) = route.gateway {
        text.push_str(&format!(" via {gw}"));
    }
    if let Some(metric) = route.metric {
        text.push_str(&format!(" metric {metric}"));
    }
    if let Some(mtu) = route.mtu {
        text.push_str(&format!(" mtu {mtu}"));
    }
    if let Some(table) = route.table {
        text.push_str(&format!(" table {table}"));
    }
    text
}

/// Interface names reach the kernel as C strings: an embedded NUL would silently cut the
/// name short and could match a different link.
fn check_name(name: &str, max: usize) -> Result<(), NlError> {
    if name.is_empty() || name.contains('\0') || name.len() > max {
        return Err(NlError::errno(
            libc::EINVAL,
            format!("invalid interface name {name:?} (1 to {max} bytes, no NUL)"),
        ));
    }
    Ok(())
}

impl NetOps for RealKernel {
    fn link_by_name(&self, ns: Ns<'_>, name: &str) -> KResult<Option<Link>> {
        check_name(name, ALTIFNAME_MAX)
            .and_then(|()| self.get_one_link(ns, request::get_link_by_name(name)))
            .map_err(|e| KernelError::netlink("look up link by name", name, ns, e))
    }

    fn link_by_index(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Link>> {
        // ifindex 0 means "by name" to the kernel, and is never a link.
        if index == 0 {
            return Ok(None);
        }
        self.get_one_link(ns, request::get_link_by_index(index))
            .map_err(|e| {
                KernelError::netlink("look up link by index", format!("ifindex {index}"), ns, e)
            })
    }

    fn links(&self, ns: Ns<'_>) -> KResult<Vec<Link>> {
        let fail = |e| KernelError::netlink("list links", "all links", ns, e);
        let replies = self.request(ns, request::dump_links()).map_err(fail)?;
        Self::decode_links(&replies).map_err(fail)
    }

    fn links_with_hwaddr(&self, ns: Ns<'_>, addr: &[u8]) -> KResult<Vec<Link>> {
        let fail = |e| {
            KernelError::netlink(
                "list links",
                format!("hwaddr {}", format_hwaddr(addr)),
                ns,
                e,
            )
        };
        let (msg, flags) = request::dump_links();
        let replies = self
            .with_socket(ns, |sock| {
                sock.request_keeping(
                    |seq| request::frame(msg.clone(), flags, seq),
                    |kind, payload| kind == RTM_NEWLINK && decode::link_has_hwaddr(payload, addr),
                )
            })
            .map_err(fail)?;
        Self::decode_links(&replies).map_err(fail)
    }

    fn set_link(&self, ns: Ns<'_>, index: u32, change: &LinkChange<'_>) -> KResult<()> {
        let name = change.name.as_deref();
        let result = match name.map(|n| check_name(n, IFNAME_MAX)) {
            Some(Err(e)) => Err(e),
            _ => {
                let req = request::set_link(
                    index,
                    &SetLink {
                        netns_fd: change.netns.map(|n| self.netns_fd(n)),
                        name,
                        mtu: change.mtu,
                        up: change.up,
                    },
                );
                self.request(ns, req).map(drop)
            }
        };
        result.map_err(|e| {
            let target = match (self.link_by_index(ns, index), change.netns) {
                // do_setlink moves the link before it sets the MTU or renames it, and does
                // not move it back when a later step fails.
                (Ok(None), Some(to)) => {
                    format!("ifindex {index} (gone from {ns}: probably already moved to {to})")
                }
                _ => self.describe(ns, index),
            };
            KernelError::netlink(change_text(change), target, ns, e)
        })
    }

    fn del_altname(&self, ns: Ns<'_>, index: u32, altname: &str) -> KResult<()> {
        check_name(altname, ALTIFNAME_MAX)
            .and_then(|()| {
                self.request(ns, request::del_altname(index, altname))
                    .map(drop)
            })
            .map_err(|e| {
                KernelError::netlink(
                    format!("delete altname {altname}"),
                    self.describe(ns, index),
                    ns,
                    e,
                )
            })
    }

    fn set_alias(&self, ns: Ns<'_>, index: u32, alias: &str) -> KResult<()> {
        self.request(ns, request::set_alias(index, alias))
            .map(drop)
            .map_err(|e| {
                KernelError::netlink(
                    format!("set alias {alias:?}"),
                    self.describe(ns, index),
                    ns,
                    e,
                )
            })
    }

    fn addresses(&self, ns: Ns<'_>, index: u32) -> KResult<Vec<IpNetwork>> {
        let fail = |e| KernelError::netlink("list addresses", self.describe(ns, index), ns, e);
        let replies = self
            .request(ns, request::dump_addresses(index))
            .map_err(fail)?;
        let mut out = Vec::new();
        for reply in replies.iter().filter(|r| r.message_type == RTM_NEWADDR) {
            let (ifindex, addr) = decode::address(&reply.payload)
                .map_err(NlError::decode)
                .map_err(fail)?;
            // The kernel filters on ifa_index under strict checking; this keeps the
            // answer right even if it did not.
            if ifindex == index {
                out.push(addr);
            }
        }
        Ok(out)
    }

    fn add_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        self.request(ns, request::add_address(index, addr))
            .map(drop)
            .map_err(|e| {
                KernelError::netlink(
                    format!("add address {addr}"),
                    self.describe(ns, index),
                    ns,
                    e,
                )
            })
    }

    fn del_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        self.request(ns, request::del_address(index, addr))
            .map(drop)
            .map_err(|e| {
                KernelError::netlink(
                    format!("delete address {addr}"),
                    self.describe(ns, index),
                    ns,
                    e,
                )
            })
    }

    fn add_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        check_route(route)
            .and_then(|()| self.request(ns, request::add_route(route)).map(drop))
            .map_err(|e| {
                KernelError::netlink(
                    route_text("add", route),
                    self.describe(ns, route.oif),
                    ns,
                    e,
                )
            })
    }

    fn del_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        check_route(route)
            .and_then(|()| self.request(ns, request::del_route(route)).map(drop))
            .map_err(|e| {
                KernelError::netlink(
                    route_text("delete", route),
                    self.describe(ns, route.oif),
                    ns,
                    e,
                )
            })
    }

    fn create_link(&self, ns: Ns<'_>, spec: &NewLink<'_>) -> KResult<()> {
        let result = check_name(&spec.name, IFNAME_MAX).and_then(|()| {
            let req = request::create_link(&CreateLink {
                name: &spec.name,
                kind: spec.kind,
                parent_index: spec.parent_index,
                netns_fd: spec.target_netns.map(|n| self.netns_fd(n)),
                mtu: spec.mtu,
                hwaddr: spec.hwaddr.as_deref(),
            });
            self.request(ns, req).map(drop)
        });
        result.map_err(|e| {
            let mut op = format!("create {} link {}", spec.kind.kind_name(), spec.name);
            if let Some(target) = spec.target_netns {
                op.push_str(&format!(" in {target}"));
            }
            let parent = self.describe(ns, spec.parent_index);
            KernelError::netlink(op, format!("parent {parent}"), ns, e)
        })
    }

    fn delete_link(&self, ns: Ns<'_>, index: u32) -> KResult<()> {
        self.request(ns, request::delete_link(index))
            .map(drop)
            .map_err(|e| KernelError::netlink("delete link", self.describe(ns, index), ns, e))
    }

    fn routes(&self, ns: Ns<'_>, table: u32) -> KResult<Vec<RouteSpec>> {
        let fail = |e| KernelError::netlink("list routes", format!("table {table}"), ns, e);
        let replies = self
            .request(ns, request::dump_routes(table))
            .map_err(fail)?;
        replies
            .iter()
            .filter(|r| r.message_type == RTM_NEWROUTE)
            .map(|r| decode::route(&r.payload).map_err(NlError::decode))
            .collect::<Result<Vec<_>, _>>()
            .map_err(fail)
            // The kernel filters on the table under strict checking; this keeps the answer
            // right even if it did not.
            .map(|all| all.into_iter().filter(|r| r.table == Some(table)).collect())
    }

    fn add_rule(&self, ns: Ns<'_>, rule: &RuleSpec) -> KResult<()> {
        self.request(ns, request::add_rule(rule))
            .map(drop)
            .map_err(|e| KernelError::netlink(rule_text("add", rule), "policy rules", ns, e))
    }

    fn del_rule(&self, ns: Ns<'_>, rule: &RuleSpec) -> KResult<()> {
        self.request(ns, request::del_rule(rule))
            .map(drop)
            .map_err(|e| KernelError::netlink(rule_text("delete", rule), "policy rules", ns, e))
    }

    fn rules(&self, ns: Ns<'_>) -> KResult<Vec<RuleSpec>> {
        let fail = |e| KernelError::netlink("list rules", "policy rules", ns, e);
        let replies = self.request(ns, request::dump_rules()).map_err(fail)?;
        let mut out = Vec::new();
        for reply in replies.iter().filter(|r| r.message_type == RTM_NEWRULE) {
            if let Some(rule) = decode::rule(&reply.payload)
                .map_err(NlError::decode)
                .map_err(fail)?
            {
                out.push(rule);
            }
        }
        Ok(out)
    }

    fn set_ipv4_conf(&self, ns: Ns<'_>, index: u32, values: &[(Ipv4Setting, u32)]) -> KResult<()> {
        self.request(ns, request::set_ipv4_conf(index, values))
            .map(drop)
            .map_err(|e| {
                let what: Vec<String> = values
                    .iter()
                    .map(|(s, v)| format!("{}={v}", s.sysctl()))
                    .collect();
                let op = format!("set IPv4 conf {}", what.join(" "));
                KernelError::netlink(op, self.describe(ns, index), ns, e)
            })
    }

    fn ipv4_conf(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Ipv4Conf>> {
        let fail = |e| KernelError::netlink("read IPv4 conf", format!("ifindex {index}"), ns, e);
        if index == 0 {
            return Ok(None);
        }
        let replies = match self.request(ns, request::get_link_by_index(index)) {
            Ok(r) => r,
            Err(e) if e.errno == libc::ENODEV => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        match replies.iter().find(|r| r.message_type == RTM_NEWLINK) {
            Some(reply) => Ok(Some(
                decode::ipv4_conf(&reply.payload)
                    .map_err(NlError::decode)
                    .map_err(fail)?,
            )),
            None => Err(fail(NlError::decode("RTM_GETLINK answered without a link"))),
        }
    }
}

fn rule_text(verb: &str, rule: &RuleSpec) -> String {
    format!(
        "{verb} rule from {} lookup {} priority {}",
        rule.src, rule.table, rule.priority
    )
}

/// RTA_GATEWAY must be of the destination's family (a v6 next hop for a v4 route needs
/// RTA_VIA, which this plugin does not send); the kernel would only say EINVAL.
fn check_route(route: &RouteSpec) -> Result<(), NlError> {
    match route.gateway {
        Some(gw) if gw.is_ipv4() != route.dst.is_ipv4() => Err(NlError::errno(
            libc::EINVAL,
            format!(
                "gateway {gw} is not of the same address family as destination {}",
                route.dst
            ),
        )),
        _ => Ok(()),
    }
}
