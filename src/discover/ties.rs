//! Tying an interface to its ib port by what the interface itself is: its own device, a
//! software RDMA device bound to it, or (IPoIB child) its port GID. RoCE upper devices are
//! left to [`super::uppers`].

use std::net::Ipv6Addr;

use super::view::PortNetdev;
use super::{
    DiscoverError, Iface, Scope, Via, ARPHRD_ETHER, ARPHRD_INFINIBAND, IPOIB_ALEN, ROCE_UPPER_KINDS,
};
use crate::kernel::topology::pod::GidScan;
use crate::kernel::topology::LinkLayer;

/// An interface tied to an ib port, with what a pass over the port's GID table found when
/// the step that tied them already read it.
pub(super) struct Tie<'i> {
    pub iface: &'i Iface,
    pub dev: String,
    pub port: u32,
    pub via: Via,
    pub scan: Option<GidScan>,
}

impl<'i> Tie<'i> {
    pub fn new(iface: &'i Iface, dev: String, port: u32, via: Via) -> Self {
        Tie {
            iface,
            dev,
            port,
            via,
            scan: None,
        }
    }
}

/// The interfaces tied to a port by their own device, a software RDMA device bound to them
/// or, for an IPoIB child, their port GID; and the RoCE upper devices with an address, which
/// [`super::uppers`] places.
pub(super) fn tie_to_own_ports<'i>(
    scope: &Scope<'_>,
    ifaces: &'i [Iface],
) -> Result<(Vec<Tie<'i>>, Vec<&'i Iface>), DiscoverError> {
    let mut ports: Vec<Tie> = Vec::new();
    let mut uppers: Vec<&Iface> = Vec::new();
    for iface in ifaces {
        let own = scope.ports_under_netdev_device(&iface.name)?;
        if !own.is_empty() {
            ports.extend(
                own.into_iter()
                    .map(|r| Tie::new(iface, r.ibdev, r.port, Via::OwnDevice)),
            );
            continue;
        }
        let soft = soft_devices_bound_to(scope, iface)?;
        if !soft.is_empty() {
            ports.extend(
                soft.into_iter()
                    .map(|dev| Tie::new(iface, dev, 1, Via::SoftRdmaParent)),
            );
        } else if iface.link_type == ARPHRD_INFINIBAND && iface.hwaddr.len() == IPOIB_ALEN {
            if let Some((dev, port)) = ipoib_port(scope, iface)? {
                ports.push(Tie::new(iface, dev, port, Via::PortGid));
            }
        } else if is_roce_upper(iface) {
            uppers.push(iface);
        }
    }
    Ok((ports, uppers))
}

fn is_roce_upper(iface: &Iface) -> bool {
    iface.link_type == ARPHRD_ETHER
        && iface
            .kind
            .as_deref()
            .is_some_and(|k| ROCE_UPPER_KINDS.contains(&k))
        && !iface.roce_ips().is_empty()
}

/// The software RDMA devices (rxe registers one port) bound to this interface: their
/// `parent` file names it, and RDMA netlink in this netns reports their port's netdev with
/// its ifindex. A device whose netdev RDMA netlink places in another netns is another pod's
/// (shared netns mode shows every pod's device, and every pod has a `net1`). Without an
/// answer from RDMA netlink the name is all there is to go by.
fn soft_devices_bound_to(scope: &Scope<'_>, iface: &Iface) -> Result<Vec<String>, DiscoverError> {
    let mut out = Vec::new();
    for (dev, parent) in scope.soft_parents()? {
        if *parent != iface.name {
            continue;
        }
        let ours = match scope.view.port_netdev(dev, 1) {
            PortNetdev::InNetns(ifindex) => ifindex == iface.index,
            PortNetdev::NotInNetns => false,
            PortNetdev::Unknown => true,
        };
        if ours {
            out.push(dev.clone());
        }
    }
    Ok(out)
}

/// The InfiniBand port whose GID 0 is the IPoIB interface's port GID.
fn ipoib_port(scope: &Scope<'_>, iface: &Iface) -> Result<Option<(String, u32)>, DiscoverError> {
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&iface.hwaddr[4..IPOIB_ALEN]);
    let gid = Ipv6Addr::from(gid);
    for dev in &scope.devices {
        for port in ports_with_link_layer(scope, dev, LinkLayer::InfiniBand)? {
            if scope.gid0(dev, port)?.is_some_and(|g| g.gid == gid) {
                return Ok(Some((dev.clone(), port)));
            }
        }
    }
    Ok(None)
}

/// The ports of `dev` whose link layer is `layer`, in index order.
pub(super) fn ports_with_link_layer(
    scope: &Scope<'_>,
    dev: &str,
    layer: LinkLayer,
) -> Result<Vec<u32>, DiscoverError> {
    let mut matching = Vec::new();
    for port in scope.port_indexes(dev)? {
        let brief = scope.port_state(dev, port)?;
        if brief.is_some_and(|b| b.link_layer == layer) {
            matching.push(port);
        }
    }
    Ok(matching)
}
