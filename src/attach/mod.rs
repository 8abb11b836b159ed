//! What an attachment does: the plugin's modes as steps with undo, over the kernel seam.

pub mod chain;
pub mod child;
pub mod config;
pub mod devinfo;
pub mod devperm;
pub mod gids;
pub mod ipconf;
pub mod move_dev;
pub mod plan;
pub mod publish;
pub mod rdma_dev;
pub mod select;
pub mod state;

#[cfg(test)]
mod child_tests;
#[cfg(test)]
mod fake;
#[cfg(test)]
mod kill_points;
#[cfg(test)]
mod rdma_tests;
#[cfg(test)]
mod tests;

use std::path::Path;

use crate::cni::result::CniResult;
use crate::cni::{Plugin, Request};
use crate::error::{Error, Result};
use crate::kernel::rdma_ops::{RdmaOps, RealRdma};
use crate::kernel::rtnetlink::RealKernel;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::{NetOps, Netns};

use config::{Mode, PluginConf};
use state::Store;

/// IPAM as the attachment steps see it: None/no-op when the conf has no `ipam`.
pub trait IpamOps {
    fn add(&self, req: &Request) -> Result<Option<CniResult>>;
    fn del(&self, req: &Request) -> Result<()>;
    fn check(&self, req: &Request) -> Result<()>;
    fn status(&self, req: &Request) -> Result<()>;
    fn gc(&self, req: &Request) -> Result<()>;
}

/// The real delegation: exec `ipam.type` from CNI_PATH.
pub struct DelegatedIpam;

impl IpamOps for DelegatedIpam {
    fn add(&self, req: &Request) -> Result<Option<CniResult>> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::add(req).map(Some),
            None => Ok(None),
        }
    }
    fn del(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) if plan::test_fault("skip-ipam-del") => Ok(()),
            Some(_) => crate::cni::ipam::del(req),
            None => Ok(()),
        }
    }
    fn check(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::check(req),
            None => Ok(()),
        }
    }
    fn status(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::status(req),
            None => Ok(()),
        }
    }
    fn gc(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::gc(req),
            None => Ok(()),
        }
    }
}

/// Everything a mode needs from the outside world.
pub struct Ctx<'a> {
    pub kernel: &'a dyn NetOps,
    pub sys: &'a SysRoot,
    pub store: &'a Store,
    /// Sync: IPAM runs on a second thread beside the kernel work (add_beside_ipam, del_beside_ipam).
    pub ipam: &'a (dyn IpamOps + Sync),
    pub rdma: &'a dyn RdmaOps,
    /// Where the RDMA char devices live (`/dev/infiniband`; env `RDMA_NS_DEV_DIR` in tests).
    pub dev_dir: &'a std::path::Path,
    /// Fault injection for tests: fail or kill an invocation at a step (see plan.rs).
    pub fault: Option<plan::Fault>,
}

/// The intent record, written durably before the first kernel change so that a plugin killed
/// mid-ADD leaves DEL something to go by; its undo removes it.
pub fn write_intent<'a>(
    ctx: &'a Ctx<'a>,
    att: &state::Attachment,
    plan: &mut plan::Plan<'a>,
) -> Result<()> {
    ctx.store.save(att)?;
    let (net, cid, ifn) = (
        att.network.clone(),
        att.container_id.clone(),
        att.ifname.clone(),
    );
    plan.on_undo("state-intent", move || ctx.store.remove(&net, &cid, &ifn));
    plan.checkpoint("state-intent")
}

/// Runs `work` (a mode's first kernel steps, registering their undo on `plan`) with IPAM ADD
/// beside it on a second thread when the conf has IPAM: neither depends on the other, and the
/// kernel work (a netns move, a child's creation) waits in the kernel long enough to hide most of
/// the IPAM plugin's exec. IPAM's undo (IPAM DEL) is registered whenever IPAM ADD succeeded, also
/// when `work` failed, so a rollback releases the address. Then the `ipam` checkpoint.
///
/// The intent record is still durable before the first kernel change (`work` writes it first);
/// IPAM may allocate before it is, which a crash leaves to the runtime's DEL: DEL always runs
/// IPAM DEL, record or not.
pub fn add_beside_ipam<'a, T>(
    ctx: &'a Ctx<'a>,
    req: &'a Request,
    plan: &mut plan::Plan<'a>,
    work: impl FnOnce(&mut plan::Plan<'a>) -> Result<T>,
) -> Result<(T, Option<CniResult>)> {
    let (made, ipam) = if req.conf.ipam.is_none() {
        // No IPAM plugin to exec.
        (work(plan), ctx.ipam.add(req))
    } else {
        // The IPAM plugin inherits this lock: if this process is killed, the plugin's own
        // PR_SET_PDEATHSIG ends it, and any process it left holds the lock until it is gone,
        // so DEL's IPAM release waits for the last writer of the allocation.
        // Busy means an IPAM plugin of this same attachment still runs: try again later. A
        // data dir that cannot hold the lock fails the intent record beside IPAM anyway, with
        // its own message.
        let ipam_lock = match ctx.store.lock_device(
            &ipam_lock_key(req),
            std::time::Duration::from_millis(config::DEFAULT_LOCK_TIMEOUT_MS),
        ) {
            Ok(lock) => Some(lock),
            Err(e @ Error::TryAgainLater(_)) => return Err(e),
            Err(e) => {
                crate::log::warn(&format!("IPAM runs without its lock: {e}"));
                None
            }
        };
        if let Some(lock) = &ipam_lock {
            lock.inherit_by_children()
                .map_err(|e| Error::io("letting the IPAM plugin inherit its lock", e))?;
        }
        let ipam_ops = ctx.ipam;
        std::thread::scope(|scope| {
            let ipam_add = scope.spawn(move || ipam_ops.add(req));
            let made = work(plan);
            let ipam = ipam_add
                .join()
                .unwrap_or_else(|_| Err(Error::IpamExec("the IPAM ADD thread panicked".into())));
            (made, ipam)
        })
    };
    let ipam = match ipam {
        Ok(r) => r,
        // Both failing hides neither; IPAM's first, as its code may ask the runtime to retry.
        Err(e) => {
            return Err(match made {
                Ok(_) => e,
                Err(m) => Error::Multiple(vec![e, m]),
            })
        }
    };
    if ipam.is_some() {
        plan.on_undo("ipam", move || ctx.ipam.del(req));
    }
    let made = made?;
    plan.checkpoint("ipam")?;
    Ok((made, ipam))
}

/// The per-attachment lock an IPAM plugin holds from ADD on (see `add_beside_ipam`).
fn ipam_lock_key(req: &Request) -> String {
    format!(
        "ipam-{}-{}-{}",
        req.conf.name, req.env.container_id, req.env.ifname
    )
}

/// IPAM DEL's outcome, run or waited for.
type IpamDel<'s> = Box<dyn FnOnce() -> Result<()> + 's>;

/// Runs `rest` (a mode's DEL) with IPAM DEL running beside it on a second thread when the conf
/// has IPAM: the two are independent, and the kernel work of DEL (a netns move, a netdev delete)
/// waits in the kernel long enough to hide most of the IPAM plugin's exec. `rest` gets IPAM DEL's
/// outcome to collect with its own errors.
fn del_beside_ipam<'s>(
    ctx: &'s Ctx<'s>,
    req: &'s Request,
    lock_timeout: std::time::Duration,
    rest: impl FnOnce(IpamDel<'_>) -> Result<()>,
) -> Result<()> {
    if req.conf.ipam.is_none() {
        return rest(Box::new(|| ctx.ipam.del(req)));
    }
    let ipam = ctx.ipam;
    let store = ctx.store;
    std::thread::scope(|scope| {
        // After the IPAM ADD of a killed ADD, if it still runs: it holds this lock (see
        // `add_beside_ipam`), and a release before it ends could be undone by its allocation.
        let ipam_del = scope.spawn(move || {
            let _ipam = store.lock_device(&ipam_lock_key(req), lock_timeout)?;
            ipam.del(req)
        });
        rest(Box::new(move || {
            ipam_del
                .join()
                .unwrap_or_else(|_| Err(Error::IpamExec("the IPAM DEL thread panicked".into())))
        }))
    })
}

/// DEL of the modes that keep a record (move, macvlan, ipoib): `release` undoes the kernel side
/// of the recorded attachment wherever it is now, then the permissions and device-info file go,
/// IPAM DEL runs (beside all of it, see `del_beside_ipam`), and the record is dropped only when
/// all of that succeeded, so a retried DEL does the rest. Every error is collected. With
/// `hold_device_lock`, the device's lock is held (waited for up to `lockTimeoutMs`) from
/// `release` to the end of the permission release; a lock that cannot be had ends DEL with its
/// error.
pub fn del_recorded(
    ctx: &Ctx<'_>,
    req: &Request,
    pc: &PluginConf,
    hold_device_lock: bool,
    release: impl FnOnce(&state::Attachment) -> Result<()>,
) -> Result<()> {
    del_beside_ipam(ctx, req, pc.lock_timeout, |ipam_del| {
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
                let _lock = match hold_device_lock {
                    true => Some(ctx.store.lock_device(&att.device_key, pc.lock_timeout)?),
                    false => None,
                };
                if let Err(e) = release(att) {
                    errors.push(e);
                }
                plan::kill_point(ctx.fault.as_ref(), "del-release")?;
                publish::release_all(ctx, att, &mut errors);
                plan::kill_point(ctx.fault.as_ref(), "del-published")?;
            }
            None => crate::log::info(&format!(
                "DEL {}:{}: no attachment record; nothing to undo",
                req.env.container_id, req.env.ifname
            )),
        }
        if let Err(e) = ipam_del() {
            errors.push(e);
        }
        plan::kill_point(ctx.fault.as_ref(), "del-ipam")?;
        if errors.is_empty() && att.is_some() {
            ctx.store
                .remove(&req.conf.name, &req.env.container_id, &req.env.ifname)?;
        }
        Error::collect(errors)
    })
}

/// CHECK's common start: the attachment's record (108 when there is none) and its pod netns
/// (3 when it cannot be opened: the container is gone).
pub fn check_subject(ctx: &Ctx<'_>, req: &Request) -> Result<(state::Attachment, Netns)> {
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
    Ok((att, ns))
}

/// CHECK: the pod interface CNI_IFNAME, looked up through netlink inside the pod netns (never the
/// host's /sys, which shows host devices of the same name); 108 when it is missing.
pub fn check_pod_link(ctx: &Ctx<'_>, req: &Request, ns: &Netns) -> Result<crate::kernel::Link> {
    ctx.kernel
        .link_by_name(crate::kernel::Ns::Pod(ns), &req.env.ifname)
        .map_err(|e| Error::kernel(format!("looking up {} in the pod", req.env.ifname), e))?
        .ok_or_else(|| {
            Error::CheckFailed(format!(
                "{} is missing from the pod netns {}",
                req.env.ifname,
                ns.path().display()
            ))
        })
}

/// Opens CNI_NETNS, checking it is a network namespace.
pub fn open_netns(path: Option<&Path>) -> Result<Netns> {
    let path = path.ok_or_else(|| Error::InvalidEnv {
        vars: vec!["CNI_NETNS".into()],
        msg: "required for this command".into(),
    })?;
    Netns::open(path).map_err(|e| {
        Error::Netns(format!(
            "CNI_NETNS {} is not a usable network namespace: {e}",
            path.display()
        ))
    })
}

/// The CNI plugin: parses this plugin's conf, builds the real kernel context, runs the mode.
#[derive(Default)]
pub struct RdmaNs;

impl RdmaNs {
    fn with_ctx<T>(
        &self,
        req: &Request,
        f: impl FnOnce(&Ctx<'_>, &PluginConf) -> Result<T>,
    ) -> Result<T> {
        let pc = PluginConf::from_conf(&req.conf)?;
        let kernel = RealKernel::new()
            .map_err(|e| Error::io("opening an rtnetlink socket in the host netns", e))?;
        let sys = SysRoot::from_env();
        let dev_dir = std::env::var_os("RDMA_NS_DEV_DIR")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| devperm::DEFAULT_DEV_DIR.into());
        let store = Store::new(&pc.data_dir);
        let ctx = Ctx {
            kernel: &kernel,
            sys: &sys,
            store: &store,
            ipam: &DelegatedIpam,
            rdma: &RealRdma::default(),
            dev_dir: &dev_dir,
            fault: plan::fault_from_env(),
        };
        f(&ctx, &pc)
    }
}

/// ADD into the plugin's own network namespace (`CNI_NETNS=/proc/self/ns/net`, or a bind mount
/// of the host's) would rename, address and bring up host devices in place: refused before
/// anything is looked at.
pub fn refuse_own_netns(path: Option<&Path>) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    let ns = open_netns(Some(path))?;
    let own = ns.is_current().map_err(|e| {
        Error::io(
            format!(
                "comparing CNI_NETNS {} with the host's netns",
                path.display()
            ),
            e,
        )
    })?;
    if own {
        return Err(Error::InvalidEnv {
            vars: vec!["CNI_NETNS".into()],
            msg: format!(
                "{} is the plugin's own network namespace (the host's), not a pod's; nothing was \
                 changed: pass the pod sandbox's netns",
                path.display()
            ),
        });
    }
    Ok(())
}

impl Plugin for RdmaNs {
    fn add(&self, req: &Request) -> Result<CniResult> {
        refuse_own_netns(req.env.netns.as_deref())?;
        self.with_ctx(req, |ctx, pc| match pc.mode {
            Mode::Move => move_dev::add(ctx, req, pc),
            Mode::Macvlan | Mode::Ipoib => child::add(ctx, req, pc),
            Mode::Rdma => chain::add(ctx, req, pc),
        })
    }

    fn del(&self, req: &Request) -> Result<()> {
        self.with_ctx(req, |ctx, pc| match pc.mode {
            Mode::Move => move_dev::del(ctx, req, pc),
            Mode::Macvlan | Mode::Ipoib => child::del(ctx, req, pc),
            Mode::Rdma => chain::del(ctx, req, pc),
        })
    }

    fn check(&self, req: &Request) -> Result<()> {
        self.with_ctx(req, |ctx, pc| match pc.mode {
            Mode::Move => move_dev::check(ctx, req, pc),
            Mode::Macvlan | Mode::Ipoib => child::check(ctx, req, pc),
            Mode::Rdma => chain::check(ctx, req, pc),
        })
    }

    fn status(&self, req: &Request) -> Result<()> {
        self.with_ctx(req, |ctx, _pc| status(ctx, req))
    }

    fn gc(&self, req: &Request) -> Result<()> {
        self.with_ctx(req, |ctx, pc| gc(ctx, req, pc.lock_timeout))
    }
}

/// STATUS: ready when the state dir is writable and IPAM says it is ready.
pub fn status(ctx: &Ctx<'_>, req: &Request) -> Result<()> {
    ctx.store
        .probe_writable()
        .map_err(|e| Error::NotAvailable(format!("{e}; ADDs would fail to record attachments")))?;
    ctx.ipam.status(req)
}

/// GC: release every attachment of this network that the runtime no longer lists as valid,
/// then let IPAM collect its own garbage. Keeps going on errors and reports them all.
pub fn gc(ctx: &Ctx<'_>, req: &Request, lock_timeout: std::time::Duration) -> Result<()> {
    let valid = &req.conf.valid_attachments;
    let (attachments, mut errors) = ctx.store.list(&req.conf.name)?;
    for att in attachments {
        let keep = valid
            .iter()
            .any(|v| v.container_id == att.container_id && v.ifname == att.ifname);
        if keep {
            continue;
        }
        crate::log::info(&format!("GC: releasing stale attachment {}", att.id()));
        let outcome = ctx
            .store
            .lock_device(&att.device_key, lock_timeout)
            .and_then(|_lock| {
                match (&att.child, att.mode.as_str()) {
                    (Some(_), _) => child::release_child(ctx.kernel, None, &att)?,
                    (None, "rdma") => chain::release(ctx, std::path::Path::new(&att.netns), &att)?,
                    (None, _) => move_dev::release_device(ctx.kernel, ctx.rdma, None, &att)?,
                }
                let mut published = Vec::new();
                publish::release_all(ctx, &att, &mut published);
                Error::collect(published)
            })
            .and_then(|_| {
                ctx.store
                    .remove(&att.network, &att.container_id, &att.ifname)
            });
        if let Err(e) = outcome {
            errors.push(e);
        }
    }
    if let Err(e) = ctx.ipam.gc(req) {
        errors.push(e);
    }
    Error::collect(errors)
}
