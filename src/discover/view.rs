//! What only a socket inside the netns can tell discovery: which ports' netdevs are the
//! netns's own (RDMA netlink) and where an upper device's lower device is (rtnetlink).
//! [`KernelView`] asks the running kernel; tests model per netns what it reports.

use std::cell::OnceCell;

use super::Iface;
use crate::kernel::nldev::RdmaDev;
use crate::kernel::rdma_ops::RdmaNetlink;
use crate::kernel::rtnetlink::{Link, NetOps, RealKernel};
use crate::kernel::{Netns, Ns};

/// A port's netdev as RDMA netlink reports it to a socket in the netns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortNetdev {
    /// The netdev with this ifindex, in this netns.
    InNetns(u32),
    /// The kernel answered without a netdev: the port's netdev lives in another netns (or
    /// the port has none).
    NotInNetns,
    /// No answer: no RDMA netlink, or it does not know the device.
    Unknown,
}

/// The questions discovery asks sockets in the netns it looks at.
pub trait NetnsView {
    /// `ibdev` port `port`'s netdev. The kernel puts RDMA_NLDEV_ATTR_NDEV_INDEX in a port
    /// reply only when the netdev is in the requesting socket's netns (nldev.c
    /// `fill_port_info`), so an ifindex here is one of this netns's interfaces.
    fn port_netdev(&self, ibdev: &str, port: u32) -> PortNetdev;

    /// The lower device of `iface` (IFLA_LINK), looked up in the netns it lives in; None when
    /// it has none or the lookup fails. A lower in another netns is looked up there by
    /// IFLA_TARGET_NETNSID, which the kernel answers only with CAP_NET_ADMIN over that netns:
    /// an ordinary pod cannot, and discovery then searches GID tables instead.
    fn lower_link(&self, iface: &Iface) -> Option<Link>;
}

/// [`NetnsView`] on the running kernel: rtnetlink through [`RealKernel`]'s socket in the
/// netns, and an RDMA netlink socket opened in the netns on first use, with the device list
/// it dumps (NLDEV addresses devices by index only).
pub struct KernelView<'a> {
    kernel: &'a RealKernel,
    ns: Ns<'a>,
    rdma: OnceCell<Option<(RdmaNetlink, Vec<RdmaDev>)>>,
}

impl<'a> KernelView<'a> {
    pub fn new(kernel: &'a RealKernel, ns: Ns<'a>) -> Self {
        KernelView {
            kernel,
            ns,
            rdma: OnceCell::new(),
        }
    }

    /// The RDMA netlink socket in the netns and the devices it lists; None without RDMA
    /// netlink (no ib_core: EPROTONOSUPPORT) or when the dump fails.
    fn rdma(&self) -> Option<&(RdmaNetlink, Vec<RdmaDev>)> {
        self.rdma
            .get_or_init(|| {
                let sock = match self.ns {
                    Ns::Host => RdmaNetlink::open().ok()?,
                    Ns::Pod(netns) => RdmaNetlink::open_in(netns, &Netns::current().ok()?).ok()?,
                };
                let devices = sock.devices().ok()?;
                Some((sock, devices))
            })
            .as_ref()
    }
}

impl NetnsView for KernelView<'_> {
    fn port_netdev(&self, ibdev: &str, port: u32) -> PortNetdev {
        let Some((sock, devices)) = self.rdma() else {
            return PortNetdev::Unknown;
        };
        let Some(dev) = devices.iter().find(|d| d.name == ibdev) else {
            return PortNetdev::Unknown;
        };
        match sock.port(dev.index, port) {
            Ok(p) => match p.netdev {
                Some((ifindex, _)) => PortNetdev::InNetns(ifindex),
                None => PortNetdev::NotInNetns,
            },
            Err(_) => PortNetdev::Unknown,
        }
    }

    fn lower_link(&self, iface: &Iface) -> Option<Link> {
        let index = iface.lower?;
        let found = match iface.lower_netnsid {
            None => self.kernel.link_by_index(self.ns, index),
            Some(id) => self.kernel.link_by_index_in_netnsid(self.ns, id, index),
        };
        found.ok().flatten()
    }
}
