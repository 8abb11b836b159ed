//! The parts of an attachment record that every mode or step shares: what a mode's state is
//! made of (the host device, the pod interface, a moved ib device, a child), and the pod and
//! netns an attachment belongs to. Plain data: how a mode acts on them lives in attach/.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::kernel::rtnetlink::LinkKind;

/// Where an ADD got to, so DEL knows what to look for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Written before the first kernel change.
    Adding,
    /// ADD completed.
    Ready,
}

/// The host device as it was before ADD: what DEL restores.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HostDevice {
    pub name: String,
    pub ifindex: u32,
    pub mtu: u32,
    pub hwaddr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perm_hwaddr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    pub was_up: bool,
    /// Addresses the device had in the host (restored when an ADD is rolled back).
    #[serde(default)]
    pub addresses: Vec<String>,
}

impl HostDevice {
    /// This device as the host side of an attachment.
    pub fn side(&self) -> HostSide<'_> {
        HostSide {
            name: Some(&self.name),
            hwaddr: Some(&self.hwaddr),
            pci: self.pci.as_deref(),
        }
    }
}

/// The host-side device of an attachment as its record names it: what messages and listings
/// call it, and how ADD tells which attachment holds a device a selector names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostSide<'a> {
    /// Its host name, when this plugin knew it (chained mode: the previous plugin's business).
    pub name: Option<&'a str>,
    pub hwaddr: Option<&'a str>,
    /// Its PCI function.
    pub pci: Option<&'a str>,
}

/// The pod interface this plugin made (moved or created) and configured: what CHECK compares
/// and where DEL looks first. Chained mode has none: the previous plugin made and configured it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInterface {
    /// Its ifindex inside the pod (usually unchanged by a move); None until it exists in the
    /// pod (the intent record is written before).
    pub ifindex: Option<u32>,
    /// Its MTU once ADD completed.
    pub mtu: Option<u32>,
    /// The IPAM result as the IPAM plugin returned it (converted to 1.1.0), if IPAM ran.
    pub ipam_result: Option<serde_json::Value>,
    /// RoCE GIDs of the pod's addresses (ib device, port, index, type), and where to read them.
    pub gids: Vec<GidRecord>,
    pub gid_view: Option<GidView>,
}

/// `K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_UID` from CNI_ARGS.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// A network namespace's identity: the (device, inode) of its nsfs file.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetnsId {
    pub dev: u64,
    pub ino: u64,
}

impl NetnsId {
    pub fn of(ns: &crate::kernel::Netns) -> Option<NetnsId> {
        ns.identity().ok().map(|(dev, ino)| NetnsId { dev, ino })
    }
}

/// What the steps of an ADD recorded beyond the flat layout's fields (`steps` on disk, left out
/// when empty): each step's record under a key of its own, so a new step records what it must
/// release without a new field here. Releases that predate a step ignore its key, as they
/// ignore any field they do not know.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepRecords(serde_json::Map<String, serde_json::Value>);

impl StepRecords {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What step `key` recorded; None when it recorded nothing.
    pub fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> serde_json::Result<Option<T>> {
        self.0
            .get(key)
            .cloned()
            .map(serde_json::from_value)
            .transpose()
    }

    /// Records `record` as step `key`'s, replacing what it recorded before.
    pub fn set<T: Serialize>(&mut self, key: &str, record: &T) -> serde_json::Result<()> {
        self.0
            .insert(key.to_string(), serde_json::to_value(record)?);
        Ok(())
    }
}

/// The key of the Soft-RoCE step's record in `steps` (and its conf field).
pub const SOFT_ROCE_STEP: &str = "softRoce";

/// What the Soft-RoCE step records (under [`SOFT_ROCE_STEP`] in the record's `steps`), written before the device
/// is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SoftRoceRecord {
    /// The ib device's name (attach/soft_roce.rs `device_name`).
    pub ibdev: String,
    /// Its NLDEV index once the kernel made it (stable across netns moves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The pod interface it is bound to.
    pub netdev: String,
    /// Whether it was moved into the pod's netns (exclusive netns mode).
    #[serde(default)]
    pub in_pod: bool,
}

/// One pod IP's GID, as ADD recorded it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GidRecord {
    pub ip: IpAddr,
    pub ibdev: String,
    pub port: u32,
    pub index: u32,
    /// `RoCE v2` or `IB/RoCE v1`.
    pub gid_type: String,
}

/// Where the GIDs of a pod interface are read: the host's sysfs (shared netns mode: the ib
/// device stays in the host and lists the pod netdev's GIDs by its pod name), or a sysfs mounted
/// inside the pod netns (exclusive mode: the ib device moved there and vanished from the host's
/// /sys). A fixture root set for tests (RDMA_NS_SYSFS_ROOT) stands for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GidView {
    Host,
    Pod,
}

/// The ib device moved with an attachment, as recorded for DEL and CHECK.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RdmaRecord {
    pub ibdev: String,
    /// NLDEV device index (stable across netns moves).
    pub index: u32,
    pub port: u32,
    /// Link layer InfiniBand: the kernel re-creates the device's IPoIB netdevs in the target
    /// netns on every move, so the netdev is found again by its port GID (address bytes 4-19).
    pub infiniband: bool,
    /// How the driver is named in messages (`mlx5_core`, `rdma_rxe`).
    pub driver: String,
}

/// One node's change, as stored in the attachment record: enough for DEL to put it back and to
/// recognize the node (a re-created device gets another number).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermChange {
    pub path: PathBuf,
    /// The sysfs `dev` value, (major, minor).
    pub rdev: (u32, u32),
    /// Mode bits (`& 0o7777`) before any attachment changed the node.
    pub old_mode: u32,
    pub old_gid: u32,
    pub new_mode: u32,
    pub new_gid: u32,
}

/// A child interface as created: how DEL recognizes it (also after the kernel refunded an IPoIB
/// child to the host under another name) and what CHECK compares.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChildRecord {
    /// IFLA_INFO_KIND.
    pub kind: ChildKind,
    pub hwaddr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipoib: Option<IpoibRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macvlan_mode: Option<u32>,
    /// The mode/MTU decision, e.g. "ipoib datagram on ib0, MTU 2044 (auto)".
    pub summary: String,
}

/// A child interface's kind: its IFLA_INFO_KIND string on disk and in the kernel.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChildKind {
    Macvlan,
    Ipoib,
}

impl ChildKind {
    pub fn of(kind: &LinkKind) -> ChildKind {
        match kind {
            LinkKind::Macvlan { .. } => ChildKind::Macvlan,
            LinkKind::Ipoib { .. } => ChildKind::Ipoib,
        }
    }

    /// The IFLA_INFO_KIND string.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildKind::Macvlan => "macvlan",
            ChildKind::Ipoib => "ipoib",
        }
    }
}

/// IPoIB settings as the kernel reported them after creation (IFLA_INFO_DATA).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct IpoibRecord {
    pub pkey: Option<u16>,
    /// 0 datagram, 1 connected.
    pub mode: Option<u16>,
    pub umcast: Option<u16>,
}

impl From<crate::kernel::rtnetlink::IpoibInfo> for IpoibRecord {
    fn from(i: crate::kernel::rtnetlink::IpoibInfo) -> Self {
        IpoibRecord {
            pkey: i.pkey,
            mode: i.mode,
            umcast: i.umcast,
        }
    }
}
