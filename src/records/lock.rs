//! The lock keys the CNI and the DRA driver share, each made by one function here, so that both
//! sides lock a device by the same file whatever they read it from (the CNI from rtnetlink, the
//! driver from sysfs and rtnetlink).
//!
//! - A netdev: its PCI function when the netdev's own parent device is one (`pci-<bdf>`: stable
//!   across renames and netns moves), else its permanent hardware address, else its current one
//!   (`mac-<address>`). An SF's netdev sits on the auxiliary bus, so its key is its own
//!   address, not its PF's function: two SFs of one PF are two devices.
//! - A prepared DRA claim: `claim-<uid>`, held while its record or its CDI edits change.
//! - An attachment: `ipam-<network>-<containerID>-<ifname>`, which its IPAM plugins inherit.

use crate::kernel::rtnetlink::format_hwaddr;

/// What identifies a netdev for its lock: its parent device's bus and name (IFLA_PARENT_DEV_*
/// or sysfs `device` and `subsystem`), its permanent and its current hardware address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetdevIdentity<'a> {
    /// The PCI function the netdev's own parent device is, when it is on the PCI bus.
    pub pci: Option<&'a str>,
    /// IFLA_PERM_ADDRESS: absent (or all zeros) for software netdevs.
    pub perm_hwaddr: Option<&'a [u8]>,
    pub hwaddr: &'a [u8],
}

/// THE device lock key of a netdev (see the module doc).
pub fn device_key(id: &NetdevIdentity<'_>) -> String {
    if let Some(pci) = id.pci {
        return format!("pci-{pci}");
    }
    let perm = id.perm_hwaddr.filter(|p| p.iter().any(|&b| b != 0));
    format!("mac-{}", format_hwaddr(perm.unwrap_or(id.hwaddr)))
}

/// The lock key of claim `uid`, held while the driver prepares or unprepares the claim and
/// while the CNI changes its CDI edits.
pub fn claim_lock_key(uid: &str) -> String {
    format!("claim-{uid}")
}

/// Attachment lock files start with it; device keys (`pci-`, `mac-`, `ib-`, ...) never do.
pub const ATTACHMENT_LOCK_PREFIX: &str = "ipam-";

/// What names an attachment's lock file.
pub fn attachment_lock_key(network: &str, container_id: &str, ifname: &str) -> String {
    format!("{ATTACHMENT_LOCK_PREFIX}{network}-{container_id}-{ifname}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_netdev_is_keyed_by_its_pci_function_else_its_permanent_else_its_current_address() {
        let mac = [0x02, 0, 0, 0, 0x3b, 0x02];
        let perm = [0x0c, 0x42, 0xa1, 0, 0, 1];
        let pci = NetdevIdentity {
            pci: Some("0000:3b:00.2"),
            perm_hwaddr: Some(&perm),
            hwaddr: &mac,
        };
        assert_eq!(device_key(&pci), "pci-0000:3b:00.2");
        let sf = NetdevIdentity { pci: None, ..pci };
        assert_eq!(device_key(&sf), "mac-0c:42:a1:00:00:01");
        let zeros = [0u8; 6];
        let veth = NetdevIdentity {
            pci: None,
            perm_hwaddr: Some(&zeros),
            hwaddr: &mac,
        };
        assert_eq!(device_key(&veth), "mac-02:00:00:00:3b:02");
        assert_eq!(
            device_key(&NetdevIdentity {
                perm_hwaddr: None,
                ..veth
            }),
            "mac-02:00:00:00:3b:02"
        );
    }
}
