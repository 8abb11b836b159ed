//! What the child-interface modes (macvlan.rs, ipoib.rs) share: a child of a host RoCE or IPoIB
//! netdev, created directly inside the pod netns with its final name (shared netns mode: the ib
//! device stays in the host and is shared). A child mode decides only the child itself
//! ([`ChildMode`]); its selection of the parent, ADD, record, CHECK and DEL are here.
//!
//! One RTM_NEWLINK carries IFLA_LINK (the parent, in the host), IFLA_NET_NS_FD (the pod) and
//! IFLA_IFNAME: creating in place costs a fraction of a millisecond, against tens of
//! milliseconds for create-then-move (the netns move is the expensive kernel operation), and
//! the host's udev never sees a temporary device.

use std::path::Path;

pub use crate::records::attachment::{ChildKind, ChildRecord, IpoibRecord};

use crate::attach::gids::{self, GidSource, GidView};
use crate::attach::ib_device::RdmaConf;
use crate::attach::modes::{ModeAdd, ModeDriver, Release};
use crate::attach::plan::Plan;
use crate::attach::record::{
    Attachment, HostDevice, HostSide, ModeRecord, ModeWire, PodInterface, RecordMismatch,
};
use crate::attach::select::{select_parent, DeviceId, Selector};
use crate::attach::steps::{CheckSubject, PodSide, Step};
use crate::attach::{open_netns, Ctx};
use crate::cni::result::CniResult;
use crate::cni::{NetConf, Request};
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::{format_hwaddr, Link, LinkChange, LinkKind, NetOps, NewLink};
use crate::kernel::{Netns, Ns};

/// ARPHRD_INFINIBAND (linux/if_arp.h): the link type of IPoIB netdevs.
pub const ARPHRD_INFINIBAND: u16 = 32;
/// ARPHRD_ETHER.
pub const ARPHRD_ETHER: u16 = 1;

/// A mode whose pod interface is a child of a host netdev. What it decides is the child
/// (kind, MTU, address); everything else of a [`ModeDriver`] it gets from this file.
pub trait ChildMode: Sized + 'static {
    /// See [`ModeDriver::NAME`].
    const NAME: &'static str;
    /// The child's IFLA_INFO_KIND.
    const KIND: ChildKind;
    /// A parent netdev name, for messages that say what `master` could be.
    const EXAMPLE_PARENT: &'static str;
    /// See [`ModeDriver::STEPS`].
    const STEPS: &'static [&'static dyn Step];
    /// See [`ModeDriver::Settings`].
    type Settings: std::fmt::Debug + Clone + PartialEq + Eq;

    fn settings(conf: &NetConf) -> Result<Self::Settings>;

    /// The child of `parent`, with conf `mtu`, decided before anything changes.
    fn plan(
        parent: &Link,
        settings: &Self::Settings,
        mtu: Option<u32>,
        req: &Request,
    ) -> Result<ChildPlan>;

    /// Whether ADD waits for the pod IPs' RoCE GIDs on the parent's ports (with conf `rdma`).
    fn waits_for_gids(rdma: RdmaConf) -> bool;
}

impl<C: ChildMode> ModeDriver for C {
    const NAME: &'static str = C::NAME;
    const LOCKS_DEVICE: bool = false;
    const STEPS: &'static [&'static dyn Step] = C::STEPS;
    type Settings = C::Settings;
    type Target = Vec<Selector>;
    type State = ChildState;

    /// A child shares its parent's ib device and never moves one: `rdma: exclusive` is refused.
    fn settings(conf: &NetConf, rdma: RdmaConf) -> Result<C::Settings> {
        let settings = C::settings(conf)?;
        if rdma == RdmaConf::Exclusive {
            return Err(Error::UnsupportedField {
                field: "rdma".into(),
                value: "exclusive".into(),
                msg: format!(
                    "mode {} shares the parent's ib device and never moves one: use auto \
                     (default; refused in exclusive netns mode) or off",
                    C::NAME
                ),
            });
        }
        Ok(settings)
    }

    fn target(req: &Request, device_id: Option<&DeviceId>) -> Result<Vec<Selector>> {
        parent_selectors(req, device_id, C::NAME, C::EXAMPLE_PARENT)
    }

    fn add(ctx: &Ctx<'_>, req: &Request, add: &ModeAdd<'_, C>) -> Result<CniResult> {
        let netns = open_netns(req.env.netns.as_deref())?;
        let parent = select_parent(ctx.kernel, ctx.sys, &add.target)?;
        refuse_exclusive_netns_mode(ctx, add.conf.plugin.rdma, C::NAME, &parent)?;
        let child = C::plan(&parent, add.settings, add.conf.plugin.mtu, req)?;
        let gids = match C::waits_for_gids(add.conf.plugin.rdma) {
            true => gids::roce_ports_of(ctx.sys, &parent.name)?,
            false => Vec::new(),
        };
        // The pod's IPs get their GIDs on the parent's ports, in the host (shared netns mode).
        let gids = (!gids.is_empty()).then_some(GidSource {
            ports: gids,
            view: GidView::Host,
        });
        let add = ChildAdd::decide(ctx, req, add, &netns, parent, child, gids)?;
        crate::attach::plan::transact(ctx.fault.clone(), |plan| add.run(plan))
    }

    /// CHECK: the child is in the pod with the recorded kind, address, MTU and mode/pkey (read
    /// back through IFLA_INFO_DATA).
    fn check(ctx: &Ctx<'_>, on: &CheckSubject<'_>, state: &ChildState) -> Result<Option<Link>> {
        let link = crate::attach::check::check_pod_link(ctx, on.req, on.ns)?;
        check_child(&link, state, &on.req.env.ifname)?;
        Ok(Some(link))
    }

    fn release(ctx: &Ctx<'_>, release: &Release<'_, ChildState>) -> Result<()> {
        release_child(ctx.kernel, release.netns, release.att, release.state)
    }

    fn state_from_wire(wire: ModeWire) -> std::result::Result<ChildState, RecordMismatch> {
        ChildState::from_wire(wire, C::KIND, C::NAME)
    }

    fn netns_mode_needed(rdma: RdmaConf) -> Option<NetnsMode> {
        (rdma != RdmaConf::Off).then_some(NetnsMode::Shared)
    }
}

/// What the child will be, decided from the conf and the parent before anything changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildPlan {
    pub kind: LinkKind,
    /// MTU to end with; None keeps what the kernel gives (the parent's, for macvlan).
    pub mtu: Option<u32>,
    /// The address to set; None lets the kernel pick.
    pub hwaddr: Option<Vec<u8>>,
    /// The address the child will have once created, when known before (the one set, or a
    /// passthru macvlan's parent's): the intent record identifies the child by it. None for
    /// IPoIB, whose address (QPN and port GID) the kernel assigns.
    pub expected_hwaddr: Option<String>,
    /// Human-readable choice, logged and recorded (e.g. "connected, MTU 65520 (auto)").
    pub summary: String,
}

/// What a child-interface mode records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildState {
    /// The host netdev the child was created on.
    pub parent: HostDevice,
    pub child: ChildRecord,
    pub pod_interface: PodInterface,
}

impl ChildState {
    /// The state of mode `mode`, whose children are of kind `kind`, from a record: `host` is
    /// the parent. Fields a child mode never writes (`rdma`) are ignored.
    fn from_wire(
        mut wire: ModeWire,
        kind: ChildKind,
        mode: &'static str,
    ) -> std::result::Result<ChildState, RecordMismatch> {
        let child = wire.child.take().ok_or(RecordMismatch::FieldMissing {
            mode,
            field: "child",
        })?;
        if child.kind != kind {
            return Err(RecordMismatch::ChildKind {
                mode,
                kind: child.kind.as_str(),
            });
        }
        Ok(ChildState {
            pod_interface: wire.take_pod_interface(),
            parent: wire.host,
            child,
        })
    }
}

impl ModeRecord for ChildState {
    fn to_wire(&self, _ifname: &str) -> ModeWire {
        ModeWire {
            child: Some(self.child.clone()),
            ..ModeWire::new(self.parent.clone(), Some(&self.pod_interface))
        }
    }

    fn pod_interface(&self) -> Option<&PodInterface> {
        Some(&self.pod_interface)
    }

    fn pod_interface_mut(&mut self) -> Option<&mut PodInterface> {
        Some(&mut self.pod_interface)
    }

    fn ib_device(&self) -> Option<&crate::attach::ib_device::RdmaRecord> {
        None
    }

    fn host_side(&self) -> HostSide<'_> {
        self.parent.side()
    }

    fn listed_device(&self) -> String {
        format!("{} on {}", self.child.kind.as_str(), self.parent.name)
    }
}

/// Which parent: every selector given (a device plugin's PCI or auxiliary `deviceID`, `master`,
/// `rdmaDevice`) must name the same netdev. A device plugin ID that selects nothing (the RDMA
/// shared device plugin's index) is logged (and kept in the record, as every mode does).
fn parent_selectors(
    req: &Request,
    device_id: Option<&DeviceId>,
    mode: &str,
    example_parent: &str,
) -> Result<Vec<Selector>> {
    let selectors = crate::attach::select::parent_selectors(&req.conf, device_id)?;
    let opaque = device_id.filter(|id| id.selector().is_none());
    if let Some(id) = opaque {
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
                "mode {mode} needs `master` (the parent netdev, e.g. {example_parent}), \
                 `rdmaDevice` (its ib device) or a device plugin's PCI deviceID{}",
                opaque
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
fn refuse_exclusive_netns_mode(
    ctx: &Ctx<'_>,
    rdma: RdmaConf,
    mode: &str,
    parent: &Link,
) -> Result<()> {
    if rdma == RdmaConf::Off {
        return Ok(());
    }
    let netns_mode = ctx
        .rdma
        .netns_mode()
        .kernel_ctx(|| "reading the RDMA subsystem's netns mode")?;
    if netns_mode != Some(NetnsMode::Exclusive) {
        return Ok(());
    }
    Err(Error::RdmaUnavailable(format!(
        "mode {mode} would give the pod a child of {} but no ib device: the RDMA subsystem is in \
         exclusive netns mode, where the parent's ib device stays in the host netns. Use shared \
         netns mode with the RDMA shared device plugin (remove `options ib_core netns_mode=0`, \
         or `rdma system set netns shared` before any pod starts), or mode move (or rdma chained \
         after sriov) with a VF from the SR-IOV network device plugin; set \"rdma\": \"off\" \
         to attach the netdev without RDMA",
        parent.name
    )))
}

fn taken(netns: &Netns, ifname: &str, index: Option<u32>) -> Error {
    Error::IfnameTaken(format!(
        "the pod netns {} already has an interface named {ifname}{}; pick another CNI_IFNAME",
        netns.path().display(),
        index.map(|i| format!(" (ifindex {i})")).unwrap_or_default()
    ))
}

/// One child-mode ADD: what is decided before the first change, then one method per step.
struct ChildAdd<'a> {
    ctx: &'a Ctx<'a>,
    req: &'a Request,
    conf: &'a crate::attach::config::AddConf<'a>,
    netns: &'a Netns,
    parent: Link,
    child: ChildPlan,
    /// Where the pod's GIDs appear, if the mode waits for them.
    gids: Option<GidSource>,
    att: Attachment,
}

impl<'a> ChildAdd<'a> {
    /// The intent record of the child `child` of `parent`, once CNI_IFNAME is known to be free.
    fn decide<C: ChildMode>(
        ctx: &'a Ctx<'a>,
        req: &'a Request,
        add: &'a ModeAdd<'a, C>,
        netns: &'a Netns,
        parent: Link,
        child: ChildPlan,
        gids: Option<GidSource>,
    ) -> Result<ChildAdd<'a>> {
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
        let state = ChildState {
            parent: parent_record(&parent),
            child: ChildRecord {
                kind: ChildKind::of(&child.kind),
                hwaddr: child.expected_hwaddr.clone(),
                ipoib: None,
                macvlan_mode: None,
                summary: child.summary.clone(),
            },
            pod_interface: PodInterface::default(),
        };
        let mode_state = crate::attach::modes::ModeState::of::<C>(state);
        let device_id = add.conf.recorded_device_id();
        let att = Attachment::adding(req, netns, device_key, mode_state, device_id);
        Ok(ChildAdd {
            ctx,
            req,
            conf: &add.conf,
            netns,
            parent,
            child,
            gids,
            att,
        })
    }

    fn run(mut self, plan: &mut Plan<'a>) -> Result<CniResult> {
        let (ctx, req) = (self.ctx, self.req);
        // IPAM ADD (an exec of the IPAM plugin, the longest step) runs beside the intent record
        // and the child's creation.
        let (link, ipam) = crate::attach::lifecycle::add_beside_ipam(ctx, req, plan, |plan| {
            self.intent_and_child(plan)
        })?;
        let link = self.settle(link)?;
        // The pod shares the parent's ib devices: their char devices are the pod's, and the
        // device-info file names them when the parent has no PCI function.
        let parent_ibdevs =
            crate::attach::modes::move_dev::ib_device_names(ctx.sys, &self.parent.name)?;
        let result = ipam.unwrap_or_default();
        let mut pod = PodSide::new(ctx, req, self.conf, self.netns, self.att, result);
        pod.link = Some(link);
        pod.ib_devices = parent_ibdevs.clone();
        pod.info_ib_devices = parent_ibdevs;
        pod.gids = self.gids;
        crate::attach::steps::run(pod, plan)
    }

    /// Writes the intent record (durably), then creates the child in the pod with its final
    /// name: the part of ADD that runs beside IPAM ADD. Registers the undo of each.
    fn intent_and_child(&mut self, plan: &mut Plan<'a>) -> Result<Link> {
        let (ctx, netns) = (self.ctx, self.netns);
        let k = ctx.kernel;
        let pod = Ns::Pod(netns);
        crate::attach::lifecycle::write_intent(ctx, self.conf, &mut self.att, plan)?;
        let link = self.create()?;
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

    /// One RTM_NEWLINK creates the child in the pod under its final name; then it is looked up.
    fn create(&self) -> Result<Link> {
        let (k, req, netns, parent, child) = (
            self.ctx.kernel,
            self.req,
            self.netns,
            &self.parent,
            &self.child,
        );
        let pod = Ns::Pod(netns);
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
        k.create_link(Ns::Host, &spec)
            .map_err(|e| self.create_error(e))?;
        k.link_by_name(pod, &req.env.ifname)
            .kernel_ctx(|| format!("looking up the new {} in the pod", req.env.ifname))?
            .ok_or_else(|| {
                Error::DeviceNotFound(format!(
                    "{} was created but is not in the pod netns",
                    req.env.ifname
                ))
            })
    }

    /// The kernel refused the child: EEXIST is CNI_IFNAME taken; ENODEV from an IPoIB parent
    /// means the kernel does not take it as one.
    fn create_error(&self, e: crate::kernel::KernelError) -> Error {
        let (req, netns, parent, child) = (self.req, self.netns, &self.parent, &self.child);
        if e.is_errno(nix::errno::Errno::EEXIST) {
            return taken(netns, &req.env.ifname, None);
        }
        let hint = if e.is_errno(nix::errno::Errno::ENODEV)
            && matches!(child.kind, LinkKind::Ipoib { .. })
        {
            format!(
                " (the kernel does not take {} as an IPoIB parent: it must be the IPoIB netdev \
                 of an InfiniBand port, with ib_ipoib loaded)",
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
            .state_mut()
            .expect("ChildAdd::decide records a child attachment")
    }
}

/// A child's parent as it is now, recorded for DEL to recognize the child by.
fn parent_record(parent: &Link) -> HostDevice {
    HostDevice {
        name: parent.name.clone(),
        ifindex: parent.index,
        mtu: parent.mtu,
        hwaddr: parent.hwaddr_string(),
        perm_hwaddr: None,
        pci: parent.pci_address().map(str::to_string),
        was_up: parent.up,
        addresses: Vec::new(),
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

/// Deletes an attachment's child interface from wherever it is now: in the pod; or, for IPoIB,
/// back in the host (the kernel refunds IPoIB netdevs to the host when their netns dies, renamed
/// `dev<ifindex>` on a clash). DEL runs IPAM DEL beside it: the kernel's netdev delete waits for
/// an RCU grace period, which hides the IPAM exec.
pub fn release_child(
    kernel: &dyn NetOps,
    netns: Option<&Path>,
    att: &Attachment,
    state: &ChildState,
) -> Result<()> {
    if crate::attach::plan::test_fault("skip-child-delete") {
        return Ok(());
    }
    let ours = |l: &Link| is_our_child(l, state, &att.ifname);
    if let Ok(Some(ns)) = crate::attach::lifecycle::pod_netns(netns, att) {
        let pod = Ns::Pod(&ns);
        if let Some(link) = find_child(kernel, pod, state.pod_interface.ifindex, att, &ours)? {
            return kernel
                .delete_link(pod, link.index)
                .kernel_ctx(|| format!("deleting {} from the pod", att.ifname));
        }
    }
    match refunded_child(kernel, att, state, &ours)? {
        Some(link) => kernel.delete_link(Ns::Host, link.index).kernel_ctx(|| {
            format!(
                "deleting {} (returned to the host as {})",
                att.ifname, link.name
            )
        }),
        None => Ok(()),
    }
}

/// The child in the pod: by its recorded ifindex, else by its pod name; either way only if it is
/// `ours`.
fn find_child(
    kernel: &dyn NetOps,
    pod: Ns<'_>,
    index: Option<u32>,
    att: &Attachment,
    ours: &dyn Fn(&Link) -> bool,
) -> Result<Option<Link>> {
    let err = |e| Error::kernel(format!("looking for {} in the pod", att.ifname), e);
    let by_index = match index {
        Some(i) => kernel.link_by_index(pod, i).map_err(err)?,
        None => None,
    };
    match by_index.filter(|l| ours(l)) {
        Some(l) => Ok(Some(l)),
        None => Ok(kernel
            .link_by_name(pod, &att.ifname)
            .map_err(err)?
            .filter(|l| ours(l))),
    }
}

/// The child refunded to the host (IPoIB), maybe renamed dev<ifindex>: by its recorded ifindex,
/// else (IPoIB) by a dump matched on the recorded identity.
fn refunded_child(
    kernel: &dyn NetOps,
    att: &Attachment,
    state: &ChildState,
    ours: &dyn Fn(&Link) -> bool,
) -> Result<Option<Link>> {
    let err = |e| Error::kernel(format!("looking for {} in the host", att.ifname), e);
    let found = match state.pod_interface.ifindex {
        Some(i) => kernel
            .link_by_index(Ns::Host, i)
            .map_err(err)?
            .filter(|l| ours(l)),
        None => None,
    };
    if found.is_some() || state.child.kind != ChildKind::Ipoib {
        return Ok(found);
    }
    let mut candidates: Vec<Link> = kernel
        .links(Ns::Host)
        .map_err(err)?
        .into_iter()
        .filter(|l| ours(l))
        .collect();
    if candidates.len() > 1 {
        // Only an unrecorded address can match several: never guess which to delete.
        return Err(Error::State(format!(
            "{} (an IPoIB child of {} whose address was never recorded) may be any of {} in the \
             host; delete the right one with `ip link del`, then retry DEL",
            att.ifname,
            state.parent.name,
            candidates
                .iter()
                .map(|l| l.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(candidates.pop())
}

/// The pod's `link` is the recorded child: kind, address, MTU, IPoIB and macvlan settings.
fn check_child(link: &Link, state: &ChildState, ifname: &str) -> Result<()> {
    let rec = &state.child;
    let mismatch = |what: &str, have: String, want: String| {
        Err(Error::CheckFailed(format!(
            "{ifname} in the pod has {what} {have}, expected {want}"
        )))
    };
    if link.kind.as_deref() != Some(rec.kind.as_str()) {
        let want = rec.kind.as_str().to_string();
        return mismatch("kind", format!("{:?}", link.kind), want);
    }
    if rec.hwaddr.as_deref() != Some(link.hwaddr_string().as_str()) {
        return mismatch("hwaddr", link.hwaddr_string(), format!("{:?}", rec.hwaddr));
    }
    if let Some(mtu) = state.pod_interface.mtu.filter(|&m| m != link.mtu) {
        return mismatch("MTU", link.mtu.to_string(), mtu.to_string());
    }
    if let (Some(want), Some(have)) = (rec.ipoib, link.ipoib_info().map(IpoibRecord::from)) {
        if have != want {
            let (have, want) = (format!("{have:?}"), format!("{want:?}"));
            return mismatch("IPoIB pkey/mode/umcast", have, want);
        }
    }
    if rec.macvlan_mode.is_some() && link.macvlan_mode() != rec.macvlan_mode {
        let have = format!("{:?}", link.macvlan_mode());
        return mismatch("macvlan mode", have, format!("{:?}", rec.macvlan_mode));
    }
    Ok(())
}
