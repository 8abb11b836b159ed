//! A prepared claim's CDI spec (`<cdiDir>/rdma-ns.io-<claim UID>.json`, kind `rdma-ns.io/rdma`):
//! one CDI device per claim device, whose container edits give the pod's containers the
//! device's char devices and environment. containerd and CRI-O apply it to every container of
//! the pods the kubelet prepared the claim for, when they create the container (after the
//! sandbox's CNI ADD, and again at each container restart).
//!
//! The spec is never edited in place: it is rendered from the claim's record
//! ([`render`]) and the node's sysfs, and written when its bytes change. Both writers render
//! under the claim's lock: the driver at prepare (the devices as the host has them), the CNI
//! at ADD and DEL (what each pod reported of its device: its own nodes, which a netns move or a
//! Soft-RoCE device made, and its NCCL/UCX variables). The same records render the same bytes,
//! so a second prepare, or a writer killed and run again, changes nothing.
//!
//! Per claim device:
//! - nodes: the ones each pod attached to it reported (their union: pods that share a claim
//!   share its devices), or, before any pod did, the device's uverbs node as the host's sysfs
//!   has it now (with `umad`, its port's umad and issm), and rdma_cm;
//! - environment: `RDMA_NS_DEVICE`, `_KIND`, `_NETDEV`, `_IB_DEVICE`, `_IB_PORT`, `_RAIL` (and
//!   `RDMA_NS_<REQUEST>_...`, for pods with several), then the variables the pods reported,
//!   each where every pod of the device reported the same value (a claim shared by pods whose
//!   values differ leaves that variable out: the CDI device is one for all of them).
//!
//! Device nodes carry their type, major and minor as sysfs has them, so the runtime needs no
//! host path lookup; numbers are read when rendering (a netns move in exclusive mode
//! registers a device's char devices again, under new numbers).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{CharDev, CharDevKind, RdmaSysfs};
use crate::records::atomic::{remove_stale_temps, write_atomic};
use crate::records::claim::{PreparedClaim, PreparedDevice};

/// The CDI kind (`vendor/class`).
pub const KIND: &str = "rdma-ns.io/rdma";

/// The CDI version the specs declare (device nodes with major and minor: 0.3.0; 0.6.0 is what
/// containerd 1.7 and 2.x read).
pub const CDI_VERSION: &str = "0.6.0";

/// The file name prefix of this driver's specs (its name).
const SPEC_PREFIX: &str = "rdma-ns.io-";

/// Where specs go unless configured (driver `cdiDir`, CNI `dra.cdiDir`).
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

/// The spec file of claim `uid`.
pub fn spec_path(cdi_dir: &Path, uid: &str) -> PathBuf {
    cdi_dir.join(format!("{SPEC_PREFIX}{uid}.json"))
}

/// The CDI device name of `device` (and its share, under consumable capacity) in claim `uid`.
/// With a share the name holds it: two shares of one device in one claim are two CDI devices,
/// and a CDI registry refuses a spec whose names repeat.
pub fn device_name(uid: &str, device: &str, share_id: Option<&str>) -> String {
    match share_id {
        Some(share) => format!("{uid}-{device}-{share}"),
        None => format!("{uid}-{device}"),
    }
}

/// The fully qualified CDI device ID of a device name.
pub fn device_id(name: &str) -> String {
    format!("{KIND}={name}")
}

/// A device node of a container edit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceNode {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub major: u32,
    pub minor: u32,
    pub permissions: String,
}

impl DeviceNode {
    /// The node of `c` in the container, where the kernel's devnode callbacks put it.
    pub fn of(c: &CharDev) -> DeviceNode {
        DeviceNode {
            path: c.devnode().display().to_string(),
            kind: "c".into(),
            major: c.major,
            minor: c.minor,
            permissions: "rw".into(),
        }
    }
}

/// What one pod's attachment of a claim device reported for the pod's containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    /// The attachment that reported: `<network>/<containerID>:<ifname>` (DEL removes its own).
    pub attachment: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The ib device the pod got, when it is not the claim device's own (a Soft-RoCE device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ibdev: Option<String>,
    /// The device's nodes as the pod has them: its ib device's, and rdma_cm.
    pub nodes: Vec<DeviceNode>,
    /// `NAME=value` of the pod's NCCL and UCX variables (`rdma-ns env`'s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub cdi_version: String,
    pub kind: String,
    pub devices: Vec<SpecDevice>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecDevice {
    pub name: String,
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    pub env: Vec<String>,
    pub device_nodes: Vec<DeviceNode>,
}

/// The nodes of an ib device (and port) as `sys` shows them now: its uverbs node, with `umad`
/// its port's umad and issm nodes, and rdma_cm.
pub fn device_nodes(
    sys: &SysRoot,
    ibdev: Option<&str>,
    port: Option<u32>,
    umad: bool,
) -> io::Result<Vec<DeviceNode>> {
    let topo = RdmaSysfs::new(sys);
    let mut nodes: Vec<DeviceNode> = match ibdev {
        Some(ib) => topo
            .char_devices()?
            .iter()
            .filter(|c| c.ibdev.as_deref() == Some(ib))
            .filter(|c| c.kind == CharDevKind::Uverbs || (umad && c.port == port))
            .map(DeviceNode::of)
            .collect(),
        None => Vec::new(),
    };
    nodes.extend(topo.rdma_cm()?.as_ref().map(DeviceNode::of));
    nodes.sort();
    Ok(nodes)
}

/// The spec of `claim`, from its record and `sys` (for devices no pod reported yet).
pub fn render(claim: &PreparedClaim, sys: &SysRoot) -> Result<Spec> {
    let devices = claim
        .devices
        .iter()
        .map(|d| render_device(&claim.claim.uid, d, sys))
        .collect::<Result<_>>()?;
    Ok(Spec {
        cdi_version: CDI_VERSION.into(),
        kind: KIND.into(),
        devices,
    })
}

fn render_device(uid: &str, d: &PreparedDevice, sys: &SysRoot) -> Result<SpecDevice> {
    let mut nodes: Vec<DeviceNode> = if d.pods.is_empty() {
        device_nodes(sys, d.ibdev.as_deref(), d.port, d.umad)
            .map_err(|e| Error::io(format!("reading the char devices of {}", d.device), e))?
    } else {
        d.pods
            .iter()
            .flat_map(|p| p.nodes.iter().cloned())
            .collect()
    };
    nodes.sort();
    nodes.dedup();
    Ok(SpecDevice {
        name: device_name(uid, &d.device, d.share_id.as_deref()),
        container_edits: ContainerEdits {
            env: environment(d),
            device_nodes: nodes,
        },
    })
}

/// The value every report agrees on for each variable, in the order the first report gives
/// them; a variable some report lacks or gives another value is left out.
fn agreed(each: &[Vec<(String, String)>]) -> Vec<(String, String)> {
    let Some((first, rest)) = each.split_first() else {
        return Vec::new();
    };
    let others: Vec<BTreeMap<&str, &str>> = rest
        .iter()
        .map(|vars| vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
        .collect();
    first
        .iter()
        .filter(|(k, v)| {
            others
                .iter()
                .all(|o| o.get(k.as_str()) == Some(&v.as_str()))
        })
        .cloned()
        .collect()
}

fn environment(d: &PreparedDevice) -> Vec<String> {
    let ibdevs: Vec<Vec<(String, String)>> = d
        .pods
        .iter()
        .map(|p| {
            p.ibdev
                .iter()
                .map(|i| ("IB_DEVICE".to_string(), i.clone()))
                .collect()
        })
        .collect();
    let pod_ibdev = agreed(&ibdevs).pop().map(|(_, v)| v);
    let mut facts: Vec<(&str, String)> = vec![
        ("DEVICE", d.device.clone()),
        ("KIND", d.kind.clone()),
        ("NETDEV", d.netdev.clone()),
    ];
    if let Some(ib) = pod_ibdev.or_else(|| d.ibdev.clone()) {
        facts.push(("IB_DEVICE", ib));
    }
    if let Some(p) = d.port {
        facts.push(("IB_PORT", p.to_string()));
    }
    if let Some(r) = &d.rail {
        facts.push(("RAIL", r.clone()));
    }
    let request: String = d
        .request
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect();
    let mut out = Vec::new();
    for (k, v) in facts {
        out.push(format!("RDMA_NS_{k}={v}"));
        out.push(format!("RDMA_NS_{request}_{k}={v}"));
    }
    let vars: Vec<Vec<(String, String)>> = d
        .pods
        .iter()
        .map(|p| {
            p.env
                .iter()
                .filter_map(|e| e.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect();
    out.extend(agreed(&vars).into_iter().map(|(k, v)| format!("{k}={v}")));
    out
}

/// Writes `spec` as claim `uid`'s spec (0644: runtimes read it) when its bytes differ from
/// the file's; returns whether it wrote.
pub fn write(cdi_dir: &Path, uid: &str, spec: &Spec) -> Result<bool> {
    let path = spec_path(cdi_dir, uid);
    let bytes = serde_json::to_vec_pretty(spec).map_err(|e| Error::State(e.to_string()))?;
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    std::fs::create_dir_all(cdi_dir).map_err(|e| {
        Error::io(
            format!("creating CDI spec directory {}", cdi_dir.display()),
            e,
        )
    })?;
    // A write killed mid-way left its temp file: this claim's next write or removal clears it.
    remove_stale_temps(&path);
    write_atomic(&path, &bytes, 0o644)
        .map_err(|e| Error::io(format!("writing CDI spec {}", path.display()), e))?;
    Ok(true)
}

/// The spec of claim `uid` as it is on disk; None when there is none.
pub fn read(cdi_dir: &Path, uid: &str) -> Result<Option<Spec>> {
    let path = spec_path(cdi_dir, uid);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::State(format!("CDI spec {} is unreadable: {e}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("reading CDI spec {}", path.display()), e)),
    }
}

/// Removes the spec of claim `uid`; gone already is no error.
pub fn remove(cdi_dir: &Path, uid: &str) -> Result<()> {
    let path = spec_path(cdi_dir, uid);
    remove_stale_temps(&path);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io(
            format!("removing CDI spec {}", path.display()),
            e,
        )),
        _ => Ok(()),
    }
}

/// The claim UIDs of the specs in `cdi_dir` this driver wrote.
pub fn spec_uids(cdi_dir: &Path) -> Vec<String> {
    crate::kernel::sysfs::list_names(cdi_dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| {
            Some(
                n.strip_prefix(SPEC_PREFIX)?
                    .strip_suffix(".json")?
                    .to_string(),
            )
        })
        .collect()
}

/// Changes claim `uid`'s record with `change` and renders its spec again, under the claim's
/// lock: how the CNI reports what a pod got (and takes it back at DEL). Reports of attachments
/// whose record is gone (a DEL killed after it released the attachment) are dropped on the way.
/// A claim with no record (unprepared, or never prepared here) is left alone.
pub fn update(
    data_dir: &Path,
    cdi_dir: &Path,
    sys: &SysRoot,
    uid: &str,
    change: impl FnOnce(&mut PreparedClaim),
) -> Result<()> {
    let claims = crate::records::claim::ClaimStore::new(data_dir);
    let _lock = claims.lock(uid)?;
    let Some(mut claim) = claims.load(uid)? else {
        return Ok(());
    };
    let before = claim.clone();
    change(&mut claim);
    let store = crate::records::store::Store::<crate::records::attachment::RawMode>::new(data_dir);
    for d in &mut claim.devices {
        d.pods.retain(|p| store.has_record_of(&p.attachment));
    }
    if claim != before {
        claims.save(&claim)?;
    }
    crate::records::kill_point("claim-report-record");
    write(cdi_dir, uid, &render(&claim, sys)?)?;
    crate::records::kill_point("claim-report-spec");
    Ok(())
}

/// What names an attachment in a [`PodReport`]: `<network>/<containerID>:<ifname>`.
pub fn attachment_name(network: &str, container_id: &str, ifname: &str) -> String {
    format!("{network}/{container_id}:{ifname}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::topology::fixtures::SysfsFixture;
    use crate::records::claim::ClaimRef;
    use crate::testutil::TempDir;

    fn device(name: &str, kind: &str, ibdev: Option<&str>, umad: bool) -> PreparedDevice {
        PreparedDevice {
            request: "rdma".into(),
            pool: "node-a".into(),
            device: name.into(),
            share_id: None,
            kind: kind.into(),
            netdev: "ens1f0np0".into(),
            ibdev: ibdev.map(str::to_string),
            port: ibdev.map(|_| 1),
            pci_address: None,
            lock_key: "pci-0000:3b:00.0".into(),
            cdi_device_ids: Vec::new(),
            attach: Default::default(),
            umad,
            rail: None,
            pods: Vec::new(),
        }
    }

    fn claim(devices: Vec<PreparedDevice>) -> PreparedClaim {
        PreparedClaim {
            claim: ClaimRef {
                namespace: "team".into(),
                name: "c".into(),
                uid: "0d6b".into(),
            },
            pod_uids: Vec::new(),
            extended_resource: false,
            devices,
            allocation: String::new(),
            written_by: None,
        }
    }

    /// The spec's bytes for a claim of the fixture's PF port before any pod reported: the
    /// uverbs node sysfs gives mlx5_0 (uverbs0, 231:192) and rdma_cm with their numbers, no umad
    /// unless asked, and the environment under both names. With `umad`, the port's umad and
    /// issm nodes too.
    #[test]
    fn a_claims_spec_gives_its_devices_nodes_and_environment() {
        let fx = SysfsFixture::all().unwrap();
        let spec = render(
            &claim(vec![device("mlx5-0-p1", "roce", Some("mlx5_0"), false)]),
            fx.root(),
        )
        .unwrap();
        let text = serde_json::to_string(&spec).unwrap();
        let cm = RdmaSysfs::new(fx.root()).rdma_cm().unwrap().unwrap();
        let expected = format!(
            concat!(
                r#"{{"cdiVersion":"0.6.0","kind":"rdma-ns.io/rdma","devices":[{{"name":"0d6b-mlx5-0-p1","#,
                r#""containerEdits":{{"env":["RDMA_NS_DEVICE=mlx5-0-p1","RDMA_NS_RDMA_DEVICE=mlx5-0-p1","#,
                r#""RDMA_NS_KIND=roce","RDMA_NS_RDMA_KIND=roce","#,
                r#""RDMA_NS_NETDEV=ens1f0np0","RDMA_NS_RDMA_NETDEV=ens1f0np0","#,
                r#""RDMA_NS_IB_DEVICE=mlx5_0","RDMA_NS_RDMA_IB_DEVICE=mlx5_0","#,
                r#""RDMA_NS_IB_PORT=1","RDMA_NS_RDMA_IB_PORT=1"],"#,
                r#""deviceNodes":[{{"path":"/dev/infiniband/rdma_cm","type":"c","major":{},"minor":{},"permissions":"rw"}},"#,
                r#"{{"path":"/dev/infiniband/uverbs0","type":"c","major":231,"minor":192,"permissions":"rw"}}]}}}}]}}"#
            ),
            cm.major, cm.minor
        );
        assert_eq!(text, expected);
        assert_eq!(
            device_id(&device_name("0d6b", "mlx5-0-p1", None)),
            "rdma-ns.io/rdma=0d6b-mlx5-0-p1"
        );
        assert_eq!(
            device_name("0d6b", "mlx5-0-p1", Some("5f")),
            "0d6b-mlx5-0-p1-5f"
        );
        let with = serde_json::to_string(
            &render(
                &claim(vec![device("mlx5-0-p1", "roce", Some("mlx5_0"), true)]),
                fx.root(),
            )
            .unwrap(),
        )
        .unwrap();
        assert!(
            with.contains("/dev/infiniband/umad0") && with.contains("/dev/infiniband/issm0"),
            "{with}"
        );
        assert!(!text.contains("umad"), "{text}");
    }

    fn report(attachment: &str, ibdev: Option<&str>, minor: u32, env: &[&str]) -> PodReport {
        PodReport {
            attachment: attachment.into(),
            pod_uid: None,
            ibdev: ibdev.map(str::to_string),
            nodes: vec![DeviceNode {
                path: format!("/dev/infiniband/uverbs{}", minor - 192),
                kind: "c".into(),
                major: 231,
                minor,
                permissions: "rw".into(),
            }],
            env: env.iter().map(|e| e.to_string()).collect(),
        }
    }

    /// Once pods reported, their nodes replace what the host's sysfs has for the device (a
    /// moved device's new numbers, a Soft-RoCE device's node), their union when several pods
    /// share the claim; a variable goes in where every pod gives the same value; the pod's own
    /// ib device names RDMA_NS_IB_DEVICE when they agree.
    #[test]
    fn pods_reports_give_their_nodes_and_the_variables_they_agree_on() {
        let fx = SysfsFixture::all().unwrap();
        let mut d = device("softroce-v1", "soft-roce", None, false);
        d.pods = vec![report(
            "n/c1:net1",
            Some("rxe_a"),
            196,
            &[
                "NCCL_IB_HCA==rxe_a",
                "NCCL_IB_GID_INDEX=1",
                "NCCL_SOCKET_IFNAME==net1",
            ],
        )];
        let one = render(&claim(vec![d.clone()]), fx.root()).unwrap();
        let edits = &one.devices[0].container_edits;
        assert_eq!(
            edits
                .device_nodes
                .iter()
                .map(|n| n.path.as_str())
                .collect::<Vec<_>>(),
            ["/dev/infiniband/uverbs4"]
        );
        assert!(
            edits.env.contains(&"RDMA_NS_IB_DEVICE=rxe_a".to_string()),
            "{:?}",
            edits.env
        );
        assert!(
            edits.env.ends_with(&[
                "NCCL_IB_HCA==rxe_a".into(),
                "NCCL_IB_GID_INDEX=1".into(),
                "NCCL_SOCKET_IFNAME==net1".into()
            ]),
            "{:?}",
            edits.env
        );

        d.pods.push(report(
            "n/c2:net1",
            Some("rxe_b"),
            197,
            &[
                "NCCL_IB_HCA==rxe_b",
                "NCCL_IB_GID_INDEX=1",
                "NCCL_SOCKET_IFNAME==net1",
            ],
        ));
        let two = render(&claim(vec![d]), fx.root()).unwrap();
        let edits = &two.devices[0].container_edits;
        assert_eq!(edits.device_nodes.len(), 2, "both pods' nodes");
        assert!(edits.env.contains(&"NCCL_IB_GID_INDEX=1".to_string()));
        assert!(
            !edits
                .env
                .iter()
                .any(|e| e.starts_with("NCCL_IB_HCA=") || e.starts_with("RDMA_NS_IB_DEVICE=")),
            "{:?}",
            edits.env
        );
    }

    /// A spec is written only when its bytes change; it is listed and removed by claim.
    #[test]
    fn specs_are_written_when_they_change_listed_and_removed() {
        let fx = SysfsFixture::all().unwrap();
        let dir = TempDir::new("cdi");
        let spec = render(
            &claim(vec![device("mlx5-0-p1", "roce", Some("mlx5_0"), false)]),
            fx.root(),
        )
        .unwrap();
        assert!(write(dir.path(), "c1", &spec).unwrap());
        assert!(
            !write(dir.path(), "c1", &spec).unwrap(),
            "the same bytes are not written again"
        );
        assert_eq!(read(dir.path(), "c1").unwrap(), Some(spec));
        std::fs::write(dir.path().join("other-vendor.json"), "{}").unwrap();
        assert_eq!(spec_uids(dir.path()), vec!["c1".to_string()]);
        remove(dir.path(), "c1").unwrap();
        remove(dir.path(), "c1").unwrap();
        assert!(spec_uids(dir.path()).is_empty());
        assert_eq!(read(dir.path(), "c1").unwrap(), None);
    }
}
