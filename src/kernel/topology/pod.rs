//! What `rdma-ns env`, the probe and ADD's GID wait read, at every pod start: a port's state
//! and link layer without its GID table, the uverbs devices without the MAD ones, and a
//! GID-table search that reads one file per entry and the entry's attributes only on a hit.
//!
//! [`RdmaSysfs::device`] reads every GID of every port with its type and netdev (three files
//! an entry): right for discovery on the node, far too slow for a process that must finish in
//! milliseconds on a node whose ports have 256-entry tables.

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use super::files::{
    absent, invalid, numeric_entries, open_dir, plain_name, port_dir, read_once_at, read_opt,
    read_opt_abs, resolve,
};
use super::{
    bus_device, parse_gid, BusDevice, CharDev, CharDevKind, GidEntry, GidType, PortState, RdmaSysfs,
};

/// What one pass over a port's GID table found ([`RdmaSysfs::scan_gids`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GidScan {
    pub hits: Vec<GidEntry>,
    pub first_v2: FirstRoceV2,
}

/// The lowest index of a RoCE v2 GID of each kind in the part of a table a scan read, any
/// netdev's. NCCL (`ncclIbGetGidIndex` with NCCL_IB_GID_INDEX unset) takes the first RoCE v2
/// GID of NCCL_IB_ADDR_FAMILY that is not link-local; UCX (`uct_ib_device_select_gid` with
/// UCX_IB_GID_INDEX auto) the first RoCE v2 IPv4 GID, else the first RoCE v2 IPv6 one,
/// link-local included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstRoceV2 {
    /// An IPv4-mapped GID.
    pub ipv4: Option<u32>,
    /// An IPv6 GID other than link-local (`fe80::/64`, NCCL's `linkLocalGid`).
    pub ipv6_routable: Option<u32>,
    /// Any IPv6 GID, link-local included.
    pub ipv6: Option<u32>,
}

impl FirstRoceV2 {
    /// Whether an entry of `family` could still be the first of its kind.
    fn open_for(&self, family: GidFamily) -> bool {
        match family {
            GidFamily::Ipv4 => self.ipv4.is_none(),
            GidFamily::Ipv6Routable => self.ipv6_routable.is_none() || self.ipv6.is_none(),
            GidFamily::Ipv6LinkLocal => self.ipv6.is_none(),
            GidFamily::Empty => false,
        }
    }

    fn note(&mut self, family: GidFamily, index: u32) {
        let first = |slot: &mut Option<u32>| {
            slot.get_or_insert(index);
        };
        match family {
            GidFamily::Ipv4 => first(&mut self.ipv4),
            GidFamily::Ipv6Routable => {
                first(&mut self.ipv6_routable);
                first(&mut self.ipv6);
            }
            GidFamily::Ipv6LinkLocal => first(&mut self.ipv6),
            GidFamily::Empty => {}
        }
    }
}

/// How NCCL and UCX class a GID (`getGidAddrFamily`, `linkLocalGid`, `configuredGid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GidFamily {
    Ipv4,
    Ipv6Routable,
    Ipv6LinkLocal,
    Empty,
}

impl GidFamily {
    /// From the `%pI6` text of a `gids/N` file.
    fn of_text(text: &[u8]) -> GidFamily {
        const EMPTY: &[u8] = b"0000:0000:0000:0000:0000:0000:0000:0000";
        if text == EMPTY {
            GidFamily::Empty
        } else if text.starts_with(b"0000:0000:0000:0000:0000:ffff:") {
            GidFamily::Ipv4
        } else if text.starts_with(b"fe80:0000:0000:0000:") {
            GidFamily::Ipv6LinkLocal
        } else {
            GidFamily::Ipv6Routable
        }
    }
}

/// Where an ib device sits ([`RdmaSysfs::placement`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The PCI function, `0000:3b:00.0`.
    pub pci_address: Option<String>,
    /// The function's `numa_node`; None for NUMA_NO_NODE.
    pub numa_node: Option<u32>,
}

impl RdmaSysfs<'_> {
    /// The port numbers of an ib device, in order; none when the device does not exist.
    pub fn port_indexes(&self, ibdev: &str) -> io::Result<Vec<u32>> {
        plain_name(ibdev)?;
        numeric_entries(
            self.sys,
            &Path::new("class/infiniband").join(ibdev).join("ports"),
        )
    }

    /// State, physical state and link layer of one port; None when it does not exist.
    pub fn port_state(&self, ibdev: &str, port: u32) -> io::Result<Option<PortState>> {
        plain_name(ibdev)?;
        let dir = port_dir(ibdev, port);
        let Some(state) = read_opt(self.sys, &dir.join("state"))? else {
            return Ok(None);
        };
        let need = |name: &str| {
            read_opt(self.sys, &dir.join(name))?.ok_or_else(|| invalid(&dir.join(name), "missing"))
        };
        PortState::parse(&dir, port, &state, need).map(Some)
    }

    /// The uverbs devices (`class/infiniband_verbs/uverbsN`), without the MAD classes
    /// [`RdmaSysfs::char_devices`] also reads.
    pub fn uverbs_devices(&self) -> io::Result<Vec<CharDev>> {
        self.class_char_devs("class/infiniband_verbs", &[CharDevKind::Uverbs])
    }

    /// One pass over a port's GID table: the entries whose GID is one of `wanted`, with type
    /// and netdev, and the first RoCE v2 entry of each address family, whatever its netdev
    /// ([`FirstRoceV2`]: what NCCL and UCX select when no GID index is given).
    ///
    /// Reads `gids/N` once per entry (through a directory fd, so the `class/infiniband`
    /// symlink is resolved once, not once an entry), the netdev only of hits, and the type of
    /// hits and of the entries that could be a family's first RoCE v2 GID. With `stop_at_v2`,
    /// the scan ends once every wanted GID has a RoCE v2 entry (mlx5 adds v1 before v2 for
    /// each address, rxe only v2; [`super::find_gid`] prefers v2) and the first RoCE v2 IPv4
    /// entry is known (UCX takes it whatever the interface's family).
    pub fn scan_gids(
        &self,
        ibdev: &str,
        port: u32,
        wanted: &[Ipv6Addr],
        stop_at_v2: bool,
    ) -> io::Result<GidScan> {
        plain_name(ibdev)?;
        let port_rel = port_dir(ibdev, port);
        let mut scan = GidScan::default();
        if wanted.is_empty() {
            return Ok(scan);
        }
        // `%pI6` text of each wanted GID: compared as bytes, no parse per entry.
        let texts: Vec<String> = wanted.iter().map(|g| gid_text(*g)).collect();
        let gids_dir = self.sys.path(port_rel.join("gids"));
        let dir = open_gids_dir(&gids_dir, ibdev, port)?;
        let mut v2_found = vec![false; wanted.len()];
        let mut buf = [0u8; 64];
        for index in numeric_entries(self.sys, &port_rel.join("gids"))? {
            let text = match read_at(&dir, &index.to_string(), &mut buf) {
                Ok(t) => t,
                Err(e) if absent(&e) => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}/{index}: {e}", gids_dir.display()),
                    ))
                }
            };
            let which = texts.iter().position(|t| t.as_bytes() == text);
            let family = GidFamily::of_text(text);
            if which.is_none() && !scan.first_v2.open_for(family) {
                continue;
            }
            let i = index.to_string();
            let attrs = port_rel.join("gid_attrs");
            let gid_type =
                read_opt(self.sys, &attrs.join("types").join(&i))?.map(|t| GidType::parse(&t));
            if gid_type == Some(GidType::RoceV2) {
                scan.first_v2.note(family, index);
            }
            if let Some(which) = which {
                // The text matched a well-formed GID, so it parses; parse_gid keeps one rule.
                let path = port_rel.join("gids").join(&i);
                let gid = parse_gid(&texts[which]).map_err(|m| invalid(&path, m))?;
                let ndev = read_opt(self.sys, &attrs.join("ndevs").join(&i))?;
                v2_found[which] |= gid_type == Some(GidType::RoceV2);
                scan.hits.push(GidEntry {
                    index,
                    gid,
                    gid_type,
                    ndev,
                });
            }
            if stop_at_v2 && v2_found.iter().all(|f| *f) && scan.first_v2.ipv4.is_some() {
                break;
            }
        }
        Ok(scan)
    }

    /// The GID index and type that `ip` on `netdev` got on `ibdev` port `port`, if the kernel
    /// has added it yet (RoCE GIDs follow address changes from a workqueue, so a fresh address
    /// shows up a moment later). An unknown device or port is an error, not None.
    ///
    /// `netdev` is matched against the name the GID table stores, which is the name inside
    /// the netdev's own netns: in shared mode a pod's macvlan shows up as `net1` here even
    /// though the host's /sys/class/net has no such entry.
    ///
    /// [`find_gid`]'s pick, from a [`Self::scan_gids`] that ends at the address's RoCE v2 entry
    /// (and the table's first RoCE v2 IPv4 entry, which `env` needs: an IPv6-only pod reads the
    /// whole table): a table has up to 1024 entries (rxe's), a sysfs read each, and the kernel
    /// puts a new address's GIDs at the lowest free indexes. That end does not look at the
    /// entry's netdev, so an address that another netdev holds too is looked for again in the
    /// whole table.
    pub fn find_gid_for_ip(
        &self,
        ibdev: &str,
        port: u32,
        ip: IpAddr,
        netdev: &str,
    ) -> io::Result<Option<(u32, GidType)>> {
        let wanted = [gid_of_ip(ip)];
        let scan = self.scan_gids(ibdev, port, &wanted, true)?;
        match find_gid(&scan.hits, ip, netdev) {
            // Every hit is the address's: another netdev's.
            None if !scan.hits.is_empty() => {
                let whole = self.scan_gids(ibdev, port, &wanted, false)?;
                Ok(find_gid(&whole.hits, ip, netdev))
            }
            picked => Ok(picked),
        }
    }

    /// The netdev of one GID table entry (`gid_attrs/ndevs/N`), or None when it has none.
    /// Entry 0 of a RoCE port is the default GID of the port's own netdev.
    pub fn gid_ndev(&self, ibdev: &str, port: u32, index: u32) -> io::Result<Option<String>> {
        plain_name(ibdev)?;
        read_opt(
            self.sys,
            &port_dir(ibdev, port)
                .join("gid_attrs/ndevs")
                .join(index.to_string()),
        )
    }

    /// The ib devices under a bus device (`bus/<bus>/devices/<name>/infiniband/*`, as a
    /// netdev's IFLA_PARENT_DEV_BUS_NAME and IFLA_PARENT_DEV_NAME name it): mlx5 registers its
    /// ib device under the same PCI function or SF aux device as the netdev.
    pub fn ib_devices_under(&self, bus: &str, name: &str) -> io::Result<Vec<String>> {
        plain_name(bus)?;
        plain_name(name)?;
        self.sys.list_dir(
            Path::new("bus")
                .join(bus)
                .join("devices")
                .join(name)
                .join("infiniband"),
        )
    }

    /// The PCI function an ib device sits on and its NUMA node, as NCCL's topology reads
    /// them (`realpath class/infiniband/<dev>/device`); an SF's is the function its aux
    /// device sits under. Both None for a virtual device (rxe has no `device`).
    pub fn placement(&self, ibdev: &str) -> io::Result<Placement> {
        plain_name(ibdev)?;
        let link = Path::new("class/infiniband").join(ibdev).join("device");
        let Some(dir) = resolve(&self.sys.path(link))? else {
            return Ok(Placement::default());
        };
        let pci_dir = match bus_device(&dir)? {
            BusDevice::Pci { .. } => Some(dir.as_path()),
            BusDevice::Auxiliary {
                pci_parent: Some(_),
                ..
            } => dir.parent(),
            _ => None,
        };
        let Some(pci_dir) = pci_dir else {
            return Ok(Placement::default());
        };
        Ok(Placement {
            pci_address: pci_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned()),
            // `%d`; -1 is NUMA_NO_NODE.
            numa_node: read_opt_abs(&pci_dir.join("numa_node"))?
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(|v| u32::try_from(v).ok()),
        })
    }

    /// One GID table entry (IPoIB uses entry 0, the port GID), or None when it is empty.
    pub fn gid_entry(&self, ibdev: &str, port: u32, index: u32) -> io::Result<Option<GidEntry>> {
        plain_name(ibdev)?;
        self.read_gid_entry(&port_dir(ibdev, port), index)
    }
}

/// A GID as sysfs prints it (`%pI6`: eight groups of four lowercase hex digits).
pub fn gid_text(gid: Ipv6Addr) -> String {
    let s = gid.segments();
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}",
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
    )
}

/// Reads a small attribute relative to `dir` into `buf`: the text without its newline. A GID
/// is 39 characters and a newline, so one read(2) gets it all.
fn read_at<'b>(dir: &fs::File, name: &str, buf: &'b mut [u8]) -> io::Result<&'b [u8]> {
    let (_, n) = read_once_at(dir, name, buf)?;
    let text = &buf[..n];
    Ok(text.strip_suffix(b"\n").unwrap_or(text))
}

/// A port's `gids` directory; an absent one is a port that does not exist.
fn open_gids_dir(path: &Path, ibdev: &str, port: u32) -> io::Result<fs::File> {
    match open_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("ib device {ibdev} has no port {port}"),
        )),
        other => other,
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

/// The GID a RoCE port holds for `ip`: IPv4-mapped for IPv4 (rdma_ip2gid), the address
/// itself for IPv6.
pub fn gid_of_ip(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}
