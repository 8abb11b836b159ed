//! Modes `macvlan` and `ipoib`: a child interface of a host RoCE or IPoIB netdev, created
//! directly inside the pod netns with its final name (shared netns mode: the ib device stays in
//! the host and is shared).
//!
//! One RTM_NEWLINK carries IFLA_LINK (the parent, in the host), IFLA_NET_NS_FD (the pod) and
//! IFLA_IFNAME: creating in place costs a fraction of a millisecond, against tens of
//! milliseconds for create-then-move (the netns move is the expensive kernel operation), and
//! the host's udev never sees a temporary device.

use std::path::Path;

use crate::attach::addresses::configure_pod_interface;
use crate::attach::config::{IpoibConf, IpoibModeConf, ModeConf, PluginConf};
use crate::attach::gids;
use crate::attach::ib_device::RdmaConf;
use crate::attach::plan::Plan;
use crate::attach::record::{
    Attachment, ChildKind, ChildRecord, ChildState, HostDevice, IpoibRecord, ModeState,
    PodInterface,
};
use crate::attach::select::{select_parent, Selector};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::CniResult;
use crate::cni::Request;
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::{
    format_hwaddr, Link, LinkChange, LinkKind, MacvlanMode, NetOps, Netns, NewLink, Ns,
};

/// ARPHRD_INFINIBAND (linux/if_arp.h): the link type of IPoIB netdevs.
pub const ARPHRD_INFINIBAND: u16 = 32;
/// ARPHRD_ETHER.
pub const ARPHRD_ETHER: u16 = 1;
/// IPOIB_CM_MTU (ipoib.h): the largest MTU, reachable only in connected mode.
pub const IPOIB_CM_MTU: u32 = 65520;
const IPOIB_MODE_DATAGRAM: u16 = 0;
const IPOIB_MODE_CONNECTED: u16 = 1;

/// What the child will be, decided from the conf and the parent before anything changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildPlan {
    pub kind: LinkKind,
    /// MTU to end with; None keeps what the kernel gives (the parent's, for macvlan).
    pub mtu: Option<u32>,
    pub hwaddr: Option<Vec<u8>>,
    /// Human-readable choice, logged and recorded (e.g. "connected, MTU 65520 (auto)").
    pub summary: String,
}

/// Which parent: every selector given (a device plugin's PCI or auxiliary `deviceID`, `master`,
/// `rdmaDevice`) must name the same netdev. A device plugin ID that selects nothing (the RDMA
/// shared device plugin's index) is logged (and kept in the record, as every mode does).
fn parent_selectors(req: &Request, pc: &PluginConf) -> Result<Vec<Selector>> {
    let id = crate::attach::select::device_plugin_id(&req.conf)?;
    let selectors = crate::attach::select::parent_selectors(&req.conf, id.as_ref())?;
    let opaque = id.filter(|id| id.selector().is_none());
    if let Some(id) = &opaque {
        crate::log_info!(
            "{}: {}; it selects nothing here, the parent comes from master or rdmaDevice",
            req.env.ifname,
            id.not_a_selector()
        );
    }
    if selectors.is_empty() {
        return Err(Error::config(
            "master",
            format!(
                "mode {} needs `master` (the parent netdev, e.g. {}), `rdmaDevice` (its ib \
                 device) or a device plugin's PCI deviceID{}",
                pc.mode.as_str(),
                if pc.mode.kind() == crate::attach::config::Mode::Ipoib {
                    "ib0"
                } else {
                    "ens1f0np0"
                },
                opaque
                    .as_ref()
                    .map(|id| format!(" ({} selects no device)", id.describe()))
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(selectors)
}

/// A child gives the pod a netdev; its ib device is the parent's and stays in the host. In
/// exclusive RDMA netns mode the pod then sees no ib device at all and RDMA silently fails, so
/// ADD refuses unless the conf asks for no RDMA (`"rdma": "off"`).
fn refuse_exclusive_netns_mode(ctx: &Ctx<'_>, pc: &PluginConf, parent: &Link) -> Result<()> {
    if pc.rdma == RdmaConf::Off {
        return Ok(());
    }
    let mode = ctx
        .rdma
        .netns_mode()
        .kernel_ctx(|| "reading the RDMA subsystem's netns mode")?;
    if mode != Some(NetnsMode::Exclusive) {
        return Ok(());
    }
    Err(Error::RdmaUnavailable(format!(
        "mode {} would give the pod a child of {} but no ib device: the RDMA subsystem is in \
         exclusive netns mode, where the parent's ib device stays in the host netns. Use shared \
         netns mode with the RDMA shared device plugin (remove `options ib_core netns_mode=0`, \
         or `rdma system set netns shared` before any pod starts), or mode move (or rdma chained \
         after sriov) with a VF from the SR-IOV network device plugin; set \"rdma\": \"off\" \
         to attach the netdev without RDMA",
        pc.mode.as_str(),
        parent.name
    )))
}

/// Decides kind, MTU and address of a macvlan child of `parent`.
pub fn plan_macvlan(parent: &Link, pc: &PluginConf, mac: Option<Vec<u8>>) -> Result<ChildPlan> {
    if parent.link_type != ARPHRD_ETHER {
        return Err(Error::ParentUnsuitable(format!(
            "macvlan needs an Ethernet (RoCE) parent, but {} has link type {}{}; for IPoIB use \
             mode \"ipoib\"",
            parent.name,
            parent.link_type,
            if parent.link_type == ARPHRD_INFINIBAND {
                " (InfiniBand)"
            } else {
                ""
            }
        )));
    }
    if let Some(m) = pc.mtu {
        if m > parent.mtu {
            return Err(Error::config(
                "mtu",
                format!(
                    "{m} is above the parent {}'s MTU {}: a macvlan child cannot exceed its parent",
                    parent.name, parent.mtu
                ),
            ));
        }
    }
    let mode = match &pc.mode {
        ModeConf::Macvlan(c) => c.macvlan_mode,
        _ => MacvlanMode::Bridge,
    };
    // The address is decided here, before the intent record, so that the record identifies the
    // child from its first instant: a plugin killed right after the create still leaves DEL the
    // address to find it by. A passthru child takes its parent's address (and setting one would
    // change the parent's), so it is predicted, not set.
    let hwaddr = match (mac, mode) {
        (Some(m), _) => Some(m),
        (None, MacvlanMode::Passthru) => None,
        (None, _) => Some(random_local_mac()?),
    };
    Ok(ChildPlan {
        kind: LinkKind::Macvlan { mode },
        mtu: pc.mtu,
        summary: format!(
            "macvlan {mode:?} on {}, MTU {}",
            parent.name,
            pc.mtu.unwrap_or(parent.mtu)
        ),
        hwaddr,
    })
}

/// A random unicast, locally administered MAC, as the kernel picks for a macvlan by default
/// (eth_hw_addr_random).
fn random_local_mac() -> Result<Vec<u8>> {
    use std::io::Read;
    let mut mac = vec![0u8; 6];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut mac))
        .map_err(|e| Error::io("reading /dev/urandom for the child's MAC", e))?;
    mac[0] = (mac[0] & 0xfe) | 0x02;
    Ok(mac)
}

/// The child's address as it will be once created: the one the plan sets, or for a passthru
/// macvlan its parent's. None for IPoIB, whose address (QPN and port GID) the kernel assigns.
fn expected_hwaddr(child: &ChildPlan, parent: &Link) -> Option<String> {
    match (&child.hwaddr, child.kind) {
        (Some(a), _) => Some(format_hwaddr(a)),
        (
            None,
            LinkKind::Macvlan {
                mode: MacvlanMode::Passthru,
            },
        ) => Some(parent.hwaddr_string()),
        _ => None,
    }
}

/// Decides IPoIB mode and MTU. Byte 0 of the parent's 20-byte address carries the RC flag
/// (0x80, `IPOIB_CM_SUPPORTED`); Enhanced IPoIB (mlx5, ConnectX-4+) leaves it 0 and supports
/// datagram only, where asking for connected mode fails with EINVAL.
pub fn plan_ipoib(parent: &Link, pc: &PluginConf) -> Result<ChildPlan> {
    if parent.link_type != ARPHRD_INFINIBAND || parent.hwaddr.len() != 20 {
        return Err(Error::ParentUnsuitable(format!(
            "ipoib needs an IPoIB parent (link type 32, 20-byte address), but {} has link type \
             {} and a {}-byte address; give the IPoIB netdev of an InfiniBand port as `master`",
            parent.name,
            parent.link_type,
            parent.hwaddr.len()
        )));
    }
    if !parent.up {
        return Err(Error::ParentUnsuitable(format!(
            "the IPoIB parent {} is down; bring it up (ip link set {} up) first",
            parent.name, parent.name
        )));
    }
    let cm_capable = parent.hwaddr[0] & 0x80 != 0;
    let settings = match &pc.mode {
        ModeConf::Ipoib(c) => c.clone(),
        _ => IpoibConf::default(),
    };
    let requested = settings.ipoib_mode;
    let connected = match requested {
        IpoibModeConf::Connected if !cm_capable => {
            return Err(Error::ParentUnsuitable(format!(
                "ipoibMode connected was asked, but {} runs Enhanced IPoIB (address byte 0 is \
                 {:#04x}, no RC flag): ConnectX-4 and later are datagram-only there. Use \
                 ipoibMode datagram or auto; to get connected mode load MLNX_OFED's ib_ipoib \
                 with ipoib_enhanced=0 (upstream kernels have no such parameter)",
                parent.name, parent.hwaddr[0]
            )))
        }
        IpoibModeConf::Connected => true,
        IpoibModeConf::Datagram => false,
        IpoibModeConf::Auto => cm_capable,
    };
    let limit = if connected { IPOIB_CM_MTU } else { parent.mtu };
    let mtu =
        match pc.mtu {
            Some(m) if m > limit => {
                return Err(Error::config(
                    "mtu",
                    format!(
                    "{m} is above the {} limit {limit} for a child of {} (connected mode allows \
                     up to 65520; datagram mode up to the parent's MTU)",
                    if connected { "connected-mode" } else { "datagram-mode" },
                    parent.name
                ),
                ))
            }
            Some(m) => m,
            None => limit,
        };
    let how = match requested {
        IpoibModeConf::Auto => " (auto)",
        _ => "",
    };
    Ok(ChildPlan {
        kind: LinkKind::Ipoib {
            pkey: settings.pkey,
            mode: Some(if connected {
                IPOIB_MODE_CONNECTED
            } else {
                IPOIB_MODE_DATAGRAM
            }),
            umcast: settings.umcast.map(u16::from),
        },
        mtu: Some(mtu),
        hwaddr: None,
        summary: format!(
            "ipoib {} on {}, MTU {mtu}{how}",
            if connected { "connected" } else { "datagram" },
            parent.name
        ),
    })
}

/// The MAC for a macvlan child: runtimeConfig.mac (the `mac` capability), then CNI_ARGS MAC (as
/// podman sends it), then the conf's `mac`.
fn macvlan_mac(req: &Request, pc: &PluginConf) -> Result<Option<Vec<u8>>> {
    let configured = match &pc.mode {
        ModeConf::Macvlan(c) => c.mac.clone(),
        _ => None,
    };
    if req
        .conf
        .runtime_config
        .mac
        .as_deref()
        .is_some_and(|m| !m.is_empty())
    {
        return Ok(configured.clone());
    }
    if let Some(text) = req.env.args.mac()? {
        return crate::attach::config::parse_unicast_mac("CNI_ARGS MAC", &text).map(Some);
    }
    Ok(configured.clone())
}

pub fn add(ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult> {
    let selectors = parent_selectors(req, pc)?;
    let netns = open_netns(req.env.netns.as_deref())?;
    let mut add = ChildAdd::decide(ctx, req, pc, &netns, &selectors)?;
    let mut plan = Plan::new(ctx.fault.clone());
    match add.run(&mut plan) {
        Ok(r) => {
            plan.commit();
            Ok(r)
        }
        Err(e) => Err(plan.rollback(e)),
    }
}

fn taken(netns: &Netns, ifname: &str, index: Option<u32>) -> Error {
    Error::IfnameTaken(format!(
        "the pod netns {} already has an interface named {ifname}{}; pick another CNI_IFNAME",
        netns.path().display(),
        index.map(|i| format!(" (ifindex {i})")).unwrap_or_default()
    ))
}

/// One macvlan or ipoib ADD: what is decided before the first change, then one method per step.
struct ChildAdd<'a> {
    ctx: &'a Ctx<'a>,
    req: &'a Request,
    pc: &'a PluginConf,
    netns: &'a Netns,
    parent: Link,
    child: ChildPlan,
    /// RoCE ports of the parent: the pod's GIDs appear there (shared mode, host view).
    roce_ports: Vec<(String, u32)>,
    att: Attachment,
}

impl<'a> ChildAdd<'a> {
    fn decide(
        ctx: &'a Ctx<'a>,
        req: &'a Request,
        pc: &'a PluginConf,
        netns: &'a Netns,
        selectors: &[Selector],
    ) -> Result<ChildAdd<'a>> {
        let parent = select_parent(ctx.kernel, ctx.sys, selectors)?;
        refuse_exclusive_netns_mode(ctx, pc, &parent)?;
        let child = match pc.mode {
            ModeConf::Ipoib(_) => plan_ipoib(&parent, pc)?,
            _ => plan_macvlan(&parent, pc, macvlan_mac(req, pc)?)?,
        };
        if let Some(existing) = ctx
            .kernel
            .link_by_name(Ns::Pod(netns), &req.env.ifname)
            .kernel_ctx(|| format!("looking up {} in the pod", req.env.ifname))?
        {
            return Err(taken(netns, &req.env.ifname, Some(existing.index)));
        }
        crate::log_info!("{}: {}", req.env.ifname, child.summary);
        let device_key = format!(
            "child-{}-{}-{}",
            req.conf.name, req.env.container_id, req.env.ifname
        );
        let host = HostDevice {
            name: parent.name.clone(),
            ifindex: parent.index,
            mtu: parent.mtu,
            hwaddr: parent.hwaddr_string(),
            perm_hwaddr: None,
            pci: parent.pci_address().map(str::to_string),
            was_up: parent.up,
            addresses: Vec::new(),
        };
        let state = ChildState {
            parent: host,
            child: ChildRecord {
                kind: ChildKind::of(&child.kind),
                hwaddr: expected_hwaddr(&child, &parent),
                ipoib: None,
                macvlan_mode: None,
                summary: child.summary.clone(),
            },
            pod_interface: PodInterface::default(),
        };
        let att = Attachment::adding(req, netns, device_key, ModeState::Child(state));
        let roce_ports = match (&pc.mode, pc.rdma) {
            (ModeConf::Macvlan(_), r) if r != RdmaConf::Off => {
                gids::roce_ports_of(ctx.sys, &parent.name)?
            }
            _ => Vec::new(),
        };
        Ok(ChildAdd {
            ctx,
            req,
            pc,
            netns,
            parent,
            child,
            roce_ports,
            att,
        })
    }

    fn run(&mut self, plan: &mut Plan<'a>) -> Result<CniResult> {
        let (ctx, req, netns) = (self.ctx, self.req, self.netns);
        // IPAM ADD (an exec of the IPAM plugin, the longest step) runs beside the intent record
        // and the child's creation.
        let (link, ipam) = crate::attach::lifecycle::add_beside_ipam(ctx, req, plan, |plan| {
            self.intent_and_child(plan)
        })?;
        let link = self.settle(link)?;
        let parent_ibdevs =
            crate::attach::modes::move_dev::ib_device_names(ctx.sys, &self.parent.name)?;
        let perm_ibdevs = match crate::attach::permissions::from_conf(&req.conf)? {
            Some(_) => parent_ibdevs.clone(),
            None => Vec::new(),
        };
        crate::attach::permissions::apply_permissions(ctx, req, &mut self.att, &perm_ibdevs, plan)?;
        let result = ipam.unwrap_or_default();
        configure_pod_interface(
            ctx.kernel,
            netns,
            link.index,
            &req.env.ifname,
            &result,
            plan,
        )?;
        self.record_gids(&result, plan)?;
        crate::attach::device_info::write_device_info(
            ctx,
            req,
            &mut self.att,
            &parent_ibdevs,
            plan,
        )?;
        // Appended without fsync, as in move mode (store.rs): only a power loss can lose it, and
        // that takes the pod netns and the child with it.
        crate::attach::lifecycle::finish_add(ctx, req, netns, &mut self.att, &link, result, plan)
    }

    /// Writes the intent record (durably), then creates the child in the pod with its final
    /// name: the part of ADD that runs beside IPAM ADD. Registers the undo of each.
    fn intent_and_child(&mut self, plan: &mut Plan<'a>) -> Result<Link> {
        let (ctx, req, netns, parent, child) =
            (self.ctx, self.req, self.netns, &self.parent, &self.child);
        let k = ctx.kernel;
        let pod = Ns::Pod(netns);

        crate::attach::lifecycle::write_intent(ctx, &self.att, plan)?;

        let is_ipoib = matches!(child.kind, LinkKind::Ipoib { .. });
        let spec = NewLink {
            name: req.env.ifname.clone(),
            kind: child.kind,
            parent_index: parent.index,
            target_netns: Some(pod),
            // An IPoIB child's MTU is set after creation: switching a child to connected mode
            // resets its MTU to the connected-mode maximum (ipoib_set_mode).
            mtu: if is_ipoib { None } else { child.mtu },
            hwaddr: child.hwaddr.clone(),
        };
        k.create_link(Ns::Host, &spec).map_err(|e| {
            if e.is_errno(nix::errno::Errno::EEXIST) {
                return taken(netns, &req.env.ifname, None);
            }
            let hint = if e.is_errno(nix::errno::Errno::ENODEV) && is_ipoib {
                format!(
                    " (the kernel does not take {} as an IPoIB parent: it must be the IPoIB \
                     netdev of an InfiniBand port, with ib_ipoib loaded)",
                    parent.name
                )
            } else {
                String::new()
            };
            Error::kernel(
                format!(
                    "creating {} child {} of {} in the pod netns {}{hint}",
                    child.kind.kind_name(),
                    req.env.ifname,
                    parent.name,
                    netns.path().display()
                ),
                e,
            )
        })?;
        let link = k
            .link_by_name(pod, &req.env.ifname)
            .kernel_ctx(|| format!("looking up the new {} in the pod", req.env.ifname))?
            .ok_or_else(|| {
                Error::DeviceNotFound(format!(
                    "{} was created but is not in the pod netns",
                    req.env.ifname
                ))
            })?;
        let index = link.index;
        plan.on_undo("create", move || {
            k.delete_link(pod, index)
                .kernel_ctx(|| "deleting the child interface")
        });
        // A kill here, before the record below, must still leave DEL able to find the child: the
        // intent already names it (macvlan: its address; IPoIB: kind, parent and name).
        plan.checkpoint("created")?;
        // What identifies the child (its address and ifindex) goes into the record at once, so a
        // plugin killed before the final record still leaves DEL able to find it (an IPoIB child
        // outlives its netns: the kernel refunds it to the host).
        let recorded = self.recorded();
        recorded.pod_interface.ifindex = Some(index);
        recorded.child.hwaddr = Some(link.hwaddr_string());
        ctx.store.update(&self.att)?;
        plan.checkpoint("create")?;
        Ok(link)
    }

    /// The child as created: an IPoIB child's MTU set (after its mode), and what the kernel
    /// reports of it recorded.
    fn settle(&mut self, mut link: Link) -> Result<Link> {
        let is_ipoib = matches!(self.child.kind, LinkKind::Ipoib { .. });
        if let (true, Some(mtu)) = (is_ipoib, self.child.mtu) {
            if link.mtu != mtu {
                self.ctx
                    .kernel
                    .set_link(
                        Ns::Pod(self.netns),
                        link.index,
                        &LinkChange {
                            mtu: Some(mtu),
                            ..Default::default()
                        },
                    )
                    .kernel_ctx(|| format!("setting MTU {mtu} on {}", self.req.env.ifname))?;
                link.mtu = mtu;
            }
        }
        let recorded = self.recorded();
        recorded.child.hwaddr = Some(link.hwaddr_string());
        recorded.child.ipoib = link.ipoib_info().map(IpoibRecord::from);
        recorded.child.macvlan_mode = link.macvlan_mode();
        recorded.pod_interface.ifindex = Some(link.index);
        recorded.pod_interface.mtu = Some(link.mtu);
        Ok(link)
    }

    /// The child's part of the record, as `decide` built it.
    fn recorded(&mut self) -> &mut ChildState {
        self.att
            .child_mut()
            .expect("ChildAdd::decide records a child attachment")
    }

    /// Step `gids`: waits for the kernel to add the pod IPs' RoCE GIDs on the parent's ports and
    /// records their indexes.
    fn record_gids(&mut self, result: &CniResult, plan: &mut Plan<'a>) -> Result<()> {
        if !self.roce_ports.is_empty() && !result.ips.is_empty() {
            let ifname = &self.req.env.ifname;
            let ips: Vec<_> = result.ips.iter().map(|i| i.address.ip()).collect();
            let found = gids::wait_for_gids(
                self.ctx.sys,
                &self.roce_ports,
                &ips,
                ifname,
                self.pc.gid_timeout,
            )?;
            let recorded = &mut self.recorded().pod_interface;
            recorded.gids = found;
            recorded.gid_view = Some(gids::GidView::Host);
        }
        plan.checkpoint("gids")
    }
}

/// Modes `macvlan` and `ipoib`. Their DEL (the shared frame around `release`) deletes the child
/// wherever it is (in the pod; or, for IPoIB, back in the host: the kernel refunds IPoIB netdevs
/// to the host when their netns dies, renamed `dev<ifindex>` on a clash). IPAM DEL runs beside
/// it: the kernel's netdev delete waits for an RCU grace period, which hides the IPAM exec.
pub struct ChildInterface;

impl super::ModeDriver for ChildInterface {
    fn add(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult> {
        add(ctx, req, pc)
    }

    fn check(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<()> {
        check(ctx, req, pc)
    }

    fn release(&self, ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()> {
        release_child(ctx.kernel, netns, att)
    }

    fn locks_device(&self) -> bool {
        false
    }
}

/// The recorded child: same kind and address. An IPoIB child whose address was not recorded yet
/// (a plugin killed right after creating it; the kernel picks IPoIB addresses) is recognised by
/// kind, parent and name, the pod name or the `dev<ifindex>` the kernel gives a refunded child
/// on a clash.
fn is_our_child(link: &Link, state: &ChildState, ifname: &str) -> bool {
    let rec = &state.child;
    if link.kind.as_deref() != Some(rec.kind.as_str()) {
        return false;
    }
    match rec.hwaddr.as_deref() {
        Some(recorded) => recorded == format_hwaddr(&link.hwaddr),
        None => {
            link.link == Some(state.parent.ifindex)
                && (link.name == ifname || link.name == format!("dev{}", link.index))
        }
    }
}

/// Deletes an attachment's child interface from wherever it is now.
pub fn release_child(kernel: &dyn NetOps, netns: Option<&Path>, att: &Attachment) -> Result<()> {
    let Some(state) = att.child() else {
        return Err(not_a_child(att));
    };
    if crate::attach::plan::test_fault("skip-child-delete") {
        return Ok(());
    }
    let ours = |l: &Link| is_our_child(l, state, &att.ifname);
    if let Ok(Some(ns)) = crate::attach::lifecycle::pod_netns(netns, att) {
        let pod = Ns::Pod(&ns);
        let err = |e| Error::kernel(format!("looking for {} in the pod", att.ifname), e);
        let by_index = match state.pod_interface.ifindex {
            Some(i) => kernel.link_by_index(pod, i).map_err(err)?,
            None => None,
        };
        let found = match by_index.filter(ours) {
            Some(l) => Some(l),
            None => kernel
                .link_by_name(pod, &att.ifname)
                .map_err(err)?
                .filter(ours),
        };
        if let Some(link) = found {
            return kernel
                .delete_link(pod, link.index)
                .kernel_ctx(|| format!("deleting {} from the pod", att.ifname));
        }
    }
    // Refunded to the host (IPoIB), maybe renamed dev<ifindex>: match the recorded identity.
    let err = |e| Error::kernel(format!("looking for {} in the host", att.ifname), e);
    let mut found = match state.pod_interface.ifindex {
        Some(i) => kernel.link_by_index(Ns::Host, i).map_err(err)?.filter(ours),
        None => None,
    };
    if found.is_none() && state.child.kind == ChildKind::Ipoib {
        let mut candidates: Vec<Link> = kernel
            .links(Ns::Host)
            .map_err(err)?
            .into_iter()
            .filter(ours)
            .collect();
        if candidates.len() > 1 {
            // Only an unrecorded address can match several: never guess which to delete.
            return Err(Error::State(format!(
                "{} (an IPoIB child of {} whose address was never recorded) may be any of {} in \
                 the host; delete the right one with `ip link del`, then retry DEL",
                att.ifname,
                state.parent.name,
                candidates
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        found = candidates.pop();
    }
    match found {
        Some(link) => kernel.delete_link(Ns::Host, link.index).kernel_ctx(|| {
            format!(
                "deleting {} (returned to the host as {})",
                att.ifname, link.name
            )
        }),
        None => Ok(()),
    }
}

/// CHECK: the child is in the pod with the recorded kind, address, MTU and mode/pkey (read back
/// through IFLA_INFO_DATA), and has prevResult's addresses; then IPAM CHECK.
pub fn check(ctx: &Ctx<'_>, req: &Request, _pc: &PluginConf) -> Result<()> {
    let (att, ns) = crate::attach::check::check_subject(ctx, req)?;
    let link = crate::attach::check::check_pod_link(ctx, req, &ns)?;
    let state = att.child().ok_or_else(|| not_a_child(&att))?;
    let rec = &state.child;
    let mismatch = |what: &str, have: String, want: String| {
        Error::CheckFailed(format!(
            "{} in the pod has {what} {have}, expected {want}",
            req.env.ifname
        ))
    };
    if link.kind.as_deref() != Some(rec.kind.as_str()) {
        return Err(mismatch(
            "kind",
            format!("{:?}", link.kind),
            rec.kind.as_str().to_string(),
        ));
    }
    if rec.hwaddr.as_deref() != Some(link.hwaddr_string().as_str()) {
        return Err(mismatch(
            "hwaddr",
            link.hwaddr_string(),
            format!("{:?}", rec.hwaddr),
        ));
    }
    if let Some(mtu) = state.pod_interface.mtu {
        if link.mtu != mtu {
            return Err(mismatch("MTU", link.mtu.to_string(), mtu.to_string()));
        }
    }
    if let (Some(want), Some(have)) = (rec.ipoib, link.ipoib_info()) {
        let have = IpoibRecord::from(have);
        if have != want {
            return Err(mismatch(
                "IPoIB pkey/mode/umcast",
                format!("{have:?}"),
                format!("{want:?}"),
            ));
        }
    }
    if rec.macvlan_mode.is_some() && link.macvlan_mode() != rec.macvlan_mode {
        return Err(mismatch(
            "macvlan mode",
            format!("{:?}", link.macvlan_mode()),
            format!("{:?}", rec.macvlan_mode),
        ));
    }
    crate::attach::check::check_prev_addresses(ctx.kernel, &ns, &link, req)?;
    crate::attach::check::check_gids(ctx.sys, &ns, &att)?;
    ctx.ipam.check(req)
}

/// A record of another mode handed to this one: the record changed under the conf.
fn not_a_child(att: &Attachment) -> Error {
    Error::State(format!(
        "record {} is of mode {}, not a child interface (macvlan or ipoib)",
        att.id(),
        att.mode().as_str()
    ))
}
