//! Device permissions of the RDMA char devices (conf `devicePermissions`).
//!
//! ```json
//! "devicePermissions": {"uverbs": "0666", "umad": "0660", "issm": "0600", "rdma_cm": "0666",
//!                       "group": "rdma"}
//! ```
//!
//! For the pod's ib device(s) the nodes `uverbsN`, `umadN`, `issmN` (matched through sysfs
//! `ibdev`, never by number) and the node-wide `rdma_cm` get the mode given for their kind and,
//! with `group`, that group. Kinds without a mode are left alone.
//!
//! Only a char device under the dev dir (`/dev/infiniband`) whose name is the sysfs device's
//! name *and* whose `st_rdev` is the sysfs `dev` value is ever changed. Symlinks are never
//! followed: the node is lstat'ed, then opened with `O_PATH | O_NOFOLLOW`, the open file is
//! checked again (so a node swapped in between is refused), and the mode and group are set
//! through `/proc/self/fd/N`, which names that very inode (fchmod(2) refuses O_PATH fds; the
//! proc link is how systemd's `fchmod_opath` does it). Anything else found under the name is an
//! error (code 111) naming the path and what was there.
//!
//! Flow, in the style of the attachment records (intent before change):
//! 1. [`plan`] checks every node and returns the [`PermChange`]s, with the modes and groups
//!    found. Nothing is changed yet. The caller stores them in the attachment record.
//! 2. [`apply`] makes the changes.
//! 3. [`restore`] (DEL, GC, and the undo of a failed ADD) puts back the old mode and group of
//!    each node no other attachment still uses ([`used_by`] builds that test from the other
//!    records).
//!
//! Reference counting: a node can be shared (`rdma_cm` by every attachment, `uverbsN` by the
//! pods of a shared-mode ib device). When another attachment already changed a node, [`plan`]
//! records *its* old mode and group, so whichever attachment is released last restores the
//! original. Two attachments asking for different modes of one node: the later ADD wins (and a
//! warning is logged). `plan`, `apply` and saving the record must run under one node-wide lock
//! ([`LOCK_KEY`]), and so must reading the other records and `restore`, or two attachments can
//! each record the other's mode as the original.

pub use crate::records::attachment::PermChange;

use crate::attach::plan::Plan;
use crate::attach::record::Attachment;
use crate::attach::steps::{PodSide, Step, StepAdd};
use crate::attach::Ctx;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::kernel::topology::{CharDev, CharDevKind, RdmaSysfs};

/// Where the RDMA classes' devnode callbacks put every node (see [`CharDev::devnode`]).
pub const DEFAULT_DEV_DIR: &str = "/dev/infiniband";

/// The conf field.
pub const CONF_KEY: &str = "devicePermissions";

/// The device-lock key (`Store::lock_device`) that serializes permission changes node-wide.
pub const LOCK_KEY: &str = "devperm";

/// The key of `devicePermissions` that names the nodes' group.
pub(crate) const GROUP_KEY: &str = "group";

/// Keys of `devicePermissions` that take a mode, with the kind each applies to.
pub(crate) const MODE_KEYS: [(&str, CharDevKind); 4] = [
    ("uverbs", CharDevKind::Uverbs),
    ("umad", CharDevKind::Umad),
    ("issm", CharDevKind::Issm),
    ("rdma_cm", CharDevKind::RdmaCm),
];

/// `devicePermissions` as parsed: a mode per kind (permission bits only) and a gid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevicePermissions {
    pub uverbs: Option<u32>,
    pub umad: Option<u32>,
    pub issm: Option<u32>,
    pub rdma_cm: Option<u32>,
    /// Resolved gid; applies to every node that gets a mode.
    pub group: Option<u32>,
}

impl DevicePermissions {
    /// The mode for nodes of `kind`; None leaves them alone.
    pub fn mode_for(&self, kind: CharDevKind) -> Option<u32> {
        match kind {
            CharDevKind::Uverbs => self.uverbs,
            CharDevKind::Umad => self.umad,
            CharDevKind::Issm => self.issm,
            CharDevKind::RdmaCm => self.rdma_cm,
        }
    }

    /// No node would be touched.
    pub fn is_empty(&self) -> bool {
        MODE_KEYS.iter().all(|(_, k)| self.mode_for(*k).is_none())
    }
}

/// The module whose loading creates nodes of `kind`.
pub fn module_for(kind: CharDevKind) -> &'static str {
    match kind {
        CharDevKind::Uverbs => "ib_uverbs",
        CharDevKind::Umad | CharDevKind::Issm => "ib_umad",
        CharDevKind::RdmaCm => "rdma_ucm",
    }
}

/// `devicePermissions` from the conf; None when absent or null.
pub fn from_conf(conf: &NetConf) -> Result<Option<DevicePermissions>> {
    #[derive(Deserialize)]
    struct Fields {
        #[serde(rename = "devicePermissions")]
        device_permissions: Option<Value>,
    }
    let fields: Fields = conf.fields()?;
    fields.device_permissions.as_ref().map(parse).transpose()
}

/// Parses the value of `devicePermissions`. Every key is optional; unknown keys, modes that
/// are not octal strings within 0..=0o777, and unknown groups are refused (code 7).
pub fn parse(value: &Value) -> Result<DevicePermissions> {
    let Value::Object(map) = value else {
        return Err(Error::config(
            CONF_KEY,
            format!(
                "must be an object such as {{\"uverbs\": \"0666\", \"group\": \"rdma\"}}, got {value}"
            ),
        ));
    };
    let mut perms = DevicePermissions::default();
    for (key, v) in map {
        let field = format!("{CONF_KEY}.{key}");
        if v.is_null() {
            continue;
        }
        if key == GROUP_KEY {
            perms.group = Some(parse_group(&field, v)?);
            continue;
        }
        let Some((_, kind)) = MODE_KEYS.iter().find(|(k, _)| k == key) else {
            return Err(Error::config(
                field,
                format!("unknown key `{key}`; known keys: uverbs, umad, issm, rdma_cm, group"),
            ));
        };
        let mode = parse_mode(&field, v)?;
        match kind {
            CharDevKind::Uverbs => perms.uverbs = Some(mode),
            CharDevKind::Umad => perms.umad = Some(mode),
            CharDevKind::Issm => perms.issm = Some(mode),
            CharDevKind::RdmaCm => perms.rdma_cm = Some(mode),
        }
    }
    if perms.group.is_some() && perms.is_empty() {
        return Err(Error::config(
            format!("{CONF_KEY}.group"),
            "applies to the nodes that get a mode; give a mode for at least one of uverbs, \
             umad, issm, rdma_cm",
        ));
    }
    Ok(perms)
}

/// An octal string (`"0666"`, `"660"`) of permission bits only.
fn parse_mode(field: &str, v: &Value) -> Result<u32> {
    let Value::String(s) = v else {
        return Err(Error::config(
            field,
            format!(
                "must be an octal string such as \"0666\", got {v} (a JSON number would be read \
                 as decimal)"
            ),
        ));
    };
    if s.is_empty() || s.len() > 11 || !s.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(Error::config(
            field,
            format!("{s:?} is not an octal mode such as \"0660\""),
        ));
    }
    let mode = u32::from_str_radix(s, 8)
        .map_err(|e| Error::config(field, format!("{s:?} is not an octal mode: {e}")))?;
    if mode > 0o777 {
        let why = if mode <= 0o7777 {
            "setuid, setgid and sticky bits are not allowed on device nodes"
        } else {
            "out of range"
        };
        return Err(Error::config(
            field,
            format!("{s:?}: {why}; give permission bits from 0000 to 0777"),
        ));
    }
    Ok(mode)
}

/// A group name (looked up with getgrnam, i.e. /etc/group or NSS) or a numeric gid.
fn parse_group(field: &str, v: &Value) -> Result<u32> {
    let gid = match v {
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| Error::config(field, format!("{n} is not a gid")))?,
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
            .parse::<u32>()
            .map_err(|_| Error::config(field, format!("{s:?} is not a gid")))?,
        Value::String(s) if !s.is_empty() => match nix::unistd::Group::from_name(s) {
            Ok(Some(g)) => g.gid.as_raw(),
            Ok(None) => {
                return Err(Error::config(
                    field,
                    format!(
                        "no group named {s:?} on this node (/etc/group); create it or give a gid"
                    ),
                ))
            }
            Err(e) => {
                return Err(Error::config(
                    field,
                    format!("looking up group {s:?} failed: {e}"),
                ))
            }
        },
        other => {
            return Err(Error::config(
                field,
                format!("must be a group name or a gid, got {other}"),
            ))
        }
    };
    // (gid_t)-1 means "leave the group alone" to chown(2).
    if gid == u32::MAX {
        return Err(Error::config(field, format!("{gid} is not a usable gid")));
    }
    Ok(gid)
}

/// The char devices of `ibdevs` whose kind has a mode, plus `rdma_cm` when it has one, read
/// from sysfs. A kind with a mode but no device in sysfs is an error naming the module to load.
pub fn char_devs_for(
    rdma: &RdmaSysfs<'_>,
    ibdevs: &[&str],
    perms: &DevicePermissions,
) -> Result<Vec<CharDev>> {
    let all = rdma
        .char_devices()
        .map_err(|e| Error::io("listing RDMA char devices in sysfs", e))?;
    let rdma_cm = if perms.rdma_cm.is_some() {
        rdma.rdma_cm()
            .map_err(|e| Error::io("reading class/misc/rdma_cm in sysfs", e))?
    } else {
        None
    };
    select(&all, rdma_cm.as_ref(), ibdevs, perms)
}

/// [`char_devs_for`] on already-read sysfs data.
pub fn select(
    all: &[CharDev],
    rdma_cm: Option<&CharDev>,
    ibdevs: &[&str],
    perms: &DevicePermissions,
) -> Result<Vec<CharDev>> {
    let mut out: Vec<CharDev> = Vec::new();
    for ibdev in ibdevs {
        for kind in [CharDevKind::Uverbs, CharDevKind::Umad, CharDevKind::Issm] {
            if perms.mode_for(kind).is_none() {
                continue;
            }
            let found: Vec<&CharDev> = all
                .iter()
                .filter(|c| c.kind == kind && c.ibdev.as_deref() == Some(*ibdev))
                .collect();
            if found.is_empty() {
                let class = match kind {
                    CharDevKind::Uverbs => "infiniband_verbs",
                    _ => "infiniband_mad",
                };
                let mut msg = format!(
                    "{CONF_KEY}.{}: ib device {ibdev} has no {} device in /sys/class/{class}: \
                     load {} (`modprobe {}`)",
                    kind.prefix(),
                    kind.prefix(),
                    module_for(kind),
                    module_for(kind)
                );
                if kind != CharDevKind::Uverbs {
                    msg.push_str(&format!(
                        ", or drop `{}` if the device has no MAD ports (iWARP)",
                        kind.prefix()
                    ));
                }
                return Err(Error::DevicePermission(msg));
            }
            for c in found {
                if !out.iter().any(|o| o.name == c.name) {
                    out.push(c.clone());
                }
            }
        }
    }
    if perms.rdma_cm.is_some() {
        let cm = rdma_cm.ok_or_else(|| {
            Error::DevicePermission(format!(
                "{CONF_KEY}.rdma_cm: /sys/class/misc/rdma_cm does not exist: load {} \
                 (`modprobe {}`)",
                module_for(CharDevKind::RdmaCm),
                module_for(CharDevKind::RdmaCm)
            ))
        })?;
        out.push(cm.clone());
    }
    Ok(out)
}

/// Checks every node of `devs` that has a mode in `perms` and returns the changes to make,
/// without making them. `others`: the changes recorded by every other attachment on the node
/// (all networks); a node one of them already changed keeps that record's old mode and group
/// as the original.
pub fn plan(
    dev_dir: &Path,
    devs: &[CharDev],
    perms: &DevicePermissions,
    others: &[PermChange],
) -> Result<Vec<PermChange>> {
    let mut out: Vec<PermChange> = Vec::new();
    for dev in devs {
        let Some(new_mode) = perms.mode_for(dev.kind) else {
            continue;
        };
        let path = node_path(dev_dir, &dev.name)?;
        if out.iter().any(|c| c.path == path) {
            continue;
        }
        let rdev = (dev.major, dev.minor);
        let md = check_node(&path, dev, lstat_node(&path, dev)?)?;
        let new_gid = perms.group.unwrap_or(md.gid());
        let (old_mode, old_gid) = match others.iter().find(|o| o.path == path && o.rdev == rdev) {
            Some(o) => {
                if o.new_mode != new_mode || o.new_gid != new_gid {
                    crate::log_warn!(
                        "{}: another attachment set mode {:04o} group {}; this one sets mode \
                         {new_mode:04o} group {new_gid}, which wins until it is released",
                        path.display(),
                        o.new_mode,
                        o.new_gid
                    );
                }
                (o.old_mode, o.old_gid)
            }
            None => (md.mode() & 0o7777, md.gid()),
        };
        out.push(PermChange {
            path,
            rdev,
            old_mode,
            old_gid,
            new_mode,
            new_gid,
        });
    }
    Ok(out)
}

/// Sets the new mode and group of every planned node. Each node is opened without following
/// symlinks and checked again (char device, same rdev) before it is changed. Stops at the first
/// error; the caller undoes with [`restore`], which also handles the nodes not reached.
pub fn apply(changes: &[PermChange]) -> Result<()> {
    for c in changes {
        let (file, md) = open_node(&c.path)?;
        if let Some(found) = mismatch(&md, c.rdev) {
            return Err(Error::DevicePermission(format!(
                "{} changed after it was checked: now {found}, expected char device {}:{}; \
                 nothing was changed on it",
                c.path.display(),
                c.rdev.0,
                c.rdev.1
            )));
        }
        set_mode_gid(&file, &c.path, &md, c.new_mode, c.new_gid)?;
        crate::log_info!(
            "{}: mode {:04o} -> {:04o}, gid {} -> {}",
            c.path.display(),
            md.mode() & 0o7777,
            c.new_mode,
            md.gid(),
            c.new_gid
        );
    }
    Ok(())
}

/// Puts back the old mode and group of each change, except where `still_used` says another
/// live attachment still uses the node. A node that is gone, is no longer a char device, or
/// has another device number (re-created) is skipped and logged: it is not the node that was
/// changed. Keeps going on errors and reports them all.
pub fn restore(changes: &[PermChange], still_used: impl Fn(&PermChange) -> bool) -> Result<()> {
    let mut errors = Vec::new();
    for c in changes {
        if still_used(c) {
            crate::log_info!(
                "{}: still used by another attachment; its permissions stay",
                c.path.display()
            );
            continue;
        }
        let (file, md) = match open_node_io(&c.path) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                crate::log_info!("{}: gone; nothing to restore", c.path.display());
                continue;
            }
            Err(e) => {
                errors.push(Error::DevicePermission(format!(
                    "restoring {}: opening it (O_PATH|O_NOFOLLOW) failed: {e}",
                    c.path.display()
                )));
                continue;
            }
        };
        if let Some(found) = mismatch(&md, c.rdev) {
            crate::log_warn!(
                "{}: now {found}, not char device {}:{} as changed (replaced since); left alone",
                c.path.display(),
                c.rdev.0,
                c.rdev.1
            );
            continue;
        }
        match set_mode_gid(&file, &c.path, &md, c.old_mode, c.old_gid) {
            Ok(()) => crate::log_info!(
                "{}: restored mode {:04o}, gid {}",
                c.path.display(),
                c.old_mode,
                c.old_gid
            ),
            Err(e) => errors.push(e),
        }
    }
    Error::collect(errors)
}

/// The `still_used` test for [`restore`]: true when one of `others` (the changes in every
/// other attachment record) is for the same node, i.e. the same path and device number.
pub fn used_by(others: &[PermChange]) -> impl Fn(&PermChange) -> bool + '_ {
    move |c| others.iter().any(|o| o.path == c.path && o.rdev == c.rdev)
}

fn node_path(dev_dir: &Path, name: &str) -> Result<PathBuf> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(Error::DevicePermission(format!(
            "sysfs names a char device {name:?}, which is not a plain file name"
        )));
    }
    Ok(dev_dir.join(name))
}

fn lstat_node(path: &Path, dev: &CharDev) -> Result<Metadata> {
    fs::symlink_metadata(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            Error::DevicePermission(format!(
                "{} does not exist although sysfs lists {} ({}:{}): load {} (`modprobe {}`) \
                 and check that udev or devtmpfs created the node",
                path.display(),
                dev.name,
                dev.major,
                dev.minor,
                module_for(dev.kind),
                module_for(dev.kind)
            ))
        } else {
            Error::DevicePermission(format!("lstat {} failed: {e}", path.display()))
        }
    })
}

/// Refuses anything but the char device sysfs describes.
fn check_node(path: &Path, dev: &CharDev, md: Metadata) -> Result<Metadata> {
    match mismatch(&md, (dev.major, dev.minor)) {
        None => Ok(md),
        Some(found) => Err(Error::DevicePermission(format!(
            "{} is {found}, not the char device {}:{} that sysfs lists for {}; its \
             permissions are not changed",
            path.display(),
            dev.major,
            dev.minor,
            dev.name
        ))),
    }
}

/// What is wrong with `md` as the char device `rdev`, or None.
fn mismatch(md: &Metadata, rdev: (u32, u32)) -> Option<String> {
    let ft = md.file_type();
    let what = if ft.is_symlink() {
        "a symlink"
    } else if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_fifo() {
        "a fifo"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        let found = (
            nix::sys::stat::major(md.rdev()),
            nix::sys::stat::minor(md.rdev()),
        );
        if found == (u64::from(rdev.0), u64::from(rdev.1)) {
            return None;
        }
        return Some(format!("char device {}:{}", found.0, found.1));
    } else {
        "of unknown type"
    };
    Some(what.to_string())
}

/// Opens the node itself as an O_PATH fd and fstats it: no driver `open` runs, and a symlink
/// is opened as the link itself (O_PATH|O_NOFOLLOW, open(2)), so its fstat shows a symlink.
fn open_node_io(path: &Path) -> io::Result<(File, Metadata)> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_PATH | nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)?;
    let md = file.metadata()?;
    Ok((file, md))
}

fn open_node(path: &Path) -> Result<(File, Metadata)> {
    open_node_io(path).map_err(|e| {
        Error::DevicePermission(format!(
            "opening {} (O_PATH|O_NOFOLLOW) failed: {e}",
            path.display()
        ))
    })
}

/// chmod/chown of the inode `file` holds, through its /proc/self/fd link; skips what is
/// already right.
fn set_mode_gid(file: &File, path: &Path, md: &Metadata, mode: u32, gid: u32) -> Result<()> {
    let fd_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    if md.mode() & 0o7777 != mode {
        fs::set_permissions(&fd_path, fs::Permissions::from_mode(mode)).map_err(|e| {
            Error::DevicePermission(format!(
                "chmod {:04o} {} (through {}) failed: {e}",
                mode,
                path.display(),
                fd_path.display()
            ))
        })?;
    }
    if md.gid() != gid {
        std::os::unix::fs::chown(&fd_path, None, Some(gid)).map_err(|e| {
            Error::DevicePermission(format!(
                "chgrp {gid} {} (through {}) failed: {e}",
                path.display(),
                fd_path.display()
            ))
        })?;
    }
    Ok(())
}

// ---- the step: apply on ADD (with undo), release on DEL/GC ----

/// Step `devperm`: the conf's `devicePermissions` on the char devices of the pod's ib devices.
pub struct Permissions;

/// [`Permissions`] as the conf asks for it: None changes nothing.
#[derive(Debug)]
struct PermissionsAdd(Option<DevicePermissions>);

impl Step for Permissions {
    fn configure(&self, conf: &NetConf) -> Result<Box<dyn StepAdd>> {
        Ok(Box::new(PermissionsAdd(from_conf(conf)?)))
    }

    fn release(&self, ctx: &Ctx<'_>, _netns: Option<&Path>, att: &Attachment) -> Result<()> {
        release_permissions(ctx, att)
    }
}

impl StepAdd for PermissionsAdd {
    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()> {
        apply_permissions(
            pod.ctx,
            self.0.as_ref(),
            &mut pod.att,
            &pod.ib_devices,
            plan,
        )
    }

    fn reads_ib_devices(&self) -> bool {
        self.0.is_some()
    }
}

/// The permission changes recorded by every other attachment on this node: a node they changed
/// is restored only when the last of them is released (rdma_cm is node-wide).
fn others(ctx: &Ctx<'_>, att: &Attachment) -> Others {
    let (all, unreadable) = ctx.store.list_all();
    Others {
        changes: all
            .into_iter()
            .filter(|a| !a.is(&att.network, &att.container_id, &att.ifname))
            .flat_map(|a| a.perm_changes)
            .collect(),
        unreadable,
    }
}

/// What the other attachments of the node changed, and the records that could not be read.
struct Others {
    changes: Vec<PermChange>,
    unreadable: Vec<Error>,
}

/// Sets mode/group of the char devices of `ibdevs` (and rdma_cm) per conf
/// `devicePermissions`. Runs after any ib device move: a move re-creates uverbs/umad nodes,
/// possibly with other numbers, so they are read from sysfs (through `ibdev`) only now. The
/// changes are in the record on disk before the first chmod.
fn apply_permissions<'a>(
    ctx: &'a Ctx<'a>,
    perms: Option<&DevicePermissions>,
    att: &mut Attachment,
    ibdevs: &[String],
    plan: &mut Plan<'a>,
) -> Result<()> {
    let Some(perms) = perms else {
        return plan.checkpoint("devperm");
    };
    let wants_per_device = perms.uverbs.is_some() || perms.umad.is_some() || perms.issm.is_some();
    if wants_per_device && ibdevs.is_empty() {
        return Err(Error::DevicePermission(format!(
            "devicePermissions asks for uverbs/umad/issm modes, but {} has no ib device: remove \
             those keys or select an RDMA netdev",
            att.netdev_name()
        )));
    }
    let lock = ctx
        .store
        .lock_device(LOCK_KEY, std::time::Duration::from_secs(10))?;
    let names: Vec<&str> = ibdevs.iter().map(String::as_str).collect();
    let devs = char_devs_for(&RdmaSysfs::new(ctx.sys), &names, perms)?;
    let others = others(ctx, att);
    for e in &others.unreadable {
        crate::log_warn!("planning device permissions without an unreadable record: {e}");
    }
    let changes = self::plan(ctx.dev_dir, &devs, perms, &others.changes)?;
    att.perm_changes = changes.clone();
    ctx.store.save(att)?;
    let applied = apply(&changes);
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
        .lock_device(LOCK_KEY, std::time::Duration::from_secs(10))?;
    let others = others(ctx, att);
    if !others.unreadable.is_empty() {
        // A record that cannot be read may be a live attachment's that changed these very nodes:
        // restoring them now could take a running pod's access away. Counted as held.
        for e in &others.unreadable {
            crate::log_warn!(
                "keeping the device permissions of {}: another record is unreadable ({e}); fix or \
                 remove it, then the last attachment's DEL restores them",
                att.id()
            );
        }
        return Ok(());
    }
    restore(&att.perm_changes, used_by(&others.changes))
}

#[cfg(test)]
mod tests;
