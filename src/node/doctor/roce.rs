//! `roce-mtu` and `roce-gid`: each RoCE netdev's MTU gives the 4096-byte RoCE MTU, and every
//! address of a RoCE netdev (and its VLANs) has a RoCE v2 GID on its port.

use std::net::IpAddr;

use super::{Report, Severity};
use crate::kernel::topology::{GidType, IbDevice, IbPort, LinkLayer, RdmaSysfs};
use crate::node::NetView;

/// The RoCE path MTU a netdev MTU allows: the netdev MTU less the largest header stack
/// (GRH, UDP, BTH, XRC, AtomicETH, ICRC: 96 bytes), rounded down to an IB MTU
/// (include/rdma/ib_addr.h `iboe_get_mtu`).
pub fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let payload = netdev_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| payload >= *m)
}

pub(super) struct RoceCheck<'a> {
    pub(super) topo: &'a RdmaSysfs<'a>,
    pub(super) net: &'a dyn NetView,
    pub(super) devices: &'a [IbDevice],
}

impl RoceCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        for d in self.devices {
            for p in d
                .ports
                .iter()
                .filter(|p| p.link_layer == LinkLayer::Ethernet)
            {
                for nd in &p.netdevs {
                    self.mtu(d, p, nd, r);
                }
                self.port_gids(d, p, r);
            }
        }
    }

    fn mtu(&self, d: &IbDevice, p: &IbPort, nd: &str, r: &mut Report) {
        let object = format!("{nd} ({}/{})", d.name, p.index);
        let Some(mtu) = self
            .topo
            .netdev_settings(nd)
            .ok()
            .flatten()
            .and_then(|s| s.mtu)
        else {
            return;
        };
        match roce_active_mtu(mtu) {
            Some(4096) => r.push(
                "roce-mtu",
                Severity::Ok,
                object,
                format!("MTU {mtu}: RoCE active MTU 4096"),
                None,
            ),
            active => r.push(
                "roce-mtu",
                Severity::Warn,
                object,
                format!(
                    "MTU {mtu} gives RoCE an active MTU of {} (4096 needs a netdev MTU of at \
                     least 4192)",
                    active
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| "none".into())
                ),
                Some(format!(
                    "ip link set {nd} mtu 9000 (the switch ports and peers need it too; persist \
                     it in the node's network configuration)"
                )),
            ),
        }
    }

    /// The port's own netdevs and their upper devices (VLANs) that have GIDs, as far as this
    /// netns sees them: a pod's netdev in the host's GID table is not here.
    fn port_gids(&self, d: &IbDevice, p: &IbPort, r: &mut Report) {
        let mut netdevs: Vec<&str> = p.netdevs.iter().map(String::as_str).collect();
        for n in p.gid_ndevs() {
            if !netdevs.contains(&n) {
                netdevs.push(n);
            }
        }
        for nd in netdevs {
            if !matches!(self.topo.netdev(nd), Ok(Some(_))) {
                continue;
            }
            let object = format!("{nd} ({}/{})", d.name, p.index);
            match self.net.addresses(nd) {
                Ok(addrs) => gids(d, p, nd, &addrs, object, r),
                Err(e) => r.push(
                    "roce-gid",
                    Severity::Warn,
                    object,
                    format!("cannot list its addresses: {e}"),
                    Some(format!("ip -br addr show {nd}")),
                ),
            }
        }
    }
}

fn gids(d: &IbDevice, p: &IbPort, nd: &str, addrs: &[IpAddr], object: String, r: &mut Report) {
    let mut found = Vec::new();
    for ip in addrs {
        match p.find_gid(*ip, nd) {
            Some((index, GidType::RoceV2)) => found.push(format!("{ip} at {index}")),
            Some((index, t)) => r.push(
                "roce-gid",
                Severity::Fail,
                object.clone(),
                format!(
                    "{ip} has only a {t} GID (index {index}) on {}/{}: not routable, RoCE v2 \
                     expected",
                    d.name, p.index
                ),
                Some(format!(
                    "check the RoCE mode: cma_roce_mode -d {} -p {} (rdma-core) should say \
                     RoCE v2",
                    d.name, p.index
                )),
            ),
            None => r.push(
                "roce-gid",
                Severity::Fail,
                object.clone(),
                format!(
                    "{ip} has no RoCE v2 GID on {}/{}: RDMA to this address fails",
                    d.name, p.index
                ),
                Some(format!(
                    "the kernel adds GIDs when addresses change: re-add it (ip addr del {ip}/<len> \
                     dev {nd}; ip addr add ...); if it still has none, look at \
                     /sys/class/infiniband/{}/ports/{}/gid_attrs/ndevs/*",
                    d.name, p.index
                )),
            ),
        }
    }
    if !found.is_empty() {
        r.push(
            "roce-gid",
            Severity::Ok,
            object,
            format!("RoCE v2 GIDs: {}", found.join(", ")),
            None,
        );
    }
}
