//! NCCL and UCX variables from a [`Discovery`]: only what the findings justify.
//!
//! - `NCCL_IB_DISABLE=0` and the device lists only when at least one interface is usable
//!   (port ACTIVE, uverbs node visible, GID index found); with none, NCCL finds no device
//!   anyway, and a `1` would be a choice the pod did not ask for.
//! - `NCCL_IB_HCA` and `NCCL_SOCKET_IFNAME` start with `=`: NCCL matches their entries as
//!   prefixes otherwise, so `mlx5_1` would also select `mlx5_10` to `mlx5_17`, and `net1`
//!   also `net10`.
//! - `NCCL_IB_GID_INDEX` and `UCX_IB_GID_INDEX` take one index for every device. When the
//!   usable RoCE interfaces (the rails) agree on one, both name it (0, the port GID, when all
//!   are InfiniBand). When they differ, neither is set: NCCL (2.21 and later) and UCX then
//!   pick each device's GID themselves, the first RoCE v2 GID of the address family in the
//!   port's table, and `NCCL_IB_ADDR_FAMILY` and `NCCL_IB_ROCE_VERSION_NUM=2` make NCCL look
//!   for the pod's family and version. That first GID is the pod's when the table holds
//!   only the pod's netdevs (a VF or PF moved into the pod); in shared netns mode the node's
//!   and other pods' GIDs share the table, and a rail where NCCL or UCX would pick one of
//!   theirs is a problem, as are rails of different families.
//! - `UCX_UD_ETH_DGID_CHECK=n` when a rail is a Soft-RoCE device on the pod's interface
//!   ([`Via::SoftRdmaParent`]) on an IPv4 GID. UCX's UD transport, which its RC transport uses
//!   for wire-up, checks each received packet's destination GID where a RoCE NIC's completion
//!   tells it the network header type; rxe's completions do not, so UCX reads an IPv4 packet's
//!   header area as an IPv6 GRH and drops every packet, and UCX on the index env names stops
//!   with "UD endpoint ... unhandled timeout error" (UCX 1.13 on rxe, Linux 7.3).
//! - The RoCE QoS of the rails' network (rdma-ns puts it in each pod interface's alias, see
//!   src/qos.rs): `NCCL_IB_TC` and `UCX_IB_TRAFFIC_CLASS` the traffic class byte, `NCCL_IB_SL`
//!   and `UCX_IB_SL` the priority, `NCCL_IB_FIFO_TC` the FIFO DSCP's byte when the network
//!   has one. NCCL and UCX take one value for every device, so the rails must agree: rails
//!   with different QoS, or some with and some without, are a problem and none is set (a
//!   class the switches map to a lossless priority on one rail's fabric may be lossy or
//!   policed on another's; which to prefer is the network owner's call, not env's).

use std::net::IpAddr;

use serde::Serialize;

use super::{Discovery, Finding, Problem, ProblemKind, Via};
use crate::qos::RoceQos;

/// The variables in the order they are printed.
pub const NAMES: &[&str] = &[
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_TC",
    "NCCL_IB_SL",
    "NCCL_IB_FIFO_TC",
    "NCCL_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "UCX_IB_GID_INDEX",
    "UCX_IB_TRAFFIC_CLASS",
    "UCX_IB_SL",
    "UCX_UD_ETH_DGID_CHECK",
];

/// How the GID of each device is chosen.
enum GidChoice {
    /// Every rail uses this index.
    One(u32),
    /// The indexes differ: NCCL and UCX choose per device, NCCL in this family.
    PerDevice(Option<&'static str>),
}

/// The variables (in [`NAMES`] order) and the problems found while choosing them.
pub fn variables(d: &Discovery) -> (Vec<(&'static str, String)>, Vec<Problem>) {
    let usable: Vec<&Finding> = d.interfaces.iter().filter(|f| f.usable()).collect();
    let mut problems = Vec::new();
    let mut out = Vec::new();
    if usable.is_empty() {
        return (out, problems);
    }
    let mut hcas: Vec<String> = Vec::new();
    for f in &usable {
        let h = f.hca();
        if !hcas.contains(&h) {
            hcas.push(h);
        }
    }
    let ifnames: Vec<&str> = usable.iter().map(|f| f.ifname.as_str()).collect();
    let roce: Vec<&Finding> = usable.iter().copied().filter(|f| f.is_roce()).collect();
    let choice = gid_choice(&roce, &mut problems);
    let index = match choice {
        GidChoice::One(i) => Some(i.to_string()),
        GidChoice::PerDevice(_) => None,
    };
    out.push(("NCCL_IB_DISABLE", "0".to_string()));
    out.push(("NCCL_IB_HCA", format!("={}", hcas.join(","))));
    if let Some(i) = &index {
        out.push(("NCCL_IB_GID_INDEX", i.clone()));
    }
    if let GidChoice::PerDevice(family) = choice {
        if let Some(family) = family {
            out.push(("NCCL_IB_ADDR_FAMILY", family.to_string()));
        }
        out.push(("NCCL_IB_ROCE_VERSION_NUM", "2".to_string()));
    }
    let qos = qos_choice(&usable, &mut problems);
    if let Some(q) = qos {
        out.push(("NCCL_IB_TC", q.traffic_class().to_string()));
        out.push(("NCCL_IB_SL", q.priority.to_string()));
        if let Some(fifo) = q.fifo_traffic_class() {
            out.push(("NCCL_IB_FIFO_TC", fifo.to_string()));
        }
    }
    out.push(("NCCL_SOCKET_IFNAME", format!("={}", ifnames.join(","))));
    out.push(("UCX_NET_DEVICES", hcas.join(",")));
    if let Some(i) = index {
        out.push(("UCX_IB_GID_INDEX", i));
    }
    if let Some(q) = qos {
        out.push(("UCX_IB_TRAFFIC_CLASS", q.traffic_class().to_string()));
        out.push(("UCX_IB_SL", q.priority.to_string()));
    }
    if roce.iter().any(|f| is_soft_roce_on_ipv4(f)) {
        out.push(("UCX_UD_ETH_DGID_CHECK", "n".to_string()));
    }
    (out, problems)
}

/// The RoCE QoS every rail agrees on (None when none has one), or a problem naming each
/// rail's and none.
fn qos_choice(usable: &[&Finding], problems: &mut Vec<Problem>) -> Option<RoceQos> {
    let first = usable.first()?.roce_qos;
    if usable.iter().all(|f| f.roce_qos == first) {
        return first;
    }
    let each = usable
        .iter()
        .map(|f| match &f.roce_qos {
            Some(q) => format!("{} ({}): {q}", f.ifname, f.hca()),
            None => format!("{} ({}): none", f.ifname, f.hca()),
        })
        .collect::<Vec<_>>()
        .join("; ");
    problems.push(Problem {
        kind: ProblemKind::RoceQosConflict,
        ifname: None,
        msg: format!(
            "the rails' networks disagree on roceQos ({each}), and NCCL and UCX take one \
             traffic class and one SL for every device, so none is set: give the rails' \
             networks the same roceQos (or none), or run a job on rails of one class"
        ),
    });
    None
}

/// A Soft-RoCE device bound to the pod's interface, on an IPv4 GID: where UCX's UD
/// destination-GID check drops every packet (see the module's doc).
fn is_soft_roce_on_ipv4(f: &Finding) -> bool {
    f.via == Via::SoftRdmaParent && matches!(f.ip, Some(IpAddr::V4(_)))
}

/// One index when the RoCE rails agree (0 when there are none: InfiniBand only), else the
/// per-device choice, with a problem for each rail where NCCL's or UCX's own pick would not
/// be the pod's GID and for rails of different address families.
fn gid_choice(roce: &[&Finding], problems: &mut Vec<Problem>) -> GidChoice {
    let Some(first) = roce.first() else {
        return GidChoice::One(0);
    };
    let index = first.gid_index.expect("usable");
    if roce.iter().all(|f| f.gid_index == Some(index)) {
        return GidChoice::One(index);
    }
    let indexes = roce
        .iter()
        .map(|f| {
            format!(
                "{} on {}: {}",
                f.ifname,
                f.hca(),
                f.gid_index.expect("usable")
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let families: Vec<&'static str> = roce.iter().map(|f| family_of(f.ip)).collect();
    let family = families[0];
    if families.iter().any(|f| *f != family) {
        problems.push(Problem {
            kind: ProblemKind::GidFamilyConflict,
            ifname: None,
            msg: format!(
                "the rails' GID indexes differ ({indexes}), so NCCL picks each device's GID \
                 itself, but in one address family (NCCL_IB_ADDR_FAMILY), and the rails' \
                 addresses are of different families ({}): give every rail an address of \
                 one family",
                roce.iter()
                    .zip(&families)
                    .map(|(f, fam)| format!("{} {fam}", f.ifname))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
        return GidChoice::PerDevice(None);
    }
    for f in roce {
        problems.extend(auto_pick_problem(f, &indexes, family));
    }
    GidChoice::PerDevice(Some(family))
}

fn family_of(ip: Option<IpAddr>) -> &'static str {
    match ip {
        Some(IpAddr::V6(_)) => "AF_INET6",
        _ => "AF_INET",
    }
}

/// A rail where NCCL's or UCX's own choice (the first RoCE v2 GID of the family in the
/// port's table) is not the pod's GID.
fn auto_pick_problem(f: &Finding, indexes: &str, family: &str) -> Option<Problem> {
    let ours = f.gid_index?;
    let picks = [
        ("NCCL", f.auto_gid_index.nccl),
        ("UCX", f.auto_gid_index.ucx),
    ];
    let wrong: Vec<String> = picks
        .iter()
        .filter(|(_, pick)| *pick != Some(ours))
        .map(|(who, pick)| match pick {
            Some(i) => format!("{who} index {i}"),
            None => format!("{who} no RoCE v2 GID"),
        })
        .collect();
    if wrong.is_empty() {
        return None;
    }
    Some(Problem {
        kind: ProblemKind::AutoGidNotThePods,
        ifname: Some(f.ifname.clone()),
        msg: format!(
            "the rails' GID indexes differ ({indexes}), so NCCL_IB_GID_INDEX and \
             UCX_IB_GID_INDEX stay unset and NCCL and UCX pick each device's GID themselves \
             (NCCL the first RoCE v2 {family} GID of the port's table that is not link-local, \
             UCX the first RoCE v2 IPv4 GID, else the first IPv6 one, link-local included). \
             On {} that is {}, not the pod's index {ours}: the node's or another pod's GIDs, \
             or a link-local one, come first in its table. Remove the node's addresses from \
             the parent netdev so that the pod's GID comes first, give the rail a device of \
             its own (move mode), or give the job rails whose indexes agree",
            f.hca(),
            wrong.join(" and ")
        ),
    })
}

/// One rail as a job pairs it with a GPU: what `--format json` lists under `rails`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rail {
    pub netdev: String,
    pub ip: Option<IpAddr>,
    pub ibdev: String,
    pub port: u32,
    pub gid_index: u32,
    pub numa_node: Option<u32>,
    /// None for a virtual device (rxe).
    pub pci_address: Option<String>,
    /// The network's RoCE QoS, from the interface's alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roce_qos: Option<RoceQos>,
}

/// The usable interfaces, in the order of `NCCL_IB_HCA` and `NCCL_SOCKET_IFNAME`.
pub fn rails(d: &Discovery) -> Vec<Rail> {
    d.interfaces
        .iter()
        .filter(|f| f.usable())
        .map(|f| Rail {
            netdev: f.ifname.clone(),
            ip: f.ip,
            ibdev: f.ibdev.clone(),
            port: f.port,
            gid_index: f.gid_index.expect("usable"),
            numa_node: f.numa_node,
            pci_address: f.pci_address.clone(),
            roce_qos: f.roce_qos,
        })
        .collect()
}
