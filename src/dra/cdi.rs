//! One CDI spec per prepared claim (`<cdiDir>/rdma-ns.io-<claim UID>.json`, kind
//! `rdma-ns.io/rdma`, one CDI device per claim device named `<claim UID>-<device>`): the
//! device's char devices (its uverbs node and rdma_cm; umad and issm only when the claim's or
//! class's config asks, `"umad": true`) and an environment naming the device. containerd and
//! CRI-O apply it to the pod's containers (CDI enabled; the kubelet passes the IDs).
//!
//! Device nodes are given with their type, major and minor as sysfs has them, so the runtime
//! needs no host path lookup, and their numbers are read at prepare (uverbsN numbers change
//! when a device moves between netns: never by index).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::dra::config::DRIVER_NAME;
use crate::dra::inventory::InvDevice;
use crate::error::{Error, Result};
use crate::kernel::topology::{CharDev, CharDevKind};

/// The CDI kind (`vendor/class`).
pub const KIND: &str = "rdma-ns.io/rdma";

/// The spec file of claim `uid`.
pub fn spec_path(cdi_dir: &Path, uid: &str) -> PathBuf {
    cdi_dir.join(format!("{DRIVER_NAME}-{uid}.json"))
}

/// The CDI device name of `device` in claim `uid`, and its fully qualified ID.
pub fn device_name(uid: &str, device: &str) -> String {
    format!("{uid}-{device}")
}

pub fn device_id(uid: &str, device: &str) -> String {
    format!("{KIND}={}", device_name(uid, device))
}

/// One claim device as the CDI spec gives it to containers.
pub struct CdiDevice<'a> {
    /// The published device name (a share's, on servers without consumable capacity).
    pub published: &'a str,
    pub request: &'a str,
    pub inv: &'a InvDevice,
    /// Whether umad and issm nodes go in too.
    pub umad: bool,
}

/// The CDI spec of claim `uid`; `rdma_cm` is the node-wide misc device, when present.
pub fn spec(uid: &str, devices: &[CdiDevice<'_>], rdma_cm: Option<&CharDev>) -> Value {
    let devices: Vec<Value> = devices
        .iter()
        .map(|d| {
            let mut nodes: Vec<Value> = d
                .inv
                .char_devs
                .iter()
                .filter(|c| c.kind == CharDevKind::Uverbs || d.umad)
                .chain(rdma_cm)
                .map(node)
                .collect();
            nodes.dedup();
            json!({
                "name": device_name(uid, d.published),
                "containerEdits": {
                    "env": env(d),
                    "deviceNodes": nodes,
                }
            })
        })
        .collect();
    json!({
        "cdiVersion": "0.6.0",
        "kind": KIND,
        "devices": devices,
    })
}

fn node(c: &CharDev) -> Value {
    crate::attach::claim::pod_cdi::device_node(c)
}

/// `RDMA_NS_DEVICE` etc. name the device for one device; `RDMA_NS_<REQUEST>_...` for each of
/// several (a container with two claims' devices gets both).
fn env(d: &CdiDevice<'_>) -> Vec<String> {
    let mut facts = vec![
        ("DEVICE", d.published.to_string()),
        ("KIND", d.inv.kind.as_str().to_string()),
        ("NETDEV", d.inv.netdev.clone()),
    ];
    if let Some(ib) = &d.inv.ibdev {
        facts.push(("IB_DEVICE", ib.clone()));
    }
    if let Some(p) = d.inv.port {
        facts.push(("IB_PORT", p.to_string()));
    }
    if let Some(r) = &d.inv.rail {
        facts.push(("RAIL", r.clone()));
    }
    let request: String = d
        .request
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    let mut out = Vec::new();
    for (k, v) in facts {
        out.push(format!("RDMA_NS_{k}={v}"));
        out.push(format!("RDMA_NS_{request}_{k}={v}"));
    }
    out
}

/// Writes the spec of claim `uid` atomically (0644: runtimes read it).
pub fn write(cdi_dir: &Path, uid: &str, spec: &Value) -> Result<PathBuf> {
    let path = spec_path(cdi_dir, uid);
    std::fs::create_dir_all(cdi_dir).map_err(|e| {
        Error::io(
            format!("creating CDI spec directory {}", cdi_dir.display()),
            e,
        )
    })?;
    let bytes = serde_json::to_vec_pretty(spec).map_err(|e| Error::State(e.to_string()))?;
    // A write killed mid-way left its temp file: this claim's prepare or unprepare clears it.
    crate::attach::store::remove_stale_temps(&path);
    crate::attach::store::write_atomic(&path, &bytes, 0o644)
        .map_err(|e| Error::io(format!("writing CDI spec {}", path.display()), e))?;
    Ok(path)
}

/// Removes the spec of claim `uid`; gone already is no error.
pub fn remove(cdi_dir: &Path, uid: &str) -> Result<()> {
    let path = spec_path(cdi_dir, uid);
    crate::attach::store::remove_stale_temps(&path);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(
            format!("removing CDI spec {}", path.display()),
            e,
        )),
        _ => Ok(()),
    }
}

/// The claim UIDs of the specs in `cdi_dir` this driver wrote.
pub fn spec_uids(cdi_dir: &Path) -> Vec<String> {
    let prefix = format!("{DRIVER_NAME}-");
    crate::kernel::sysfs::list_names(cdi_dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| Some(n.strip_prefix(&prefix)?.strip_suffix(".json")?.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::config::DriverConfig;
    use crate::kernel::topology::fixtures::SysfsFixture;
    use crate::kernel::topology::RdmaSysfs;

    /// The spec's bytes for a claim of the fixture's PF port: the uverbs node sysfs names for
    /// mlx5_0 (uverbs0, 231:192) and rdma_cm with their numbers, no umad unless asked, and the
    /// environment under both names; with `umad` the port's umad and issm nodes too.
    #[test]
    fn a_claims_spec_gives_its_char_devices_and_environment() {
        let fx = SysfsFixture::all().unwrap();
        let devs = crate::dra::inventory::read(fx.root(), &DriverConfig::default()).unwrap();
        let pf = devs.iter().find(|d| d.name == "mlx5-0-p1").unwrap();
        let rdma_cm = RdmaSysfs::new(fx.root()).rdma_cm().unwrap();
        let one = CdiDevice {
            published: "mlx5-0-p1",
            request: "rdma",
            inv: pf,
            umad: false,
        };
        let one_spec = spec("0d6b", &[one], rdma_cm.as_ref());
        let text = serde_json::to_string(&one_spec).unwrap();
        let cm = rdma_cm.as_ref().unwrap();
        let expected = format!(
            concat!(
                r#"{{"cdiVersion":"0.6.0","devices":[{{"containerEdits":{{"deviceNodes":["#,
                r#"{{"major":231,"minor":192,"path":"/dev/infiniband/uverbs0","permissions":"rw","type":"c"}},"#,
                r#"{{"major":{},"minor":{},"path":"/dev/infiniband/rdma_cm","permissions":"rw","type":"c"}}],"#,
                r#""env":["RDMA_NS_DEVICE=mlx5-0-p1","RDMA_NS_RDMA_DEVICE=mlx5-0-p1","#,
                r#""RDMA_NS_KIND=roce","RDMA_NS_RDMA_KIND=roce","#,
                r#""RDMA_NS_NETDEV=ens1f0np0","RDMA_NS_RDMA_NETDEV=ens1f0np0","#,
                r#""RDMA_NS_IB_DEVICE=mlx5_0","RDMA_NS_RDMA_IB_DEVICE=mlx5_0","#,
                r#""RDMA_NS_IB_PORT=1","RDMA_NS_RDMA_IB_PORT=1"]}},"#,
                r#""name":"0d6b-mlx5-0-p1"}}],"kind":"rdma-ns.io/rdma"}}"#
            ),
            cm.major, cm.minor
        );
        assert_eq!(text, expected);
        assert_eq!(
            device_id("0d6b", "mlx5-0-p1"),
            "rdma-ns.io/rdma=0d6b-mlx5-0-p1"
        );

        let umad = CdiDevice {
            published: "mlx5-0-p1",
            request: "rdma",
            inv: pf,
            umad: true,
        };
        let with = serde_json::to_string(&spec("0d6b", &[umad], None)).unwrap();
        assert!(
            with.contains("/dev/infiniband/umad0") && with.contains("/dev/infiniband/issm0"),
            "{with}"
        );
        assert!(!text.contains("umad"), "{text}");
    }

    #[test]
    fn specs_are_written_listed_and_removed_by_claim() {
        let dir = crate::testutil::TempDir::new("cdi");
        let path = write(dir.path(), "c1", &json!({"kind": KIND})).unwrap();
        assert_eq!(path, dir.path().join("rdma-ns.io-c1.json"));
        std::fs::write(dir.path().join("other-vendor.json"), "{}").unwrap();
        assert_eq!(spec_uids(dir.path()), vec!["c1".to_string()]);
        remove(dir.path(), "c1").unwrap();
        remove(dir.path(), "c1").unwrap();
        assert!(spec_uids(dir.path()).is_empty());
    }
}
