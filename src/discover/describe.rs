//! What discovery reports about an interface tied to a port: the port's state, the GID of
//! each address and the one RDMA uses, what NCCL and UCX would pick by themselves, and where
//! the ib device sits.

use std::net::{IpAddr, Ipv6Addr};

use super::ties::Tie;
use super::{AddrGid, AutoGid, DiscoverError, Finding, Iface, Scope};
use crate::kernel::topology::pod::GidScan;
use crate::kernel::topology::{find_gid, gid_of_ip, LinkLayer, PortState};

pub(super) fn describe(
    scope: &Scope<'_>,
    brief: &PortState,
    tie: Tie<'_>,
) -> Result<Finding, DiscoverError> {
    let Tie {
        iface,
        dev,
        via,
        scan,
        ..
    } = tie;
    let dev = dev.as_str();
    let qos = iface
        .alias
        .as_deref()
        .map_or(Ok(None), crate::qos::RoceQos::from_alias);
    let chosen = match brief.link_layer {
        LinkLayer::Ethernet => roce_gids(scope, dev, brief.index, iface, scan)?,
        LinkLayer::InfiniBand => port_gid(scope, dev, brief.index, iface)?,
        LinkLayer::Other(_) => ChosenGid::default(),
    };
    let placement = scope
        .topo
        .placement(dev)
        .map_err(DiscoverError::sysfs(format!(
            "reading the PCI function of {dev}"
        )))?;
    Ok(Finding {
        ifname: iface.name.clone(),
        ibdev: dev.to_string(),
        port: brief.index,
        via,
        link_layer: match &brief.link_layer {
            LinkLayer::Ethernet => "Ethernet".into(),
            LinkLayer::InfiniBand => "InfiniBand".into(),
            LinkLayer::Other(s) => s.clone(),
        },
        port_state: brief.state.to_string(),
        phys_state: brief.phys_state.to_string(),
        port_active: brief.is_active(),
        mtu: iface.mtu,
        netdev_up: iface.up,
        uverbs: scope.uverbs_node(dev),
        gids: chosen.gids,
        gid_index: chosen.index,
        gid: chosen.gid,
        ip: chosen.ip,
        auto_gid_index: chosen.auto,
        pci_address: placement.pci_address,
        numa_node: placement.numa_node,
        roce_qos: qos.clone().ok().flatten(),
        roce_qos_unreadable: qos.err(),
    })
}

/// The GIDs of an interface's addresses on its port, and the one RDMA uses.
#[derive(Default)]
struct ChosenGid {
    gids: Vec<AddrGid>,
    index: Option<u32>,
    gid: Option<Ipv6Addr>,
    ip: Option<IpAddr>,
    auto: AutoGid,
}

/// InfiniBand: GID 0, the port GID; the interface's first address is IPoIB's.
fn port_gid(
    scope: &Scope<'_>,
    dev: &str,
    port: u32,
    iface: &Iface,
) -> Result<ChosenGid, DiscoverError> {
    let g0 = scope.gid0(dev, port)?;
    Ok(ChosenGid {
        index: g0.as_ref().map(|g| g.index),
        gid: g0.map(|g| g.gid),
        ip: iface.addrs.first().map(|a| a.ip()),
        ..ChosenGid::default()
    })
}

/// The GID of each of a RoCE interface's addresses on `dev` port `port` (from `scan`, what
/// the step that tied it read, else from one pass over the table), the index RDMA uses with
/// its GID, and the indexes NCCL and UCX would pick themselves.
fn roce_gids(
    scope: &Scope<'_>,
    dev: &str,
    port: u32,
    iface: &Iface,
    scan: Option<GidScan>,
) -> Result<ChosenGid, DiscoverError> {
    let ips = iface.roce_ips();
    let scan = match scan {
        Some(s) => s,
        None => {
            let wanted: Vec<Ipv6Addr> = ips.iter().copied().map(gid_of_ip).collect();
            scope.scan_gids(dev, port, &wanted, true)?
        }
    };
    let gids: Vec<AddrGid> = ips
        .iter()
        .map(|ip| {
            let hit = find_gid(&scan.hits, *ip, &iface.name);
            AddrGid {
                ip: *ip,
                index: hit.as_ref().map(|h| h.0),
                gid_type: hit.as_ref().map(|h| h.1.to_string()),
            }
        })
        .collect();
    // IPv4 first (NCCL's default address family), each kind in address order.
    let v2 = |g: &&AddrGid| g.gid_type.as_deref() == Some("RoCE v2");
    let chosen = gids
        .iter()
        .filter(v2)
        .find(|g| g.ip.is_ipv4())
        .or_else(|| gids.iter().find(v2));
    let first = scan.first_v2;
    let auto = AutoGid {
        nccl: match chosen.map(|g| g.ip) {
            Some(IpAddr::V4(_)) => first.ipv4,
            Some(IpAddr::V6(_)) => first.ipv6_routable,
            None => None,
        },
        ucx: first.ipv4.or(first.ipv6),
    };
    Ok(ChosenGid {
        index: chosen.and_then(|g| g.index),
        gid: chosen.map(|g| gid_of_ip(g.ip)),
        ip: chosen.map(|g| g.ip),
        auto,
        gids,
    })
}
