//! What RDMA a network namespace has, read from inside it: for each interface with an ib
//! device behind it, the device and port, link layer, port state, uverbs char device, the
//! GID index of each address from the kernel's tables, and where the device sits (PCI
//! function, NUMA node). `rdma-ns env` turns that into NCCL and UCX variables ([`vars`]);
//! `rdma-ns-probe` opens the devices it names.
//!
//! Read-only: nothing here changes the kernel. The interfaces come from rtnetlink in the
//! netns (a pod's sysfs would do for names, but not for addresses); everything about ib
//! devices comes from a sysfs that shows that netns (a pod's own /sys, or one mounted inside
//! the netns with [`Netns::with_own_sysfs`]); what only a socket in the netns can tell (a
//! port's netdev, an upper device's lower) comes through [`NetnsView`].
//!
//! An interface is tied to an ib port by identity, never by a name alone: names repeat
//! across pods (every pod has a `net1`), and in shared netns mode every pod sees every ib
//! device. By kind:
//! - a netdev with its own device (a moved PF/VF/SF netdev, an IPoIB parent): the ib device
//!   under the same PCI or auxiliary device, port `dev_port` + 1
//!   ([`RdmaSysfs::ib_ports_under_netdev_device`]); the pod's sysfs lists only the pod's
//!   netdevs (class/net is tagged by netns), so the `class/net` entry is the pod's own;
//! - a software RDMA device (rxe) bound to a pod netdev: its `parent` file names the netdev
//!   as it is called in its own netns, so only candidates come from it; RDMA netlink asked
//!   from the pod's netns reports a port's netdev only when that netdev is in the pod's netns
//!   (nldev.c `fill_port_info`), and its ifindex must be the interface's;
//! - a RoCE upper device (macvlan, ipvlan, VLAN child): through its lower device (IFLA_LINK,
//!   in the netns IFLA_LINK_NETNSID names) to the ib device under the lower's parent device,
//!   and there the GID table entry holding the child's address under its name
//!   ([`uppers`]). A pod without CAP_NET_ADMIN over the host cannot resolve the lower (the
//!   kernel refuses the lookup; the host netdev is hidden from the pod's sysfs and from RDMA
//!   netlink), and then the GID tables are searched: the ib devices whose uverbs node the pod
//!   has first (the device plugin hands a pod exactly those), then the rest.
//!   roce_gid_mgmt.c adds GIDs for the addresses of a port's netdev and of its upper devices
//!   only, so other kinds (veth) are never searched;
//! - an IPoIB child: the InfiniBand port whose GID 0 is bytes 4-19 of the child's 20-byte
//!   hardware address (a child shares its parent's port GID).

mod describe;
mod problems;
mod ties;
mod uppers;
pub mod vars;
mod view;

pub use view::{KernelView, NetnsView, PortNetdev};

use std::cell::OnceCell;
use std::cmp::Ordering;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use serde::Serialize;

use crate::kernel::rtnetlink::{Link, NetOps, RealKernel};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::pod::GidScan;
use crate::kernel::topology::{CharDev, GidEntry, IbPortRef, PortState, RdmaSysfs};
use crate::kernel::{KernelError, Netns, Ns};

/// ARPHRD_ETHER and ARPHRD_INFINIBAND (linux/if_arp.h).
const ARPHRD_ETHER: u16 = 1;
const ARPHRD_INFINIBAND: u16 = 32;
/// INFINIBAND_ALEN: 4 bytes of flags and QPN, then the 16-byte port GID.
const IPOIB_ALEN: usize = 20;
/// Link kinds that are upper devices of a lower netdev, whose addresses the RoCE GID code adds
/// to the lower netdev's port (K:drivers/infiniband/core/roce_gid_mgmt.c walks upper devices).
const ROCE_UPPER_KINDS: &[&str] = &["macvlan", "macvtap", "ipvlan", "ipvtap", "vlan"];

/// An interface of the netns, as rtnetlink reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub index: u32,
    /// IFLA_INFO_KIND (`macvlan`, `ipoib`, `veth`...); None for physical netdevs.
    pub kind: Option<String>,
    pub link_type: u16,
    pub mtu: u32,
    pub hwaddr: Vec<u8>,
    pub up: bool,
    pub addrs: Vec<IpNetwork>,
    /// IFLA_LINK: an upper device's lower device, by ifindex in the netns it lives in.
    pub lower: Option<u32>,
    /// IFLA_LINK_NETNSID: that netns, by the id this netns knows it by; None when the lower
    /// lives in this netns.
    pub lower_netnsid: Option<i32>,
    /// IFLA_IFALIAS: where rdma-ns puts the network's RoCE QoS (src/qos.rs).
    pub alias: Option<String>,
}

impl Iface {
    pub fn from_link(link: &Link, addrs: Vec<IpNetwork>) -> Iface {
        Iface {
            name: link.name.clone(),
            index: link.index,
            kind: link.kind.clone(),
            link_type: link.link_type,
            mtu: link.mtu,
            hwaddr: link.hwaddr.clone(),
            up: link.up,
            addrs,
            lower: link.link,
            lower_netnsid: link.link_netnsid,
            alias: link.alias.clone(),
        }
    }

    /// Addresses a RoCE GID can stand for: IPv4, and IPv6 but link-local (routable GIDs only:
    /// a link-local GID works on one L2 segment and is not what NCCL or UCX select).
    fn roce_ips(&self) -> Vec<IpAddr> {
        self.addrs
            .iter()
            .map(|a| a.ip())
            .filter(|ip| match ip {
                IpAddr::V4(_) => true,
                IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
            })
            .collect()
    }
}

/// How an interface was tied to its ib port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// The netdev's own device (moved PF/VF/SF netdev or IPoIB parent).
    OwnDevice,
    /// rxe/siw's `parent` file names the netdev, and RDMA netlink in this netns reports the
    /// port's netdev as this interface (by ifindex).
    SoftRdmaParent,
    /// A GID table entry holds one of its addresses under its name (macvlan/ipvlan/VLAN).
    GidTable,
    /// Its lower device is the netdev of the port (macvlan/ipvlan/VLAN), though the port's
    /// table holds none of its addresses.
    LowerDevice,
    /// Its IPoIB hardware address carries the port's GID 0 (IPoIB child).
    PortGid,
}

/// The GID of one address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AddrGid {
    pub ip: IpAddr,
    /// None: the kernel's table has no GID for this address on this netdev.
    pub index: Option<u32>,
    #[serde(rename = "gidType")]
    pub gid_type: Option<String>,
}

/// One interface with RDMA behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub ifname: String,
    pub ibdev: String,
    pub port: u32,
    pub via: Via,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: String,
    /// `4: ACTIVE`
    pub port_state: String,
    pub phys_state: String,
    pub port_active: bool,
    pub mtu: u32,
    pub netdev_up: bool,
    /// The uverbs node this process can open, when there is one.
    pub uverbs: Option<PathBuf>,
    pub gids: Vec<AddrGid>,
    /// The index RDMA on this interface uses: the RoCE v2 GID of its first IPv4 address (else
    /// of its first other routable address); 0 on InfiniBand (the port GID).
    pub gid_index: Option<u32>,
    /// The GID at `gid_index`, as the kernel's table holds it.
    pub gid: Option<Ipv6Addr>,
    /// The address RDMA on this interface goes by: the one of the chosen RoCE GID; on
    /// InfiniBand the interface's first address (IPoIB's, what NCCL's bootstrap uses).
    pub ip: Option<IpAddr>,
    /// What NCCL and UCX select on this port by themselves when no GID index is given
    /// (RoCE only).
    pub auto_gid_index: AutoGid,
    /// The PCI function of the ib device (of the function under an SF); None for a virtual
    /// device. With `numa_node`, what a job needs to pair GPUs and NICs.
    pub pci_address: Option<String>,
    /// The NUMA node of that PCI function; None when it has none.
    pub numa_node: Option<u32>,
    /// The network's RoCE QoS, as rdma-ns put it in the interface's alias; None without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roce_qos: Option<crate::qos::RoceQos>,
    /// Why an alias that starts like rdma-ns's could not be read as a QoS.
    #[serde(skip)]
    pub roce_qos_unreadable: Option<String>,
}

/// The GID index NCCL (for the address family of the chosen GID, as NCCL_IB_ADDR_FAMILY names
/// it) and UCX pick on a RoCE port when NCCL_IB_GID_INDEX and UCX_IB_GID_INDEX are unset: the
/// first RoCE v2 GID of the family in the port's table, whoever's netdev it is. In shared
/// netns mode the table also holds the node's and other pods' GIDs, so this need not be the
/// pod's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AutoGid {
    pub nccl: Option<u32>,
    pub ucx: Option<u32>,
}

impl Finding {
    pub fn is_roce(&self) -> bool {
        self.link_layer == "Ethernet"
    }

    /// Usable for RDMA from this process: port active, uverbs visible, a GID index found.
    pub fn usable(&self) -> bool {
        self.port_active && self.uverbs.is_some() && self.gid_index.is_some()
    }

    /// `dev:port`, as NCCL_IB_HCA and UCX_NET_DEVICES write a port.
    pub fn hca(&self) -> String {
        format!("{}:{}", self.ibdev, self.port)
    }
}

/// What is wrong, on which interface, and what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    NoRdmaInterface,
    PortNotActive,
    NoUverbs,
    NoAddress,
    NoRoceV2Gid,
    NoPortGid,
    /// The rails' GID indexes differ, so none is set, and NCCL or UCX would pick another GID
    /// than the pod's on one of them.
    AutoGidNotThePods,
    /// The rails' GID indexes differ and their chosen GIDs are of different address families:
    /// NCCL_IB_ADDR_FAMILY takes one.
    GidFamilyConflict,
    MtuAboveActiveMtu,
    /// The interface's alias starts like rdma-ns's RoCE QoS but does not read as one.
    RoceQosUnreadable,
    /// The rails' networks disagree on RoCE QoS: NCCL and UCX take one traffic class and SL
    /// for every device.
    RoceQosConflict,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// The interface, when the problem is one interface's.
    pub ifname: Option<String>,
    pub msg: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.ifname {
            Some(i) => write!(f, "{i}: {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

/// Everything found in one netns, interfaces in the documented order (see [`sort_findings`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Discovery {
    pub interfaces: Vec<Finding>,
    pub problems: Vec<Problem>,
}

/// Why discovery could not run at all (as opposed to [`Problem`]s it found).
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("{0} is not a usable network namespace: {1}")]
    Netns(PathBuf, io::Error),
    #[error("cannot open a netlink socket inside {0}: {1}")]
    Socket(PathBuf, io::Error),
    #[error("{0}")]
    Netlink(#[from] KernelError),
    #[error("{what}: {err}")]
    Sysfs { what: String, err: io::Error },
}

impl DiscoverError {
    fn sysfs(what: impl Into<String>) -> impl FnOnce(io::Error) -> DiscoverError {
        let what = what.into();
        move |err| DiscoverError::Sysfs { what, err }
    }
}

/// The interfaces of `ns` with their addresses (loopback left out).
pub fn interfaces(kernel: &dyn NetOps, ns: Ns<'_>) -> Result<Vec<Iface>, DiscoverError> {
    let mut out = Vec::new();
    for link in kernel.links(ns)? {
        // ARPHRD_LOOPBACK
        if link.link_type == 772 {
            continue;
        }
        let addrs = kernel.addresses(ns, link.index)?;
        out.push(Iface::from_link(&link, addrs));
    }
    Ok(out)
}

/// Discovers the RDMA of the netns the process is in (`netns` None: a pod's own view, its
/// /sys) or of `netns` (the node's view of a pod: rtnetlink and RDMA netlink from sockets
/// inside it and a sysfs mounted inside it). `dev_dir` is where uverbs nodes are looked for.
pub fn discover_netns(
    kernel: &RealKernel,
    netns: Option<&Path>,
    sys: &SysRoot,
    dev_dir: &Path,
) -> Result<Discovery, DiscoverError> {
    let Some(path) = netns else {
        let ifaces = interfaces(kernel, Ns::Host)?;
        return discover(sys, dev_dir, &ifaces, &KernelView::new(kernel, Ns::Host));
    };
    let ns = Netns::open(path).map_err(|e| DiscoverError::Netns(path.into(), e))?;
    let ifaces = interfaces(kernel, Ns::Pod(&ns))?;
    // A fixture root (tests) stands for the netns' own sysfs.
    if sys.root() != Path::new("/sys") {
        return discover(
            sys,
            dev_dir,
            &ifaces,
            &KernelView::new(kernel, Ns::Pod(&ns)),
        );
    }
    let mut out = None;
    ns.with_own_sysfs(|pod_sys| {
        // This thread is inside the pod's netns, so the sockets it opens act there; the
        // caller's sockets stay on their thread.
        out = Some(match RealKernel::new() {
            Ok(here) => discover(pod_sys, dev_dir, &ifaces, &KernelView::new(&here, Ns::Host)),
            Err(e) => Err(DiscoverError::Socket(path.into(), e)),
        });
        Ok(())
    })
    .map_err(DiscoverError::sysfs(format!(
        "mounting a sysfs inside {}",
        path.display()
    )))?;
    out.expect("the closure ran")
}

/// What one discovery reads once and every step shares: the sysfs view, the ib devices and
/// uverbs devices it lists, where uverbs nodes are, and the netns's sockets.
struct Scope<'a> {
    topo: RdmaSysfs<'a>,
    dev_dir: &'a Path,
    devices: Vec<String>,
    uverbs: Vec<CharDev>,
    view: &'a dyn NetnsView,
    soft_parents: OnceCell<Vec<(String, String)>>,
    visible_default_gids: OnceCell<Vec<DefaultGidNetdev>>,
}

/// A port of a device the pod can open, and the netdev its GID entry 0 names.
type DefaultGidNetdev = ((String, u32), Option<String>);

impl Scope<'_> {
    /// `(ib device, parent netdev)` of the software RDMA devices, read on first use.
    fn soft_parents(&self) -> Result<&[(String, String)], DiscoverError> {
        if self.soft_parents.get().is_none() {
            let read = self
                .topo
                .soft_rdma_parents()
                .map_err(DiscoverError::sysfs("reading the ib devices' parent files"))?;
            let _ = self.soft_parents.set(read);
        }
        Ok(self.soft_parents.get().expect("set above"))
    }

    /// Every port of the devices the pod has a uverbs node for, with the netdev its default
    /// GID (entry 0) names: read on first use, once for all interfaces.
    fn visible_default_gid_netdevs(&self) -> Result<&[DefaultGidNetdev], DiscoverError> {
        if self.visible_default_gids.get().is_none() {
            let mut read = Vec::new();
            for dev in self
                .devices
                .iter()
                .filter(|d| self.uverbs_node(d).is_some())
            {
                for port in self.port_indexes(dev)? {
                    read.push(((dev.clone(), port), self.gid0_netdev(dev, port)?));
                }
            }
            let _ = self.visible_default_gids.set(read);
        }
        Ok(self.visible_default_gids.get().expect("set above"))
    }

    /// The port numbers of `dev`, in order.
    fn port_indexes(&self, dev: &str) -> Result<Vec<u32>, DiscoverError> {
        self.topo
            .port_indexes(dev)
            .map_err(DiscoverError::sysfs(format!("reading the ports of {dev}")))
    }

    /// A port's link layer and state; None when the port has none.
    fn port_state(&self, dev: &str, port: u32) -> Result<Option<PortState>, DiscoverError> {
        self.topo
            .port_state(dev, port)
            .map_err(DiscoverError::sysfs(format!("reading {dev} port {port}")))
    }

    /// The ports of the ib devices under `netdev`'s own parent device (a PCI function, an SF).
    fn ports_under_netdev_device(&self, netdev: &str) -> Result<Vec<IbPortRef>, DiscoverError> {
        self.topo
            .ib_ports_under_netdev_device(netdev)
            .map_err(DiscoverError::sysfs(format!(
                "reading the ib devices of {netdev}"
            )))
    }

    /// One pass over a port's GID table ([`RdmaSysfs::scan_gids`]).
    fn scan_gids(
        &self,
        dev: &str,
        port: u32,
        wanted: &[Ipv6Addr],
        stop_at_v2: bool,
    ) -> Result<GidScan, DiscoverError> {
        self.topo
            .scan_gids(dev, port, wanted, stop_at_v2)
            .map_err(DiscoverError::sysfs(format!(
                "reading the GID table of {dev} port {port}"
            )))
    }

    /// The netdev GID entry 0 names: a RoCE port's own netdev (its default GID); none on
    /// InfiniBand.
    fn gid0_netdev(&self, dev: &str, port: u32) -> Result<Option<String>, DiscoverError> {
        self.topo
            .gid_ndev(dev, port, 0)
            .map_err(DiscoverError::sysfs(format!(
                "reading GID 0 of {dev} port {port}"
            )))
    }

    /// GID 0 of a port: an InfiniBand port's GID, a RoCE port's netdev's default GID.
    fn gid0(&self, dev: &str, port: u32) -> Result<Option<GidEntry>, DiscoverError> {
        self.topo
            .gid_entry(dev, port, 0)
            .map_err(DiscoverError::sysfs(format!(
                "reading GID 0 of {dev} port {port}"
            )))
    }

    /// The uverbs node of `ibdev` this process can open, when there is one.
    fn uverbs_node(&self, ibdev: &str) -> Option<PathBuf> {
        uverbs_node(&self.uverbs, ibdev, self.dev_dir)
    }
}

/// Ties each interface to its ib port and reads what NCCL and UCX need.
pub fn discover(
    sys: &SysRoot,
    dev_dir: &Path,
    ifaces: &[Iface],
    view: &dyn NetnsView,
) -> Result<Discovery, DiscoverError> {
    let topo = RdmaSysfs::new(sys);
    let scope = Scope {
        uverbs: topo
            .uverbs_devices()
            .map_err(DiscoverError::sysfs("reading class/infiniband_verbs"))?,
        devices: topo
            .device_names()
            .map_err(DiscoverError::sysfs("reading class/infiniband"))?,
        topo,
        dev_dir,
        view,
        soft_parents: OnceCell::new(),
        visible_default_gids: OnceCell::new(),
    };
    let (mut ports, uppers) = ties::tie_to_own_ports(&scope, ifaces)?;
    ports.extend(uppers::place_uppers(&scope, &uppers)?);

    let mut out = Discovery::default();
    for tie in ports {
        let (dev, port) = (&tie.dev, tie.port);
        let Some(brief) = scope.port_state(dev, port)? else {
            continue;
        };
        let finding = describe::describe(&scope, &brief, tie)?;
        out.problems
            .extend(problems::problems_of(&finding, &scope.uverbs, dev_dir));
        out.interfaces.push(finding);
    }
    sort_findings(&mut out.interfaces);
    if out.interfaces.is_empty() {
        out.problems.push(no_rdma_interface(ifaces, &scope.devices));
    }
    Ok(out)
}

/// The uverbs node of `ibdev` under `dev_dir`, when it is there as the char device sysfs
/// names (major:minor checked; a symlink or another file is not it).
fn uverbs_node(uverbs: &[CharDev], ibdev: &str, dev_dir: &Path) -> Option<PathBuf> {
    let c = uverbs.iter().find(|c| c.ibdev.as_deref() == Some(ibdev))?;
    let path = dev_dir.join(&c.name);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    let want = nix::sys::stat::makedev(c.major.into(), c.minor.into());
    (meta.file_type().is_char_device() && meta.rdev() == want).then_some(path)
}

fn no_rdma_interface(ifaces: &[Iface], devices: &[String]) -> Problem {
    Problem {
        kind: ProblemKind::NoRdmaInterface,
        ifname: None,
        msg: format!(
            "no interface of this network namespace has an ib device behind it ({} \
             interface(s): {}; {} ib device(s) visible: {}). Attach the pod to an \
             rdma-ns network (or another RDMA CNI) and give it the RDMA device plugin's \
             resource",
            ifaces.len(),
            list_or_none(ifaces.iter().map(|i| i.name.as_str())),
            devices.len(),
            list_or_none(devices.iter().map(|d| d.as_str()))
        ),
    }
}

fn list_or_none<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = names.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The documented order: by ib device (names compared with their numbers as numbers, so
/// mlx5_2 comes before mlx5_10), then port, then interface name. NCCL_IB_HCA,
/// UCX_NET_DEVICES and NCCL_SOCKET_IFNAME list in this order.
pub fn sort_findings(f: &mut [Finding]) {
    f.sort_by(|a, b| {
        natural_cmp(&a.ibdev, &b.ibdev)
            .then(a.port.cmp(&b.port))
            .then_with(|| natural_cmp(&a.ifname, &b.ifname))
    });
}

/// Compares names with runs of digits as numbers.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (&a[..da], &b[..db]);
                let na = trim_zeros(na);
                let nb = trim_zeros(nb);
                let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[da..];
                b = &b[db..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|c| **c == b'0').count();
    &d[z.min(d.len().saturating_sub(1))..]
}

#[cfg(test)]
mod tests;
