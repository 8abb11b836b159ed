//! What the kernel's sockets report per netns, for the unit tests: each netdev lives in one
//! netns under an ifindex of that netns (two pods can both have a `net1` with ifindex 2),
//! each port is bound to one netdev, and RDMA netlink names a port's netdev only to a socket
//! in the netdev's netns. Lower devices are looked up only where the kernel would answer
//! (the pod's own netns, or another with CAP_NET_ADMIN over it).

use crate::discover::{Iface, NetnsView, PortNetdev};
use crate::kernel::rtnetlink::Link;

/// A kernel without RDMA netlink, asked by a process that cannot look up lower devices in
/// another netns: what name-only discovery had to go by.
pub struct NoView;

impl NetnsView for NoView {
    fn port_netdev(&self, _: &str, _: u32) -> PortNetdev {
        PortNetdev::Unknown
    }

    fn lower_link(&self, _: &Iface) -> Option<Link> {
        None
    }
}

/// A netdev: its netns and its ifindex there.
pub struct Netdev {
    pub netns: &'static str,
    pub ifindex: u32,
}

/// The node: netdevs by netns and the ports bound to them.
#[derive(Default)]
pub struct Kernel {
    pub netdevs: Vec<Netdev>,
    /// (ib device, port, index into `netdevs`).
    pub bound: Vec<(&'static str, u32, usize)>,
}

impl Kernel {
    /// Adds a netdev of `netns` and returns its index in `netdevs`.
    pub fn netdev(&mut self, netns: &'static str, ifindex: u32) -> usize {
        self.netdevs.push(Netdev { netns, ifindex });
        self.netdevs.len() - 1
    }

    pub fn bind(&mut self, ibdev: &'static str, port: u32, netdev: usize) {
        self.bound.push((ibdev, port, netdev));
    }

    /// What sockets opened in `netns` see, with `lowers` (an upper's ifindex in `netns`, its
    /// lower link) where the process may look them up.
    pub fn seen_from(&self, netns: &'static str, lowers: Vec<(u32, Link)>) -> PodView<'_> {
        PodView {
            kernel: self,
            netns,
            lowers,
        }
    }
}

pub struct PodView<'k> {
    kernel: &'k Kernel,
    netns: &'static str,
    lowers: Vec<(u32, Link)>,
}

impl NetnsView for PodView<'_> {
    fn port_netdev(&self, ibdev: &str, port: u32) -> PortNetdev {
        let Some((_, _, n)) = self
            .kernel
            .bound
            .iter()
            .find(|(d, p, _)| *d == ibdev && *p == port)
        else {
            return PortNetdev::Unknown;
        };
        let netdev = &self.kernel.netdevs[*n];
        if netdev.netns == self.netns {
            PortNetdev::InNetns(netdev.ifindex)
        } else {
            PortNetdev::NotInNetns
        }
    }

    fn lower_link(&self, iface: &Iface) -> Option<Link> {
        self.lowers
            .iter()
            .find(|(upper, _)| *upper == iface.index)
            .map(|(_, link)| link.clone())
    }
}

/// A lower device as rtnetlink describes it: its name, ifindex and parent device.
pub fn lower(name: &str, index: u32, parent: Option<(&str, &str)>) -> Link {
    Link {
        name: name.into(),
        index,
        link_type: 1,
        parent_bus: parent.map(|(bus, _)| bus.into()),
        parent_dev: parent.map(|(_, dev)| dev.into()),
        ..Link::default()
    }
}
