//! What the kernel offers, with nothing about CNI: network namespaces, rtnetlink, RDMA
//! netlink (NLDEV) and sysfs.
//!
//! The attach layer talks to the kernel only through narrow traits holding exactly what the
//! attachment steps need: [`NetOps`] (links, addresses, routes) and
//! [`RdmaOps`](rdma_ops::RdmaOps) (ib devices). [`RealKernel`](rtnetlink::RealKernel) and
//! [`RealRdma`](rdma_ops::RealRdma) implement them with netlink sockets opened inside each
//! namespace; tests implement them with fakes that record calls and fail on demand.
//!
//! Where things go:
//! - [`netlink`]: the one transport (socket, exchange, error replies) for every family. A new
//!   request never changes it.
//! - A new netlink request: its encoder and decoder go with its family, [`rtnetlink`]
//!   (`request.rs`, `decode.rs`) or [`nldev`]; the call the attach layer makes goes on the
//!   family's trait (`NetOps` here, `RdmaOps` in [`rdma_ops`]) and its real implementation.
//! - Facts read from files: [`sysfs`] (the one root) and [`topology`] (ib devices, ports,
//!   GIDs, char devices and the PCI functions behind them); [`netns`] for namespace handles.

#[cfg(any(test, feature = "test-support"))]
pub mod conformance;
pub mod netlink;
pub mod netns;
pub mod nldev;
pub mod rdma_ops;
pub mod rtnetlink;
pub mod sysfs;
pub mod topology;

use std::fmt;

use ipnetwork::IpNetwork;

pub use netns::Netns;

/// Which network namespace an operation acts in.
#[derive(Clone, Copy)]
pub enum Ns<'a> {
    /// The namespace the plugin was started in (the host's).
    Host,
    /// A pod's namespace, held open by fd.
    Pod(&'a Netns),
}

impl fmt::Debug for Ns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ns::Host => write!(f, "host netns"),
            Ns::Pod(ns) => write!(f, "netns {}", ns.path().display()),
        }
    }
}

impl fmt::Display for Ns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
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

/// A kernel operation that failed, with the errno and the kernel's extended-ack text if any.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} on {target} in {netns} failed: {}{}", errno_text(*.errno), ext_ack_text(.ext_ack))]
pub struct KernelError {
    /// What was asked, e.g. `move and rename link` or `add address 10.0.0.2/24`.
    pub op: String,
    /// Which device or object, e.g. `eth3 (ifindex 7)`.
    pub target: String,
    /// Which namespace it was asked in.
    pub netns: String,
    /// Positive errno value; 0 when the failure was not an errno (decode errors).
    pub errno: i32,
    /// NLMSGERR_ATTR_MSG from the kernel, or a decode error text.
    pub ext_ack: Option<String>,
}

impl KernelError {
    pub fn new(
        op: impl Into<String>,
        target: impl Into<String>,
        netns: Ns<'_>,
        errno: i32,
    ) -> Self {
        KernelError {
            op: op.into(),
            target: target.into(),
            netns: netns.to_string(),
            errno,
            ext_ack: None,
        }
    }

    /// A netlink request that the kernel refused or answered with something undecodable.
    pub fn netlink(
        op: impl Into<String>,
        target: impl Into<String>,
        netns: impl fmt::Display,
        e: netlink::NlError,
    ) -> Self {
        KernelError {
            op: op.into(),
            target: target.into(),
            netns: netns.to_string(),
            errno: e.errno,
            ext_ack: e.ext_ack,
        }
    }

    pub fn is_errno(&self, errno: nix::errno::Errno) -> bool {
        self.errno == errno as i32
    }
}

fn errno_text(errno: i32) -> String {
    if errno == 0 {
        "malformed reply".to_string()
    } else {
        let e = nix::errno::Errno::from_raw(errno);
        format!("{} ({:?})", e.desc(), e)
    }
}

fn ext_ack_text(msg: &Option<String>) -> String {
    match msg {
        Some(m) if !m.is_empty() => format!(": {m}"),
        _ => String::new(),
    }
}

pub type KResult<T> = Result<T, KernelError>;

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
}
