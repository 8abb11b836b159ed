//! Placing RoCE upper devices (macvlan, ipvlan, VLAN children) on their ib port.
//!
//! The kernel adds a GID for each address of an upper device to the port of its lower
//! device (roce_gid_mgmt.c), under the upper's name as it is called in its own netns. So the
//! port is the lower's, and the entry is the one holding the upper's address under its name.
//!
//! Finding the lower's port from inside a pod: rtnetlink gives the upper's IFLA_LINK (the
//! lower's ifindex) and IFLA_LINK_NETNSID (the netns it lives in, usually the node's). The
//! pod's sysfs does not show that netdev (class/net is tagged by netns, and no `lower_*`
//! link crosses netns), and RDMA netlink in the pod omits a port's netdev that lives
//! elsewhere; only an rtnetlink lookup in the lower's netns (IFLA_TARGET_NETNSID) names it,
//! and the kernel answers it only with CAP_NET_ADMIN over that netns. With the lower known,
//! the port is the one of the ib device under the lower's parent device (a PCI function or
//! SF: identity), else (a virtual lower: a bond, a veth under rxe) a port whose default GID
//! (entry 0) or rxe `parent` names it, confirmed by the child's entry in its table. Without
//! it, the GID tables are searched: those of the devices the pod has a uverbs node for
//! first, then the rest.

use std::net::Ipv6Addr;

use super::ties::{ports_with_link_layer, Tie};
use super::{DiscoverError, Iface, Scope, Via};
use crate::kernel::rtnetlink::Link;
use crate::kernel::topology::gid_of_ip;
use crate::kernel::topology::pod::GidScan;
use crate::kernel::topology::{find_gid, LinkLayer};

/// Upper devices: each through its lower device when that can be looked up, the rest by
/// searching first the ib devices the pod can open, then (only if something is still
/// unplaced) the others, so that a device whose uverbs node is missing is named as such
/// instead of the interface looking like it has no RDMA.
pub(super) fn place_uppers<'i>(
    scope: &Scope<'_>,
    uppers: &[&'i Iface],
) -> Result<Vec<Tie<'i>>, DiscoverError> {
    let mut placed = Vec::new();
    let mut unplaced: Vec<&Iface> = Vec::new();
    for iface in uppers {
        match through_lower_device(scope, iface)? {
            Lowered::Tied(tie) => placed.push(tie),
            Lowered::NotRdma => {}
            Lowered::Unresolved => unplaced.push(iface),
        }
    }
    if unplaced.is_empty() {
        return Ok(placed);
    }
    let (visible, hidden): (Vec<&String>, Vec<&String>) = scope
        .devices
        .iter()
        .partition(|d| scope.uverbs_node(d).is_some());
    let found = search_gid_tables(scope, &visible, &unplaced)?;
    unplaced.retain(|i| !found.iter().any(|t| t.iface.name == i.name));
    placed.extend(found);
    if !unplaced.is_empty() && !hidden.is_empty() {
        placed.extend(search_gid_tables(scope, &hidden, &unplaced)?);
    }
    Ok(placed)
}

/// The ports an upper's lower device can be bound to, and whether they are known by
/// identity (the lower's own device) rather than by its name.
struct LowerPorts {
    ports: Vec<(String, u32)>,
    by_identity: bool,
}

/// What the lower device tells about an upper.
enum Lowered<'i> {
    Tied(Tie<'i>),
    /// The lower's own device has no RoCE port: the upper has no RDMA.
    NotRdma,
    /// The lower or its port is not known: the search takes over.
    Unresolved,
}

/// The upper's port through its lower device, read with one pass over that port's table.
fn through_lower_device<'i>(
    scope: &Scope<'_>,
    iface: &'i Iface,
) -> Result<Lowered<'i>, DiscoverError> {
    let Some(lower) = scope.view.lower_link(iface) else {
        return Ok(Lowered::Unresolved);
    };
    let candidates = lower_ports(scope, iface, &lower)?;
    if candidates.by_identity && candidates.ports.is_empty() {
        return Ok(Lowered::NotRdma);
    }
    let wanted: Vec<Ipv6Addr> = iface.roce_ips().into_iter().map(gid_of_ip).collect();
    let mut last = None;
    for (dev, port) in &candidates.ports {
        let scan = scope.scan_gids(dev, *port, &wanted, true)?;
        if holds_an_address_of(&scan, iface) {
            let mut tie = Tie::new(iface, dev.clone(), *port, Via::GidTable);
            tie.scan = Some(scan);
            return Ok(Lowered::Tied(tie));
        }
        last = Some(scan);
    }
    // The lower's own device has one port: the upper is on it, and its missing GID is what
    // the findings will name.
    match (&candidates.ports[..], candidates.by_identity) {
        ([(dev, port)], true) => {
            let mut tie = Tie::new(iface, dev.clone(), *port, Via::LowerDevice);
            tie.scan = last;
            Ok(Lowered::Tied(tie))
        }
        _ => Ok(Lowered::Unresolved),
    }
}

fn lower_ports(
    scope: &Scope<'_>,
    iface: &Iface,
    lower: &Link,
) -> Result<LowerPorts, DiscoverError> {
    if iface.lower_netnsid.is_none() {
        // A VLAN of a netdev moved into this netns: its own `device` is visible here.
        let own = scope.ports_under_netdev_device(&lower.name)?;
        if !own.is_empty() {
            return Ok(LowerPorts {
                ports: own.into_iter().map(|r| (r.ibdev, r.port)).collect(),
                by_identity: true,
            });
        }
    }
    if let (Some(bus @ ("pci" | "auxiliary")), Some(name)) =
        (lower.parent_bus.as_deref(), lower.parent_dev.as_deref())
    {
        let devices = scope
            .topo
            .ib_devices_under(bus, name)
            .map_err(DiscoverError::sysfs(format!(
                "reading the ib devices of {bus} device {name}"
            )))?;
        let mut ports = Vec::new();
        for dev in &devices {
            for port in ports_with_link_layer(scope, dev, LinkLayer::Ethernet)? {
                ports.push((dev.clone(), port));
            }
        }
        if ports.len() > 1 {
            let named = ports_whose_default_gid_names(scope, &ports, &lower.name)?;
            if !named.is_empty() {
                ports = named;
            }
        }
        return Ok(LowerPorts {
            ports,
            by_identity: true,
        });
    }
    virtual_lower_ports(scope, &lower.name)
}

/// A lower without a parent device: the rxe devices over it (by `parent`), and the ports of
/// the devices the pod can open whose default GID (entry 0, the port netdev's) names it.
/// Names of the lower's netns, matched against names of any netns: confirmed by the child's
/// GID entry before use.
fn virtual_lower_ports(scope: &Scope<'_>, lower: &str) -> Result<LowerPorts, DiscoverError> {
    let mut ports: Vec<(String, u32)> = scope
        .soft_parents()?
        .iter()
        .filter(|(_, parent)| parent == lower)
        .map(|(dev, _)| (dev.clone(), 1))
        .collect();
    for ((dev, port), netdev) in scope.visible_default_gid_netdevs()? {
        if netdev.as_deref() == Some(lower) && !ports.contains(&(dev.clone(), *port)) {
            ports.push((dev.clone(), *port));
        }
    }
    Ok(LowerPorts {
        ports,
        by_identity: false,
    })
}

/// The ports among `ports` whose GID entry 0 (the default GID the kernel adds for a RoCE
/// port's own netdev) names `netdev`; an InfiniBand port's entries name no netdev.
fn ports_whose_default_gid_names(
    scope: &Scope<'_>,
    ports: &[(String, u32)],
    netdev: &str,
) -> Result<Vec<(String, u32)>, DiscoverError> {
    let mut out = Vec::new();
    for (dev, port) in ports {
        if scope.gid0_netdev(dev, *port)?.as_deref() == Some(netdev) {
            out.push((dev.clone(), *port));
        }
    }
    Ok(out)
}

/// Whether the table holds one of the interface's addresses under its name.
fn holds_an_address_of(scan: &GidScan, iface: &Iface) -> bool {
    iface
        .roce_ips()
        .iter()
        .any(|ip| find_gid(&scan.hits, *ip, &iface.name).is_some())
}

/// One pass over the Ethernet ports of `devices`, looking for the GIDs of the upper devices'
/// addresses; an interface is placed on the port whose table holds one of its addresses
/// under its own name, with what that pass found (read once: the whole table was just
/// read). Stops once every interface is placed.
fn search_gid_tables<'i>(
    scope: &Scope<'_>,
    devices: &[&String],
    uppers: &[&'i Iface],
) -> Result<Vec<Tie<'i>>, DiscoverError> {
    let mut placed: Vec<Tie> = Vec::new();
    let wanted: Vec<Ipv6Addr> = uppers
        .iter()
        .flat_map(|i| i.roce_ips())
        .map(gid_of_ip)
        .collect();
    for dev in devices {
        for port in ports_with_link_layer(scope, dev, LinkLayer::Ethernet)? {
            let scan = scope.scan_gids(dev, port, &wanted, false)?;
            for iface in uppers {
                if !placed.iter().any(|t| t.iface.name == iface.name)
                    && holds_an_address_of(&scan, iface)
                {
                    let mut tie = Tie::new(iface, (*dev).clone(), port, Via::GidTable);
                    tie.scan = Some(scan.clone());
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
