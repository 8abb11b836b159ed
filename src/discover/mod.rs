//! What RDMA a network namespace has, read from inside it: for each interface with an ib
//! device behind it, the device and port, link layer, port state, uverbs char device and the
//! GID index of each address, from the kernel's tables. `rdma-ns env` turns that into NCCL and
//! UCX variables ([`vars`]); `rdma-ns-probe` opens the devices it names.
//!
//! Read-only: nothing here changes the kernel. The interfaces come from rtnetlink in the
//! netns (a pod's sysfs would do for names, but not for addresses); everything about ib
//! devices comes from a sysfs that shows that netns (a pod's own /sys, or one mounted inside
//! the netns with [`Netns::with_own_sysfs`]).
//!
//! How an interface is tied to an ib port, by kind:
//! - a netdev with its own device (a moved PF/VF/SF netdev, an IPoIB parent): the ib device
//!   under the same PCI or auxiliary device, port `dev_port` + 1 ([`RdmaSysfs::ib_ports_of_own_device`],
//!   which also knows rxe's `parent`);
//! - a RoCE upper device (macvlan, ipvlan, VLAN child) created in the pod: the port whose GID
//!   table holds its address under its name. roce_gid_mgmt.c adds GIDs for the addresses of
//!   a port's netdev and of its upper devices only, so other kinds (veth) are never searched;
//!   only ib devices whose uverbs node the pod can see are searched first, since the device
//!   plugin hands a pod exactly those;
//! - an IPoIB child: the InfiniBand port whose GID 0 is bytes 4-19 of the child's 20-byte
//!   hardware address (a child shares its parent's port GID).

pub mod vars;

use std::cmp::Ordering;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use serde::Serialize;

use crate::kernel::rtnetlink::{Link, NetOps};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{
    find_gid, CharDev, GidEntry, LinkLayer, NetdevLink, PortState, RdmaSysfs,
};
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
    /// rxe/siw's `parent` file names the netdev.
    SoftRdmaParent,
    /// A GID table entry holds one of its addresses under its name (macvlan/ipvlan/VLAN).
    GidTable,
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
    GidIndexConflict,
    MtuAboveActiveMtu,
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
/// /sys) or of `netns` (the node's view of a pod: rtnetlink from inside it and a sysfs
/// mounted inside it). `dev_dir` is where uverbs nodes are looked for.
pub fn discover_netns(
    kernel: &dyn NetOps,
    netns: Option<&Path>,
    sys: &SysRoot,
    dev_dir: &Path,
) -> Result<Discovery, DiscoverError> {
    match netns {
        None => {
            let ifaces = interfaces(kernel, Ns::Host)?;
            discover(sys, dev_dir, &ifaces)
        }
        Some(path) => {
            let ns = Netns::open(path).map_err(|e| DiscoverError::Netns(path.into(), e))?;
            let ifaces = interfaces(kernel, Ns::Pod(&ns))?;
            // A fixture root (tests) stands for the netns' own sysfs.
            if sys.root() != Path::new("/sys") {
                return discover(sys, dev_dir, &ifaces);
            }
            let mut out = None;
            ns.with_own_sysfs(|pod_sys| {
                out = Some(discover(pod_sys, dev_dir, &ifaces));
                Ok(())
            })
            .map_err(DiscoverError::sysfs(format!(
                "mounting a sysfs inside {}",
                path.display()
            )))?;
            out.expect("the closure ran")
        }
    }
}

/// Ties each interface to its ib port and reads what NCCL and UCX need.
pub fn discover(
    sys: &SysRoot,
    dev_dir: &Path,
    ifaces: &[Iface],
) -> Result<Discovery, DiscoverError> {
    let topo = RdmaSysfs::new(sys);
    let uverbs = topo
        .uverbs_devices()
        .map_err(DiscoverError::sysfs("reading class/infiniband_verbs"))?;
    let devices = topo
        .device_names()
        .map_err(DiscoverError::sysfs("reading class/infiniband"))?;
    let (mut ports, uppers) = tie_to_own_ports(&topo, &devices, ifaces)?;
    ports.extend(place_uppers(&topo, &devices, &uverbs, dev_dir, &uppers)?);

    let mut out = Discovery::default();
    for tie in ports {
        let (dev, port) = (&tie.dev, tie.port);
        let Some(brief) = topo
            .port_state(dev, port)
            .map_err(DiscoverError::sysfs(format!("reading {dev} port {port}")))?
        else {
            continue;
        };
        let finding = describe(&topo, &uverbs, dev_dir, &brief, tie)?;
        out.problems.extend(problems_of(&finding, &uverbs, dev_dir));
        out.interfaces.push(finding);
    }
    sort_findings(&mut out.interfaces);
    if out.interfaces.is_empty() {
        out.problems.push(no_rdma_interface(ifaces, &devices));
    }
    Ok(out)
}

/// The interfaces tied to a port by their own device or, for an IPoIB child, by their port
/// GID; and the RoCE upper devices with an address, which only a GID table search can tie.
fn tie_to_own_ports<'i>(
    topo: &RdmaSysfs<'_>,
    devices: &[String],
    ifaces: &'i [Iface],
) -> Result<(Vec<Tie<'i>>, Vec<&'i Iface>), DiscoverError> {
    let mut ports: Vec<Tie> = Vec::new();
    let mut uppers: Vec<&Iface> = Vec::new();
    for iface in ifaces {
        let own = topo
            .ib_ports_of_own_device(&iface.name)
            .map_err(DiscoverError::sysfs(format!(
                "reading the ib devices of {}",
                iface.name
            )))?;
        if !own.is_empty() {
            for r in own {
                let via = match r.via {
                    NetdevLink::Parent => Via::SoftRdmaParent,
                    _ => Via::OwnDevice,
                };
                ports.push(Tie::new(iface, r.ibdev, r.port, via));
            }
        } else if iface.link_type == ARPHRD_INFINIBAND && iface.hwaddr.len() == IPOIB_ALEN {
            if let Some((dev, port)) = ipoib_port(topo, devices, iface)? {
                ports.push(Tie::new(iface, dev, port, Via::PortGid));
            }
        } else if iface.link_type == ARPHRD_ETHER
            && iface
                .kind
                .as_deref()
                .is_some_and(|k| ROCE_UPPER_KINDS.contains(&k))
            && !iface.roce_ips().is_empty()
        {
            uppers.push(iface);
        }
    }
    Ok((ports, uppers))
}

/// Upper devices: first the ib devices the pod can open, then (only if something is still
/// unplaced) the rest, so that a device whose uverbs node is missing is named as such instead
/// of the interface looking like it has no RDMA.
fn place_uppers<'i>(
    topo: &RdmaSysfs<'_>,
    devices: &[String],
    uverbs: &[CharDev],
    dev_dir: &Path,
    uppers: &[&'i Iface],
) -> Result<Vec<Tie<'i>>, DiscoverError> {
    let visible: Vec<&String> = devices
        .iter()
        .filter(|d| uverbs_node(uverbs, d, dev_dir).is_some())
        .collect();
    let hidden: Vec<&String> = devices.iter().filter(|d| !visible.contains(d)).collect();
    let mut placed = search_gid_tables(topo, &visible, uppers)?;
    let unplaced: Vec<&Iface> = uppers
        .iter()
        .copied()
        .filter(|i| !placed.iter().any(|t| t.iface.name == i.name))
        .collect();
    if !unplaced.is_empty() && !hidden.is_empty() {
        placed.extend(search_gid_tables(topo, &hidden, &unplaced)?);
    }
    Ok(placed)
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

/// An interface tied to an ib port, with the port's GID entries for its addresses when the
/// search that tied them already read them.
struct Tie<'i> {
    iface: &'i Iface,
    dev: String,
    port: u32,
    via: Via,
    hits: Option<Vec<GidEntry>>,
}

impl<'i> Tie<'i> {
    fn new(iface: &'i Iface, dev: String, port: u32, via: Via) -> Self {
        Tie {
            iface,
            dev,
            port,
            via,
            hits: None,
        }
    }
}

/// The InfiniBand port whose GID 0 is the IPoIB interface's port GID.
fn ipoib_port(
    topo: &RdmaSysfs<'_>,
    devices: &[String],
    iface: &Iface,
) -> Result<Option<(String, u32)>, DiscoverError> {
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&iface.hwaddr[4..IPOIB_ALEN]);
    let gid = Ipv6Addr::from(gid);
    for dev in devices {
        for port in ports_with_link_layer(topo, dev, LinkLayer::InfiniBand)? {
            let g0 = topo
                .gid_entry(dev, port, 0)
                .map_err(DiscoverError::sysfs(format!(
                    "reading GID 0 of {dev} port {port}"
                )))?;
            if g0.is_some_and(|g| g.gid == gid) {
                return Ok(Some((dev.clone(), port)));
            }
        }
    }
    Ok(None)
}

/// One pass over the Ethernet ports of `devices`, looking for the GIDs of the upper devices'
/// addresses; an interface is placed on the port whose table holds one of its addresses
/// under its own name, with that table's entries for every wanted address (read once: the
/// whole table was just read). Stops once every interface is placed.
fn search_gid_tables<'i>(
    topo: &RdmaSysfs<'_>,
    devices: &[&String],
    uppers: &[&'i Iface],
) -> Result<Vec<Tie<'i>>, DiscoverError> {
    let mut placed: Vec<Tie> = Vec::new();
    if uppers.is_empty() {
        return Ok(placed);
    }
    let wanted: Vec<Ipv6Addr> = uppers
        .iter()
        .flat_map(|i| i.roce_ips())
        .map(gid_of_ip)
        .collect();
    for dev in devices {
        for port in ports_with_link_layer(topo, dev, LinkLayer::Ethernet)? {
            let hits =
                topo.gids_matching(dev, port, &wanted, false)
                    .map_err(DiscoverError::sysfs(format!(
                        "reading the GID table of {dev} port {port}"
                    )))?;
            for iface in uppers {
                if placed.iter().any(|t| t.iface.name == iface.name) {
                    continue;
                }
                if iface
                    .roce_ips()
                    .iter()
                    .any(|ip| find_gid(&hits, *ip, &iface.name).is_some())
                {
                    let mut tie = Tie::new(iface, (*dev).clone(), port, Via::GidTable);
                    tie.hits = Some(hits.clone());
                    placed.push(tie);
                }
            }
            if placed.len() == uppers.len() {
                return Ok(placed);
            }
        }
    }
    Ok(placed)
}

/// The ports of `dev` whose link layer is `layer`, in index order.
fn ports_with_link_layer(
    topo: &RdmaSysfs<'_>,
    dev: &str,
    layer: LinkLayer,
) -> Result<Vec<u32>, DiscoverError> {
    let mut matching = Vec::new();
    let ports = topo
        .port_indexes(dev)
        .map_err(DiscoverError::sysfs(format!("reading the ports of {dev}")))?;
    for port in ports {
        let brief = topo
            .port_state(dev, port)
            .map_err(DiscoverError::sysfs(format!("reading {dev} port {port}")))?;
        if brief.is_some_and(|b| b.link_layer == layer) {
            matching.push(port);
        }
    }
    Ok(matching)
}

/// The GID a RoCE port holds for `ip`: IPv4-mapped for IPv4 (rdma_ip2gid), the address
/// itself for IPv6.
fn gid_of_ip(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn describe(
    topo: &RdmaSysfs<'_>,
    uverbs: &[CharDev],
    dev_dir: &Path,
    brief: &PortState,
    tie: Tie<'_>,
) -> Result<Finding, DiscoverError> {
    let Tie {
        iface,
        dev,
        via,
        hits,
        ..
    } = tie;
    let dev = dev.as_str();
    let chosen = match brief.link_layer {
        LinkLayer::Ethernet => roce_gids(topo, dev, brief.index, iface, hits)?,
        LinkLayer::InfiniBand => {
            let g0 = topo
                .gid_entry(dev, brief.index, 0)
                .map_err(DiscoverError::sysfs(format!(
                    "reading GID 0 of {dev} port {}",
                    brief.index
                )))?;
            ChosenGid {
                gids: Vec::new(),
                index: g0.as_ref().map(|g| g.index),
                gid: g0.map(|g| g.gid),
            }
        }
        LinkLayer::Other(_) => ChosenGid::default(),
    };
    Ok(Finding {
        ifname: iface.name.clone(),
        ibdev: dev.to_string(),
        port: brief.index,
        via,
        link_layer: match &brief.link_layer {
            LinkLayer::Ethernet => "Ethernet".into(),
            LinkLayer::InfiniBand => "InfiniBand".into(),
            LinkLayer::Other(s) => s.clone(),
        },
        port_state: brief.state.to_string(),
        phys_state: brief.phys_state.to_string(),
        port_active: brief.is_active(),
        mtu: iface.mtu,
        netdev_up: iface.up,
        uverbs: uverbs_node(uverbs, dev, dev_dir),
        gids: chosen.gids,
        gid_index: chosen.index,
        gid: chosen.gid,
    })
}

/// The GIDs of an interface's addresses on its port, and the one RDMA uses.
#[derive(Default)]
struct ChosenGid {
    gids: Vec<AddrGid>,
    index: Option<u32>,
    gid: Option<Ipv6Addr>,
}

/// The GID of each of a RoCE interface's addresses on `dev` port `port` (from `hits`, the
/// entries the search that tied it read, else from the table), and the index RDMA uses with
/// its GID.
fn roce_gids(
    topo: &RdmaSysfs<'_>,
    dev: &str,
    port: u32,
    iface: &Iface,
    hits: Option<Vec<GidEntry>>,
) -> Result<ChosenGid, DiscoverError> {
    let ips = iface.roce_ips();
    let hits = match hits {
        Some(h) => h,
        None => {
            let wanted: Vec<Ipv6Addr> = ips.iter().copied().map(gid_of_ip).collect();
            topo.gids_matching(dev, port, &wanted, true)
                .map_err(DiscoverError::sysfs(format!(
                    "reading the GID table of {dev} port {port}"
                )))?
        }
    };
    let gids: Vec<AddrGid> = ips
        .iter()
        .map(|ip| {
            let hit = find_gid(&hits, *ip, &iface.name);
            AddrGid {
                ip: *ip,
                index: hit.as_ref().map(|h| h.0),
                gid_type: hit.as_ref().map(|h| h.1.to_string()),
            }
        })
        .collect();
    // IPv4 first (NCCL's default address family), each kind in address order.
    let v2 = |g: &&AddrGid| g.gid_type.as_deref() == Some("RoCE v2");
    let chosen = gids
        .iter()
        .filter(v2)
        .find(|g| g.ip.is_ipv4())
        .or_else(|| gids.iter().find(v2));
    Ok(ChosenGid {
        index: chosen.and_then(|g| g.index),
        gid: chosen.map(|g| gid_of_ip(g.ip)),
        gids,
    })
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

fn problems_of(f: &Finding, uverbs: &[CharDev], dev_dir: &Path) -> Vec<Problem> {
    let mut found = Vec::new();
    if !f.port_active {
        found.push((
            ProblemKind::PortNotActive,
            format!(
                "port {} of {} is {} (physical state {}), not ACTIVE: check the cable and \
                 switch port, and for InfiniBand that a subnet manager runs (`ibstat {}` on \
                 the node)",
                f.port, f.ibdev, f.port_state, f.phys_state, f.ibdev
            ),
        ));
    }
    if f.uverbs.is_none() {
        found.push((ProblemKind::NoUverbs, no_uverbs(f, uverbs, dev_dir)));
    }
    if f.is_roce() {
        found.extend(roce_gid_problems(f));
    } else if f.link_layer == "InfiniBand" && f.gid_index.is_none() {
        found.push((
            ProblemKind::NoPortGid,
            format!(
                "{} port {} has no GID 0 (the port GID): the port is not initialised; check \
                 the subnet manager",
                f.ibdev, f.port
            ),
        ));
    }
    found
        .into_iter()
        .map(|(kind, msg)| Problem {
            kind,
            ifname: Some(f.ifname.clone()),
            msg,
        })
        .collect()
}

/// Why `f`'s device has no uverbs node this process can open.
fn no_uverbs(f: &Finding, uverbs: &[CharDev], dev_dir: &Path) -> String {
    match uverbs
        .iter()
        .find(|c| c.ibdev.as_deref() == Some(&*f.ibdev))
    {
        Some(c) => format!(
            "{} has no usable uverbs node: {} is missing or not char device {}:{}. Request \
             the device plugin's RDMA resource for the pod (it mounts the node), or, in \
             exclusive netns mode, attach the ib device to the pod",
            f.ibdev,
            dev_dir.join(&c.name).display(),
            c.major,
            c.minor
        ),
        None => format!(
            "{} has no uverbs device in sysfs: load ib_uverbs on the node",
            f.ibdev
        ),
    }
}

/// A RoCE interface without an address, and each address without a RoCE v2 GID.
fn roce_gid_problems(f: &Finding) -> Vec<(ProblemKind, String)> {
    let mut found = Vec::new();
    if f.gids.is_empty() {
        found.push((
            ProblemKind::NoAddress,
            format!(
                "has no IPv4 or routable IPv6 address, so {} port {} has no RoCE v2 GID for \
                 it: give the network an IPAM",
                f.ibdev, f.port
            ),
        ));
    }
    for g in f
        .gids
        .iter()
        .filter(|g| g.gid_type.as_deref() != Some("RoCE v2"))
    {
        let held = match (&g.index, &g.gid_type) {
            (Some(i), Some(t)) => format!("only a {t} GID (index {i})"),
            _ => "no RoCE v2 GID".to_string(),
        };
        found.push((
            ProblemKind::NoRoceV2Gid,
            format!(
                "{} port {} has {held} for {}: the kernel adds it when the address is set \
                 and the port is up; check that the address is not tentative (IPv6 DAD) and \
                 that {} is the right device",
                f.ibdev, f.port, g.ip, f.ibdev
            ),
        ));
    }
    found
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
