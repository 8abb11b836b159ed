//! The problems of one interface's finding, each with what to do.

use std::path::Path;

use super::{Finding, Problem, ProblemKind};
use crate::kernel::topology::CharDev;

pub(super) fn problems_of(f: &Finding, uverbs: &[CharDev], dev_dir: &Path) -> Vec<Problem> {
    let mut found = Vec::new();
    if !f.port_active {
        found.push((
            ProblemKind::PortNotActive,
            format!(
                "port {} of {} is {} (physical state {}), not ACTIVE: check the cable and \
                 switch port, and for InfiniBand that a subnet manager runs (`ibstat {}` on \
                 the node)",
                f.port, f.ibdev, f.port_state, f.phys_state, f.ibdev
            ),
        ));
    }
    if f.uverbs.is_none() {
        found.push((ProblemKind::NoUverbs, no_uverbs(f, uverbs, dev_dir)));
    }
    if let Some(why) = &f.roce_qos_unreadable {
        found.push((
            ProblemKind::RoceQosUnreadable,
            format!(
                "its alias holds rdma-ns's RoCE QoS, but {why}: it is set by rdma-ns at ADD \
                 (`ip link show {}` in the pod shows it); if something else changed it, CHECK \
                 of the attachment says so, and a new ADD sets it again",
                f.ifname
            ),
        ));
    }
    if f.is_roce() {
        found.extend(roce_gid_problems(f));
    } else if f.link_layer == "InfiniBand" && f.gid_index.is_none() {
        found.push((
            ProblemKind::NoPortGid,
            format!(
                "{} port {} has no GID 0 (the port GID): the port is not initialised; check \
                 the subnet manager",
                f.ibdev, f.port
            ),
        ));
    }
    found
        .into_iter()
        .map(|(kind, msg)| Problem {
            kind,
            ifname: Some(f.ifname.clone()),
            msg,
        })
        .collect()
}

/// Why `f`'s device has no uverbs node this process can open.
fn no_uverbs(f: &Finding, uverbs: &[CharDev], dev_dir: &Path) -> String {
    match uverbs
        .iter()
        .find(|c| c.ibdev.as_deref() == Some(&*f.ibdev))
    {
        Some(c) => format!(
            "{} has no usable uverbs node: {} is missing or not char device {}:{}. Request \
             the device plugin's RDMA resource for the pod (it mounts the node), or, in \
             exclusive netns mode, attach the ib device to the pod",
            f.ibdev,
            dev_dir.join(&c.name).display(),
            c.major,
            c.minor
        ),
        None => format!(
            "{} has no uverbs device in sysfs: load ib_uverbs on the node",
            f.ibdev
        ),
    }
}

/// A RoCE interface without an address, and each address without a RoCE v2 GID.
fn roce_gid_problems(f: &Finding) -> Vec<(ProblemKind, String)> {
    let mut found = Vec::new();
    if f.gids.is_empty() {
        found.push((
            ProblemKind::NoAddress,
            format!(
                "has no IPv4 or routable IPv6 address, so {} port {} has no RoCE v2 GID for \
                 it: give the network an IPAM",
                f.ibdev, f.port
            ),
        ));
    }
    for g in f
        .gids
        .iter()
        .filter(|g| g.gid_type.as_deref() != Some("RoCE v2"))
    {
        let held = match (&g.index, &g.gid_type) {
            (Some(i), Some(t)) => format!("only a {t} GID (index {i})"),
            _ => "no RoCE v2 GID".to_string(),
        };
        found.push((
            ProblemKind::NoRoceV2Gid,
            format!(
                "{} port {} has {held} for {}: the kernel adds it when the address is set \
                 and the port is up; check that the address is not tentative (IPv6 DAD) and \
                 that {} is the right device",
                f.ibdev, f.port, g.ip, f.ibdev
            ),
        ));
    }
    found
}
