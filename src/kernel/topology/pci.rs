//! PCI functions as sysfs shows them (`bus/pci/devices/<bdf>`): NUMA node, PCIe link, driver,
//! SR-IOV relations, and the netdevs and ib devices they carry.

use std::io;
use std::path::Path;

use super::files::{link_name, list_abs, plain_name, read_opt_abs, resolve};
use super::RdmaSysfs;

/// A PCIe link as `{current,max}_link_{speed,width}` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcieLink {
    /// Raw speed text: `8.0 GT/s PCIe` (kernels since 5.7 print `pci_speed_string`), `8 GT/s`
    /// (older), `Unknown` / `Unknown speed`.
    pub speed: String,
    /// The speed in MT/s (2.5 GT/s → 2500); None when unknown.
    pub mts: Option<u32>,
    /// Lanes (`%u`); None when 0 (no link information, e.g. on VFs).
    pub width: Option<u32>,
}

impl PcieLink {
    pub(super) fn parse(speed: &str, width: &str) -> PcieLink {
        PcieLink {
            speed: speed.to_string(),
            mts: parse_gts(speed),
            width: width.trim().parse().ok().filter(|w| *w > 0),
        }
    }
}

/// Parses the leading `<n>[.<d>] GT/s` into MT/s without going through floats.
pub(super) fn parse_gts(text: &str) -> Option<u32> {
    let mut words = text.split_whitespace();
    let number = words.next()?;
    if words.next()? != "GT/s" {
        return None;
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let int: u32 = int.parse().ok()?;
    let mut frac_mts = 0u32;
    let mut scale = 100u32;
    for c in frac.chars() {
        let d = c.to_digit(10)?;
        frac_mts += d * scale;
        scale /= 10;
    }
    // A speed beyond u32 MT/s is no real link: unknown rather than a debug-build overflow
    // panic or a wrapped value.
    int.checked_mul(1000)?.checked_add(frac_mts)
}

/// A PCI function (`bus/pci/devices/<bdf>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    pub bdf: String,
    /// `numa_node` (`%d`); None for -1 (NUMA_NO_NODE) or without CONFIG_NUMA.
    pub numa_node: Option<u32>,
    pub current_link: Option<PcieLink>,
    pub max_link: Option<PcieLink>,
    /// The bound driver (`driver` link): `mlx5_core`, `vfio-pci`.
    pub driver: Option<String>,
    /// For a VF, its PF (`physfn -> ../<PF>`).
    pub physfn: Option<String>,
    /// For a PF, its VFs by VF number (`virtfnN -> ../<VF>`).
    pub virtfns: Vec<(u32, String)>,
    pub sriov_numvfs: Option<u32>,
    pub sriov_totalvfs: Option<u32>,
    /// `net/*` of the function.
    pub netdevs: Vec<String>,
    /// `infiniband/*` of the function.
    pub ib_devices: Vec<String>,
}

impl PciFunction {
    /// Whether the link trained slower or narrower than the function itself supports
    /// (`max_link_*` come from its Link Capabilities register, `current_link_*` from Link
    /// Status, drivers/pci/pci-sysfs.c); the slot or an upstream port is then the limit.
    /// None when either side is unknown.
    pub fn link_degraded(&self) -> Option<bool> {
        let cur = self.current_link.as_ref()?;
        let max = self.max_link.as_ref()?;
        Some(cur.mts? < max.mts? || cur.width? < max.width?)
    }
}

impl RdmaSysfs<'_> {
    /// A PCI function, or None when `bus/pci/devices/<bdf>` does not exist.
    pub fn pci_function(&self, bdf: &str) -> io::Result<Option<PciFunction>> {
        plain_name(bdf)?;
        let Some(dir) = resolve(&self.sys.path(Path::new("bus/pci/devices").join(bdf)))? else {
            return Ok(None);
        };
        let link = |speed: &str, width: &str| -> io::Result<Option<PcieLink>> {
            match (
                read_opt_abs(&dir.join(speed))?,
                read_opt_abs(&dir.join(width))?,
            ) {
                (Some(s), Some(w)) => Ok(Some(PcieLink::parse(&s, &w))),
                _ => Ok(None),
            }
        };
        let numa_node = read_opt_abs(&dir.join("numa_node"))?
            .and_then(|v| v.parse::<i64>().ok())
            .and_then(|v| u32::try_from(v).ok());
        let mut virtfns = Vec::new();
        for name in list_abs(&dir)? {
            if let Some(n) = name
                .strip_prefix("virtfn")
                .and_then(|n| n.parse::<u32>().ok())
            {
                if let Some(target) = link_name(&dir.join(&name))? {
                    virtfns.push((n, target));
                }
            }
        }
        virtfns.sort();
        let num = |attr: &str| -> io::Result<Option<u32>> {
            Ok(read_opt_abs(&dir.join(attr))?.and_then(|v| v.parse().ok()))
        };
        Ok(Some(PciFunction {
            bdf: bdf.to_string(),
            numa_node,
            current_link: link("current_link_speed", "current_link_width")?,
            max_link: link("max_link_speed", "max_link_width")?,
            driver: link_name(&dir.join("driver"))?,
            physfn: link_name(&dir.join("physfn"))?,
            virtfns,
            sriov_numvfs: num("sriov_numvfs")?,
            sriov_totalvfs: num("sriov_totalvfs")?,
            netdevs: list_abs(&dir.join("net"))?,
            ib_devices: list_abs(&dir.join("infiniband"))?,
        }))
    }
}
