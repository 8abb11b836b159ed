//! Narrow readers for `rdma-ns env` and the probe, which run at every pod start: a port's
//! state and link layer without its GID table, the uverbs devices without the MAD ones, and a
//! GID-table search that reads one file per entry and the entry's attributes only on a hit.
//!
//! [`RdmaSysfs::device`] reads every GID of every port with its type and netdev (three files
//! an entry): right for discovery on the node, far too slow for a process that must finish in
//! milliseconds on a node whose ports have 256-entry tables.

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::{
    absent, invalid, numeric_entries, parse_devnum, parse_field, parse_gid, plain_name, read_opt,
    CharDev, CharDevKind, GidEntry, GidType, LinkLayer, NumberedState, RdmaSysfs,
};

/// A port's state and link layer, without its GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortBrief {
    pub index: u32,
    pub state: NumberedState,
    pub phys_state: NumberedState,
    pub link_layer: LinkLayer,
}

impl PortBrief {
    pub fn is_active(&self) -> bool {
        self.state.num == NumberedState::PORT_ACTIVE
    }
}

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
    pub fn port_brief(&self, ibdev: &str, port: u32) -> io::Result<Option<PortBrief>> {
        plain_name(ibdev)?;
        let dir = Path::new("class/infiniband")
            .join(ibdev)
            .join("ports")
            .join(port.to_string());
        let Some(state) = read_opt(self.sys, &dir.join("state"))? else {
            return Ok(None);
        };
        let phys_state = read_opt(self.sys, &dir.join("phys_state"))?
            .ok_or_else(|| invalid(&dir.join("phys_state"), "missing"))?;
        let link_layer = read_opt(self.sys, &dir.join("link_layer"))?
            .ok_or_else(|| invalid(&dir.join("link_layer"), "missing"))?;
        Ok(Some(PortBrief {
            index: port,
            state: parse_field(&dir.join("state"), &state)?,
            phys_state: parse_field(&dir.join("phys_state"), &phys_state)?,
            link_layer: LinkLayer::parse(&link_layer),
        }))
    }

    /// The uverbs devices (`class/infiniband_verbs/uverbsN`), without the MAD classes
    /// [`RdmaSysfs::char_devices`] also reads.
    pub fn uverbs_devices(&self) -> io::Result<Vec<CharDev>> {
        let class = Path::new("class/infiniband_verbs");
        let mut out = Vec::new();
        for name in self.sys.list_dir(class)? {
            let Some(n) = name.strip_prefix("uverbs") else {
                continue;
            };
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let dir = class.join(&name);
            let Some(dev) = read_opt(self.sys, &dir.join("dev"))? else {
                continue;
            };
            let (major, minor) = parse_devnum(&dev).map_err(|m| invalid(&dir.join("dev"), m))?;
            out.push(CharDev {
                kind: CharDevKind::Uverbs,
                ibdev: read_opt(self.sys, &dir.join("ibdev"))?,
                name,
                port: None,
                major,
                minor,
            });
        }
        Ok(out)
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
        let port_rel = Path::new("class/infiniband")
            .join(ibdev)
            .join("ports")
            .join(port.to_string());
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
            let i = index.to_string();
            let attrs = port_rel.join("gid_attrs");
            let gid_type =
                read_opt(self.sys, &attrs.join("types").join(&i))?.map(|t| GidType::parse(&t));
            let ndev = read_opt(self.sys, &attrs.join("ndevs").join(&i))?;
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
        let port_rel = Path::new("class/infiniband")
            .join(ibdev)
            .join("ports")
            .join(port.to_string());
        let i = index.to_string();
        let Some(text) = read_opt(self.sys, &port_rel.join("gids").join(&i))? else {
            return Ok(None);
        };
        let gid = parse_gid(&text).map_err(|m| invalid(&port_rel.join("gids").join(&i), m))?;
        if gid.is_unspecified() {
            return Ok(None);
        }
        let attrs = port_rel.join("gid_attrs");
        Ok(Some(GidEntry {
            index,
            gid,
            gid_type: read_opt(self.sys, &attrs.join("types").join(&i))?
                .map(|t| GidType::parse(&t)),
            ndev: read_opt(self.sys, &attrs.join("ndevs").join(&i))?,
        }))
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

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Reads a small attribute relative to `dir` into `buf`: the text without its newline.
fn read_at<'b>(dir: &OwnedFd, name: &str, buf: &'b mut [u8]) -> io::Result<&'b [u8]> {
    let fd = openat(
        dir.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    // A GID is 39 characters and a newline: one read(2) gets it all (sysfs hands out a
    // whole attribute on the first read).
    let n = nix::unistd::read(&fd, buf).map_err(io::Error::from)?;
    let text = &buf[..n];
    Ok(text.strip_suffix(b"\n").unwrap_or(text))
}
