//! The pod's own ib device in its claim's CDI spec: a Soft-RoCE device (`softRoce`) exists only
//! once ADD made it, after the driver wrote the spec at prepare, and its uverbs number is the
//! kernel's choice then. The CNI adds that node to the claim device's CDI edits before ADD
//! answers, so the containers, which the runtime creates after the sandbox's ADD, get it
//! without a privileged container or the whole /dev/infiniband. The nodes added are named in
//! the device's `annotations` (`rdma-ns.io/pod-nodes`), so a later ADD of the same claim (a
//! sandbox made again) replaces them instead of piling up.

use std::path::Path;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{CharDev, CharDevKind, RdmaSysfs};

/// The annotation naming the nodes the CNI added.
const POD_NODES: &str = "rdma-ns.io/pod-nodes";

/// A CDI device node for `c`, with its type and numbers as sysfs has them (the runtime then
/// needs no host path lookup). The driver's specs use it too.
pub fn device_node(c: &CharDev) -> Value {
    json!({
        "path": format!("/dev/infiniband/{}", c.name),
        "type": "c",
        "major": c.major,
        "minor": c.minor,
        "permissions": "rw",
    })
}

/// Gives CDI device `cdi_device` of the spec at `spec_path` the uverbs nodes of `ibdevs` (the
/// pod's own ib devices) and `RDMA_NS_IB_DEVICE`, replacing what an earlier ADD added.
pub fn add_pod_ib_devices(
    sys: &SysRoot,
    spec_path: &Path,
    cdi_device: &str,
    ibdevs: &[String],
) -> Result<()> {
    let what = || format!("CDI spec {}", spec_path.display());
    let bytes =
        std::fs::read(spec_path).map_err(|e| Error::io(format!("reading {}", what()), e))?;
    let mut spec: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::State(format!("{} is unreadable: {e}", what())))?;
    let chars = RdmaSysfs::new(sys)
        .char_devices()
        .map_err(|e| Error::io("reading the RDMA char devices from sysfs", e))?;
    let nodes: Vec<&CharDev> = chars
        .iter()
        .filter(|c| c.kind == CharDevKind::Uverbs)
        .filter(|c| c.ibdev.as_ref().is_some_and(|i| ibdevs.contains(i)))
        .collect();
    let device = spec["devices"]
        .as_array_mut()
        .and_then(|d| d.iter_mut().find(|d| d["name"] == cdi_device))
        .ok_or_else(|| Error::State(format!("{} has no device {cdi_device}", what())))?;
    let old: Vec<String> = device["annotations"][POD_NODES]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let edits = &mut device["containerEdits"];
    let mut kept: Vec<Value> = edits["deviceNodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !old.iter().any(|p| n["path"] == p.as_str()))
        .collect();
    kept.extend(nodes.iter().map(|c| device_node(c)));
    edits["deviceNodes"] = Value::Array(kept);
    let mut env: Vec<Value> = edits["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            !e.as_str()
                .is_some_and(|e| e.starts_with("RDMA_NS_IB_DEVICE="))
        })
        .collect();
    env.extend(
        ibdevs
            .iter()
            .map(|i| Value::from(format!("RDMA_NS_IB_DEVICE={i}"))),
    );
    edits["env"] = Value::Array(env);
    let added: Vec<String> = nodes
        .iter()
        .map(|c| format!("/dev/infiniband/{}", c.name))
        .collect();
    device["annotations"][POD_NODES] = Value::from(added.join(","));
    let bytes = serde_json::to_vec_pretty(&spec).map_err(|e| Error::State(e.to_string()))?;
    crate::attach::store::write_atomic(spec_path, &bytes, 0o644)
        .map_err(|e| Error::io(format!("writing {}", what()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::topology::fixtures::SysfsFixture;
    use crate::testutil::TempDir;

    /// A soft-roce claim's spec (rdma_cm only at prepare) gets the pod's rxe uverbs node and
    /// its name; a second ADD with another device replaces them, and the prepare-time nodes
    /// stay; the spec's other devices are untouched.
    #[test]
    fn the_pods_own_ib_device_goes_into_its_claims_cdi_spec_and_replaces_an_earlier_one() {
        let fx = SysfsFixture::all().unwrap();
        let tmp = TempDir::new("pod-cdi");
        let path = tmp.path().join("rdma-ns.io-u1.json");
        let cm = json!({"path": "/dev/infiniband/rdma_cm", "type": "c", "major": 10, "minor": 124});
        let spec = json!({"cdiVersion": "0.6.0", "kind": "rdma-ns.io/rdma", "devices": [
            {"name": "u1-softroce-v1", "containerEdits": {"env": ["RDMA_NS_DEVICE=softroce-v1"], "deviceNodes": [cm]}},
            {"name": "u1-other", "containerEdits": {"env": [], "deviceNodes": []}}
        ]});
        std::fs::write(&path, spec.to_string()).unwrap();
        add_pod_ib_devices(fx.root(), &path, "u1-softroce-v1", &["rxe0".into()]).unwrap();
        let got: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let dev = &got["devices"][0];
        let paths: Vec<&str> = dev["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs4"],
            "{got}"
        );
        assert_eq!(dev["containerEdits"]["deviceNodes"][1]["minor"], 196);
        assert!(dev["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("RDMA_NS_IB_DEVICE=rxe0")));
        assert_eq!(got["devices"][1], spec["devices"][1]);

        add_pod_ib_devices(fx.root(), &path, "u1-softroce-v1", &["mlx5_2".into()]).unwrap();
        let again: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let nodes = again["devices"][0]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .clone();
        let paths: Vec<&str> = nodes.iter().map(|n| n["path"].as_str().unwrap()).collect();
        assert_eq!(
            paths,
            ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs1"],
            "{again}"
        );
        let env = again["devices"][0]["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .clone();
        assert!(
            !env.contains(&json!("RDMA_NS_IB_DEVICE=rxe0"))
                && env.contains(&json!("RDMA_NS_IB_DEVICE=mlx5_2"))
        );

        let e = add_pod_ib_devices(fx.root(), &path, "u1-missing", &[]).unwrap_err();
        assert!(e.to_string().contains("u1-missing"), "{e}");
    }
}
