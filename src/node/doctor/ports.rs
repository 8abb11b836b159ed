//! `devices` and `port`: there is an ib device, and each port is ACTIVE with a physical link
//! (the `ibstat` view).

use super::{Report, Severity};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::topology::{IbDevice, IbPort, LinkLayer, NumberedState, RdmaSysfs};
use crate::node::values::{link_layer_name, rate_mbps};

pub(super) struct DevicesCheck<'a> {
    pub(super) devices: &'a [IbDevice],
    pub(super) mode: Option<NetnsMode>,
    pub(super) pod: bool,
    /// rdma_rxe is loaded: a node whose RDMA is Soft-RoCE has no ib device until a
    /// `softRoce` network makes a pod's own (the lab's nodes, docs/lab.md).
    pub(super) soft_roce_module: bool,
}

impl DevicesCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        if !self.devices.is_empty() {
            return;
        }
        if self.soft_roce_module && !self.pod {
            r.push(
                "devices",
                Severity::Warn,
                "/sys/class/infiniband",
                "no ib device, rdma_rxe loaded: only networks with softRoce get RDMA here \
                 (each pod's own Soft-RoCE device); any other network's pods get none",
                Some(
                    "for RDMA without softRoce, load the NIC's RDMA driver, or add a Soft-RoCE \
                     device: rdma link add rxe0 type rxe netdev <ethernet netdev>"
                        .into(),
                ),
            );
            return;
        }
        let fix = if self.pod && self.mode == Some(NetnsMode::Exclusive) {
            "in exclusive netns mode a pod sees only the ib devices moved into it: attach it with \
             mode move (rdma auto or exclusive) or chain mode rdma after sriov-cni"
        } else {
            "load the NIC's RDMA driver (modprobe mlx5_ib; dmesg | grep -i mlx5 shows why it \
             failed), or for Soft-RoCE: rdma link add rxe0 type rxe netdev <ethernet netdev>"
        };
        r.push(
            "devices",
            Severity::Fail,
            "/sys/class/infiniband",
            "no ib device",
            Some(fix.into()),
        );
    }
}

pub(super) struct PortsCheck<'a> {
    pub(super) topo: &'a RdmaSysfs<'a>,
    pub(super) devices: &'a [IbDevice],
}

impl PortsCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        for d in self.devices {
            for p in &d.ports {
                let layer = link_layer_name(&p.link_layer);
                r.facts.link_layers.insert(layer.to_string());
                let netdev = p.netdevs.first().map(String::as_str);
                // What both findings end with: `Ethernet, 100 Gb/sec (4X EDR), netdev x`.
                let summary = format!(
                    "{layer}, {}{}",
                    p.rate.as_deref().unwrap_or("rate unknown"),
                    netdev.map(|n| format!(", netdev {n}")).unwrap_or_default()
                );
                if p.is_active() && p.phys_state.num == NumberedState::PHYS_LINK_UP {
                    Self::up(d, p, &summary, r);
                } else {
                    self.down(d, p, netdev, &summary, r);
                }
            }
        }
    }

    fn up(d: &IbDevice, p: &IbPort, summary: &str, r: &mut Report) {
        r.facts.active_ports += 1;
        if let Some(m) = p.rate.as_deref().and_then(rate_mbps) {
            r.facts.max_rate_mbps = Some(r.facts.max_rate_mbps.unwrap_or(0).max(m));
        }
        r.push(
            "port",
            Severity::Ok,
            format!("{}/{}", d.name, p.index),
            format!("{}, {}, {summary}", p.state, p.phys_state),
            None,
        );
    }

    fn down(&self, d: &IbDevice, p: &IbPort, netdev: Option<&str>, summary: &str, r: &mut Report) {
        let operstate = netdev
            .and_then(|n| self.topo.netdev_settings(n).ok().flatten())
            .and_then(|s| s.operstate);
        let phys_up = p.phys_state.num == NumberedState::PHYS_LINK_UP;
        let fix = match (&p.link_layer, netdev, operstate.as_deref()) {
            (LinkLayer::Ethernet, Some(n), Some("down")) => format!(
                "ip link set {n} up; if it stays down, check cable and switch port (ethtool {n})"
            ),
            (LinkLayer::Ethernet, Some(n), _) => format!(
                "no Ethernet link on {n}: check cable, transceiver and switch port (ethtool \
                 {n}; dmesg | grep -i {n})"
            ),
            (LinkLayer::InfiniBand, _, _) if phys_up => format!(
                "the link is up but no subnet manager has configured the port ({}): start \
                 opensm on a node of this fabric (systemctl start opensm) or enable the \
                 switch's SM; ibstat {} shows the SM LID",
                p.state, d.name
            ),
            _ => format!(
                "no physical link: check cable and switch port (ibstat {}; iblinkinfo)",
                d.name
            ),
        };
        r.push(
            "port",
            Severity::Fail,
            format!("{}/{}", d.name, p.index),
            format!(
                "{}, {} (expected 4: ACTIVE, 5: LinkUp); {summary}{}",
                p.state,
                p.phys_state,
                operstate
                    .map(|o| format!(" (operstate {o})"))
                    .unwrap_or_default()
            ),
            Some(fix),
        );
    }
}
