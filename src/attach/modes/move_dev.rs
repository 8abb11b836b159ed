//! Mode `move`: an existing host netdev (RoCE PF/VF/SF netdev, IPoIB netdev) moves into the pod.
//!
//! ADD steps, each with its undo: intent record → one RTM_NEWLINK that moves, renames and sets
//! the MTU (a netns move is the costly kernel operation: it is done once per direction), with
//! IPAM ADD running beside these two → addresses → up → routes → final record. DEL brings the
//! device back under its original name and MTU, admin down, also when the pod netns is gone
//! (back.rs).

mod back;

pub use back::release_device;

use std::path::Path;

use ipnetwork::IpNetwork;

use crate::attach::addresses::Addresses;
use crate::attach::check::check_ib_device;
use crate::attach::device_info::DeviceInfoFile;
use crate::attach::gids::{GidSource, GidView, GidWait};
use crate::attach::ib_device::{self, plan_ib_move, RdmaConf, RdmaRecord};
use crate::attach::modes::{ModeAdd, ModeDriver, ModeState, Release};
use crate::attach::permissions::Permissions;
use crate::attach::plan::Plan;
use crate::attach::qos::Qos;
use crate::attach::rail::Rail;
use crate::attach::record::{
    Attachment, HostDevice, HostSide, ModeRecord, ModeWire, PodInterface, RecordMismatch,
};
use crate::attach::select::{select_host_device, DeviceId, Selector};
use crate::attach::soft_roce::SoftRoce;
use crate::attach::steps::{CheckSubject, PodSide, Step};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::CniResult;
use crate::cni::{NetConf, Request};
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::{format_hwaddr, Link, LinkChange};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::{Netns, Ns};
use back::{restore_host_setup, return_ib_device, same_device, same_hwaddr, undo_move};

/// Mode `move`. Its DEL (the shared frame around `release`) brings the device back from the pod
/// netns, or finds it in the host where the kernel put it when the netns died; IPAM DEL runs
/// beside the device's return: the move back waits in the kernel long enough to hide the IPAM
/// plugin's exec, and host-device too releases the address while the device is in the pod.
pub struct MoveDevice;

impl ModeDriver for MoveDevice {
    const NAME: &'static str = "move";
    const LOCKS_DEVICE: bool = true;
    // rail before addresses (ARP values set while the link is down); soft-roce after them: rxe
    // fills its GID table from the netdev's addresses as it registers, where gid-wait looks;
    // roce-qos after soft-roce, whose device's RDMA CM default it writes.
    const STEPS: &'static [&'static dyn Step] = &[
        &Rail,
        &Addresses,
        &SoftRoce,
        &Qos,
        &Permissions,
        &GidWait,
        &DeviceInfoFile,
    ];
    type Settings = ();
    type Target = Selector;
    type State = MoveState;

    fn settings(_conf: &NetConf, _rdma: RdmaConf) -> Result<()> {
        Ok(())
    }

    fn target(req: &Request, device_id: Option<&DeviceId>) -> Result<Selector> {
        crate::attach::select::device_selector(&req.conf, device_id)
    }

    fn add(ctx: &Ctx<'_>, req: &Request, add: &ModeAdd<'_, MoveDevice>) -> Result<CniResult> {
        let netns = open_netns(req.env.netns.as_deref())?;
        let selector = &add.target;
        let found = match select_host_device(ctx.kernel, ctx.sys, selector) {
            Ok(l) => l,
            Err(e @ Error::DeviceNotFound(_)) => return Err(explain_held(ctx, req, selector, e)),
            Err(e) => return Err(e),
        };
        let key = device_key(&found);
        let timeout = add.conf.plugin.lock_timeout;
        ctx.store.under_device_lock(&key.clone(), timeout, || {
            let add = MoveAdd::decide(ctx, req, add, &netns, &found, key)?;
            let moved = format!(
                "moved {} into {} as {}",
                add.host.name, add.att.netns, add.att.ifname
            );
            let result = crate::attach::plan::transact(ctx.fault.clone(), |plan| add.run(plan))?;
            crate::log_info!("{moved}");
            Ok(result)
        })
    }

    /// CHECK: the interface is in the pod with the recorded identity and MTU, and the ib device
    /// that moved with it (exclusive netns mode) is there with its port ACTIVE.
    fn check(ctx: &Ctx<'_>, on: &CheckSubject<'_>, state: &MoveState) -> Result<Option<Link>> {
        let ifname = &on.req.env.ifname;
        let link = crate::attach::check::check_pod_link(ctx, on.req, on.ns)?;
        if !same_device(&link, &state.host) {
            return Err(Error::CheckFailed(format!(
                "{ifname} in the pod has hwaddr {}, expected {} (host device {})",
                link.hwaddr_string(),
                state.host.hwaddr,
                state.host.name
            )));
        }
        if let Some(mtu) = state.pod_interface.mtu.filter(|&m| m != link.mtu) {
            return Err(Error::CheckFailed(format!(
                "{ifname} in the pod has MTU {}, expected {mtu}",
                link.mtu
            )));
        }
        if let Some(rec) = &state.rdma {
            check_ib_device(ctx.rdma, on.ns, rec)?;
        }
        Ok(Some(link))
    }

    fn release(ctx: &Ctx<'_>, release: &Release<'_, MoveState>) -> Result<()> {
        let Release { att, state, netns } = *release;
        release_device(ctx.kernel, ctx.rdma, netns, att, state)
    }

    fn state_from_wire(mut wire: ModeWire) -> std::result::Result<MoveState, RecordMismatch> {
        Ok(MoveState {
            pod_interface: wire.take_pod_interface(),
            rdma: wire.rdma,
            host: wire.host,
        })
    }

    /// The ib device moves with the netdev in exclusive netns mode; `rdma: exclusive` requires
    /// it, `auto` takes either.
    fn netns_mode_needed(rdma: RdmaConf) -> Option<NetnsMode> {
        (rdma == RdmaConf::Exclusive).then_some(NetnsMode::Exclusive)
    }
}

/// What mode `move` records: the host netdev moved into the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveState {
    /// The device as it was in the host: what DEL restores.
    pub host: HostDevice,
    /// The ib device moved along (exclusive netns mode), if any.
    pub rdma: Option<RdmaRecord>,
    pub pod_interface: PodInterface,
}

impl ModeRecord for MoveState {
    fn to_wire(&self, _ifname: &str) -> ModeWire {
        ModeWire {
            rdma: self.rdma.clone(),
            ..ModeWire::new(self.host.clone(), Some(&self.pod_interface))
        }
    }

    fn pod_interface(&self) -> Option<&PodInterface> {
        Some(&self.pod_interface)
    }

    fn pod_interface_mut(&mut self) -> Option<&mut PodInterface> {
        Some(&mut self.pod_interface)
    }

    fn ib_device(&self) -> Option<&RdmaRecord> {
        self.rdma.as_ref()
    }

    fn host_side(&self) -> HostSide<'_> {
        self.host.side()
    }

    fn listed_device(&self) -> String {
        self.host.name.clone()
    }
}

/// The lock/state key of a device (records::lock::device_key, the one the DRA driver locks
/// it by too): its PCI function when it has one (stable across renames and netns moves), else
/// its permanent or current hardware address.
pub fn device_key(link: &Link) -> String {
    crate::records::lock::device_key(&crate::records::lock::NetdevIdentity {
        pci: link.pci_address(),
        perm_hwaddr: link.perm_hwaddr.as_deref(),
        hwaddr: &link.hwaddr,
    })
}

/// One move-mode ADD: what is decided before the first change, then one method per step.
struct MoveAdd<'a> {
    ctx: &'a Ctx<'a>,
    req: &'a Request,
    conf: &'a crate::attach::config::AddConf<'a>,
    netns: &'a Netns,
    dev: Link,
    /// The device as it is in the host now (recorded for DEL).
    host: HostDevice,
    /// The ib device that moves along (exclusive netns mode), if any (recorded for DEL).
    ib: Option<RdmaRecord>,
    host_addresses: Vec<IpNetwork>,
    /// Where the pod IPs' RoCE GIDs will show, if anywhere.
    gids: Option<GidSource>,
    /// The pod's ib devices, read while the netdev is still in the host's /sys/class/net (only
    /// when a step reads them).
    ib_devices: Vec<String>,
    att: Attachment,
}

impl<'a> MoveAdd<'a> {
    /// Everything read and decided under the device lock, before anything changes.
    fn decide(
        ctx: &'a Ctx<'a>,
        req: &'a Request,
        add: &'a ModeAdd<'a, MoveDevice>,
        netns: &'a Netns,
        found: &Link,
        key: String,
    ) -> Result<MoveAdd<'a>> {
        let rdma = add.conf.plugin.rdma;
        let dev = reread_under_lock(ctx, found, &add.target)?;
        refuse_if_held(ctx, req, &key, &dev)?;
        let ib = plan_ib_move(ctx.rdma, ctx.sys, rdma, &dev)?;
        refuse_taken_ifname(ctx, req, netns)?;
        let host_addresses = ctx
            .kernel
            .addresses(Ns::Host, dev.index)
            .kernel_ctx(|| format!("reading addresses of {}", dev.name))?;
        let host = host_record(&dev, &add.target, &host_addresses);
        let gids = gid_source(ctx.sys, ib.as_ref(), rdma, &dev)?;
        let ib_devices = match (&ib, add.conf.reads_ib_devices()) {
            (_, false) => Vec::new(),
            (Some(rec), true) => vec![rec.ibdev.clone()],
            (None, true) => ib_device_names(ctx.sys, &dev.name)?,
        };
        let state = MoveState {
            host: host.clone(),
            rdma: ib.clone(),
            pod_interface: PodInterface {
                gid_view: gids.as_ref().map(|g| g.view),
                ..PodInterface::default()
            },
        };
        let device_id = add.conf.recorded_device_id();
        let mode_state = ModeState::of::<MoveDevice>(state);
        Ok(MoveAdd {
            ctx,
            req,
            conf: &add.conf,
            netns,
            dev,
            host,
            ib,
            host_addresses,
            gids,
            ib_devices,
            att: Attachment::adding(req, netns, key, mode_state, device_id),
        })
    }

    fn run(mut self, plan: &mut Plan<'a>) -> Result<CniResult> {
        let (ctx, req) = (self.ctx, self.req);
        // IPAM ADD (an exec of the IPAM plugin) runs beside the intent record and the moves: the
        // move waits in the kernel (an RCU barrier under RTNL) long enough to hide most of it.
        let ((), ipam) = crate::attach::lifecycle::add_beside_ipam(ctx, req, plan, |plan| {
            self.intent_and_moves(plan)
        })?;
        let pod_link = self.pod_link()?;
        let result = ipam.unwrap_or_default();
        let mut pod = PodSide::new(ctx, req, self.conf, self.netns, self.att, result);
        pod.link = Some(pod_link);
        // The device-info file names the moved device's PCI function, never ib devices alone.
        pod.ib_devices = self.ib_devices;
        pod.gids = self.gids;
        crate::attach::steps::run(pod, plan)
    }

    /// Writes the intent record (durably), then moves the ib device (when it moves) and the
    /// netdev into the pod with its final name and MTU: the part of ADD that runs beside IPAM
    /// ADD.
    fn intent_and_moves(&mut self, plan: &mut Plan<'a>) -> Result<()> {
        crate::attach::lifecycle::write_intent(self.ctx, self.conf, &mut self.att, plan)?;
        // The ib device goes first: the kernel may refuse it (EOPNOTSUPP from drivers that cannot
        // disassociate user contexts), and then nothing else has moved yet; and an IPoIB netdev
        // follows its ib device by itself, re-created by the kernel in the target netns.
        if let Some(rec) = self.ib.clone() {
            self.move_ib_device(rec, plan)?;
        }
        if self.ib.as_ref().is_some_and(|r| r.infiniband) {
            self.rename_recreated_ipoib(plan)
        } else {
            self.move_netdev(plan)
        }
    }

    fn move_ib_device(&self, rec: RdmaRecord, plan: &mut Plan<'a>) -> Result<()> {
        let (k, ctx, netns) = (self.ctx.kernel, self.ctx, self.netns);
        ctx.rdma
            .move_device(Ns::Host, rec.index, Ns::Pod(netns))
            .map_err(|e| {
                ib_device::move_error(
                    &rec,
                    &format!("into the pod netns {}", netns.path().display()),
                    e,
                )
            })?;
        let host = self.host.clone();
        let addrs = self.host_addresses.clone();
        plan.on_undo("ib-move", move || {
            return_ib_device(k, ctx.rdma, Some(netns), &rec, &host)?;
            match (
                rec.infiniband,
                ib_device::find_ipoib_netdev(k, Ns::Host, &host.hwaddr)?,
            ) {
                (true, Some(link)) => restore_host_setup(k, link.index, &host, &addrs),
                _ => Ok(()),
            }
        });
        plan.checkpoint("ib-move")
    }

    /// The kernel re-created the IPoIB netdev in the pod with its ib device: find it by its port
    /// GID and give it the pod name and MTU.
    fn rename_recreated_ipoib(&self, plan: &mut Plan<'a>) -> Result<()> {
        let k = self.ctx.kernel;
        let pod = Ns::Pod(self.netns);
        let link = ib_device::find_ipoib_netdev(k, pod, &self.host.hwaddr)?.ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "the IPoIB netdev of {} ({}) did not appear in the pod netns after its ib device \
                 moved there",
                self.dev.name, self.host.hwaddr
            ))
        })?;
        ib_device::rename_ipoib(k, pod, &link, &self.req.env.ifname, self.conf.plugin.mtu)?;
        plan.checkpoint("move")
    }

    /// One RTM_NEWLINK moves the netdev, renames it and sets its MTU.
    fn move_netdev(&self, plan: &mut Plan<'a>) -> Result<()> {
        let (k, netns, dev) = (self.ctx.kernel, self.netns, &self.dev);
        let ifname = self.req.env.ifname.clone();
        let moved = k.set_link(
            Ns::Host,
            dev.index,
            &LinkChange {
                netns: Some(Ns::Pod(netns)),
                name: Some(ifname.clone()),
                mtu: self.conf.plugin.mtu,
                up: None,
            },
        );
        // The kernel applies a combined change in parts (move, MTU, name) and does not undo the
        // earlier parts when a later one fails: after an error the device may already sit in the
        // pod under its host name. The undo is registered whenever the device left the host.
        let left_host = match &moved {
            Ok(()) => true,
            Err(_) => {
                !matches!(k.link_by_index(Ns::Host, dev.index), Ok(Some(ref l)) if l.hwaddr == dev.hwaddr)
            }
        };
        if left_host {
            let host = self.host.clone();
            let addrs = self.host_addresses.clone();
            let name = ifname.clone();
            plan.on_undo("move", move || undo_move(k, netns, &host, &name, &addrs));
        }
        moved.kernel_ctx(|| {
            format!(
                "moving {} into the pod netns {} as {}",
                dev.name,
                netns.path().display(),
                ifname
            )
        })?;
        plan.checkpoint("move")
    }

    /// The moved netdev in the pod, by its pod name and hardware address.
    fn pod_link(&mut self) -> Result<Link> {
        let ifname = &self.req.env.ifname;
        let pod_link = self
            .ctx
            .kernel
            .link_by_name(Ns::Pod(self.netns), ifname)
            .kernel_ctx(|| format!("looking up {ifname} in the pod"))?
            .filter(|l| same_hwaddr(&l.hwaddr, &self.dev.hwaddr))
            .ok_or_else(|| {
                Error::DeviceNotFound(format!(
                    "{} was moved but is not in the pod netns as {ifname}",
                    self.dev.name
                ))
            })?;
        let recorded = &mut self.recorded().pod_interface;
        recorded.ifindex = Some(pod_link.index);
        recorded.mtu = Some(pod_link.mtu);
        Ok(pod_link)
    }

    /// The move's part of the record, as `decide` built it.
    fn recorded(&mut self) -> &mut MoveState {
        self.att
            .state_mut()
            .expect("MoveAdd::decide records a moved device")
    }
}

/// The device as it is now, re-read under its lock: a concurrent attachment may have moved it
/// while this ADD waited.
fn reread_under_lock(ctx: &Ctx<'_>, found: &Link, selector: &Selector) -> Result<Link> {
    ctx.kernel
        .link_by_index(Ns::Host, found.index)
        .kernel_ctx(|| format!("re-reading {}", found.name))?
        .filter(|l| l.hwaddr == found.hwaddr)
        .ok_or_else(|| {
            Error::DeviceInUse(format!(
                "{} ({}) left the host netns while this ADD waited for its lock: another \
                 attachment took it",
                found.name,
                selector.describe()
            ))
        })
}

/// CNI_IFNAME must be free in the pod: nothing has moved yet when it is not.
fn refuse_taken_ifname(ctx: &Ctx<'_>, req: &Request, netns: &Netns) -> Result<()> {
    let ifname = &req.env.ifname;
    match ctx
        .kernel
        .link_by_name(Ns::Pod(netns), ifname)
        .kernel_ctx(|| format!("looking up {ifname} in the pod"))?
    {
        Some(existing) => Err(Error::IfnameTaken(format!(
            "the pod netns {} already has an interface named {ifname} (ifindex {}); nothing was \
             moved: pick another CNI_IFNAME",
            netns.path().display(),
            existing.index
        ))),
        None => Ok(()),
    }
}

/// The device as it is in the host now, with its addresses there: what DEL restores.
fn host_record(dev: &Link, selector: &Selector, addresses: &[IpNetwork]) -> HostDevice {
    HostDevice {
        name: dev.name.clone(),
        ifindex: dev.index,
        mtu: dev.mtu,
        hwaddr: dev.hwaddr_string(),
        perm_hwaddr: dev.perm_hwaddr.as_deref().map(format_hwaddr),
        // The netdev's parent device from netlink, else the PCI function the selector named
        // (sysfs listed this netdev under it).
        pci: dev.pci_address().map(str::to_string).or(match selector {
            Selector::Pci { address, .. } => Some(address.clone()),
            _ => None,
        }),
        was_up: dev.up,
        addresses: addresses.iter().map(|a| a.to_string()).collect(),
    }
}

/// Where the pod IPs' RoCE GIDs will show, and which sysfs shows them: on the moved ib device,
/// seen from inside the pod (exclusive), or on the host's ib device that lists the pod netdev by
/// its pod name (shared). None to wait for when IPoIB moves or the conf asks for no RDMA.
fn gid_source(
    sys: &SysRoot,
    ib: Option<&RdmaRecord>,
    rdma: RdmaConf,
    dev: &Link,
) -> Result<Option<GidSource>> {
    let (ports, view) = match (ib, rdma) {
        (Some(rec), _) if !rec.infiniband => (vec![(rec.ibdev.clone(), rec.port)], GidView::Pod),
        (Some(_), _) | (None, RdmaConf::Off) => return Ok(None),
        (None, _) => (
            crate::attach::gids::roce_ports_of(sys, &dev.name)?,
            GidView::Host,
        ),
    };
    Ok((!ports.is_empty()).then_some(GidSource { ports, view }))
}

/// Names of the ib devices a host netdev belongs to (its own function's, or rxe's parent).
pub fn ib_device_names(sys: &SysRoot, netdev: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = crate::kernel::topology::RdmaSysfs::new(sys)
        .ib_ports_of_own_device(netdev)
        .map_err(|e| Error::io(format!("reading the ib devices of {netdev} in sysfs"), e))?
        .into_iter()
        .map(|p| p.ibdev)
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// ADD found no device: if a live attachment holds a device matching the selector, say who.
fn explain_held(ctx: &Ctx<'_>, req: &Request, selector: &Selector, not_found: Error) -> Error {
    let holder = ctx.store.list_all().0.into_iter().find(|a| {
        !a.is(&req.conf.name, &req.env.container_id, &req.env.ifname)
            && selector.names_recorded(
                a.mode_state.record().host_side(),
                a.ib_device().map(|r| r.ibdev.as_str()),
            )
    });
    match holder {
        Some(a) => Error::DeviceInUse(format!(
            "{} ({}) is attached to container {} as {} on network {} (netns {}); DEL that \
             attachment first",
            a.netdev_name(),
            selector.describe(),
            a.container_id,
            a.ifname,
            a.network,
            a.netns
        )),
        None => not_found,
    }
}

/// ADD found the device in the host: refuse it if another attachment's record claims it and that
/// attachment's pod netns still exists.
fn refuse_if_held(ctx: &Ctx<'_>, req: &Request, key: &str, dev: &Link) -> Result<()> {
    for a in ctx.store.list_all().0 {
        if a.device_key != key || a.is(&req.conf.name, &req.env.container_id, &req.env.ifname) {
            continue;
        }
        if Netns::open(Path::new(&a.netns)).is_ok() {
            return Err(Error::DeviceInUse(format!(
                "{} is recorded as attached to container {} as {} on network {} (netns {} still \
                 exists); DEL that attachment first",
                dev.name, a.container_id, a.ifname, a.network, a.netns
            )));
        }
        crate::log_warn!(
            "{}: stale record of container {} (its netns {} is gone); taking the device over",
            dev.name,
            a.container_id,
            a.netns
        );
    }
    Ok(())
}
