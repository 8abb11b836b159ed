//! `data-dir`: every attachment record readable, and every attachment's pod netns still there
//! (else no DEL came and what it holds stays held).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{Report, Severity};
use crate::attach::record::Attachment;
use crate::attach::store::Store;
use crate::error::Error;

fn netns_alive(a: &Attachment) -> bool {
    if a.netns.is_empty() {
        return true;
    }
    match std::fs::metadata(&a.netns) {
        Ok(m) => a
            .netns_id
            .as_ref()
            .map_or(true, |id| id.dev == m.dev() && id.ino == m.ino()),
        Err(_) => false,
    }
}

pub(super) struct DataDirCheck<'a> {
    pub(super) dirs: &'a [PathBuf],
}

impl DataDirCheck<'_> {
    /// The records read, for the char device check.
    pub(super) fn check(&self, r: &mut Report) -> Vec<Attachment> {
        let mut all = Vec::new();
        for dir in self.dirs {
            if !Self::readable(dir, r) {
                continue;
            }
            let (records, unreadable) = Store::new(dir).list_all();
            Self::unreadable(dir, &unreadable, r);
            let stale: Vec<&Attachment> = records.iter().filter(|a| !netns_alive(a)).collect();
            for a in &stale {
                Self::stale(a, r);
            }
            if unreadable.is_empty() && stale.is_empty() {
                r.push(
                    "data-dir",
                    Severity::Ok,
                    dir.display().to_string(),
                    format!(
                        "{} attachment records, every pod netns present",
                        records.len()
                    ),
                    None,
                );
            }
            all.extend(records);
        }
        all
    }

    /// Whether the directory can be listed; an absent one is OK (nothing attached yet), one
    /// that cannot be read a WARN.
    fn readable(dir: &Path, r: &mut Report) -> bool {
        let object = dir.display().to_string();
        match std::fs::read_dir(dir) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                r.push(
                    "data-dir",
                    Severity::Ok,
                    object,
                    "absent: no attachment made yet",
                    None,
                );
                false
            }
            Err(e) => {
                r.push(
                    "data-dir",
                    Severity::Warn,
                    object,
                    format!(
                        "cannot read it as uid {}: {e}",
                        nix::unistd::getuid().as_raw()
                    ),
                    Some("run the doctor as root (the data dir is 0700)".into()),
                );
                false
            }
        }
    }

    fn unreadable(dir: &Path, errors: &[Error], r: &mut Report) {
        for e in errors {
            r.push(
                "data-dir",
                Severity::Fail,
                dir.display().to_string(),
                format!("unreadable attachment record: {e}"),
                Some(
                    "DEL and GC cannot release what it holds: look at the file (the last JSON \
                     line counts); if its pod is gone, release the device by hand and move the \
                     file away"
                        .into(),
                ),
            );
        }
    }

    fn stale(a: &Attachment, r: &mut Report) {
        let pod = a
            .pod
            .as_ref()
            .map(|p| {
                format!(
                    " of pod {}/{}",
                    p.namespace.as_deref().unwrap_or("?"),
                    p.name.as_deref().unwrap_or("?")
                )
            })
            .unwrap_or_default();
        r.push(
            "data-dir",
            Severity::Warn,
            format!("{}/{}:{}", a.network, a.container_id, a.ifname),
            format!(
                "attachment{pod} ({}, host device {}): its netns {} is gone, no DEL came",
                a.mode().as_str(),
                a.netdev_name(),
                a.netns
            ),
            Some(format!(
                "let the runtime's CNI GC release it (containerd and CRI-O run GC on restart), \
                 or run DEL for network {} container {} ifname {} by hand",
                a.network, a.container_id, a.ifname
            )),
        );
    }
}
