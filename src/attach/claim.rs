//! DRA claims prepared on this node, as the driver (`rdma-ns-dra`, feature `dra`) records them
//! and the CNI reads them: the one format both sides share, with no dependency beyond serde.
//!
//! The driver's NodePrepareResources writes one record per claim under the data dir
//! (`_claims/<claim UID>.json`, beside the attachment records: `_` starts no network name, so
//! no network's directory is ever taken for it), atomically and under the claim's lock and the
//! lock of each device's key (the keys the CNI locks the same devices by); NodeUnprepareResources
//! removes it. The CNI, asked to attach a pod's claim (conf `dra`, or Multus passing a device's
//! `k8s.cni.cncf.io/deviceID`, `rdma-ns:<device>`), finds the one prepared device of the pod
//! (K8S_POD_UID in CNI_ARGS) here, applies the claim's attach settings (the mode and what the
//! DeviceClass or claim config says) over the conf, and names the device to the selectors
//! (`draDevice`, see select.rs). The driver learns of the ADD from the attachment record, whose
//! `conf.draDevice` names the claim; a failed ADD leaves `_claims/<claim UID>.add-error.json`.

pub mod pod_cdi;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cni::result::CniResult;
use crate::cni::{NetConf, Request};
use crate::error::{Error, Result};

/// The data dir's subdirectory of prepared claims.
pub const CLAIMS_DIR: &str = "_claims";

/// The prefix of the `k8s.cni.cncf.io/deviceID` attribute the driver publishes: Multus passes
/// the attribute's value to the CNI as `deviceID` (multus-cni#1492).
pub const DEVICE_ID_PREFIX: &str = "rdma-ns:";

/// The conf fields a claim's attach settings may set (from the DeviceClass's or the claim's
/// opaque config for the driver): how the device is attached, never where records or logs go.
pub const ATTACH_FIELDS: &[&str] = &[
    "mode",
    "softRoce",
    "mtu",
    "rdma",
    "macvlanMode",
    "pkey",
    "ipoibMode",
    "umcast",
    "rail",
    "devicePermissions",
];

/// The conf fields that name a device: a DRA network's device comes from its claim, so these
/// are refused beside it.
const STATIC_SELECTORS: &[&str] = &["device", "master", "hwaddr", "kernelpath", "rdmaDevice"];

/// A ResourceClaim by namespace, name and UID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The device-lock key the CNI takes for this device (`pci-…` or `mac-…`).
    pub lock_key: String,
    /// The CDI device IDs the kubelet passes to the runtime.
    #[serde(default)]
    pub cdi_device_ids: Vec<String>,
    /// Conf fields of [`ATTACH_FIELDS`] the attachment gets (class config, then claim config).
    #[serde(default)]
    pub attach: serde_json::Map<String, serde_json::Value>,
}

/// A claim prepared on this node: the record NodePrepareResources writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedClaim {
    pub claim: ClaimRef,
    /// The pods the claim is reserved for (`status.reservedFor`) when it was prepared.
    #[serde(default)]
    pub pod_uids: Vec<String>,
    pub devices: Vec<PreparedDevice>,
    /// The CDI spec file written for the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdi_spec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
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

/// The device an ADD attaches, named to the selectors in the conf as `draDevice`.
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

/// The lock key of claim `uid` (`locks/claim-<uid>.lock`), which the DRA driver holds while
/// it prepares or unprepares the claim.
pub fn claim_lock_key(uid: &str) -> String {
    format!("claim-{uid}")
}

/// The prepared claims of a data dir.
#[derive(Debug, Clone)]
pub struct ClaimStore {
    dir: PathBuf,
}

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

    /// Writes `claim`'s record atomically and durably (the directory created 0700).
    pub fn save(&self, claim: &PreparedClaim) -> Result<()> {
        let path = self.path(&claim.claim.uid, ".json")?;
        self.write(&path, claim)
    }

    fn write<T: Serialize>(&self, path: &Path, value: &T) -> Result<()> {
        let what = || format!("writing {}", path.display());
        let bytes =
            serde_json::to_vec(value).map_err(|e| Error::State(format!("{}: {e}", what())))?;
        let data_dir = self.dir.parent().unwrap_or(Path::new("/"));
        crate::attach::store::Store::new(data_dir).ensure_dir(Some(CLAIMS_DIR))?;
        // A write killed mid-way left its temp file: the next write of the same file clears it.
        crate::attach::store::remove_stale_temps(path);
        crate::attach::store::write_atomic(path, &bytes, 0o600).map_err(|e| Error::io(what(), e))
    }

    /// The record of claim `uid`; None when it is not prepared.
    pub fn load(&self, uid: &str) -> Result<Option<PreparedClaim>> {
        read_json(&self.path(uid, ".json")?)
    }

    /// Removes claim `uid`'s record and what its ADDs left; gone already is no error.
    pub fn remove(&self, uid: &str) -> Result<()> {
        for suffix in [".json", ADD_ERROR_SUFFIX] {
            let path = self.path(uid, suffix)?;
            crate::attach::store::remove_stale_temps(&path);
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(Error::io(format!("removing {}", path.display()), e))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every prepared claim, and the records that could not be read.
    pub fn list(&self) -> (Vec<PreparedClaim>, Vec<Error>) {
        let mut claims = Vec::new();
        let mut errors = Vec::new();
        let names = match crate::kernel::sysfs::list_names(&self.dir) {
            Ok(n) => n,
            Err(e) => {
                return (
                    claims,
                    vec![Error::io(format!("listing {}", self.dir.display()), e)],
                )
            }
        };
        for name in names {
            let is_claim = name.ends_with(".json") && !name.ends_with(ADD_ERROR_SUFFIX);
            if !is_claim || name.starts_with('.') {
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

    /// Records the failure of an ADD of claim `uid`'s device, for the driver's status.
    pub fn record_add_failure(&self, uid: &str, failure: &AddFailure) -> Result<()> {
        let path = self.path(uid, ADD_ERROR_SUFFIX)?;
        self.write(&path, failure)
    }

    /// Clears a recorded ADD failure of claim `uid` (an ADD that succeeded since).
    pub fn clear_add_failure(&self, uid: &str) -> Result<()> {
        let path = self.path(uid, ADD_ERROR_SUFFIX)?;
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing {}", path.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// The failure recorded for claim `uid`, if any.
    pub fn add_failure(&self, uid: &str) -> Result<Option<AddFailure>> {
        read_json(&self.path(uid, ADD_ERROR_SUFFIX)?)
    }
}

const ADD_ERROR_SUFFIX: &str = ".add-error.json";

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

/// What the conf asks of DRA: `dra` is true, or an object with
/// - `request`: the claim request whose device to take when the pod's claims hold several;
/// - `ifname`: the pod interface's name when rdma-ns runs chained after the pod's primary
///   plugin in the runtime's own conflist (no Multus: CNI_IFNAME is then the primary's, `eth0`);
/// - `optional`: a pod without a prepared claim passes through with the previous plugin's
///   result (every pod of the node runs that conflist, most without an RDMA claim).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DraConf {
    pub enabled: bool,
    pub request: Option<String>,
    pub ifname: Option<String>,
    pub optional: bool,
}

impl DraConf {
    pub fn from_conf(conf: &NetConf) -> Result<DraConf> {
        #[derive(Deserialize)]
        struct Fields {
            dra: Option<serde_json::Value>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Object {
            request: Option<String>,
            ifname: Option<String>,
            #[serde(default)]
            optional: bool,
        }
        let o = match conf.fields::<Fields>()?.dra {
            None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => {
                return Ok(DraConf::default())
            }
            Some(serde_json::Value::Bool(true)) => Object {
                request: None,
                ifname: None,
                optional: false,
            },
            Some(v @ serde_json::Value::Object(_)) => serde_json::from_value(v).map_err(|e| {
                Error::config(
                    "dra",
                    format!("{e}; want true or {{\"request\", \"ifname\", \"optional\"}}"),
                )
            })?,
            Some(other) => {
                return Err(Error::config(
                    "dra",
                    format!("{other} is neither true, false nor an object"),
                ))
            }
        };
        if let Some(name) = &o.ifname {
            let ok = !name.is_empty()
                && name.len() <= 15
                && !name.contains(['/', ':', '\0'])
                && !name.contains(char::is_whitespace)
                && name != "."
                && name != "..";
            if !ok {
                return Err(Error::config(
                    "dra.ifname",
                    format!("{name:?} is not a valid interface name (1 to 15 characters, no /, : or spaces)"),
                ));
            }
        }
        Ok(DraConf {
            enabled: true,
            request: o.request,
            ifname: o.ifname,
            optional: o.optional,
        })
    }
}

/// `req` for the pod interface `dra.ifname` names, when it names one (rdma-ns chained in the
/// runtime's conflist: CNI_IFNAME is the primary plugin's). Every command goes through it, so
/// ADD, CHECK and DEL find the same record.
pub fn for_interface(req: &Request, dra: &DraConf) -> Request {
    let mut env = req.env.clone();
    if let Some(name) = &dra.ifname {
        env.ifname = name.clone();
    }
    Request {
        env,
        conf: req.conf.clone(),
        stdin: req.stdin.clone(),
    }
}

/// The result of a chained ADD: the previous plugin's interfaces, IPs and routes, then this
/// attachment's (its IPs' interface indexes moved past the previous ones).
pub fn chain_results(prev: &CniResult, ours: CniResult) -> CniResult {
    let offset = prev.interfaces.len();
    let mut out = prev.clone();
    out.interfaces.extend(ours.interfaces);
    out.ips.extend(ours.ips.into_iter().map(|mut ip| {
        ip.interface = ip.interface.map(|i| i + offset);
        ip
    }));
    out.routes.extend(ours.routes);
    out
}

/// The DRA device named by a device plugin ID `rdma-ns:<device>` (Multus's DRA path).
pub fn device_of_id(id: &str) -> Option<&str> {
    id.strip_prefix(DEVICE_ID_PREFIX).filter(|d| !d.is_empty())
}

/// For an ADD of a DRA network: the request with the pod's prepared device applied (its attach
/// settings over the conf, `draDevice` naming it), and the device. None when the conf asks no
/// DRA device. Nothing is changed on the node here.
pub fn resolve_add(req: &Request, store: &ClaimStore) -> Result<Option<(Request, DraDevice)>> {
    let dra = DraConf::from_conf(&req.conf)?;
    let id = crate::attach::select::device_plugin_id(&req.conf)?;
    let wanted = id.as_ref().and_then(|i| device_of_id(&i.value));
    if !dra.enabled && wanted.is_none() {
        return Ok(None);
    }
    let pod_uid = req.env.args.get("K8S_POD_UID").filter(|u| !u.is_empty());
    if pod_uid.is_none() && wanted.is_none() {
        return Err(Error::InvalidEnv {
            vars: vec!["CNI_ARGS".into()],
            msg: "a DRA network (conf `dra`) finds the pod's claim by K8S_POD_UID, which \
                  CNI_ARGS lacks (Kubernetes runtimes and Multus pass it), or by Multus's \
                  deviceID `rdma-ns:<device>`"
                .into(),
        });
    }
    let (claim, device) = find_device(store, pod_uid, wanted, dra.request.as_deref())?;
    let dra_device = DraDevice {
        claim: claim.claim.clone(),
        request: device.request.clone(),
        pool: device.pool.clone(),
        device: device.device.clone(),
        share_id: device.share_id.clone(),
        netdev: device.netdev.clone(),
    };
    let applied = apply(req, &device, &dra_device)?;
    Ok(Some((applied, dra_device)))
}

/// The one prepared device of the pod: of a claim reserved for `pod_uid` (when known), named
/// `wanted` (when Multus named one), of request `request` (when the conf names one).
fn find_device(
    store: &ClaimStore,
    pod_uid: Option<&str>,
    wanted: Option<&str>,
    request: Option<&str>,
) -> Result<(PreparedClaim, PreparedDevice)> {
    let (claims, unreadable) = store.list();
    let mut found: Vec<(PreparedClaim, PreparedDevice)> = Vec::new();
    for claim in &claims {
        if pod_uid.is_some_and(|uid| !claim.pod_uids.iter().any(|p| p == uid)) {
            continue;
        }
        for d in &claim.devices {
            let named = wanted.map_or(true, |w| d.device == w);
            let of_request = request.map_or(true, |r| d.request == r);
            if named && of_request {
                found.push((claim.clone(), d.clone()));
            }
        }
    }
    let asked = describe_ask(pod_uid, wanted, request);
    match found.len() {
        1 => Ok(found.pop().unwrap()),
        0 => {
            let mut msg = format!(
                "no DRA claim prepared on this node holds a device for {asked} ({} claims \
                 prepared in {}); nothing was changed. Check that the pod has a ResourceClaim \
                 of an rdma-ns DeviceClass (`kubectl get resourceclaim -o wide`), that it was \
                 allocated on this node, and that rdma-ns-dra runs here",
                claims.len(),
                store.dir().display()
            );
            if !unreadable.is_empty() {
                let errs: Vec<String> = unreadable.iter().map(Error::to_string).collect();
                msg.push_str(&format!("; unreadable: {}", errs.join("; ")));
            }
            Err(Error::NoPreparedClaim(msg))
        }
        _ => Err(Error::DeviceAmbiguous(format!(
            "{asked} has {} prepared DRA devices: {}; name the claim request in the conf \
             (`\"dra\": {{\"request\": NAME}}`) or attach through Multus with the device's \
             k8s.cni.cncf.io/resourceName",
            found.len(),
            found
                .iter()
                .map(|(c, d)| format!("{} (request {} of claim {})", d.device, d.request, c.claim))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn describe_ask(pod_uid: Option<&str>, wanted: Option<&str>, request: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(uid) = pod_uid {
        parts.push(format!("pod {uid} (K8S_POD_UID)"));
    }
    if let Some(d) = wanted {
        parts.push(format!("device {d} (deviceID {DEVICE_ID_PREFIX}{d})"));
    }
    if let Some(r) = request {
        parts.push(format!("request {r} (conf dra.request)"));
    }
    parts.join(", ")
}

/// `req` with `device`'s attach settings over its conf and `draDevice` naming the device.
fn apply(req: &Request, device: &PreparedDevice, dra: &DraDevice) -> Result<Request> {
    let mut conf: serde_json::Value = serde_json::from_slice(&req.stdin)
        .map_err(|e| Error::decode("network configuration on stdin", e.to_string()))?;
    let obj = conf
        .as_object_mut()
        .ok_or_else(|| Error::decode("network configuration on stdin", "not an object"))?;
    if let Some(field) = STATIC_SELECTORS.iter().find(|f| obj.contains_key(**f)) {
        return Err(Error::config(
            *field,
            format!(
                "a DRA network takes its device from the pod's claim (here {} on {}): remove \
                 `{field}` from the conf",
                dra.device, dra.netdev
            ),
        ));
    }
    for (k, v) in &device.attach {
        if ATTACH_FIELDS.contains(&k.as_str()) {
            obj.insert(k.clone(), v.clone());
        }
    }
    let named = serde_json::to_value(dra).map_err(|e| Error::State(e.to_string()))?;
    obj.insert("draDevice".into(), named);
    let stdin = serde_json::to_vec(&conf).map_err(|e| Error::State(e.to_string()))?;
    let conf = NetConf::parse(&stdin, req.env.command)?;
    Ok(Request {
        env: req.env.clone(),
        conf,
        stdin,
    })
}

/// The claim device a conf names (`draDevice`, written by [`resolve_add`]); None for others.
pub fn dra_device(conf: &NetConf) -> Result<Option<DraDevice>> {
    #[derive(Deserialize)]
    struct Fields {
        #[serde(rename = "draDevice")]
        dra_device: Option<DraDevice>,
    }
    Ok(conf.fields::<Fields>()?.dra_device)
}

/// The claim device of an attachment record's conf, for the driver's status.
pub fn dra_device_of_record(conf: Option<&serde_json::Value>) -> Option<DraDevice> {
    serde_json::from_value(conf?.get("draDevice")?.clone()).ok()
}

/// After a successful ADD of claim device `dra`: the pod's own ib devices (a Soft-RoCE device
/// the ADD made, recorded under `steps.softRoce`) into the claim's CDI spec, so the containers
/// get their uverbs node. A claim whose device made none changes nothing.
pub fn publish_pod_devices(
    sys: &crate::kernel::sysfs::SysRoot,
    claims: &ClaimStore,
    att: &crate::attach::record::Attachment,
    dra: &DraDevice,
) -> Result<()> {
    let soft: Option<serde_json::Value> = att.steps.get("softRoce").ok().flatten();
    let Some(ibdev) = soft.as_ref().and_then(|s| s["ibdev"].as_str()) else {
        return Ok(());
    };
    let Some(spec) = claims.load(&dra.claim.uid)?.and_then(|c| c.cdi_spec) else {
        return Ok(());
    };
    let cdi_device = format!("{}-{}", dra.claim.uid, dra.device);
    pod_cdi::add_pod_ib_devices(sys, Path::new(&spec), &cdi_device, &[ibdev.to_string()])
}
