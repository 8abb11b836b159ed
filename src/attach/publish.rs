//! What an attachment publishes beyond the interface: RDMA char-device permissions and the NPWG
//! device-info file. Steps with undo for ADD, and their release for DEL/GC.

use std::path::{Path, PathBuf};

use crate::attach::devinfo;
use crate::attach::devperm::{self, PermChange};
use crate::attach::plan::Plan;
use crate::attach::state::Attachment;
use crate::attach::Ctx;
use crate::cni::Request;
use crate::error::{Error, Result};
use crate::kernel::topology::RdmaSysfs;

/// The permission changes recorded by every other attachment on this node: a node they changed
/// is restored only when the last of them is released (rdma_cm is node-wide).
fn others(ctx: &Ctx<'_>, att: &Attachment) -> Vec<PermChange> {
    ctx.store
        .list_all()
        .into_iter()
        .filter(|a| {
            !(a.network == att.network
                && a.container_id == att.container_id
                && a.ifname == att.ifname)
        })
        .flat_map(|a| a.perm_changes)
        .collect()
}

/// Step `devperm`: sets mode/group of the char devices of `ibdevs` (and rdma_cm) per conf
/// `devicePermissions`. Runs after any ib device move: a move re-creates uverbs/umad nodes,
/// possibly with other numbers, so they are read from sysfs (through `ibdev`) only now. The
/// changes are in the record on disk before the first chmod.
pub fn apply_permissions<'a>(
    ctx: &'a Ctx<'a>,
    req: &Request,
    att: &mut Attachment,
    ibdevs: &[String],
    plan: &mut Plan<'a>,
) -> Result<()> {
    let Some(perms) = devperm::from_conf(&req.conf)? else {
        return plan.checkpoint("devperm");
    };
    let wants_per_device = perms.uverbs.is_some() || perms.umad.is_some() || perms.issm.is_some();
    if wants_per_device && ibdevs.is_empty() {
        return Err(Error::DevicePermission(format!(
            "devicePermissions asks for uverbs/umad/issm modes, but {} has no ib device: remove \
             those keys or select an RDMA netdev",
            att.host.name
        )));
    }
    let lock = ctx
        .store
        .lock_device(devperm::LOCK_KEY, std::time::Duration::from_secs(10))?;
    let names: Vec<&str> = ibdevs.iter().map(String::as_str).collect();
    let devs = devperm::char_devs_for(&RdmaSysfs::new(ctx.sys), &names, &perms)?;
    let changes = devperm::plan(ctx.dev_dir, &devs, &perms, &others(ctx, att))?;
    att.perm_changes = changes.clone();
    ctx.store.save(att)?;
    let applied = devperm::apply(&changes);
    drop(lock);
    let undo_att = att.clone();
    plan.on_undo("devperm", move || release_permissions(ctx, &undo_att));
    applied?;
    plan.checkpoint("devperm")
}

/// DEL/GC/undo: restores each changed node unless another live attachment still uses it.
pub fn release_permissions(ctx: &Ctx<'_>, att: &Attachment) -> Result<()> {
    if att.perm_changes.is_empty() {
        return Ok(());
    }
    let _lock = ctx
        .store
        .lock_device(devperm::LOCK_KEY, std::time::Duration::from_secs(10))?;
    let others = others(ctx, att);
    devperm::restore(&att.perm_changes, devperm::used_by(&others))
}

/// Step `device-info`: writes the NPWG device-info file at `runtimeConfig.CNIDeviceInfoFile`
/// for the attachment's PCI function (the moved device, a child's parent, a chained VF), keeping
/// what a device plugin already wrote there for the same function. Without a PCI function,
/// `ib_devices` (a child parent's ib devices) are written alone. Undo puts back what was there.
pub fn write_device_info<'a>(
    ctx: &'a Ctx<'a>,
    req: &Request,
    att: &mut Attachment,
    ib_devices: &[String],
    plan: &mut Plan<'a>,
) -> Result<()> {
    let Some(path) = devinfo::path_from_conf(&req.conf)? else {
        return plan.checkpoint("device-info");
    };
    let info = match (&att.host.pci, ib_devices) {
        (Some(pci), _) => devinfo::for_pci(&RdmaSysfs::new(ctx.sys), pci)?,
        (None, []) => {
            crate::log::info(&format!(
                "{}: no PCI function and no ib device, so no device-info file is written at {}",
                att.host.name,
                path.display()
            ));
            return plan.checkpoint("device-info");
        }
        (None, ibdevs) => devinfo::for_rdma_devices(ibdevs),
    };
    let prev = devinfo::read(&path)?;
    let info = info.merged_over(prev.as_ref());
    devinfo::write(&path, &info)?;
    att.device_info_file = Some(path.display().to_string());
    let undo_path: PathBuf = path.clone();
    plan.on_undo("device-info", move || match &prev {
        Some(p) => devinfo::write(&undo_path, p),
        None => devinfo::remove(&undo_path),
    });
    plan.checkpoint("device-info")
}

/// DEL/GC: removes the device-info file the attachment wrote (absent is fine).
pub fn remove_device_info(att: &Attachment) -> Result<()> {
    match &att.device_info_file {
        Some(p) => devinfo::remove(Path::new(p)),
        None => Ok(()),
    }
}

/// DEL/GC: everything published, released; errors collected.
pub fn release_all(ctx: &Ctx<'_>, att: &Attachment, errors: &mut Vec<Error>) {
    if let Err(e) = release_permissions(ctx, att) {
        errors.push(e);
    }
    if let Err(e) = remove_device_info(att) {
        errors.push(e);
    }
}
