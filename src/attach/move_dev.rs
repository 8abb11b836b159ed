//! Mode `move`: an existing host netdev (RoCE PF/VF/SF netdev, IPoIB netdev) moves into the pod.
//!
//! ADD steps, each with its undo: intent record → one RTM_NEWLINK that moves, renames and sets
//! the MTU (a netns move costs 12–23 ms: it is done once per direction), with IPAM ADD running
//! beside these two → addresses → up → routes → final record. DEL brings the device back under its original name
//! and MTU, admin down, also when the pod netns is gone.

use std::path::Path;

use ipnetwork::IpNetwork;

use crate::attach::config::PluginConf;
use crate::attach::devperm;
use crate::attach::gids::{verify_gids, wait_for_gids, with_view, GidView};
use crate::attach::ipconf::configure_pod_interface;
use crate::attach::plan::Plan;
use crate::attach::publish;
use crate::attach::rdma_dev::{self, plan_ib_move, RdmaRecord};
use crate::attach::select::select_host_device;
use crate::attach::state::{Attachment, HostDevice};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::{CniResult, IpConfig};
use crate::cni::Request;
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
    let selector = &crate::attach::config::selector(&req.conf)?;
    let found = match select_host_device(ctx.kernel, ctx.sys, selector) {
        Ok(l) => l,
        Err(e @ Error::DeviceNotFound(_)) => return Err(explain_held(ctx, req, selector, e)),
        Err(e) => return Err(e),
    };
    let key = device_key(&found);
    let _lock = ctx.store.lock_device(&key, pc.lock_timeout)?;
    // Re-read under the lock: a concurrent attachment may have moved it meanwhile.
    let dev = ctx
        .kernel
        .link_by_index(Ns::Host, found.index)
        .map_err(|e| Error::kernel(format!("re-reading {}", found.name), e))?
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
        .link_by_name(Ns::Pod(&netns), &req.env.ifname)
        .map_err(|e| Error::kernel(format!("looking up {} in the pod", req.env.ifname), e))?
    {
        return Err(Error::IfnameTaken(format!(
            "the pod netns {} already has an interface named {} (ifindex {}); nothing was moved: \
             pick another CNI_IFNAME",
            netns.path().display(),
            req.env.ifname,
            existing.index
        )));
    }
    let host_addresses = ctx
        .kernel
        .addresses(Ns::Host, dev.index)
        .map_err(|e| Error::kernel(format!("reading addresses of {}", dev.name), e))?;
    let host = HostDevice {
        name: dev.name.clone(),
        ifindex: dev.index,
        mtu: dev.mtu,
        hwaddr: dev.hwaddr_string(),
        perm_hwaddr: dev.perm_hwaddr.as_deref().map(format_hwaddr),
        // The netdev's parent device from netlink, else the PCI function the selector named
        // (sysfs listed this netdev under it).
        pci: dev.pci_address().map(str::to_string).or(match selector {
            crate::attach::select::Selector::Pci { address, .. } => Some(address.clone()),
            _ => None,
        }),
        was_up: dev.up,
        addresses: host_addresses.iter().map(|a| a.to_string()).collect(),
    };
    let mut att = Attachment {
        rdma: ib,
        ..Attachment::adding(req, pc.mode.as_str(), netns.path(), key, host)
    };
    // Where the pod IPs' RoCE GIDs will show: on the moved ib device, seen from inside the pod
    // (exclusive), or on the host's ib device that lists the pod netdev by its pod name (shared).
    let roce_ports = match (&att.rdma, pc.rdma) {
        (Some(rec), _) if !rec.infiniband => vec![(rec.ibdev.clone(), rec.port)],
        (Some(_), _) | (None, crate::attach::rdma_dev::RdmaConf::Off) => Vec::new(),
        (None, _) => crate::attach::gids::roce_ports_of(ctx.sys, &dev.name)?,
    };
    att.gid_view = match (&att.rdma, roce_ports.is_empty()) {
        (_, true) => None,
        (Some(_), false) => Some(GidView::Pod),
        (None, false) => Some(GidView::Host),
    };

    // The ib devices whose char devices devicePermissions covers (read while the netdev is
    // still in the host's /sys/class/net).
    let perm_ibdevs = match (&att.rdma, devperm::from_conf(&req.conf)?) {
        (_, None) => Vec::new(),
        (Some(rec), Some(_)) => vec![rec.ibdev.clone()],
        (None, Some(_)) => ib_device_names(ctx.sys, &dev.name)?,
    };
    let mut plan = Plan::new(ctx.fault.clone());
    match add_steps(
        ctx,
        req,
        pc,
        &netns,
        &dev,
        &mut att,
        &host_addresses,
        &roce_ports,
        &perm_ibdevs,
        &mut plan,
    ) {
        Ok(result) => {
            plan.commit();
            crate::log::info(&format!(
                "moved {} into {} as {}",
                att.host.name, att.netns, att.ifname
            ));
            Ok(result)
        }
        Err(e) => Err(plan.rollback(e)),
    }
}

#[allow(clippy::too_many_arguments)]
fn add_steps<'a>(
    ctx: &'a Ctx<'a>,
    req: &'a Request,
    pc: &PluginConf,
    netns: &'a Netns,
    dev: &Link,
    att: &mut Attachment,
    host_addresses: &[IpNetwork],
    roce_ports: &[(String, u32)],
    perm_ibdevs: &[String],
    plan: &mut Plan<'a>,
) -> Result<CniResult> {
    let k = ctx.kernel;
    let pod = Ns::Pod(netns);

    // IPAM ADD (an exec of the IPAM plugin) runs beside the intent record and the moves: the
    // move waits in the kernel (an RCU barrier under RTNL) long enough to hide most of it.
    let ((), ipam) = crate::attach::add_beside_ipam(ctx, req, plan, |plan| {
        intent_and_moves(ctx, req, pc, netns, dev, att, host_addresses, plan)
    })?;

    let pod_link = k
        .link_by_name(pod, &req.env.ifname)
        .map_err(|e| Error::kernel(format!("looking up {} in the pod", req.env.ifname), e))?
        .filter(|l| same_hwaddr(&l.hwaddr, &dev.hwaddr))
        .ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "{} was moved but is not in the pod netns as {}",
                dev.name, req.env.ifname
            ))
        })?;
    att.pod_ifindex = Some(pod_link.index);
    att.pod_mtu = Some(pod_link.mtu);

    publish::apply_permissions(ctx, req, att, perm_ibdevs, plan)?;

    let result = ipam.unwrap_or_default();
    configure_pod_interface(k, netns, pod_link.index, &req.env.ifname, &result, plan)?;

    if let (Some(view), false) = (att.gid_view, result.ips.is_empty()) {
        let ips: Vec<_> = result.ips.iter().map(|i| i.address.ip()).collect();
        let ifname = req.env.ifname.clone();
        let timeout = pc.gid_timeout;
        let found = with_view(ctx.sys, view, netns, |sys| {
            // rxe deletes its ib device when its netdev leaves the host netns (NETDEV_UNREGISTER):
            // then there is no GID to report. Hardware keeps its ib device.
            if roce_ports
                .iter()
                .all(|(d, _)| !sys.device_exists(format!("class/infiniband/{d}")))
            {
                crate::log::warn(&format!(
                    "{ifname}: the ib device(s) {:?} went away when the netdev moved (software RoCE \
                     does this); no GID to report",
                    roce_ports
                ));
                return Ok(Vec::new());
            }
            wait_for_gids(sys, roce_ports, &ips, &ifname, timeout)
        })?;
        for g in &found {
            crate::log::info(&format!(
                "{}: {} has GID index {} ({}) on {} port {}",
                req.env.ifname, g.ip, g.index, g.gid_type, g.ibdev, g.port
            ));
        }
        if found.is_empty() {
            att.gid_view = None;
        }
        att.gids = found;
    }
    plan.checkpoint("gids")?;

    publish::write_device_info(ctx, req, att, &[], plan)?;

    crate::attach::ipconf::finish_add(ctx, req, netns, att, &pod_link, result, plan)
}

/// Writes the intent record (durably), then moves the ib device (when it moves) and the netdev
/// into the pod with its final name and MTU: the part of ADD that runs beside IPAM ADD.
/// Registers the undo of each.
#[allow(clippy::too_many_arguments)]
fn intent_and_moves<'a>(
    ctx: &'a Ctx<'a>,
    req: &'a Request,
    pc: &PluginConf,
    netns: &'a Netns,
    dev: &Link,
    att: &mut Attachment,
    host_addresses: &[IpNetwork],
    plan: &mut Plan<'a>,
) -> Result<()> {
    let k = ctx.kernel;
    let pod = Ns::Pod(netns);

    crate::attach::write_intent(ctx, att, plan)?;

    // The ib device goes first: the kernel may refuse it (EOPNOTSUPP from drivers that cannot
    // disassociate user contexts), and then nothing else has moved yet; and an IPoIB netdev
    // follows its ib device by itself, re-created by the kernel in the target netns.
    if let Some(rec) = att.rdma.clone() {
        ctx.rdma
            .move_device(Ns::Host, rec.index, pod)
            .map_err(|e| {
                rdma_dev::move_error(
                    &rec,
                    &format!("into the pod netns {}", netns.path().display()),
                    e,
                )
            })?;
        let host = att.host.clone();
        let addrs = host_addresses.to_vec();
        plan.on_undo("ib-move", move || {
            return_ib_device(k, ctx.rdma, Some(netns), &rec, &host)?;
            match (
                rec.infiniband,
                rdma_dev::find_ipoib_netdev(k, Ns::Host, &host.hwaddr)?,
            ) {
                (true, Some(link)) => restore_host_setup(k, link.index, &host, &addrs),
                _ => Ok(()),
            }
        });
        plan.checkpoint("ib-move")?;
    }

    if att.rdma.as_ref().is_some_and(|r| r.infiniband) {
        let link = rdma_dev::find_ipoib_netdev(k, pod, &att.host.hwaddr)?.ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "the IPoIB netdev of {} ({}) did not appear in the pod netns after its ib device                  moved there",
                dev.name, att.host.hwaddr
            ))
        })?;
        rdma_dev::rename_ipoib(k, pod, &link, &req.env.ifname, pc.mtu)?;
        plan.checkpoint("move")?;
    } else {
        let host = att.host.clone();
        let ifname = req.env.ifname.clone();
        let addrs = host_addresses.to_vec();
        let moved = k.set_link(
            Ns::Host,
            dev.index,
            &LinkChange {
                netns: Some(pod),
                name: Some(req.env.ifname.clone()),
                mtu: pc.mtu,
                up: None,
            },
        );
        // The kernel applies a combined change in parts (move, MTU, name) and does not undo the
        // earlier parts when a later one fails: after an error the device may already sit in the pod
        // under its host name. The undo is registered whenever the device left the host.
        let left_host = match &moved {
            Ok(()) => true,
            Err(_) => {
                !matches!(k.link_by_index(Ns::Host, dev.index), Ok(Some(ref l)) if l.hwaddr == dev.hwaddr)
            }
        };
        if left_host {
            plan.on_undo("move", move || undo_move(k, netns, &host, &ifname, &addrs));
        }
        moved.map_err(|e| {
            Error::kernel(
                format!(
                    "moving {} into the pod netns {} as {}",
                    dev.name,
                    netns.path().display(),
                    req.env.ifname
                ),
                e,
            )
        })?;
        plan.checkpoint("move")?;
    }
    Ok(())
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
        let index = rdma.device_index(pod, &rec.ibdev).map_err(|e| {
            Error::kernel(format!("looking up ib device {} in the pod", rec.ibdev), e)
        })?;
        if let Some(index) = index {
            rdma.move_device(pod, index, Ns::Host)
                .map_err(|e| rdma_dev::move_error(rec, "back to the host netns", e))?;
        }
    }
    if rdma
        .device_index(Ns::Host, &rec.ibdev)
        .map_err(|e| Error::kernel(format!("looking up ib device {} in the host", rec.ibdev), e))?
        .is_none()
    {
        crate::log::warn(&format!(
            "ib device {} is neither in the pod netns nor back in the host yet",
            rec.ibdev
        ));
    }
    if rec.infiniband {
        if let Some(link) = rdma_dev::find_ipoib_netdev(k, Ns::Host, &host.hwaddr)? {
            rdma_dev::rename_ipoib(k, Ns::Host, &link, &host.name, Some(host.mtu))?;
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

/// DEL: bring the device back (from the pod netns, or find it in the host where the kernel put
/// it when the netns died), release IPAM, drop the record. Every error is collected; the record
/// is kept while anything failed, so a retried DEL does the rest.
///
/// IPAM DEL runs on a second thread beside the device's return: the two are independent (the
/// IPAM plugin releases its allocation, the kernel moves the device), and the move back spends
/// about 20 ms waiting in the kernel, which hides the IPAM plugin's exec (3 to 4 ms for Debian's
/// static). host-device too releases the address while the device is still in the pod.
pub fn del(ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<()> {
    crate::attach::del_recorded(ctx, req, pc, true, |att| {
        release_device(ctx.kernel, ctx.rdma, req.env.netns.as_deref(), att)
    })
}

/// Brings an attachment's device back to the host, wherever it is now. `netns` is the pod netns
/// path DEL got (may be empty, or gone); the recorded path is used when none is given.
pub fn release_device(
    kernel: &dyn NetOps,
    rdma: &dyn RdmaOps,
    netns: Option<&Path>,
    att: &Attachment,
) -> Result<()> {
    let host = &att.host;
    let path = netns
        .map(Path::to_path_buf)
        .unwrap_or_else(|| att.netns.clone().into());
    let mut open_error = None;
    let mut pod_ns = None;
    if netns.is_some() || !att.netns.is_empty() {
        match Netns::open(&path) {
            Ok(ns) => pod_ns = Some(ns),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => open_error = Some(e),
        }
    }
    // The ib device first, from a socket inside the pod netns (from the host it is invisible in
    // exclusive mode); an IPoIB netdev comes back with it.
    if let Some(rec) = &att.rdma {
        return_ib_device(kernel, rdma, pod_ns.as_ref(), rec, host)?;
        if rec.infiniband {
            return Ok(());
        }
    }
    if let Some(ns) = &pod_ns {
        if let Some(link) = find_in_pod(kernel, ns, att.pod_ifindex, &att.ifname, host)? {
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
            "cannot open the pod netns {} to bring {} back ({e}), and the device is not in the \
             host either",
            path.display(),
            host.name
        ))),
        None => {
            crate::log::warn(&format!(
                "{} ({}) is neither in the pod netns nor in the host: it was destroyed with its \
                 netns (virtual devices are) or removed; nothing to bring back",
                host.name, host.hwaddr
            ));
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
            .map_err(|e| {
                Error::kernel(
                    format!("dropping altname {} of {}", host.name, link.name),
                    e,
                )
            })?;
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
            .map_err(|e| Error::kernel(format!("moving {} back (planted fault)", link.name), e));
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
            kernel.set_link(ns, link.index, &request).map_err(|e| {
                Error::kernel(
                    format!("moving {} back to the host as {fallback}", link.name),
                    e,
                )
            })?;
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
            .map_err(|e| Error::kernel(format!("setting {} up again", host.name), e))?;
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
            .map_err(|e| {
                Error::kernel(
                    format!("dropping altname {} of {}", host.name, link.name),
                    e,
                )
            })?;
    }
    kernel.set_link(Ns::Host, link.index, &change).map_err(|e| {
        Error::kernel(
            format!("renaming {} back to {} in the host", link.name, host.name),
            e,
        )
    })
}

/// CHECK: the interface is in the pod with the recorded identity, MTU and prevResult's
/// addresses; then IPAM CHECK.
pub fn check(ctx: &Ctx<'_>, req: &Request, _pc: &PluginConf) -> Result<()> {
    let (att, ns) = crate::attach::check_subject(ctx, req)?;
    let link = crate::attach::check_pod_link(ctx, req, &ns)?;
    if !same_device(&link, &att.host) {
        return Err(Error::CheckFailed(format!(
            "{} in the pod has hwaddr {}, expected {} (host device {})",
            req.env.ifname,
            link.hwaddr_string(),
            att.host.hwaddr,
            att.host.name
        )));
    }
    if let Some(mtu) = att.pod_mtu {
        if link.mtu != mtu {
            return Err(Error::CheckFailed(format!(
                "{} in the pod has MTU {}, expected {mtu}",
                req.env.ifname, link.mtu
            )));
        }
    }
    if let Some(rec) = &att.rdma {
        check_ib_device(ctx.rdma, &ns, rec)?;
    }
    check_prev_addresses(ctx.kernel, &ns, &link, req)?;
    check_gids(ctx.sys, &ns, &att)?;
    ctx.ipam.check(req)
}

/// CHECK's GID part: every recorded GID still holds its IP at its index.
pub fn check_gids(sys: &SysRoot, ns: &Netns, att: &Attachment) -> Result<()> {
    match att.gid_view {
        Some(view) if !att.gids.is_empty() => {
            let ifname = att.ifname.clone();
            let gids = att.gids.clone();
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
        .map_err(|e| Error::kernel(format!("looking up ib device {} in the pod", rec.ibdev), e))?
        .ok_or_else(|| {
            Error::CheckFailed(format!(
                "ib device {} is not visible in the pod netns",
                rec.ibdev
            ))
        })?;
    let state = rdma
        .port_state(pod, index, rec.port)
        .map_err(|e| Error::kernel(format!("reading port {} of {}", rec.port, rec.ibdev), e))?;
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
        .map_err(|e| Error::kernel(format!("reading addresses of {}", req.env.ifname), e))?;
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

/// ADD found no device: if a live attachment holds a device matching the selector, say who.
fn explain_held(
    ctx: &Ctx<'_>,
    req: &Request,
    selector: &crate::attach::select::Selector,
    not_found: Error,
) -> Error {
    use crate::attach::select::Selector;
    let holder = ctx.store.list_all().into_iter().find(|a| {
        let same_attachment = a.network == req.conf.name
            && a.container_id == req.env.container_id
            && a.ifname == req.env.ifname;
        !same_attachment
            && match selector {
                Selector::Name { name, .. } => &a.host.name == name,
                Selector::HwAddr(h) => a.host.hwaddr == format_hwaddr(h),
                Selector::Pci { address, .. } => a.host.pci.as_deref() == Some(address),
                _ => false,
            }
    });
    match holder {
        Some(a) => Error::DeviceInUse(format!(
            "{} ({}) is attached to container {} as {} on network {} (netns {}); DEL that \
             attachment first",
            a.host.name,
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
    for a in ctx.store.list_all() {
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
        crate::log::warn(&format!(
            "{}: stale record of container {} (its netns {} is gone); taking the device over",
            dev.name, a.container_id, a.netns
        ));
    }
    Ok(())
}
