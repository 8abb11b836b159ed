//! DRA claims prepared on this node: the records the driver (`rdma-ns-dra`) writes at
//! NodePrepareResources and the CNI reads at ADD, the key classes of a claim's config, and what
//! either side leaves for the other (a failed ADD, the status the driver wrote).
//!
//! Under the data dir's `_claims/` (`_` starts no network name, so no network's directory is
//! ever taken for it), per claim UID:
//! - `<uid>.json`: the prepared claim ([`PreparedClaim`]), written by prepare (and by the
//!   driver when the claim's `reservedFor` changes) under the claim's lock, removed by
//!   unprepare;
//! - `<uid>.add-error.json`: what a failed ADD of the claim's device left ([`AddFailure`]), for
//!   the claim's status; a later ADD that succeeds removes it;
//! - `<uid>.status.json`: which entries the driver wrote into the claim's `status.devices`
//!   ([`WrittenStatus`]), so that it clears them when the pod's attachment goes, even after
//!   unprepare removed `<uid>.json`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::records::atomic::{remove_stale_temps, temp_target, write_atomic};
use crate::records::lock::claim_lock_key;
use crate::records::store::{DeviceLock, Store};

/// The data dir's subdirectory of prepared claims.
pub const CLAIMS_DIR: &str = "_claims";

/// The prefix of the `k8s.cni.cncf.io/deviceID` attribute the driver publishes: Multus passes
/// the attribute's value to the CNI as `deviceID` (multus-cni#1492).
pub const DEVICE_ID_PREFIX: &str = "rdma-ns:";

/// The annotation of the claim the scheduler makes for a pod's extended resources backed by
/// DRA (k8s.io/api resource/v1 `ExtendedResourceClaimAnnotation`).
pub const EXTENDED_RESOURCE_CLAIM: &str = "resource.kubernetes.io/extended-resource-claim";

/// Who may set a key of the driver's opaque config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setter {
    /// A ResourceClaim's own config: any user who may write claims in a namespace.
    Claim,
    /// Only a DeviceClass's config, which cluster admins write: a key whose effect reaches
    /// beyond the claim's own pod (the node, the fabric, other pods).
    Class,
}

/// One key of the driver's opaque config: who may set it, and why (docs/dra.md's table, which a docs test keeps equal to [`CONFIG_KEYS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigKey {
    pub name: &'static str,
    pub setter: Setter,
    /// Whether it is an rdma-ns conf field the CNI applies (else the driver's own).
    pub attach: bool,
    pub why: &'static str,
}

/// Every key of the driver's opaque config (DeviceClass or ResourceClaim, driver
/// `rdma-ns.io`). The conf fields among them are how the device is attached, never where
/// records or logs go.
pub const CONFIG_KEYS: &[ConfigKey] = &[
    key("mode", Setter::Class, true, "how the node's device is taken: `move` takes the whole netdev (and in exclusive netns mode its ib device) from the host"),
    key("softRoce", Setter::Class, true, "makes a Soft-RoCE ib device on the node, which in shared netns mode every pod's netns sees"),
    key("macvlanMode", Setter::Class, true, "`passthru` takes the parent netdev over for one pod; the others change how every pod's children on the port reach each other"),
    key("pkey", Setter::Class, true, "joins an InfiniBand partition, the fabric's isolation boundary"),
    key("devicePermissions", Setter::Class, true, "changes the modes of node-wide char devices (`rdma_cm` is one for every pod of the node)"),
    key("umad", Setter::Class, false, "puts the port's umad and issm nodes in the pod: raw management datagrams reach the subnet manager and can reconfigure the fabric"),
    key("mtu", Setter::Claim, true, "the pod interface's own MTU (a child's is bounded by its parent's; a moved netdev's is restored at DEL)"),
    key("rdma", Setter::Claim, true, "whether the claim's own whole device takes its ib device along (move mode)"),
    key("ipoibMode", Setter::Claim, true, "datagram or connected mode of the pod's own IPoIB child"),
    key("umcast", Setter::Claim, true, "user-level multicast on the pod's own IPoIB child"),
    key("rail", Setter::Claim, true, "routing tables, rules and sysctls inside the pod's own netns"),
];

const fn key(name: &'static str, setter: Setter, attach: bool, why: &'static str) -> ConfigKey {
    ConfigKey {
        name,
        setter,
        attach,
        why,
    }
}

/// The config key `name`, if the driver knows it.
pub fn config_key(name: &str) -> Option<&'static ConfigKey> {
    CONFIG_KEYS.iter().find(|k| k.name == name)
}

/// Whether `name` is a conf field a claim's device may carry to the CNI.
pub fn is_attach_field(name: &str) -> bool {
    config_key(name).is_some_and(|k| k.attach)
}

/// A ResourceClaim by namespace, name and UID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// One device of a prepared claim: what the scheduler allocated and what it is on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    /// The claim's request this device was allocated for.
    pub request: String,
    pub pool: String,
    /// The device's name in the ResourceSlice.
    pub device: String,
    /// The allocation's share of a device that allows several (consumable capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// `roce`, `ipoib` or `soft-roce`.
    pub kind: String,
    /// The host netdev the attachment starts from (moved, or the parent of a child).
    pub netdev: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ibdev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// The device-lock key the CNI takes for this device (records::lock::device_key).
    pub lock_key: String,
    /// The CDI device IDs the kubelet passes to the runtime.
    #[serde(default)]
    pub cdi_device_ids: Vec<String>,
    /// Conf fields the attachment gets (class config, then claim config).
    #[serde(default)]
    pub attach: serde_json::Map<String, serde_json::Value>,
    /// Whether the port's umad and issm nodes go to the containers (config `umad`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub umad: bool,
    /// The device's rail (the driver's `rails`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<String>,
    /// What each pod attached to the device reported for its containers (records/cdi.rs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<crate::records::cdi::PodReport>,
}

impl PreparedDevice {
    /// Whether `dra` names this device of the claim (the same share of it).
    pub fn is(&self, dra: &DraDevice) -> bool {
        self.device == dra.device && self.request == dra.request && self.share_id == dra.share_id
    }
}

/// A claim prepared on this node: the record NodePrepareResources writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedClaim {
    pub claim: ClaimRef,
    /// The pods the claim is reserved for (`status.reservedFor`): at prepare, then as the
    /// driver sees the claim change (a pod that shares the claim is added to it without a
    /// prepare).
    #[serde(default)]
    pub pod_uids: Vec<String>,
    /// The scheduler made the claim for a pod's extended resources (a DeviceClass's
    /// `extendedResourceName`, annotation [`EXTENDED_RESOURCE_CLAIM`]): the pod was written for
    /// a device plugin, and its networks name no claim.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub extended_resource: bool,
    pub devices: Vec<PreparedDevice>,
    /// What the claim's allocation was when it was prepared (its results and config, this
    /// driver's): a second prepare of the same allocation answers from the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub allocation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
}

impl PreparedClaim {
    /// The device of this claim `dra` names.
    pub fn device(&self, dra: &DraDevice) -> Option<&PreparedDevice> {
        self.devices.iter().find(|d| d.is(dra))
    }
}

/// What a failed ADD of a claim's device left for the driver to show on the claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddFailure {
    pub container_id: String,
    pub ifname: String,
    pub device: String,
    pub code: u32,
    pub message: String,
}

/// The device an ADD attaches, named to the selectors in the conf as `draDevice`, and kept in
/// the attachment record's conf: how the driver ties an attachment to its claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DraDevice {
    pub claim: ClaimRef,
    pub request: String,
    pub pool: String,
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    pub netdev: String,
}

impl DraDevice {
    /// The claim device an attachment record's conf names (`draDevice`).
    pub fn of_record(conf: Option<&serde_json::Value>) -> Option<DraDevice> {
        serde_json::from_value(conf?.get("draDevice")?.clone()).ok()
    }
}

/// A status entry's identity: the device (and share) it is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusEntry {
    pub pool: String,
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
}

/// The entries the driver wrote into a claim's `status.devices`, kept until it cleared them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WrittenStatus {
    pub claim: ClaimRef,
    pub entries: Vec<StatusEntry>,
}

/// Whether `name`, a file in the claims dir, is the driver's note of a status it wrote, or a
/// temp file of one: only the driver writes those.
pub fn is_status_note(name: &str) -> bool {
    temp_target(name).unwrap_or(name).ends_with(STATUS_SUFFIX)
}

/// How long a claim's lock is waited for.
pub const CLAIM_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The prepared claims of a data dir.
#[derive(Debug, Clone)]
pub struct ClaimStore {
    dir: PathBuf,
}

const RECORD_SUFFIX: &str = ".json";
const ADD_ERROR_SUFFIX: &str = ".add-error.json";
const STATUS_SUFFIX: &str = ".status.json";

impl ClaimStore {
    /// The claims under data dir `data_dir`.
    pub fn new(data_dir: &Path) -> ClaimStore {
        ClaimStore {
            dir: data_dir.join(CLAIMS_DIR),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn data_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(Path::new("/"))
    }

    fn path(&self, uid: &str, suffix: &str) -> Result<PathBuf> {
        let plain = !uid.is_empty()
            && uid.len() <= 128
            && uid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !plain {
            return Err(Error::State(format!(
                "claim UID {uid:?} cannot name a file: want letters, digits, - and _"
            )));
        }
        Ok(self.dir.join(format!("{uid}{suffix}")))
    }

    /// Takes claim `uid`'s lock: held by prepare and unprepare, by the driver when it updates
    /// the record, and by the CNI while it changes the claim's CDI edits.
    pub fn lock(&self, uid: &str) -> Result<DeviceLock> {
        self.path(uid, RECORD_SUFFIX)?;
        Store::<crate::records::attachment::RawMode>::new(self.data_dir())
            .lock_device(&claim_lock_key(uid), CLAIM_LOCK_TIMEOUT)
    }

    /// Writes `claim`'s record atomically and durably (the directory created 0700).
    pub fn save(&self, claim: &PreparedClaim) -> Result<()> {
        let path = self.path(&claim.claim.uid, RECORD_SUFFIX)?;
        self.write(&path, claim)
    }

    fn write<T: Serialize>(&self, path: &Path, value: &T) -> Result<()> {
        let what = || format!("writing {}", path.display());
        let bytes =
            serde_json::to_vec(value).map_err(|e| Error::State(format!("{}: {e}", what())))?;
        Store::<crate::records::attachment::RawMode>::new(self.data_dir())
            .ensure_dir(Some(CLAIMS_DIR))?;
        // A write killed mid-way left its temp file: the next write of the same file clears it.
        remove_stale_temps(path);
        write_atomic(path, &bytes, 0o600).map_err(|e| Error::io(what(), e))
    }

    fn remove_file(&self, uid: &str, suffix: &str) -> Result<()> {
        let path = self.path(uid, suffix)?;
        remove_stale_temps(&path);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing {}", path.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// The record of claim `uid`; None when it is not prepared.
    pub fn load(&self, uid: &str) -> Result<Option<PreparedClaim>> {
        read_json(&self.path(uid, RECORD_SUFFIX)?)
    }

    /// Removes claim `uid`'s record and what its ADDs left; gone already is no error. What
    /// the driver wrote into the claim's status stays known ([`Self::written_status`]) until
    /// the driver cleared it.
    pub fn remove(&self, uid: &str) -> Result<()> {
        self.remove_file(uid, RECORD_SUFFIX)?;
        self.remove_file(uid, ADD_ERROR_SUFFIX)
    }

    /// Every prepared claim, and the records that could not be read.
    pub fn list(&self) -> (Vec<PreparedClaim>, Vec<Error>) {
        let mut claims = Vec::new();
        let mut errors = Vec::new();
        for name in self.names(&mut errors) {
            let Some(uid) = name.strip_suffix(RECORD_SUFFIX) else {
                continue;
            };
            if uid.contains('.') {
                continue;
            }
            match read_json::<PreparedClaim>(&self.dir.join(&name)) {
                Ok(Some(c)) => claims.push(c),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        (claims, errors)
    }

    /// The file names of the directory, skipping temp files.
    fn names(&self, errors: &mut Vec<Error>) -> Vec<String> {
        match crate::kernel::sysfs::list_names(&self.dir) {
            Ok(n) => n.into_iter().filter(|n| !n.starts_with('.')).collect(),
            Err(e) => {
                errors.push(Error::io(format!("listing {}", self.dir.display()), e));
                Vec::new()
            }
        }
    }

    /// Records the failure of an ADD of claim `uid`'s device, for the driver's status.
    pub fn record_add_failure(&self, uid: &str, failure: &AddFailure) -> Result<()> {
        let path = self.path(uid, ADD_ERROR_SUFFIX)?;
        self.write(&path, failure)
    }

    /// Clears a recorded ADD failure of claim `uid` (an ADD that succeeded since).
    pub fn clear_add_failure(&self, uid: &str) -> Result<()> {
        self.remove_file(uid, ADD_ERROR_SUFFIX)
    }

    /// The failure recorded for claim `uid`, if any.
    pub fn add_failure(&self, uid: &str) -> Result<Option<AddFailure>> {
        read_json(&self.path(uid, ADD_ERROR_SUFFIX)?)
    }

    /// Notes, durably, the entries the driver is about to write into a claim's status.
    pub fn note_written_status(&self, written: &WrittenStatus) -> Result<()> {
        let path = self.path(&written.claim.uid, STATUS_SUFFIX)?;
        self.write(&path, written)
    }

    /// Forgets what the driver wrote into claim `uid`'s status (cleared, or the claim is gone).
    pub fn forget_written_status(&self, uid: &str) -> Result<()> {
        self.remove_file(uid, STATUS_SUFFIX)
    }

    /// Every claim whose status holds entries the driver wrote and has not cleared.
    pub fn written_statuses(&self) -> (Vec<WrittenStatus>, Vec<Error>) {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for name in self.names(&mut errors) {
            if name.ends_with(STATUS_SUFFIX) {
                match read_json::<WrittenStatus>(&self.dir.join(&name)) {
                    Ok(Some(w)) => out.push(w),
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
            }
        }
        (out, errors)
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::State(format!(
                "prepared-claim record {} is unreadable: {e}; the driver rewrites it on the \
                 kubelet's next NodePrepareResources",
                path.display()
            ))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}
