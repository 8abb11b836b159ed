//! Mode `move`: an existing host netdev (RoCE PF/VF/SF netdev, IPoIB netdev) moves into the pod.
//!
//! ADD steps, each with its undo: intent record → IPAM ADD → one RTM_NEWLINK that moves,
//! renames and sets the MTU (a netns move costs 12–23 ms: it is done once per direction) →
//! addresses → up → routes → final record. DEL brings the device back under its original name
//! and MTU, admin down, also when the pod netns is gone.

use std::path::Path;

use ipnetwork::IpNetwork;

use crate::attach::config::PluginConf;
use crate::attach::plan::Plan;
use crate::attach::select::select_host_device;
use crate::attach::state::{Attachment, HostDevice, Phase};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::{CniResult, Interface, IpConfig};
use crate::cni::Request;
use crate::error::{Error, Result};
use crate::kernel::{format_hwaddr, Link, LinkChange, NetOps, Netns, Ns, RouteSpec};

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
        pci: dev.pci_address().map(str::to_string),
        was_up: dev.up,
        addresses: host_addresses.iter().map(|a| a.to_string()).collect(),
    };
    let mut att = Attachment {
        network: req.conf.name.clone(),
        container_id: req.env.container_id.clone(),
        ifname: req.env.ifname.clone(),
        mode: pc.mode.as_str().to_string(),
        phase: Phase::Adding,
        netns: netns.path().display().to_string(),
        device_key: key,
        host,
        pod_ifindex: None,
        pod_mtu: None,
        ipam_result: None,
    };

    let mut plan = Plan::new(ctx.fail_after.clone());
    match add_steps(
        ctx,
        req,
        pc,
        &netns,
        &dev,
        &mut att,
        &host_addresses,
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
    plan: &mut Plan<'a>,
) -> Result<CniResult> {
    let k = ctx.kernel;
    let pod = Ns::Pod(netns);

    ctx.store.save(att)?;
    let (net, cid, ifn) = (
        att.network.clone(),
        att.container_id.clone(),
        att.ifname.clone(),
    );
    plan.on_undo("state-intent", move || ctx.store.remove(&net, &cid, &ifn));
    plan.checkpoint("state-intent")?;

    let ipam = ctx.ipam.add(req)?;
    if ipam.is_some() {
        plan.on_undo("ipam", move || ctx.ipam.del(req));
    }
    plan.checkpoint("ipam")?;

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

    let pod_link = k
        .link_by_name(pod, &req.env.ifname)
        .map_err(|e| Error::kernel(format!("looking up {} in the pod", req.env.ifname), e))?
        .filter(|l| l.hwaddr == dev.hwaddr)
        .ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "{} was moved but is not in the pod netns as {}",
                dev.name, req.env.ifname
            ))
        })?;
    att.pod_ifindex = Some(pod_link.index);
    att.pod_mtu = Some(pod_link.mtu);

    let mut result = ipam.unwrap_or_default();
    for ip in &result.ips {
        let addr = ip.address;
        k.add_address(pod, pod_link.index, addr).map_err(|e| {
            Error::kernel(
                format!("adding address {addr} to {} in the pod", req.env.ifname),
                e,
            )
        })?;
        let index = pod_link.index;
        plan.on_undo("address", move || {
            k.del_address(pod, index, addr)
                .map_err(|e| Error::kernel(format!("removing address {addr}"), e))
        });
    }
    plan.checkpoint("addresses")?;

    k.set_link(
        pod,
        pod_link.index,
        &LinkChange {
            up: Some(true),
            ..Default::default()
        },
    )
    .map_err(|e| Error::kernel(format!("setting {} up in the pod", req.env.ifname), e))?;
    let index = pod_link.index;
    plan.on_undo("up", move || {
        k.set_link(
            pod,
            index,
            &LinkChange {
                up: Some(false),
                ..Default::default()
            },
        )
        .map_err(|e| Error::kernel("setting the interface down", e))
    });
    plan.checkpoint("up")?;

    for route in &result.routes {
        let spec = RouteSpec {
            dst: route.dst,
            gateway: route.gw,
            oif: pod_link.index,
            metric: route.priority,
            mtu: route.mtu,
            table: route.table,
            scope: route.scope,
        };
        k.add_route(pod, &spec).map_err(|e| {
            Error::kernel(
                format!(
                    "adding route {}{} on {} in the pod",
                    route.dst,
                    route.gw.map(|g| format!(" via {g}")).unwrap_or_default(),
                    req.env.ifname
                ),
                e,
            )
        })?;
        plan.on_undo("route", move || {
            k.del_route(pod, &spec)
                .map_err(|e| Error::kernel(format!("removing route {}", spec.dst), e))
        });
    }
    plan.checkpoint("routes")?;

    att.phase = Phase::Ready;
    att.ipam_result = if result.ips.is_empty() && result.routes.is_empty() {
        None
    } else {
        Some(result.to_value("1.1.0")?)
    };
    ctx.store.update(att)?;
    plan.checkpoint("state")?;

    result.interfaces = vec![Interface {
        name: req.env.ifname.clone(),
        mac: Some(pod_link.hwaddr_string()),
        mtu: Some(pod_link.mtu),
        sandbox: Some(netns.path().display().to_string()),
        pci_id: att.host.pci.clone(),
        ..Default::default()
    }];
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    Ok(result)
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
    if req.conf.ipam.is_none() {
        return del_with_ipam(ctx, req, pc, || ctx.ipam.del(req));
    }
    let ipam = ctx.ipam;
    std::thread::scope(|scope| {
        let ipam_del = scope.spawn(move || ipam.del(req));
        del_with_ipam(ctx, req, pc, || {
            ipam_del
                .join()
                .unwrap_or_else(|_| Err(Error::IpamExec("the IPAM DEL thread panicked".into())))
        })
    })
}

/// DEL's device and record part; `ipam_del` gives IPAM DEL's outcome (run, or waited for).
fn del_with_ipam(
    ctx: &Ctx<'_>,
    req: &Request,
    pc: &PluginConf,
    ipam_del: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let mut errors = Vec::new();
    let att = match ctx
        .store
        .load(&req.conf.name, &req.env.container_id, &req.env.ifname)
    {
        Ok(a) => a,
        Err(e) => {
            errors.push(e);
            None
        }
    };
    match &att {
        Some(att) => {
            let _lock = ctx.store.lock_device(&att.device_key, pc.lock_timeout)?;
            if let Err(e) = release_device(ctx.kernel, req.env.netns.as_deref(), att) {
                errors.push(e);
            }
        }
        None => crate::log::info(&format!(
            "DEL {}:{}: no attachment record; nothing to bring back",
            req.env.container_id, req.env.ifname
        )),
    }
    if let Err(e) = ipam_del() {
        errors.push(e);
    }
    if errors.is_empty() && att.is_some() {
        ctx.store
            .remove(&req.conf.name, &req.env.container_id, &req.env.ifname)?;
    }
    Error::collect(errors)
}

/// Brings an attachment's device back to the host, wherever it is now. `netns` is the pod netns
/// path DEL got (may be empty, or gone); the recorded path is used when none is given.
pub fn release_device(kernel: &dyn NetOps, netns: Option<&Path>, att: &Attachment) -> Result<()> {
    let host = &att.host;
    let path = netns
        .map(Path::to_path_buf)
        .unwrap_or_else(|| att.netns.clone().into());
    let mut open_error = None;
    if netns.is_some() || !att.netns.is_empty() {
        match Netns::open(&path) {
            Ok(ns) => {
                if let Some(link) = find_in_pod(kernel, &ns, att.pod_ifindex, &att.ifname, host)? {
                    move_back_to_host(kernel, &ns, &link, host)?;
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => open_error = Some(e),
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

fn same_device(link: &Link, host: &HostDevice) -> bool {
    let hw = format_hwaddr(&link.hwaddr);
    hw == host.hwaddr
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
    let link = ctx
        .kernel
        .link_by_name(Ns::Pod(&ns), &req.env.ifname)
        .map_err(|e| Error::kernel(format!("looking up {} in the pod", req.env.ifname), e))?
        .ok_or_else(|| {
            Error::CheckFailed(format!(
                "{} is missing from the pod netns {}",
                req.env.ifname,
                path.display()
            ))
        })?;
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
    if let Some(prev) = &req.conf.prev_result {
        let have = ctx
            .kernel
            .addresses(Ns::Pod(&ns), link.index)
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
    }
    ctx.ipam.check(req)
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
                Selector::Name(n) => &a.host.name == n,
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
