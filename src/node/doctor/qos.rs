//! `roce-qos`: for each network with `roceQos`, the node's lossless setup behind it, on the PF
//! of every NIC the network uses (mlx5 answers DCB on the PF, not on VFs or SFs): PFC on for the
//! network's priority and the DSCP mapped to it in the APP table (trust DSCP), through DCB
//! netlink; global pause off; with MLNX_OFED's sysfs, `qos/trust`, the ECN enables of the
//! priority and a global `tc/*/traffic_class` that would override the pods' traffic class. For
//! a network on a device the node shares with its pods, the device's RDMA CM default against
//! the network's. These are the node's, not a pod's: the doctor says what to run, and changes
//! nothing.

use super::{Report, Severity};
use crate::attach::modes::Mode;
use crate::attach::record::Attachment;
use crate::kernel::dcbnl::DcbIeee;
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rdma_cm::RdmaCmFs;
use crate::kernel::topology::{BusDevice, LinkLayer, RdmaSysfs};
use crate::node::confs::RdmaNetwork;
use crate::node::{NetView, Node};
use crate::qos::RoceQos;

const CHECK: &str = "roce-qos";

pub(super) struct QosCheck<'a> {
    pub(super) node: &'a Node,
    pub(super) topo: &'a RdmaSysfs<'a>,
    pub(super) net: &'a dyn NetView,
    pub(super) networks: &'a [RdmaNetwork],
    /// The attachment records: which PCI functions a network's pods got from a device plugin.
    pub(super) records: &'a [Attachment],
    /// The node's RDMA netns mode, when known.
    pub(super) mode: Option<NetnsMode>,
}

/// One NIC port behind a network, and the network's QoS.
struct Target<'a> {
    network: &'a RdmaNetwork,
    qos: RoceQos,
    /// The netdev DCB is asked on: the PF's, or the network's own when it has no PCI function.
    netdev: String,
    /// The PCI function of `netdev`, when it has one.
    pf: Option<String>,
}

impl QosCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        for n in self.networks {
            let Some(qos) = n.roce_qos else {
                continue;
            };
            for (netdev, pf) in self.pfs_of(n) {
                let t = Target {
                    network: n,
                    qos,
                    netdev,
                    pf,
                };
                self.lossless(&t, r);
                self.ofed(&t, r);
            }
            self.shared_defaults(n, &qos, r);
        }
    }

    /// The netdevs (PF's, or the network's own virtual one) behind a network: what its conf
    /// names, and the PCI functions its pods' records hold.
    fn pfs_of(&self, n: &RdmaNetwork) -> Vec<(String, Option<String>)> {
        let mut netdevs: Vec<String> = Vec::new();
        if let Some(name) = n.netdev() {
            netdevs.push(self.net.resolve_name(name).unwrap_or_else(|| name.into()));
        }
        if let Some(ibdev) = &n.rdma_device {
            let found = self.topo.netdevs_of_ib_device(ibdev).unwrap_or_default();
            netdevs.extend(found.into_iter().map(|(_, nd)| nd));
        }
        let mut functions: Vec<String> = n.device_id.iter().cloned().collect();
        let recorded = self.records.iter().filter(|a| a.network == n.name);
        functions.extend(recorded.filter_map(|a| a.pci_function().map(str::to_string)));
        let mut out: Vec<(String, Option<String>)> = Vec::new();
        let mut add = |found: Option<(String, Option<String>)>| {
            if let Some(t) = found.filter(|t| !out.contains(t)) {
                out.push(t);
            }
        };
        for nd in netdevs {
            add(self.pf_of_netdev(&nd));
        }
        for bdf in functions {
            add(self.pf_of_function(&bdf));
        }
        out
    }

    fn pf_of_netdev(&self, netdev: &str) -> Option<(String, Option<String>)> {
        let dev = self.topo.netdev(netdev).ok().flatten()?;
        match dev.device {
            Some(BusDevice::Pci { bdf }) => self.pf_of_function(&bdf),
            Some(BusDevice::Auxiliary {
                pci_parent: Some(bdf),
                ..
            }) => self.pf_of_function(&bdf),
            _ => Some((netdev.to_string(), None)),
        }
    }

    /// The PF of a PCI function (itself, or its `physfn`) and the PF's netdev.
    fn pf_of_function(&self, bdf: &str) -> Option<(String, Option<String>)> {
        let f = self.topo.pci_function(bdf).ok().flatten()?;
        let pf = match &f.physfn {
            Some(pf) => self.topo.pci_function(pf).ok().flatten()?,
            None => f,
        };
        let netdev = pf.netdevs.first()?.clone();
        Some((netdev, Some(pf.bdf)))
    }

    fn object(t: &Target<'_>) -> String {
        format!("{} (network {})", t.netdev, t.network.name)
    }

    /// PFC, the APP table and global pause, as DCB netlink and ethtool report them.
    fn lossless(&self, t: &Target<'_>, r: &mut Report) {
        let object = Self::object(t);
        let dcb = match self.net.dcb(&t.netdev) {
            Ok(Some(dcb)) => dcb,
            Ok(None) => {
                r.push(
                    CHECK,
                    Severity::NotApplicable,
                    object,
                    format!(
                        "{} has no DCB (its driver answers EOPNOTSUPP: a virtual NIC such as a \
                         veth or a Soft-RoCE device's netdev), so PFC and trust do not apply: \
                         nothing here makes {}'s traffic lossless",
                        t.netdev, t.network.name
                    ),
                    None,
                );
                return;
            }
            Err(e) => {
                let fix = format!(
                    "dcb pfc show dev {}; dcb app show dev {}",
                    t.netdev, t.netdev
                );
                r.push(CHECK, Severity::Warn, object, e, Some(fix));
                return;
            }
        };
        pfc(t, &dcb, r);
        dscp_map(t, &dcb, r);
        self.pause(t, r);
    }

    fn pause(&self, t: &Target<'_>, r: &mut Report) {
        let nd = &t.netdev;
        match self.net.pause(nd) {
            Ok(Some(p)) if p.rx || p.tx => r.push(
                CHECK,
                Severity::Fail,
                Self::object(t),
                format!(
                    "global pause is on (rx {}, tx {}): it stops every priority, and the port \
                     runs it instead of PFC",
                    on_off(p.rx),
                    on_off(p.tx)
                ),
                Some(format!("ethtool -A {nd} rx off tx off")),
            ),
            Ok(Some(_)) => r.push(
                CHECK,
                Severity::Ok,
                Self::object(t),
                "global pause off",
                None,
            ),
            Ok(None) => {}
            Err(e) => r.push(
                CHECK,
                Severity::Warn,
                Self::object(t),
                e,
                Some(format!("ethtool -a {nd}")),
            ),
        }
    }

    /// MLNX_OFED's sysfs, where it is: trust, ECN per priority, a global traffic class.
    fn ofed(&self, t: &Target<'_>, r: &mut Report) {
        let sys = &self.node.sys;
        let nd = &t.netdev;
        let prio = t.qos.priority;
        if let Ok(trust) = sys.read_attr(format!("class/net/{nd}/qos/trust")) {
            let (severity, fix) = match trust.contains("dscp") {
                true => (Severity::Ok, None),
                false => (
                    Severity::Fail,
                    Some(format!("mlnx_qos -i {nd} --trust dscp")),
                ),
            };
            let finding = format!("MLNX_OFED qos/trust: {trust}");
            r.push(CHECK, severity, Self::object(t), finding, fix);
        }
        for role in ["roce_np", "roce_rp"] {
            let path = format!("class/net/{nd}/ecn/{role}/enable/{prio}");
            let Ok(enabled) = sys.read_attr(&path) else {
                continue;
            };
            let (severity, fix) = match enabled.trim() {
                "1" => (Severity::Ok, None),
                _ => (Severity::Warn, Some(format!("echo 1 > /sys/{path}"))),
            };
            let finding = format!(
                "ECN (DCQCN) {role} for priority {prio}: {} (off, congestion is left to PFC)",
                enabled.trim()
            );
            r.push(CHECK, severity, Self::object(t), finding, fix);
        }
        for ibdev in self.ib_devices_of_pf(t) {
            self.global_tclass(t, &ibdev, r);
        }
    }

    /// The ib devices of the PF and of its VFs: MLNX_OFED's traffic class is per ib device.
    fn ib_devices_of_pf(&self, t: &Target<'_>) -> Vec<String> {
        let Some(pf) =
            t.pf.as_deref()
                .and_then(|b| self.topo.pci_function(b).ok().flatten())
        else {
            return Vec::new();
        };
        let mut devices = pf.ib_devices.clone();
        for (_, vf) in &pf.virtfns {
            if let Ok(Some(f)) = self.topo.pci_function(vf) {
                devices.extend(f.ib_devices);
            }
        }
        devices
    }

    fn global_tclass(&self, t: &Target<'_>, ibdev: &str, r: &mut Report) {
        let sys = &self.node.sys;
        let tc = t.qos.traffic_class();
        for port in sys
            .list_dir(format!("class/infiniband/{ibdev}/tc"))
            .unwrap_or_default()
        {
            let path = format!("class/infiniband/{ibdev}/tc/{port}/traffic_class");
            let Ok(text) = sys.read_attr(&path) else {
                continue;
            };
            let Some(global) = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("Global tclass="))
                .and_then(|v| v.trim().parse::<i64>().ok())
            else {
                continue;
            };
            let object = format!("{ibdev}/{port} (network {})", t.network.name);
            if global == i64::from(tc) {
                let finding = format!("MLNX_OFED global traffic class {global}: the network's");
                r.push(CHECK, Severity::Ok, object, finding, None);
                continue;
            }
            r.push(
                CHECK,
                Severity::Fail,
                object,
                format!(
                    "MLNX_OFED forces traffic class {global} on every QP of {ibdev}, the \
                     pods' included, over network {}'s {tc}",
                    t.network.name
                ),
                Some(format!("echo {tc} > /sys/{path}")),
            );
        }
    }

    /// A device the node shares with the network's pods keeps the node's RDMA CM defaults:
    /// they should be the network's, for RDMA CM connections that set no traffic class.
    fn shared_defaults(&self, n: &RdmaNetwork, qos: &RoceQos, r: &mut Report) {
        let shared = match n.mode {
            Mode::Macvlan => !n.soft_roce,
            Mode::Move => {
                !n.soft_roce
                    && self.mode == Some(NetnsMode::Shared)
                    && n.rdma != crate::attach::ib_device::RdmaConf::Off
            }
            _ => false,
        };
        let Some(netdev) = n.netdev().filter(|_| shared) else {
            return;
        };
        let netdev = self
            .net
            .resolve_name(netdev)
            .unwrap_or_else(|| netdev.into());
        let ports = self
            .topo
            .ib_ports_of_own_device(&netdev)
            .unwrap_or_default();
        let cm = RdmaCmFs::new(&self.node.sys);
        for p in ports {
            let roce = self.topo.device(&p.ibdev).ok().flatten().and_then(|d| {
                d.port(p.port)
                    .map(|port| port.link_layer == LinkLayer::Ethernet)
            });
            if roce == Some(true) {
                shared_default(&cm, n, qos, &p.ibdev, p.port, r);
            }
        }
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn pfc(t: &Target<'_>, dcb: &DcbIeee, r: &mut Report) {
    let (nd, prio) = (&t.netdev, t.qos.priority);
    let object = QosCheck::object(t);
    if dcb.pfc_enabled(prio) {
        r.push(
            CHECK,
            Severity::Ok,
            object,
            format!("PFC on for priority {prio}"),
            None,
        );
        return;
    }
    let en = dcb.pfc.map_or(0, |(_, en)| en);
    let on: Vec<String> = (0..8)
        .filter(|p| en & (1 << p) != 0)
        .map(|p| p.to_string())
        .collect();
    let vector: Vec<&str> = (0..8)
        .map(|p| {
            if (en | 1 << prio) & (1 << p) != 0 {
                "1"
            } else {
                "0"
            }
        })
        .collect();
    r.push(
        CHECK,
        Severity::Fail,
        object,
        format!(
            "PFC is off for priority {prio}, network {}'s (on: {}): its RoCE traffic is dropped \
             under congestion instead of paused",
            t.network.name,
            if on.is_empty() {
                "none".into()
            } else {
                on.join(", ")
            }
        ),
        Some(format!(
            "dcb pfc set dev {nd} prio-pfc {prio}:on (MLNX_OFED: mlnx_qos -i {nd} --pfc {})",
            vector.join(",")
        )),
    );
}

fn dscp_map(t: &Target<'_>, dcb: &DcbIeee, r: &mut Report) {
    let (nd, prio, dscp) = (&t.netdev, t.qos.priority, t.qos.dscp);
    let object = QosCheck::object(t);
    if !dcb.trusts_dscp() {
        r.push(
            CHECK,
            Severity::Fail,
            object,
            format!(
                "the port trusts PCP (its APP table has no DSCP entry): DSCP {dscp} of network \
                 {} is not mapped to priority {prio}, and untagged RoCE lands on priority 0",
                t.network.name
            ),
            Some(format!(
                "mlnx_qos -i {nd} --trust dscp (every DSCP at its default class, DSCP >> 3), \
                 or dcb app add dev {nd} dscp-prio {dscp}:{prio}"
            )),
        );
        return;
    }
    match dcb.dscp_priorities(dscp).as_slice() {
        [p] if *p == prio => r.push(
            CHECK,
            Severity::Ok,
            object,
            format!("trust DSCP: DSCP {dscp} -> priority {prio}"),
            None,
        ),
        found => r.push(
            CHECK,
            Severity::Fail,
            object,
            format!(
                "the APP table maps DSCP {dscp} to priority {}, not network {}'s {prio}",
                match found {
                    [] => "none (the port's default, 0)".to_string(),
                    some => some
                        .iter()
                        .map(u8::to_string)
                        .collect::<Vec<_>>()
                        .join(" and "),
                },
                t.network.name
            ),
            Some(format!(
                "dcb app replace dev {nd} dscp-prio {dscp}:{prio} (MLNX_OFED: mlnx_qos -i {nd} \
                 --dscp2prio set,{dscp},{prio})"
            )),
        ),
    }
}

fn shared_default(
    cm: &RdmaCmFs,
    n: &RdmaNetwork,
    qos: &RoceQos,
    ibdev: &str,
    port: u32,
    r: &mut Report,
) {
    let tc = qos.traffic_class();
    let object = format!("{ibdev}/{port} (network {})", n.name);
    let fix = format!(
        "mkdir -p /sys/kernel/config/rdma_cm/{ibdev} && echo {tc} > \
         /sys/kernel/config/rdma_cm/{ibdev}/ports/{port}/default_roce_tos (rdma-core: \
         cma_roce_tos -d {ibdev} -p {port} -t {tc})"
    );
    let shared = format!(
        "{ibdev} is shared by the node and network {}'s pods, so its RDMA CM defaults are the \
         node's",
        n.name
    );
    let missing = match cm.availability() {
        crate::kernel::rdma_cm::CmFs::Ready => None,
        crate::kernel::rdma_cm::CmFs::NoConfigfs => Some("configfs is not mounted"),
        crate::kernel::rdma_cm::CmFs::NoRdmaCm => Some("configfs has no rdma_cm (module rdma_cm)"),
    };
    if let Some(missing) = missing {
        let finding = format!(
            "{shared}: {missing}, so its RDMA CM default ToS cannot be read; a device starts at \
             0, not the network's {tc}"
        );
        r.push(CHECK, Severity::Warn, object, finding, Some(fix));
        return;
    }
    let (severity, finding, fix) = match cm.group_exists(ibdev) {
        Ok(true) => match cm.default_tos(ibdev, port) {
            Ok(tos) if tos == tc => (
                Severity::Ok,
                format!("{shared}: default ToS {tos}, the network's"),
                None,
            ),
            Ok(tos) => (
                Severity::Warn,
                format!(
                    "{shared}: default ToS {tos}, not the network's {tc}: RDMA CM connections \
                     that set none (rping, perftest -R) send {tos}; NCCL and UCX take {tc} \
                     from rdma-ns env"
                ),
                Some(fix),
            ),
            Err(e) => (Severity::Warn, format!("{shared}: {e}"), Some(fix)),
        },
        Ok(false) => (
            Severity::Warn,
            format!(
                "{shared}: it has no rdma_cm configfs group, so its default ToS cannot be read \
                 without making one (the doctor makes none); a device starts at 0, not the \
                 network's {tc}"
            ),
            Some(fix),
        ),
        Err(e) => (Severity::Warn, format!("{shared}: {e}"), Some(fix)),
    };
    r.push(CHECK, severity, object, finding, fix);
}
