//! Step `roce-qos` (conf `roceQos`, every mode): the network's RoCE QoS (src/qos.rs), applied
//! where the kernel scopes it to the pod, and handed to the pod's libraries.
//!
//! - **The pod interface's alias** carries the QoS into the pod (`rdma ns env` reads it there
//!   and sets NCCL_IB_TC, UCX_IB_TRAFFIC_CLASS, the SLs): the interface is the pod's in every
//!   mode, and the pod reads it through rtnetlink without privilege or configfs. Its alias
//!   before ADD is recorded and put back by DEL when the interface outlives the attachment (a
//!   moved netdev, the previous plugin's in chained mode).
//! - **RDMA CM's default ToS** (configfs, kernel/rdma_cm.rs) of the RoCE ports the pod has
//!   alone (`PodSide::own_ports`): an ib device moved into the pod's netns (exclusive mode) and
//!   a Soft-RoCE device of its own. RDMA CM connections that set no ToS themselves (rping,
//!   perftest's `-R`) then send the network's byte. A move resets the value, so it is written
//!   after the move, under the device's name; a moved device's value from before the move is
//!   read first (`before_moves`) and written back once DEL brought the device home, because
//!   the move home resets it too.
//! - **A shared device** (a macvlan or IPoIB child's parent, a netdev moved in shared netns
//!   mode whose ib device every netns sees): its defaults are the node's; ADD writes nothing
//!   and warns when the device's default differs from the network's (`doctor` says so too).
//!
//! Everything written is recorded first (`steps.roceQos`): DEL takes it back from the record,
//! also after a kill at any instant.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::attach::plan::Plan;
use crate::attach::record::Attachment;
use crate::attach::steps::{CheckSubject, PodSide, Step, StepAdd};
use crate::attach::Ctx;
use crate::cni::NetConf;
use crate::error::{Error, KernelContext, Result};
use crate::kernel::rdma_cm::CmFs;
use crate::kernel::rdma_ops::RdmaOps;
use crate::kernel::rtnetlink::{Link, NetOps};
use crate::kernel::{Netns, Ns};
use crate::qos::{RoceQos, DSCP_MAX, PRIORITY_MAX};

/// The conf field, and the key of the step's record in `Attachment::steps`.
pub const CONF_KEY: &str = "roceQos";

/// The keys of `roceQos`, each with what it takes.
pub(crate) const KEYS: [(&str, &str); 4] = [
    (
        "dscp",
        "an integer from 0 to 63, the upper six bits of the traffic class",
    ),
    (
        "ecn",
        "true or false, whether the ECN field says ECN-capable (ECT(0))",
    ),
    (
        "priority",
        "an integer from 0 to 7, the priority (PCP) and the SL NCCL and UCX get",
    ),
    (
        "fifoDscp",
        "an integer from 0 to 63, the DSCP of NCCL's CTS messages (NCCL_IB_FIFO_TC)",
    ),
];

/// Step `roce-qos` (checkpoints `roce-qos-host` before the mode's move when an ib device
/// moves, `roce-qos-alias`, `roce-qos`). It runs after `soft-roce`, whose device it writes.
#[derive(Debug)]
pub struct Qos;

/// [`Qos`] as the conf asks for it.
#[derive(Debug)]
struct QosAdd {
    qos: Option<RoceQos>,
}

/// What the step records (under [`CONF_KEY`]): what it changed and what was there before.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QosRecord {
    /// The network's traffic class byte, for people reading the record.
    pub traffic_class: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<AliasRecord>,
    /// RDMA CM defaults of the pod's own ports.
    #[serde(default)]
    pub defaults: Vec<CmDefault>,
}

/// The pod interface's alias: which interface (its ifindex stays across netns moves), what
/// it was and what ADD made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AliasRecord {
    pub ifindex: u32,
    pub hwaddr: String,
    /// Empty when it had none.
    pub before: String,
    pub ours: String,
}

/// RDMA CM's default ToS of one of the pod's own RoCE ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CmDefault {
    pub ibdev: String,
    pub port: u32,
    /// The device had no configfs group and ADD made one: DEL removes it.
    pub made_group: bool,
    /// The value before ADD wrote (a moved device's, read in the host before its move).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u8>,
    /// What ADD writes, recorded before the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<u8>,
    /// DEL writes `before` back once the device is home: a device that moved into the pod
    /// (and outlives the attachment), not a Soft-RoCE device, which DEL deletes.
    pub restore: bool,
}

impl Step for Qos {
    fn configure(&self, conf: &NetConf) -> Result<Box<dyn StepAdd>> {
        Ok(Box::new(QosAdd {
            qos: from_conf(conf)?,
        }))
    }

    fn check(&self, ctx: &Ctx<'_>, subject: &CheckSubject<'_>, link: Option<&Link>) -> Result<()> {
        let Some(rec) = recorded(subject.att)? else {
            return Ok(());
        };
        if let Some(alias) = &rec.alias {
            check_alias(ctx, subject, link, alias)?;
        }
        rec.defaults
            .iter()
            .try_for_each(|d| check_default(ctx.rdma, d))
    }

    fn release(&self, ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()> {
        let Some(rec) = recorded(att)? else {
            return Ok(());
        };
        let mut errors = Vec::new();
        for d in &rec.defaults {
            if let Err(e) = release_default(ctx.rdma, d) {
                errors.push(e);
            }
        }
        if let Some(alias) = &rec.alias {
            let pod = crate::attach::lifecycle::pod_netns(netns, att)?;
            if let Err(e) = restore_alias(ctx.kernel, pod.as_ref(), alias) {
                errors.push(e);
            }
        }
        Error::collect(errors)
    }
}

impl StepAdd for QosAdd {
    fn before_moves<'a>(
        &self,
        ctx: &'a Ctx<'a>,
        att: &mut Attachment,
        plan: &mut Plan<'a>,
    ) -> Result<()> {
        let (Some(qos), Some(moving)) = (self.qos, att.ib_device()) else {
            return Ok(());
        };
        if moving.infiniband {
            return Ok(());
        }
        let (ibdev, port) = (moving.ibdev.clone(), moving.port);
        require_configfs(ctx.rdma, &ibdev, "moves into the pod")?;
        let mut rec = recorded(att)?.unwrap_or_else(|| new_record(&qos));
        let entry = take_group(ctx, att, &mut rec, &ibdev, port, true)?;
        let before = read_default(ctx.rdma, &entry).inspect_err(|_| {
            drop_made_group(ctx.rdma, &entry);
        })?;
        let entry = CmDefault {
            before: Some(before),
            ..entry
        };
        put_entry(&mut rec, entry.clone());
        save(ctx, att, &rec)?;
        let rdma = ctx.rdma;
        plan.on_undo("roce-qos-host", move || release_default(rdma, &entry));
        plan.checkpoint("roce-qos-host")
    }

    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()> {
        let Some(qos) = self.qos else {
            return Ok(());
        };
        let mut rec = recorded(&pod.att)?.unwrap_or_else(|| new_record(&qos));
        set_alias(pod, plan, &mut rec, &qos)?;
        plan.checkpoint("roce-qos-alias")?;
        for (ibdev, port) in pod.own_ports.clone() {
            write_default(pod, plan, &mut rec, &ibdev, port, qos.traffic_class())?;
        }
        warn_about_shared_ports(pod, &qos);
        plan.checkpoint("roce-qos")
    }
}

/// Conf `roceQos`: None when absent or null; every value checked, a wrong one named by its
/// field (`roceQos.dscp`) and value (code 7).
pub fn from_conf(conf: &NetConf) -> Result<Option<RoceQos>> {
    #[derive(Deserialize)]
    struct Fields {
        #[serde(rename = "roceQos")]
        roce_qos: Option<Value>,
    }
    match conf.fields::<Fields>()?.roce_qos {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => parse_object(&map).map(Some),
        Some(other) => Err(Error::config(
            CONF_KEY,
            format!(
                "must be an object such as {{\"dscp\": 26, \"ecn\": true, \"priority\": 3}}, got \
                 {other}"
            ),
        )),
    }
}

fn parse_object(map: &serde_json::Map<String, Value>) -> Result<RoceQos> {
    if let Some(key) = map
        .keys()
        .find(|k| !KEYS.iter().any(|(known, _)| known == k))
    {
        let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
        return Err(Error::config(
            format!("{CONF_KEY}.{key}"),
            format!("unknown key `{key}`; known keys: {}", known.join(", ")),
        ));
    }
    let number = |key: &str, max: u8| -> Result<Option<u8>> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .filter(|n| *n <= max)
                .map(Some)
                .ok_or_else(|| invalid(key, v)),
        }
    };
    let required = |key: &str, value: Option<u8>| {
        value.ok_or_else(|| {
            Error::config(
                format!("{CONF_KEY}.{key}"),
                format!("is required: {}", what(key)),
            )
        })
    };
    let ecn = match map.get("ecn") {
        Some(Value::Bool(b)) => *b,
        None | Some(Value::Null) => {
            return Err(Error::config(
                format!("{CONF_KEY}.ecn"),
                format!("is required: {}", what("ecn")),
            ))
        }
        Some(v) => return Err(invalid("ecn", v)),
    };
    Ok(RoceQos {
        dscp: required("dscp", number("dscp", DSCP_MAX)?)?,
        ecn,
        priority: required("priority", number("priority", PRIORITY_MAX)?)?,
        fifo_dscp: number("fifoDscp", DSCP_MAX)?,
    })
}

fn what(key: &str) -> &'static str {
    KEYS.iter()
        .find(|(k, _)| *k == key)
        .map(|(_, w)| *w)
        .expect("a known key")
}

fn invalid(key: &str, value: &Value) -> Error {
    Error::config(
        format!("{CONF_KEY}.{key}"),
        format!("{value} is not {}", what(key)),
    )
}

fn new_record(qos: &RoceQos) -> QosRecord {
    QosRecord {
        traffic_class: qos.traffic_class(),
        ..QosRecord::default()
    }
}

/// What the step recorded of `att`; None when it changed nothing.
fn recorded(att: &Attachment) -> Result<Option<QosRecord>> {
    att.steps.get(CONF_KEY).map_err(|e| {
        Error::State(format!(
            "the record of {} has an unreadable `steps.{CONF_KEY}`: {e}",
            att.id()
        ))
    })
}

/// Writes `rec` into the attachment's record, on disk at once.
fn save(ctx: &Ctx<'_>, att: &mut Attachment, rec: &QosRecord) -> Result<()> {
    att.steps
        .set(CONF_KEY, rec)
        .map_err(|e| Error::State(format!("recording {CONF_KEY}: {e}")))?;
    ctx.store.update(att)
}

/// Replaces the entry of the same port, or appends it.
fn put_entry(rec: &mut QosRecord, entry: CmDefault) {
    match rec
        .defaults
        .iter_mut()
        .find(|d| d.ibdev == entry.ibdev && d.port == entry.port)
    {
        Some(d) => *d = entry,
        None => rec.defaults.push(entry),
    }
}

/// A device whose defaults rdma-ns must write needs configfs with RDMA CM's directory.
fn require_configfs(rdma: &dyn RdmaOps, ibdev: &str, why: &str) -> Result<()> {
    let missing = match rdma.cm_availability() {
        CmFs::Ready => return Ok(()),
        CmFs::NoConfigfs => {
            "configfs is not mounted at /sys/kernel/config: mount it (`mount -t configfs none \
             /sys/kernel/config`; systemd's sys-kernel-config.mount does it at boot)"
        }
        CmFs::NoRdmaCm => {
            "configfs has no rdma_cm directory: load RDMA CM (`modprobe rdma_cm`, which \
             rdma_ucm loads too); a kernel built without CONFIG_INFINIBAND_ADDR_TRANS_CONFIGFS \
             has none"
        }
    };
    Err(Error::RdmaUnavailable(format!(
        "{CONF_KEY}: ib device {ibdev} {why}, and rdma-ns writes its RDMA CM default ToS \
         there, but {missing}; or remove {CONF_KEY} from the network"
    )))
}

/// The entry of the port, with the device's configfs group there: made (and so recorded,
/// before the mkdir) when it was missing. `restore`: see [`CmDefault::restore`].
fn take_group(
    ctx: &Ctx<'_>,
    att: &mut Attachment,
    rec: &mut QosRecord,
    ibdev: &str,
    port: u32,
    restore: bool,
) -> Result<CmDefault> {
    let rdma = ctx.rdma;
    let exists = rdma
        .cm_group_exists(ibdev)
        .kernel_ctx(|| format!("{CONF_KEY}: looking for the rdma_cm group of {ibdev}"))?;
    let mut entry = CmDefault {
        ibdev: ibdev.to_string(),
        port,
        made_group: !exists,
        before: None,
        written: None,
        restore,
    };
    if exists {
        return Ok(entry);
    }
    put_entry(rec, entry.clone());
    save(ctx, att, rec)?;
    match rdma.cm_make_group(ibdev) {
        Ok(()) => Ok(entry),
        Err(e) if e.is_errno(nix::errno::Errno::EEXIST) => {
            entry.made_group = false;
            put_entry(rec, entry.clone());
            save(ctx, att, rec)?;
            Ok(entry)
        }
        Err(e) => Err(Error::kernel(
            format!("{CONF_KEY}: making the rdma_cm configfs group of {ibdev}"),
            e,
        )),
    }
}

fn read_default(rdma: &dyn RdmaOps, d: &CmDefault) -> Result<u8> {
    rdma.cm_default_tos(&d.ibdev, d.port).kernel_ctx(|| {
        format!(
            "{CONF_KEY}: reading RDMA CM's default ToS of {} port {}",
            d.ibdev, d.port
        )
    })
}

/// A failed ADD's clean-up of a group it made, when nothing else was recorded yet.
fn drop_made_group(rdma: &dyn RdmaOps, d: &CmDefault) {
    if d.made_group {
        if let Err(e) = rdma.cm_remove_group(&d.ibdev) {
            crate::log_warn!("{CONF_KEY}: removing the rdma_cm group of {}: {e}", d.ibdev);
        }
    }
}

/// The pod interface: the one the mode made, or in chained mode the previous plugin's, by its
/// name in the pod.
fn pod_interface(pod: &PodSide<'_>) -> Result<Link> {
    if let Some(link) = &pod.link {
        return Ok(link.clone());
    }
    let ifname = &pod.req.env.ifname;
    pod.ctx
        .kernel
        .link_by_name(Ns::Pod(pod.netns), ifname)
        .kernel_ctx(|| format!("{CONF_KEY}: looking up {ifname} in the pod"))?
        .ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "{CONF_KEY}: {ifname} is not in the pod netns {}",
                pod.netns.path().display()
            ))
        })
}

/// The pod interface's alias becomes the network's QoS ([`RoceQos::to_alias`]); what it was
/// is recorded first.
fn set_alias<'a>(
    pod: &mut PodSide<'a>,
    plan: &mut Plan<'a>,
    rec: &mut QosRecord,
    qos: &RoceQos,
) -> Result<()> {
    let (k, netns) = (pod.ctx.kernel, pod.netns);
    let link = pod_interface(pod)?;
    let alias = AliasRecord {
        ifindex: link.index,
        hwaddr: link.hwaddr_string(),
        before: link.alias.clone().unwrap_or_default(),
        ours: qos.to_alias(),
    };
    rec.alias = Some(alias.clone());
    save(pod.ctx, &mut pod.att, rec)?;
    k.set_alias(Ns::Pod(netns), link.index, &alias.ours)
        .kernel_ctx(|| format!("{CONF_KEY}: setting the alias of {} in the pod", link.name))?;
    crate::log_info!("{}: {qos} (alias {:?})", link.name, alias.ours);
    plan.on_undo("roce-qos-alias", move || {
        restore_alias(k, Some(netns), &alias)
    });
    Ok(())
}

/// DEL and the undo of ADD: the interface's alias goes back to what it was, wherever the
/// interface is now (the pod, or the host for a netdev that came back); one gone (a deleted
/// child) or whose alias someone changed since is left alone.
fn restore_alias(k: &dyn NetOps, pod: Option<&Netns>, a: &AliasRecord) -> Result<()> {
    for ns in pod.map(Ns::Pod).into_iter().chain([Ns::Host]) {
        let found = k
            .link_by_index(ns, a.ifindex)
            .kernel_ctx(|| format!("{CONF_KEY}: looking up ifindex {} in {ns}", a.ifindex))?;
        let Some(link) = found.filter(|l| l.hwaddr_string() == a.hwaddr) else {
            continue;
        };
        if link.alias.as_deref().unwrap_or("") != a.ours {
            crate::log_info!(
                "{}: its alias is no longer rdma-ns's ({:?}); left as it is",
                link.name,
                link.alias
            );
            return Ok(());
        }
        return k.set_alias(ns, link.index, &a.before).kernel_ctx(|| {
            format!(
                "{CONF_KEY}: putting back the alias {:?} of {} in {ns}",
                a.before, link.name
            )
        });
    }
    crate::log_info!(
        "{CONF_KEY}: interface {} (ifindex {}) is gone, and its alias with it",
        a.hwaddr,
        a.ifindex
    );
    Ok(())
}

/// RDMA CM's default ToS of one of the pod's own ports becomes the network's byte: recorded
/// first, then written and read back. A Soft-RoCE device gets its group here; a moved
/// device's was taken before its move.
fn write_default<'a>(
    pod: &mut PodSide<'a>,
    plan: &mut Plan<'a>,
    rec: &mut QosRecord,
    ibdev: &str,
    port: u32,
    tc: u8,
) -> Result<()> {
    let (ctx, rdma) = (pod.ctx, pod.ctx.rdma);
    let known = rec
        .defaults
        .iter()
        .find(|d| d.ibdev == ibdev && d.port == port)
        .cloned();
    let entry = match known {
        Some(entry) => entry,
        None => {
            require_configfs(rdma, ibdev, "is the pod's own (a Soft-RoCE device)")?;
            let entry = take_group(ctx, &mut pod.att, rec, ibdev, port, false)?;
            let undo = entry.clone();
            plan.on_undo("roce-qos", move || release_default(rdma, &undo));
            CmDefault {
                before: Some(read_default(rdma, &entry)?),
                ..entry
            }
        }
    };
    let entry = CmDefault {
        written: Some(tc),
        ..entry
    };
    put_entry(rec, entry.clone());
    save(ctx, &mut pod.att, rec)?;
    rdma.cm_set_default_tos(ibdev, port, tc).kernel_ctx(|| {
        format!("{CONF_KEY}: writing RDMA CM's default ToS {tc} of {ibdev} port {port}")
    })?;
    match read_default(rdma, &entry)? {
        back if back == tc => {}
        back => {
            return Err(Error::State(format!(
                "{CONF_KEY}: RDMA CM's default ToS of {ibdev} port {port} reads {back} right \
                 after {tc} was written to it"
            )))
        }
    }
    crate::log_info!(
        "{ibdev} port {port}: RDMA CM default ToS {tc} (was {:?})",
        entry.before
    );
    Ok(())
}

/// RoCE ports the pod uses but shares with the node: their defaults are the node's, so ADD
/// only says when one differs from the network's.
fn warn_about_shared_ports(pod: &PodSide<'_>, qos: &RoceQos) {
    let Some(gids) = &pod.gids else {
        return;
    };
    let (tc, ifname, network) = (qos.traffic_class(), &pod.req.env.ifname, &pod.att.network);
    let shared = gids.ports.iter().filter(|p| !pod.own_ports.contains(p));
    for (ibdev, port) in shared {
        match shared_default(pod.ctx.rdma, ibdev, *port) {
            Ok(Some(tos)) if tos == tc => crate::log_info!(
                "{ifname}: {ibdev} port {port} is shared with the node; its RDMA CM default ToS \
                 is the network's, {tc}"
            ),
            Ok(Some(tos)) => crate::log_warn!(
                "{ifname}: {ibdev} port {port} is shared with the node, and its RDMA CM \
                 default ToS is {tos}, not network {network}'s traffic class {tc}: RDMA CM \
                 connections that set no ToS (rping, perftest -R) send {tos}; NCCL and UCX \
                 send {tc} with the variables of `rdma-ns env`. The device's defaults are the \
                 node's: `echo {tc} > /sys/kernel/config/rdma_cm/{ibdev}/ports/{port}/\
                 default_roce_tos` on the node makes them agree"
            ),
            Ok(None) => crate::log_info!(
                "{ifname}: {ibdev} port {port} is shared with the node; it has no rdma_cm \
                 configfs group, so its RDMA CM default ToS cannot be read without making one \
                 (`rdma-ns doctor` reports it)"
            ),
            Err(e) => crate::log_info!(
                "{ifname}: the RDMA CM default ToS of shared {ibdev} port {port}: {e}"
            ),
        }
    }
}

/// A shared port's RDMA CM default, when a group shows it.
pub fn shared_default(rdma: &dyn RdmaOps, ibdev: &str, port: u32) -> Result<Option<u8>> {
    if rdma.cm_availability() != CmFs::Ready
        || !rdma
            .cm_group_exists(ibdev)
            .kernel_ctx(|| format!("looking for the rdma_cm group of {ibdev}"))?
    {
        return Ok(None);
    }
    rdma.cm_default_tos(ibdev, port)
        .map(Some)
        .kernel_ctx(|| format!("reading RDMA CM's default ToS of {ibdev} port {port}"))
}

/// CHECK: the interface still carries the alias ADD gave it (what `rdma-ns env` reads).
fn check_alias(
    ctx: &Ctx<'_>,
    subject: &CheckSubject<'_>,
    link: Option<&Link>,
    a: &AliasRecord,
) -> Result<()> {
    let ifname = &subject.req.env.ifname;
    let link = match link {
        Some(l) => l.clone(),
        None => crate::attach::check::check_pod_link(ctx, subject.req, subject.ns)?,
    };
    match link.alias.as_deref() {
        Some(alias) if alias == a.ours => Ok(()),
        found => Err(Error::CheckFailed(format!(
            "{CONF_KEY}: {ifname} has the alias {found:?}, ADD gave it {:?}: `rdma-ns env` \
             reads the network's QoS from it",
            a.ours
        ))),
    }
}

/// CHECK: RDMA CM's default of a port ADD wrote still reads what it wrote.
fn check_default(rdma: &dyn RdmaOps, d: &CmDefault) -> Result<()> {
    let Some(written) = d.written else {
        return Ok(());
    };
    let now = rdma.cm_default_tos(&d.ibdev, d.port).map_err(|e| {
        Error::CheckFailed(format!(
            "{CONF_KEY}: RDMA CM's default ToS of {} port {} cannot be read: {e}",
            d.ibdev, d.port
        ))
    })?;
    if now == written {
        return Ok(());
    }
    Err(Error::CheckFailed(format!(
        "{CONF_KEY}: RDMA CM's default ToS of {} port {} is {now}, ADD wrote {written}: the \
         device moved (a move resets it) or someone wrote it",
        d.ibdev, d.port
    )))
}

/// DEL, GC and the undo of ADD: a moved device's value goes back once it is home; a group ADD
/// made goes.
fn release_default(rdma: &dyn RdmaOps, d: &CmDefault) -> Result<()> {
    if let (true, Some(before)) = (d.restore, d.before) {
        restore_default(rdma, d, before)?;
    }
    if d.made_group {
        match rdma.cm_remove_group(&d.ibdev) {
            Err(e) if !e.is_errno(nix::errno::Errno::ENOENT) => {
                return Err(Error::kernel(
                    format!("{CONF_KEY}: removing the rdma_cm group of {}", d.ibdev),
                    e,
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes `before` back through a group (one made for the write when there is none, and
/// removed after it), once the device is in the host netns: a device still in the pod's (a
/// dying netns returns it later; a failed move back) would lose the value on its way home.
fn restore_default(rdma: &dyn RdmaOps, d: &CmDefault, before: u8) -> Result<()> {
    let ibdev = &d.ibdev;
    let context = || format!("{CONF_KEY}: putting back RDMA CM's default ToS of {ibdev}");
    let temporary = !rdma.cm_group_exists(ibdev).kernel_ctx(context)?;
    if temporary {
        match rdma.cm_make_group(ibdev) {
            Ok(()) => {}
            Err(e) if e.is_errno(nix::errno::Errno::ENODEV) => {
                crate::log_info!("{ibdev}: gone from the node; no default to put back");
                return Ok(());
            }
            Err(e) => return Err(Error::kernel(context(), e)),
        }
    }
    let written = write_home(rdma, d, before);
    if temporary {
        if let Err(e) = rdma.cm_remove_group(ibdev) {
            crate::log_warn!("{CONF_KEY}: removing the rdma_cm group of {ibdev}: {e}");
        }
    }
    written
}

fn write_home(rdma: &dyn RdmaOps, d: &CmDefault, before: u8) -> Result<()> {
    let ibdev = &d.ibdev;
    let home = rdma
        .device_index(Ns::Host, ibdev)
        .kernel_ctx(|| format!("{CONF_KEY}: looking up ib device {ibdev} in the host"))?;
    if home.is_none() {
        return match rdma.cm_default_tos(ibdev, d.port) {
            Err(e) if e.is_errno(nix::errno::Errno::ENODEV) => {
                crate::log_info!("{ibdev}: gone from the node; no default to put back");
                Ok(())
            }
            _ => Err(Error::TryAgainLater(format!(
                "{CONF_KEY}: ib device {ibdev} is not back in the host netns yet (a pod netns \
                 that is going away returns it after a while; a failed move back leaves it \
                 there), and a move resets RDMA CM's default ToS: DEL again to put back its \
                 value from before the pod, {before}"
            ))),
        };
    }
    rdma.cm_set_default_tos(ibdev, d.port, before)
        .kernel_ctx(|| {
            format!(
                "{CONF_KEY}: writing back RDMA CM's default ToS {before} of {ibdev} port {}",
                d.port
            )
        })?;
    crate::log_info!(
        "{ibdev} port {}: RDMA CM default ToS back to {before}",
        d.port
    );
    Ok(())
}

#[cfg(test)]
mod tests;
