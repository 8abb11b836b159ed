//! CHECK: the frame every mode's CHECK runs in, and the parts modes share (the record and pod
//! netns to check, the pod interface, an ib device). The steps' CHECKs are with the steps.

use crate::attach::config::PluginConf;
use crate::attach::ib_device::RdmaRecord;
use crate::attach::record::Attachment;
use crate::attach::steps::CheckSubject;
use crate::attach::Ctx;
use crate::cni::Request;
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::rdma_ops::{RdmaOps, PORT_ACTIVE};
use crate::kernel::rtnetlink::Link;
use crate::kernel::{Netns, Ns};

/// CHECK, the same frame for every mode: the record of the attachment, whose mode must be the
/// conf's (another means the configuration changed under the attachment); the mode's CHECK of
/// what it made; each of its steps' CHECKs, in order; then IPAM CHECK where the mode made the
/// pod interface (IPAM configured it).
pub fn check(ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<()> {
    let (att, ns) = check_subject(ctx, req)?;
    if att.mode() != pc.mode.kind() {
        return Err(Error::State(format!(
            "record {} is of mode {}, but the configuration asks for mode {}: it changed since \
             ADD",
            att.id(),
            att.mode().as_str(),
            pc.mode.kind().as_str()
        )));
    }
    let subject = CheckSubject {
        req,
        att: &att,
        ns: &ns,
    };
    let link = att.mode_state.check(ctx, &subject)?;
    for step in att.mode().steps() {
        step.check(ctx, &subject, link.as_ref())?;
    }
    match att.pod_interface() {
        Some(_) => ctx.ipam.check(req),
        None => Ok(()),
    }
}

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
pub fn check_pod_link(ctx: &Ctx<'_>, req: &Request, ns: &Netns) -> Result<Link> {
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
    if state != Some(PORT_ACTIVE) {
        return Err(Error::CheckFailed(format!(
            "port {} of ib device {} is not ACTIVE (state {:?}; 4 is ACTIVE): check the cable and \
             the subnet manager / switch",
            rec.port, rec.ibdev, state
        )));
    }
    Ok(())
}
