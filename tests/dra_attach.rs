//! The CNI binary attaching a pod's prepared DRA claim (issue 31, §4), exec'd as the runtime
//! execs it, in real network namespaces, with the prepared-claim record the driver writes at
//! NodePrepareResources (written here with the library's own type, as the driver does):
//! - Multus's DRA path: `deviceID` `rdma-ns:<device>`, CNI_IFNAME net1;
//! - standalone: rdma-ns chained after the primary plugin in the runtime's own conflist
//!   (`dra.ifname`, `dra.optional`), its result appended to the primary's, and a pod without a
//!   claim passed through;
//! - a pod without a prepared claim refused with code 122 and nothing made;
//! - the claim's CDI spec, under the conf's `dra.cdiDir`, holding what ADD reported of the pod
//!   and losing it at DEL;
//! - GC of the standalone conflist through libcni's own GC (the lab's libcni-run, built by
//!   install/lab/build.sh libcni), as a runtime calls it: valid attachments named by the
//!   runtime's interface (eth0) keep their net1.
//!
//! The claim's device is a veth standing in for a RoCE netdev; the claim says macvlan.

mod common;

use common::*;
use rdma_ns::attach::claim::{ClaimRef, ClaimStore, PreparedClaim, PreparedDevice};
use serde_json::{json, Value};

const POD_UID: &str = "5d1c7e2a-0000-4000-8000-0000000000aa";

/// The record rdma-ns-dra writes for a claim of `netdev`, reserved for POD_UID.
fn prepare(data: &DataDir, netdev: &str) {
    let device = PreparedDevice {
        request: "rdma".into(),
        pool: "node-a".into(),
        device: "roce-a".into(),
        share_id: None,
        kind: "roce".into(),
        netdev: netdev.into(),
        ibdev: None,
        port: None,
        pci_address: None,
        lock_key: format!("mac-{netdev}"),
        cdi_device_ids: vec![],
        attach: json!({"mode": "macvlan", "mtu": 1400})
            .as_object()
            .unwrap()
            .clone(),
        umad: false,
        rail: None,
        pods: Vec::new(),
    };
    let claim = PreparedClaim {
        claim: ClaimRef {
            namespace: "team".into(),
            name: "trainer-rdma".into(),
            uid: "c1a1-uid".into(),
        },
        pod_uids: vec![POD_UID.into()],
        extended_resource: false,
        devices: vec![device],
        allocation: String::new(),
        written_by: None,
    };
    ClaimStore::new(std::path::Path::new(&data.state()))
        .save(&claim)
        .unwrap();
}

/// The conf of a DRA network: `dra` (true or an object) with the CDI dir under `data`.
fn conf(data: &DataDir, dra: Value, address: &str) -> Value {
    let mut dra = match dra {
        Value::Bool(true) => json!({}),
        other => other,
    };
    dra["cdiDir"] = cdi_dir(data).into();
    json!({
        "cniVersion": "1.0.0",
        "name": "rdma-dra",
        "type": "rdma-ns",
        "dra": dra,
        "dataDir": data.state(),
        "ipam": static_ipam(address),
    })
}

fn cdi_dir(data: &DataDir) -> String {
    data.path().join("cdi").display().to_string()
}

/// The environment of the claim's CDI device, as the runtime will read it; None without a spec.
fn spec_env(data: &DataDir) -> Option<Vec<String>> {
    let path = std::path::Path::new(&cdi_dir(data)).join("rdma-ns.io-c1a1-uid.json");
    let spec: Value = serde_json::from_slice(&std::fs::read(path).ok()?).unwrap();
    let env = spec["devices"][0]["containerEdits"]["env"].as_array()?;
    Some(
        env.iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect(),
    )
}

/// The attachment records under the data dir (the prepared claims' `_claims/` aside).
fn attachments(data: &DataDir) -> Vec<std::path::PathBuf> {
    let claims = data.path().join("state").join("_claims");
    data.records()
        .into_iter()
        .filter(|r| !r.starts_with(&claims))
        .collect()
}

fn args(uid: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=trainer-0;K8S_POD_UID={uid}")
}

/// Multus with DRA: the device's deviceID, the pod's UID; net1 is a macvlan child of the
/// claim's netdev with the claim's MTU, its record names the claim; DEL removes it all.
#[test]
fn multus_attaches_the_claims_device_by_its_device_id() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    prepare(&data, &veth.nic);
    let mut c = conf(&data, json!(true), "10.77.0.2/24");
    c["deviceID"] = "rdma-ns:roce-a".into();
    c["pciBusID"] = "rdma-ns:roce-a".into();
    let mut add = Call::new("ADD", "ctr-multus", &ns.path(), "net1");
    add.args = args(POD_UID);
    let result = add.run(&c).ok().json();
    assert_eq!(result["interfaces"][0]["name"], "net1", "{result}");
    let link = ns.link("net1").expect("net1 in the pod");
    assert_eq!(link["mtu"], 1400, "{link}");
    assert_eq!(link["linkinfo"]["info_kind"], "macvlan", "{link}");
    assert_eq!(ns.addrs("net1"), ["10.77.0.2/24"]);
    let records = attachments(&data);
    assert_eq!(records.len(), 1, "{records:?}");
    let text = std::fs::read_to_string(&records[0]).unwrap();
    assert!(
        text.contains("\"draDevice\"") && text.contains("c1a1-uid"),
        "{text}"
    );
    let reported = || {
        let claim: Value = serde_json::from_slice(
            &std::fs::read(data.path().join("state/_claims/c1a1-uid.json")).unwrap(),
        )
        .unwrap();
        claim["devices"][0]["pods"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(reported(), 1, "ADD reported the pod to its claim");
    let env = spec_env(&data).expect("the claim's spec under dra.cdiDir");
    assert!(
        env.contains(&"RDMA_NS_DEVICE=roce-a".to_string()),
        "{env:?}"
    );

    let mut del = Call::new("DEL", "ctr-multus", &ns.path(), "net1");
    del.args = args(POD_UID);
    del.run(&c).ok();
    assert!(ns.link("net1").is_none());
    assert!(attachments(&data).is_empty());
    assert_eq!(reported(), 0, "DEL took the report back");
    assert!(
        host_link(&veth.nic).is_some(),
        "the parent stays in the host"
    );
}

/// Without Multus: chained after the primary plugin (CNI_IFNAME eth0, its prevResult), the pod
/// gets net1 and the result lists eth0's interface and IP first; DEL with eth0 removes net1.
/// A pod without a claim passes through with the primary's result and nothing made.
#[test]
fn standalone_chain_adds_net1_after_the_primary_and_passes_pods_without_claims() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    prepare(&data, &veth.nic);
    // The rdma-ns entry of the documented conflist, its IPAM and data dir this test's.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/conf/dra/standalone.conflist"
    ))
    .unwrap();
    let list: Value = serde_json::from_str(&text).unwrap();
    let entry = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "rdma-ns")
        .unwrap();
    assert_eq!(entry["dra"], json!({"ifname": "net1", "optional": true}));
    let mut c = conf(&data, entry["dra"].clone(), "10.78.0.2/24");
    c["cniVersion"] = list["cniVersion"].clone();
    c["name"] = list["name"].clone();
    c["prevResult"] = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": ns.path()}],
        "ips": [{"address": "10.244.1.5/24", "interface": 0}]
    });
    let mut add = Call::new("ADD", "ctr-chain", &ns.path(), "eth0");
    add.args = args(POD_UID);
    let result = add.run(&c).ok().json();
    let names: Vec<&str> = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["eth0", "net1"], "{result}");
    assert_eq!(result["ips"][0]["address"], "10.244.1.5/24");
    assert_eq!(result["ips"][1]["address"], "10.78.0.2/24");
    assert_eq!(result["ips"][1]["interface"], 1, "{result}");
    assert!(ns.link("net1").is_some());
    assert!(
        ns.link("eth0").is_none(),
        "the primary's interface is the primary's"
    );

    let mut del = Call::new("DEL", "ctr-chain", &ns.path(), "eth0");
    del.args = args(POD_UID);
    del.run(&c).ok();
    assert!(ns.link("net1").is_none());
    assert!(attachments(&data).is_empty());

    let other = TestNetns::new();
    let mut plain = Call::new("ADD", "ctr-plain", &other.path(), "eth0");
    plain.args = args("0f0f0f0f-0000-4000-8000-000000000000");
    let passed = plain.run(&c).ok().json();
    assert_eq!(
        passed["interfaces"], c["prevResult"]["interfaces"],
        "{passed}"
    );
    assert_eq!(passed["ips"], c["prevResult"]["ips"], "{passed}");
    assert!(other.link("net1").is_none());
    assert!(attachments(&data).is_empty());
}

/// A DRA network for a pod without a prepared claim: code 122 naming the pod, no interface,
/// no record, no address held; the same pod with its claim prepared then attaches.
#[test]
fn a_pod_without_a_prepared_claim_gets_122_and_nothing_changes() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let c = conf(&data, json!(true), "10.79.0.2/24");
    let mut add = Call::new("ADD", "ctr-none", &ns.path(), "net1");
    add.args = args(POD_UID);
    let msg = add.run(&c).err(122);
    assert!(
        msg.contains(POD_UID) && msg.contains("nothing was changed"),
        "{msg}"
    );
    assert!(ns.link("net1").is_none());
    assert!(attachments(&data).is_empty());

    prepare(&data, &veth.nic);
    add.run(&c).ok();
    assert!(ns.link("net1").is_some());
    let mut del = Call::new("DEL", "ctr-none", &ns.path(), "net1");
    del.args = args(POD_UID);
    del.run(&c).ok();
}

/// libcni-run (tests/support/libcni), built by `install/lab/build.sh libcni` into the lab's
/// cache (`$RDMA_NS_LAB_CACHE`, default ~/.cache/rdma-ns/lab, `bin/libcni-<version>`).
fn libcni_run() -> std::path::PathBuf {
    let bin = apiserver::lab_bin_dir("libcni").join("libcni-run");
    assert!(
        bin.exists(),
        "{} is missing: build it with install/lab/build.sh libcni (tests/run.sh does)",
        bin.display()
    );
    bin
}

/// libcni-run `cmd` over `list` with `extra` flags; its stdout, or a failure with its stderr.
fn libcni(data: &DataDir, list: &std::path::Path, cmd: &str, extra: &[&str]) -> String {
    let plugin_dir = std::path::Path::new(PLUGIN)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let bin_dirs = format!("{plugin_dir}:{}/tests/support", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(libcni_run())
        .arg(cmd)
        .args([
            "--conflist",
            &list.display().to_string(),
            "--bin-dir",
            &bin_dirs,
        ])
        .args([
            "--cache-dir",
            &data.path().join("libcni-cache").display().to_string(),
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "libcni-run {cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// §6 of issue 39: GC of the standalone conflist (at cniVersion 1.1.0, where libcni sends GC)
/// through libcni's GCNetworkList, as a runtime calls it: the runtime names its sandboxes'
/// attachments by its interface (eth0), rdma-ns recorded net1. A live pod keeps its net1; an
/// attachment the runtime does not list (left by a sandbox libcni never finished) is released;
/// a GC without the pod releases it too.
#[test]
fn gc_through_libcni_keeps_every_attachment_the_runtime_lists() {
    let veth = Veth::new();
    let (live, stale) = (TestNetns::new(), TestNetns::new());
    let data = DataDir::new();
    prepare(&data, &veth.nic);
    let mut entry = conf(
        &data,
        json!({"ifname": "net1", "optional": true}),
        "10.81.0.2/24",
    );
    entry.as_object_mut().unwrap().remove("cniVersion");
    entry.as_object_mut().unwrap().remove("name");
    entry["ipam"] = test_ipam("10.81.0.2/24", &data);
    let list = json!({"cniVersion": "1.1.0", "name": "k8s-pod-network", "plugins": [entry]});
    let path = data.path().join("standalone.conflist");
    std::fs::write(&path, list.to_string()).unwrap();
    let uid = format!("K8S_POD_NAMESPACE=team;K8S_POD_NAME=trainer-0;K8S_POD_UID={POD_UID}");
    let netns = live.path();
    libcni(
        &data,
        &path,
        "add",
        &[
            "--container",
            "ctr-live",
            "--netns",
            &netns,
            "--ifname",
            "eth0",
            "--args",
            &uid,
        ],
    );
    assert!(live.link("net1").is_some());
    // An attachment whose sandbox the runtime no longer lists, which libcni never cached.
    let mut leftover = list["plugins"][0].clone();
    leftover["cniVersion"] = "1.1.0".into();
    leftover["name"] = "k8s-pod-network".into();
    let mut add = Call::new("ADD", "ctr-stale", &stale.path(), "eth0");
    add.args = args(POD_UID);
    add.run(&leftover).ok();
    assert!(stale.link("net1").is_some());

    libcni(&data, &path, "gc", &["--valid", "ctr-live/eth0"]);
    assert!(
        live.link("net1").is_some(),
        "GC released the live pod's net1"
    );
    assert!(
        stale.link("net1").is_none(),
        "GC kept an attachment no sandbox has"
    );
    assert_eq!(attachments(&data).len(), 1);

    libcni(&data, &path, "gc", &[]);
    assert!(live.link("net1").is_none());
    assert!(attachments(&data).is_empty());
}

/// The claim's record and spec as they are on disk, by path under the data dir.
fn claim_files(data: &DataDir) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in [data.path().join("state/_claims"), data.path().join("cdi")] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_file() && !name.starts_with('.') {
                out.push((name, std::fs::read_to_string(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// An ADD killed anywhere, then the two DELs a runtime sends: no net1, no attachment, and the
/// claim's record and spec as a finished DEL leaves them.
fn assert_released(ns: &TestNetns, data: &DataDir, after_del: &[(String, String)], when: &str) {
    assert!(ns.link("net1").is_none(), "{when}: net1 left in the pod");
    assert!(
        attachments(data).is_empty(),
        "{when}: {:?}",
        attachments(data)
    );
    assert_eq!(claim_files(data), after_del, "{when}");
}

/// Issue 39 §10: the plugin killed while it reports the pod to its claim (after the claim's
/// record took the report, after the spec did) and at random instants of a claim's ADD. The
/// runtime's DELs then leave the claim as an unkilled ADD and DEL leave it, and an ADD again
/// writes what an unkilled ADD writes.
#[test]
fn an_add_killed_while_it_reports_to_its_claim_leaves_the_claim_clean_after_del() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    prepare(&data, &veth.nic);
    let c = conf(&data, json!(true), "10.82.0.2/24");
    let call = |command: &str| {
        let mut call = Call::new(command, "ctr-kill", &ns.path(), "net1");
        call.args = args(POD_UID);
        call
    };
    let started = std::time::Instant::now();
    call("ADD").run(&c).ok();
    let took = started.elapsed();
    let after_add = claim_files(&data);
    call("DEL").run(&c).ok();
    let after_del = claim_files(&data);
    assert_ne!(
        after_add, after_del,
        "ADD reports the pod, DEL takes it back"
    );
    for point in ["claim-report-record", "claim-report-spec"] {
        let killed = call("ADD").env("RDMA_NS_TEST_KILL_AT", point).run(&c);
        assert_eq!(killed.code, -1, "{point}: {}", killed.stdout);
        for _ in 0..2 {
            call("DEL").run(&c).ok();
        }
        assert_released(&ns, &data, &after_del, point);
        call("ADD").run(&c).ok();
        assert_eq!(claim_files(&data), after_add, "{point}: the ADD after");
        call("DEL").run(&c).ok();
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(std::process::id());
    for round in 0..20 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let at = std::time::Duration::from_micros(rng % (2 * took.as_micros() as u64 + 1));
        let mut child = call("ADD").spawn(&c);
        std::thread::sleep(at);
        let _ = child.kill();
        let _ = child.wait();
        for _ in 0..2 {
            call("DEL").run(&c).ok();
        }
        assert_released(
            &ns,
            &data,
            &after_del,
            &format!("round {round}, killed at {at:?}"),
        );
    }
}
