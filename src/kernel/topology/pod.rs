//! What `rdma-ns env` and the probe read, at every pod start: a port's state and link layer
//! without its GID table, the uverbs devices without the MAD ones, and a GID-table search that
//! reads one file per entry and the entry's attributes only on a hit.
//!
//! [`RdmaSysfs::device`] reads every GID of every port with its type and netdev (three files
//! an entry): right for discovery on the node, far too slow for a process that must finish in
//! milliseconds on a node whose ports have 256-entry tables.

use std::fs;
use std::io;
use std::net::Ipv6Addr;
use std::path::Path;

use super::files::{
    absent, invalid, numeric_entries, open_dir, plain_name, port_dir, read_once_at, read_opt,
};
use super::{parse_gid, CharDev, CharDevKind, GidEntry, GidType, PortState, RdmaSysfs};

impl RdmaSysfs<'_> {
    /// The port numbers of an ib device, in order; none when the device does not exist.
    pub fn port_indexes(&self, ibdev: &str) -> io::Result<Vec<u32>> {
        plain_name(ibdev)?;
        numeric_entries(
            self.sys,
            &Path::new("class/infiniband").join(ibdev).join("ports"),
        )
    }

    /// State, physical state and link layer of one port; None when it does not exist.
    pub fn port_state(&self, ibdev: &str, port: u32) -> io::Result<Option<PortState>> {
        plain_name(ibdev)?;
        let dir = port_dir(ibdev, port);
        let Some(state) = read_opt(self.sys, &dir.join("state"))? else {
            return Ok(None);
        };
        let need = |name: &str| {
            read_opt(self.sys, &dir.join(name))?.ok_or_else(|| invalid(&dir.join(name), "missing"))
        };
        PortState::parse(&dir, port, &state, need).map(Some)
    }

    /// The uverbs devices (`class/infiniband_verbs/uverbsN`), without the MAD classes
    /// [`RdmaSysfs::char_devices`] also reads.
    pub fn uverbs_devices(&self) -> io::Result<Vec<CharDev>> {
        self.class_char_devs("class/infiniband_verbs", &[CharDevKind::Uverbs])
    }

    /// The entries of a port's GID table whose GID is one of `wanted`, with type and netdev.
    /// Reads `gids/N` once per entry (through a directory fd, so the `class/infiniband`
    /// symlink is resolved once, not once an entry) and the attributes only of hits. With
    /// `stop_at_v2`, the scan ends once every wanted GID has a RoCE v2 entry (mlx5 adds v1
    /// before v2 for each address, rxe only v2), since [`super::find_gid`] prefers v2.
    pub fn gids_matching(
        &self,
        ibdev: &str,
        port: u32,
        wanted: &[Ipv6Addr],
        stop_at_v2: bool,
    ) -> io::Result<Vec<GidEntry>> {
        plain_name(ibdev)?;
        let port_rel = port_dir(ibdev, port);
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        // `%pI6` text of each wanted GID: compared as bytes, no parse per entry.
        let texts: Vec<String> = wanted.iter().map(|g| gid_text(*g)).collect();
        let gids_dir = self.sys.path(port_rel.join("gids"));
        let dir = match open_dir(&gids_dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("ib device {ibdev} has no port {port}"),
                ))
            }
            Err(e) => return Err(e),
        };
        let mut v2_found = vec![false; wanted.len()];
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        for index in numeric_entries(self.sys, &port_rel.join("gids"))? {
            let text = match read_at(&dir, &index.to_string(), &mut buf) {
                Ok(t) => t,
                Err(e) if absent(&e) => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}/{index}: {e}", gids_dir.display()),
                    ))
                }
            };
            let Some(which) = texts.iter().position(|t| t.as_bytes() == text) else {
                continue;
            };
            // The text matched a well-formed GID, so it parses; parse_gid keeps one rule.
            let path = port_rel.join("gids").join(index.to_string());
            let gid = parse_gid(&texts[which]).map_err(|m| invalid(&path, m))?;
            let (gid_type, ndev) = self.gid_attrs(&port_rel, index)?;
            if gid_type == Some(GidType::RoceV2) {
                v2_found[which] = true;
            }
            out.push(GidEntry {
                index,
                gid,
                gid_type,
                ndev,
            });
            if stop_at_v2 && v2_found.iter().all(|f| *f) {
                break;
            }
        }
        Ok(out)
    }

    /// One GID table entry (IPoIB uses entry 0, the port GID), or None when it is empty.
    pub fn gid_entry(&self, ibdev: &str, port: u32, index: u32) -> io::Result<Option<GidEntry>> {
        plain_name(ibdev)?;
        self.read_gid_entry(&port_dir(ibdev, port), index)
    }
}

/// A GID as sysfs prints it (`%pI6`: eight groups of four lowercase hex digits).
pub fn gid_text(gid: Ipv6Addr) -> String {
    let s = gid.segments();
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}:{:04x}",
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
    )
}

/// Reads a small attribute relative to `dir` into `buf`: the text without its newline. A GID
/// is 39 characters and a newline, so one read(2) gets it all.
fn read_at<'b>(dir: &fs::File, name: &str, buf: &'b mut [u8]) -> io::Result<&'b [u8]> {
    let (_, n) = read_once_at(dir, name, buf)?;
    let text = &buf[..n];
    Ok(text.strip_suffix(b"\n").unwrap_or(text))
}
