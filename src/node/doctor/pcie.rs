//! `pcie`: each physical function's link at the speed and width the card can do, and what
//! limits it when not (the slot, or a link that trained below both ends).

use std::collections::BTreeMap;

use super::{Report, Severity};
use crate::kernel::topology::{BusDevice, IbDevice, IbParent, PciFunction, PcieLink, RdmaSysfs};
use crate::node::values::rate_mbps;

/// Usable bandwidth of a link in Mb/s after line encoding: 8b/10b up to 5 GT/s, 128b/130b
/// from 8 GT/s (PCIe 3.0 and later).
fn pcie_mbps(link: &PcieLink) -> Option<u64> {
    let mts = u64::from(link.mts?);
    let lanes = u64::from(link.width?);
    let per_lane = if mts <= 5000 {
        mts * 8 / 10
    } else {
        mts * 128 / 130
    };
    Some(per_lane * lanes)
}

fn link_text(l: &PcieLink) -> String {
    format!(
        "{} x{}",
        l.speed.trim_end_matches(" PCIe").trim_end_matches(" PCI"),
        l.width.map(|w| w.to_string()).unwrap_or_else(|| "?".into())
    )
}

fn lspci_fix(bdf: &str) -> String {
    format!("lspci -vv -s {bdf} | grep -E 'LnkCap|LnkSta'")
}

/// A physical function and the ib devices it carries (its own, its VFs' and SFs').
#[derive(Default)]
struct Carried {
    ibdevs: Vec<String>,
    /// The fastest of their ports, in Mb/s.
    fastest_port: u64,
}

pub(super) struct PcieCheck<'a> {
    pub(super) topo: &'a RdmaSysfs<'a>,
    pub(super) devices: &'a [IbDevice],
}

impl PcieCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        for (bdf, carried) in self.physical_functions() {
            self.function(&bdf, &carried, r);
        }
    }

    /// One entry per physical function: VFs and SFs have no link of their own (their PF's is
    /// the one that carries them).
    fn physical_functions(&self) -> BTreeMap<String, Carried> {
        let mut pfs: BTreeMap<String, Carried> = BTreeMap::new();
        for d in self.devices {
            let bdf = match &d.parent {
                IbParent::Device(BusDevice::Pci { bdf }) => bdf.clone(),
                IbParent::Device(BusDevice::Auxiliary {
                    pci_parent: Some(p),
                    ..
                }) => p.clone(),
                _ => continue,
            };
            let bdf = match self.topo.pci_function(&bdf) {
                Ok(Some(PciFunction {
                    physfn: Some(pf), ..
                })) => pf,
                _ => bdf,
            };
            let rate = d
                .ports
                .iter()
                .filter_map(|p| p.rate.as_deref().and_then(rate_mbps))
                .max()
                .unwrap_or(0);
            let e = pfs.entry(bdf).or_default();
            e.fastest_port = e.fastest_port.max(rate);
            e.ibdevs.push(d.name.clone());
        }
        pfs
    }

    fn function(&self, bdf: &str, carried: &Carried, r: &mut Report) {
        let object = format!("{bdf} ({})", carried.ibdevs.join(", "));
        let f = match self.topo.pci_function(bdf) {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                r.push(
                    "pcie",
                    Severity::Warn,
                    object,
                    format!("cannot read the PCIe link: {e}"),
                    Some(lspci_fix(bdf)),
                );
                return;
            }
        };
        let (Some(cur), Some(max)) = (&f.current_link, &f.max_link) else {
            return;
        };
        let bw_note = match pcie_mbps(cur) {
            Some(bw) if carried.fastest_port > bw => format!(
                "; about {} Gb/s over PCIe, less than the port's {} Gb/s",
                bw / 1000,
                carried.fastest_port / 1000
            ),
            _ => String::new(),
        };
        match f.link_degraded() {
            Some(true) => {
                r.facts.pcie_degraded = true;
                let (finding, fix) = self.degraded(bdf, cur, max, &bw_note);
                r.push("pcie", Severity::Warn, object, finding, Some(fix));
            }
            Some(false) => r.push(
                "pcie",
                Severity::Ok,
                object,
                format!("link at {}, the card's maximum{bw_note}", link_text(cur)),
                None,
            ),
            None => {}
        }
    }

    /// Finding and fix of a link below the card's maximum: "move the card" when the slot (the
    /// upstream port) cannot do more, else "reseat".
    fn degraded(
        &self,
        bdf: &str,
        cur: &PcieLink,
        max: &PcieLink,
        bw_note: &str,
    ) -> (String, String) {
        let up = self.topo.pci_upstream(bdf).ok().flatten();
        let slot = up.as_ref().and_then(|u| u.max_link.clone().map(|m| (u, m)));
        let slot_limits = slot.as_ref().is_some_and(|(_, m)| {
            m.mts.zip(max.mts).is_some_and(|(s, c)| s < c)
                || m.width.zip(max.width).is_some_and(|(s, c)| s < c)
        });
        match slot {
            Some((u, m)) if slot_limits => (
                format!(
                    "link at {}, the card can do {}, but its slot (upstream port {}) at most \
                     {}{bw_note}",
                    link_text(cur),
                    link_text(max),
                    u.bdf,
                    link_text(&m)
                ),
                format!(
                    "move the card to a slot that does {} (see the board manual), or accept the \
                     lower bandwidth; {}",
                    link_text(max),
                    lspci_fix(bdf)
                ),
            ),
            _ => (
                format!(
                    "link at {}, below what the card ({}) and its slot{} can do{bw_note}",
                    link_text(cur),
                    link_text(max),
                    up.as_ref()
                        .and_then(|u| u.max_link.as_ref().map(|m| format!(
                            " (upstream port {}, {})",
                            u.bdf,
                            link_text(m)
                        )))
                        .unwrap_or_default()
                ),
                format!(
                    "reseat the card and its riser, check the BIOS PCIe speed setting; dmesg | \
                     grep -i 'bandwidth' names the limiting link; {}",
                    lspci_fix(bdf)
                ),
            ),
        }
    }
}
