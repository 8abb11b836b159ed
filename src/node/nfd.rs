//! Node Feature Discovery labels from what the doctor found: a local feature file in NFD's
//! `features.d` format (one `name=value` a line, `#` comments, an optional
//! `# +expiry-time=<RFC 3339>` directive). NFD prefixes names without a namespace with
//! `feature.node.kubernetes.io/`, so `rdma-capable=true` becomes the node label
//! `feature.node.kubernetes.io/rdma-capable=true`.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::doctor::Facts;
use super::values::netns_mode_name;

/// The label names, in file order (docs/node.md, "Node labels" documents each).
pub const LABELS: [&str; 7] = [
    "rdma-capable",
    "rdma-link-layer-infiniband",
    "rdma-link-layer-ethernet",
    "rdma-netns-mode",
    "rdma-max-rate-gbps",
    "rdma-pcie-degraded",
    "rdma-ipoib-connected",
];

/// `(name, value)` per label. Values are valid Kubernetes label values (at most 63 of
/// `[A-Za-z0-9._-]`, alphanumeric at both ends); a fact that is unknown gives no label.
pub fn labels(f: &Facts) -> Vec<(&'static str, String)> {
    let yes = |b: bool| if b { "true" } else { "false" }.to_string();
    let mut out = vec![
        (LABELS[0], yes(f.ib_devices > 0 && f.active_ports > 0)),
        (LABELS[1], yes(f.link_layers.contains("InfiniBand"))),
        (LABELS[2], yes(f.link_layers.contains("Ethernet"))),
    ];
    if let Some(m) = f.netns_mode {
        out.push((LABELS[3], netns_mode_name(m).to_string()));
    }
    if let Some(mbps) = f.max_rate_mbps {
        // 2500 Mb/s → `2.5`; whole numbers without a fraction.
        let text = if mbps % 1000 == 0 {
            (mbps / 1000).to_string()
        } else {
            format!(
                "{}.{}",
                mbps / 1000,
                format!("{:03}", mbps % 1000).trim_end_matches('0')
            )
        };
        out.push((LABELS[4], text));
    }
    out.push((LABELS[5], yes(f.pcie_degraded)));
    out.push((LABELS[6], yes(f.ipoib_connected)));
    out
}

/// The file's text. `expiry` (from now) makes NFD drop the labels when no refresh came in
/// time, so a node whose refresher died does not keep advertising stale features.
pub fn render(f: &Facts, now: SystemTime, expiry: Option<Duration>) -> String {
    let mut s = String::from("# Written by rdma-ns doctor --nfd; do not edit: it is rewritten.\n");
    if let Some(e) = expiry {
        s.push_str(&format!("# +expiry-time={}\n", rfc3339(now + e)));
    }
    for (name, value) in labels(f) {
        s.push_str(name);
        s.push('=');
        s.push_str(&value);
        s.push('\n');
    }
    s
}

/// Writes the file atomically (temp file in the same directory, fsync, rename), so NFD's
/// watcher never reads half a file.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// UTC time as RFC 3339 (`2026-12-01T01:02:03Z`), as NFD's expiry-time directive takes it.
pub fn rfc3339(t: SystemTime) -> String {
    crate::log::rfc3339_seconds(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::nldev::NetnsMode;
    use std::time::UNIX_EPOCH;

    fn facts() -> Facts {
        Facts {
            ib_devices: 2,
            active_ports: 2,
            link_layers: ["Ethernet".to_string(), "InfiniBand".to_string()].into(),
            netns_mode: Some(NetnsMode::Shared),
            max_rate_mbps: Some(2500),
            pcie_degraded: true,
            ipoib_connected: false,
        }
    }

    /// What NFD's local source accepts (source/local/local.go): `name=value` lines, names
    /// without a prefix are put under feature.node.kubernetes.io/, comments and the
    /// expiry-time directive start with `#`. Each label must also be a valid Kubernetes label.
    fn valid_label_value(v: &str) -> bool {
        !v.is_empty()
            && v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric()
    }

    #[test]
    fn the_file_is_nfd_local_format_with_valid_labels() {
        let now = UNIX_EPOCH + Duration::from_secs(1_796_086_923); // 2026-12-01T01:02:03Z
        let text = render(&facts(), now, Some(Duration::from_secs(3600)));
        let mut names = Vec::new();
        let mut expiry = None;
        for line in text.lines() {
            if let Some(d) = line.strip_prefix("# +expiry-time=") {
                expiry = Some(d.to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (name, value) = line.split_once('=').unwrap_or_else(|| panic!("{line}"));
            assert!(valid_label_value(name) && name.len() <= 63, "{name}");
            assert!(valid_label_value(value), "{name}={value}");
            names.push(name.to_string());
        }
        assert_eq!(expiry.as_deref(), Some("2026-12-01T02:02:03Z"));
        assert_eq!(names, LABELS);
        assert!(text.contains("\nrdma-capable=true\n"));
        assert!(text.contains("\nrdma-max-rate-gbps=2.5\n"));
        assert!(text.contains("\nrdma-netns-mode=shared\n"));
        assert!(text.contains("\nrdma-pcie-degraded=true\n"));
        assert!(text.contains("\nrdma-ipoib-connected=false\n"));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn no_port_up_is_not_capable_and_unknown_facts_give_no_label() {
        let f = Facts {
            active_ports: 0,
            netns_mode: None,
            max_rate_mbps: None,
            ..facts()
        };
        let l = labels(&f);
        assert!(l.contains(&("rdma-capable", "false".into())));
        assert!(l
            .iter()
            .all(|(n, _)| *n != "rdma-netns-mode" && *n != "rdma-max-rate-gbps"));
        let whole = Facts {
            max_rate_mbps: Some(100_000),
            ..facts()
        };
        assert!(labels(&whole).contains(&("rdma-max-rate-gbps", "100".into())));
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn write_replaces_the_file_atomically() {
        let dir = std::env::temp_dir().join(format!("rdma-ns-nfd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("rdma-ns");
        write(&p, "a=1\n").unwrap();
        write(&p, "a=2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a=2\n");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temp file left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
