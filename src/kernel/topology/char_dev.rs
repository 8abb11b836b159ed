//! The RDMA stack's char devices: uverbs, umad and issm per ib device (found through their
//! `ibdev` attribute) and the node-wide `rdma_cm`.

use std::io;
use std::path::{Path, PathBuf};

use super::files::{invalid, read_opt};
use super::RdmaSysfs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CharDevKind {
    /// `/dev/infiniband/uverbsN`, class `infiniband_verbs`.
    Uverbs,
    /// `/dev/infiniband/umadN`, class `infiniband_mad`, one per port.
    Umad,
    /// `/dev/infiniband/issmN`, class `infiniband_mad`, one per port.
    Issm,
    /// `/dev/infiniband/rdma_cm`, the misc device of rdma_ucm, shared by all ib devices.
    RdmaCm,
}

impl CharDevKind {
    /// The sysfs name prefix (`uverbs` → `uverbs3`).
    pub fn prefix(self) -> &'static str {
        match self {
            CharDevKind::Uverbs => "uverbs",
            CharDevKind::Umad => "umad",
            CharDevKind::Issm => "issm",
            CharDevKind::RdmaCm => "rdma_cm",
        }
    }

    /// umad and issm devices exist once per port and say which (`port`).
    fn has_port(self) -> bool {
        matches!(self, CharDevKind::Umad | CharDevKind::Issm)
    }
}

/// A char device of the RDMA stack.
///
/// Numbers come from an IDA (lowest free), and an exclusive-mode netns move removes and
/// re-adds every client (K:drivers/infiniband/core/device.c `rdma_dev_change_netns`), so the
/// N of `uverbsN` can change: devices are always matched through `ibdev`, never by number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharDev {
    pub kind: CharDevKind,
    /// `uverbs0`, `umad1`, `rdma_cm`.
    pub name: String,
    /// The `ibdev` attribute; None for rdma_cm.
    pub ibdev: Option<String>,
    /// The `port` attribute of umad/issm.
    pub port: Option<u32>,
    pub major: u32,
    pub minor: u32,
}

impl CharDev {
    /// The device node: the RDMA classes' devnode callbacks put every node under
    /// `/dev/infiniband/` (uverbs_main.c `uverbs_devnode`, user_mad.c `umad_devnode`,
    /// ucma.c `.nodename = "infiniband/rdma_cm"`).
    pub fn devnode(&self) -> PathBuf {
        Path::new("/dev/infiniband").join(&self.name)
    }
}

impl RdmaSysfs<'_> {
    /// Every uverbs, umad and issm device, by class listing (`class/infiniband_verbs/*`,
    /// `class/infiniband_mad/*`; the classes' `abi_version` files are skipped).
    pub fn char_devices(&self) -> io::Result<Vec<CharDev>> {
        let mut out = self.class_char_devs("class/infiniband_verbs", &[CharDevKind::Uverbs])?;
        out.extend(self.class_char_devs(
            "class/infiniband_mad",
            &[CharDevKind::Umad, CharDevKind::Issm],
        )?);
        Ok(out)
    }

    /// The devices of one char device class that are one of `kinds` (`<prefix><N>`).
    pub(super) fn class_char_devs(
        &self,
        class: &str,
        kinds: &[CharDevKind],
    ) -> io::Result<Vec<CharDev>> {
        let mut out = Vec::new();
        for name in self.sys.list_dir(class)? {
            let Some(kind) = kinds.iter().copied().find(|k| {
                name.strip_prefix(k.prefix())
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            }) else {
                continue;
            };
            let dir = Path::new(class).join(&name);
            let Some(dev) = read_opt(self.sys, &dir.join("dev"))? else {
                continue;
            };
            let (major, minor) = parse_devnum(&dev).map_err(|m| invalid(&dir.join("dev"), m))?;
            let ibdev = read_opt(self.sys, &dir.join("ibdev"))?;
            let port = if kind.has_port() {
                read_opt(self.sys, &dir.join("port"))?
                    .map(|p| {
                        p.parse::<u32>()
                            .map_err(|_| invalid(&dir.join("port"), format!("{p:?}")))
                    })
                    .transpose()?
            } else {
                None
            };
            out.push(CharDev {
                kind,
                name,
                ibdev,
                port,
                major,
                minor,
            });
        }
        Ok(out)
    }

    /// `class/misc/rdma_cm` (loaded with rdma_ucm), or None.
    pub fn rdma_cm(&self) -> io::Result<Option<CharDev>> {
        let Some(dev) = read_opt(self.sys, Path::new("class/misc/rdma_cm/dev"))? else {
            return Ok(None);
        };
        let (major, minor) =
            parse_devnum(&dev).map_err(|m| invalid(Path::new("class/misc/rdma_cm/dev"), m))?;
        Ok(Some(CharDev {
            kind: CharDevKind::RdmaCm,
            name: "rdma_cm".to_string(),
            ibdev: None,
            port: None,
            major,
            minor,
        }))
    }
}

/// Parses a `dev` attribute, `major:minor` in decimal (`231:192`).
pub fn parse_devnum(text: &str) -> Result<(u32, u32), String> {
    let (a, b) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not major:minor"))?;
    match (a.parse(), b.parse()) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err(format!("{text:?} is not major:minor")),
    }
}
