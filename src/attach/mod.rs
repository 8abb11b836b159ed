//! What an attachment does: the plugin's modes as steps with undo, over the kernel seam.

pub mod addresses;
pub mod check;
pub mod claim;
pub mod conf_fields;
pub mod config;
pub mod device_info;
pub mod gc;
pub mod gids;
pub mod ib_device;
pub mod ipam;
pub mod lifecycle;
pub mod modes;
pub mod operations;
pub mod permissions;
pub mod plan;
pub mod qos;
pub mod rail;
pub mod record;
pub mod select;
pub mod soft_roce;
pub mod steps;
pub mod store;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

use std::path::Path;

use crate::cni::result::CniResult;
use crate::cni::{Plugin, Request};
use crate::error::{Error, Result};
use crate::kernel::rdma_ops::{RdmaOps, RealRdma};
use crate::kernel::rtnetlink::NetOps;
use crate::kernel::rtnetlink::RealKernel;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::Netns;

use config::PluginConf;
use ipam::{DelegatedIpam, IpamOps};
use store::Store;

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

/// Where the RDMA char devices are: `/dev/infiniband`. Debug builds let tests point it at a
/// scratch dir with `RDMA_NS_DEV_DIR`; release builds never read it, since it would redirect the
/// root plugin's chmod/chown.
fn dev_dir() -> std::path::PathBuf {
    #[cfg(debug_assertions)]
    if let Some(dir) = std::env::var_os("RDMA_NS_DEV_DIR").filter(|v| !v.is_empty()) {
        return dir.into();
    }
    permissions::DEFAULT_DEV_DIR.into()
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
        let dev_dir = dev_dir();
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
        let claims = claim::ClaimStore::new(&config::data_dir(&req.conf)?);
        let wanted = claim::DraConf::from_conf(&req.conf)?;
        let req = &claim::for_interface(req, &wanted);
        let (req, dra) = match claim::resolve_add(req, &claims) {
            Ok(Some(found)) => found,
            Ok(None) => {
                let added = self.add_resolved(req)?;
                if let Err(e) = self.tie_to_extended_claim(req, &wanted, &claims) {
                    return Err(self.undo_add(req, e));
                }
                return Ok(added);
            }
            Err(Error::NoPreparedClaim(why)) if wanted.optional => {
                crate::log_info!("{why}; passing the previous result through (dra.optional)");
                return Ok(req.conf.prev_result.clone().unwrap_or_default());
            }
            Err(e) => return Err(e),
        };
        let added = self
            .add_resolved(&req)
            .map(|ours| match &req.conf.prev_result {
                Some(prev) if wanted.ifname.is_some() => claim::chain_results(prev, ours),
                _ => ours,
            });
        match &added {
            // What the pod's containers get through the claim's CDI spec: a failure here
            // would leave them without their device, so ADD fails (and is rolled back).
            Ok(_) => {
                if let Err(e) = self.report_to_claim(&req, &wanted, &dra) {
                    return Err(self.undo_add(&req, e));
                }
                if let Err(e) = claims.clear_add_failure(&dra.claim.uid) {
                    crate::log_warn!("claim {}: {e}", dra.claim);
                }
            }
            // What the driver shows on the claim (status.devices conditions).
            Err(e) => {
                let failure = claim::AddFailure {
                    container_id: req.env.container_id.clone(),
                    ifname: req.env.ifname.clone(),
                    device: dra.device.clone(),
                    code: e.code(),
                    message: e.to_string(),
                };
                if let Err(e) = claims.record_add_failure(&dra.claim.uid, &failure) {
                    crate::log_warn!("claim {}: {e}", dra.claim);
                }
            }
        }
        added
    }

    fn del(&self, req: &Request) -> Result<()> {
        let wanted = claim::DraConf::from_conf(&req.conf)?;
        let req = &claim::for_interface(req, &wanted);
        self.unreport_from_claim(req, &wanted)?;
        self.with_ctx(req, |ctx, pc| lifecycle::del(ctx, req, pc))
    }

    fn check(&self, req: &Request) -> Result<()> {
        let req = &claim::for_interface(req, &claim::DraConf::from_conf(&req.conf)?);
        self.with_ctx(req, |ctx, pc| check::check(ctx, req, pc))
    }

    fn status(&self, req: &Request) -> Result<()> {
        self.with_ctx(req, |ctx, _pc| status(ctx, req))
    }

    fn gc(&self, req: &Request) -> Result<()> {
        self.with_ctx(req, |ctx, pc| gc::gc(ctx, req, pc.lock_timeout))
    }
}

impl RdmaNs {
    /// What the pod got with the attachment ADD just recorded, into its claim's CDI spec
    /// (claim/report.rs).
    fn report_to_claim(
        &self,
        req: &Request,
        wanted: &claim::DraConf,
        dra: &claim::DraDevice,
    ) -> Result<()> {
        let data_dir = config::data_dir(&req.conf)?;
        let store = Store::new(&data_dir);
        let env = &req.env;
        let Some(att) = store.load(&req.conf.name, &env.container_id, &env.ifname)? else {
            return Ok(());
        };
        let dirs = claim::report::ClaimDirs {
            data_dir: &data_dir,
            cdi_dir: &wanted.cdi_dir,
        };
        let sys = SysRoot::from_env();
        let env = crate::log::timed(
            || "the pod's variables".to_string(),
            || match &req.env.netns {
                Some(netns) => claim::report::pod_variables(netns, &sys, &dev_dir()),
                None => Vec::new(),
            },
        );
        crate::log::timed(
            || format!("the CDI edits of claim {}", dra.claim),
            || claim::report::report_pod(&sys, &dirs, &store, &att, dra, &env),
        )
    }

    /// After an ADD of a conf that names no claim: the pod's extended-resource claim's device on
    /// the same netdev (claim/extended.rs), named in the record and reported to the claim.
    fn tie_to_extended_claim(
        &self,
        req: &Request,
        wanted: &claim::DraConf,
        claims: &claim::ClaimStore,
    ) -> Result<()> {
        let Some(pod_uid) = req.env.args.get("K8S_POD_UID").filter(|u| !u.is_empty()) else {
            return Ok(());
        };
        let data_dir = config::data_dir(&req.conf)?;
        let store = Store::new(&data_dir);
        let env = &req.env;
        let Some(mut att) = store.load(&req.conf.name, &env.container_id, &env.ifname)? else {
            return Ok(());
        };
        let found = claim::extended::device_of(claims, &wanted.kubelet_dir, pod_uid, &att)?;
        let Some(dra) = found else {
            return Ok(());
        };
        let named = serde_json::to_value(&dra).map_err(|e| Error::State(e.to_string()))?;
        if let Some(conf) = att.conf.as_mut().and_then(|c| c.as_object_mut()) {
            conf.insert("draDevice".into(), named);
        }
        store.update(&att)?;
        crate::log_info!(
            "{}: the device of extended-resource claim {}",
            att.id(),
            dra.claim
        );
        self.report_to_claim(req, wanted, &dra)
    }

    /// Before DEL: the attachment's report out of its claim's CDI spec, if it has one.
    fn unreport_from_claim(&self, req: &Request, wanted: &claim::DraConf) -> Result<()> {
        let data_dir = config::data_dir(&req.conf)?;
        let env = &req.env;
        let Ok(Some(att)) =
            Store::new(&data_dir).load(&req.conf.name, &env.container_id, &env.ifname)
        else {
            // No record (or an unreadable one, which DEL itself reports): nothing reported.
            return Ok(());
        };
        let dirs = claim::report::ClaimDirs {
            data_dir: &data_dir,
            cdi_dir: &wanted.cdi_dir,
        };
        claim::report::report_del(&SysRoot::from_env(), &dirs, &att)
    }

    /// A DEL of the attachment an ADD just made, after what followed it failed with `e`: the
    /// host goes back to how it was, and `e` is the answer (with the DEL's failure, if any).
    fn undo_add(&self, req: &Request, e: Error) -> Error {
        let del = Request {
            env: crate::cni::CniEnv {
                command: crate::cni::Command::Del,
                ..req.env.clone()
            },
            conf: req.conf.clone(),
            stdin: req.stdin.clone(),
        };
        match self.with_ctx(&del, |ctx, pc| lifecycle::del(ctx, &del, pc)) {
            Ok(()) => e,
            Err(undo) => Error::State(format!("{e}; undoing the ADD failed too: {undo}")),
        }
    }

    /// ADD once the device is known: a DRA network's request carries its claim's device.
    fn add_resolved(&self, req: &Request) -> Result<CniResult> {
        self.with_ctx(req, |ctx, pc| {
            let added = pc.mode.add(ctx, req, pc);
            if added.is_err() {
                // Rolled back, so gone: its lock file too, unless an IPAM plugin holds it.
                let env = &req.env;
                ctx.store
                    .remove_attachment_lock(&req.conf.name, &env.container_id, &env.ifname);
            }
            added
        })
    }
}

/// STATUS: ready when the state dir is writable and IPAM says it is ready.
pub fn status(ctx: &Ctx<'_>, req: &Request) -> Result<()> {
    ctx.store
        .probe_writable()
        .map_err(|e| Error::NotAvailable(format!("{e}; ADDs would fail to record attachments")))?;
    ctx.ipam.status(req)
}
