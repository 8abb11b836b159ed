//! The lifecycle every mode shares: the intent record before the first kernel change, IPAM
//! beside the kernel work, the final record, and the one DEL frame (release, published things,
//! IPAM, record).

use crate::attach::config::{self, AddConf, PluginConf};
use crate::attach::plan;
use crate::attach::plan::Plan;
use crate::attach::record::{self, Attachment, Phase};
use crate::attach::steps::PodSide;
use crate::attach::Ctx;
use crate::cni::result::CniResult;
use crate::cni::Request;
use crate::error::{Error, Result};
use crate::kernel::Netns;

/// The intent record, written durably before the first kernel change so that a plugin killed
/// mid-ADD leaves DEL something to go by; its undo removes it. Then each step of `conf` reads
/// what it must before the mode moves anything (`StepAdd::before_moves`), recording it in
/// `att`.
pub fn write_intent<'a>(
    ctx: &'a Ctx<'a>,
    conf: &AddConf<'_>,
    att: &mut Attachment,
    plan: &mut plan::Plan<'a>,
) -> Result<()> {
    ctx.store.save(att)?;
    let (net, cid, ifn) = (
        att.network.clone(),
        att.container_id.clone(),
        att.ifname.clone(),
    );
    plan.on_undo("state-intent", move || ctx.store.remove(&net, &cid, &ifn));
    plan.checkpoint("state-intent")?;
    for step in &conf.steps {
        step.before_moves(ctx, att, plan)?;
    }
    Ok(())
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
        // The IPAM plugin inherits this lock and holds it for as long as it (or anything it
        // started) runs, also when this process is killed: it is not killed with us (see
        // `cni::ipam::exec`), so it finishes its allocation, and DEL's IPAM release waits for
        // the lock, then releases what it allocated. Busy means an IPAM plugin of this same
        // attachment still runs: try again later. A data dir that cannot hold the lock fails
        // the intent record beside IPAM anyway, with its own message.
        let ipam_lock = match ctx.store.lock_attachment(
            &req.conf.name,
            &req.env.container_id,
            &req.env.ifname,
            std::time::Duration::from_millis(config::DEFAULT_LOCK_TIMEOUT_MS),
        ) {
            Ok(lock) => Some(lock),
            Err(e @ Error::TryAgainLater(_)) => return Err(e),
            Err(e) => {
                crate::log_warn!("IPAM runs without its lock: {e}");
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
        // `add_beside_ipam`), and a release before it ends would leave the allocation it is
        // making. One that does not end within the lock timeout fails this DEL with code 11,
        // and the runtime's retry releases it once it is gone.
        let ipam_del = scope.spawn(move || {
            let _ipam = store.lock_attachment(
                &req.conf.name,
                &req.env.container_id,
                &req.env.ifname,
                lock_timeout,
            )?;
            ipam.del(req)
        });
        rest(Box::new(move || {
            ipam_del
                .join()
                .unwrap_or_else(|_| Err(Error::IpamExec("the IPAM DEL thread panicked".into())))
        }))
    })
}

/// DEL, the same frame for every mode: the recorded mode's driver takes back the kernel side of
/// the attachment wherever it is now, then the permissions and device-info file go, IPAM DEL
/// runs (beside all of it, see `del_beside_ipam`), and the record is dropped only when all of
/// that succeeded, so a retried DEL does the rest. Every error is collected. For a mode whose
/// device others can ask for, the device's lock is held (waited for up to `lockTimeoutMs`) from
/// the release to the end of the permission release; a lock that cannot be had ends DEL with
/// its error. No record: nothing to undo but IPAM.
pub fn del(ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<()> {
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
                let _lock = match att.mode().locks_device() {
                    true => Some(ctx.store.lock_device(&att.device_key, pc.lock_timeout)?),
                    false => None,
                };
                if let Err(e) = att.mode_state.release(ctx, req.env.netns.as_deref(), att) {
                    errors.push(e);
                }
                plan::kill_point(ctx.fault.as_ref(), "del-release")?;
                release_all(ctx, req.env.netns.as_deref(), att, &mut errors);
                plan::kill_point(ctx.fault.as_ref(), "del-published")?;
            }
            None => crate::log_info!(
                "DEL {}:{}: no attachment record; nothing to undo",
                req.env.container_id,
                req.env.ifname
            ),
        }
        if let Err(e) = ipam_del() {
            errors.push(e);
        }
        plan::kill_point(ctx.fault.as_ref(), "del-ipam")?;
        if errors.is_empty() && att.is_some() {
            ctx.store
                .remove(&req.conf.name, &req.env.container_id, &req.env.ifname)?;
        }
        if errors.is_empty() {
            // Gone: its lock files go too, unless an IPAM plugin or a new ADD holds them.
            ctx.store.remove_attachment_lock(
                &req.conf.name,
                &req.env.container_id,
                &req.env.ifname,
            );
            if let Some(att) = att.as_ref().filter(|a| a.mode().locks_device()) {
                ctx.store.remove_lock(&att.device_key);
            }
        }
        Error::collect(errors)
    })
}

/// The pod netns to release from: `netns` as the runtime gave it, else the recorded one while it
/// is still the same netns (a path reused by a newer netns is not the pod's). None when it is
/// gone; an error when it exists but cannot be opened.
pub fn pod_netns(netns: Option<&std::path::Path>, att: &Attachment) -> Result<Option<Netns>> {
    let (path, recorded) = match netns {
        Some(p) => (p.to_path_buf(), false),
        None if att.netns.is_empty() => return Ok(None),
        None => (std::path::PathBuf::from(&att.netns), true),
    };
    let ns = match Netns::open(&path) {
        Ok(ns) => ns,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Netns(format!(
                "cannot open the pod netns {} of {}: {e}",
                path.display(),
                att.id()
            )))
        }
    };
    if recorded && att.netns_id.is_some() && record::NetnsId::of(&ns) != att.netns_id {
        crate::log_info!(
            "{}: {} now names another netns than the pod's, which is gone",
            att.id(),
            path.display()
        );
        return Ok(None);
    }
    Ok(Some(ns))
}

/// DEL/GC: what the mode's steps published (device permissions, the device-info file, ...),
/// released after the mode's own release; errors collected.
pub fn release_all(
    ctx: &Ctx<'_>,
    netns: Option<&std::path::Path>,
    att: &Attachment,
    errors: &mut Vec<Error>,
) {
    for step in att.mode().steps() {
        if let Err(e) = step.release(ctx, netns, att) {
            errors.push(e);
        }
    }
}

/// The last step of every ADD: the record becomes `ready` (with the IPAM result, for DEL
/// without prevResult, in the modes that made the pod interface) and is appended, without
/// fsync (store.rs: only a power loss can lose it, and the intent line before it serves DEL).
/// The result describes the pod interface the mode made, every IP on it; chained mode's is
/// prevResult as it came.
pub fn finish_add<'a>(pod: PodSide<'a>, plan: &mut Plan<'a>) -> Result<CniResult> {
    let PodSide {
        ctx,
        req,
        netns,
        mut att,
        link,
        mut result,
        ..
    } = pod;
    att.phase = Phase::Ready;
    if let Some(pod_interface) = att.pod_interface_mut() {
        pod_interface.ipam_result = if result.ips.is_empty() && result.routes.is_empty() {
            None
        } else {
            Some(result.to_value("1.1.0")?)
        };
    }
    ctx.store.update(&att)?;
    plan.checkpoint("state")?;
    let Some(link) = link else {
        return Ok(result);
    };
    result.interfaces = vec![crate::cni::result::Interface {
        name: req.env.ifname.clone(),
        mac: Some(link.hwaddr_string()),
        mtu: Some(link.mtu),
        sandbox: Some(netns.path().display().to_string()),
        pci_id: att.pci_function().map(str::to_string),
        ..Default::default()
    }];
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    Ok(result)
}
