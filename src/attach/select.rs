//! Choosing exactly one host netdev from a selector.
//!
//! Direct lookups where the kernel offers them: a name is one RTM_GETLINK; a PCI or auxiliary
//! device is one sysfs directory listing plus one RTM_GETLINK per netdev found. Only `hwaddr`
//! needs a dump of every link, because the kernel has no lookup by address.

use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::{format_hwaddr, Link, NetOps, Ns};

/// How the operator (or a device plugin through Multus) named the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `device` (move mode) or `master` (child modes): a netdev name or altname in the host.
    Name { field: &'static str, name: String },
    /// `hwaddr`: the MAC (or 20-byte IPoIB) address, matched against the current and the
    /// permanent address.
    HwAddr(Vec<u8>),
    /// `kernelpath`: a sysfs device path such as `/sys/devices/pci0000:00/.../0000:3b:00.2`.
    KernelPath(String),
    /// `pciBusID`, or a PCI `deviceID`: `0000:3b:00.2`.
    Pci {
        field: &'static str,
        address: String,
    },
    /// An auxiliary-bus `deviceID` such as `mlx5_core.sf.4` (mlx5 subfunctions).
    Aux { field: &'static str, name: String },
    /// `rdmaDevice`: an ib device name (`mlx5_3`, `rocep59s0f2`); its netdev is selected.
    IbDevice(String),
}

impl Selector {
    /// The conf field this selector came from and its value, for messages.
    pub fn describe(&self) -> String {
        match self {
            Selector::Name { field, name } => format!("{field}={name}"),
            Selector::HwAddr(a) => format!("hwaddr={}", format_hwaddr(a)),
            Selector::KernelPath(p) => format!("kernelpath={p}"),
            Selector::Pci { field, address } => format!("{field}={address}"),
            Selector::Aux { field, name } => format!("{field}={name}"),
            Selector::IbDevice(n) => format!("rdmaDevice={n}"),
        }
    }

    /// The device a device plugin's ID names: a PCI address (`0000:3b:00.2`, or the short
    /// `3b:00.2` form, normalized to domain 0000) or an auxiliary device name. None for anything
    /// else (see `config::DeviceId`).
    pub fn from_device_id(field: &'static str, value: &str) -> Option<Selector> {
        if let Some(address) = normalize_pci(value) {
            return Some(Selector::Pci { field, address });
        }
        is_aux_name(value).then(|| Selector::Aux {
            field,
            name: value.to_string(),
        })
    }
}

/// `dddd:bb:dd.f` in lowercase, or None. Accepts `bb:dd.f` (domain 0000).
pub fn normalize_pci(text: &str) -> Option<String> {
    let full = if text.matches(':').count() == 1 {
        format!("0000:{text}")
    } else {
        text.to_string()
    };
    let lower = full.to_ascii_lowercase();
    let b = lower.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_hexdigit());
    let ok = b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11]);
    ok.then_some(lower)
}

/// `<driver>.<type>.<id>` as the auxiliary bus names devices (`mlx5_core.sf.4`).
fn is_aux_name(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() >= 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        })
        && parts.last().unwrap().bytes().all(|c| c.is_ascii_digit())
}

/// Finds the one host link `selector` names. Zero or several → an error naming the selector and
/// the candidates.
pub fn select_host_device(kernel: &dyn NetOps, sys: &SysRoot, selector: &Selector) -> Result<Link> {
    let lookup_err = |e| Error::kernel(format!("looking up {}", selector.describe()), e);
    match selector {
        Selector::Name { name, .. } => {
            match kernel.link_by_name(Ns::Host, name).map_err(lookup_err)? {
                Some(link) => Ok(link),
                None => Err(not_found(selector, &[])),
            }
        }
        Selector::HwAddr(addr) => {
            let matches = kernel
                .links_with_hwaddr(Ns::Host, addr)
                .map_err(lookup_err)?;
            one(selector, matches)
        }
        Selector::KernelPath(path) => {
            let names = sys
                .kernelpath_netdevs(path)
                .map_err(|e| sysfs_err(selector, e))?;
            links_named(kernel, selector, names)
        }
        Selector::Pci { address, .. } => {
            let names = sys
                .pci_netdevs(address)
                .map_err(|e| sysfs_err(selector, e))?;
            links_named(kernel, selector, names)
        }
        Selector::Aux { name, .. } => {
            let names = sys.aux_netdevs(name).map_err(|e| sysfs_err(selector, e))?;
            links_named(kernel, selector, names)
        }
        Selector::IbDevice(name) => {
            let topo = crate::kernel::topology::RdmaSysfs::new(sys);
            if topo
                .device(name)
                .map_err(|e| sysfs_err(selector, e))?
                .is_none()
            {
                return Err(Error::DeviceNotFound(format!(
                    "{}: no such ib device in /sys/class/infiniband (in exclusive netns mode a \
                     device attached to a pod is not visible from the host)",
                    selector.describe()
                )));
            }
            let mut names: Vec<String> = topo
                .netdevs_of_ib_device(name)
                .map_err(|e| sysfs_err(selector, e))?
                .into_iter()
                .map(|(_, n)| n)
                .collect();
            names.dedup();
            links_named(kernel, selector, names)
        }
    }
}

/// The parent of a child interface: the one host link every selector names (an ib device's
/// netdevs come from its function's `net/` directory, so P_Key and macvlan children, being
/// virtual, are never among them). Selectors that name different links are a conf error
/// naming both.
pub fn select_parent(kernel: &dyn NetOps, sys: &SysRoot, selectors: &[Selector]) -> Result<Link> {
    let mut chosen: Option<(&Selector, Link)> = None;
    for selector in selectors {
        let link = select_host_device(kernel, sys, selector)?;
        match &chosen {
            None => chosen = Some((selector, link)),
            Some((first, l)) if l.index != link.index => {
                return Err(Error::config(
                    selector_field(selector),
                    format!(
                        "{} names {}, but {} names {}: they must name the same parent netdev; \
                         drop one of them or make them agree",
                        first.describe(),
                        l.name,
                        selector.describe(),
                        link.name
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    chosen
        .map(|(_, l)| l)
        .ok_or_else(|| Error::config("master", "no parent selector given"))
}

fn selector_field(selector: &Selector) -> &'static str {
    match selector {
        Selector::Name { field, .. }
        | Selector::Pci { field, .. }
        | Selector::Aux { field, .. } => field,
        Selector::HwAddr(_) => "hwaddr",
        Selector::KernelPath(_) => "kernelpath",
        Selector::IbDevice(_) => "rdmaDevice",
    }
}

fn links_named(kernel: &dyn NetOps, selector: &Selector, names: Vec<String>) -> Result<Link> {
    let mut links = Vec::new();
    for name in &names {
        // The host's /sys lists only host-netns netdevs, so each name is in the host netns; a
        // race with a concurrent move makes the lookup come back empty, which is "not found".
        if let Some(l) = kernel
            .link_by_name(Ns::Host, name)
            .kernel_ctx(|| format!("looking up {name} for {}", selector.describe()))?
        {
            links.push(l);
        }
    }
    if links.is_empty() {
        return Err(not_found(selector, &names));
    }
    one(selector, links)
}

fn one(selector: &Selector, mut links: Vec<Link>) -> Result<Link> {
    match links.len() {
        1 => Ok(links.pop().unwrap()),
        0 => Err(not_found(selector, &[])),
        _ => {
            let names: Vec<String> = links
                .iter()
                .map(|l| format!("{} ({})", l.name, l.hwaddr_string()))
                .collect();
            Err(Error::DeviceAmbiguous(format!(
                "{} matches {} host netdevs: {}; select one with `device` (its name) or `hwaddr`",
                selector.describe(),
                links.len(),
                names.join(", ")
            )))
        }
    }
}

fn not_found(selector: &Selector, candidates: &[String]) -> Error {
    let mut msg = format!(
        "{} matches no netdev in the host network namespace; check `ip link` on the node \
         (a device already attached to a pod is no longer in the host)",
        selector.describe()
    );
    if !candidates.is_empty() {
        msg.push_str(&format!(
            "; sysfs lists {} for it, none of them in the host netns now",
            candidates.join(", ")
        ));
    }
    Error::DeviceNotFound(msg)
}

fn sysfs_err(selector: &Selector, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::DeviceNotFound(format!(
            "{}: no such device in sysfs ({e}); check the address and that the driver is bound",
            selector.describe()
        ))
    } else {
        Error::io(format!("reading sysfs for {}", selector.describe()), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_normalize_and_reject_garbage() {
        assert_eq!(
            normalize_pci("0000:3B:00.2").as_deref(),
            Some("0000:3b:00.2")
        );
        assert_eq!(normalize_pci("3b:00.2").as_deref(), Some("0000:3b:00.2"));
        assert_eq!(normalize_pci("0000:3b:00.8"), None);
        assert_eq!(normalize_pci("0000:3b:00"), None);
        assert_eq!(normalize_pci("mlx5_core.sf.4"), None);
    }

    #[test]
    fn device_ids_are_pci_or_aux() {
        assert_eq!(
            Selector::from_device_id("deviceID", "0000:3b:00.2").unwrap(),
            Selector::Pci {
                field: "deviceID",
                address: "0000:3b:00.2".into()
            }
        );
        assert_eq!(
            Selector::from_device_id("deviceID", "mlx5_core.sf.4").unwrap(),
            Selector::Aux {
                field: "deviceID",
                name: "mlx5_core.sf.4".into()
            }
        );
        for not_a_device in ["eth0", "0", "12", "../../x.y.1", ""] {
            assert_eq!(
                Selector::from_device_id("deviceID", not_a_device),
                None,
                "{not_a_device}"
            );
        }
    }
}
