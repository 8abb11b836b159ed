//! The NPWG device-info file (k8snetworkplumbingwg device-info-spec, version 1.1.0).
//!
//! With the `CNIDeviceInfoFile` capability, Multus passes `runtimeConfig.CNIDeviceInfoFile`, a
//! path unique per attachment (`/var/run/k8s.cni.cncf.io/devinfo/cni/<unique>`); after the
//! plugin chain it copies the file's content into the pod's `network-status` annotation as
//! `device-info`. The spec (§4.2) lets a CNI plugin write the file when it does not exist and
//! read and update it when it does (Multus first copies the device plugin's file there when the
//! network has a `resourceName`), and asks the writer to create the directory when missing.
//!
//! Format (§3): `{"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:3b:00.2",
//! "rdma-device": "mlx5_2", "pf-pci-address": "0000:3b:00.0"}}`; every `pci` key but
//! `pci-address` is optional and left out when absent. The spec's types are `pci`, `vdpa`,
//! `vhost-user` and `memif`: there is no type for auxiliary devices (mlx5 SFs), so none is
//! written for them. `rdma-device` is a string naming the RDMA device; the spec says nothing
//! about several, and the SR-IOV network device plugin joins them with `,`, which is done here
//! too.

use crate::attach::plan::Plan;
use crate::attach::record::{Attachment, Phase};
use crate::attach::steps::{PodSide, Step, StepAdd};
use crate::attach::Ctx;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::kernel::topology::{BusDevice, RdmaSysfs};

/// The spec version written.
pub const SPEC_VERSION: &str = "1.1.0";

/// The `type` of PCI devices.
pub const TYPE_PCI: &str = "pci";

/// The field named in errors about the path.
const FIELD: &str = "runtimeConfig.CNIDeviceInfoFile";

/// A device-info map. Keys this module does not know (other types' maps, newer fields) are
/// kept in `extra`, so a file read and written back loses nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    #[serde(rename = "type")]
    pub device_type: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<PciDevice>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `pci` map (§3.1.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PciDevice {
    /// `dddd:BB:DD.f`. The spec requires it; it is left out only for an ib device with no PCI
    /// function at all (Soft-RoCE over a virtual netdev), where `rdma-device` is all there is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost_net: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pf_pci_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub representor_device: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PciDevice {
    pub fn new(pci_address: impl Into<String>) -> PciDevice {
        PciDevice {
            pci_address: Some(pci_address.into()),
            vhost_net: None,
            rdma_device: None,
            pf_pci_address: None,
            representor_device: None,
            extra: Map::new(),
        }
    }
}

impl DeviceInfo {
    /// `type: pci` at the spec version this module writes.
    pub fn pci(pci: PciDevice) -> DeviceInfo {
        DeviceInfo {
            device_type: TYPE_PCI.to_string(),
            version: SPEC_VERSION.to_string(),
            pci: Some(pci),
            extra: Map::new(),
        }
    }

    /// Update of an existing file (§5.1.2): when `existing` describes the same PCI function,
    /// what it knows and this does not (a device plugin's `representor-device`, `vhost-net`,
    /// unknown keys) is kept; this one's values win. A file about another device or of another
    /// type is replaced: this plugin knows what it attached.
    pub fn merged_over(mut self, existing: Option<&DeviceInfo>) -> DeviceInfo {
        let (Some(ours), Some(old)) = (
            self.pci.as_mut(),
            existing
                .filter(|e| e.device_type == TYPE_PCI)
                .and_then(|e| e.pci.as_ref()),
        ) else {
            return self;
        };
        if old.pci_address != ours.pci_address {
            return self;
        }
        for (mine, theirs) in [
            (&mut ours.vhost_net, &old.vhost_net),
            (&mut ours.rdma_device, &old.rdma_device),
            (&mut ours.pf_pci_address, &old.pf_pci_address),
            (&mut ours.representor_device, &old.representor_device),
        ] {
            if mine.is_none() {
                mine.clone_from(theirs);
            }
        }
        for (k, v) in &old.extra {
            ours.extra.entry(k.clone()).or_insert_with(|| v.clone());
        }
        self
    }
}

/// Device info for a PCI function (PF or VF) from sysfs: `pf-pci-address` from its `physfn`
/// link, `rdma-device` from its `infiniband/` entries (joined with `,` if several). Code 100
/// when sysfs has no such function.
pub fn for_pci(rdma: &RdmaSysfs<'_>, bdf: &str) -> Result<DeviceInfo> {
    let func = rdma
        .pci_function(bdf)
        .map_err(|e| Error::io(format!("reading PCI function {bdf} in sysfs"), e))?
        .ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "no PCI function {bdf} in /sys/bus/pci/devices (for the device-info file)"
            ))
        })?;
    let mut pci = PciDevice::new(func.bdf);
    pci.pf_pci_address = func.physfn;
    if !func.ib_devices.is_empty() {
        pci.rdma_device = Some(func.ib_devices.join(","));
    }
    Ok(DeviceInfo::pci(pci))
}

/// Device info for ib devices that have no PCI function (rxe over a veth): `type` pci with
/// `rdma-device` alone, so a pod still learns which HCA is its own.
pub fn for_rdma_devices(ib_devices: &[String]) -> DeviceInfo {
    let mut pci = PciDevice::new("");
    pci.pci_address = None;
    pci.rdma_device = Some(ib_devices.join(","));
    DeviceInfo::pci(pci)
}

/// Device info for a netdev's or ib device's parent device: a PCI function gets
/// [`for_pci`]; an auxiliary device (mlx5 SF) or anything else gets None, since spec 1.1.0
/// defines no type for it and its parent PF's address would name the wrong device.
pub fn for_bus_device(rdma: &RdmaSysfs<'_>, dev: &BusDevice) -> Result<Option<DeviceInfo>> {
    match dev {
        BusDevice::Pci { bdf } => for_pci(rdma, bdf).map(Some),
        BusDevice::Auxiliary { .. } | BusDevice::Other { .. } => Ok(None),
    }
}

/// `runtimeConfig.CNIDeviceInfoFile`, checked; None when not given (or empty).
pub fn path_from_conf(conf: &NetConf) -> Result<Option<PathBuf>> {
    match conf.runtime_config.cni_device_info_file.as_deref() {
        None | Some("") => Ok(None),
        Some(p) => check_path(Path::new(p)).map(|p| Some(p.to_path_buf())),
    }
}

/// Where every device-info file is: the NPWG device-info spec (§4.1) puts them under this
/// directory, and Multus passes CNI plugins paths in `cni/` below it. rdma-ns writes, reads and
/// removes no file elsewhere.
pub const DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// [`DIR`] by the other name of `/var/run`, which is `/run` (FHS 3.0; a symlink on every
/// distribution that has `/run`).
const DIR_UNDER_RUN: &str = "/run/k8s.cni.cncf.io/devinfo";

/// The path must be absolute, name a file (no trailing `/`) below [`DIR`] (or the same
/// directory under `/run`), and have no `..` component, so a runtime bug cannot make the plugin
/// write or delete anything else. Code 7.
pub fn check_path(path: &Path) -> Result<&Path> {
    let text = path.as_os_str().to_string_lossy();
    if !path.is_absolute() {
        return Err(Error::config(
            FIELD,
            format!("{text:?} is not an absolute path"),
        ));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(Error::config(
            FIELD,
            format!("{text:?} contains a `..` component"),
        ));
    }
    if text.ends_with('/') || path.file_name().is_none() {
        return Err(Error::config(
            FIELD,
            format!("{text:?} does not name a file"),
        ));
    }
    if below_dir(path).is_none() {
        return Err(Error::config(
            FIELD,
            format!(
                "{text:?} is not in {DIR}/, where Multus has device-info files written (the \
                 NPWG device-info spec); rdma-ns writes none elsewhere: pass a path below it"
            ),
        ));
    }
    Ok(path)
}

/// `path` less [`DIR`] (or [`DIR_UNDER_RUN`]), when that leaves a file name at least.
fn below_dir(path: &Path) -> Option<(&Path, &Path)> {
    [DIR, DIR_UNDER_RUN].into_iter().find_map(|dir| {
        let rest = path.strip_prefix(dir).ok()?;
        (rest.file_name().is_some()).then_some((Path::new(dir), rest))
    })
}

/// [`check_path`], and no directory between [`DIR`] and the file is a symlink (one there would
/// take the write elsewhere); code 7 naming it. Directories not made yet are fine.
fn check_on_disk(path: &Path) -> Result<()> {
    check_path(path)?;
    let Some((dir, rest)) = below_dir(path) else {
        return Ok(());
    };
    let mut at = dir.to_path_buf();
    let parents: Vec<_> = rest
        .parent()
        .map(Path::components)
        .into_iter()
        .flatten()
        .collect();
    for component in parents {
        at.push(component);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::config(
                    FIELD,
                    format!(
                        "{:?}: {} is a symlink; device-info files are written only through real \
                         directories",
                        path.display(),
                        at.display()
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("checking {}", at.display()), e)),
        }
    }
    Ok(())
}

/// Reads an existing device-info file; None when there is none. A file that is not a
/// device-info map is an error (code 6) naming it.
pub fn read(path: &Path) -> Result<Option<DeviceInfo>> {
    check_on_disk(path)?;
    let bytes = match read_no_follow(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(Error::config(
                FIELD,
                format!("{:?} is a symlink, not a device-info file", path.display()),
            ))
        }
        Err(e) => {
            return Err(Error::io(
                format!("reading device-info file {}", path.display()),
                e,
            ))
        }
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::decode(
            format!("device-info file {}", path.display()),
            e.to_string(),
        )
    })
}

/// The file's bytes, never read through a symlink at `path` (ELOOP): a symlink there is not
/// a device-info file, and its target is nothing this plugin may copy into one.
fn read_no_follow(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes `info` atomically: a temp file in the same directory, fsync, rename over `path`,
/// fsync the directory. A missing directory is created 0700. The file is 0444, as the
/// network-attachment-definition-client (which Multus and the device plugins use) writes it.
pub fn write(path: &Path, info: &DeviceInfo) -> Result<()> {
    check_on_disk(path)?;
    let json = serde_json::to_vec(info).map_err(|e| {
        Error::decode(
            format!("encoding device info for {}", path.display()),
            e.to_string(),
        )
    })?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            Error::io(
                format!("creating device-info directory {}", dir.display()),
                e,
            )
        })?;
    crate::records::atomic::write_atomic(path, &json, 0o444)
        .map_err(|e| Error::io(format!("writing device-info file {}", path.display()), e))
}

/// Removes the file, and temp files of writes to it that were killed; an absent file is fine.
pub fn remove(path: &Path) -> Result<()> {
    check_on_disk(path)?;
    // A write killed midway leaves its temp file beside.
    crate::records::atomic::remove_stale_temps(path);
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(
            format!("removing device-info file {}", path.display()),
            e,
        )),
    }
}

// ---- the step: write on ADD (with undo), remove on DEL/GC ----

/// Step `device-info`: the NPWG device-info file at `runtimeConfig.CNIDeviceInfoFile`.
pub struct DeviceInfoFile;

/// [`DeviceInfoFile`] as the runtime asks for it: the path, checked; None writes nothing.
#[derive(Debug)]
struct DeviceInfoAdd(Option<PathBuf>);

impl Step for DeviceInfoFile {
    fn configure(&self, conf: &NetConf) -> Result<Box<dyn StepAdd>> {
        Ok(Box::new(DeviceInfoAdd(path_from_conf(conf)?)))
    }

    fn release(&self, _ctx: &Ctx<'_>, _netns: Option<&Path>, att: &Attachment) -> Result<()> {
        remove_device_info(att)
    }
}

impl StepAdd for DeviceInfoAdd {
    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()> {
        let path = self.0.as_deref();
        write_device_info(pod.ctx, path, &mut pod.att, &pod.info_ib_devices, plan)
    }
}

/// Writes the device-info file at `path` for the attachment's PCI function (the moved device, a
/// child's parent, a chained VF), keeping what a device plugin already wrote there for the same
/// function. Without a PCI function, `ib_devices` (a child parent's ib devices) are written
/// alone. Undo puts back what was there.
fn write_device_info<'a>(
    ctx: &'a Ctx<'a>,
    path: Option<&Path>,
    att: &mut Attachment,
    ib_devices: &[String],
    plan: &mut Plan<'a>,
) -> Result<()> {
    let Some(path) = path else {
        return plan.checkpoint("device-info");
    };
    let info = match (att.pci_function(), ib_devices) {
        (Some(pci), _) => for_pci(&RdmaSysfs::new(ctx.sys), pci)?,
        (None, []) => {
            crate::log_info!(
                "{}: no PCI function and no ib device, so no device-info file is written at {}",
                att.netdev_name(),
                path.display()
            );
            return plan.checkpoint("device-info");
        }
        (None, ibdevs) => for_rdma_devices(ibdevs),
    };
    let prev = read(path)?;
    let info = info.merged_over(prev.as_ref());
    write(path, &info)?;
    att.device_info_file = Some(path.display().to_string());
    let undo_path: PathBuf = path.to_path_buf();
    plan.on_undo("device-info", move || match &prev {
        Some(p) => write(&undo_path, p),
        None => remove(&undo_path),
    });
    plan.checkpoint("device-info")
}

/// DEL/GC: removes the device-info file the attachment wrote (absent is fine), or, for an ADD
/// that never finished, the one its configuration named, which it may have written before it
/// was killed (the intent record, written first, does not name the file yet). One an earlier
/// release wrote outside [`DIR`] is left where it is, with a warning: this plugin removes no
/// file there either, and a DEL failing for it would fail forever.
pub fn remove_device_info(att: &Attachment) -> Result<()> {
    let Some(recorded) = att
        .device_info_file
        .clone()
        .or_else(|| unfinished_add_path(att))
    else {
        return Ok(());
    };
    let path = Path::new(&recorded);
    if let Err(e) = check_path(path) {
        crate::log_warn!(
            "{}: the recorded device-info file is left in place ({e}); remove it by hand",
            att.id()
        );
        return Ok(());
    }
    remove(path)
}

/// `runtimeConfig.CNIDeviceInfoFile` as the recorded configuration of an ADD that never
/// finished has it.
fn unfinished_add_path(att: &Attachment) -> Option<String> {
    if att.phase != Phase::Adding {
        return None;
    }
    let path = att
        .conf
        .as_ref()?
        .get("runtimeConfig")?
        .get("CNIDeviceInfoFile")?;
    path.as_str().filter(|p| !p.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests;
