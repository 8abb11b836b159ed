//! Step `soft-roce` (conf `"softRoce": true`, modes move and macvlan): the pod gets a Soft-RoCE
//! (rdma_rxe) ib device of its own, bound to the pod interface, so that a node without RDMA
//! hardware still gives each pod real verbs over its own interface.
//!
//! The device is added through RDMA netlink from a socket opened inside the pod's netns: the
//! kernel finds the netdev by name in the socket's netns, and Linux 7.1 and later open rxe's
//! UDP socket (RoCE v2, port 4791) in the netdev's netns, which is what lets RoCE reach the pod.
//! Earlier kernels have one such socket, in the host netns: a pod's device would send but never
//! receive. That is told apart by behaviour, not by version: once the device is added, a UDP
//! socket must be bound to 4791 in the pod's netns, or ADD is refused. The device registers in
//! the host netns; in exclusive RDMA netns mode it is then moved into the pod's.
//!
//! Its name comes from the attachment alone ([`device_name`]): ib device names are node-wide,
//! so it must differ between attachments, and DEL finds it again from the record, which holds
//! the name before the device exists (a plugin killed right after the add leaves DEL the name
//! to delete). rxe removes the device itself when its netdev is deleted or leaves its netns,
//! asynchronously; DEL deletes what is left and waits until the name is free again.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::attach::gids::{GidSource, GidView};
use crate::attach::ib_device::RdmaConf;
use crate::attach::modes::Mode;
use crate::attach::plan::Plan;
use crate::attach::record::Attachment;
use crate::attach::steps::{CheckSubject, PodSide, Step, StepAdd};
use crate::attach::Ctx;
use crate::cni::NetConf;
use crate::error::{Error, KernelContext, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rdma_ops::{RdmaOps, PORT_ACTIVE, ROCE_V2_PORT};
use crate::kernel::rtnetlink::Link;
use crate::kernel::{KernelError, Netns, Ns};

pub use crate::records::attachment::SoftRoceRecord;

/// The conf field, and the key of the step's record in `Attachment::steps`.
pub const CONF_KEY: &str = crate::records::attachment::SOFT_ROCE_STEP;

/// The RDMA link type of Soft-RoCE.
const LINK_TYPE: &str = "rxe";

/// rxe devices have one port.
const PORT: u32 = 1;

/// How many names ADD tries when other attachments hold the ones before.
const NAME_TRIES: u32 = 4;

/// How long DEL waits for a device rxe is unregistering (its netdev went first) to go.
const GONE_TIMEOUT: Duration = Duration::from_secs(5);

/// Step `soft-roce` (checkpoints `soft-roce-link`, `soft-roce-netns` in exclusive netns mode,
/// `soft-roce`). It runs after `addresses`: rxe's port follows the netdev's carrier, and the
/// kernel adds a GID for every address the netdev has when the device registers.
#[derive(Debug)]
pub struct SoftRoce;

/// [`SoftRoce`] as the conf asks for it.
#[derive(Debug)]
struct SoftRoceAdd {
    enabled: bool,
}

impl Step for SoftRoce {
    fn configure(&self, conf: &NetConf) -> Result<Box<dyn StepAdd>> {
        Ok(Box::new(SoftRoceAdd {
            enabled: enabled(conf)?,
        }))
    }

    fn check(&self, ctx: &Ctx<'_>, subject: &CheckSubject<'_>, _link: Option<&Link>) -> Result<()> {
        match recorded(subject.att)? {
            Some(rec) => check_device(ctx.rdma, subject.ns, &rec),
            None => Ok(()),
        }
    }

    fn release(&self, ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()> {
        let Some(rec) = recorded(att)? else {
            return Ok(());
        };
        let pod = crate::attach::lifecycle::pod_netns(netns, att)?;
        remove_device(ctx.rdma, pod.as_ref(), &rec)
    }
}

impl StepAdd for SoftRoceAdd {
    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let (ctx, netns) = (pod.ctx, pod.netns);
        let exclusive = netns_mode(ctx.rdma)? == NetnsMode::Exclusive;
        let att = &pod.att;
        let mut rec = SoftRoceRecord {
            ibdev: device_name(&att.network, &att.container_id, &att.ifname),
            index: None,
            netdev: pod.link()?.name.clone(),
            in_pod: false,
        };
        add_under_a_free_name(pod, &mut rec)?;
        rec.index = Some(registered(ctx, netns, &rec, plan)?);
        record(pod, &rec)?;
        plan.checkpoint("soft-roce-link")?;
        crate::log::timed(
            || "rxe's UDP socket in the pod netns".to_string(),
            || require_socket_in_pod(ctx.rdma, netns, &rec),
        )?;
        if exclusive {
            move_into_pod(ctx.rdma, netns, &rec)?;
            rec.in_pod = true;
            record(pod, &rec)?;
            plan.checkpoint("soft-roce-netns")?;
        }
        crate::log::timed(
            || format!("port {PORT} of {} ACTIVE", rec.ibdev),
            || wait_until_active(ctx.rdma, netns, &rec, pod.conf.plugin.gid_timeout),
        )?;
        publish(pod, &rec)?;
        plan.checkpoint("soft-roce")
    }
}

/// Conf `softRoce`: absent or null is false.
pub fn enabled(conf: &NetConf) -> Result<bool> {
    #[derive(Deserialize)]
    struct Fields {
        #[serde(rename = "softRoce")]
        soft_roce: Option<bool>,
    }
    Ok(conf.fields::<Fields>()?.soft_roce.unwrap_or(false))
}

/// `softRoce` where the step cannot run, refused when the conf is read: in modes that do not
/// run it (an IPoIB child is an InfiniBand netdev, which rxe cannot bind; in chained mode the
/// previous plugin made the interface and the ib device comes with the VF), and beside
/// `"rdma": "off"`, which asks for no ib device at all.
pub fn refuse_where_unsupported(conf: &NetConf, mode: Mode, rdma: RdmaConf) -> Result<()> {
    if !enabled(conf)? {
        return Ok(());
    }
    let why = match mode {
        Mode::Move | Mode::Macvlan if rdma == RdmaConf::Off => {
            "rdma \"off\" asks for no ib device and no GIDs, and softRoce gives the pod one: drop \
             one of the two"
                .to_string()
        }
        Mode::Move | Mode::Macvlan => return Ok(()),
        Mode::Ipoib => "mode ipoib makes an IPoIB child, an InfiniBand netdev, and Soft-RoCE \
                        binds Ethernet netdevs only: use mode macvlan or move on an Ethernet \
                        netdev"
            .to_string(),
        other => format!(
            "mode {} does not make the pod interface (the plugin before it did) and moves the \
             VF's own ib device: softRoce is for modes move and macvlan",
            other.as_str()
        ),
    };
    Err(Error::UnsupportedField {
        field: CONF_KEY.into(),
        value: "true".into(),
        msg: why,
    })
}

/// The ib device name of the attachment (network, container, interface): `rxe_` and 11 hex
/// digits of a hash of the three, the same for every invocation of every binary
/// ([`stable_hash`](crate::records::atomic::stable_hash)). UCX holds a device's name in 16 bytes
/// with its NUL (UCT_MD_NAME_MAX) and does not find a device whose name is longer.
pub fn device_name(network: &str, container_id: &str, ifname: &str) -> String {
    nth_name(network, container_id, ifname, 0)
}

/// The `nth` name of the attachment: [`device_name`] for 0, else a hash that also takes `nth`.
fn nth_name(network: &str, container_id: &str, ifname: &str, nth: u32) -> String {
    let nth = nth.to_string();
    let parts = [
        network,
        container_id,
        ifname,
        if nth == "0" { "" } else { &nth },
    ];
    let hash = crate::records::atomic::stable_hash(
        parts
            .iter()
            .flat_map(|part| part.bytes().chain(std::iter::once(0))),
    );
    format!("rxe_{:011x}", hash >> 20)
}

/// What the step recorded of `att`; None when it made nothing.
fn recorded(att: &Attachment) -> Result<Option<SoftRoceRecord>> {
    att.steps.get(CONF_KEY).map_err(|e| {
        Error::State(format!(
            "the record of {} has an unreadable `steps.{CONF_KEY}`: {e}",
            att.id()
        ))
    })
}

/// Writes `rec` into the attachment's record, on disk at once.
fn record(pod: &mut PodSide<'_>, rec: &SoftRoceRecord) -> Result<()> {
    pod.att
        .steps
        .set(CONF_KEY, rec)
        .map_err(|e| Error::State(format!("recording the Soft-RoCE device: {e}")))?;
    pod.ctx.store.update(&pod.att)
}

/// The RDMA subsystem's netns mode; a kernel without RDMA netlink cannot make the device.
fn netns_mode(rdma: &dyn RdmaOps) -> Result<NetnsMode> {
    rdma.netns_mode()
        .kernel_ctx(|| "reading the RDMA subsystem's netns mode")?
        .ok_or_else(|| {
            Error::RdmaUnavailable(format!(
                "{CONF_KEY}: this kernel has no RDMA netlink (ib_core is not loaded, or the \
                 kernel has no InfiniBand support), so no Soft-RoCE device can be made: load \
                 rdma_rxe (`modprobe rdma_rxe`, which loads ib_core), or remove {CONF_KEY}"
            ))
        })
}

/// RDMA_NLDEV_CMD_NEWLINK from the pod's netns, each name recorded before it is tried: the
/// attachment's own name ([`device_name`]), or when another attachment's record holds it (two
/// attachments whose names hash alike) the next of [`NAME_TRIES`].
fn add_under_a_free_name(pod: &mut PodSide<'_>, rec: &mut SoftRoceRecord) -> Result<()> {
    let (ctx, netns) = (pod.ctx, pod.netns);
    for nth in 1..=NAME_TRIES {
        record(pod, rec)?;
        let refused = match ctx
            .rdma
            .add_link(Ns::Pod(netns), &rec.ibdev, LINK_TYPE, &rec.netdev)
        {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if !is_clash(&refused) || nth == NAME_TRIES || !held_by_another(ctx, &pod.att, &rec.ibdev) {
            return Err(add_error(ctx, netns, rec, refused));
        }
        crate::log_info!(
            "{}: the name {} is another attachment's; trying another",
            rec.netdev,
            rec.ibdev
        );
        let att = &pod.att;
        rec.ibdev = nth_name(&att.network, &att.container_id, &att.ifname, nth);
    }
    unreachable!("the last try returns")
}

/// Whether another attachment's record holds the Soft-RoCE device `name`.
fn held_by_another(ctx: &Ctx<'_>, att: &Attachment, name: &str) -> bool {
    ctx.store.list_all().0.iter().any(|other| {
        !other.is(&att.network, &att.container_id, &att.ifname)
            && recorded(other).is_ok_and(|r| r.is_some_and(|r| r.ibdev == name))
    })
}

/// The new device's index, where the kernel registers it (the host netns); registers the undo.
fn registered<'a>(
    ctx: &'a Ctx<'a>,
    netns: &'a Netns,
    rec: &SoftRoceRecord,
    plan: &mut Plan<'a>,
) -> Result<u32> {
    let (rdma, undo) = (ctx.rdma, rec.clone());
    plan.on_undo("soft-roce", move || remove_device(rdma, Some(netns), &undo));
    let index = ctx
        .rdma
        .device_index(Ns::Host, &rec.ibdev)
        .kernel_ctx(|| format!("{CONF_KEY}: looking up the new ib device {}", rec.ibdev))?
        .ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "the Soft-RoCE device {} on {} was added but is not in the host netns, where \
                 the kernel registers it",
                rec.ibdev, rec.netdev
            ))
        })?;
    crate::log_info!(
        "{}: Soft-RoCE device {} (index {index}) added from the pod netns",
        rec.netdev,
        rec.ibdev
    );
    Ok(index)
}

/// What a refused NEWLINK means: nldev.c answers EINVAL when no driver registered the link
/// type (no rdma_rxe to load); a name that is taken is EEXIST on Linux 7 (ENFILE on 6.1), as is
/// a netdev that has a rxe device already, so which of the two is looked up.
fn add_error(ctx: &Ctx<'_>, netns: &Netns, rec: &SoftRoceRecord, e: KernelError) -> Error {
    let (dev, netdev) = (&rec.ibdev, &rec.netdev);
    if e.is_errno(nix::errno::Errno::EINVAL) && !ctx.sys.device_exists("module/rdma_rxe") {
        return Error::RdmaUnavailable(format!(
            "{CONF_KEY}: the kernel has no rdma_rxe module (Soft-RoCE, CONFIG_RDMA_RXE) to add \
             {dev} on {netdev} with: `modprobe rdma_rxe` on the node (Debian ships it with the \
             kernel image), or remove {CONF_KEY}; kernel: {e}"
        ));
    }
    let clash = is_clash(&e);
    if clash && matches!(locate(ctx.rdma, Some(netns), dev), Ok(Some(_))) {
        return Error::DeviceInUse(format!(
            "{CONF_KEY}: an ib device named {dev} exists already: it is this attachment's name, \
             left by an earlier ADD of it that no DEL followed; DEL the attachment (or `rdma \
             link delete {dev}`) and retry"
        ));
    }
    if clash {
        return Error::DeviceInUse(format!(
            "{CONF_KEY}: {netdev} in the pod has a Soft-RoCE device already (`rdma link show` \
             in the pod), so {dev} cannot be added on it"
        ));
    }
    Error::kernel(
        format!("{CONF_KEY}: adding Soft-RoCE device {dev} on {netdev} from the pod netns"),
        e,
    )
}

/// A NEWLINK refused for a name or a netdev already taken: EEXIST on Linux 7, ENFILE for a name
/// on 6.1.
fn is_clash(e: &KernelError) -> bool {
    e.is_errno(nix::errno::Errno::EEXIST) || e.is_errno(nix::errno::Errno::ENFILE)
}

/// The behaviour that tells a kernel whose rxe receives in the pod (Linux 7.1+) from one that
/// receives only in the host netns: a UDP socket bound to 4791 in the pod's netns.
fn require_socket_in_pod(rdma: &dyn RdmaOps, netns: &Netns, rec: &SoftRoceRecord) -> Result<()> {
    let bound = rdma
        .udp_port_bound(Ns::Pod(netns), ROCE_V2_PORT)
        .kernel_ctx(|| {
            format!("{CONF_KEY}: looking for rxe's UDP socket (port 4791) in the pod netns")
        })?;
    if bound {
        return Ok(());
    }
    Err(Error::RdmaUnavailable(format!(
        "{CONF_KEY}: after adding {} on {}, nothing is bound to UDP {ROCE_V2_PORT} (RoCE v2) in \
         the pod netns {}: this kernel's rdma_rxe receives only through a socket in the host \
         netns, so the pod's device would never receive. Soft-RoCE in a pod needs Linux 7.1 or \
         later (per-netns rxe sockets); on this kernel remove {CONF_KEY}",
        rec.ibdev,
        rec.netdev,
        netns.path().display()
    )))
}

/// Exclusive netns mode: the device registered in the host netns goes into the pod's.
fn move_into_pod(rdma: &dyn RdmaOps, netns: &Netns, rec: &SoftRoceRecord) -> Result<()> {
    let index = rec.index.expect("added before it moves");
    rdma.move_device(Ns::Host, index, Ns::Pod(netns))
        .kernel_ctx(|| {
            format!(
                "{CONF_KEY}: moving Soft-RoCE device {} into the pod netns {} (exclusive RDMA \
                 netns mode)",
                rec.ibdev,
                netns.path().display()
            )
        })
}

/// Where the device is seen from: the pod's netns once it moved there, else the host's.
fn home<'n>(netns: &'n Netns, rec: &SoftRoceRecord) -> Ns<'n> {
    match rec.in_pod {
        true => Ns::Pod(netns),
        false => Ns::Host,
    }
}

/// Polls the port until it is ACTIVE (it follows the netdev's carrier), up to `timeout`.
fn wait_until_active(
    rdma: &dyn RdmaOps,
    netns: &Netns,
    rec: &SoftRoceRecord,
    timeout: Duration,
) -> Result<()> {
    let index = rec.index.expect("added before its port is read");
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        let state = rdma
            .port_state(home(netns, rec), index, PORT)
            .kernel_ctx(|| format!("{CONF_KEY}: reading the port of {}", rec.ibdev))?;
        if state == Some(PORT_ACTIVE) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::GidMissing(format!(
                "{CONF_KEY}: port {PORT} of {} on {} is in state {} after {} ms, not ACTIVE: \
                 rxe's port follows the netdev's carrier; check that {} is up with a carrier (a \
                 veth's peer up, a NIC's link), or raise gidTimeoutMs",
                rec.ibdev,
                rec.netdev,
                state.map_or("unknown".to_string(), |s| s.to_string()),
                timeout.as_millis(),
                rec.netdev
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The device is the pod's like the mode's own: its char devices get `devicePermissions`, the
/// device-info file names it, `roceQos` writes its RDMA CM default, and its GID table is where
/// the pod IPs' GIDs are waited for, first, so that the GIDs recorded are the pod's own
/// device's.
fn publish(pod: &mut PodSide<'_>, rec: &SoftRoceRecord) -> Result<()> {
    pod.ib_devices.push(rec.ibdev.clone());
    pod.info_ib_devices.push(rec.ibdev.clone());
    pod.own_ports.push((rec.ibdev.clone(), PORT));
    let view = match rec.in_pod {
        true => GidView::Pod,
        false => GidView::Host,
    };
    let port = (rec.ibdev.clone(), PORT);
    match &mut pod.gids {
        None => {
            pod.gids = Some(GidSource {
                ports: vec![port],
                view,
            })
        }
        Some(source) if source.view == view => source.ports.insert(0, port),
        Some(source) => {
            return Err(Error::State(format!(
                "{CONF_KEY}: the GIDs of {} are read in the {view:?} view, the mode's in the \
                 {:?} view",
                rec.ibdev, source.view
            )))
        }
    }
    Ok(())
}

/// The device called `name`, as seen from the pod's netns (exclusive mode shows it only there)
/// or else the host's: where it is and its index.
fn locate<'n>(
    rdma: &dyn RdmaOps,
    pod: Option<&'n Netns>,
    name: &str,
) -> Result<Option<(Ns<'n>, u32)>> {
    for ns in pod.map(Ns::Pod).into_iter().chain([Ns::Host]) {
        let found = rdma
            .device_index(ns, name)
            .kernel_ctx(|| format!("{CONF_KEY}: looking up ib device {name} in {ns}"))?;
        if let Some(index) = found {
            return Ok(Some((ns, index)));
        }
    }
    Ok(None)
}

/// DEL, GC and the undo of ADD: deletes the recorded device wherever it is, unless it is gone
/// (rxe removes it with its netdev) or the name now belongs to another device, then waits until
/// the name is free. `pod` is the pod's netns while it exists.
pub fn remove_device(rdma: &dyn RdmaOps, pod: Option<&Netns>, rec: &SoftRoceRecord) -> Result<()> {
    let mode = rdma
        .netns_mode()
        .kernel_ctx(|| "reading the RDMA subsystem's netns mode")?;
    if mode.is_none() {
        crate::log_info!("{}: no RDMA netlink, so no ib device is left", rec.ibdev);
        return Ok(());
    }
    let Some((ns, index)) = locate(rdma, pod, &rec.ibdev)? else {
        crate::log_info!(
            "{}: gone already (rxe removes it with its netdev)",
            rec.ibdev
        );
        return Ok(());
    };
    if rec.index.is_some_and(|ours| ours != index) {
        crate::log_warn!(
            "{}: the name now belongs to ib device index {index}, not the recorded {:?}; it is \
             not this attachment's and is left alone",
            rec.ibdev,
            rec.index
        );
        return Ok(());
    }
    if let Err(e) = rdma.delete_link(ns, index) {
        if locate(rdma, pod, &rec.ibdev)?.is_some() {
            return Err(Error::kernel(
                format!("{CONF_KEY}: deleting Soft-RoCE device {}", rec.ibdev),
                e,
            ));
        }
    }
    wait_until_gone(rdma, pod, rec)
}

/// rxe unregisters a device whose netdev went from a workqueue: the name is free only then.
fn wait_until_gone(rdma: &dyn RdmaOps, pod: Option<&Netns>, rec: &SoftRoceRecord) -> Result<()> {
    let deadline = Instant::now() + GONE_TIMEOUT;
    while locate(rdma, pod, &rec.ibdev)?.is_some() {
        if Instant::now() >= deadline {
            return Err(Error::State(format!(
                "{CONF_KEY}: Soft-RoCE device {} is still there {} s after it was deleted: a \
                 process may hold it open (rxe cannot take contexts away); DEL again once the \
                 pod's processes are gone",
                rec.ibdev,
                GONE_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    crate::log_info!("{}: Soft-RoCE device removed", rec.ibdev);
    Ok(())
}

/// CHECK: the recorded device is where ADD left it, with its index, and its port ACTIVE.
fn check_device(rdma: &dyn RdmaOps, netns: &Netns, rec: &SoftRoceRecord) -> Result<()> {
    let ns = home(netns, rec);
    let index = rdma
        .device_index(ns, &rec.ibdev)
        .kernel_ctx(|| format!("looking up ib device {} in {ns}", rec.ibdev))?;
    if index.is_none() || index != rec.index {
        return Err(Error::CheckFailed(format!(
            "{CONF_KEY}: Soft-RoCE device {} of {} is not in the {ns} (index {:?} found, {:?} \
             recorded): it went with its netdev, or was deleted",
            rec.ibdev, rec.netdev, index, rec.index
        )));
    }
    let state = rdma
        .port_state(ns, index.expect("checked above"), PORT)
        .kernel_ctx(|| format!("reading the port of {}", rec.ibdev))?;
    if state != Some(PORT_ACTIVE) {
        return Err(Error::CheckFailed(format!(
            "{CONF_KEY}: port {PORT} of {} on {} is in state {state:?}, not ACTIVE",
            rec.ibdev, rec.netdev
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
