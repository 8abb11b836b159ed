//! `char-dev`: every uverbs/umad/issm node and `rdma_cm` in `/dev/infiniband` is the char
//! device sysfs names, open to the pods that need it, and still as an attachment set it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use super::{Options, Report, Severity};
use crate::attach::record::Attachment;
use crate::kernel::topology::{CharDev, CharDevKind, IbDevice, RdmaSysfs};
use crate::node::Node;

const KINDS: [CharDevKind; 4] = [
    CharDevKind::Uverbs,
    CharDevKind::Umad,
    CharDevKind::Issm,
    CharDevKind::RdmaCm,
];

/// One node under examination.
struct Examined<'c> {
    dev: &'c CharDev,
    path: PathBuf,
    object: String,
    /// The module whose loading creates it.
    module: &'static str,
}

pub(super) struct CharDevCheck<'a> {
    pub(super) node: &'a Node,
    pub(super) topo: &'a RdmaSysfs<'a>,
    pub(super) devices: &'a [IbDevice],
    pub(super) opts: &'a Options,
    pub(super) records: &'a [Attachment],
}

impl CharDevCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        let asked = self.asked();
        for dev in &self.nodes() {
            let path = self.node.dev_dir.join(&dev.name);
            let c = Examined {
                object: path.display().to_string(),
                path,
                module: crate::attach::permissions::module_for(dev.kind),
                dev,
            };
            self.examine(&c, asked.get(c.dev.kind.prefix()), r);
        }
    }

    /// The nodes sysfs lists: each ib device's, and `rdma_cm`.
    fn nodes(&self) -> Vec<CharDev> {
        let mut nodes: Vec<CharDev> = self
            .devices
            .iter()
            .flat_map(|d| d.char_devs.iter().cloned())
            .collect();
        if let Ok(Some(cm)) = self.topo.rdma_cm() {
            nodes.push(cm);
        }
        nodes
    }

    /// What the confs' devicePermissions ask, per kind: `0666 by <network>`.
    fn asked(&self) -> BTreeMap<&'static str, BTreeSet<String>> {
        let mut asked: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
        for n in &self.opts.networks {
            let Some(p) = &n.permissions else {
                continue;
            };
            for kind in KINDS {
                if let Some(m) = p.mode_for(kind) {
                    asked
                        .entry(kind.prefix())
                        .or_default()
                        .insert(format!("{m:04o} by {}", n.name));
                }
            }
        }
        asked
    }

    /// One finding per node: the first problem found, else OK.
    fn examine(&self, c: &Examined<'_>, asked: Option<&BTreeSet<String>>, r: &mut Report) {
        let meta = match std::fs::symlink_metadata(&c.path) {
            Ok(m) => m,
            Err(e) => return self.missing(c, &e, r),
        };
        let rdev = meta.rdev();
        let (maj, min) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
        if !meta.file_type().is_char_device()
            || (maj, min) != (u64::from(c.dev.major), u64::from(c.dev.minor))
        {
            return Self::not_as_sysfs_says(c, &meta, (maj, min), r);
        }
        let mode = meta.mode() & 0o7777;
        let owner = format!("{:04o} uid {} gid {}", mode, meta.uid(), meta.gid());
        if self.reset_since_attachment(c, &meta, &owner, r) {
            return;
        }
        if self.opts.pod && c.dev.kind == CharDevKind::Uverbs && Self::pod_cannot_open(c, &owner, r)
        {
            return;
        }
        let user_kind = matches!(c.dev.kind, CharDevKind::Uverbs | CharDevKind::RdmaCm);
        if user_kind && mode & 0o006 != 0o006 && asked.is_none() && !self.opts.pod {
            r.push(
                "char-dev",
                Severity::Warn,
                c.object.clone(),
                format!("{owner}: pods not running as root cannot open it"),
                Some(format!(
                    "add \"devicePermissions\": {{\"{}\": \"0666\"}} to the network conf \
                     (rdma-ns sets it per attachment and restores it), rather than chmod by hand",
                    c.dev.kind.prefix()
                )),
            );
            return;
        }
        let note = match asked {
            Some(a) => format!(
                "; devicePermissions asks {} (set at ADD)",
                a.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            None => String::new(),
        };
        r.push(
            "char-dev",
            Severity::Ok,
            c.object.clone(),
            format!("char {}:{}, {owner}{note}", c.dev.major, c.dev.minor),
            None,
        );
    }

    fn missing(&self, c: &Examined<'_>, e: &std::io::Error, r: &mut Report) {
        let module = c.module;
        r.push(
            "char-dev",
            Severity::Fail,
            c.object.clone(),
            format!(
                "missing ({e}); sysfs has {} as char {}:{}",
                c.dev.name, c.dev.major, c.dev.minor
            ),
            Some(if self.opts.pod {
                "the device plugin mounts the pod's nodes: request its resource (e.g. \
                 rdma/hca_shared: 1) in the pod spec"
                    .to_string()
            } else {
                format!(
                    "devtmpfs creates it when {module} loads: modprobe {module}; is /dev a \
                     devtmpfs (findmnt /dev)?"
                )
            }),
        );
    }

    /// A symlink, another kind of file, or a char device of another number.
    fn not_as_sysfs_says(c: &Examined<'_>, meta: &Metadata, found: (u64, u64), r: &mut Report) {
        let (module, object) = (c.module, &c.object);
        let what = if meta.file_type().is_symlink() {
            "a symlink"
        } else if meta.file_type().is_char_device() {
            "char device"
        } else {
            "another kind of file"
        };
        r.push(
            "char-dev",
            Severity::Fail,
            object.clone(),
            format!(
                "not char device {}:{} as sysfs says, but {what} {}:{}",
                c.dev.major, c.dev.minor, found.0, found.1
            ),
            Some(format!(
                "remove {object} and reload {module} (modprobe -r {module}; modprobe {module}) \
                 so devtmpfs re-creates it; devicePermissions refuses such nodes (code 111)"
            )),
        );
    }

    /// A node an attachment changed must still have what it set; true when it does not.
    fn reset_since_attachment(
        &self,
        c: &Examined<'_>,
        meta: &Metadata,
        owner: &str,
        r: &mut Report,
    ) -> bool {
        let Some((a, pc)) = self.records.iter().find_map(|a| {
            a.perm_changes
                .iter()
                .find(|pc| pc.path == c.path && pc.rdev == (c.dev.major, c.dev.minor))
                .map(|pc| (a, pc))
        }) else {
            return false;
        };
        if meta.mode() & 0o7777 == pc.new_mode && meta.gid() == pc.new_gid {
            return false;
        }
        let path = c.path.display();
        r.push(
            "char-dev",
            Severity::Warn,
            c.object.clone(),
            format!(
                "{owner}, but attachment {}/{} set {:04o} gid {}: something changed it since (a \
                 udev rule?)",
                a.network, a.container_id, pc.new_mode, pc.new_gid
            ),
            Some(format!(
                "chmod {:04o} {path}; find the rule that reset it: udevadm test $(udevadm info -q \
                 path -n {path})",
                pc.new_mode
            )),
        );
        true
    }

    /// In a pod: opens the uverbs node as an application would; true (with a FAIL) when that
    /// fails.
    fn pod_cannot_open(c: &Examined<'_>, owner: &str, r: &mut Report) -> bool {
        let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&c.path)
        else {
            return false;
        };
        let why = match e.raw_os_error() {
            Some(nix::libc::EPERM) => {
                "EPERM: the ib device belongs to another netns (exclusive mode)".to_string()
            }
            Some(nix::libc::EACCES) => format!(
                "EACCES: mode {owner} does not let uid {} open it",
                nix::unistd::geteuid().as_raw()
            ),
            _ => e.to_string(),
        };
        r.push(
            "char-dev",
            Severity::Fail,
            c.object.clone(),
            format!("this pod cannot open it: {why}"),
            Some(
                "set devicePermissions (e.g. {\"uverbs\": \"0666\"}) in the network conf, or run \
                 the container with a uid that may open it; in exclusive mode the pod must get \
                 the device moved in (mode move)"
                    .into(),
            ),
        );
        true
    }
}
