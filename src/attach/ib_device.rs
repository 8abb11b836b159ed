//! ib (RDMA) devices that go with a netdev: deciding whether to move one, moving it in the
//! order the kernel needs, and bringing it back.
//!
//! In exclusive netns mode (`ib_core netns_mode=0`) an ib device lives in exactly one netns, and
//! a pod that gets a RoCE/IPoIB netdev needs the matching ib device too, or verbs there find
//! "No IB devices". In shared mode (the default) every netns sees every ib device; nothing moves.

use std::path::Path;

pub use crate::records::attachment::RdmaRecord;

use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rdma_ops::RdmaOps;
use crate::kernel::rtnetlink::{format_hwaddr, Link, LinkChange, NetOps};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{IbParent, LinkLayer, RdmaSysfs};
use crate::kernel::{KernelError, Ns};

/// Conf `rdma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RdmaConf {
    /// Move the ib device when the subsystem is exclusive; leave it shared otherwise.
    #[default]
    Auto,
    /// Require exclusive mode and the move.
    Exclusive,
    /// Never touch ib devices.
    Off,
}

impl RdmaConf {
    pub fn parse(value: Option<&str>) -> Result<RdmaConf> {
        match value {
            None | Some("auto") => Ok(RdmaConf::Auto),
            Some("exclusive") => Ok(RdmaConf::Exclusive),
            Some("off") => Ok(RdmaConf::Off),
            Some(other) => Err(Error::UnsupportedField {
                field: "rdma".into(),
                value: other.into(),
                msg: "use auto (default), exclusive or off".into(),
            }),
        }
    }
}

/// Decides whether ADD moves an ib device along with `netdev`, per conf `rdma` and the
/// subsystem's netns mode. Topology is read only when a move is possible (exclusive mode), so
/// shared-mode hosts pay one NETLINK_RDMA request.
pub fn plan_ib_move(
    rdma: &dyn RdmaOps,
    sys: &SysRoot,
    conf: RdmaConf,
    netdev: &Link,
) -> Result<Option<RdmaRecord>> {
    if conf == RdmaConf::Off || !moves_ib_devices(rdma, conf, netdev)? {
        return Ok(None);
    }
    let Some(port) = own_ib_port(sys, conf, netdev)? else {
        return Ok(None);
    };
    let ibdev = RdmaSysfs::new(sys)
        .device(&port.ibdev)
        .map_err(|e| Error::io(format!("reading ib device {}", port.ibdev), e))?
        .ok_or_else(|| {
            Error::DeviceNotFound(format!("ib device {} vanished from sysfs", port.ibdev))
        })?;
    let index = rdma
        .device_index(Ns::Host, &port.ibdev)
        .kernel_ctx(|| format!("looking up ib device {}", port.ibdev))?
        .ok_or_else(|| {
            Error::DeviceInUse(format!(
                "ib device {} of {} is not in the host netns (exclusive mode shows a device only \
                 in its own netns): another pod holds it",
                port.ibdev, netdev.name
            ))
        })?;
    let infiniband = ibdev
        .port(port.port)
        .is_some_and(|p| p.link_layer == LinkLayer::InfiniBand);
    Ok(Some(RdmaRecord {
        ibdev: port.ibdev.clone(),
        index,
        port: port.port,
        infiniband,
        driver: driver_name(sys, &ibdev.parent),
    }))
}

/// Whether the subsystem lets ib devices move (exclusive netns mode); `rdma: exclusive` makes
/// anything else an error naming what to change.
fn moves_ib_devices(rdma: &dyn RdmaOps, conf: RdmaConf, netdev: &Link) -> Result<bool> {
    let mode = rdma
        .netns_mode()
        .kernel_ctx(|| "reading the RDMA subsystem's netns mode")?;
    match (mode, conf) {
        (Some(NetnsMode::Exclusive), _) => Ok(true),
        (_, RdmaConf::Auto) | (_, RdmaConf::Off) => Ok(false),
        (None, RdmaConf::Exclusive) => Err(Error::RdmaUnavailable(format!(
            "rdma is \"exclusive\" but this kernel has no RDMA netlink (ib_core not loaded): load \
             the NIC's RDMA driver (e.g. mlx5_ib), or set rdma to \"auto\" to move {} without an \
             ib device",
            netdev.name
        ))),
        (Some(NetnsMode::Shared), RdmaConf::Exclusive) => Err(Error::RdmaUnavailable(format!(
            "rdma is \"exclusive\" but the RDMA subsystem is in shared netns mode, so the ib \
             device of {} cannot be moved into the pod: set `options ib_core netns_mode=0` in \
             /etc/modprobe.d and reboot (or `rdma system set netns exclusive` while no other \
             netns exists), or use rdma \"auto\"",
            netdev.name
        ))),
    }
}

/// The one ib port `netdev` belongs to by its own device. An upper device (VLAN) has no ib
/// device of its own: its lower device's is not moved.
fn own_ib_port(
    sys: &SysRoot,
    conf: RdmaConf,
    netdev: &Link,
) -> Result<Option<crate::kernel::topology::IbPortRef>> {
    let mut ports = RdmaSysfs::new(sys)
        .ib_ports_of_own_device(&netdev.name)
        .map_err(|e| {
            Error::io(
                format!("reading the ib devices of {} in sysfs", netdev.name),
                e,
            )
        })?;
    let mut names: Vec<&str> = ports.iter().map(|p| p.ibdev.as_str()).collect();
    names.sort();
    names.dedup();
    match names.as_slice() {
        [] if conf == RdmaConf::Exclusive => Err(Error::RdmaUnavailable(format!(
            "rdma is \"exclusive\" but {} has no ib device in sysfs (no RDMA driver bound?)",
            netdev.name
        ))),
        [] => Ok(None),
        [_] => Ok(Some(ports.swap_remove(0))),
        several => Err(Error::DeviceAmbiguous(format!(
            "{} belongs to several ib devices ({}); move mode moves one: select the function \
             with rdmaDevice or set rdma \"off\"",
            netdev.name,
            several.join(", ")
        ))),
    }
}

/// The kernel driver behind an ib device, for messages.
fn driver_name(sys: &SysRoot, parent: &IbParent) -> String {
    match parent {
        IbParent::Netdev(_) => "rdma_rxe (software RoCE)".into(),
        IbParent::Device(dev) => {
            let bus_path = match dev.pci_bdf() {
                Some(bdf) => Path::new("bus/pci/devices").join(bdf),
                None => return "unknown driver".into(),
            };
            std::fs::read_link(sys.path(bus_path.join("driver")))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "unknown driver".into())
        }
        IbParent::None => "unknown driver".into(),
    }
}

/// Maps a refused ib move to a message that says what the kernel means by it.
pub fn move_error(rec: &RdmaRecord, to: &str, e: KernelError) -> Error {
    let why = if e.is_errno(nix::errno::Errno::EOPNOTSUPP) {
        format!(
            "; the kernel moves an ib device only when its driver can disassociate user contexts \
             ({} cannot; mlx5 can) and only in exclusive netns mode: use hardware that supports \
             it, or set rdma \"off\" to move the netdev alone",
            rec.driver
        )
    } else if e.is_errno(nix::errno::Errno::EBUSY) {
        "; the device is busy (open user contexts that cannot be disassociated)".into()
    } else {
        String::new()
    };
    Error::kernel(
        format!(
            "moving ib device {} (driver {}) {to}{why}",
            rec.ibdev, rec.driver
        ),
        e,
    )
}

/// The IPoIB netdev of an ib port in `ns`, found by the port GID in bytes 4-19 of its 20-byte
/// address (byte 0 holds flags and bytes 1-3 the QPN, which change when the kernel re-creates
/// the netdev in another netns).
pub fn find_ipoib_netdev(k: &dyn NetOps, ns: Ns<'_>, hwaddr: &str) -> Result<Option<Link>> {
    let want = crate::kernel::rtnetlink::parse_hwaddr(hwaddr).unwrap_or_default();
    if want.len() != 20 {
        return Ok(None);
    }
    let links = k
        .links(ns)
        .kernel_ctx(|| format!("listing links in {ns} to find the IPoIB netdev"))?;
    Ok(links
        .into_iter()
        .find(|l| l.hwaddr.len() == 20 && l.hwaddr[4..] == want[4..]))
}

/// Renames a (re-created) IPoIB netdev and sets its MTU, in `ns`.
pub fn rename_ipoib(
    k: &dyn NetOps,
    ns: Ns<'_>,
    link: &Link,
    name: &str,
    mtu: Option<u32>,
) -> Result<()> {
    let change = LinkChange {
        name: (link.name != name).then(|| name.to_string()),
        mtu: mtu.filter(|m| *m != link.mtu),
        ..Default::default()
    };
    if change.name.is_none() && change.mtu.is_none() {
        return Ok(());
    }
    k.set_link(ns, link.index, &change).kernel_ctx(|| {
        format!(
            "renaming the IPoIB netdev {} ({}) to {name} in {ns}",
            link.name,
            format_hwaddr(&link.hwaddr)
        )
    })
}
