//! Mode `move`: an existing host netdev (RoCE PF/VF/SF netdev, IPoIB netdev) moves into the pod.
//!
//! ADD steps, each with its undo: intent record → one RTM_NEWLINK that moves, renames and sets
//! the MTU (a netns move is the costly kernel operation: it is done once per direction), with
//! IPAM ADD running beside these two → addresses → up → routes → final record. DEL brings the
//! device back under its original name and MTU, admin down, also when the pod netns is gone.

use crate::attach::check::{check_gids, check_ib_device, check_prev_addresses};
use std::path::Path;

use ipnetwork::IpNetwork;

use crate::attach::addresses::configure_pod_interface;
use crate::attach::config::PluginConf;
use crate::attach::gids::{wait_for_gids, with_view, GidView};
use crate::attach::ib_device::{self, plan_ib_move, RdmaRecord};
use crate::attach::plan::Plan;
use crate::attach::record::{Attachment, HostDevice, ModeState, MoveState, PodInterface};
use crate::attach::select::{select_host_device, Selector};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::CniResult;
use crate::cni::Request;
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::rdma_ops::RdmaOps;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::{format_hwaddr, Link, LinkChange, NetOps, Netns, Ns};

/// The lock/state key of a device: its PCI function when it has one (stable across renames and
/// netns moves), else its permanent or current hardware address.
pub fn device_key(link: &Link) -> String {
    if let Some(pci) = link.pci_address() {
        return format!("pci-{pci}");
    }
    let mac = link.perm_hwaddr.as_deref().unwrap_or(&link.hwaddr);
    format!("mac-{}", format_hwaddr(mac))
}

pub fn add(ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult> {
    let netns = open_netns(req.env.netns.as_deref())?;
    let id = crate::attach::select::device_plugin_id(&req.conf)?;
    let selector = &crate::attach::select::device_selector(&req.conf, id.as_ref())?;
    let found = match select_host_device(ctx.kernel, ctx.sys, selector) {
        Ok(l) => l,
        Err(e @ Error::DeviceNotFound(_)) => return Err(explain_held(ctx, req, selector, e)),
        Err(e) => return Err(e),
    };
    let key = device_key(&found);
    let _lock = ctx.store.lock_device(&key, pc.lock_timeout)?;
    let mut add = MoveAdd::decide(ctx, req, pc, &netns, selector, &found, key)?;
    let mut plan = Plan::new(ctx.fault.clone());
    match add.run(&mut plan) {
        Ok(result) => {
            plan.commit();
            crate::log_info!(
                "moved {} into {} as {}",
                add.host.name,
                add.att.netns,
                add.att.ifname
            );
            Ok(result)
        }
        Err(e) => Err(plan.rollback(e)),
    }
}

/// One move-mode ADD: what is decided before the first change, then one method per step.
struct MoveAdd<'a> {
    ctx: &'a Ctx<'a>,
    req: &'a Request,
    pc: &'a PluginConf,
    netns: &'a Netns,
    dev: Link,
    /// The device as it is in the host now (recorded for DEL).
    host: HostDevice,
    /// The ib device that moves along (exclusive netns mode), if any (recorded for DEL).
    ib: Option<RdmaRecord>,
    host_addresses: Vec<IpNetwork>,
    /// Where the pod IPs' RoCE GIDs will show (empty: none to wait for).
    roce_ports: Vec<(String, u32)>,
    /// The ib devices whose char devices `devicePermissions` covers.
    perm_ibdevs: Vec<String>,
    att: Attachment,
}

impl<'a> MoveAdd<'a> {
    /// Everything read and decided under the device lock, before anything changes.
    fn decide(
        ctx: &'a Ctx<'a>,
        req: &'a Request,
        pc: &'a PluginConf,
        netns: &'a Netns,
        selector: &Selector,
        found: &Link,
        key: String,
    ) -> Result<MoveAdd<'a>> {
        // Re-read under the lock: a concurrent attachment may have moved it meanwhile.
        let dev = ctx
            .kernel
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
            })?;
        refuse_if_held(ctx, req, &key, &dev)?;
        let ib = plan_ib_move(ctx.rdma, ctx.sys, pc.rdma, &dev)?;
        if let Some(existing) = ctx
            .kernel
            .link_by_name(Ns::Pod(netns), &req.env.ifname)
            .kernel_ctx(|| format!("looking up {} in the pod", req.env.ifname))?
        {
            return Err(Error::IfnameTaken(format!(
                "the pod netns {} already has an interface named {} (ifindex {}); nothing was \
                 moved: pick another CNI_IFNAME",
                netns.path().display(),
                req.env.ifname,
                existing.index
            )));
        }
        let host_addresses = ctx
            .kernel
            .addresses(Ns::Host, dev.index)
            .kernel_ctx(|| format!("reading addresses of {}", dev.name))?;
        let host = HostDevice {
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
            addresses: host_addresses.iter().map(|a| a.to_string()).collect(),
        };
        // Where the pod IPs' RoCE GIDs will show: on the moved ib device, seen from inside the
        // pod (exclusive), or on the host's ib device that lists the pod netdev by its pod name
        // (shared).
        let roce_ports = match (&ib, pc.rdma) {
            (Some(rec), _) if !rec.infiniband => vec![(rec.ibdev.clone(), rec.port)],
            (Some(_), _) | (None, crate::attach::ib_device::RdmaConf::Off) => Vec::new(),
            (None, _) => crate::attach::gids::roce_ports_of(ctx.sys, &dev.name)?,
        };
        let gid_view = match (&ib, roce_ports.is_empty()) {
            (_, true) => None,
            (Some(_), false) => Some(GidView::Pod),
            (None, false) => Some(GidView::Host),
        };
        // Read while the netdev is still in the host's /sys/class/net.
        let perm_ibdevs = match (&ib, crate::attach::permissions::from_conf(&req.conf)?) {
            (_, None) => Vec::new(),
            (Some(rec), Some(_)) => vec![rec.ibdev.clone()],
            (None, Some(_)) => ib_device_names(ctx.sys, &dev.name)?,
        };
        let state = MoveState {
            host: host.clone(),
            rdma: ib.clone(),
            pod_interface: PodInterface {
                gid_view,
                ..PodInterface::default()
            },
        };
        let att = Attachment::adding(req, netns, key, ModeState::Move(state));
        Ok(MoveAdd {
            ctx,
            req,
            pc,
            netns,
            dev,
            host,
            ib,
            host_addresses,
            roce_ports,
            perm_ibdevs,
            att,
        })
    }

    fn run(&mut self, plan: &mut Plan<'a>) -> Result<CniResult> {
        let (ctx, req, netns) = (self.ctx, self.req, self.netns);
        // IPAM ADD (an exec of the IPAM plugin) runs beside the intent record and the moves: the
        // move waits in the kernel (an RCU barrier under RTNL) long enough to hide most of it.
        let ((), ipam) = crate::attach::lifecycle::add_beside_ipam(ctx, req, plan, |plan| {
            self.intent_and_moves(plan)
        })?;
        let pod_link = self.pod_link()?;
        crate::attach::permissions::apply_permissions(
            ctx,
            req,
            &mut self.att,
            &self.perm_ibdevs,
            plan,
        )?;
        let result = ipam.unwrap_or_default();
        configure_pod_interface(
            ctx.kernel,
            netns,
            pod_link.index,
            &req.env.ifname,
            &result,
            plan,
        )?;
        self.record_gids(&result, plan)?;
        crate::attach::device_info::write_device_info(ctx, req, &mut self.att, &[], plan)?;
        crate::attach::lifecycle::finish_add(
            ctx,
            req,
            netns,
            &mut self.att,
            &pod_link,
            result,
            plan,
        )
    }

    /// Writes the intent record (durably), then moves the ib device (when it moves) and the
    /// netdev into the pod with its final name and MTU: the part of ADD that runs beside IPAM
    /// ADD.
    fn intent_and_moves(&mut self, plan: &mut Plan<'a>) -> Result<()> {
        crate::attach::lifecycle::write_intent(self.ctx, &self.att, plan)?;
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
        ib_device::rename_ipoib(k, pod, &link, &self.req.env.ifname, self.pc.mtu)?;
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
                mtu: self.pc.mtu,
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
            .moved_mut()
            .expect("MoveAdd::decide records a moved device")
    }

    /// Step `gids`: waits for the kernel to add the pod IPs' RoCE GIDs and records their
    /// indexes.
    fn record_gids(&mut self, result: &CniResult, plan: &mut Plan<'a>) -> Result<()> {
        let gid_view = self.recorded().pod_interface.gid_view;
        if let (Some(view), false) = (gid_view, result.ips.is_empty()) {
            let ips: Vec<_> = result.ips.iter().map(|i| i.address.ip()).collect();
            let ifname = self.req.env.ifname.clone();
            let timeout = self.pc.gid_timeout;
            let roce_ports = &self.roce_ports;
            let found = with_view(self.ctx.sys, view, self.netns, |sys| {
                // rxe deletes its ib device when its netdev leaves the host netns
                // (NETDEV_UNREGISTER): then there is no GID to report. Hardware keeps its ib
                // device.
                if roce_ports
                    .iter()
                    .all(|(d, _)| !sys.device_exists(format!("class/infiniband/{d}")))
                {
                    crate::log_warn!(
                        "{ifname}: the ib device(s) {roce_ports:?} went away when the netdev \
                         moved (software RoCE does this); no GID to report"
                    );
                    return Ok(Vec::new());
                }
                wait_for_gids(sys, roce_ports, &ips, &ifname, timeout)
            })?;
            let recorded = &mut self.recorded().pod_interface;
            if found.is_empty() {
                recorded.gid_view = None;
            }
            recorded.gids = found;
        }
        plan.checkpoint("gids")
    }
}

/// Brings an ib device back to the host: moved from inside the pod netns when it is there, or
/// already returned by the kernel when the pod netns died. An IPoIB netdev is re-created by the
/// kernel with its ib device: it is found by its port GID and given its host name and MTU.
fn return_ib_device(
    k: &dyn NetOps,
    rdma: &dyn RdmaOps,
    netns: Option<&Netns>,
    rec: &RdmaRecord,
    host: &HostDevice,
) -> Result<()> {
    if let Some(ns) = netns {
        let pod = Ns::Pod(ns);
        let index = rdma
            .device_index(pod, &rec.ibdev)
            .kernel_ctx(|| format!("looking up ib device {} in the pod", rec.ibdev))?;
        if let Some(index) = index {
            rdma.move_device(pod, index, Ns::Host)
                .map_err(|e| ib_device::move_error(rec, "back to the host netns", e))?;
        }
    }
    if rdma
        .device_index(Ns::Host, &rec.ibdev)
        .kernel_ctx(|| format!("looking up ib device {} in the host", rec.ibdev))?
        .is_none()
    {
        crate::log_warn!(
            "ib device {} is neither in the pod netns nor back in the host yet",
            rec.ibdev
        );
    }
    if rec.infiniband {
        if let Some(link) = ib_device::find_ipoib_netdev(k, Ns::Host, &host.hwaddr)? {
            ib_device::rename_ipoib(k, Ns::Host, &link, &host.name, Some(host.mtu))?;
        }
    }
    Ok(())
}

/// Rollback of the move: the device goes back to the host under its original name and MTU, with
/// its admin state and host addresses, from wherever the failed ADD left it (in the pod under the
/// pod name or still under the host name).
fn undo_move(
    k: &dyn NetOps,
    netns: &Netns,
    host: &HostDevice,
    ifname: &str,
    addrs: &[IpNetwork],
) -> Result<()> {
    let in_pod = match find_in_pod(k, netns, Some(host.ifindex), ifname, host)? {
        Some(l) => Some(l),
        None => find_in_pod(k, netns, None, &host.name, host)?,
    };
    let index = match in_pod {
        Some(link) => move_back_to_host(k, netns, &link, host)?,
        None => {
            let link = find_in_host(k, host)?.ok_or_else(|| {
                Error::DeviceNotFound(format!(
                    "{} ({}) vanished during rollback: it is neither in the pod netns nor in                      the host",
                    host.name, host.hwaddr
                ))
            })?;
            restore_name_and_mtu(k, &link, host)?;
            link.index
        }
    };
    restore_host_setup(k, index, host, addrs)
}

/// Mode `move`. Its DEL (the shared frame around `release`) brings the device back from the pod
/// netns, or finds it in the host where the kernel put it when the netns died; IPAM DEL runs
/// beside the device's return: the move back waits in the kernel long enough to hide the IPAM
/// plugin's exec, and host-device too releases the address while the device is in the pod.
pub struct MoveDevice;

impl super::ModeDriver for MoveDevice {
    fn add(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult> {
        add(ctx, req, pc)
    }

    fn check(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<()> {
        check(ctx, req, pc)
    }

    fn release(&self, ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()> {
        release_device(ctx.kernel, ctx.rdma, netns, att)
    }

    fn locks_device(&self) -> bool {
        true
    }
}

/// Brings an attachment's device back to the host, wherever it is now. `netns` is the pod netns
/// path DEL got (may be empty, or gone); the recorded path is used when none is given.
pub fn release_device(
    kernel: &dyn NetOps,
    rdma_ops: &dyn RdmaOps,
    netns: Option<&Path>,
    att: &Attachment,
) -> Result<()> {
    let Some(MoveState {
        host,
        rdma,
        pod_interface,
    }) = att.moved()
    else {
        return Err(not_moved(att));
    };
    let (pod_ns, open_error) = match crate::attach::lifecycle::pod_netns(netns, att) {
        Ok(ns) => (ns, None),
        Err(e) => (None, Some(e)),
    };
    // The ib device first, from a socket inside the pod netns (from the host it is invisible in
    // exclusive mode); an IPoIB netdev comes back with it.
    if let Some(rec) = rdma {
        return_ib_device(kernel, rdma_ops, pod_ns.as_ref(), rec, host)?;
        if rec.infiniband {
            return Ok(());
        }
    }
    if let Some(ns) = &pod_ns {
        if let Some(link) = find_in_pod(kernel, ns, pod_interface.ifindex, &att.ifname, host)? {
            move_back_to_host(kernel, ns, &link, host)?;
            return Ok(());
        }
    }
    // The pod netns is gone (or never held it): physical netdevs come back to the host under their
    // pod name when a netns dies (virtual ones, like veth, are destroyed with it).
    if let Some(link) = find_in_host(kernel, host)? {
        restore_name_and_mtu(kernel, &link, host)?;
        return Ok(());
    }
    match open_error {
        Some(e) => Err(Error::Netns(format!(
            "{e}, so {} cannot be brought back from it, and it is not in the host either",
            host.name
        ))),
        None => {
            crate::log_warn!(
                "{} ({}) is neither in the pod netns nor in the host: it was destroyed with its \
                 netns (virtual devices are) or removed; nothing to bring back",
                host.name,
                host.hwaddr
            );
            Ok(())
        }
    }
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

/// Equal hardware addresses; for 20-byte IPoIB addresses only the port GID (bytes 4-19)
/// counts: the flags and QPN in bytes 0-3 change when the kernel re-creates the netdev.
fn same_hwaddr(a: &[u8], b: &[u8]) -> bool {
    match (a.len(), b.len()) {
        (20, 20) => a[4..] == b[4..],
        _ => a == b,
    }
}

fn same_device(link: &Link, host: &HostDevice) -> bool {
    let recorded = crate::kernel::parse_hwaddr(&host.hwaddr).unwrap_or_default();
    same_hwaddr(&link.hwaddr, &recorded)
        || host.perm_hwaddr.is_some()
            && link.perm_hwaddr.as_deref().map(format_hwaddr) == host.perm_hwaddr
}

/// The attachment's device inside the pod: by recorded ifindex, else by the pod name; either
/// way only if its hardware address is the recorded one.
fn find_in_pod(
    kernel: &dyn NetOps,
    ns: &Netns,
    index: Option<u32>,
    ifname: &str,
    host: &HostDevice,
) -> Result<Option<Link>> {
    let pod = Ns::Pod(ns);
    let err = |e| Error::kernel(format!("looking for {} in the pod netns", host.name), e);
    if let Some(i) = index {
        if let Some(l) = kernel.link_by_index(pod, i).map_err(err)? {
            if same_device(&l, host) {
                return Ok(Some(l));
            }
        }
    }
    Ok(kernel
        .link_by_name(pod, ifname)
        .map_err(err)?
        .filter(|l| same_device(l, host)))
}

/// The device in the host netns: by recorded ifindex, then by a dump matched on hwaddr.
fn find_in_host(kernel: &dyn NetOps, host: &HostDevice) -> Result<Option<Link>> {
    let err = |e| Error::kernel(format!("looking for {} in the host", host.name), e);
    if let Some(l) = kernel.link_by_index(Ns::Host, host.ifindex).map_err(err)? {
        if same_device(&l, host) {
            return Ok(Some(l));
        }
    }
    Ok(kernel
        .links(Ns::Host)
        .map_err(err)?
        .into_iter()
        .find(|l| same_device(l, host)))
}

/// One RTM_NEWLINK from inside the pod: to the host netns, original name and MTU. An altname
/// equal to the original name (left by some udev setups, sriov-cni #445) makes the rename fail
/// with EEXIST: it is dropped first. If another host device took the name meanwhile, the device
/// still comes home, under `rdmans<ifindex>`, and the clash is reported.
fn move_back_to_host(
    kernel: &dyn NetOps,
    ns: &Netns,
    link: &Link,
    host: &HostDevice,
) -> Result<u32> {
    let pod = Ns::Pod(ns);
    if link.altnames.iter().any(|a| a == &host.name) {
        kernel
            .del_altname(pod, link.index, &host.name)
            .kernel_ctx(|| format!("dropping altname {} of {}", host.name, link.name))?;
    }
    let change = |name: &str| LinkChange {
        netns: Some(Ns::Host),
        name: Some(name.to_string()),
        mtu: (link.mtu != host.mtu).then_some(host.mtu),
        up: None,
    };
    if crate::attach::plan::test_fault("skip-rename-back") {
        let planted = format!("rdmans{}", link.index);
        return kernel
            .set_link(pod, link.index, &change(&planted))
            .map(|()| link.index)
            .kernel_ctx(|| format!("moving {} back (planted fault)", link.name));
    }
    match kernel.set_link(pod, link.index, &change(&host.name)) {
        Ok(()) => Ok(link.index),
        Err(e) if e.is_errno(nix::errno::Errno::EEXIST) => {
            let holder = kernel
                .link_by_name(Ns::Host, &host.name)
                .ok()
                .flatten()
                .map(|l| format!("{} (ifindex {})", l.name, l.index))
                .unwrap_or_else(|| "another device".into());
            let fallback = format!("rdmans{}", link.index);
            // The move itself may have happened before the rename failed (the kernel applies
            // the parts in order): finish from wherever the device is now.
            let already_home = kernel
                .link_by_index(Ns::Host, link.index)
                .ok()
                .flatten()
                .filter(|l| same_device(l, host));
            let (ns, request) = match already_home {
                Some(_) => (
                    Ns::Host,
                    LinkChange {
                        netns: None,
                        ..change(&fallback)
                    },
                ),
                None => (pod, change(&fallback)),
            };
            kernel
                .set_link(ns, link.index, &request)
                .kernel_ctx(|| format!("moving {} back to the host as {fallback}", link.name))?;
            Err(Error::DeviceInUse(format!(
                "{} is back in the host as {fallback}: its original name {} is taken by {holder}; \
                 rename one of them",
                link.name, host.name
            )))
        }
        Err(e) => Err(Error::kernel(
            format!(
                "moving {} from the pod back to the host as {}",
                link.name, host.name
            ),
            e,
        )),
    }
}

/// After a rollback: the device is back under its name; bring back its admin state and the
/// addresses it had in the host (a netns move flushes them).
fn restore_host_setup(
    kernel: &dyn NetOps,
    index: u32,
    host: &HostDevice,
    addrs: &[IpNetwork],
) -> Result<()> {
    if host.was_up {
        kernel
            .set_link(
                Ns::Host,
                index,
                &LinkChange {
                    up: Some(true),
                    ..Default::default()
                },
            )
            .kernel_ctx(|| format!("setting {} up again", host.name))?;
    }
    for a in addrs {
        match kernel.add_address(Ns::Host, index, *a) {
            Ok(()) => {}
            Err(e) if e.is_errno(nix::errno::Errno::EEXIST) => {}
            Err(e) => {
                return Err(Error::kernel(
                    format!("restoring address {a} on {}", host.name),
                    e,
                ))
            }
        }
    }
    Ok(())
}

/// A device already in the host (returned by the kernel when its netns died): original name and
/// MTU, admin down, in one request; nothing when it is already so.
fn restore_name_and_mtu(kernel: &dyn NetOps, link: &Link, host: &HostDevice) -> Result<()> {
    let change = LinkChange {
        netns: None,
        name: (link.name != host.name).then(|| host.name.clone()),
        mtu: (link.mtu != host.mtu).then_some(host.mtu),
        up: link.up.then_some(false),
    };
    if change.name.is_none() && change.mtu.is_none() && change.up.is_none() {
        return Ok(());
    }
    if link.altnames.iter().any(|a| a == &host.name) {
        kernel
            .del_altname(Ns::Host, link.index, &host.name)
            .kernel_ctx(|| format!("dropping altname {} of {}", host.name, link.name))?;
    }
    kernel
        .set_link(Ns::Host, link.index, &change)
        .kernel_ctx(|| format!("renaming {} back to {} in the host", link.name, host.name))
}

/// CHECK: the interface is in the pod with the recorded identity, MTU and prevResult's
/// addresses; then IPAM CHECK.
pub fn check(ctx: &Ctx<'_>, req: &Request, _pc: &PluginConf) -> Result<()> {
    let (att, ns) = crate::attach::check::check_subject(ctx, req)?;
    let state = att.moved().ok_or_else(|| not_moved(&att))?;
    let link = crate::attach::check::check_pod_link(ctx, req, &ns)?;
    if !same_device(&link, &state.host) {
        return Err(Error::CheckFailed(format!(
            "{} in the pod has hwaddr {}, expected {} (host device {})",
            req.env.ifname,
            link.hwaddr_string(),
            state.host.hwaddr,
            state.host.name
        )));
    }
    if let Some(mtu) = state.pod_interface.mtu {
        if link.mtu != mtu {
            return Err(Error::CheckFailed(format!(
                "{} in the pod has MTU {}, expected {mtu}",
                req.env.ifname, link.mtu
            )));
        }
    }
    if let Some(rec) = &state.rdma {
        check_ib_device(ctx.rdma, &ns, rec)?;
    }
    check_prev_addresses(ctx.kernel, &ns, &link, req)?;
    check_gids(ctx.sys, &ns, &att)?;
    ctx.ipam.check(req)
}

/// ADD found no device: if a live attachment holds a device matching the selector, say who.
fn explain_held(
    ctx: &Ctx<'_>,
    req: &Request,
    selector: &crate::attach::select::Selector,
    not_found: Error,
) -> Error {
    let holder = ctx.store.list_all().0.into_iter().find(|a| {
        let same_attachment = a.network == req.conf.name
            && a.container_id == req.env.container_id
            && a.ifname == req.env.ifname;
        !same_attachment && holds(a, selector)
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

/// Whether `a` holds the device `selector` names: its moved device, a child's parent, or a
/// chained attachment's VF (known by PCI function, prevResult's MAC and ib device; its host name
/// was never recorded).
fn holds(a: &Attachment, selector: &Selector) -> bool {
    let (name, hwaddr, pci) = match &a.mode_state {
        ModeState::Move(m) => (
            Some(&m.host.name),
            Some(&m.host.hwaddr),
            m.host.pci.as_ref(),
        ),
        ModeState::Child(c) => (
            Some(&c.parent.name),
            Some(&c.parent.hwaddr),
            c.parent.pci.as_ref(),
        ),
        ModeState::Chained(c) => (None, c.prev_mac.as_ref(), Some(&c.function)),
    };
    match selector {
        Selector::Name { name: wanted, .. } => name == Some(wanted),
        Selector::HwAddr(h) => hwaddr.is_some_and(|mac| *mac == format_hwaddr(h)),
        Selector::Pci { address, .. } => pci == Some(address),
        Selector::IbDevice(ibdev) => a.ib_device().is_some_and(|r| &r.ibdev == ibdev),
        // Records keep no kernelpath or auxiliary device name of the netdev they hold, so these
        // selectors cannot name a holder; the plain "not found" stands.
        Selector::KernelPath(_) | Selector::Aux { .. } => false,
    }
}

/// A record of another mode handed to this one: the record changed under the conf.
fn not_moved(att: &Attachment) -> Error {
    Error::State(format!(
        "record {} is of mode {}, not a moved device",
        att.id(),
        att.mode().as_str()
    ))
}

/// ADD found the device in the host: refuse it if another attachment's record claims it and that
/// attachment's pod netns still exists.
fn refuse_if_held(ctx: &Ctx<'_>, req: &Request, key: &str, dev: &Link) -> Result<()> {
    for a in ctx.store.list_all().0 {
        let same_attachment = a.network == req.conf.name
            && a.container_id == req.env.container_id
            && a.ifname == req.env.ifname;
        if a.device_key != key || same_attachment {
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
