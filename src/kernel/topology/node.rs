//! What the node tools read (`rdma-ns doctor` and `rdma-ns exporter`): counters, the ports of a
//! metrics scrape, the PCIe port upstream of a function, netdev settings, and the ports a netdev
//! belongs to found through GID tables as well. A scrape reads every port and thousands of
//! counters, so these readers open attributes relative to their directory, one read(2) each.

use std::fs;
use std::io;
use std::path::Path;

use super::files::{
    absent, invalid, link_name, numeric_entries, numeric_entries_abs, plain_name, port_dir,
    read_once_at, read_opt, read_opt_abs, resolve, with_path,
};
use super::{device_netdev_ports, IbPortRef, NetdevLink, PciFunction, PortState, RdmaSysfs};

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

/// A port as the metrics scrape reads it: what [`IbPort`](super::IbPort) has but the GID table
/// (the scrape's `rdma_port_info`). Read for every port at every scrape, so through directory
/// fds, one read(2) an attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub ibdev: String,
    pub port: PortState,
    pub rate: Option<String>,
    pub netdevs: Vec<String>,
}

impl PortInfo {
    /// Port `index` of `ibdev` from its open directory `pd` (`pdir`, to name files in errors);
    /// `netdevs` are the device's netdevs with their ports.
    fn read(
        ibdev: &str,
        index: u32,
        pdir: &Path,
        pd: &fs::File,
        netdevs: &[(u32, String)],
    ) -> io::Result<PortInfo> {
        let attr = |name: &str| -> io::Result<Option<String>> {
            match read_small_at(pd, name) {
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
        Ok(PortInfo {
            ibdev: ibdev.to_string(),
            port: PortState::parse(pdir, index, &need("state")?, need)?,
            rate: attr("rate")?,
            netdevs: netdevs
                .iter()
                .filter(|(p, _)| *p == index)
                .map(|(_, n)| n.clone())
                .collect(),
        })
    }
}

impl RdmaSysfs<'_> {
    /// `ports/<port>/counters/*` (the PMA counters; only drivers with `process_mad` have them,
    /// so rxe has none). An absent directory gives no values.
    pub fn port_counters(&self, ibdev: &str, port: u32) -> io::Result<Counters> {
        plain_name(ibdev)?;
        self.counters_in(&port_dir(ibdev, port).join("counters"))
    }

    /// `ports/<port>/hw_counters/*`: the driver's per-port counters (mlx5, rxe), without
    /// `lifespan`, which is a setting (how long the kernel caches the values, in ms), not a count.
    pub fn port_hw_counters(&self, ibdev: &str, port: u32) -> io::Result<Counters> {
        plain_name(ibdev)?;
        self.counters_in(&port_dir(ibdev, port).join("hw_counters"))
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
        // Sized once: a scrape reads thousands of counters, and growing the list as it goes
        // allocates and frees at every doubling.
        out.values.reserve_exact(names.len());
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

    /// Every port of every ib device, read with as few syscalls as the layout allows: each
    /// device's directory and parent are resolved once, its netdevs' `dev_port` read once, and
    /// port attributes opened relative to the port's directory. Same values as
    /// [`RdmaSysfs::devices`] without GIDs and char devices.
    pub fn port_infos(&self) -> io::Result<Vec<PortInfo>> {
        let mut out = Vec::new();
        for ibdev in self.device_names()? {
            let base = Path::new("class/infiniband").join(&ibdev);
            let Some(dir) = resolve(&self.sys.path(&base))? else {
                continue;
            };
            // (port, name) of the netdevs that share the device's parent; rxe's one netdev is
            // its `parent` file.
            let netdevs: Vec<(u32, String)> = match resolve(&dir.join("device"))? {
                Some(parent) => device_netdev_ports(&parent)?,
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
                out.push(PortInfo::read(&ibdev, port, &pdir, &pd, &netdevs)?);
            }
        }
        Ok(out)
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
