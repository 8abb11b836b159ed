//! The steps every mode shares once its device is in the pod: device permissions, the pod
//! interface's addresses and routes, the wait for its RoCE GIDs, the device-info file; then the
//! final record. Each mode lists the ones it runs, in order (`ModeDriver::STEPS`), and CHECK and
//! DEL go through the same list, so a step is written once: its ADD (with its undo and its kill
//! point), its CHECK and its release.
//!
//! A new step is a type implementing [`Step`] in a file of its own, and one line in the `STEPS`
//! of each mode that runs it, where it runs; what it records of its own it keeps in the record's
//! `steps` (see record.rs). What the modes' own ADD found, the steps read from [`PodSide`]:
//! the pod interface, IPAM's result, the pod's ib devices, where the GIDs show.

use std::path::Path;

use crate::attach::config::AddConf;
use crate::attach::gids::GidSource;
use crate::attach::plan::Plan;
use crate::attach::record::Attachment;
use crate::attach::Ctx;
use crate::cni::result::CniResult;
use crate::cni::{NetConf, Request};
use crate::error::{Error, Result};
use crate::kernel::rtnetlink::Link;
use crate::kernel::Netns;

/// One step of every mode's ADD once its device is in the pod, with its CHECK and its release.
pub trait Step: Sync {
    /// The step as the conf asks for it, read once when ADD starts (its fields, checked).
    fn configure(&self, conf: &NetConf) -> Result<Box<dyn StepAdd>>;

    /// CHECK: what ADD set up is still there. `link` is the pod interface the mode checked
    /// (None in chained mode).
    fn check(
        &self,
        _ctx: &Ctx<'_>,
        _subject: &CheckSubject<'_>,
        _link: Option<&Link>,
    ) -> Result<()> {
        Ok(())
    }

    /// DEL and GC: takes back what the record says ADD published. `netns` as for
    /// `ModeDriver::release`; it runs after the mode's release.
    fn release(&self, _ctx: &Ctx<'_>, _netns: Option<&Path>, _att: &Attachment) -> Result<()> {
        Ok(())
    }
}

/// A step as the conf configured it, ready for ADD.
pub trait StepAdd: std::fmt::Debug {
    /// Applies the step, registering its undo on `plan`, then its checkpoint (kill point).
    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()>;

    /// Runs once the intent record is written and before the mode moves or makes anything
    /// (`lifecycle::write_intent`): for a step that must read, and record in `att`, what the
    /// mode's move is about to reset in the host (RDMA CM's defaults of an ib device that
    /// moves). Registers its undo and passes its checkpoint like `apply`.
    fn before_moves<'a>(
        &self,
        _ctx: &'a Ctx<'a>,
        _att: &mut Attachment,
        _plan: &mut Plan<'a>,
    ) -> Result<()> {
        Ok(())
    }

    /// Whether it reads [`PodSide::ib_devices`]: a mode that must look them up before its
    /// device moves (while the host's /sys still shows it) does so only when a step reads them.
    fn reads_ib_devices(&self) -> bool {
        false
    }
}

/// What CHECK checks: the request, the attachment's record and its pod netns.
pub struct CheckSubject<'a> {
    pub req: &'a Request,
    pub att: &'a Attachment,
    pub ns: &'a Netns,
}

/// An attachment once its mode has put its device into the pod: what the steps read and fill
/// in, and what the final record and ADD's result are made of.
pub struct PodSide<'a> {
    pub ctx: &'a Ctx<'a>,
    pub req: &'a Request,
    pub conf: &'a AddConf<'a>,
    pub netns: &'a Netns,
    pub att: Attachment,
    /// The pod interface this plugin made; None in chained mode (the previous plugin's).
    pub link: Option<Link>,
    /// What ADD returns: IPAM's result (empty without IPAM), or in chained mode prevResult, as
    /// the pod interface carries it.
    pub result: CniResult,
    /// The ib devices the pod gets: `devicePermissions` covers their char devices.
    pub ib_devices: Vec<String>,
    /// The ib devices the device-info file names when the attachment has no PCI function.
    pub info_ib_devices: Vec<String>,
    /// Where the pod IPs' RoCE GIDs show, when the mode waits for them.
    pub gids: Option<GidSource>,
    /// The RoCE ports (ib device, port) the kernel scopes to this pod alone: the mode's ib
    /// device when it moved into the pod's netns, and a Soft-RoCE device of its own. Every
    /// other port of `gids` is shared with the node.
    pub own_ports: Vec<(String, u32)>,
}

impl<'a> PodSide<'a> {
    /// The attachment `att` of the request `req`, its device in the pod netns `netns`, ADD's
    /// `result` so far: no pod interface, ib device or GIDs yet (the mode sets its own); the
    /// mode's ib device among `own_ports` when it moved into the pod (its record says so).
    pub fn new(
        ctx: &'a Ctx<'a>,
        req: &'a Request,
        conf: &'a AddConf<'a>,
        netns: &'a Netns,
        att: Attachment,
        result: CniResult,
    ) -> PodSide<'a> {
        let own_ports = att
            .ib_device()
            .filter(|moved| !moved.infiniband)
            .map(|moved| (moved.ibdev.clone(), moved.port))
            .into_iter()
            .collect();
        PodSide {
            ctx,
            req,
            conf,
            netns,
            att,
            link: None,
            result,
            ib_devices: Vec::new(),
            info_ib_devices: Vec::new(),
            gids: None,
            own_ports,
        }
    }

    /// The pod interface, for a step that configures it.
    pub fn link(&self) -> Result<&Link> {
        self.link.as_ref().ok_or_else(|| {
            Error::State(format!(
                "{}: mode {} makes no pod interface to configure",
                self.req.env.ifname,
                self.att.mode().as_str()
            ))
        })
    }
}

/// Runs the configured steps on `pod`, in order, then writes the final record: ADD's result.
pub fn run<'a>(mut pod: PodSide<'a>, plan: &mut Plan<'a>) -> Result<CniResult> {
    let conf = pod.conf;
    for step in &conf.steps {
        step.apply(&mut pod, plan)?;
    }
    crate::attach::lifecycle::finish_add(pod, plan)
}

/// The steps of a mode as the conf configures them, in the mode's order.
pub fn configure(steps: &[&dyn Step], conf: &NetConf) -> Result<Vec<Box<dyn StepAdd>>> {
    steps.iter().map(|step| step.configure(conf)).collect()
}
