//! CHECK's shared parts: the record and pod netns to check, the pod interface, its prevResult
//! addresses, its GIDs and its ib device.

use crate::attach::gids::{verify_gids, with_view};
use crate::attach::ib_device::RdmaRecord;
use crate::attach::record::Attachment;
use crate::attach::Ctx;
use crate::cni::result::{CniResult, IpConfig};
use crate::cni::Request;
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::rdma_ops::RdmaOps;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::{Link, NetOps, Netns, Ns};

/// CHECK's common start: the attachment's record (108 when there is none) and its pod netns
/// (3 when it cannot be opened: the container is gone).
pub fn check_subject(ctx: &Ctx<'_>, req: &Request) -> Result<(Attachment, Netns)> {
    let att = ctx
        .store
        .load(&req.conf.name, &req.env.container_id, &req.env.ifname)?
        .ok_or_else(|| {
            Error::CheckFailed(format!(
                "no attachment record for container {} interface {} on network {}: ADD never \
                 completed here",
                req.env.container_id, req.env.ifname, req.conf.name
            ))
        })?;
    let path = req.env.netns.as_deref().expect("CHECK requires CNI_NETNS");
    let ns = Netns::open(path).map_err(|e| {
        Error::UnknownContainer(format!(
            "pod netns {} cannot be opened: {e}",
            path.display()
        ))
    })?;
    Ok((att, ns))
}

/// CHECK: the pod interface CNI_IFNAME, looked up through netlink inside the pod netns (never the
/// host's /sys, which shows host devices of the same name); 108 when it is missing.
pub fn check_pod_link(ctx: &Ctx<'_>, req: &Request, ns: &Netns) -> Result<crate::kernel::Link> {
    ctx.kernel
        .link_by_name(crate::kernel::Ns::Pod(ns), &req.env.ifname)
        .kernel_ctx(|| format!("looking up {} in the pod", req.env.ifname))?
        .ok_or_else(|| {
            Error::CheckFailed(format!(
                "{} is missing from the pod netns {}",
                req.env.ifname,
                ns.path().display()
            ))
        })
}

/// CHECK's GID part: every recorded GID still holds its IP at its index.
pub fn check_gids(sys: &SysRoot, ns: &Netns, att: &Attachment) -> Result<()> {
    let Some(pod_interface) = att.pod_interface() else {
        return Ok(());
    };
    match pod_interface.gid_view {
        Some(view) if !pod_interface.gids.is_empty() => {
            let ifname = att.ifname.clone();
            let gids = pod_interface.gids.clone();
            with_view(sys, view, ns, move |s| verify_gids(s, &gids, &ifname))
        }
        _ => Ok(()),
    }
}

/// CHECK's RDMA part: the ib device is visible in the pod netns and its port is ACTIVE.
pub fn check_ib_device(rdma: &dyn RdmaOps, ns: &Netns, rec: &RdmaRecord) -> Result<()> {
    let pod = Ns::Pod(ns);
    let index = rdma
        .device_index(pod, &rec.ibdev)
        .kernel_ctx(|| format!("looking up ib device {} in the pod", rec.ibdev))?
        .ok_or_else(|| {
            Error::CheckFailed(format!(
                "ib device {} is not visible in the pod netns",
                rec.ibdev
            ))
        })?;
    let state = rdma
        .port_state(pod, index, rec.port)
        .kernel_ctx(|| format!("reading port {} of {}", rec.port, rec.ibdev))?;
    if state != Some(4) {
        return Err(Error::CheckFailed(format!(
            "port {} of ib device {} is not ACTIVE (state {:?}; 4 is ACTIVE): check the cable and \
             the subnet manager / switch",
            rec.port, rec.ibdev, state
        )));
    }
    Ok(())
}

/// CHECK's address part: every prevResult IP of this interface is on the pod link.
pub fn check_prev_addresses(
    kernel: &dyn NetOps,
    ns: &Netns,
    link: &Link,
    req: &Request,
) -> Result<()> {
    let Some(prev) = &req.conf.prev_result else {
        return Ok(());
    };
    let have = kernel
        .addresses(Ns::Pod(ns), link.index)
        .kernel_ctx(|| format!("reading addresses of {}", req.env.ifname))?;
    for ip in prev_ips_for(prev, &req.env.ifname) {
        if !have.contains(&ip.address) {
            return Err(Error::CheckFailed(format!(
                "{} in the pod lacks address {} from prevResult (has {})",
                req.env.ifname,
                ip.address,
                have.iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

/// prevResult's IPs that belong to `ifname` (or carry no interface index at all).
fn prev_ips_for<'r>(prev: &'r CniResult, ifname: &str) -> impl Iterator<Item = &'r IpConfig> {
    let index = prev.interfaces.iter().position(|i| i.name == ifname);
    prev.ips
        .iter()
        .filter(move |ip| ip.interface.is_none() || ip.interface == index)
}
