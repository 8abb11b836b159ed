//! Attachment state on disk, and per-device locks.
//!
//! Layout under the data dir (default `/var/lib/cni/rdma-ns`, conf `dataDir`), directories
//! 0700:
//! - `<network>/<containerID>:<ifname>.json`: one record per attachment. Network names and
//!   container ids match `[a-zA-Z0-9][a-zA-Z0-9_.-]*` and neither they nor ifnames may hold
//!   `/` or `:`, so the name is unique and cannot escape the directory (checked again here).
//! - `locks/<device-key>.lock`: flock(2) files serializing attachments that contend for one
//!   device. Different devices never wait for each other.
//!
//! A record file holds one JSON document per line, the last readable one counting:
//! - the intent ("adding"), written *before* the device is moved, atomically and durably
//!   (temp file, fsync, rename, fsync dir), so even a plugin killed mid-ADD, or a node that
//!   lost power, leaves DEL everything it needs to bring the device back;
//! - the final state ("ready", with the pod ifindex, MTU and IPAM result), appended when ADD
//!   completes, without fsync. If a crash loses or tears that line, the intent line before it
//!   still reads, and DEL/GC work from it (they only need what the intent holds; the pod
//!   ifindex saves one lookup by name, the MTU serves CHECK). Syncing it too would cost two more
//!   fsyncs per ADD (file and directory) for no gain in what survives a crash.
//!
//! Records written by earlier versions (one pretty-printed document) read as before.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/rdma-ns";

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

/// One attachment: everything DEL, CHECK and GC need without prevResult. What every mode
/// records is here; what one mode has (a moved host device, a child and its parent, a chained
/// ib device) is in [`ModeState`], so a record cannot hold what its mode never writes.
///
/// On disk a record is the flat [`RecordWire`] document every release since 0.1.0 writes and
/// reads: older binaries must still read records written now (a node rolled back can DEL what
/// this binary attached) and this one theirs, so the typed form is converted to and from that
/// layout instead of changing it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(try_from = "RecordWire", into = "RecordWire")]
pub struct Attachment {
    /// The record format: absent in records of 0.1.0 (read as 1), [`SCHEMA`] when written now.
    pub schema: u32,
    /// The rdma-ns version that wrote the record.
    pub written_by: Option<String>,
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    /// The pod as the runtime named it in CNI_ARGS (Kubernetes runtimes and Multus do).
    pub pod: Option<PodRef>,
    pub phase: Phase,
    pub netns: String,
    /// The pod netns's identity (nsfs device and inode) at ADD: a path reused by another netns
    /// later is not mistaken for this pod's.
    pub netns_id: Option<NetnsId>,
    pub device_key: String,
    /// What this mode attached; the mode itself ([`Attachment::mode`]) is read from it, so the
    /// two cannot disagree.
    pub mode_state: ModeState,
    /// Char-device permission changes (conf devicePermissions), restored on release.
    pub perm_changes: Vec<crate::attach::permissions::PermChange>,
    /// The NPWG device-info file written (runtimeConfig.CNIDeviceInfoFile), removed on release.
    pub device_info_file: Option<String>,
    /// The device plugin's ID as Multus passed it (`runtimeConfig.deviceID`, `deviceID` or
    /// `pciBusID`), also when it selected nothing (a shared device plugin's index).
    pub device_id: Option<String>,
    /// The network configuration ADD got (IPAM included) and its CNI_PATH: what a DEL needs
    /// when no runtime will send one (`rdma-ns reconcile`).
    pub conf: Option<serde_json::Value>,
    pub cni_path: Vec<String>,
}

/// What one mode attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeState {
    /// Mode `move`: a host netdev moved into the pod.
    Move(MoveState),
    /// Modes `macvlan` and `ipoib`: a child of a host netdev, created in the pod.
    Child(ChildState),
    /// Mode `rdma`: the previous plugin in the chain owns the pod netdev; only the ib device of
    /// its PCI function is this attachment's.
    Chained(ChainedState),
}

/// Mode `move`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveState {
    /// The device as it was in the host: what DEL restores.
    pub host: HostDevice,
    /// The ib device moved along (exclusive netns mode), if any.
    pub rdma: Option<crate::attach::ib_device::RdmaRecord>,
    pub pod_interface: PodInterface,
}

/// Modes `macvlan` and `ipoib`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildState {
    /// The host netdev the child was created on.
    pub parent: HostDevice,
    pub child: ChildRecord,
    pub pod_interface: PodInterface,
}

/// Mode `rdma`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainedState {
    /// The PCI function (a VF) whose ib device went into the pod: the device-info file and
    /// `rdma-ns list` name it.
    pub function: String,
    /// The ib device moved into the pod: what DEL moves back and CHECK looks for.
    pub rdma: crate::attach::ib_device::RdmaRecord,
    /// The pod interface's MAC and MTU as prevResult gave them (the previous plugin's netdev),
    /// kept so the record names the netdev the ib device belongs to.
    pub prev_mac: Option<String>,
    pub prev_mtu: Option<u32>,
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
    pub gids: Vec<crate::attach::gids::GidRecord>,
    pub gid_view: Option<crate::attach::gids::GidView>,
}

/// An attachment record as it is on disk: the flat layout of every release since 0.1.0 (field
/// names, optional fields and defaults unchanged; see [`Attachment`] for why).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordWire {
    #[serde(default = "schema_of_unversioned")]
    schema: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    written_by: Option<String>,
    network: String,
    container_id: String,
    ifname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<PodRef>,
    mode: crate::attach::config::Mode,
    phase: Phase,
    netns: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns_id: Option<NetnsId>,
    device_key: String,
    /// Move: the moved device; child modes: the parent; chained: the pod interface as
    /// prevResult named it and its PCI function (every release requires this field).
    host: HostDevice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_ifindex: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ipam_result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    child: Option<ChildRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rdma: Option<crate::attach::ib_device::RdmaRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    gids: Vec<crate::attach::gids::GidRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gid_view: Option<crate::attach::gids::GidView>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    perm_changes: Vec<crate::attach::permissions::PermChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_info_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conf: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cni_path: Vec<String>,
}

/// A record whose fields do not make an attachment of its mode: DEL could not release what
/// the record does not name, or would release it the wrong way.
#[derive(Debug, thiserror::Error)]
pub enum RecordMismatch {
    /// Mode macvlan without `child`, mode rdma without `rdma`: a field the mode always writes.
    #[error("a mode \"{mode}\" record needs `{field}`, which this one lacks")]
    FieldMissing {
        mode: &'static str,
        field: &'static str,
    },
    /// Mode macvlan with an IPoIB child, or the reverse.
    #[error("a mode \"{mode}\" record holds a child of kind \"{kind}\"")]
    ChildKind {
        mode: &'static str,
        kind: &'static str,
    },
}

impl TryFrom<RecordWire> for Attachment {
    type Error = RecordMismatch;

    fn try_from(w: RecordWire) -> std::result::Result<Attachment, RecordMismatch> {
        use crate::attach::config::Mode;
        let RecordWire {
            schema,
            written_by,
            network,
            container_id,
            ifname,
            pod,
            mode,
            phase,
            netns,
            netns_id,
            device_key,
            host,
            pod_ifindex,
            pod_mtu,
            ipam_result,
            child,
            rdma,
            gids,
            gid_view,
            perm_changes,
            device_info_file,
            device_id,
            conf,
            cni_path,
        } = w;
        let missing = |field| RecordMismatch::FieldMissing {
            mode: mode.as_str(),
            field,
        };
        let pod_interface = PodInterface {
            ifindex: pod_ifindex,
            mtu: pod_mtu,
            ipam_result,
            gids,
            gid_view,
        };
        // Fields a mode never writes are ignored, as older releases ignored them.
        let mode_state = match mode {
            Mode::Move => ModeState::Move(MoveState {
                host,
                rdma,
                pod_interface,
            }),
            Mode::Macvlan | Mode::Ipoib => {
                let child = child.ok_or_else(|| missing("child"))?;
                if child.kind.mode() != mode {
                    return Err(RecordMismatch::ChildKind {
                        mode: mode.as_str(),
                        kind: child.kind.as_str(),
                    });
                }
                ModeState::Child(ChildState {
                    parent: host,
                    child,
                    pod_interface,
                })
            }
            // `host` holds a placeholder: only its PCI function and prevResult's MAC and MTU
            // are the chained attachment's.
            Mode::Rdma => ModeState::Chained(ChainedState {
                function: host.pci.ok_or_else(|| missing("host.pci"))?,
                rdma: rdma.ok_or_else(|| missing("rdma"))?,
                prev_mac: Some(host.hwaddr).filter(|m| !m.is_empty()),
                prev_mtu: Some(host.mtu).filter(|&m| m != 0),
            }),
        };
        Ok(Attachment {
            schema,
            written_by,
            network,
            container_id,
            ifname,
            pod,
            phase,
            netns,
            netns_id,
            device_key,
            mode_state,
            perm_changes,
            device_info_file,
            device_id,
            conf,
            cni_path,
        })
    }
}

impl From<&Attachment> for RecordWire {
    fn from(a: &Attachment) -> RecordWire {
        let none = PodInterface::default();
        let (host, pod_interface, child, rdma) = match &a.mode_state {
            ModeState::Move(m) => (m.host.clone(), &m.pod_interface, None, m.rdma.clone()),
            ModeState::Child(c) => (
                c.parent.clone(),
                &c.pod_interface,
                Some(c.child.clone()),
                None,
            ),
            // What every earlier release wrote, and so requires, for a chained attachment.
            ModeState::Chained(c) => (
                HostDevice {
                    name: a.ifname.clone(),
                    ifindex: 0,
                    mtu: c.prev_mtu.unwrap_or(0),
                    hwaddr: c.prev_mac.clone().unwrap_or_default(),
                    perm_hwaddr: None,
                    pci: Some(c.function.clone()),
                    was_up: true,
                    addresses: Vec::new(),
                },
                &none,
                None,
                Some(c.rdma.clone()),
            ),
        };
        RecordWire {
            schema: a.schema,
            written_by: a.written_by.clone(),
            network: a.network.clone(),
            container_id: a.container_id.clone(),
            ifname: a.ifname.clone(),
            pod: a.pod.clone(),
            mode: a.mode(),
            phase: a.phase,
            netns: a.netns.clone(),
            netns_id: a.netns_id,
            device_key: a.device_key.clone(),
            host,
            pod_ifindex: pod_interface.ifindex,
            pod_mtu: pod_interface.mtu,
            ipam_result: pod_interface.ipam_result.clone(),
            child,
            rdma,
            gids: pod_interface.gids.clone(),
            gid_view: pod_interface.gid_view,
            perm_changes: a.perm_changes.clone(),
            device_info_file: a.device_info_file.clone(),
            device_id: a.device_id.clone(),
            conf: a.conf.clone(),
            cni_path: a.cni_path.clone(),
        }
    }
}

impl From<Attachment> for RecordWire {
    fn from(a: Attachment) -> RecordWire {
        RecordWire::from(&a)
    }
}

/// The record format written now. 2: `schema`, `writtenBy`, `pod`, `netnsId`, `deviceId`,
/// `conf`, `cniPath`.
pub const SCHEMA: u32 = 2;

fn schema_of_unversioned() -> u32 {
    1
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

impl PodRef {
    fn from_args(args: &crate::cni::args::CniArgs) -> Option<PodRef> {
        let get = |k| args.get(k).filter(|v| !v.is_empty()).map(str::to_string);
        let pod = PodRef {
            namespace: get("K8S_POD_NAMESPACE"),
            name: get("K8S_POD_NAME"),
            uid: get("K8S_POD_UID"),
        };
        (pod.namespace.is_some() || pod.name.is_some() || pod.uid.is_some()).then_some(pod)
    }
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

/// A child interface as created: how DEL recognizes it (also after the kernel refunded an IPoIB
/// child to the host under another name) and what CHECK compares.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChildRecord {
    /// IFLA_INFO_KIND, which is also the attachment's mode.
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
    pub fn of(kind: &crate::kernel::LinkKind) -> ChildKind {
        match kind {
            crate::kernel::LinkKind::Macvlan { .. } => ChildKind::Macvlan,
            crate::kernel::LinkKind::Ipoib { .. } => ChildKind::Ipoib,
        }
    }

    /// The IFLA_INFO_KIND string.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildKind::Macvlan => "macvlan",
            ChildKind::Ipoib => "ipoib",
        }
    }

    pub fn mode(self) -> crate::attach::config::Mode {
        match self {
            ChildKind::Macvlan => crate::attach::config::Mode::Macvlan,
            ChildKind::Ipoib => crate::attach::config::Mode::Ipoib,
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

impl From<crate::kernel::IpoibInfo> for IpoibRecord {
    fn from(i: crate::kernel::IpoibInfo) -> Self {
        IpoibRecord {
            pkey: i.pkey,
            mode: i.mode,
            umcast: i.umcast,
        }
    }
}

impl Attachment {
    /// A new attachment in phase `Adding`: who asked (network, container, interface), the pod
    /// netns and what the mode holds; nothing applied or found yet.
    pub fn adding(
        req: &crate::cni::Request,
        netns: &crate::kernel::Netns,
        device_key: String,
        mode_state: ModeState,
    ) -> Attachment {
        Attachment {
            schema: SCHEMA,
            written_by: Some(env!("CARGO_PKG_VERSION").to_string()),
            network: req.conf.name.clone(),
            container_id: req.env.container_id.clone(),
            ifname: req.env.ifname.clone(),
            pod: PodRef::from_args(&req.env.args),
            phase: Phase::Adding,
            netns: netns.path().display().to_string(),
            netns_id: NetnsId::of(netns),
            device_key,
            mode_state,
            perm_changes: Vec::new(),
            device_info_file: None,
            // Parsed without error before any mode gets here.
            conf: serde_json::from_slice(&req.stdin).ok(),
            cni_path: req
                .env
                .path
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            device_id: crate::attach::config::device_plugin_id(&req.conf)
                .ok()
                .flatten()
                .map(|id| id.value),
        }
    }

    /// The conf's mode when ADD ran: picks the driver that releases the attachment.
    pub fn mode(&self) -> crate::attach::config::Mode {
        self.mode_state.mode()
    }

    pub fn id(&self) -> String {
        attachment_id(&self.container_id, &self.ifname)
    }

    pub fn moved(&self) -> Option<&MoveState> {
        match &self.mode_state {
            ModeState::Move(m) => Some(m),
            _ => None,
        }
    }

    pub fn moved_mut(&mut self) -> Option<&mut MoveState> {
        match &mut self.mode_state {
            ModeState::Move(m) => Some(m),
            _ => None,
        }
    }

    pub fn child(&self) -> Option<&ChildState> {
        match &self.mode_state {
            ModeState::Child(c) => Some(c),
            _ => None,
        }
    }

    pub fn child_mut(&mut self) -> Option<&mut ChildState> {
        match &mut self.mode_state {
            ModeState::Child(c) => Some(c),
            _ => None,
        }
    }

    pub fn chained(&self) -> Option<&ChainedState> {
        match &self.mode_state {
            ModeState::Chained(c) => Some(c),
            _ => None,
        }
    }

    /// The pod interface this plugin made, in the modes that make one.
    pub fn pod_interface(&self) -> Option<&PodInterface> {
        match &self.mode_state {
            ModeState::Move(m) => Some(&m.pod_interface),
            ModeState::Child(c) => Some(&c.pod_interface),
            ModeState::Chained(_) => None,
        }
    }

    pub fn pod_interface_mut(&mut self) -> Option<&mut PodInterface> {
        match &mut self.mode_state {
            ModeState::Move(m) => Some(&mut m.pod_interface),
            ModeState::Child(c) => Some(&mut c.pod_interface),
            ModeState::Chained(_) => None,
        }
    }

    /// The recorded GIDs of the pod's addresses (none in chained mode: it sets no addresses).
    pub fn gids(&self) -> &[crate::attach::gids::GidRecord] {
        self.pod_interface().map_or(&[], |p| p.gids.as_slice())
    }

    /// The ib device that went into the pod: a moved netdev's (exclusive netns mode), or a
    /// chained attachment's.
    pub fn ib_device(&self) -> Option<&crate::attach::ib_device::RdmaRecord> {
        match &self.mode_state {
            ModeState::Move(m) => m.rdma.as_ref(),
            ModeState::Child(_) => None,
            ModeState::Chained(c) => Some(&c.rdma),
        }
    }

    /// The PCI function on the host side: the moved device's, a child's parent's, a chained
    /// VF's.
    pub fn pci_function(&self) -> Option<&str> {
        match &self.mode_state {
            ModeState::Move(m) => m.host.pci.as_deref(),
            ModeState::Child(c) => c.parent.pci.as_deref(),
            ModeState::Chained(c) => Some(&c.function),
        }
    }

    /// The netdev the attachment is about, as messages and listings name it: the moved
    /// device's or the parent's host name; in chained mode the pod interface (its host name
    /// was the previous plugin's business).
    pub fn netdev_name(&self) -> &str {
        match &self.mode_state {
            ModeState::Move(m) => &m.host.name,
            ModeState::Child(c) => &c.parent.name,
            ModeState::Chained(_) => &self.ifname,
        }
    }
}

impl ModeState {
    /// The mode that records this state.
    pub fn mode(&self) -> crate::attach::config::Mode {
        use crate::attach::config::Mode;
        match self {
            ModeState::Move(_) => Mode::Move,
            ModeState::Child(c) => c.child.kind.mode(),
            ModeState::Chained(_) => Mode::Rdma,
        }
    }
}

fn attachment_id(container_id: &str, ifname: &str) -> String {
    format!("{container_id}:{ifname}")
}

/// A component that may become a file or directory name: non-empty, no `/`, no NUL, not `.`
/// or `..`. Everything written under the data dir passes through this.
fn safe_component(kind: &str, s: &str) -> Result<()> {
    if s.is_empty() || s == "." || s == ".." || s.contains(['/', '\0']) {
        return Err(Error::State(format!(
            "{kind} {s:?} cannot be used in a state file name"
        )));
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn network_dir(&self, network: &str) -> Result<PathBuf> {
        safe_component("network name", network)?;
        Ok(self.dir.join(network))
    }

    fn record_path(&self, network: &str, container_id: &str, ifname: &str) -> Result<PathBuf> {
        safe_component("container id", container_id)?;
        safe_component("interface name", ifname)?;
        if container_id.contains(':') || ifname.contains(':') {
            return Err(Error::State(format!(
                "container id {container_id:?} or ifname {ifname:?} contains ':'"
            )));
        }
        Ok(self
            .network_dir(network)?
            .join(bounded_file_name(container_id, &format!(":{ifname}.json"))))
    }

    /// Creates the data dir (0700) if needed. The data dir and its subdirectories must be real
    /// directories, not symlinks (a record or lock written through one lands wherever it
    /// points), and are kept 0700: a directory others can write lets a local user plant
    /// records or symlinks for the root plugin to follow.
    pub fn ensure_dir(&self, sub: Option<&str>) -> Result<PathBuf> {
        let dir = match sub {
            Some(s) => {
                safe_component("state subdirectory", s)?;
                self.dir.join(s)
            }
            None => self.dir.clone(),
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                Error::io(
                    format!(
                        "creating state directory {} (set `dataDir` to a writable directory)",
                        dir.display()
                    ),
                    e,
                )
            })?;
        // The data dir itself may be a symlink the operator made; what rdma-ns creates under it
        // may not.
        private_dir(&self.dir, true)?;
        if sub.is_some() {
            private_dir(&dir, false)?;
        }
        Ok(dir)
    }

    /// Writes `att` as the whole record, atomically and durably: done before anything changes
    /// in the kernel.
    pub fn save(&self, att: &Attachment) -> Result<()> {
        let path = self.record_path(&att.network, &att.container_id, &att.ifname)?;
        self.ensure_dir(Some(&att.network))?;
        write_atomic(&path, &record_line(att)?, 0o600)
            .map_err(|e| Error::io(format!("writing state file {}", path.display()), e))
    }

    /// Appends `att` to its existing record as the new current state, without fsync (see the
    /// module doc: losing it leaves the durable intent line). Falls back to [`Store::save`]
    /// when there is no record to append to.
    pub fn update(&self, att: &Attachment) -> Result<()> {
        let path = self.record_path(&att.network, &att.container_id, &att.ifname)?;
        let line = record_line(att)?;
        let file = OpenOptions::new().append(true).open(&path);
        match file {
            Ok(mut f) => f
                .write_all(&line)
                .map_err(|e| Error::io(format!("appending to state file {}", path.display()), e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.save(att),
            Err(e) => Err(Error::io(
                format!("opening state file {}", path.display()),
                e,
            )),
        }
    }

    pub fn load(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<Attachment>> {
        let path = self.record_path(network, container_id, ifname)?;
        read_record(&path)
    }

    pub fn remove(&self, network: &str, container_id: &str, ifname: &str) -> Result<()> {
        let path = self.record_path(network, container_id, ifname)?;
        remove_stale_temps(&path);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(
                format!("removing state file {}", path.display()),
                e,
            )),
        }
    }

    /// Every attachment of `network` (for GC). Unreadable records are reported, not skipped.
    pub fn list(&self, network: &str) -> Result<(Vec<Attachment>, Vec<Error>)> {
        let dir = self.network_dir(network)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
        };
        let mut found = Vec::new();
        let mut errors = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            let name = entry.file_name();
            if let Some(pid) = temp_file_pid(&name.to_string_lossy()) {
                if !pid_alive(pid) {
                    let _ = fs::remove_file(entry.path());
                }
                continue;
            }
            if !name.to_string_lossy().ends_with(".json") {
                continue;
            }
            match read_record(&entry.path()) {
                Ok(Some(a)) => found.push(a),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        found.sort_by_key(Attachment::id);
        Ok((found, errors))
    }

    /// Every attachment of every network (to find who holds a device), and the records that
    /// could not be read: a caller deciding what no one holds must count those as holding
    /// anything.
    pub fn list_all(&self) -> (Vec<Attachment>, Vec<Error>) {
        let mut all = Vec::new();
        let mut unreadable = Vec::new();
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (all, unreadable),
            Err(e) => {
                unreadable.push(Error::io(format!("listing {}", self.dir.display()), e));
                return (all, unreadable);
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "locks" || !entry.path().is_dir() {
                continue;
            }
            match self.list(&name) {
                Ok((atts, errors)) => {
                    all.extend(atts);
                    unreadable.extend(errors);
                }
                Err(e) => unreadable.push(e),
            }
        }
        (all, unreadable)
    }

    /// Checks the data dir is writable: creates and removes a probe file.
    pub fn probe_writable(&self) -> Result<()> {
        self.ensure_dir(None)?;
        let probe = self.dir.join(format!(".probe-{}", std::process::id()));
        write_atomic(&probe, b"ok", 0o600)
            .and_then(|_| fs::remove_file(&probe))
            .map_err(|e| {
                Error::io(
                    format!("state directory {} is not writable", self.dir.display()),
                    e,
                )
            })
    }

    /// Takes the lock of `device_key`, waiting at most `timeout`; code 11 when it stays busy.
    pub fn lock_device(&self, device_key: &str, timeout: Duration) -> Result<DeviceLock> {
        safe_component("device key", device_key)?;
        let dir = self.ensure_dir(Some("locks"))?;
        let path = dir.join(bounded_file_name(device_key, ".lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| Error::io(format!("opening lock file {}", path.display()), e))?;
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            // LOCK_NB + bounded polling instead of a blocking flock: a stuck holder must turn into
            // "try again later" for the runtime, never into a hung pod start. Not nix's `Flock`:
            // it unlocks (LOCK_UN) on drop, which would also release the lock an IPAM plugin
            // inherited (`inherit_by_children`); closing the fd drops only this reference.
            let rc = unsafe {
                nix::libc::flock(file.as_raw_fd(), nix::libc::LOCK_EX | nix::libc::LOCK_NB)
            };
            if rc == 0 {
                return Ok(DeviceLock { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(nix::libc::EWOULDBLOCK) {
                return Err(Error::io(format!("locking {}", path.display()), err));
            }
            if Instant::now() >= deadline {
                return Err(Error::TryAgainLater(format!(
                    "device {device_key} is locked by another rdma-ns invocation for more than {} ms \
                     (lock file {}); retry, or find the stuck process with `fuser {}`",
                    timeout.as_millis(),
                    path.display(),
                    path.display()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

/// The longest file name written under the data dir: NAME_MAX (255) less what a temp file of
/// [`write_atomic`] adds (`.`, `.tmp-`, a pid of up to 7 digits).
const MAX_FILE_NAME: usize = 240;

/// `stem` + `suffix` when it fits in [`MAX_FILE_NAME`], else a prefix of `stem` and a hash of
/// all of it. The CNI spec puts no length limit on container IDs, and runtimes send 64-char
/// ones; a long one would fail every open(2) with ENAMETOOLONG and so every DEL forever.
/// Names that fit are the ones every earlier version wrote, so their records are still found;
/// the full ID is inside the record. FNV-1a, because the name must be the same for every
/// future binary (std's hasher promises no stable output).
fn bounded_file_name(stem: &str, suffix: &str) -> String {
    if stem.len() + suffix.len() <= MAX_FILE_NAME {
        return format!("{stem}{suffix}");
    }
    let hash = stem.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let keep = MAX_FILE_NAME - suffix.len() - 17;
    let mut cut = keep;
    while !stem.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}~{hash:016x}{suffix}", &stem[..cut])
}

/// The pid in a temp file name of [`write_atomic`] (`.<name>.tmp-<pid>`).
fn temp_file_pid(name: &str) -> Option<i32> {
    let (_, pid) = name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    pid.parse().ok()
}

fn pid_alive(pid: i32) -> bool {
    pid == std::process::id() as i32
        || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            != Err(nix::errno::Errno::ESRCH)
}

/// Temp files of `path` left by writers that are gone (a plugin killed mid-write).
fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        if !entry_name.starts_with(&prefix) {
            continue;
        }
        if temp_file_pid(&entry_name).is_some_and(|pid| !pid_alive(pid)) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// `dir` is a directory (with `follow` false, a real one, not a symlink) with no access for
/// group or others; wider modes are narrowed to 0700, with a warning.
fn private_dir(dir: &Path, follow: bool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = if follow {
        fs::metadata(dir)
    } else {
        fs::symlink_metadata(dir)
    }
    .map_err(|e| Error::io(format!("checking state directory {}", dir.display()), e))?;
    if !meta.file_type().is_dir() {
        return Err(Error::State(format!(
            "state directory {} is a symlink or not a directory; remove it, or set `dataDir` to a \
             real directory",
            dir.display()
        )));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        crate::log_warn!(
            "state directory {} had mode {mode:04o}; narrowing it to 0700",
            dir.display()
        );
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("narrowing {} to 0700", dir.display()), e))?;
    }
    Ok(())
}

/// Held while an attachment changes its device; released on drop (the fd closes) and when
/// every process that inherited it is gone.
#[derive(Debug)]
pub struct DeviceLock {
    _file: File,
}

impl DeviceLock {
    /// Clears FD_CLOEXEC, so processes spawned while the lock is held keep it locked for as
    /// long as they run: flock(2) locks belong to the open file, shared across fork and exec.
    pub fn inherit_by_children(&self) -> io::Result<()> {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        fcntl(&self._file, FcntlArg::F_SETFD(FdFlag::empty()))
            .map(drop)
            .map_err(io::Error::from)
    }
}

fn read_record(path: &Path) -> Result<Option<Attachment>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                format!("reading state file {}", path.display()),
                e,
            ))
        }
    };
    let wire = match serde_json::from_slice::<RecordWire>(&bytes) {
        Ok(wire) => wire,
        Err(whole) => {
            // One document per line: the last that reads is the current state. A torn or lost
            // tail (an unsynced final line after a crash) leaves the durable intent line before
            // it.
            bytes
                .split(|&b| b == b'\n')
                .rev()
                .find_map(|line| serde_json::from_slice::<RecordWire>(line).ok())
                .ok_or_else(|| {
                    Error::State(format!(
                        "state file {} is corrupt ({whole}); inspect it, then remove it to let \
                         DEL proceed",
                        path.display()
                    ))
                })?
        }
    };
    // A well-formed line whose mode and fields disagree is no torn tail: no earlier line
    // stands in for it.
    Attachment::try_from(wire).map(Some).map_err(|e| {
        Error::State(format!(
            "state file {} is unusable: {e}; inspect it, then remove it to let DEL proceed \
             (what it attached must then be released by hand)",
            path.display()
        ))
    })
}

/// One record line: compact JSON (no newline inside) and a newline.
fn record_line(att: &Attachment) -> Result<Vec<u8>> {
    let mut line = serde_json::to_vec(&RecordWire::from(att))
        .map_err(|e| Error::State(format!("encoding state for {}: {e}", att.id())))?;
    line.push(b'\n');
    Ok(line)
}

/// Writes `path` atomically: a temp file in the same dir (never through a symlink), fsync,
/// rename over the target, fsync the directory. A crash leaves the old file or the new one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        // A temp file left by a killed run with a recycled pid is ours to replace.
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn sample() -> Attachment {
        Attachment {
            schema: SCHEMA,
            written_by: Some("0.1.0".into()),
            network: "rdma-net".into(),
            container_id: "abc123".into(),
            ifname: "net1".into(),
            pod: Some(PodRef {
                namespace: Some("default".into()),
                name: Some("trainer".into()),
                uid: None,
            }),
            phase: Phase::Ready,
            netns: "/run/netns/p1".into(),
            netns_id: Some(NetnsId {
                dev: 4,
                ino: 4026532801,
            }),
            device_key: "mac-02_00_00_00_00_01".into(),
            mode_state: ModeState::Move(MoveState {
                host: HostDevice {
                    name: "ens1f0v0".into(),
                    ifindex: 7,
                    mtu: 1500,
                    hwaddr: "02:00:00:00:00:01".into(),
                    perm_hwaddr: None,
                    pci: Some("0000:3b:00.2".into()),
                    was_up: true,
                    addresses: vec!["192.0.2.1/24".into()],
                },
                rdma: None,
                pod_interface: PodInterface {
                    ifindex: Some(7),
                    mtu: Some(9000),
                    ..PodInterface::default()
                },
            }),
            perm_changes: Vec::new(),
            device_info_file: None,
            device_id: Some("0".into()),
            conf: None,
            cni_path: Vec::new(),
        }
    }

    #[test]
    fn a_container_id_longer_than_a_file_name_still_saves_loads_and_removes() {
        let tmp = TempDir::new("state-long");
        let store = Store::new(tmp.path().join("data"));
        let mut att = sample();
        att.container_id = "c".repeat(300);
        store.save(&att).unwrap();
        let names: Vec<String> = fs::read_dir(tmp.path().join("data/rdma-net"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].len() <= MAX_FILE_NAME, "{}", names[0].len());
        assert!(names[0].ends_with(":net1.json"));
        let loaded = store
            .load("rdma-net", &att.container_id, "net1")
            .unwrap()
            .unwrap();
        assert_eq!(
            loaded.container_id, att.container_id,
            "the full ID is inside"
        );
        // Another long ID with the same prefix gets its own file.
        let mut other = att.clone();
        other.container_id = format!("{}d", "c".repeat(299));
        store.save(&other).unwrap();
        assert_eq!(
            fs::read_dir(tmp.path().join("data/rdma-net"))
                .unwrap()
                .count(),
            2
        );
        store.remove("rdma-net", &att.container_id, "net1").unwrap();
        store
            .remove("rdma-net", &other.container_id, "net1")
            .unwrap();
        assert_eq!(
            fs::read_dir(tmp.path().join("data/rdma-net"))
                .unwrap()
                .count(),
            0
        );
        // Names that fit keep the form every earlier version wrote.
        assert_eq!(bounded_file_name("abc", ":eth0.json"), "abc:eth0.json");
        let lock = store.lock_device(
            &format!("child-n-{}-net1", "x".repeat(300)),
            Duration::from_secs(1),
        );
        assert!(lock.is_ok(), "{lock:?}");
    }

    #[test]
    fn temp_files_of_killed_writers_are_removed_and_live_ones_kept() {
        let tmp = TempDir::new("state-temps");
        let store = Store::new(tmp.path().join("data"));
        let att = sample();
        store.save(&att).unwrap();
        let dir = tmp.path().join("data/rdma-net");
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let record = bounded_file_name(&att.container_id, ":net1.json");
        let stale = dir.join(format!(".{record}.tmp-{dead}"));
        let live = dir.join(format!(".{record}.tmp-{}", std::process::id()));
        let other_stale = dir.join(format!(".other:eth1.json.tmp-{dead}"));
        for f in [&stale, &live, &other_stale] {
            fs::write(f, b"{").unwrap();
        }
        // GC's listing removes every dead writer's temp file and skips them as records.
        let (found, errors) = store.list("rdma-net").unwrap();
        assert_eq!((found.len(), errors.len()), (1, 0));
        assert!(!other_stale.exists() && !stale.exists());
        assert!(live.exists(), "a running writer's temp file stays");
        fs::write(&stale, b"{").unwrap();
        store.remove("rdma-net", &att.container_id, "net1").unwrap();
        assert!(!stale.exists(), "DEL removes its record's stale temp file");
        assert!(live.exists());
    }

    #[test]
    fn symlinks_and_open_modes_under_the_data_dir_are_refused_or_narrowed() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = TempDir::new("state-links");
        let data = tmp.path().join("data");
        fs::create_dir_all(&data).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o777)).unwrap();
        let store = Store::new(&data);
        store.save(&sample()).unwrap();
        let mode = fs::metadata(&data).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "a 0777 data dir is narrowed");

        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, data.join("evil-net")).unwrap();
        let mut att = sample();
        att.network = "evil-net".into();
        let e = store.save(&att).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);

        let target = tmp.path().join("lock-target");
        std::os::unix::fs::symlink(&target, data.join("locks/dev-x.lock")).unwrap_or_else(|_| {
            fs::create_dir_all(data.join("locks")).unwrap();
            std::os::unix::fs::symlink(&target, data.join("locks/dev-x.lock")).unwrap()
        });
        assert!(store
            .lock_device("dev-x", Duration::from_millis(10))
            .is_err());
        assert!(
            !target.exists(),
            "the lock's symlink target was not created"
        );
        assert!(store
            .lock_device("dev-y", Duration::from_millis(10))
            .is_ok());
    }

    #[test]
    fn save_load_list_remove_round_trip_with_private_dirs() {
        let tmp = TempDir::new("state");
        let store = Store::new(tmp.path().join("data"));
        let att = sample();
        store.save(&att).unwrap();
        let back = store.load("rdma-net", "abc123", "net1").unwrap().unwrap();
        assert_eq!(back, att);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(tmp.path().join("data/rdma-net"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let (all, errs) = store.list("rdma-net").unwrap();
        assert_eq!(all.len(), 1);
        assert!(errs.is_empty());
        assert_eq!(store.list_all().0.len(), 1);
        store.remove("rdma-net", "abc123", "net1").unwrap();
        store.remove("rdma-net", "abc123", "net1").unwrap();
        assert!(store.load("rdma-net", "abc123", "net1").unwrap().is_none());
        let leftovers: Vec<_> = fs::read_dir(tmp.path().join("data/rdma-net"))
            .unwrap()
            .collect();
        assert!(leftovers.is_empty(), "no temp files left behind");
    }

    #[test]
    fn the_appended_final_state_wins_and_a_torn_tail_leaves_the_intent() {
        let tmp = TempDir::new("state-update");
        let store = Store::new(tmp.path());
        let mut att = sample();
        att.phase = Phase::Adding;
        att.moved_mut().unwrap().pod_interface.ifindex = None;
        store.save(&att).unwrap();
        let intent = att.clone();
        att.phase = Phase::Ready;
        att.moved_mut().unwrap().pod_interface.ifindex = Some(9);
        store.update(&att).unwrap();
        assert_eq!(store.load("rdma-net", "abc123", "net1").unwrap(), Some(att));

        // What a crash may leave of an unsynced append: part of the line, or zeros.
        let path = tmp.path().join("rdma-net/abc123:net1.json");
        let text = fs::read(&path).unwrap();
        let first = text.iter().position(|&b| b == b'\n').unwrap() + 1;
        for tail in [&text[first..text.len() - 20], &[0u8; 64][..]] {
            let mut torn = text[..first].to_vec();
            torn.extend_from_slice(tail);
            fs::write(&path, torn).unwrap();
            assert_eq!(
                store.load("rdma-net", "abc123", "net1").unwrap(),
                Some(intent.clone())
            );
        }

        // A record written by an earlier version: one pretty-printed document.
        fs::write(&path, serde_json::to_vec_pretty(&intent).unwrap()).unwrap();
        assert_eq!(
            store.load("rdma-net", "abc123", "net1").unwrap(),
            Some(intent.clone())
        );

        // No record to append to: written whole.
        store.remove("rdma-net", "abc123", "net1").unwrap();
        store.update(&intent).unwrap();
        assert_eq!(
            store.load("rdma-net", "abc123", "net1").unwrap(),
            Some(intent)
        );
    }

    #[test]
    fn names_cannot_escape_the_data_dir() {
        let tmp = TempDir::new("state-escape");
        let store = Store::new(tmp.path());
        assert!(store.load("..", "abc", "net1").is_err());
        assert!(store.load("net", "../x", "net1").is_err());
        assert!(store.load("net", "abc", "a/b").is_err());
        assert!(store.load("net", "a:b", "x").is_err());
        assert!(store.lock_device("../x", Duration::from_millis(1)).is_err());
    }

    #[test]
    fn corrupt_records_are_reported_with_their_path() {
        let tmp = TempDir::new("state-corrupt");
        let store = Store::new(tmp.path());
        store.ensure_dir(Some("n")).unwrap();
        fs::write(tmp.path().join("n/c:eth0.json"), b"{not json").unwrap();
        let err = store.load("n", "c", "eth0").unwrap_err();
        assert!(err.to_string().contains("c:eth0.json"), "{err}");
        let (ok, errs) = store.list("n").unwrap();
        assert!(ok.is_empty());
        assert_eq!(errs.len(), 1);
    }

    #[test]
    fn a_held_device_lock_times_out_with_code_11_and_frees_on_drop() {
        let tmp = TempDir::new("state-lock");
        let store = Store::new(tmp.path());
        let held = store
            .lock_device("pci-0000_3b_00.2", Duration::from_millis(10))
            .unwrap();
        let err = store
            .lock_device("pci-0000_3b_00.2", Duration::from_millis(30))
            .unwrap_err();
        assert_eq!(err.code(), 11, "{err}");
        // A different device is not blocked.
        store
            .lock_device("pci-0000_3b_00.3", Duration::from_millis(10))
            .unwrap();
        drop(held);
        store
            .lock_device("pci-0000_3b_00.2", Duration::from_millis(10))
            .unwrap();
    }

    /// The compatibility promise of CHANGELOG.md: records written by 0.1.0 (frozen copies under
    /// testdata/records-0.1.0, one per mode, as DEL finds them on a node upgraded while pods
    /// run) must load with every field DEL, CHECK and GC use. A renamed or removed field, or a
    /// new one without a default, fails here.
    #[test]
    fn records_written_by_0_1_0_still_load() {
        let store = Store::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/attach/testdata/records-0.1.0"
        ));
        let load = |net: &str, cid: &str| {
            store
                .load(net, cid, "net1")
                .unwrap_or_else(|e| panic!("{net}/{cid}: {e}"))
                .unwrap_or_else(|| panic!("{net}/{cid}: no record"))
        };

        let mv = load("rdma-move", "c0ffee01");
        assert_eq!(
            mv.phase,
            Phase::Ready,
            "the ready line, not the intent before it"
        );
        let moved = mv.moved().expect("mode move loads as a moved device");
        assert_eq!(
            (
                mv.mode().as_str(),
                moved.host.name.as_str(),
                moved.host.ifindex
            ),
            ("move", "ens1f0v0", 12)
        );
        assert_eq!(moved.host.perm_hwaddr.as_deref(), Some("02:00:00:00:3b:02"));
        assert_eq!(moved.host.pci.as_deref(), Some("0000:3b:00.2"));
        assert_eq!(mv.device_key, "pci-0000:3b:00.2");
        assert_eq!(
            moved.rdma.as_ref().map(|r| (r.ibdev.as_str(), r.index)),
            Some(("mlx5_2", 3))
        );
        assert_eq!(mv.ib_device(), moved.rdma.as_ref());
        let pod = &moved.pod_interface;
        assert_eq!((pod.ifindex, pod.mtu), (Some(12), Some(9000)));
        assert!(pod.ipam_result.is_some());
        assert_eq!(pod.gids.len(), 1);
        assert_eq!(
            (pod.gids[0].index, pod.gids[0].gid_type.as_str()),
            (3, "RoCE v2")
        );
        assert_eq!(pod.gid_view, Some(crate::attach::gids::GidView::Pod));
        assert_eq!(mv.perm_changes.len(), 1);
        assert_eq!(mv.perm_changes[0].rdev, (231, 194));
        assert_eq!(mv.perm_changes[0].old_mode, 0o600);
        assert!(mv.device_info_file.is_some());

        let mac = load("roce-shared", "c0ffee02");
        assert_eq!(mac.phase, Phase::Ready);
        let state = mac.child().expect("mode macvlan loads as a child");
        assert_eq!(
            (state.child.kind.as_str(), state.child.macvlan_mode),
            ("macvlan", Some(4))
        );
        assert_eq!(state.child.hwaddr.as_deref(), Some("02:5e:00:00:00:07"));
        assert_eq!(
            (state.parent.name.as_str(), state.parent.ifindex),
            ("ens1f0np0", 4)
        );
        assert_eq!(
            (state.pod_interface.ifindex, state.pod_interface.mtu),
            (Some(31), Some(9000))
        );
        assert_eq!(mac.gids()[0].index, 5);
        assert_eq!(mac.device_id.as_deref(), Some("0"));
        assert_eq!(
            state.pod_interface.gid_view,
            Some(crate::attach::gids::GidView::Host)
        );
        assert_eq!(mac.ib_device(), None);

        // One pretty-printed document, as the earliest builds wrote it.
        let ib = load("ib-partition", "c0ffee03");
        let state = ib.child().expect("mode ipoib loads as a child");
        let ipoib = state.child.ipoib.expect("ipoib");
        assert_eq!((ipoib.pkey, ipoib.mode), (Some(0x8001), Some(0)));
        assert_eq!(state.parent.name, "ibp94s0");
        assert_eq!(state.pod_interface.ifindex, Some(40));

        // A record without `host.addresses`: absent fields read as their default.
        let chained = load("sriov-rdma", "c0ffee04");
        assert_eq!(chained.mode(), crate::attach::config::Mode::Rdma);
        assert_eq!(
            (chained.schema, chained.netns_id),
            (1, None),
            "unversioned: schema 1"
        );
        let state = chained.chained().expect("mode rdma loads as chained");
        assert_eq!(state.function, "0000:3b:00.3");
        assert_eq!((state.rdma.ibdev.as_str(), state.rdma.index), ("mlx5_3", 4));
        assert_eq!(
            (state.prev_mac.as_deref(), state.prev_mtu),
            (Some("02:00:00:00:3b:03"), Some(1500))
        );
        assert_eq!(chained.pod_interface(), None);
        assert_eq!(chained.device_id.as_deref(), Some("0000:3b:00.3"));
    }

    /// The frozen schema-2 records under testdata/records-schema-2, one directory per case.
    fn schema_2_record(case: &str, file: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/attach/testdata/records-schema-2")
            .join(case)
            .join(file)
    }

    /// The on-disk format may not drift: records of every mode as ADD wrote them before the
    /// typed form (frozen under testdata/records-schema-2: intent, update and ready lines) load
    /// as their mode's state with their contents, and every line encodes back to the same
    /// bytes, so older binaries read what this one writes.
    #[test]
    fn records_of_schema_2_load_as_their_mode_and_save_byte_for_byte() {
        use crate::attach::config::Mode;
        use crate::attach::gids::GidView;
        let cases = [
            ("move", "c0ffee:net1.json", Mode::Move),
            ("move-exclusive-ib", "c9:net1.json", Mode::Move),
            ("macvlan", "c1:net1.json", Mode::Macvlan),
            ("ipoib", "c1:net1.json", Mode::Ipoib),
            ("chained-rdma", "c9:net1.json", Mode::Rdma),
        ];
        let tmp = TempDir::new("state-schema-2");
        let store = Store::new(tmp.path());
        let mut loaded = std::collections::HashMap::new();
        for (case, file, mode) in cases {
            let path = schema_2_record(case, file);
            let text = fs::read(&path).unwrap_or_else(|e| panic!("{case}: {e}"));
            let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
            assert!(lines.len() >= 2, "{case}: intent and ready lines");
            for line in &lines {
                let att: Attachment =
                    serde_json::from_slice(line).unwrap_or_else(|e| panic!("{case}: {e}"));
                assert_eq!(att.schema, SCHEMA, "{case}");
                assert_eq!(att.mode(), mode, "{case}: {:?}", att.mode_state);
                assert_eq!(
                    String::from_utf8(record_line(&att).unwrap()).unwrap(),
                    String::from_utf8(line.to_vec()).unwrap(),
                    "{case}: a line encodes back to itself"
                );
            }
            let att = read_record(&path).unwrap().unwrap();
            assert_eq!(att.phase, Phase::Ready, "{case}: the last line counts");
            store.save(&att).unwrap();
            let saved = fs::read(
                tmp.path()
                    .join(&att.network)
                    .join(format!("{}:{}.json", att.container_id, att.ifname)),
            )
            .unwrap();
            assert_eq!(
                String::from_utf8(saved).unwrap(),
                String::from_utf8(lines.last().unwrap().to_vec()).unwrap(),
                "{case}: saving the loaded record writes it back unchanged"
            );
            store
                .remove(&att.network, &att.container_id, &att.ifname)
                .unwrap();
            loaded.insert(case, att);
        }

        let mv = loaded["move"].moved().expect("a moved device");
        assert_eq!(
            (mv.host.name.as_str(), mv.host.ifindex, mv.host.mtu),
            ("ens1f0v0", 7, 1500)
        );
        assert_eq!(mv.host.addresses, vec!["192.0.2.7/24".to_string()]);
        assert_eq!(mv.rdma, None);
        assert_eq!(
            (mv.pod_interface.ifindex, mv.pod_interface.mtu),
            (Some(7), Some(9000))
        );
        assert!(mv.pod_interface.ipam_result.is_some());

        let ib = loaded["move-exclusive-ib"].moved().expect("a moved device");
        assert_eq!(
            ib.rdma
                .as_ref()
                .map(|r| (r.ibdev.as_str(), r.index, r.infiniband)),
            Some(("mlx5_0", 3, false))
        );
        assert_eq!(ib.pod_interface.gid_view, Some(GidView::Pod));
        assert!(ib.pod_interface.gids.is_empty());

        let mac = loaded["macvlan"].child().expect("a child");
        assert_eq!(
            (mac.child.kind.as_str(), mac.child.hwaddr.as_deref()),
            ("macvlan", Some("42:75:18:bf:af:c2"))
        );
        assert_eq!(
            (mac.parent.name.as_str(), mac.parent.ifindex),
            ("ens1f0np0", 4)
        );
        assert_eq!(
            (mac.pod_interface.ifindex, mac.pod_interface.mtu),
            (Some(5), Some(1500))
        );
        assert_eq!(mac.pod_interface.gids[0].index, 6);
        assert_eq!(mac.pod_interface.gid_view, Some(GidView::Host));

        let ipoib = loaded["ipoib"].child().expect("a child");
        assert_eq!(ipoib.child.kind, ChildKind::Ipoib);
        assert!(ipoib.child.ipoib.is_some());
        assert_eq!(
            (ipoib.parent.name.as_str(), ipoib.parent.ifindex),
            ("ib0", 5)
        );
        assert_eq!(
            (ipoib.pod_interface.ifindex, ipoib.pod_interface.mtu),
            (Some(6), Some(65520))
        );

        let chained = &loaded["chained-rdma"];
        let state = chained.chained().expect("a chained ib device");
        assert_eq!(state.function, "0000:3b:00.2");
        assert_eq!((state.rdma.ibdev.as_str(), state.rdma.index), ("mlx5_2", 9));
        assert_eq!(
            (state.prev_mac.as_deref(), state.prev_mtu),
            (Some("02:00:00:00:00:0a"), None),
            "prevResult gave a MAC and no MTU"
        );
        assert_eq!(chained.pod_interface(), None);
        assert!(chained.device_info_file.is_some());
        assert_eq!(chained.pci_function(), Some("0000:3b:00.2"));
    }

    /// A record whose mode and fields disagree names DEL nothing to release: it is refused,
    /// naming the file, the mode and the missing field, also when an intact intent line precedes
    /// it (that is no torn tail), and listed as unreadable, which keeps what it may hold (device
    /// permissions stay while any record is unreadable).
    #[test]
    fn a_record_whose_mode_lacks_its_fields_is_refused_naming_the_field() {
        let tmp = TempDir::new("state-mismatch");
        let store = Store::new(tmp.path());
        store.ensure_dir(Some("n")).unwrap();
        let path = tmp.path().join("n/c1:net1.json");
        let frozen = |case: &str, file: &str| -> Vec<serde_json::Value> {
            fs::read_to_string(schema_2_record(case, file))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        // The case, its frozen file, its mode, and the field taken out of its last line.
        let cases = [
            ("macvlan", "c1:net1.json", "macvlan", "child"),
            ("chained-rdma", "c9:net1.json", "rdma", "rdma"),
            ("chained-rdma", "c9:net1.json", "rdma", "host.pci"),
        ];
        for (case, file, mode, field) in cases {
            let lines = frozen(case, file);
            let (intent, mut last) = (lines[0].clone(), lines.last().unwrap().clone());
            let (outer, inner) = field.split_once('.').unwrap_or(("", field));
            let holder = if outer.is_empty() {
                &mut last
            } else {
                &mut last[outer]
            };
            assert!(holder.as_object_mut().unwrap().remove(inner).is_some());
            let field = &format!("`{field}`");
            let text = format!("{intent}\n{last}\n");
            fs::write(&path, text).unwrap();
            let err = store.load("n", "c1", "net1").unwrap_err();
            let msg = err.to_string();
            assert_eq!(err.code(), 106, "{msg}");
            for part in ["c1:net1.json", &format!("mode \"{mode}\""), field.as_str()] {
                assert!(msg.contains(part), "{case}: {part} missing from: {msg}");
            }
            let (held, unreadable) = store.list_all();
            assert_eq!((held.len(), unreadable.len()), (0, 1), "{case}");
            let direct = serde_json::from_value::<Attachment>(last).unwrap_err();
            assert!(direct.to_string().contains(field), "{direct}");
        }
        // The mode is read from the child's kind: a record where they disagree is refused too.
        let lines = frozen("macvlan", "c1:net1.json");
        let (intent, mut last) = (lines[0].clone(), lines.last().unwrap().clone());
        last["child"]["kind"] = "ipoib".into();
        fs::write(&path, format!("{intent}\n{last}\n")).unwrap();
        let err = store.load("n", "c1", "net1").unwrap_err();
        assert_eq!(err.code(), 106, "{err}");
        assert!(
            err.to_string()
                .contains(r#"a mode "macvlan" record holds a child of kind "ipoib""#),
            "{err}"
        );
        last["mode"] = "ipoib".into();
        fs::write(&path, format!("{intent}\n{last}\n")).unwrap();
        let att = store.load("n", "c1", "net1").unwrap().unwrap();
        assert_eq!(att.mode(), crate::attach::config::Mode::Ipoib);
    }
}
