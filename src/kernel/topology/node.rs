//! What the node tools read (`rdma-ns doctor` and `rdma-ns exporter`): the PCIe port upstream of
//! a function, netdev settings, and the ports a netdev belongs to found through GID tables as
//! well. The metrics scrape's pass over every port and counter is `scrape.rs`.

use std::io;
use std::path::Path;

use super::files::{invalid, link_name, numeric_entries, plain_name, read_opt, resolve};
use super::{IbPortRef, NetdevLink, PciFunction, PortState, RdmaSysfs};

/// A port as the metrics scrape reads it ([`RdmaSysfs::scrape`]): what
/// [`IbPort`](super::IbPort) has but the GID table (the scrape's `rdma_port_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub ibdev: String,
    pub port: PortState,
    pub rate: Option<String>,
    pub netdevs: Vec<String>,
}

impl RdmaSysfs<'_> {
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
