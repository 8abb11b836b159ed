//! Mode `rdma`: chained after sriov-cni, ib-sriov-cni or host-device (parity with rdma-cni).
//!
//! The previous plugin already put the netdev into the pod; this mode moves the matching ib
//! device after it (exclusive netns mode) and passes prevResult through. The ib device is found
//! from the device plugin's `deviceID` (a PCI function), or from the pod interface's parent
//! device (IFLA_PARENT_DEV_NAME, read through netlink inside the pod: the host's /sys cannot see
//! the pod's netdevs).

use crate::attach::device_info::DeviceInfoFile;
use crate::attach::ib_device::{move_error, RdmaConf, RdmaRecord};
use crate::attach::modes::{ModeAdd, ModeDriver, ModeState, Release};
use crate::attach::permissions::Permissions;
use crate::attach::plan::Plan;
use crate::attach::qos::Qos;
use crate::attach::rail::Rail;
use crate::attach::record::{
    Attachment, HostDevice, HostSide, ModeRecord, ModeWire, PodInterface, RecordMismatch,
};
use crate::attach::select::{normalize_pci, DeviceId, Selector};
use crate::attach::steps::{CheckSubject, PodSide, Step};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::CniResult;
use crate::cni::{NetConf, Request};
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::Link;
use crate::kernel::topology::{IbParent, LinkLayer, RdmaSysfs};
use crate::kernel::{Netns, Ns};

/// Mode `rdma`. Its DEL (the shared frame around `release`) moves the ib device back to the
/// host from a socket inside the pod netns; with the pod netns gone the kernel has already
/// returned it.
pub struct Chained;

impl ModeDriver for Chained {
    const NAME: &'static str = "rdma";
    const LOCKS_DEVICE: bool = true;
    const STEPS: &'static [&'static dyn Step] = &[&Rail, &Qos, &Permissions, &DeviceInfoFile];
    type Settings = ();
    /// The PCI function the device plugin's ID names; None: the pod interface's.
    type Target = Option<String>;
    type State = ChainedState;

    fn settings(_conf: &NetConf, _rdma: RdmaConf) -> Result<()> {
        Ok(())
    }

    fn target(req: &Request, device_id: Option<&DeviceId>) -> Result<Option<String>> {
        function_of_device_id(req, device_id)
    }

    fn add(ctx: &Ctx<'_>, req: &Request, add: &ModeAdd<'_, Chained>) -> Result<CniResult> {
        add_chained(ctx, req, add)
    }

    /// CHECK: the ib device is in the pod netns and its port is ACTIVE. The pod interface is
    /// the previous plugin's to check.
    fn check(ctx: &Ctx<'_>, on: &CheckSubject<'_>, state: &ChainedState) -> Result<Option<Link>> {
        crate::attach::check::check_ib_device(ctx.rdma, on.ns, &state.rdma)?;
        Ok(None)
    }

    /// Moves the ib device back to the host from inside its pod netns (the one DEL was given,
    /// else the recorded one while it is still that netns); a netns that is gone has already
    /// given it back (the kernel returns ib devices to init_net).
    fn release(ctx: &Ctx<'_>, release: &Release<'_, ChainedState>) -> Result<()> {
        let rec = &release.state.rdma;
        let Some(ns) = crate::attach::lifecycle::pod_netns(release.netns, release.att)? else {
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

    /// `host` holds a placeholder: only its PCI function and prevResult's MAC and MTU are the
    /// chained attachment's.
    fn state_from_wire(wire: ModeWire) -> std::result::Result<ChainedState, RecordMismatch> {
        let missing = |field| RecordMismatch::FieldMissing {
            mode: Self::NAME,
            field,
        };
        Ok(ChainedState {
            function: wire.host.pci.ok_or_else(|| missing("host.pci"))?,
            rdma: wire.rdma.ok_or_else(|| missing("rdma"))?,
            prev_mac: Some(wire.host.hwaddr).filter(|m| !m.is_empty()),
            prev_mtu: Some(wire.host.mtu).filter(|&m| m != 0),
        })
    }

    /// Only exclusive netns mode moves the ib device; `rdma: off` attaches nothing to check.
    fn netns_mode_needed(rdma: RdmaConf) -> Option<NetnsMode> {
        (rdma != RdmaConf::Off).then_some(NetnsMode::Exclusive)
    }
}

/// What mode `rdma` records: the previous plugin in the chain owns the pod netdev; only the ib
/// device of its PCI function is this attachment's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainedState {
    /// The PCI function (a VF) whose ib device went into the pod: the device-info file and
    /// `rdma-ns list` name it.
    pub function: String,
    /// The ib device moved into the pod: what DEL moves back and CHECK looks for.
    pub rdma: RdmaRecord,
    /// The pod interface's MAC and MTU as prevResult gave them (the previous plugin's netdev),
    /// kept so the record names the netdev the ib device belongs to.
    pub prev_mac: Option<String>,
    pub prev_mtu: Option<u32>,
}

impl ModeRecord for ChainedState {
    /// What every earlier release wrote, and so requires, for a chained attachment.
    fn to_wire(&self, ifname: &str) -> ModeWire {
        let host = HostDevice {
            name: ifname.to_string(),
            ifindex: 0,
            mtu: self.prev_mtu.unwrap_or(0),
            hwaddr: self.prev_mac.clone().unwrap_or_default(),
            perm_hwaddr: None,
            pci: Some(self.function.clone()),
            was_up: true,
            addresses: Vec::new(),
        };
        ModeWire {
            rdma: Some(self.rdma.clone()),
            ..ModeWire::new(host, None)
        }
    }

    fn pod_interface(&self) -> Option<&PodInterface> {
        None
    }

    fn pod_interface_mut(&mut self) -> Option<&mut PodInterface> {
        None
    }

    fn ib_device(&self) -> Option<&RdmaRecord> {
        Some(&self.rdma)
    }

    /// Known by PCI function and prevResult's MAC; its host name was never recorded.
    fn host_side(&self) -> HostSide<'_> {
        HostSide {
            name: None,
            hwaddr: self.prev_mac.as_deref(),
            pci: Some(&self.function),
        }
    }

    fn listed_device(&self) -> String {
        self.function.clone()
    }
}

/// The PCI function the device plugin's ID names, whose ib device goes with the pod interface;
/// None when there is no ID, or one that selects nothing (the RDMA shared device plugin's
/// index: logged, and the pod interface decides).
fn function_of_device_id(req: &Request, device_id: Option<&DeviceId>) -> Result<Option<String>> {
    let Some(id) = device_id else {
        return Ok(None);
    };
    match id.selector() {
        Some(Selector::Pci { address, .. }) => Ok(Some(address)),
        Some(other) => Err(Error::UnsupportedField {
            field: id.field.into(),
            value: id.value.clone(),
            msg: format!(
                "chained mode finds ib devices of PCI functions; {} is not one",
                other.describe()
            ),
        }),
        None => {
            crate::log_info!(
                "{}: {}; the ib device is found from {} in the pod instead",
                req.env.ifname,
                id.not_a_selector(),
                req.env.ifname
            );
            Ok(None)
        }
    }
}

/// The PCI function of the pod interface the previous plugin made, read through netlink inside
/// the pod.
fn function_of_pod_interface(ctx: &Ctx<'_>, req: &Request, netns: &Netns) -> Result<String> {
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

/// ADD: the previous plugin's prevResult passes through; the ib device of the pod interface's
/// PCI function follows it into the pod.
fn add_chained(ctx: &Ctx<'_>, req: &Request, add: &ModeAdd<'_, Chained>) -> Result<CniResult> {
    let prev = req.conf.prev_result.clone().ok_or_else(|| {
        Error::config(
            "prevResult",
            "mode \"rdma\" is chained: put it after sriov, ib-sriov or host-device in a conflist",
        )
    })?;
    let netns = open_netns(req.env.netns.as_deref())?;
    require_exclusive_netns_mode(ctx)?;
    let bdf = match &add.target {
        Some(function) => function.clone(),
        None => function_of_pod_interface(ctx, req, &netns)?,
    };
    let rec = ib_device_of_function(ctx, &bdf)?;
    let key = format!("ib-{}", rec.ibdev);
    let iface = prev.interfaces.iter().find(|i| i.name == req.env.ifname);
    let state = ChainedState {
        function: bdf,
        rdma: rec.clone(),
        prev_mac: iface.and_then(|i| i.mac.clone()).filter(|m| !m.is_empty()),
        prev_mtu: iface.and_then(|i| i.mtu).filter(|&m| m != 0),
    };
    let mode_state = ModeState::of::<Chained>(state);
    let att = Attachment::adding(
        req,
        &netns,
        key.clone(),
        mode_state,
        add.conf.recorded_device_id(),
    );
    ctx.store
        .under_device_lock(&key, add.conf.plugin.lock_timeout, || {
            crate::attach::plan::transact(ctx.fault.clone(), |plan| {
                let mut att = att;
                crate::attach::lifecycle::write_intent(ctx, &add.conf, &mut att, plan)?;
                move_into_pod(ctx, &netns, &rec, plan)?;
                let mut pod = PodSide::new(ctx, req, &add.conf, &netns, att, prev);
                pod.ib_devices = vec![rec.ibdev.clone()];
                crate::attach::steps::run(pod, plan)
            })
        })
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

/// Step `ib-move`: the ib device `rec` into the pod; its undo moves it back.
fn move_into_pod<'a>(
    ctx: &'a Ctx<'a>,
    netns: &'a Netns,
    rec: &RdmaRecord,
    plan: &mut Plan<'a>,
) -> Result<()> {
    let pod = Ns::Pod(netns);
    ctx.rdma
        .move_device(Ns::Host, rec.index, pod)
        .map_err(|e| {
            move_error(
                rec,
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
    plan.checkpoint("ib-move")
}
