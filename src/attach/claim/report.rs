//! What an ADD of a claim's device tells the claim's CDI spec (records/cdi.rs), before ADD
//! answers: the runtime creates the pod's containers after the sandbox's ADD, and reads the
//! spec then.
//!
//! - The nodes of the ib device the pod got, as the kernel numbers them now: a Soft-RoCE device
//!   the ADD made (its number is the kernel's choice then), a device moved into the pod in
//!   exclusive netns mode (a move registers its char devices again, under new numbers), or the
//!   claim's device itself (shared netns mode). They are read from the host's sysfs: the
//!   `infiniband_verbs` and `infiniband_mad` classes are not tagged by netns, so a moved
//!   device's nodes show there too.
//! - The pod's NCCL and UCX variables, as `rdma-ns env` computes them in the pod
//!   ([`pod_variables`]): every container of the pod then starts with them, an image without
//!   rdma-ns in it too. Each ADD of a sandbox's networks computes them for the whole pod and
//!   gives them to every claim device the pod has attached so far, so that after the last ADD
//!   every CDI device of the pod says the same.
//!
//! DEL takes the attachment's report back first, then releases the attachment, so a DEL
//! killed in between leaves no report of a gone pod; a report whose attachment record is gone
//! is dropped by the next update anyway.

use std::path::Path;

use crate::attach::record::Attachment;
use crate::discover::{self, vars};
use crate::error::Result;
use crate::kernel::rtnetlink::RealKernel;
use crate::kernel::sysfs::SysRoot;
use crate::records::cdi::{self, attachment_name, PodReport};
use crate::records::claim::{DraDevice, PreparedDevice};

/// Where the claims' records and specs are.
pub struct ClaimDirs<'a> {
    pub data_dir: &'a Path,
    pub cdi_dir: &'a Path,
}

/// The ib device the pod got with `att` of claim device `device`, and its port.
fn pod_ib_device(att: &Attachment, device: &PreparedDevice) -> (Option<String>, Option<u32>) {
    if let Some(soft) = att.soft_roce() {
        return (Some(soft.ibdev), Some(1));
    }
    if let Some(moved) = att.ib_device() {
        return (Some(moved.ibdev.clone()), Some(moved.port));
    }
    (device.ibdev.clone(), device.port)
}

/// The report of `att`, an attachment of claim device `device`.
pub fn report_of(
    sys: &SysRoot,
    att: &Attachment,
    device: &PreparedDevice,
    env: &[String],
) -> Result<PodReport> {
    let (ibdev, port) = pod_ib_device(att, device);
    let nodes = cdi::device_nodes(sys, ibdev.as_deref(), port, device.umad).map_err(|e| {
        crate::error::Error::io(
            format!(
                "reading the char devices of {}",
                ibdev.as_deref().unwrap_or("rdma_cm")
            ),
            e,
        )
    })?;
    Ok(PodReport {
        attachment: attachment_name(&att.network, &att.container_id, &att.ifname),
        pod_uid: att.pod.as_ref().and_then(|p| p.uid.clone()),
        ibdev: ibdev.filter(|i| Some(i) != device.ibdev.as_ref()),
        nodes,
        env: env.to_vec(),
    })
}

/// After a successful ADD: `att`'s report into its claim device's, replacing an earlier one of
/// the same attachment (a sandbox made again), and the spec rendered again.
pub fn report_add(
    sys: &SysRoot,
    dirs: &ClaimDirs<'_>,
    att: &Attachment,
    dra: &DraDevice,
    env: &[String],
) -> Result<()> {
    let mut failed = None;
    cdi::update(dirs.data_dir, dirs.cdi_dir, sys, &dra.claim.uid, |claim| {
        let Some(device) = claim.devices.iter_mut().find(|d| d.is(dra)) else {
            return;
        };
        match report_of(sys, att, device, env) {
            Ok(report) => {
                device.pods.retain(|p| p.attachment != report.attachment);
                device.pods.push(report);
            }
            Err(e) => failed = Some(e),
        }
    })?;
    failed.map_or(Ok(()), Err)
}

/// Before DEL releases `att`: its report out of its claim's record, and the spec rendered
/// again. An attachment of no claim changes nothing.
pub fn report_del(sys: &SysRoot, dirs: &ClaimDirs<'_>, att: &Attachment) -> Result<()> {
    let Some(dra) = DraDevice::of_record(att.conf.as_ref()) else {
        return Ok(());
    };
    let name = attachment_name(&att.network, &att.container_id, &att.ifname);
    cdi::update(dirs.data_dir, dirs.cdi_dir, sys, &dra.claim.uid, |claim| {
        for d in &mut claim.devices {
            d.pods.retain(|p| p.attachment != name);
        }
    })
}

/// The variable that names the problems `rdma-ns env` found in the pod, when it found any: env
/// prints no variable then (a wrong GID index is worse than none), and neither do the CDI edits.
pub const PROBLEMS_VAR: &str = "RDMA_NS_ENV_PROBLEMS";

/// `rdma-ns env`'s variables for the pod of netns `netns` (`NAME=value`), from the node: the
/// same discovery, from a sysfs mounted in the pod's netns, with the uverbs nodes of `dev_dir`
/// (the node's, which hold the pod's). With problems, only [`PROBLEMS_VAR`].
pub fn pod_variables(netns: &Path, sys: &SysRoot, dev_dir: &Path) -> Vec<String> {
    let found = RealKernel::new().map_err(|e| e.to_string()).and_then(|k| {
        discover::discover_netns(&k, Some(netns), sys, dev_dir).map_err(|e| e.to_string())
    });
    let found = match found {
        Ok(f) => f,
        Err(e) => return vec![format!("{PROBLEMS_VAR}={e}")],
    };
    let (variables, more) = vars::variables(&found);
    let problems: Vec<String> = found
        .problems
        .iter()
        .chain(more.iter())
        .map(ToString::to_string)
        .collect();
    if !problems.is_empty() {
        crate::log_warn!(
            "the pod's NCCL/UCX variables are left out of its CDI edits: {}",
            problems.join("; ")
        );
        return vec![format!("{PROBLEMS_VAR}={}", problems.join("; "))];
    }
    variables
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// After a successful ADD of `att` (claim device `dra`): its report, and the pod's variables
/// (`env`) given to every other claim device the same sandbox attached (its earlier networks).
pub fn report_pod(
    sys: &SysRoot,
    dirs: &ClaimDirs<'_>,
    store: &crate::attach::store::Store,
    att: &Attachment,
    dra: &DraDevice,
    env: &[String],
) -> Result<()> {
    report_add(sys, dirs, att, dra, env)?;
    let (all, _) = store.list_all();
    for other in all.iter().filter(|o| o.container_id == att.container_id) {
        if other.is(&att.network, &att.container_id, &att.ifname) {
            continue;
        }
        if let Some(d) = DraDevice::of_record(other.conf.as_ref()) {
            report_add(sys, dirs, other, &d, env)?;
        }
    }
    Ok(())
}
