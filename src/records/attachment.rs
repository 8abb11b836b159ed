//! The attachment record: what DEL, CHECK and GC need of one attachment without prevResult, in
//! its typed form (the fields every mode records, then its mode's own state) and its on-disk form.
//!
//! On disk a record is the flat [`RecordWire`] document every release since 0.1.0 writes and
//! reads, one JSON document per line (see store.rs for how the lines are written): older
//! binaries must still read records written now (a node rolled back can DEL what this binary
//! attached) and this one theirs, so the typed form is converted to and from that layout
//! instead of changing it. The mode's part of that layout is [`ModeWire`].
//!
//! The mode's state is a type parameter: the CNI reads records as its modes' closed enum
//! (`attach::modes::ModeState`, which implements [`RecordedMode`]), while readers that act on
//! no mode (the DRA driver's status, the sweep of lock files) read them as [`RawMode`], the
//! wire fields as they are. So this module names no mode, and the modes import it, never the
//! reverse.

use serde::{Deserialize, Serialize};

mod fields;

pub use fields::*;

/// The record format written now. 2: `schema`, `writtenBy`, `pod`, `netnsId`, `deviceId`,
/// `conf`, `cniPath`.
pub const SCHEMA: u32 = 2;

/// What a mode's record state tells the parts every mode shares. Each mode's state implements
/// it beside its own type (attach/modes/<mode>.rs), and [`RawMode`] for the wire as it is.
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

/// A record's whole mode part: which mode, and its state. Decoded from the wire by mode name.
pub trait RecordedMode: Sized {
    /// The conf's `mode` value the record holds.
    fn name(&self) -> &str;

    /// The state of mode `mode` from its fields of a record; a field it always writes and the
    /// record lacks, or a mode this reader does not know, is a mismatch.
    fn from_wire(mode: &str, wire: ModeWire) -> Result<Self, RecordMismatch>;

    fn record(&self) -> &dyn ModeRecord;

    fn record_mut(&mut self) -> &mut dyn ModeRecord;
}

/// One attachment: everything DEL, CHECK and GC need without prevResult. What every mode
/// records is here; what one mode has (a moved host device, a child and its parent, a chained
/// ib device) is its state `M`, so a record cannot hold what its mode never writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment<M = RawMode> {
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
    /// What this mode attached; the mode itself is read from it, so the two cannot disagree.
    pub mode_state: M,
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

/// An attachment record as it is on disk: the flat layout of every release since 0.1.0 (field
/// names, order, optional fields and defaults unchanged; see the module doc for why).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordWire {
    #[serde(default = "schema_of_unversioned")]
    schema: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    written_by: Option<String>,
    network: String,
    container_id: String,
    ifname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<PodRef>,
    mode: String,
    phase: Phase,
    netns: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns_id: Option<NetnsId>,
    device_key: String,
    #[serde(flatten)]
    pub mode_fields: ModeWire,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    pub child: Option<ChildRecord>,
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
    /// A mode this binary does not know (a newer release's).
    #[error("unknown variant `{mode}`, expected one of {known}")]
    UnknownMode { mode: String, known: String },
}

impl<M: RecordedMode> TryFrom<RecordWire> for Attachment<M> {
    type Error = RecordMismatch;

    fn try_from(w: RecordWire) -> std::result::Result<Attachment<M>, RecordMismatch> {
        Ok(Attachment {
            mode_state: M::from_wire(&w.mode, w.mode_fields)?,
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

impl<M: RecordedMode> From<&Attachment<M>> for RecordWire {
    fn from(a: &Attachment<M>) -> RecordWire {
        RecordWire {
            schema: a.schema,
            written_by: a.written_by.clone(),
            network: a.network.clone(),
            container_id: a.container_id.clone(),
            ifname: a.ifname.clone(),
            pod: a.pod.clone(),
            mode: a.mode_state.name().to_string(),
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

impl<M: RecordedMode> Serialize for Attachment<M> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RecordWire::from(self).serialize(s)
    }
}

impl<'de, M: RecordedMode> Deserialize<'de> for Attachment<M> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = RecordWire::deserialize(d)?;
        Attachment::try_from(wire).map_err(serde::de::Error::custom)
    }
}

fn schema_of_unversioned() -> u32 {
    1
}

/// Why the bytes of a record file make no attachment.
#[derive(Debug)]
pub enum Unreadable {
    /// No line reads as a record (the error is the whole file's).
    Corrupt(serde_json::Error),
    /// The last line that reads names a mode whose fields it lacks.
    Mismatch(RecordMismatch),
}

impl<M: RecordedMode> Attachment<M> {
    /// The current state in the bytes of a record file: the last line that reads. A torn or
    /// lost tail (an unsynced final line after a crash) leaves the durable intent line before
    /// it; a file of one pretty-printed document (the earliest builds) reads whole.
    pub fn from_record_file(bytes: &[u8]) -> std::result::Result<Attachment<M>, Unreadable> {
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

    /// The conf's mode when ADD ran, by name.
    pub fn mode_name(&self) -> &str {
        self.mode_state.name()
    }

    pub fn id(&self) -> String {
        format!("{}:{}", self.container_id, self.ifname)
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

    /// The pod's own Soft-RoCE device, when the Soft-RoCE step made one.
    pub fn soft_roce(&self) -> Option<SoftRoceRecord> {
        self.steps.get(SOFT_ROCE_STEP).ok().flatten()
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

/// A record's mode part as the wire holds it, for readers that act on no mode (the DRA
/// driver's status, the sweep of lock files): any mode name reads, and the fields are kept
/// as they are, so writing it back writes what was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMode {
    pub mode: String,
    pub wire: ModeWire,
    /// The pod interface's fields of the wire, taken out of it.
    pub pod: PodInterface,
}

impl RawMode {
    /// The pod interface's hardware address: a child's, else the host device's (a moved
    /// netdev keeps its address in the pod).
    pub fn pod_hwaddr(&self) -> Option<&str> {
        self.wire
            .child
            .as_ref()
            .and_then(|c| c.hwaddr.as_deref())
            .or(Some(self.wire.host.hwaddr.as_str()))
            .filter(|a| !a.is_empty())
    }
}

impl RecordedMode for RawMode {
    fn name(&self) -> &str {
        &self.mode
    }

    fn from_wire(mode: &str, mut wire: ModeWire) -> Result<RawMode, RecordMismatch> {
        let pod = wire.take_pod_interface();
        Ok(RawMode {
            mode: mode.to_string(),
            wire,
            pod,
        })
    }

    fn record(&self) -> &dyn ModeRecord {
        self
    }

    fn record_mut(&mut self) -> &mut dyn ModeRecord {
        self
    }
}

impl ModeRecord for RawMode {
    fn to_wire(&self, _ifname: &str) -> ModeWire {
        let mut wire = self.wire.clone();
        let pod = self.pod.clone();
        wire.pod_ifindex = pod.ifindex;
        wire.pod_mtu = pod.mtu;
        wire.ipam_result = pod.ipam_result;
        wire.gids = pod.gids;
        wire.gid_view = pod.gid_view;
        wire
    }

    fn pod_interface(&self) -> Option<&PodInterface> {
        Some(&self.pod)
    }

    fn pod_interface_mut(&mut self) -> Option<&mut PodInterface> {
        Some(&mut self.pod)
    }

    fn ib_device(&self) -> Option<&RdmaRecord> {
        self.wire.rdma.as_ref()
    }

    fn host_side(&self) -> HostSide<'_> {
        self.wire.host.side()
    }

    fn listed_device(&self) -> String {
        self.wire.host.name.clone()
    }
}
