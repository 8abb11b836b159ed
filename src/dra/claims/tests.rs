use super::*;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;
use serde_json::json;

/// A node of the fixture presets in shared netns mode, its data and CDI dirs in `tmp`.
fn node(tmp: &TempDir, fx: &SysfsFixture) -> Claims {
    fx.write_attr("module/ib_core/parameters/netns_mode", "Y")
        .unwrap();
    Claims {
        cfg: DriverConfig {
            data_dir: tmp.path().join("data"),
            cdi_dir: tmp.path().join("cdi"),
            ..DriverConfig::default()
        },
        sys: fx.root().clone(),
        node: "node-a".into(),
    }
}

/// A claim as the API server returns it once the scheduler allocated `results` (request,
/// pool, device) of this driver, with `configs` (source, requests, parameters).
fn claim(results: &[(&str, &str, &str)], configs: serde_json::Value) -> ResourceClaim {
    let results: Vec<_> = results
        .iter()
        .map(|(request, pool, device)| {
            json!({"request": request, "driver": DRIVER_NAME, "pool": pool, "device": device})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "team", "name": "trainer-rdma", "uid": "0d6b5c1e-aaaa-4bbb-8ccc-000000000001"},
        "spec": {"devices": {"requests": [{"name": "rdma", "exactly": {"deviceClassName": "rdma-ns-roce"}}]}},
        "status": {
            "allocation": {"devices": {"results": results, "config": configs}},
            "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "pod-uid-1"}]
        }
    }))
    .unwrap()
}

const UID: &str = "0d6b5c1e-aaaa-4bbb-8ccc-000000000001";

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Prepare records the claim's device where the CNI finds it (netdev, lock key, the claim's
/// pods, the mode: the class's config under the claim's) and writes its CDI spec; doing it
/// again writes the same bytes; unprepare removes both, and the claim's lock file, and is
/// idempotent.
#[test]
fn prepare_records_the_device_and_writes_its_cdi_spec_idempotently() {
    let tmp = TempDir::new("dra-prepare");
    let fx = SysfsFixture::all().unwrap();
    let claims = node(&tmp, &fx);
    let c = claim(
        &[("rdma", "node-a", "mlx5-0-p1")],
        json!([
            {"source": "FromClaim", "opaque": {"driver": DRIVER_NAME, "parameters": {"mtu": 1500, "umad": true}}},
            {"source": "FromClass", "opaque": {"driver": DRIVER_NAME, "parameters": {"mtu": 9000, "rail": true}}},
            {"source": "FromClass", "opaque": {"driver": "gpu.example.com", "parameters": {"whatever": 1}}}
        ]),
    );
    let p = claims.prepare(&c).unwrap();
    assert_eq!(p.claim.uid, UID);
    assert_eq!(p.pod_uids, vec!["pod-uid-1".to_string()]);
    let d = &p.devices[0];
    assert_eq!(
        (d.device.as_str(), d.netdev.as_str(), d.kind.as_str()),
        ("mlx5-0-p1", "ens1f0np0", "roce")
    );
    assert_eq!(d.lock_key, "pci-0000:3b:00.0");
    assert_eq!(
        d.cdi_device_ids,
        vec![format!("rdma-ns.io/rdma={UID}-mlx5-0-p1")]
    );
    assert_eq!(
        serde_json::Value::Object(d.attach.clone()),
        json!({"mode": "macvlan", "mtu": 1500, "rail": true}),
        "the kind's default mode, the class's config, the claim's over it; umad is the driver's"
    );
    let store = ClaimStore::new(&claims.cfg.data_dir);
    assert_eq!(store.load(UID).unwrap().as_ref(), Some(&p));
    let spec_path = cdi::spec_path(&claims.cfg.cdi_dir, UID);
    let spec = std::fs::read(&spec_path).unwrap();
    assert!(
        String::from_utf8_lossy(&spec).contains("/dev/infiniband/umad0"),
        "umad asked"
    );
    let record = std::fs::read(
        claims
            .cfg
            .data_dir
            .join("_claims")
            .join(format!("{UID}.json")),
    )
    .unwrap();

    let again = claims.prepare(&c).unwrap();
    assert_eq!(again, p);
    assert_eq!(std::fs::read(&spec_path).unwrap(), spec);
    assert_eq!(
        std::fs::read(
            claims
                .cfg
                .data_dir
                .join("_claims")
                .join(format!("{UID}.json"))
        )
        .unwrap(),
        record
    );

    claims.unprepare(UID).unwrap();
    assert!(files(&claims.cfg.cdi_dir).is_empty());
    assert!(files(&claims.cfg.data_dir.join("_claims")).is_empty());
    claims.unprepare(UID).unwrap();
}

#[test]
fn the_claims_and_its_devices_lock_files_go_with_unprepare() {
    let tmp = TempDir::new("dra-locks");
    let fx = SysfsFixture::all().unwrap();
    let claims = node(&tmp, &fx);
    let c = claim(&[("rdma", "node-a", "mlx5-0-p1")], json!([]));
    claims.prepare(&c).unwrap();
    let locks = || files(&claims.cfg.data_dir.join("locks"));
    assert_eq!(
        locks(),
        [
            format!("claim-{UID}.lock"),
            "pci-0000:3b:00.0.lock".to_string()
        ],
        "the prepared claim's and its device's"
    );
    claims.unprepare(UID).unwrap();
    assert_eq!(locks(), Vec::<String>::new());
}

/// What the scheduler or a user can get wrong is refused with a message naming the claim, the
/// device and what to do, and nothing is written: a device of another node, a device the node
/// no longer has, an unknown config key, mode move on a shared device, a claim not allocated.
#[test]
fn bad_claims_are_refused_naming_what_and_nothing_is_written() {
    let tmp = TempDir::new("dra-refuse");
    let fx = SysfsFixture::all().unwrap();
    let claims = node(&tmp, &fx);
    let cases = [
        (
            claim(&[("rdma", "node-b", "mlx5-0-p1")], json!([])),
            vec!["node-b", "not to this node node-a", "trainer-rdma"],
        ),
        (
            claim(&[("rdma", "node-a", "mlx5-7-p1")], json!([])),
            vec!["mlx5-7-p1", "not on node node-a now"],
        ),
        (
            claim(
                &[("rdma", "node-a", "mlx5-0-p1")],
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER_NAME, "parameters": {"master": "eth0"}}}]),
            ),
            vec!["unknown key `master`", "FromClaim"],
        ),
        (
            claim(
                &[("rdma", "node-a", "mlx5-0-p1")],
                json!([{"source": "FromClass", "opaque": {"driver": DRIVER_NAME, "parameters": {"mode": "move"}}}]),
            ),
            vec!["mode move", "shared", "mlx5-0-p1"],
        ),
    ];
    for (c, parts) in cases {
        let e = claims.prepare(&c).unwrap_err();
        for part in &parts {
            assert!(e.to_string().contains(part), "{part}: {e}");
        }
        assert!(files(&claims.cfg.cdi_dir).is_empty(), "{e}");
        assert!(
            files(&claims.cfg.data_dir.join("_claims")).is_empty(),
            "{e}"
        );
    }
    let mut unallocated = claim(&[], json!([]));
    unallocated.status.as_mut().unwrap().allocation = None;
    let e = claims.prepare(&unallocated).unwrap_err();
    assert!(e.to_string().contains("not allocated"), "{e}");
    // The presence twin: the same node prepares a good claim.
    claims
        .prepare(&claim(&[("rdma", "node-a", "mlx5-0-p1")], json!([])))
        .unwrap();
    assert_eq!(files(&claims.cfg.cdi_dir).len(), 1);
}

/// Shared netns mode: a Soft-RoCE netdev gets a macvlan child with its own Soft-RoCE device,
/// and a share of a shared device (servers without consumable capacity) prepares as its
/// device; exclusive mode moves whole devices, a Soft-RoCE netdev with its rxe device.
#[test]
fn each_kind_gets_its_attach_mode() {
    let tmp = TempDir::new("dra-kinds");
    let fx = SysfsFixture::all().unwrap();
    let mut claims = node(&tmp, &fx);
    fx.write_attr("class/net/v1/carrier", "1").unwrap();
    claims.cfg.soft_roce_netdevs = vec!["v1".into()];
    let p = claims
        .prepare(&claim(
            &[
                ("a", "node-a", "softroce-v1"),
                ("b", "node-a", "mlx5-2-p1-s3"),
            ],
            json!([]),
        ))
        .unwrap();
    let soft = serde_json::Value::Object(p.devices[0].attach.clone());
    assert_eq!(soft, json!({"mode": "macvlan", "softRoce": true}));
    assert_eq!(
        (p.devices[1].device.as_str(), p.devices[1].netdev.as_str()),
        ("mlx5-2-p1-s3", "ens1f0v0")
    );
    fx.write_attr("module/ib_core/parameters/netns_mode", "N")
        .unwrap();
    let p = claims
        .prepare(&claim(
            &[("a", "node-a", "mlx5-2-p1"), ("b", "node-a", "softroce-v1")],
            json!([]),
        ))
        .unwrap();
    assert_eq!(p.devices[0].attach.get("mode"), Some(&json!("move")));
    let soft = serde_json::Value::Object(p.devices[1].attach.clone());
    assert_eq!(
        soft,
        json!({"mode": "move", "softRoce": true}),
        "exclusive mode moves the netdev"
    );
}
