//! The CNI's side of DRA: an ADD of a DRA network finds the pod's prepared claim (records/
//! claim.rs, written by the driver `rdma-ns-dra`) and its device, applies the claim's attach
//! settings (the mode and what the DeviceClass or claim config says) over the conf, and names
//! the device to the selectors (`draDevice`, see select.rs).
//!
//! Which claims are the pod's: those whose record lists the pod (K8S_POD_UID in CNI_ARGS), or
//! that the kubelet's own DRA checkpoint lists for it ([`kubelet`]). The driver writes the pods
//! a claim is reserved for at prepare and again when the claim's `reservedFor` changes, but
//! the kubelet prepares a claim once per node: a second pod that shares it is only added to
//! the kubelet's checkpoint, before its sandbox (and so this ADD) is made. The checkpoint
//! makes that pod's ADD independent of how soon the driver sees the claim change.
//!
//! After the attach, [`report`] tells the claim what the pod got (its device nodes and
//! variables) for the claim's CDI spec; DEL takes it back. The driver learns of the ADD from
//! the attachment record, whose `conf.draDevice` names the claim; a failed ADD leaves
//! `_claims/<claim UID>.add-error.json`.

pub mod extended;
pub mod kubelet;
pub mod report;

use std::path::PathBuf;

use serde::Deserialize;

pub use crate::records::claim::{
    is_attach_field, AddFailure, ClaimRef, ClaimStore, DraDevice, PreparedClaim, PreparedDevice,
    DEVICE_ID_PREFIX,
};

use crate::cni::decode::{self, Failure};
use crate::cni::result::CniResult;
use crate::cni::{NetConf, Request};
use crate::error::{Error, Result};

/// The conf fields that name a device: a DRA network's device comes from its claim, so these
/// are refused beside it.
const STATIC_SELECTORS: &[&str] = &["device", "master", "hwaddr", "kernelpath", "rdmaDevice"];

/// What the conf asks of DRA: `dra` is true, or an object with
/// - `request`: the claim request whose device to take when the pod's claims hold several;
/// - `ifname`: the pod interface's name when rdma-ns runs chained after the pod's primary
///   plugin in the runtime's own conflist (no Multus: CNI_IFNAME is then the primary's, `eth0`);
/// - `optional`: a pod without a prepared claim passes through with the previous plugin's
///   result (every pod of the node runs that conflist, most without an RDMA claim);
/// - `cdiDir` (`/var/run/cdi`) and `kubeletDir` (`/var/lib/kubelet`): where the driver's CDI
///   specs and the kubelet's checkpoint are. The CNI takes no path from a record the driver
///   wrote: the driver runs with fewer privileges than the CNI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraConf {
    pub enabled: bool,
    pub request: Option<String>,
    pub ifname: Option<String>,
    pub optional: bool,
    pub cdi_dir: PathBuf,
    pub kubelet_dir: PathBuf,
}

/// The kubelet's root directory unless `dra.kubeletDir` says otherwise.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";

impl Default for DraConf {
    fn default() -> DraConf {
        DraConf {
            enabled: false,
            request: None,
            ifname: None,
            optional: false,
            cdi_dir: crate::records::cdi::DEFAULT_CDI_DIR.into(),
            kubelet_dir: DEFAULT_KUBELET_DIR.into(),
        }
    }
}

impl DraConf {
    pub fn from_conf(conf: &NetConf) -> Result<DraConf> {
        #[derive(Deserialize)]
        struct Fields {
            dra: Option<serde_json::Value>,
        }
        #[derive(Deserialize, Default)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Object {
            request: Option<String>,
            ifname: Option<String>,
            #[serde(default)]
            optional: bool,
            cdi_dir: Option<String>,
            kubelet_dir: Option<String>,
        }
        let o = match conf.fields::<Fields>()?.dra {
            None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => {
                return Ok(DraConf::default())
            }
            Some(serde_json::Value::Bool(true)) => Object::default(),
            Some(v @ serde_json::Value::Object(_)) => {
                #[cfg(test)]
                crate::testutil::serde_fields::read_log::note::<Object>("dra.");
                decode::from_value(&v, "dra").map_err(|f| {
                    let (field, msg) = match f {
                        Failure::Field { path, msg } => (path, msg),
                        Failure::Syntax(msg) => ("dra".to_string(), msg),
                    };
                    Error::config(
                        field,
                        format!(
                            "{msg}; want true or {{\"request\", \"ifname\", \"optional\", \
                             \"cdiDir\", \"kubeletDir\"}}"
                        ),
                    )
                })?
            }
            Some(other) => {
                return Err(Error::config(
                    "dra",
                    format!("{other} is neither true, false nor an object"),
                ))
            }
        };
        if let Some(name) = &o.ifname {
            check_ifname(name)?;
        }
        let defaults = DraConf::default();
        Ok(DraConf {
            enabled: true,
            request: o.request,
            ifname: o.ifname,
            optional: o.optional,
            cdi_dir: plain_dir("dra.cdiDir", o.cdi_dir)?.unwrap_or(defaults.cdi_dir),
            kubelet_dir: plain_dir("dra.kubeletDir", o.kubelet_dir)?
                .unwrap_or(defaults.kubelet_dir),
        })
    }
}

fn check_ifname(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && !name.contains(['/', ':', '\0'])
        && !name.contains(char::is_whitespace)
        && name != "."
        && name != "..";
    if !ok {
        return Err(Error::config(
            "dra.ifname",
            format!(
                "{name:?} is not a valid interface name (1 to 15 characters, no /, : or spaces)"
            ),
        ));
    }
    Ok(())
}

/// A directory field: an absolute path without `..` (the root plugin writes under it).
fn plain_dir(field: &str, value: Option<String>) -> Result<Option<PathBuf>> {
    match value {
        Some(v) if !crate::log::is_plain_absolute(&v) => Err(Error::config(
            field,
            format!("{v:?}: want an absolute path without `..`"),
        )),
        other => Ok(other.map(PathBuf::from)),
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
    let kubelet_claims = pod_uid.map(|uid| kubelet::claims_of_pod(&dra.kubelet_dir, uid));
    let ask = Ask {
        pod_uid,
        kubelet_claims: kubelet_claims.as_deref().unwrap_or_default(),
        wanted,
        request: dra.request.as_deref(),
    };
    let (claim, device) = find_device(store, &ask)?;
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

/// What ADD looks for among the prepared claims.
struct Ask<'a> {
    /// K8S_POD_UID, when the runtime passed it.
    pod_uid: Option<&'a str>,
    /// The claims the kubelet's checkpoint lists for the pod.
    kubelet_claims: &'a [String],
    /// The device Multus named (`rdma-ns:<device>`).
    wanted: Option<&'a str>,
    /// Conf `dra.request`.
    request: Option<&'a str>,
}

impl Ask<'_> {
    /// Whether `claim` is one of the pod's: its record lists the pod, or the kubelet does.
    fn is_pods(&self, claim: &PreparedClaim) -> bool {
        let Some(uid) = self.pod_uid else {
            return true;
        };
        claim.pod_uids.iter().any(|p| p == uid) || self.kubelet_claims.contains(&claim.claim.uid)
    }
}

/// The one prepared device of the pod: of a claim that is the pod's (when it is known), named
/// `wanted` (when Multus named one), of request `request` (when the conf names one).
fn find_device(store: &ClaimStore, ask: &Ask<'_>) -> Result<(PreparedClaim, PreparedDevice)> {
    let (claims, unreadable) = store.list();
    let mut found: Vec<(PreparedClaim, PreparedDevice)> = Vec::new();
    for claim in claims.iter().filter(|c| ask.is_pods(c)) {
        for d in &claim.devices {
            let named = ask.wanted.map_or(true, |w| d.device == w);
            let of_request = ask.request.map_or(true, |r| d.request == r);
            if named && of_request {
                found.push((claim.clone(), d.clone()));
            }
        }
    }
    let asked = describe_ask(ask.pod_uid, ask.wanted, ask.request);
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
        if is_attach_field(k) {
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
