//! RDMA topology read from sysfs: ib devices, their ports and GID tables, the netdevs and PCI
//! functions behind them, and their char devices.
//!
//! Everything goes through [`SysRoot`], so tests point it at a tree built by [`fixtures`].
//! Layouts and value formats follow `shared/notes/sysfs-layouts.md`; the kernel sources behind
//! each rule are cited where the rule is applied.
//!
//! The host's /sys is tagged with the netns that mounted it (fs/sysfs/mount.c), so what this
//! module reports is the view of that netns: an ib device moved away in exclusive mode vanishes
//! from `class/infiniband`, while its char devices (untagged classes) stay listed.

#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod pod;

use std::fmt;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::sysfs::SysRoot;

/// EINVAL: what read(2) of `gid_attrs/{types,ndevs}/N` returns for an empty GID entry, and of
/// `ndevs/N` for a GID without a netdev (every GID of an IB port). K:drivers/infiniband/core/
/// sysfs.c `_show_port_gid_attr` keeps -EINVAL "for user space compatibility reasons".
const EINVAL: i32 = nix::libc::EINVAL;

/// `<num>: <text>` values such as port `state` (`4: ACTIVE`), `phys_state` (`5: LinkUp`) and
/// `node_type` (`1: CA`); K:drivers/infiniband/core/sysfs.c prints them with `%d: %s`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberedState {
    pub num: u32,
    pub text: String,
}

impl NumberedState {
    /// IB_PORT_ACTIVE in `state`.
    pub const PORT_ACTIVE: u32 = 4;
    /// LinkUp in `phys_state`.
    pub const PHYS_LINK_UP: u32 = 5;
}

impl FromStr for NumberedState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (num, text) = s
            .split_once(": ")
            .ok_or_else(|| format!("{s:?} is not `<number>: <text>`"))?;
        let num = num
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} does not start with a number"))?;
        Ok(NumberedState {
            num,
            text: text.to_string(),
        })
    }
}

impl fmt::Display for NumberedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.num, self.text)
    }
}

/// A node or system-image GUID. sysfs prints it as four groups of four hex digits
/// (`%04x:%04x:%04x:%04x`); RDMA netlink carries the same value as a host-order u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Guid(pub u64);

impl FromStr for Guid {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let groups: Vec<&str> = s.split(':').collect();
        // from_str_radix alone would also take a sign (`+c42`), which sysfs never prints.
        if groups.len() != 4
            || groups
                .iter()
                .any(|g| g.len() != 4 || !g.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(format!("{s:?} is not a GUID (xxxx:xxxx:xxxx:xxxx)"));
        }
        let mut v = 0u64;
        for g in groups {
            let part = u16::from_str_radix(g, 16).map_err(|_| format!("{s:?}: bad hex"))?;
            v = (v << 16) | u64::from(part);
        }
        Ok(Guid(v))
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (v >> 48) & 0xffff,
            (v >> 32) & 0xffff,
            (v >> 16) & 0xffff,
            v & 0xffff
        )
    }
}

/// A port's `link_layer`: `InfiniBand`, `Ethernet` (RoCE, iWARP) or `Unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Other(String),
}

impl LinkLayer {
    fn parse(s: &str) -> LinkLayer {
        match s {
            "InfiniBand" => LinkLayer::InfiniBand,
            "Ethernet" => LinkLayer::Ethernet,
            other => LinkLayer::Other(other.to_string()),
        }
    }
}

/// `gid_attrs/types/N`, from K:drivers/infiniband/core/cache.c `gid_type_str`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidType {
    /// `IB/RoCE v1`: IB GIDs, and RoCE v1 (Ethernet, not routable).
    IbRoceV1,
    /// `RoCE v2`: UDP/IP encapsulated, the GID holds the netdev's IP address.
    RoceV2,
    Other(String),
}

impl GidType {
    fn parse(s: &str) -> GidType {
        match s {
            "IB/RoCE v1" => GidType::IbRoceV1,
            "RoCE v2" => GidType::RoceV2,
            other => GidType::Other(other.to_string()),
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::IbRoceV1 => f.write_str("IB/RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Other(s) => f.write_str(s),
        }
    }
}

/// One non-empty entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// None when read(2) failed with EINVAL (the entry emptied between reads).
    pub gid_type: Option<GidType>,
    /// The netdev the GID belongs to. None for IB ports, whose GIDs have no netdev. In shared
    /// netns mode this can name a netdev of another netns (a pod's macvlan `net1`).
    pub ndev: Option<String>,
}

impl GidEntry {
    /// The IPv4 address of a RoCE v2 GID built from one: the kernel stores it IPv4-mapped
    /// (`::ffff:a.b.c.d`; include/rdma/ib_addr.h `rdma_ip2gid`, called from
    /// K:drivers/infiniband/core/roce_gid_mgmt.c `update_gid_ip`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        match self.gid_type {
            Some(GidType::RoceV2) => self.gid.to_ipv4_mapped(),
            _ => None,
        }
    }

    /// The IP address a RoCE v2 GID stands for: IPv4 when mapped, else the IPv6 GID itself.
    pub fn ip(&self) -> Option<IpAddr> {
        match self.gid_type {
            Some(GidType::RoceV2) => Some(match self.gid.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(self.gid),
            }),
            _ => None,
        }
    }

    fn matches_ip(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => self.gid == v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => self.gid == v6,
        }
    }
}

/// One port (`ports/N/`) of an ib device.
///
/// sysfs has no active-MTU attribute for ports (K:drivers/infiniband/core/sysfs.c
/// `port_default_attrs`: state, lid, lid_mask_count, sm_lid, sm_sl, cap_mask, rate,
/// phys_state, link_layer), and NLDEV port replies carry none either; only verbs
/// (`ibv_query_port`) report it, so it is not part of this model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbPort {
    pub index: u32,
    pub state: NumberedState,
    pub phys_state: NumberedState,
    pub link_layer: LinkLayer,
    /// `100 Gb/sec (4X EDR)`; None when the driver reports an invalid width (read → EINVAL).
    pub rate: Option<String>,
    pub gids: Vec<GidEntry>,
    /// Netdevs bound to this port: for a PCI or auxiliary parent, the parent's `net/*` whose
    /// `dev_port` is this port − 1; for rxe/siw, the `parent` netdev.
    pub netdevs: Vec<String>,
}

impl IbPort {
    pub fn is_active(&self) -> bool {
        self.state.num == NumberedState::PORT_ACTIVE
    }

    /// Distinct netdev names in the GID table (RoCE): the bound netdev plus upper devices
    /// (VLANs, macvlans) that carry addresses, in table order.
    pub fn gid_ndevs(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for g in &self.gids {
            if let Some(n) = g.ndev.as_deref() {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }

    /// The GID index for `ip` on `netdev`; see [`find_gid`].
    pub fn find_gid(&self, ip: IpAddr, netdev: &str) -> Option<(u32, GidType)> {
        find_gid(&self.gids, ip, netdev)
    }
}

/// The GID index for `ip` on `netdev`, preferring RoCE v2: mlx5 installs a v1 and a v2 entry
/// for each address and only v2 is routable. Entries whose type read failed are skipped.
pub fn find_gid(gids: &[GidEntry], ip: IpAddr, netdev: &str) -> Option<(u32, GidType)> {
    let mut candidates = gids
        .iter()
        .filter(|g| g.gid_type.is_some() && g.ndev.as_deref() == Some(netdev) && g.matches_ip(ip));
    let first = candidates.next()?;
    let best = if first.gid_type == Some(GidType::RoceV2) {
        first
    } else {
        candidates
            .find(|g| g.gid_type == Some(GidType::RoceV2))
            .unwrap_or(first)
    };
    Some((best.index, best.gid_type.clone()?))
}

/// A kernel device an ib device or netdev hangs under (its `device` link).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusDevice {
    /// A PCI function (PF or VF) by its address, `0000:3b:00.0`.
    Pci { bdf: String },
    /// An auxiliary-bus device such as the mlx5 SF `mlx5_core.sf.4`, with the PCI function it
    /// sits under.
    Auxiliary {
        name: String,
        pci_parent: Option<String>,
    },
    Other {
        subsystem: Option<String>,
        name: String,
    },
}

impl BusDevice {
    /// The PCI function behind the device: itself, or the aux device's PCI parent.
    pub fn pci_bdf(&self) -> Option<&str> {
        match self {
            BusDevice::Pci { bdf } => Some(bdf),
            BusDevice::Auxiliary { pci_parent, .. } => pci_parent.as_deref(),
            BusDevice::Other { .. } => None,
        }
    }
}

/// What an ib device is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IbParent {
    /// A hardware device (mlx5: `mdev->device`, the PCI function or the SF's aux device).
    Device(BusDevice),
    /// A software device's lower netdev from the `parent` file (rxe, siw), which have no
    /// `device` link: their dir is /sys/devices/virtual/infiniband/<name>.
    Netdev(String),
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CharDevKind {
    /// `/dev/infiniband/uverbsN`, class `infiniband_verbs`.
    Uverbs,
    /// `/dev/infiniband/umadN`, class `infiniband_mad`, one per port.
    Umad,
    /// `/dev/infiniband/issmN`, class `infiniband_mad`, one per port.
    Issm,
    /// `/dev/infiniband/rdma_cm`, the misc device of rdma_ucm, shared by all ib devices.
    RdmaCm,
}

impl CharDevKind {
    /// The sysfs name prefix (`uverbs` → `uverbs3`).
    pub fn prefix(self) -> &'static str {
        match self {
            CharDevKind::Uverbs => "uverbs",
            CharDevKind::Umad => "umad",
            CharDevKind::Issm => "issm",
            CharDevKind::RdmaCm => "rdma_cm",
        }
    }
}

/// A char device of the RDMA stack.
///
/// Numbers come from an IDA (lowest free), and an exclusive-mode netns move removes and
/// re-adds every client (K:drivers/infiniband/core/device.c `rdma_dev_change_netns`), so the
/// N of `uverbsN` can change: devices are always matched through `ibdev`, never by number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharDev {
    pub kind: CharDevKind,
    /// `uverbs0`, `umad1`, `rdma_cm`.
    pub name: String,
    /// The `ibdev` attribute; None for rdma_cm.
    pub ibdev: Option<String>,
    /// The `port` attribute of umad/issm.
    pub port: Option<u32>,
    pub major: u32,
    pub minor: u32,
}

impl CharDev {
    /// The device node: the RDMA classes' devnode callbacks put every node under
    /// `/dev/infiniband/` (uverbs_main.c `uverbs_devnode`, user_mad.c `umad_devnode`,
    /// ucma.c `.nodename = "infiniband/rdma_cm"`).
    pub fn devnode(&self) -> PathBuf {
        Path::new("/dev/infiniband").join(&self.name)
    }
}

/// An ib device (`class/infiniband/<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbDevice {
    pub name: String,
    pub node_type: NumberedState,
    pub node_guid: Option<Guid>,
    pub sys_image_guid: Option<Guid>,
    /// None when absent or empty (rxe prints an empty line).
    pub fw_ver: Option<String>,
    pub parent: IbParent,
    pub ports: Vec<IbPort>,
    /// uverbs, umad and issm devices whose `ibdev` names this device.
    pub char_devs: Vec<CharDev>,
}

impl IbDevice {
    pub fn port(&self, index: u32) -> Option<&IbPort> {
        self.ports.iter().find(|p| p.index == index)
    }

    pub fn uverbs(&self) -> Option<&CharDev> {
        self.char_devs
            .iter()
            .find(|c| c.kind == CharDevKind::Uverbs)
    }

    /// The netdevs bound to any port, in port order.
    pub fn netdevs(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in &self.ports {
            for n in &p.netdevs {
                if !out.contains(&n.as_str()) {
                    out.push(n);
                }
            }
        }
        out
    }

    /// The PCI function behind the device, if it is hardware.
    pub fn pci_bdf(&self) -> Option<&str> {
        match &self.parent {
            IbParent::Device(d) => d.pci_bdf(),
            _ => None,
        }
    }
}

/// How a netdev was tied to an ib port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetdevLink {
    /// Same parent device (`<netdev>/device` = `<ibdev>/device`) and `dev_port` = port − 1.
    Device,
    /// The ib device's `parent` file names the netdev (rxe, siw).
    Parent,
    /// Only the port's GID table names the netdev (an upper device such as a VLAN).
    GidTable,
}

/// An ib device port found for a netdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbPortRef {
    pub ibdev: String,
    pub port: u32,
    pub via: NetdevLink,
}

/// A netdev as sysfs shows it (`class/net/<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysfsNetdev {
    pub name: String,
    pub ifindex: u32,
    /// ARPHRD_*: 1 Ethernet, 32 InfiniBand (IPoIB).
    pub link_type: u16,
    /// 6 for Ethernet, 20 (INFINIBAND_ALEN) for IPoIB.
    pub addr_len: u32,
    pub address: String,
    /// `dev_port` (`%d`): which port of the parent device, from 0. IPoIB sets port − 1
    /// (K:drivers/infiniband/ulp/ipoib/ipoib_main.c `ipoib_parent_init`).
    pub dev_port: Option<u32>,
    /// The parent device; None for virtual netdevs (veth, macvlan, IPoIB children).
    pub device: Option<BusDevice>,
}

/// A PCIe link as `{current,max}_link_{speed,width}` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcieLink {
    /// Raw speed text: `8.0 GT/s PCIe` (kernels since 5.7 print `pci_speed_string`), `8 GT/s`
    /// (older), `Unknown` / `Unknown speed`.
    pub speed: String,
    /// The speed in MT/s (2.5 GT/s → 2500); None when unknown.
    pub mts: Option<u32>,
    /// Lanes (`%u`); None when 0 (no link information, e.g. on VFs).
    pub width: Option<u32>,
}

impl PcieLink {
    fn parse(speed: &str, width: &str) -> PcieLink {
        PcieLink {
            speed: speed.to_string(),
            mts: parse_gts(speed),
            width: width.trim().parse().ok().filter(|w| *w > 0),
        }
    }
}

/// Parses the leading `<n>[.<d>] GT/s` into MT/s without going through floats.
fn parse_gts(text: &str) -> Option<u32> {
    let mut words = text.split_whitespace();
    let number = words.next()?;
    if words.next()? != "GT/s" {
        return None;
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let int: u32 = int.parse().ok()?;
    let mut frac_mts = 0u32;
    let mut scale = 100u32;
    for c in frac.chars() {
        let d = c.to_digit(10)?;
        frac_mts += d * scale;
        scale /= 10;
    }
    // A speed beyond u32 MT/s is no real link: unknown rather than a debug-build overflow
    // panic or a wrapped value.
    int.checked_mul(1000)?.checked_add(frac_mts)
}

/// A PCI function (`bus/pci/devices/<bdf>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    pub bdf: String,
    /// `numa_node` (`%d`); None for -1 (NUMA_NO_NODE) or without CONFIG_NUMA.
    pub numa_node: Option<u32>,
    pub current_link: Option<PcieLink>,
    pub max_link: Option<PcieLink>,
    /// The bound driver (`driver` link): `mlx5_core`, `vfio-pci`.
    pub driver: Option<String>,
    /// For a VF, its PF (`physfn -> ../<PF>`).
    pub physfn: Option<String>,
    /// For a PF, its VFs by VF number (`virtfnN -> ../<VF>`).
    pub virtfns: Vec<(u32, String)>,
    pub sriov_numvfs: Option<u32>,
    pub sriov_totalvfs: Option<u32>,
    /// `net/*` of the function.
    pub netdevs: Vec<String>,
    /// `infiniband/*` of the function.
    pub ib_devices: Vec<String>,
}

impl PciFunction {
    /// Whether the link trained slower or narrower than the function itself supports
    /// (`max_link_*` come from its Link Capabilities register, `current_link_*` from Link
    /// Status, drivers/pci/pci-sysfs.c); the slot or an upstream port is then the limit.
    /// None when either side is unknown.
    pub fn link_degraded(&self) -> Option<bool> {
        let cur = self.current_link.as_ref()?;
        let max = self.max_link.as_ref()?;
        Some(cur.mts? < max.mts? || cur.width? < max.width?)
    }
}

/// Reads RDMA topology through a [`SysRoot`].
#[derive(Debug, Clone, Copy)]
pub struct RdmaSysfs<'a> {
    sys: &'a SysRoot,
}

impl<'a> RdmaSysfs<'a> {
    pub fn new(sys: &'a SysRoot) -> Self {
        RdmaSysfs { sys }
    }

    /// Names in `class/infiniband`, sorted.
    pub fn device_names(&self) -> io::Result<Vec<String>> {
        self.sys.list_dir("class/infiniband")
    }

    /// Every ib device with ports, GIDs and char devices.
    pub fn devices(&self) -> io::Result<Vec<IbDevice>> {
        let chars = self.char_devices()?;
        let mut out = Vec::new();
        for name in self.device_names()? {
            if let Some(d) = self.read_device(&name, &chars)? {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// One ib device, or None when `class/infiniband/<name>` does not exist.
    pub fn device(&self, name: &str) -> io::Result<Option<IbDevice>> {
        plain_name(name)?;
        if !self
            .sys
            .device_exists(Path::new("class/infiniband").join(name))
        {
            return Ok(None);
        }
        let chars = self.char_devices()?;
        self.read_device(name, &chars)
    }

    fn read_device(&self, name: &str, chars: &[CharDev]) -> io::Result<Option<IbDevice>> {
        let base = Path::new("class/infiniband").join(name);
        let node_type = match read_opt(self.sys, &base.join("node_type"))? {
            Some(t) => parse_field(&base.join("node_type"), &t)?,
            // Gone between listing and reading.
            None => return Ok(None),
        };
        let node_guid = read_opt(self.sys, &base.join("node_guid"))?
            .map(|g| parse_field(&base.join("node_guid"), &g))
            .transpose()?;
        let sys_image_guid = read_opt(self.sys, &base.join("sys_image_guid"))?
            .map(|g| parse_field(&base.join("sys_image_guid"), &g))
            .transpose()?;
        let fw_ver = read_opt(self.sys, &base.join("fw_ver"))?.filter(|v| !v.is_empty());
        let parent = self.ib_parent(&base)?;
        let mut ports = Vec::new();
        for index in numeric_entries(self.sys, &base.join("ports"))? {
            ports.push(self.read_port(&base, index, &parent)?);
        }
        let char_devs = chars
            .iter()
            .filter(|c| c.ibdev.as_deref() == Some(name))
            .cloned()
            .collect();
        Ok(Some(IbDevice {
            name: name.to_string(),
            node_type,
            node_guid,
            sys_image_guid,
            fw_ver,
            parent,
            ports,
            char_devs,
        }))
    }

    fn ib_parent(&self, base: &Path) -> io::Result<IbParent> {
        if let Some(dev) = resolve(&self.sys.path(base.join("device")))? {
            return Ok(IbParent::Device(bus_device(&dev)?));
        }
        match read_opt(self.sys, &base.join("parent"))? {
            Some(n) if !n.is_empty() => Ok(IbParent::Netdev(n)),
            _ => Ok(IbParent::None),
        }
    }

    fn read_port(&self, base: &Path, index: u32, parent: &IbParent) -> io::Result<IbPort> {
        let dir = base.join("ports").join(index.to_string());
        let state = parse_field(&dir.join("state"), &self.sys.read_attr(dir.join("state"))?)?;
        let phys_state = parse_field(
            &dir.join("phys_state"),
            &self.sys.read_attr(dir.join("phys_state"))?,
        )?;
        let link_layer = LinkLayer::parse(&self.sys.read_attr(dir.join("link_layer"))?);
        let rate = read_opt(self.sys, &dir.join("rate"))?;
        let gids = self.read_gids(&dir)?;
        let netdevs = self.port_netdevs(base, index, parent)?;
        Ok(IbPort {
            index,
            state,
            phys_state,
            link_layer,
            rate,
            gids,
            netdevs,
        })
    }

    /// The non-empty entries of `ports/N/gids`. An empty entry reads as the zero GID (kept so
    /// tools can walk the table) and its attrs fail with EINVAL; both are skipped.
    fn read_gids(&self, port_dir: &Path) -> io::Result<Vec<GidEntry>> {
        let mut out = Vec::new();
        for index in numeric_entries(self.sys, &port_dir.join("gids"))? {
            let i = index.to_string();
            let Some(text) = read_opt(self.sys, &port_dir.join("gids").join(&i))? else {
                continue;
            };
            let gid = parse_gid(&text).map_err(|m| invalid(&port_dir.join("gids").join(&i), m))?;
            if gid.is_unspecified() {
                continue;
            }
            let attrs = port_dir.join("gid_attrs");
            let gid_type =
                read_opt(self.sys, &attrs.join("types").join(&i))?.map(|t| GidType::parse(&t));
            let ndev = read_opt(self.sys, &attrs.join("ndevs").join(&i))?;
            out.push(GidEntry {
                index,
                gid,
                gid_type,
                ndev,
            });
        }
        Ok(out)
    }

    /// The GID table of one port.
    pub fn gid_table(&self, ibdev: &str, port: u32) -> io::Result<Vec<GidEntry>> {
        plain_name(ibdev)?;
        let dir = Path::new("class/infiniband")
            .join(ibdev)
            .join("ports")
            .join(port.to_string());
        if !self.sys.device_exists(&dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("ib device {ibdev} has no port {port}"),
            ));
        }
        self.read_gids(&dir)
    }

    /// The GID index and type that `ip` on `netdev` got on `ibdev` port `port`, if the kernel
    /// has added it yet (RoCE GIDs follow address changes from a workqueue, so a fresh address
    /// shows up a moment later). An unknown device or port is an error, not None.
    ///
    /// `netdev` is matched against the name the GID table stores, which is the name inside
    /// the netdev's own netns: in shared mode a pod's macvlan shows up as `net1` here even
    /// though the host's /sys/class/net has no such entry.
    pub fn find_gid_for_ip(
        &self,
        ibdev: &str,
        port: u32,
        ip: IpAddr,
        netdev: &str,
    ) -> io::Result<Option<(u32, GidType)>> {
        Ok(find_gid(&self.gid_table(ibdev, port)?, ip, netdev))
    }

    fn port_netdevs(&self, base: &Path, port: u32, parent: &IbParent) -> io::Result<Vec<String>> {
        match parent {
            // rxe registers exactly one port (RXE_NUM_PORT = 1, K:drivers/infiniband/sw/rxe/
            // rxe_param.h).
            IbParent::Netdev(n) => Ok(if port == 1 { vec![n.clone()] } else { vec![] }),
            IbParent::None => Ok(Vec::new()),
            IbParent::Device(_) => {
                let Some(dev) = resolve(&self.sys.path(base.join("device")))? else {
                    return Ok(Vec::new());
                };
                let mut out = Vec::new();
                for n in list_abs(&dev.join("net"))? {
                    // A netdev without `dev_port` (drivers that never set it) is port 1:
                    // the kernel's default dev_port is 0.
                    let dev_port = read_opt_abs(&dev.join("net").join(&n).join("dev_port"))?
                        .and_then(|v| v.parse::<u32>().ok())
                        .unwrap_or(0);
                    if dev_port.checked_add(1) == Some(port) {
                        out.push(n);
                    }
                }
                Ok(out)
            }
        }
    }

    /// A netdev in `class/net`, or None.
    pub fn netdev(&self, name: &str) -> io::Result<Option<SysfsNetdev>> {
        plain_name(name)?;
        let base = Path::new("class/net").join(name);
        if !self.sys.device_exists(&base) {
            return Ok(None);
        }
        let num = |attr: &str| -> io::Result<Option<u64>> {
            read_opt(self.sys, &base.join(attr))?
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| invalid(&base.join(attr), format!("{v:?} is not a number")))
                })
                .transpose()
        };
        let device = match resolve(&self.sys.path(base.join("device")))? {
            Some(d) => Some(bus_device(&d)?),
            None => None,
        };
        Ok(Some(SysfsNetdev {
            name: name.to_string(),
            ifindex: num("ifindex")?.unwrap_or(0) as u32,
            link_type: num("type")?.unwrap_or(0) as u16,
            addr_len: num("addr_len")?.unwrap_or(0) as u32,
            address: read_opt(self.sys, &base.join("address"))?.unwrap_or_default(),
            dev_port: num("dev_port")?.map(|v| v as u32),
            device,
        }))
    }

    /// The ib device ports a netdev belongs to. In order of preference: same parent device
    /// (PCI function or aux device) with `dev_port` choosing the port; an ib device whose
    /// `parent` file names it (rxe); else any port whose GID table names it (RoCE upper
    /// devices). An absent netdev yields none.
    pub fn ib_ports_for_netdev(&self, ifname: &str) -> io::Result<Vec<IbPortRef>> {
        let mut out = self.ib_ports_of_own_device(ifname)?;
        if !out.is_empty() {
            return Ok(out);
        }
        self.gid_table_ports(ifname, &mut out)?;
        Ok(out)
    }

    /// The ports a netdev belongs to by its own device (same parent device and `dev_port`) or
    /// as rxe/siw's `parent`, without the GID-table scan of [`Self::ib_ports_for_netdev`]: the
    /// scan reads every GID of every port (1024 entries on rxe), which callers that only care
    /// about a netdev's own ib device need not pay for every non-RDMA netdev.
    pub fn ib_ports_of_own_device(&self, ifname: &str) -> io::Result<Vec<IbPortRef>> {
        plain_name(ifname)?;
        let base = Path::new("class/net").join(ifname);
        let mut out = Vec::new();
        if let Some(dev) = resolve(&self.sys.path(base.join("device")))? {
            // `dev_port` counts from 0, ports from 1; a `dev_port` of u32::MAX names no port
            // (and must not overflow).
            let port = read_opt(self.sys, &base.join("dev_port"))?
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
                .checked_add(1);
            for ibdev in list_abs(&dev.join("infiniband"))? {
                let ports =
                    numeric_entries_abs(&dev.join("infiniband").join(&ibdev).join("ports"))?;
                if let Some(port) = port.filter(|p| ports.contains(p)) {
                    out.push(IbPortRef {
                        ibdev,
                        port,
                        via: NetdevLink::Device,
                    });
                }
            }
            if !out.is_empty() {
                return Ok(out);
            }
        }
        for ibdev in self.device_names()? {
            let dir = Path::new("class/infiniband").join(&ibdev);
            if read_opt(self.sys, &dir.join("parent"))?.as_deref() == Some(ifname) {
                out.push(IbPortRef {
                    ibdev,
                    port: 1,
                    via: NetdevLink::Parent,
                });
            }
        }
        Ok(out)
    }

    fn gid_table_ports(&self, ifname: &str, out: &mut Vec<IbPortRef>) -> io::Result<()> {
        for ibdev in self.device_names()? {
            let ports_dir = Path::new("class/infiniband").join(&ibdev).join("ports");
            for port in numeric_entries(self.sys, &ports_dir)? {
                let ndevs = ports_dir.join(port.to_string()).join("gid_attrs/ndevs");
                let mut found = false;
                for i in numeric_entries(self.sys, &ndevs)? {
                    if read_opt(self.sys, &ndevs.join(i.to_string()))?.as_deref() == Some(ifname) {
                        found = true;
                        break;
                    }
                }
                if found {
                    out.push(IbPortRef {
                        ibdev: ibdev.clone(),
                        port,
                        via: NetdevLink::GidTable,
                    });
                }
            }
        }
        Ok(())
    }

    /// Netdevs of an ib device per port, as `(port, netdev)`.
    pub fn netdevs_of_ib_device(&self, ibdev: &str) -> io::Result<Vec<(u32, String)>> {
        let Some(dev) = self.device(ibdev)? else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no ib device {ibdev}"),
            ));
        };
        Ok(dev
            .ports
            .iter()
            .flat_map(|p| p.netdevs.iter().map(move |n| (p.index, n.clone())))
            .collect())
    }

    /// Every uverbs, umad and issm device, by class listing (`class/infiniband_verbs/*`,
    /// `class/infiniband_mad/*`; the classes' `abi_version` files are skipped).
    pub fn char_devices(&self) -> io::Result<Vec<CharDev>> {
        let mut out = Vec::new();
        for (class, kinds) in [
            ("class/infiniband_verbs", &[CharDevKind::Uverbs][..]),
            (
                "class/infiniband_mad",
                &[CharDevKind::Umad, CharDevKind::Issm][..],
            ),
        ] {
            for name in self.sys.list_dir(class)? {
                let Some(kind) = kinds.iter().copied().find(|k| {
                    name.strip_prefix(k.prefix())
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                }) else {
                    continue;
                };
                let dir = Path::new(class).join(&name);
                let Some(dev) = read_opt(self.sys, &dir.join("dev"))? else {
                    continue;
                };
                let (major, minor) =
                    parse_devnum(&dev).map_err(|m| invalid(&dir.join("dev"), m))?;
                let ibdev = read_opt(self.sys, &dir.join("ibdev"))?;
                let port = read_opt(self.sys, &dir.join("port"))?
                    .map(|p| {
                        p.parse::<u32>()
                            .map_err(|_| invalid(&dir.join("port"), format!("{p:?}")))
                    })
                    .transpose()?;
                out.push(CharDev {
                    kind,
                    name,
                    ibdev,
                    port,
                    major,
                    minor,
                });
            }
        }
        Ok(out)
    }

    /// `class/misc/rdma_cm` (loaded with rdma_ucm), or None.
    pub fn rdma_cm(&self) -> io::Result<Option<CharDev>> {
        let Some(dev) = read_opt(self.sys, Path::new("class/misc/rdma_cm/dev"))? else {
            return Ok(None);
        };
        let (major, minor) =
            parse_devnum(&dev).map_err(|m| invalid(Path::new("class/misc/rdma_cm/dev"), m))?;
        Ok(Some(CharDev {
            kind: CharDevKind::RdmaCm,
            name: "rdma_cm".to_string(),
            ibdev: None,
            port: None,
            major,
            minor,
        }))
    }

    /// A PCI function, or None when `bus/pci/devices/<bdf>` does not exist.
    pub fn pci_function(&self, bdf: &str) -> io::Result<Option<PciFunction>> {
        plain_name(bdf)?;
        let Some(dir) = resolve(&self.sys.path(Path::new("bus/pci/devices").join(bdf)))? else {
            return Ok(None);
        };
        let link = |speed: &str, width: &str| -> io::Result<Option<PcieLink>> {
            match (
                read_opt_abs(&dir.join(speed))?,
                read_opt_abs(&dir.join(width))?,
            ) {
                (Some(s), Some(w)) => Ok(Some(PcieLink::parse(&s, &w))),
                _ => Ok(None),
            }
        };
        let numa_node = read_opt_abs(&dir.join("numa_node"))?
            .and_then(|v| v.parse::<i64>().ok())
            .and_then(|v| u32::try_from(v).ok());
        let mut virtfns = Vec::new();
        for name in list_abs(&dir)? {
            if let Some(n) = name
                .strip_prefix("virtfn")
                .and_then(|n| n.parse::<u32>().ok())
            {
                if let Some(target) = link_name(&dir.join(&name))? {
                    virtfns.push((n, target));
                }
            }
        }
        virtfns.sort();
        let num = |attr: &str| -> io::Result<Option<u32>> {
            Ok(read_opt_abs(&dir.join(attr))?.and_then(|v| v.parse().ok()))
        };
        Ok(Some(PciFunction {
            bdf: bdf.to_string(),
            numa_node,
            current_link: link("current_link_speed", "current_link_width")?,
            max_link: link("max_link_speed", "max_link_width")?,
            driver: link_name(&dir.join("driver"))?,
            physfn: link_name(&dir.join("physfn"))?,
            virtfns,
            sriov_numvfs: num("sriov_numvfs")?,
            sriov_totalvfs: num("sriov_totalvfs")?,
            netdevs: list_abs(&dir.join("net"))?,
            ib_devices: list_abs(&dir.join("infiniband"))?,
        }))
    }
}

/// Counter files of one directory (`ports/N/counters`, `ports/N/hw_counters`, a device's
/// `hw_counters`), raw as the kernel prints them: the unit is the counter's own (the PMA data
/// counters `port_xmit_data`/`port_rcv_data` count 4-octet words, IBA 16.1.3.5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// `(file name, value)`, sorted by name.
    pub values: Vec<(String, u64)>,
    /// Files whose read failed or whose text is not a number, with why: drivers answer
    /// EINVAL/EOPNOTSUPP for counters the device does not implement, and a VF's PMA counters
    /// can fail to read.
    pub unreadable: Vec<(String, String)>,
}

impl Counters {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

impl RdmaSysfs<'_> {
    /// `ports/<port>/counters/*` (the PMA counters; only drivers with `process_mad` have them,
    /// so rxe has none). An absent directory gives no values.
    pub fn port_counters(&self, ibdev: &str, port: u32) -> io::Result<Counters> {
        plain_name(ibdev)?;
        self.counters_in(
            &Path::new("class/infiniband")
                .join(ibdev)
                .join("ports")
                .join(port.to_string())
                .join("counters"),
        )
    }

    /// `ports/<port>/hw_counters/*`: the driver's per-port counters (mlx5, rxe), without
    /// `lifespan`, which is a setting (how long the kernel caches the values, in ms), not a count.
    pub fn port_hw_counters(&self, ibdev: &str, port: u32) -> io::Result<Counters> {
        plain_name(ibdev)?;
        self.counters_in(
            &Path::new("class/infiniband")
                .join(ibdev)
                .join("ports")
                .join(port.to_string())
                .join("hw_counters"),
        )
    }

    /// `<ibdev>/hw_counters/*`: device-wide driver counters, where the driver has them.
    pub fn device_hw_counters(&self, ibdev: &str) -> io::Result<Counters> {
        plain_name(ibdev)?;
        self.counters_in(
            &Path::new("class/infiniband")
                .join(ibdev)
                .join("hw_counters"),
        )
    }

    fn counters_in(&self, rel: &Path) -> io::Result<Counters> {
        let mut out = Counters::default();
        let names = self.sys.list_dir(rel)?;
        if names.is_empty() {
            return Ok(out);
        }
        // Each counter is opened relative to its directory: the full path walks the ib
        // device's class symlink and a dozen components again for every one of them.
        let dir = match fs::File::open(self.sys.path(rel)) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(with_path(e, &self.sys.path(rel))),
        };
        for name in names {
            if name == "lifespan" {
                continue;
            }
            match read_number_at(&dir, &name) {
                Ok(Ok(v)) => out.values.push((name, v)),
                Ok(Err(text)) => out
                    .unreadable
                    .push((name, format!("{text:?} is not a number"))),
                // A subdirectory is not a counter.
                Err(e) if e.raw_os_error() == Some(nix::libc::EISDIR) => {}
                Err(e) => out.unreadable.push((name, e.to_string())),
            }
        }
        Ok(out)
    }

    /// The PCI device directly upstream of a function (its bridge or root port: the parent
    /// directory in the device tree), or None when the parent is a root bus (`pci0000:00`) or
    /// not a PCI device. Its `max_link_*` is what the slot can do, so a function's link
    /// compared with both ends tells a slot that limits the card from a link that trained low.
    pub fn pci_upstream(&self, bdf: &str) -> io::Result<Option<PciFunction>> {
        plain_name(bdf)?;
        let Some(dir) = resolve(&self.sys.path(Path::new("bus/pci/devices").join(bdf)))? else {
            return Ok(None);
        };
        let Some(parent) = dir.parent() else {
            return Ok(None);
        };
        if link_name(&parent.join("subsystem"))?.as_deref() != Some("pci") {
            return Ok(None);
        }
        let Some(name) = parent.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return Ok(None);
        };
        self.pci_function(&name)
    }

    /// A netdev's `mtu`, `operstate` and (IPoIB) `mode`, or None when it is not in `class/net`.
    pub fn netdev_settings(&self, name: &str) -> io::Result<Option<NetdevSettings>> {
        plain_name(name)?;
        let base = Path::new("class/net").join(name);
        if !self.sys.device_exists(&base) {
            return Ok(None);
        }
        let mtu = read_opt(self.sys, &base.join("mtu"))?
            .map(|v| {
                v.parse::<u32>()
                    .map_err(|_| invalid(&base.join("mtu"), format!("{v:?} is not a number")))
            })
            .transpose()?;
        Ok(Some(NetdevSettings {
            mtu,
            operstate: read_opt(self.sys, &base.join("operstate"))?,
            ipoib_mode: read_opt(self.sys, &base.join("mode"))?,
        }))
    }
}

/// Opens `name` relative to `dir` and reads it with one read(2) into `buf`, returning the
/// file (for a caller whose buffer filled) and the length read. sysfs hands out an attribute
/// whole on the first read(2) (the `show` output is produced at once), so a read that does
/// not fill the buffer has it all; the read to EOF that read_to_string adds would be one more
/// syscall per attribute.
fn read_once_at(dir: &fs::File, name: &str, buf: &mut [u8]) -> io::Result<(fs::File, usize)> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    use std::io::Read;
    let fd = openat(
        std::os::fd::AsFd::as_fd(dir),
        name,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut f = fs::File::from(fd);
    loop {
        match f.read(buf) {
            Ok(n) => return Ok((f, n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads a small numeric attribute with one read(2) into a stack buffer: a counter file is a
/// decimal number and a newline, and a scrape reads thousands of them, so the size query and
/// the heap buffer of `read_to_string` are worth saving. Ok(Err(text)) is a file that is not a
/// number.
fn read_number_at(dir: &fs::File, name: &str) -> io::Result<Result<u64, String>> {
    let mut buf = [0u8; 64];
    let (_, len) = read_once_at(dir, name, &mut buf)?;
    if len == buf.len() {
        return Ok(Err(format!("{}...", String::from_utf8_lossy(&buf))));
    }
    let text = String::from_utf8_lossy(&buf[..len]);
    let text = text.trim();
    Ok(text.parse::<u64>().map_err(|_| text.to_string()))
}

/// A port's state as a metrics scrape needs it: what [`IbPort`] has but the GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortBrief {
    pub ibdev: String,
    pub port: u32,
    pub state: NumberedState,
    pub phys_state: NumberedState,
    pub link_layer: LinkLayer,
    pub rate: Option<String>,
    pub netdevs: Vec<String>,
}

impl RdmaSysfs<'_> {
    /// Every port of every ib device, read with as few syscalls as the layout allows: each
    /// device's directory and parent are resolved once, its netdevs' `dev_port` read once, and
    /// port attributes opened relative to the port's directory. Same values as
    /// [`RdmaSysfs::devices`] without GIDs and char devices.
    pub fn ports_brief(&self) -> io::Result<Vec<PortBrief>> {
        let mut out = Vec::new();
        for ibdev in self.device_names()? {
            let base = Path::new("class/infiniband").join(&ibdev);
            let Some(dir) = resolve(&self.sys.path(&base))? else {
                continue;
            };
            // (dev_port + 1, name) of the netdevs that share the device's parent; rxe's one
            // netdev is its `parent` file.
            let netdevs: Vec<(u32, String)> = match resolve(&dir.join("device"))? {
                Some(parent) => {
                    let mut v = Vec::new();
                    for n in list_abs(&parent.join("net"))? {
                        let dev_port = read_opt_abs(&parent.join("net").join(&n).join("dev_port"))?
                            .and_then(|p| p.parse::<u32>().ok())
                            .unwrap_or(0);
                        if let Some(port) = dev_port.checked_add(1) {
                            v.push((port, n));
                        }
                    }
                    v
                }
                None => read_opt_abs(&dir.join("parent"))?
                    .filter(|n| !n.is_empty())
                    .map(|n| vec![(1, n)])
                    .unwrap_or_default(),
            };
            for port in numeric_entries_abs(&dir.join("ports"))? {
                let pdir = dir.join("ports").join(port.to_string());
                let pd = match fs::File::open(&pdir) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(with_path(e, &pdir)),
                };
                let attr = |name: &str| -> io::Result<Option<String>> {
                    match read_small_at(&pd, name) {
                        Ok(t) => Ok(Some(t)),
                        Err(e) if absent(&e) => Ok(None),
                        Err(e) => Err(with_path(e, &pdir.join(name))),
                    }
                };
                let need = |name: &str| -> io::Result<String> {
                    attr(name)?.ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::NotFound,
                            format!("{}: missing", pdir.join(name).display()),
                        )
                    })
                };
                out.push(PortBrief {
                    ibdev: ibdev.clone(),
                    port,
                    state: parse_field(&pdir.join("state"), &need("state")?)?,
                    phys_state: parse_field(&pdir.join("phys_state"), &need("phys_state")?)?,
                    link_layer: LinkLayer::parse(&need("link_layer")?),
                    rate: attr("rate")?,
                    netdevs: netdevs
                        .iter()
                        .filter(|(p, _)| *p == port)
                        .map(|(_, n)| n.clone())
                        .collect(),
                });
            }
        }
        Ok(out)
    }
}

/// A short text attribute opened relative to its directory, read with one read(2) (see
/// [`read_once_at`]), newline trimmed.
fn read_small_at(dir: &fs::File, name: &str) -> io::Result<String> {
    use std::io::Read;
    let mut buf = [0u8; 256];
    let (mut f, len) = read_once_at(dir, name, &mut buf)?;
    if len == buf.len() {
        let mut rest = String::from_utf8_lossy(&buf).into_owned();
        f.read_to_string(&mut rest)?;
        return Ok(rest.trim_end_matches('\n').to_string());
    }
    Ok(String::from_utf8_lossy(&buf[..len])
        .trim_end_matches('\n')
        .to_string())
}

/// What [`RdmaSysfs::netdev_settings`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetdevSettings {
    pub mtu: Option<u32>,
    /// `up`, `down`, `lowerlayerdown`, `unknown`, ...
    pub operstate: Option<String>,
    /// An IPoIB parent's or legacy child's `mode`: `datagram` or `connected`.
    pub ipoib_mode: Option<String>,
}

/// Parses a sysfs GID: `%pI6` prints eight groups of four hex digits, never compressed.
pub fn parse_gid(text: &str) -> Result<Ipv6Addr, String> {
    let groups: Vec<&str> = text.split(':').collect();
    if groups.len() != 8 || groups.iter().any(|g| g.len() != 4) {
        return Err(format!(
            "{text:?} is not a sysfs GID (8 groups of 4 hex digits)"
        ));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is not a sysfs GID"))
}

/// Parses a `dev` attribute, `major:minor` in decimal (`231:192`).
pub fn parse_devnum(text: &str) -> Result<(u32, u32), String> {
    let (a, b) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not major:minor"))?;
    match (a.parse(), b.parse()) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err(format!("{text:?} is not major:minor")),
    }
}

/// Refuses names that would leave their sysfs directory.
fn plain_name(name: &str) -> io::Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a device name"),
        ));
    }
    Ok(name)
}

fn invalid(path: &Path, msg: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {msg}", path.display()),
    )
}

fn parse_field<T: FromStr<Err = String>>(path: &Path, text: &str) -> io::Result<T> {
    text.parse().map_err(|m: String| invalid(path, m))
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A missing attribute and one whose read(2) fails with EINVAL both mean "no value": empty GID
/// entries and IB ports' ndevs answer EINVAL, and fixtures stand for those by leaving the file
/// out.
fn absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(EINVAL)
}

fn read_opt(sys: &SysRoot, rel: &Path) -> io::Result<Option<String>> {
    match sys.read_attr(rel) {
        Ok(v) => Ok(Some(v)),
        Err(e) if absent(&e) => Ok(None),
        Err(e) => Err(with_path(e, &sys.path(rel))),
    }
}

fn read_opt_abs(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(v) => Ok(Some(v.trim_end_matches('\n').to_string())),
        Err(e) if absent(&e) => Ok(None),
        Err(e) => Err(with_path(e, path)),
    }
}

/// Follows a (relative) sysfs symlink to the real directory; None when it does not exist.
/// The kernel writes these links relative (`device -> ../../../0000:3b:00.0`), so they are
/// resolved by the OS, never joined by hand.
fn resolve(path: &Path) -> io::Result<Option<PathBuf>> {
    match fs::canonicalize(path) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(with_path(e, path)),
    }
}

/// The last component of a symlink's target (`physfn -> ../0000:3b:00.0` → `0000:3b:00.0`).
fn link_name(path: &Path) -> io::Result<Option<String>> {
    match fs::read_link(path) {
        Ok(t) => Ok(t.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // Not a symlink: not the link we look for.
        Err(e) if e.raw_os_error() == Some(EINVAL) => Ok(None),
        Err(e) => Err(with_path(e, path)),
    }
}

fn list_abs(dir: &Path) -> io::Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(with_path(e, dir)),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn numeric_entries_abs(dir: &Path) -> io::Result<Vec<u32>> {
    let mut out: Vec<u32> = list_abs(dir)?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Numbered entries of a directory (ports, GID indexes) in numeric order.
fn numeric_entries(sys: &SysRoot, rel: &Path) -> io::Result<Vec<u32>> {
    numeric_entries_abs(&sys.path(rel))
}

/// The device behind a resolved device directory, told apart by its `subsystem` link.
fn bus_device(dir: &Path) -> io::Result<BusDevice> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let subsystem = link_name(&dir.join("subsystem"))?;
    Ok(match subsystem.as_deref() {
        Some("pci") => BusDevice::Pci { bdf: name },
        Some("auxiliary") => {
            // mlx5 SF aux devices sit under their PCI function: commit "net/mlx5: SF, Add
            // auxiliary device driver" (2021) shows
            // `devices/pci0000:00/0000:00:03.0/0000:06:00.0/mlx5_core.sf.4`.
            let pci_parent = match dir.parent() {
                Some(p) if link_name(&p.join("subsystem"))?.as_deref() == Some("pci") => {
                    p.file_name().map(|n| n.to_string_lossy().into_owned())
                }
                _ => None,
            };
            BusDevice::Auxiliary { name, pci_parent }
        }
        _ => BusDevice::Other { subsystem, name },
    })
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
