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
            {"source": "FromClaim", "opaque": {"driver": DRIVER_NAME, "parameters": {"mtu": 1500}}},
            {"source": "FromClass", "opaque": {"driver": DRIVER_NAME, "parameters": {"mtu": 9000, "rail": true, "umad": true}}},
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
    assert!(d.umad);
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

/// §1 of issue 39: a claim's own config may set only what reaches no further than its pod. A
/// class-only key there refuses the claim, naming the key, the claim and the DeviceClass to use
/// instead, and nothing is written; the same key from the DeviceClass's config is taken; the
/// keys a claim may set are taken from it.
#[test]
fn a_claim_may_not_set_a_class_only_key() {
    let tmp = TempDir::new("dra-class-only");
    let fx = SysfsFixture::all().unwrap();
    let claims = node(&tmp, &fx);
    let from = |source: &str, params: serde_json::Value| {
        claim(
            &[("rdma", "node-a", "mlx5-0-p1")],
            json!([{"source": source, "opaque": {"driver": DRIVER_NAME, "parameters": params}}]),
        )
    };
    let class_only = [
        (
            "devicePermissions",
            json!({"rdma_cm": "0606"}),
            "ask a cluster admin",
        ),
        ("pkey", json!("0x8001"), "ask a cluster admin"),
        ("mode", json!("macvlan"), "ask a cluster admin"),
        ("softRoce", json!(true), "ask a cluster admin"),
        ("macvlanMode", json!("passthru"), "ask a cluster admin"),
        (
            "umad",
            json!(true),
            "use DeviceClass rdma-ns-roce-mad in place of DeviceClass rdma-ns-roce",
        ),
    ];
    for (key, value, instead) in class_only {
        let e = claims
            .prepare(&from("FromClaim", json!({key: value})))
            .unwrap_err();
        let msg = e.to_string();
        for part in [
            &format!("`{key}`"),
            "team/trainer-rdma",
            "only a DeviceClass",
            instead,
        ] {
            assert!(msg.contains(part), "{key}: {part:?} missing from: {msg}");
        }
        assert_eq!(e.code(), 7, "{msg}");
        assert!(files(&claims.cfg.cdi_dir).is_empty(), "{key}");
        assert!(
            files(&claims.cfg.data_dir.join("_claims")).is_empty(),
            "{key}"
        );
        // Its presence twin: the DeviceClass's config may.
        let p = claims
            .prepare(&from("FromClass", json!({key: value})))
            .unwrap();
        claims.unprepare(&p.claim.uid).unwrap();
    }
    let claim_keys =
        json!({"mtu": 1400, "rail": true, "ipoibMode": "connected", "umcast": true, "rdma": "off"});
    let p = claims.prepare(&from("FromClaim", claim_keys)).unwrap();
    assert_eq!(p.devices[0].attach["mtu"], 1400);
}

/// §2: the kubelet prepares a claim again after a restart (a restored claim is not prepared)
/// when it makes a pod's sandbox again. With the same allocation the record's answer comes
/// back and nothing is rewritten, whatever happened since (here the device left the host's
/// sysfs); with another allocation the claim is prepared anew.
#[test]
fn a_second_prepare_of_the_same_allocation_answers_from_the_record() {
    let tmp = TempDir::new("dra-reprepare");
    let fx = SysfsFixture::all().unwrap();
    let claims = node(&tmp, &fx);
    let c = claim(&[("rdma", "node-a", "mlx5-2-p1")], json!([]));
    let first = claims.prepare(&c).unwrap();
    let record = claims
        .cfg
        .data_dir
        .join("_claims")
        .join(format!("{UID}.json"));
    let spec = cdi::spec_path(&claims.cfg.cdi_dir, UID);
    let (record_bytes, spec_bytes) = (
        std::fs::read(&record).unwrap(),
        std::fs::read(&spec).unwrap(),
    );
    let mtime = |p: &std::path::Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let (record_time, spec_time) = (mtime(&record), mtime(&spec));
    // The VF's netdev went into a pod: the host's sysfs no longer has it.
    std::fs::remove_file(fx.path().join("class/net/ens1f0v0")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = claims.prepare(&c).unwrap();
    assert_eq!(again, first);
    assert_eq!(std::fs::read(&record).unwrap(), record_bytes);
    assert_eq!(std::fs::read(&spec).unwrap(), spec_bytes);
    assert_eq!(
        (mtime(&record), mtime(&spec)),
        (record_time, spec_time),
        "nothing rewritten"
    );

    // A spec lost with /var/run (a reboot) is rendered again from the record.
    std::fs::remove_file(&spec).unwrap();
    claims.prepare(&c).unwrap();
    assert_eq!(std::fs::read(&spec).unwrap(), spec_bytes);

    // Another allocation of the same claim is prepared anew.
    let other = claim(
        &[("rdma", "node-a", "mlx5-2-p1")],
        json!([{"source": "FromClass", "opaque": {"driver": DRIVER_NAME, "parameters": {"mtu": 9000}}}]),
    );
    let anew = claims.prepare(&other).unwrap();
    assert_ne!(anew.allocation, first.allocation);
    assert_eq!(anew.devices[0].attach["mtu"], 9000);
}

/// §5: two requests given one device with two shares (consumable capacity) get two CDI
/// devices, named with the share; the same device twice without shares is refused, naming the
/// claim and both requests, and nothing is written.
#[test]
fn two_shares_of_one_device_are_two_cdi_devices_and_a_device_twice_is_refused() {
    let tmp = TempDir::new("dra-shares");
    let fx = SysfsFixture::all().unwrap();
    let claims = node(&tmp, &fx);
    let shares = [
        "11111111-1111-4111-8111-111111111111",
        "22222222-2222-4222-8222-222222222222",
    ];
    let mut c = claim(
        &[("a", "node-a", "mlx5-0-p1"), ("b", "node-a", "mlx5-0-p1")],
        json!([]),
    );
    let twice = c.clone();
    let results = c
        .status
        .as_mut()
        .unwrap()
        .allocation
        .as_mut()
        .unwrap()
        .devices
        .as_mut()
        .unwrap()
        .results
        .as_mut()
        .unwrap();
    for (r, share) in results.iter_mut().zip(shares) {
        r.share_id = Some(share.into());
    }
    let p = claims.prepare(&c).unwrap();
    let ids: Vec<&str> = p
        .devices
        .iter()
        .map(|d| d.cdi_device_ids[0].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            format!("rdma-ns.io/rdma={UID}-mlx5-0-p1-{}", shares[0]),
            format!("rdma-ns.io/rdma={UID}-mlx5-0-p1-{}", shares[1])
        ]
    );
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cdi::spec_path(&claims.cfg.cdi_dir, UID)).unwrap())
            .unwrap();
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert_ne!(names[0], names[1]);
    claims.unprepare(UID).unwrap();

    let e = claims.prepare(&twice).unwrap_err().to_string();
    for part in ["team/trainer-rdma", "requests a and b", "mlx5-0-p1"] {
        assert!(e.contains(part), "{part}: {e}");
    }
    assert!(
        files(&claims.cfg.cdi_dir).is_empty()
            && files(&claims.cfg.data_dir.join("_claims")).is_empty()
    );
}
