//! RDMA topology read from sysfs: ib devices, their ports and GID tables, the netdevs and PCI
//! functions behind them, and their char devices.
//!
//! Three clients read it, each with its own cost in mind, and one file serves each:
//! - this file: what all share, the value types and parsers and the [`RdmaSysfs`] reader core
//!   (whole ib devices with ports, GIDs and char devices; netdevs; the ports of a netdev's own
//!   device), with PCI functions in `pci.rs` and char devices in `char_dev.rs`; the attachment
//!   steps read through these;
//! - [`pod`]: `rdma-ns env` and the probe, which run at every pod start: one port's state, the
//!   uverbs devices, a GID-table search that reads an entry's attributes only on a hit;
//! - [`node`]: the doctor and the exporter: counters, the ports of a metrics scrape read with
//!   few syscalls, the PCIe port upstream of a function, netdev settings, a netdev's ports found
//!   through GID tables too.
//!
//! `files.rs` is how every reader reads a file (absent values, symlinks, one read(2));
//! `fixtures.rs` builds fake trees for tests.
//!
//! Everything goes through [`SysRoot`], so tests point it at a tree built by [`fixtures`].
//! Layouts and value formats follow `shared/notes/sysfs-layouts.md`; the kernel sources behind
//! each rule are cited where the rule is applied.
//!
//! The host's /sys is tagged with the netns that mounted it (fs/sysfs/mount.c), so what this
//! module reports is the view of that netns: an ib device moved away in exclusive mode vanishes
//! from `class/infiniband`, while its char devices (untagged classes) stay listed.

mod char_dev;
mod files;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod node;
mod pci;
pub mod pod;
mod scrape;
pub use scrape::{CounterDir, CounterListings, ScrapeSink};

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::str::FromStr;

use self::files::{
    invalid, link_name, list_abs, numeric_entries, numeric_entries_abs, parse_field, plain_name,
    port_dir, read_opt, read_opt_abs, resolve,
};
use super::sysfs::SysRoot;

pub use self::char_dev::{parse_devnum, CharDev, CharDevKind};
pub use self::pci::{PciFunction, PcieLink};
pub use self::pod::{find_gid, gid_of_ip};

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

/// A port's state, physical state and link layer: what every reader of a port reads, and all
/// `rdma-ns env` needs of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    pub index: u32,
    pub state: NumberedState,
    pub phys_state: NumberedState,
    pub link_layer: LinkLayer,
}

impl PortState {
    pub fn is_active(&self) -> bool {
        self.state.num == NumberedState::PORT_ACTIVE
    }

    /// Parses the `state` text of `ports/<index>` (`dir`, to name files in errors), then reads
    /// and parses `phys_state` and `link_layer` through `read`, in that order: a malformed
    /// `state` is reported before anything else is read.
    fn parse(
        dir: &Path,
        index: u32,
        state: &str,
        mut read: impl FnMut(&str) -> io::Result<String>,
    ) -> io::Result<PortState> {
        Ok(PortState {
            index,
            state: parse_field(&dir.join("state"), state)?,
            phys_state: parse_field(&dir.join("phys_state"), &read("phys_state")?)?,
            link_layer: LinkLayer::parse(&read("link_layer")?),
        })
    }
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
    /// Any other bus (a virtio device, ...), with the PCI function it sits under if it has one
    /// (virtio-pci: `devices/pci0000:00/0000:00:03.0/virtio2`).
    Other {
        subsystem: Option<String>,
        name: String,
        pci_parent: Option<String>,
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

    /// The PCI function the device is placed under, for topology (root complex, NUMA node):
    /// [`Self::pci_bdf`], or a virtio device's PCI transport. Not an identity: a virtio-pci
    /// function is not the netdev's own device, so locks and device-info keep `pci_bdf`.
    pub fn placement_bdf(&self) -> Option<&str> {
        match self {
            BusDevice::Other { pci_parent, .. } => pci_parent.as_deref(),
            _ => self.pci_bdf(),
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

/// Reads RDMA topology through a [`SysRoot`].
#[derive(Debug, Clone, Copy)]
pub struct RdmaSysfs<'a> {
    sys: &'a SysRoot,
}

impl<'a> RdmaSysfs<'a> {
    pub fn new(sys: &'a SysRoot) -> Self {
        RdmaSysfs { sys }
    }

    /// The sysfs root this reader reads.
    pub fn sys_root(&self) -> &'a SysRoot {
        self.sys
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
            if let Some(d) = self.read_device(&name, &chars, true)? {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// The devices on a bus (hardware), with ports but no GIDs: what the DRA driver publishes,
    /// read on every reconcile. A software device (rxe, siw: a pod's own) is passed over
    /// unread: an rxe port's GID table alone is 1024 sysfs reads, and a pod's device can go
    /// while it is read.
    pub fn hardware_devices(&self) -> io::Result<Vec<IbDevice>> {
        let chars = self.char_devices()?;
        let mut out = Vec::new();
        for name in self.device_names()? {
            let base = Path::new("class/infiniband").join(&name);
            if matches!(self.ib_parent(&base)?, IbParent::Device(_)) {
                out.extend(self.read_device(&name, &chars, false)?);
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
        self.read_device(name, &chars, true)
    }

    fn read_device(
        &self,
        name: &str,
        chars: &[CharDev],
        gids: bool,
    ) -> io::Result<Option<IbDevice>> {
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
            ports.push(self.read_port(&base, index, &parent, gids)?);
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

    fn read_port(
        &self,
        base: &Path,
        index: u32,
        parent: &IbParent,
        gids: bool,
    ) -> io::Result<IbPort> {
        let dir = base.join("ports").join(index.to_string());
        let PortState {
            index,
            state,
            phys_state,
            link_layer,
        } = PortState::parse(
            &dir,
            index,
            &self.sys.read_attr(dir.join("state"))?,
            |name| self.sys.read_attr(dir.join(name)),
        )?;
        Ok(IbPort {
            index,
            state,
            phys_state,
            link_layer,
            rate: read_opt(self.sys, &dir.join("rate"))?,
            gids: match gids {
                true => self.read_gids(&dir)?,
                false => Vec::new(),
            },
            netdevs: self.port_netdevs(base, index, parent)?,
        })
    }

    /// The non-empty entries of `ports/N/gids`. An empty entry reads as the zero GID (kept so
    /// tools can walk the table) and its attrs fail with EINVAL; both are skipped.
    fn read_gids(&self, port_dir: &Path) -> io::Result<Vec<GidEntry>> {
        let mut out = Vec::new();
        for index in numeric_entries(self.sys, &port_dir.join("gids"))? {
            if let Some(entry) = self.read_gid_entry(port_dir, index)? {
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// Entry `index` of a port's GID table, or None when it is empty (the zero GID) or absent.
    fn read_gid_entry(&self, port_dir: &Path, index: u32) -> io::Result<Option<GidEntry>> {
        let path = port_dir.join("gids").join(index.to_string());
        let Some(text) = read_opt(self.sys, &path)? else {
            return Ok(None);
        };
        let gid = parse_gid(&text).map_err(|m| invalid(&path, m))?;
        if gid.is_unspecified() {
            return Ok(None);
        }
        let (gid_type, ndev) = self.gid_attrs(port_dir, index)?;
        Ok(Some(GidEntry {
            index,
            gid,
            gid_type,
            ndev,
        }))
    }

    /// `gid_attrs/types/N` and `gid_attrs/ndevs/N` of a GID entry.
    fn gid_attrs(
        &self,
        port_dir: &Path,
        index: u32,
    ) -> io::Result<(Option<GidType>, Option<String>)> {
        let i = index.to_string();
        let attrs = port_dir.join("gid_attrs");
        let gid_type =
            read_opt(self.sys, &attrs.join("types").join(&i))?.map(|t| GidType::parse(&t));
        let ndev = read_opt(self.sys, &attrs.join("ndevs").join(&i))?;
        Ok((gid_type, ndev))
    }

    /// The GID table of one port.
    pub fn gid_table(&self, ibdev: &str, port: u32) -> io::Result<Vec<GidEntry>> {
        plain_name(ibdev)?;
        let dir = port_dir(ibdev, port);
        if !self.sys.device_exists(&dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("ib device {ibdev} has no port {port}"),
            ));
        }
        self.read_gids(&dir)
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
                Ok(device_netdev_ports(&dev)?
                    .into_iter()
                    .filter(|(p, _)| *p == port)
                    .map(|(_, n)| n)
                    .collect())
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

    /// The ports a netdev belongs to by its own device (same parent device and `dev_port`) or
    /// as rxe/siw's `parent`, without the GID-table scan of the doctor's
    /// [`Self::ib_ports_for_netdev`]: the scan reads every GID of every port (1024 entries on
    /// rxe), which callers that only care about a netdev's own ib device need not pay for every
    /// non-RDMA netdev.
    pub fn ib_ports_of_own_device(&self, ifname: &str) -> io::Result<Vec<IbPortRef>> {
        let out = self.ib_ports_under_netdev_device(ifname)?;
        if !out.is_empty() {
            return Ok(out);
        }
        Ok(self
            .soft_rdma_parents()?
            .into_iter()
            .filter(|(_, parent)| parent == ifname)
            .map(|(ibdev, _)| IbPortRef {
                ibdev,
                port: 1,
                via: NetdevLink::Parent,
            })
            .collect())
    }

    /// The ports of the ib devices under the netdev's own parent device (`class/net/<if>/device`)
    /// whose number is the netdev's `dev_port` + 1; none for a virtual netdev.
    pub fn ib_ports_under_netdev_device(&self, ifname: &str) -> io::Result<Vec<IbPortRef>> {
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
        }
        Ok(out)
    }

    /// `(ib device, netdev)` of every software RDMA device (rxe, siw) by its `parent` file. The
    /// name is the netdev's name in its own netns: in shared mode two pods' devices can both
    /// name a `net1`.
    pub fn soft_rdma_parents(&self) -> io::Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for ibdev in self.device_names()? {
            let dir = Path::new("class/infiniband").join(&ibdev);
            if let Some(parent) = read_opt(self.sys, &dir.join("parent"))?.filter(|p| !p.is_empty())
            {
                out.push((ibdev, parent));
            }
        }
        Ok(out)
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

/// The netdevs under a device directory (`<dev>/net/*`), each with the ib port it belongs to:
/// `dev_port` counts from 0, ports from 1. A netdev without `dev_port` (drivers that never set
/// it) is port 1, the kernel's default dev_port being 0; one whose `dev_port` is u32::MAX names
/// no port.
fn device_netdev_ports(dev: &Path) -> io::Result<Vec<(u32, String)>> {
    let mut out = Vec::new();
    for n in list_abs(&dev.join("net"))? {
        let dev_port = read_opt_abs(&dev.join("net").join(&n).join("dev_port"))?
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0);
        if let Some(port) = dev_port.checked_add(1) {
            out.push((port, n));
        }
    }
    Ok(out)
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
        // mlx5 SF aux devices sit under their PCI function: commit "net/mlx5: SF, Add
        // auxiliary device driver" (2021) shows
        // `devices/pci0000:00/0000:00:03.0/0000:06:00.0/mlx5_core.sf.4`.
        Some("auxiliary") => BusDevice::Auxiliary {
            name,
            pci_parent: pci_parent(dir)?,
        },
        _ => BusDevice::Other {
            subsystem,
            name,
            pci_parent: pci_parent(dir)?,
        },
    })
}

/// The PCI function directly above a device directory, if the parent is one.
fn pci_parent(dir: &Path) -> io::Result<Option<String>> {
    Ok(match dir.parent() {
        Some(p) if link_name(&p.join("subsystem"))?.as_deref() == Some("pci") => {
            p.file_name().map(|n| n.to_string_lossy().into_owned())
        }
        _ => None,
    })
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
