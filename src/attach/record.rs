//! The attachment record: what DEL, CHECK and GC need of one attachment without prevResult, in
//! its typed form (the fields every mode records, then its mode's own state) and its on-disk form.
//!
//! On disk a record is the flat [`RecordWire`] document every release since 0.1.0 writes and
//! reads, one JSON document per line (see store.rs for how the lines are written): older
//! binaries must still read records written now (a node rolled back can DEL what this binary
//! attached) and this one theirs, so the typed form is converted to and from that layout
//! instead of changing it. The mode's part of that layout is [`ModeWire`]: each mode converts
//! its state to and from it (modes/<mode>.rs), so this file names no mode. Records written by
//! earlier versions (one pretty-printed document) read as before.

use std::any::Any;

use serde::{Deserialize, Serialize};

use crate::attach::gids::{GidRecord, GidView};
use crate::attach::ib_device::RdmaRecord;
use crate::attach::modes::{Mode, ModeState};
use crate::attach::permissions::PermChange;

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

/// One attachment: everything DEL, CHECK and GC need without prevResult. What every mode
/// records is here; what one mode has (a moved host device, a child and its parent, a chained
/// ib device) is its [`ModeState`], so a record cannot hold what its mode never writes.
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
    pub perm_changes: Vec<PermChange>,
    /// The NPWG device-info file written (runtimeConfig.CNIDeviceInfoFile), removed on release.
    pub device_info_file: Option<String>,
    /// The device plugin's ID as Multus passed it (`runtimeConfig.deviceID`, `deviceID` or
    /// `pciBusID`), also when it selected nothing (a shared device plugin's index).
    pub device_id: Option<String>,
    /// The network configuration ADD got (IPAM included) and its CNI_PATH: what a DEL needs
    /// when no runtime will send one (`rdma-ns reconcile`).
    pub conf: Option<serde_json::Value>,
    pub cni_path: Vec<String>,
    /// What steps newer than the flat layout recorded, each under its own key.
    pub steps: StepRecords,
}

/// What the steps of an ADD recorded beyond the flat layout's fields (`steps` on disk, left out
/// when empty): each step's record under a key of its own, so a new step (steps.rs) records
/// what it must release without a new field here. Releases that predate a step ignore its key,
/// as they ignore any field they do not know.
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

/// What a mode's record state tells the parts every mode shares. Each mode's state implements
/// it beside its own type (modes/<mode>.rs).
pub trait ModeRecord {
    /// The mode's fields of the flat on-disk record; `ifname` is the attachment's.
    fn to_wire(&self, ifname: &str) -> ModeWire;

    /// The pod interface this plugin made, in the modes that make one.
    fn pod_interface(&self) -> Option<&PodInterface>;

    fn pod_interface_mut(&mut self) -> Option<&mut PodInterface>;

    /// The ib device that went into the pod with the attachment, if one did.
    fn ib_device(&self) -> Option<&RdmaRecord>;

    /// The host-side device.
    fn host_side(&self) -> HostSide<'_>;

    /// The host-side device as `rdma-ns list` shows it.
    fn listed_device(&self) -> String;
}

/// An attachment record as it is on disk: the flat layout of every release since 0.1.0 (field
/// names, order, optional fields and defaults unchanged; see the module doc for why).
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
    mode: Mode,
    phase: Phase,
    netns: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns_id: Option<NetnsId>,
    device_key: String,
    #[serde(flatten)]
    mode_fields: ModeWire,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    perm_changes: Vec<PermChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_info_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conf: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cni_path: Vec<String>,
    #[serde(default, skip_serializing_if = "StepRecords::is_empty")]
    steps: StepRecords,
}

/// The fields of the flat layout a mode's state is written in, where they stand in it (between
/// `deviceKey` and `permChanges`). Every mode fills `host` (every release requires it); the
/// others are optional. A mode with state the legacy fields cannot hold keeps it in `own`,
/// under keys of its own; a mode ignores the fields it never writes, as older releases did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeWire {
    /// Move: the moved device; child modes: the parent; chained: the pod interface as
    /// prevResult named it and its PCI function.
    pub host: HostDevice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ifindex: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam_result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<crate::attach::modes::child::ChildRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<RdmaRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gids: Vec<GidRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_view: Option<GidView>,
    /// Every other field of the record: a mode newer than the flat layout reads its own here.
    #[serde(flatten)]
    pub own: serde_json::Map<String, serde_json::Value>,
}

impl ModeWire {
    /// The fields of `host` and, for a mode that made one, its pod interface.
    pub fn new(host: HostDevice, pod: Option<&PodInterface>) -> ModeWire {
        let pod = pod.cloned().unwrap_or_default();
        ModeWire {
            host,
            pod_ifindex: pod.ifindex,
            pod_mtu: pod.mtu,
            ipam_result: pod.ipam_result,
            child: None,
            rdma: None,
            gids: pod.gids,
            gid_view: pod.gid_view,
            own: serde_json::Map::new(),
        }
    }

    /// Mode `mode`'s own field `key` (see `own`), decoded; None when the record has none.
    pub fn own_field<T: serde::de::DeserializeOwned>(
        &self,
        mode: &'static str,
        key: &str,
    ) -> std::result::Result<Option<T>, RecordMismatch> {
        self.own
            .get(key)
            .map(|v| serde_json::from_value(v.clone()))
            .transpose()
            .map_err(|e| RecordMismatch::Own {
                mode,
                error: format!("`{key}`: {e}"),
            })
    }

    /// The pod interface's fields, taken out.
    pub fn take_pod_interface(&mut self) -> PodInterface {
        PodInterface {
            ifindex: self.pod_ifindex.take(),
            mtu: self.pod_mtu.take(),
            ipam_result: self.ipam_result.take(),
            gids: std::mem::take(&mut self.gids),
            gid_view: self.gid_view.take(),
        }
    }
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
    /// A mode's own fields (`ModeWire::own`) that do not decode.
    #[error("a mode \"{mode}\" record has unreadable fields of its own: {error}")]
    Own { mode: &'static str, error: String },
}

impl TryFrom<RecordWire> for Attachment {
    type Error = RecordMismatch;

    fn try_from(w: RecordWire) -> std::result::Result<Attachment, RecordMismatch> {
        Ok(Attachment {
            mode_state: w.mode.state_from_wire(w.mode_fields)?,
            schema: w.schema,
            written_by: w.written_by,
            network: w.network,
            container_id: w.container_id,
            ifname: w.ifname,
            pod: w.pod,
            phase: w.phase,
            netns: w.netns,
            netns_id: w.netns_id,
            device_key: w.device_key,
            perm_changes: w.perm_changes,
            device_info_file: w.device_info_file,
            device_id: w.device_id,
            conf: w.conf,
            cni_path: w.cni_path,
            steps: w.steps,
        })
    }
}

impl From<&Attachment> for RecordWire {
    fn from(a: &Attachment) -> RecordWire {
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
            mode_fields: a.mode_state.record().to_wire(&a.ifname),
            perm_changes: a.perm_changes.clone(),
            device_info_file: a.device_info_file.clone(),
            device_id: a.device_id.clone(),
            conf: a.conf.clone(),
            cni_path: a.cni_path.clone(),
            steps: a.steps.clone(),
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

impl Attachment {
    /// A new attachment in phase `Adding`: who asked (network, container, interface), the pod
    /// netns, the device plugin's ID as given, and what the mode holds; nothing applied or found
    /// yet.
    pub fn adding(
        req: &crate::cni::Request,
        netns: &crate::kernel::Netns,
        device_key: String,
        mode_state: ModeState,
        device_id: Option<String>,
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
            device_id,
            steps: StepRecords::default(),
        }
    }

    /// The conf's mode when ADD ran: picks the driver that releases the attachment.
    pub fn mode(&self) -> Mode {
        self.mode_state.mode()
    }

    pub fn id(&self) -> String {
        format!("{}:{}", self.container_id, self.ifname)
    }

    /// The mode's state, as the type `T` its mode records (None for another mode's).
    pub fn state<T: Any>(&self) -> Option<&T> {
        self.mode_state.as_any().downcast_ref()
    }

    pub fn state_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.mode_state.as_any_mut().downcast_mut()
    }

    /// The pod interface this plugin made, in the modes that make one.
    pub fn pod_interface(&self) -> Option<&PodInterface> {
        self.mode_state.record().pod_interface()
    }

    pub fn pod_interface_mut(&mut self) -> Option<&mut PodInterface> {
        self.mode_state.record_mut().pod_interface_mut()
    }

    /// The recorded GIDs of the pod's addresses (none in chained mode: it sets no addresses).
    pub fn gids(&self) -> &[GidRecord] {
        self.pod_interface().map_or(&[], |p| p.gids.as_slice())
    }

    /// The ib device that went into the pod: a moved netdev's (exclusive netns mode), or a
    /// chained attachment's.
    pub fn ib_device(&self) -> Option<&RdmaRecord> {
        self.mode_state.record().ib_device()
    }

    /// The PCI function on the host side: the moved device's, a child's parent's, a chained
    /// VF's.
    pub fn pci_function(&self) -> Option<&str> {
        self.mode_state.record().host_side().pci
    }

    /// The netdev the attachment is about, as messages and listings name it: the moved
    /// device's or the parent's host name; in chained mode the pod interface (its host name
    /// was the previous plugin's business).
    pub fn netdev_name(&self) -> &str {
        self.mode_state
            .record()
            .host_side()
            .name
            .unwrap_or(&self.ifname)
    }

    /// Whether this is the attachment of `network`, `container_id` and `ifname`.
    pub fn is(&self, network: &str, container_id: &str, ifname: &str) -> bool {
        self.network == network && self.container_id == container_id && self.ifname == ifname
    }
}

/// Why the bytes of a record file make no attachment.
#[derive(Debug)]
pub enum Unreadable {
    /// No line reads as a record (the error is the whole file's).
    Corrupt(serde_json::Error),
    /// The last line that reads names a mode whose fields it lacks.
    Mismatch(RecordMismatch),
}

impl Attachment {
    /// The current state in the bytes of a record file: the last line that reads. A torn or
    /// lost tail (an unsynced final line after a crash) leaves the durable intent line before
    /// it; a file of one pretty-printed document (the earliest builds) reads whole.
    pub fn from_record_file(bytes: &[u8]) -> std::result::Result<Attachment, Unreadable> {
        let wire = match serde_json::from_slice::<RecordWire>(bytes) {
            Ok(wire) => wire,
            Err(whole) => bytes
                .split(|&b| b == b'\n')
                .rev()
                .find_map(|line| serde_json::from_slice::<RecordWire>(line).ok())
                .ok_or(Unreadable::Corrupt(whole))?,
        };
        // A well-formed line whose mode and fields disagree is no torn tail: no earlier line
        // stands in for it.
        Attachment::try_from(wire).map_err(Unreadable::Mismatch)
    }

    /// One record line: compact JSON (no newline inside) and a newline.
    pub fn record_line(&self) -> serde_json::Result<Vec<u8>> {
        let mut line = serde_json::to_vec(&RecordWire::from(self))?;
        line.push(b'\n');
        Ok(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::gids::GidView;
    use crate::attach::modes::chained::ChainedState;
    use crate::attach::modes::child::{ChildKind, ChildState};
    use crate::attach::modes::move_dev::MoveState;
    use crate::attach::store::Store;
    use crate::testutil::TempDir;
    use std::fs;
    use std::path::{Path, PathBuf};

    /// A record under testdata/: `set` is `records-0.1.0` or `records-schema-2`.
    fn frozen(set: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/attach/testdata")
            .join(set)
    }

    /// The record of `container`:net1 of `network` in the store at `dir`.
    fn load(dir: &Path, network: &str, container: &str) -> Attachment {
        Store::new(dir)
            .load(network, container, "net1")
            .unwrap_or_else(|e| panic!("{network}/{container}: {e}"))
            .unwrap_or_else(|| panic!("{network}/{container}: no record"))
    }

    /// A child's parent (name, ifindex) and its pod interface (ifindex, MTU).
    fn assert_child(
        state: &ChildState,
        parent: (&str, u32),
        pod: (Option<u32>, Option<u32>),
        case: &str,
    ) {
        assert_eq!(
            (state.parent.name.as_str(), state.parent.ifindex),
            parent,
            "{case}"
        );
        let p = &state.pod_interface;
        assert_eq!((p.ifindex, p.mtu), pod, "{case}");
    }

    /// The compatibility promise of CHANGELOG.md: records written by 0.1.0 (frozen copies under
    /// testdata/records-0.1.0, one per mode, as DEL finds them on a node upgraded while pods
    /// run) must load with every field DEL, CHECK and GC use. A renamed or removed field, or a
    /// new one without a default, fails here.
    #[test]
    fn records_written_by_0_1_0_still_load() {
        let dir = frozen("records-0.1.0");
        moved_device_of_0_1_0(&load(&dir, "rdma-move", "c0ffee01"));
        macvlan_child_of_0_1_0(&load(&dir, "roce-shared", "c0ffee02"));
        // One pretty-printed document, as the earliest builds wrote it.
        let ib = load(&dir, "ib-partition", "c0ffee03");
        let state = ib
            .state::<ChildState>()
            .expect("mode ipoib loads as a child");
        let ipoib = state.child.ipoib.expect("ipoib");
        assert_eq!((ipoib.pkey, ipoib.mode), (Some(0x8001), Some(0)));
        assert_eq!(state.parent.name, "ibp94s0");
        assert_eq!(state.pod_interface.ifindex, Some(40));
        // A record without `host.addresses`: absent fields read as their default.
        chained_of_0_1_0(&load(&dir, "sriov-rdma", "c0ffee04"));
    }

    fn moved_device_of_0_1_0(mv: &Attachment) {
        assert_eq!(
            mv.phase,
            Phase::Ready,
            "the ready line, not the intent before it"
        );
        let moved = mv
            .state::<MoveState>()
            .expect("mode move loads as a moved device");
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
        assert_eq!(pod.gid_view, Some(GidView::Pod));
        assert_eq!(mv.perm_changes.len(), 1);
        assert_eq!(mv.perm_changes[0].rdev, (231, 194));
        assert_eq!(mv.perm_changes[0].old_mode, 0o600);
        assert!(mv.device_info_file.is_some());
    }

    fn macvlan_child_of_0_1_0(mac: &Attachment) {
        assert_eq!(mac.phase, Phase::Ready);
        let state = mac
            .state::<ChildState>()
            .expect("mode macvlan loads as a child");
        assert_eq!(
            (state.child.kind.as_str(), state.child.macvlan_mode),
            ("macvlan", Some(4))
        );
        assert_eq!(state.child.hwaddr.as_deref(), Some("02:5e:00:00:00:07"));
        assert_child(state, ("ens1f0np0", 4), (Some(31), Some(9000)), "0.1.0");
        assert_eq!(mac.gids()[0].index, 5);
        assert_eq!(mac.device_id.as_deref(), Some("0"));
        assert_eq!(state.pod_interface.gid_view, Some(GidView::Host));
        assert_eq!(mac.ib_device(), None);
    }

    fn chained_of_0_1_0(chained: &Attachment) {
        assert_eq!(chained.mode(), Mode::Rdma);
        assert_eq!(
            (chained.schema, chained.netns_id),
            (1, None),
            "unversioned: schema 1"
        );
        let state = chained
            .state::<ChainedState>()
            .expect("mode rdma loads as chained");
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
        frozen("records-schema-2").join(case).join(file)
    }

    /// Every line of a frozen record loads as `mode` and encodes back to its own bytes; the
    /// record (its last line) saved through the store is that line again. Returns the record.
    fn round_trip(store: &Store, case: &str, file: &str, mode: Mode) -> Attachment {
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
                String::from_utf8(att.record_line().unwrap()).unwrap(),
                String::from_utf8(line.to_vec()).unwrap(),
                "{case}: a line encodes back to itself"
            );
        }
        let att = Attachment::from_record_file(&text).unwrap();
        assert_eq!(att.phase, Phase::Ready, "{case}: the last line counts");
        store.save(&att).unwrap();
        let saved = fs::read(
            store
                .dir()
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
        att
    }

    /// The on-disk format may not drift: records of every mode as ADD wrote them before the
    /// typed form (frozen under testdata/records-schema-2: intent, update and ready lines) load
    /// as their mode's state with their contents, and every line encodes back to the same
    /// bytes, so older binaries read what this one writes.
    #[test]
    fn records_of_schema_2_load_as_their_mode_and_save_byte_for_byte() {
        let tmp = TempDir::new("state-schema-2");
        let store = Store::new(tmp.path());
        let trip = |case, file, mode| round_trip(&store, case, file, mode);
        moved_device_of_schema_2(&trip("move", "c0ffee:net1.json", Mode::Move));
        moved_ib_device_of_schema_2(&trip("move-exclusive-ib", "c9:net1.json", Mode::Move));
        children_of_schema_2(
            &trip("macvlan", "c1:net1.json", Mode::Macvlan),
            &trip("ipoib", "c1:net1.json", Mode::Ipoib),
        );
        chained_of_schema_2(&trip("chained-rdma", "c9:net1.json", Mode::Rdma));
    }

    fn moved_device_of_schema_2(att: &Attachment) {
        let mv = att.state::<MoveState>().expect("a moved device");
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
    }

    fn moved_ib_device_of_schema_2(att: &Attachment) {
        let ib = att.state::<MoveState>().expect("a moved device");
        assert_eq!(
            ib.rdma
                .as_ref()
                .map(|r| (r.ibdev.as_str(), r.index, r.infiniband)),
            Some(("mlx5_0", 3, false))
        );
        assert_eq!(ib.pod_interface.gid_view, Some(GidView::Pod));
        assert!(ib.pod_interface.gids.is_empty());
    }

    fn children_of_schema_2(macvlan: &Attachment, ipoib: &Attachment) {
        let mac = macvlan.state::<ChildState>().expect("a child");
        assert_eq!(
            (mac.child.kind.as_str(), mac.child.hwaddr.as_deref()),
            ("macvlan", Some("42:75:18:bf:af:c2"))
        );
        assert_child(mac, ("ens1f0np0", 4), (Some(5), Some(1500)), "macvlan");
        assert_eq!(mac.pod_interface.gids[0].index, 6);
        assert_eq!(mac.pod_interface.gid_view, Some(GidView::Host));

        let ib = ipoib.state::<ChildState>().expect("a child");
        assert_eq!(ib.child.kind, ChildKind::Ipoib);
        assert!(ib.child.ipoib.is_some());
        assert_child(ib, ("ib0", 5), (Some(6), Some(65520)), "ipoib");
    }

    fn chained_of_schema_2(chained: &Attachment) {
        let state = chained
            .state::<ChainedState>()
            .expect("a chained ib device");
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
    /// The first line of a frozen schema-2 record, as JSON.
    fn frozen_line(case: &str, file: &str) -> serde_json::Value {
        let text = fs::read_to_string(schema_2_record(case, file)).unwrap();
        serde_json::from_str(text.lines().next().unwrap()).unwrap()
    }

    /// What a mode or a step newer than the flat layout records goes under keys of its own: a
    /// mode's own fields reach its decoder in `ModeWire::own` and are written back where the
    /// mode's fields stand (before `permChanges`); a step's record round-trips under `steps`,
    /// which is left out when empty (the frozen records above hold none); and a mode that never
    /// wrote a field drops it, as older releases do.
    #[test]
    fn newer_modes_and_steps_record_under_keys_of_their_own() {
        let mut doc = frozen_line("macvlan", "c1:net1.json");
        doc["dummyLink"] = serde_json::json!({"ifindex": 9});
        doc["dummyPeer"] = serde_json::json!("not a link");
        let wire: RecordWire = serde_json::from_value(doc.clone()).unwrap();
        #[derive(Debug, PartialEq, Deserialize)]
        struct DummyLink {
            ifindex: u32,
        }
        let own = |key| wire.mode_fields.own_field::<DummyLink>("dummy", key);
        assert_eq!(own("dummyLink").unwrap(), Some(DummyLink { ifindex: 9 }));
        assert_eq!(own("rail").unwrap(), None);
        let e = own("dummyPeer").unwrap_err().to_string();
        assert!(
            e.contains("mode \"dummy\"") && e.contains("`dummyPeer`"),
            "{e}"
        );
        let text = serde_json::to_string(&wire).unwrap();
        let own = text.find("\"dummyLink\"").unwrap();
        assert!(own > text.find("\"child\"").unwrap(), "{text}");
        assert!(
            own < text.find("\"permChanges\"").unwrap_or(text.len()),
            "{text}"
        );

        let mut att: Attachment = serde_json::from_value(doc).unwrap();
        let line = String::from_utf8(att.record_line().unwrap()).unwrap();
        assert!(
            !line.contains("dummyLink"),
            "mode macvlan never wrote it: {line}"
        );
        assert!(
            att.steps.is_empty() && !line.contains("\"steps\""),
            "{line}"
        );

        let rxe = serde_json::json!({"ibdev": "rxe0", "index": 4});
        att.steps.set("softRoce", &rxe).unwrap();
        let line = att.record_line().unwrap();
        let written: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(written["steps"], serde_json::json!({ "softRoce": rxe }));
        let back = Attachment::from_record_file(&line).unwrap();
        assert_eq!(back, att);
        let got: Option<serde_json::Value> = back.steps.get("softRoce").unwrap();
        assert_eq!(got, Some(rxe));
        assert_eq!(back.steps.get::<serde_json::Value>("rail").unwrap(), None);
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
        assert_eq!(att.mode(), Mode::Ipoib);
    }
}
