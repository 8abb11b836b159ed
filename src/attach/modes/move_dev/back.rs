//! Mode `move`'s way back: the moved device (and its ib device) returned to the host under its
//! original name and MTU, by DEL and GC from wherever it is now, and by the rollback of a failed
//! ADD with its host addresses and admin state.

use std::path::Path;

use ipnetwork::IpNetwork;

use super::MoveState;
use crate::attach::ib_device::{self, RdmaRecord};
use crate::attach::record::{Attachment, HostDevice};
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::rdma_ops::RdmaOps;
use crate::kernel::rtnetlink::{format_hwaddr, Link, LinkChange, NetOps};
use crate::kernel::{Netns, Ns};

/// Brings an ib device back to the host: moved from inside the pod netns when it is there, or
/// already returned by the kernel when the pod netns died. An IPoIB netdev is re-created by the
/// kernel with its ib device: it is found by its port GID and given its host name and MTU.
pub(super) fn return_ib_device(
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
pub(super) fn undo_move(
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
                    "{} ({}) vanished during rollback: it is neither in the pod netns nor in \
                     the host",
                    host.name, host.hwaddr
                ))
            })?;
            restore_name_and_mtu(k, &link, host)?;
            link.index
        }
    };
    restore_host_setup(k, index, host, addrs)
}

/// Brings an attachment's device back to the host, wherever it is now. `netns` is the pod netns
/// path DEL got (may be empty, or gone); the recorded path is used when none is given.
pub fn release_device(
    kernel: &dyn NetOps,
    rdma_ops: &dyn RdmaOps,
    netns: Option<&Path>,
    att: &Attachment,
    state: &MoveState,
) -> Result<()> {
    let MoveState {
        host,
        rdma,
        pod_interface,
    } = state;
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

/// Equal hardware addresses; for 20-byte IPoIB addresses only the port GID (bytes 4-19)
/// counts: the flags and QPN in bytes 0-3 change when the kernel re-creates the netdev.
pub(super) fn same_hwaddr(a: &[u8], b: &[u8]) -> bool {
    match (a.len(), b.len()) {
        (20, 20) => a[4..] == b[4..],
        _ => a == b,
    }
}

pub(super) fn same_device(link: &Link, host: &HostDevice) -> bool {
    let recorded = crate::kernel::rtnetlink::parse_hwaddr(&host.hwaddr).unwrap_or_default();
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
pub(super) fn restore_host_setup(
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
