//! NCCL and UCX variables from a [`Discovery`]: only what the findings justify.
//!
//! - `NCCL_IB_DISABLE=0` and the device lists only when at least one interface is usable
//!   (port ACTIVE, uverbs node visible, GID index found); with none, NCCL finds no device
//!   anyway, and a `1` would be a choice the pod did not ask for.
//! - `NCCL_IB_HCA` and `NCCL_SOCKET_IFNAME` start with `=`: NCCL matches their entries as
//!   prefixes otherwise, so `mlx5_1` would also select `mlx5_10` to `mlx5_17`, and `net1`
//!   also `net10`.
//! - `NCCL_IB_GID_INDEX` and `UCX_IB_GID_INDEX` take one index for every device: emitted only
//!   when the usable RoCE interfaces agree on one (0, the port GID, when all are InfiniBand).
//!   When they disagree, neither is emitted and a problem says so.

use super::{Discovery, Finding, Problem, ProblemKind};

/// The variables in the order they are printed.
pub const NAMES: &[&str] = &[
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "UCX_IB_GID_INDEX",
];

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
    let roce: Vec<&&Finding> = usable.iter().filter(|f| f.is_roce()).collect();
    let gid_index = if roce.is_empty() {
        // InfiniBand only: the port GID, index 0.
        Some(0)
    } else {
        let first = roce[0].gid_index;
        if roce.iter().all(|f| f.gid_index == first) {
            first
        } else {
            problems.push(Problem {
                kind: ProblemKind::GidIndexConflict,
                ifname: None,
                msg: format!(
                    "the pod's RoCE interfaces have different GID indexes ({}), but \
                     NCCL_IB_GID_INDEX and UCX_IB_GID_INDEX take one index for all devices: \
                     neither is set. NCCL 2.21 and later select each device's RoCE v2 GID by \
                     itself when NCCL_IB_GID_INDEX is unset; with older NCCL give the job one \
                     interface",
                    roce.iter()
                        .map(|f| format!(
                            "{} on {}: {}",
                            f.ifname,
                            f.hca(),
                            f.gid_index.map_or("none".into(), |i| i.to_string())
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
            None
        }
    };
    out.push(("NCCL_IB_DISABLE", "0".to_string()));
    out.push(("NCCL_IB_HCA", format!("={}", hcas.join(","))));
    if let Some(i) = gid_index {
        out.push(("NCCL_IB_GID_INDEX", i.to_string()));
    }
    out.push(("NCCL_SOCKET_IFNAME", format!("={}", ifnames.join(","))));
    out.push(("UCX_NET_DEVICES", hcas.join(",")));
    if let Some(i) = gid_index {
        out.push(("UCX_IB_GID_INDEX", i.to_string()));
    }
    (out, problems)
}
