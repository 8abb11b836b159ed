//! `memlock`: RLIMIT_MEMLOCK unlimited for the container runtime, whose limit pods inherit (or
//! for the pod itself with `--pod`).

use std::path::Path;

use super::{Report, Severity};

/// The container runtimes whose limits pods inherit (runc/crun pass the runtime's own limits
/// on unless the OCI spec sets rlimits).
const RUNTIMES: [&str; 3] = ["containerd", "crio", "dockerd"];

/// `Max locked memory` of a /proc/<pid>/limits text: the soft limit, None for unlimited.
pub fn memlock_soft(limits: &str) -> Option<Option<u64>> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(None)
    } else {
        soft.parse().ok().map(Some)
    }
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// Whose limits were read.
struct Limits {
    object: String,
    /// The runtime, when one was found.
    runtime: Option<&'static str>,
    text: String,
}

pub(super) struct MemlockCheck<'a> {
    pub(super) proc_dir: &'a Path,
    pub(super) pod: bool,
}

impl MemlockCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        let limits = self.limits();
        match memlock_soft(&limits.text) {
            Some(None) => r.push(
                "memlock",
                Severity::Ok,
                limits.object,
                "RLIMIT_MEMLOCK unlimited",
                None,
            ),
            Some(Some(bytes)) => r.push(
                "memlock",
                Severity::Warn,
                limits.object,
                format!(
                    "RLIMIT_MEMLOCK {} (expected unlimited): RDMA memory registration beyond it \
                     fails with ENOMEM{}",
                    human(bytes),
                    if limits.runtime.is_some() {
                        ", and pods inherit it"
                    } else {
                        ""
                    }
                ),
                Some(self.fix(limits.runtime)),
            ),
            None => r.push(
                "memlock",
                Severity::Warn,
                limits.object,
                "cannot read RLIMIT_MEMLOCK",
                Some("cat /proc/<pid>/limits of the container runtime".into()),
            ),
        }
    }

    /// The runtime's limits (on the node), else this process's own.
    fn limits(&self) -> Limits {
        if !self.pod {
            if let Some(found) = self.runtime() {
                return found;
            }
        }
        Limits {
            object: if self.pod {
                "this pod".to_string()
            } else {
                "this shell (no containerd, crio or dockerd process found)".to_string()
            },
            runtime: None,
            text: std::fs::read_to_string(self.proc_dir.join("self/limits")).unwrap_or_default(),
        }
    }

    /// The first container runtime process in /proc whose limits can be read.
    fn runtime(&self) -> Option<Limits> {
        for entry in std::fs::read_dir(self.proc_dir)
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            let Some(rt) = RUNTIMES.iter().find(|rt| comm.trim() == **rt) else {
                continue;
            };
            if let Ok(text) = std::fs::read_to_string(entry.path().join("limits")) {
                return Some(Limits {
                    object: format!("{rt} (pid {name})"),
                    runtime: Some(rt),
                    text,
                });
            }
        }
        None
    }

    fn fix(&self, runtime: Option<&str>) -> String {
        match runtime {
            Some("crio") => "set default_ulimits = [\"memlock=-1:-1\"] in /etc/crio/crio.conf \
                             ([crio.runtime]) and restart crio"
                .to_string(),
            Some(rt) => format!(
                "systemctl edit {rt}: [Service] LimitMEMLOCK=infinity; then systemctl restart {rt}"
            ),
            None if self.pod => "pods inherit the container runtime's limit: on the node, \
                                 LimitMEMLOCK=infinity for containerd (systemctl edit \
                                 containerd) or default_ulimits memlock=-1:-1 for CRI-O"
                .to_string(),
            None => "ulimit -l unlimited (or LimitMEMLOCK=infinity for the service that runs it)"
                .to_string(),
        }
    }
}
