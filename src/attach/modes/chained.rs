//! Mode `rdma`: chained after sriov-cni, ib-sriov-cni or host-device (parity with rdma-cni).
//!
//! The previous plugin already put the netdev into the pod; this mode moves the matching ib
//! device after it (exclusive netns mode) and passes prevResult through. The ib device is found
//! from the device plugin's `deviceID` (a PCI function), or from the pod interface's parent
//! device (IFLA_PARENT_DEV_NAME, read through netlink inside the pod: the host's /sys cannot see
//! the pod's netdevs).

use std::path::Path;

use crate::attach::config::PluginConf;
use crate::attach::ib_device::{move_error, RdmaRecord};
use crate::attach::plan::Plan;
use crate::attach::record::{Attachment, ChainedState, ModeState, Phase};
use crate::attach::select::{normalize_pci, Selector};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::CniResult;
use crate::cni::Request;
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::topology::{IbParent, LinkLayer, RdmaSysfs};
use crate::kernel::{Netns, Ns};

/// The PCI function whose ib device goes with the pod interface: the device plugin's PCI
/// deviceID, else the pod interface's parent device. An ID that selects nothing (the RDMA shared
/// device plugin's index) is logged and the interface decides.
fn function_of(ctx: &Ctx<'_>, req: &Request, netns: &Netns) -> Result<String> {
    if let Some(id) = crate::attach::select::device_plugin_id(&req.conf)? {
        match id.selector() {
            Some(Selector::Pci { address, .. }) => return Ok(address),
            Some(other) => {
                return Err(Error::UnsupportedField {
                    field: id.field.into(),
                    value: id.value.clone(),
                    msg: format!(
                        "chained mode finds ib devices of PCI functions; {} is not one",
                        other.describe()
                    ),
                })
            }
            None => crate::log_info!(
                "{}: {}; the ib device is found from {} in the pod instead",
                req.env.ifname,
                id.not_a_selector(),
                req.env.ifname
            ),
        }
    }
    let link = ctx
        .kernel
        .link_by_name(Ns::Pod(netns), &req.env.ifname)
        .kernel_ctx(|| format!("looking up {} in the pod", req.env.ifname))?
        .ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "{} is not in the pod netns {}: the previous plugin in the chain should have put \
                 it there",
                req.env.ifname,
                netns.path().display()
            ))
        })?;
    link.pci_address().and_then(normalize_pci).ok_or_else(|| {
        Error::DeviceNotFound(format!(
            "{} in the pod has no PCI parent device: pass deviceID (Multus does when a device \
                 plugin allocated the VF)",
            req.env.ifname
        ))
    })
}

pub fn add(ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult> {
    let prev = req.conf.prev_result.clone().ok_or_else(|| {
        Error::config(
            "prevResult",
            "mode \"rdma\" is chained: put it after sriov, ib-sriov or host-device in a conflist",
        )
    })?;
    let netns = open_netns(req.env.netns.as_deref())?;
    require_exclusive_netns_mode(ctx)?;
    let bdf = function_of(ctx, req, &netns)?;
    let rec = ib_device_of_function(ctx, &bdf)?;
    let key = format!("ib-{}", rec.ibdev);
    let _lock = ctx.store.lock_device(&key, pc.lock_timeout)?;
    let iface = prev.interfaces.iter().find(|i| i.name == req.env.ifname);
    let state = ChainedState {
        function: bdf,
        rdma: rec.clone(),
        prev_mac: iface.and_then(|i| i.mac.clone()).filter(|m| !m.is_empty()),
        prev_mtu: iface.and_then(|i| i.mtu).filter(|&m| m != 0),
    };
    let mut att = Attachment::adding(req, &netns, key, ModeState::Chained(state));
    let mut plan = Plan::new(ctx.fault.clone());
    match steps(ctx, req, &netns, &mut att, rec, &mut plan) {
        Ok(()) => {
            plan.commit();
            Ok(prev)
        }
        Err(e) => Err(plan.rollback(e)),
    }
}

/// Moving an ib device between namespaces needs the RDMA subsystem in exclusive netns mode.
fn require_exclusive_netns_mode(ctx: &Ctx<'_>) -> Result<()> {
    match ctx
        .rdma
        .netns_mode()
        .kernel_ctx(|| "reading the RDMA subsystem's netns mode")?
    {
        Some(NetnsMode::Exclusive) => Ok(()),
        other => Err(Error::RdmaUnavailable(format!(
            "mode \"rdma\" moves the ib device into the pod, which needs the RDMA subsystem in \
             exclusive netns mode, but it is {}: set `options ib_core netns_mode=0` in \
             /etc/modprobe.d and reboot",
            match other {
                Some(_) => "shared",
                None => "absent (no RDMA netlink: ib_core not loaded)",
            }
        ))),
    }
}

/// The one ib device of PCI function `bdf`, in the host netns, as it will be recorded.
fn ib_device_of_function(ctx: &Ctx<'_>, bdf: &str) -> Result<RdmaRecord> {
    let topo = RdmaSysfs::new(ctx.sys);
    let function = topo
        .pci_function(bdf)
        .map_err(|e| Error::io(format!("reading PCI function {bdf} in sysfs"), e))?
        .ok_or_else(|| {
            Error::DeviceNotFound(format!("PCI function {bdf} does not exist in sysfs"))
        })?;
    let ibdev = match function.ib_devices.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(Error::DeviceNotFound(format!(
                "PCI function {bdf} has no ib device in the host netns: its RDMA driver is not \
                 loaded, or another pod holds it (exclusive mode shows a device only in its own netns)"
            )))
        }
        several => {
            return Err(Error::DeviceAmbiguous(format!(
                "PCI function {bdf} carries several ib devices ({})",
                several.join(", ")
            )))
        }
    };
    let dev = topo
        .device(&ibdev)
        .map_err(|e| Error::io(format!("reading ib device {ibdev}"), e))?
        .ok_or_else(|| Error::DeviceNotFound(format!("ib device {ibdev} vanished from sysfs")))?;
    let index = ctx
        .rdma
        .device_index(Ns::Host, &ibdev)
        .kernel_ctx(|| format!("looking up ib device {ibdev}"))?
        .ok_or_else(|| Error::DeviceInUse(format!("ib device {ibdev} is not in the host netns")))?;
    Ok(RdmaRecord {
        ibdev,
        index,
        port: 1,
        infiniband: dev
            .ports
            .first()
            .is_some_and(|p| p.link_layer == LinkLayer::InfiniBand),
        driver: match &dev.parent {
            IbParent::Netdev(_) => "rdma_rxe (software RoCE)".into(),
            _ => function
                .driver
                .clone()
                .unwrap_or_else(|| "unknown driver".into()),
        },
    })
}

/// Intent record, the ib device `rec` (the one `att` records) into the pod, permissions,
/// device-info, final record.
fn steps<'a>(
    ctx: &'a Ctx<'a>,
    req: &Request,
    netns: &'a Netns,
    att: &mut Attachment,
    rec: RdmaRecord,
    plan: &mut Plan<'a>,
) -> Result<()> {
    crate::attach::lifecycle::write_intent(ctx, att, plan)?;
    let pod = Ns::Pod(netns);
    ctx.rdma
        .move_device(Ns::Host, rec.index, pod)
        .map_err(|e| {
            move_error(
                &rec,
                &format!("into the pod netns {}", netns.path().display()),
                e,
            )
        })?;
    let undo_rec = rec.clone();
    plan.on_undo("ib-move", move || {
        ctx.rdma
            .move_device(pod, undo_rec.index, Ns::Host)
            .map_err(|e| move_error(&undo_rec, "back to the host netns", e))
    });
    plan.checkpoint("ib-move")?;
    crate::attach::permissions::apply_permissions(
        ctx,
        req,
        att,
        std::slice::from_ref(&rec.ibdev),
        plan,
    )?;
    crate::attach::device_info::write_device_info(ctx, req, att, &[], plan)?;
    att.phase = Phase::Ready;
    ctx.store.save(att)?;
    plan.checkpoint("state")
}

/// Mode `rdma`. Its DEL (the shared frame around `release`) moves the ib device back to the
/// host from a socket inside the pod netns; with the pod netns gone the kernel has already
/// returned it.
pub struct Chained;

impl super::ModeDriver for Chained {
    fn add(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult> {
        add(ctx, req, pc)
    }

    fn check(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<()> {
        check(ctx, req, pc)
    }

    fn release(&self, ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()> {
        release(ctx, netns, att)
    }

    fn locks_device(&self) -> bool {
        true
    }
}

/// Moves the attachment's ib device back to the host from inside its pod netns (`netns`, else
/// the recorded one while it is still that netns); a netns that is gone has already given it
/// back (the kernel returns ib devices to init_net).
pub fn release(ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()> {
    let Some(ChainedState { rdma: rec, .. }) = att.chained() else {
        return Err(not_chained(att));
    };
    let Some(ns) = crate::attach::lifecycle::pod_netns(netns, att)? else {
        return Ok(());
    };
    let pod = Ns::Pod(&ns);
    let index = ctx
        .rdma
        .device_index(pod, &rec.ibdev)
        .kernel_ctx(|| format!("looking up ib device {} in the pod", rec.ibdev))?;
    match index {
        Some(index) => ctx
            .rdma
            .move_device(pod, index, Ns::Host)
            .map_err(|e| move_error(rec, "back to the host netns", e)),
        None => Ok(()),
    }
}

/// CHECK: the ib device is in the pod netns and its port is ACTIVE.
pub fn check(ctx: &Ctx<'_>, req: &Request, _pc: &PluginConf) -> Result<()> {
    let (att, ns) = crate::attach::check::check_subject(ctx, req)?;
    match att.chained() {
        Some(chained) => crate::attach::check::check_ib_device(ctx.rdma, &ns, &chained.rdma),
        None => Err(not_chained(&att)),
    }
}

/// A record of another mode handed to this one: the record changed under the conf.
fn not_chained(att: &Attachment) -> Error {
    Error::State(format!(
        "record {} is of mode {}, not a chained (rdma) attachment",
        att.id(),
        att.mode().as_str()
    ))
}
