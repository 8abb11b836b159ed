//! `ipoib`: each IPoIB parent's mode and MTU, whether it can run connected mode, and the
//! networks that ask it for more than it can do.

use super::{Report, Severity};
use crate::attach::modes::ipoib::IpoibModeConf;
use crate::attach::modes::Mode;
use crate::kernel::topology::RdmaSysfs;
use crate::node::confs::RdmaNetwork;
use crate::node::Node;

/// IPOIB_CM_MTU: connected mode's maximum (0x10000 - 0x10).
const IPOIB_CM_MTU: u32 = 65520;

/// An IPoIB parent netdev as sysfs shows it.
struct Parent {
    name: String,
    /// Byte 0 of the 20-byte address carries the RC flag 0x80 (IPOIB_CM_SUPPORTED); Enhanced
    /// IPoIB leaves it 0.
    cm_capable: bool,
    mode: String,
    mtu: u32,
}

impl Parent {
    fn kind(&self) -> &'static str {
        if self.cm_capable {
            "connected mode possible"
        } else {
            "Enhanced IPoIB (datagram only)"
        }
    }
}

pub(super) struct IpoibCheck<'a> {
    pub(super) node: &'a Node,
    pub(super) topo: &'a RdmaSysfs<'a>,
    pub(super) networks: &'a [RdmaNetwork],
}

impl IpoibCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        for name in self.node.sys.list_dir("class/net").unwrap_or_default() {
            let Some(parent) = self.parent(name) else {
                continue;
            };
            r.facts.ipoib_connected |= parent.cm_capable;
            if self.conflicts(&parent, r) == 0 {
                Self::settings(&parent, r);
            }
        }
    }

    /// The netdev when it is an IPoIB parent: they hang under their HCA; children are virtual.
    fn parent(&self, name: String) -> Option<Parent> {
        let dev = self.topo.netdev(&name).ok().flatten()?;
        if dev.link_type != 32 || dev.device.is_none() {
            return None;
        }
        let settings = self.topo.netdev_settings(&name).ok().flatten()?;
        Some(Parent {
            cm_capable: u8::from_str_radix(dev.address.get(..2).unwrap_or("00"), 16)
                .is_ok_and(|b| b & 0x80 != 0),
            mode: settings.ipoib_mode.unwrap_or_else(|| "unknown".into()),
            mtu: settings.mtu.unwrap_or(0),
            name,
        })
    }

    /// FAILs for the networks on an Enhanced IPoIB parent that ask connected mode or a larger
    /// MTU; how many there were.
    fn conflicts(&self, p: &Parent, r: &mut Report) -> usize {
        if p.cm_capable {
            return 0;
        }
        let mut conflicts = 0;
        for n in self
            .networks
            .iter()
            .filter(|n| n.mode == Mode::Ipoib && n.netdev() == Some(p.name.as_str()))
        {
            let asks_cm = n.ipoib_mode == Some(IpoibModeConf::Connected);
            let asks_mtu = n.mtu.filter(|m| *m > p.mtu);
            if !asks_cm && asks_mtu.is_none() {
                continue;
            }
            conflicts += 1;
            let (name, kind, mtu) = (&p.name, p.kind(), p.mtu);
            r.push(
                "ipoib",
                Severity::Fail,
                format!("network {} ({})", n.name, n.source),
                format!(
                    "asks {} of {name}, which runs {kind} with MTU {mtu}: ADD fails (code 110 \
                     for connected mode, 7 for the MTU)",
                    if asks_cm {
                        "connected mode".to_string()
                    } else {
                        format!("MTU {}", asks_mtu.unwrap_or(0))
                    }
                ),
                Some(format!(
                    "set \"ipoibMode\": \"auto\" (or datagram) and an mtu of at most {mtu} in \
                     {}; 65520 needs a connected-mode port (upstream kernels have no switch to \
                     turn Enhanced IPoIB off)",
                    n.source
                )),
            );
        }
        conflicts
    }

    fn settings(p: &Parent, r: &mut Report) {
        let (name, mode, mtu) = (&p.name, &p.mode, p.mtu);
        let object = format!("{name} (IPoIB)");
        if mode == "connected" && mtu < IPOIB_CM_MTU {
            r.push(
                "ipoib",
                Severity::Warn,
                object,
                format!("connected mode with MTU {mtu} (connected mode allows {IPOIB_CM_MTU})"),
                Some(format!("ip link set {name} mtu {IPOIB_CM_MTU}")),
            );
            return;
        }
        let children = if p.cm_capable {
            "; ipoib children with ipoibMode auto get connected mode, MTU 65520"
        } else {
            "; ipoib children get datagram mode"
        };
        r.push(
            "ipoib",
            Severity::Ok,
            object,
            format!("{mode} mode, MTU {mtu}, {}{children}", p.kind()),
            None,
        );
    }
}
