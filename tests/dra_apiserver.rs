//! The driver against a real kube-apiserver (v1.37.2) and etcd on 127.0.0.1 (issue 31): what
//! it writes must pass the API server's own validation, not only our idea of it.
//! - install/dra/*.yaml (DeviceClasses with CEL, RBAC, the ValidatingAdmissionPolicy, the
//!   ConfigMap) are accepted;
//! - `rdma-ns-dra` on a fixture node publishes its ResourceSlice, and the server keeps every
//!   device, attribute and `allowMultipleAllocations` (consumable capacity is on in 1.37);
//! - a claim allocated one of its devices is prepared over the kubelet's socket from the claim
//!   the server holds; an attachment record the CNI would write makes the driver set the
//!   claim's `status.devices` (Ready, networkData, the RDMA facts), removing it clears them,
//!   and a failed ADD shows as a condition with rdma-ns's code.
//!
//! The binaries come from the lab's build (`install/lab/build.sh kubernetes`):
//! `~/.cache/rdma-ns/lab/bin/kubernetes-v1.37.2/` or `$RDMA_NS_KUBE_BIN`. Without them the test
//! fails, unless RDMA_NS_ALLOW_SKIP names `dra_apiserver`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::apiserver::{kube_bin, lab_kube_dir, repo, ApiServer};
use common::dra::{
    allocated_claim, create_rdma_claim, kubelet_call, kubelet_channel, patch_claim_status,
    set_reserved, start_driver, wait_for, write_attachment, write_attachment_of_share,
};
use rdma_ns::dra::proto::dra_v1::dra_plugin_client::DraPluginClient;
use rdma_ns::dra::proto::dra_v1::{Claim, NodePrepareResourcesRequest};
use rdma_ns::kernel::topology::fixtures::SysfsFixture;
use serde_json::{json, Value};

#[tokio::test]
async fn the_api_server_accepts_what_the_driver_publishes_and_writes() {
    let Some(bin) = kube_bin() else {
        let allowed = std::env::var("RDMA_NS_ALLOW_SKIP").unwrap_or_default();
        if allowed.split(',').any(|s| s == "dra_apiserver") {
            eprintln!("SKIP dra_apiserver: no kube-apiserver (allowed by RDMA_NS_ALLOW_SKIP)");
            return;
        }
        panic!(
            "no kube-apiserver, etcd and kubectl in {} (or $RDMA_NS_KUBE_BIN): build them with \
             install/lab/build.sh kubernetes, or set RDMA_NS_ALLOW_SKIP=dra_apiserver",
            lab_kube_dir().display()
        );
    };
    let api = ApiServer::start(bin);
    for f in ["deviceclasses.yaml", "rbac.yaml", "configmap.yaml"] {
        api.apply(&repo("install/dra").join(f));
    }
    // The documented claim templates (conf/dra/), matchAttribute and opaque config included.
    api.apply(&repo("conf/dra/resourceclaimtemplate.yaml"));
    let templates = api.get(&["resourceclaimtemplates", "-n", "default"]);
    assert_eq!(
        templates["items"].as_array().unwrap().len(),
        3,
        "{templates}"
    );
    let classes = api.get(&["deviceclasses"]);
    assert_eq!(classes["items"].as_array().unwrap().len(), 4, "{classes}");
    api.create_json(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}));

    let fx = SysfsFixture::all().unwrap();
    fx.write_attr("module/ib_core/parameters/netns_mode", "Y")
        .unwrap();
    let dir = api.dir.join("node");
    let cfg = json!({"dataDir": dir.join("data"), "cdiDir": dir.join("cdi"), "kubeletDir": dir.join("kubelet"), "resyncSeconds": 2});
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let mut driver = Command::new(env!("CARGO_BIN_EXE_rdma-ns-dra"))
        .arg("--config")
        .arg(dir.join("config.json"))
        .args(["--node-name", "node-a", "--log-level", "debug"])
        .env("KUBECONFIG", api.kubeconfig())
        .env("RDMA_NS_SYSFS_ROOT", fx.path())
        .stderr(std::fs::File::create(api.dir.join("driver.log")).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(api.dir.join("driver.log")).unwrap_or_default();

    // The slice, as the server stored it.
    wait_for("the ResourceSlice", || {
        api.kubectl(&["get", "resourceslice", "node-a.rdma-ns.io"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let slice = api.get(&["resourceslice", "node-a.rdma-ns.io"]);
    assert_eq!(slice["spec"]["nodeName"], "node-a");
    assert_eq!(
        slice["metadata"]["ownerReferences"][0]["name"], "node-a",
        "{slice}"
    );
    let devices = slice["spec"]["devices"].as_array().unwrap();
    let pf = devices
        .iter()
        .find(|d| d["name"] == "mlx5-0-p1")
        .unwrap_or_else(|| panic!("{slice}"));
    assert_eq!(
        pf["allowMultipleAllocations"], true,
        "consumable capacity kept: {pf}"
    );
    assert_eq!(
        pf["attributes"]["resource.kubernetes.io/pcieRoot"]["string"],
        "pci0000:3a"
    );
    assert_eq!(
        pf["attributes"]["k8s.cni.cncf.io/deviceID"]["string"],
        "rdma-ns:mlx5-0-p1"
    );
    assert_eq!(pf["attributes"]["ibDevice"]["string"], "mlx5_0");

    // A claim the scheduler allocated mlx5-0-p1, reserved for a pod.
    let uid = create_rdma_claim(&api);
    let status = json!({"status": {
        "allocation": {"devices": {"results": [{"request": "rdma", "driver": "rdma-ns.io", "pool": "node-a", "device": "mlx5-0-p1", "shareID": "2b7c9a40-0000-4000-8000-000000000001"}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "7f0e2d10-0000-4000-8000-000000000001"}]}});
    patch_claim_status(&api, &status);

    let channel = kubelet_channel(dir.join("kubelet/plugins/rdma-ns.io/dra.sock")).await;
    let prepared = DraPluginClient::new(channel)
        .node_prepare_resources(NodePrepareResourcesRequest {
            claims: vec![Claim {
                namespace: "default".into(),
                name: "rdma".into(),
                uid: uid.clone(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let answer = &prepared.claims[&uid];
    assert_eq!(answer.error, "", "{}", log());
    assert_eq!(
        answer.devices[0].share_id.as_deref(),
        Some("2b7c9a40-0000-4000-8000-000000000001")
    );

    // ADD (the record), then DEL (its removal), then a failed ADD: the claim's status follows.
    let record = write_attachment_of_share(
        &dir.join("data"),
        &uid,
        "mlx5-0-p1",
        Some("2b7c9a40-0000-4000-8000-000000000001"),
    );
    let claim_devices =
        || api.get(&["resourceclaim", "rdma", "-n", "default"])["status"]["devices"].clone();
    wait_for("Ready on the claim", || {
        claim_devices()[0]["conditions"][0]["status"] == "True"
    });
    let d = claim_devices()[0].clone();
    assert_eq!(d["driver"], "rdma-ns.io");
    assert_eq!(d["shareID"], "2b7c9a40-0000-4000-8000-000000000001");
    assert_eq!(d["networkData"]["interfaceName"], "net1", "{d}");
    assert_eq!(d["networkData"]["ips"], json!(["10.9.0.5/24"]));
    assert_eq!(d["networkData"]["hardwareAddress"], "42:75:18:bf:af:c2");
    assert_eq!(d["data"]["ibDevice"], "mlx5_0");
    assert_eq!(d["data"]["gidIndex"], 6);
    std::fs::remove_file(&record).unwrap();
    wait_for("the status cleared after DEL", || {
        claim_devices().as_array().map_or(true, |a| a.is_empty())
    });
    let failure = json!({"containerId": "c2", "ifname": "net1", "device": "mlx5-0-p1", "code": 110, "message": "parent ens1f0np0 is down"});
    std::fs::write(
        dir.join("data/_claims")
            .join(format!("{uid}.add-error.json")),
        failure.to_string(),
    )
    .unwrap();
    wait_for("AddFailed on the claim", || {
        claim_devices()[0]["conditions"][0]["reason"] == "AddFailed"
    });
    let msg = claim_devices()[0]["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("rdma-ns code 110") && msg.contains("is down"),
        "{msg}"
    );

    let _ = driver.kill();
    let _ = driver.wait();
    assert!(
        !log().contains("reconcile:"),
        "a reconcile failed: {}",
        log()
    );
}

/// Issue 39 against the real API server: a pod added to a prepared claim's reservedFor reaches
/// its record (§4); status entries go when the attachment goes after unprepare, and a claim made
/// again under the name gets none of the old one's (§8, the UID precondition as the server
/// applies it); the admission policy refuses a driver pod another driver's slice (§1); a pool of
/// 520 devices is five slices the server accepts (§7).
#[tokio::test]
async fn the_api_server_sees_shared_claims_cleared_status_own_slices_and_big_pools() {
    let Some(bin) = kube_bin() else {
        panic!("no kube-apiserver, etcd and kubectl in {}: build them with install/lab/build.sh kubernetes", lab_kube_dir().display());
    };
    let api = ApiServer::start(bin);
    for f in ["deviceclasses.yaml", "rbac.yaml", "configmap.yaml"] {
        api.apply(&repo("install/dra").join(f));
    }
    for node in ["node-a", "node-b"] {
        api.create_json(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
    }
    let fx = SysfsFixture::all().unwrap();
    fx.write_attr("module/ib_core/parameters/netns_mode", "Y")
        .unwrap();
    let dir = api.dir.join("node-a");
    let mut driver = start_driver(&api, "node-a", &fx, &dir, "driver-a.log");
    let log = || std::fs::read_to_string(api.dir.join("driver-a.log")).unwrap_or_default();
    let sock = dir.join("kubelet/plugins/rdma-ns.io/dra.sock");
    wait_for("node-a's slice", || {
        api.kubectl(&["get", "resourceslice", "node-a.rdma-ns.io"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let claim_devices =
        || api.get(&["resourceclaim", "rdma", "-n", "default"])["status"]["devices"].clone();
    let no_entries = |v: Value| v.as_array().map_or(true, |a| a.is_empty());

    // §4: the second pod of a shared claim reaches the record without a prepare.
    let uid = allocated_claim(&api, &["pod-1"]);
    assert_eq!(
        kubelet_call(sock.clone(), &uid, false).await,
        "",
        "{}",
        log()
    );
    let record = dir.join("data/_claims").join(format!("{uid}.json"));
    let pods = || {
        serde_json::from_slice::<Value>(&std::fs::read(&record).unwrap()).unwrap()["podUids"]
            .clone()
    };
    set_reserved(&api, &["pod-1", "pod-2"]);
    wait_for("pod-2 in the prepared claim's record", || {
        pods() == json!(["pod-1", "pod-2"])
    });

    // §8: unprepare before DEL; the entry goes with the attachment.
    let attachment = write_attachment(&dir.join("data"), &uid, "mlx5-0-p1");
    wait_for("Ready on the claim", || {
        claim_devices()[0]["conditions"][0]["status"] == "True"
    });
    assert_eq!(kubelet_call(sock.clone(), &uid, true).await, "");
    std::fs::remove_file(&attachment).unwrap();
    wait_for("the entry gone after unprepare then DEL", || {
        no_entries(claim_devices())
    });

    // §8: the claim made again under its name while the old one is prepared with its pod's
    // attachment, then a driver restart: the new claim gets nothing.
    let old = allocated_claim(&api, &["pod-1"]);
    assert_eq!(kubelet_call(sock.clone(), &old, false).await, "");
    write_attachment(&dir.join("data"), &old, "mlx5-0-p1");
    wait_for("Ready on the old claim", || {
        claim_devices()[0]["conditions"][0]["status"] == "True"
    });
    let new = allocated_claim(&api, &["pod-3"]);
    assert_ne!(new, old);
    let _ = driver.kill();
    let _ = driver.wait();
    driver = start_driver(&api, "node-a", &fx, &dir, "driver-a2.log");
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        no_entries(claim_devices()),
        "the new claim got the old one's entries: {}",
        claim_devices()
    );

    // §1: a driver pod's credentials may not write another driver's slice on its node.
    let slice = |driver: &str| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("node-a.{driver}-by-hand")},
        "spec": {"driver": driver, "nodeName": "node-a", "pool": {"name": "node-a", "generation": 0, "resourceSliceCount": 1}, "devices": []}})
    };
    let as_driver = |body: &Value| {
        let path = api.dir.join("slice.json");
        std::fs::write(&path, body.to_string()).unwrap();
        api.kubectl(&[
            "create",
            "--dry-run=server",
            "--as",
            "system:serviceaccount:kube-system:rdma-ns-dra",
            "--as-user-extra",
            "authentication.kubernetes.io/node-name=node-a",
            "-f",
        ])
        .arg(&path)
        .output()
        .unwrap()
    };
    let other = as_driver(&slice("gpu.example.com"));
    assert!(
        !other.status.success(),
        "another driver's slice: {}",
        String::from_utf8_lossy(&other.stdout)
    );
    assert!(
        String::from_utf8_lossy(&other.stderr)
            .contains("may only write ResourceSlices of driver rdma-ns.io"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let own = as_driver(&slice("rdma-ns.io"));
    assert!(
        own.status.success(),
        "its own driver's slice: {}",
        String::from_utf8_lossy(&own.stderr)
    );

    // §7: 8 PFs with 64 VFs each on node-b: five slices of one pool, as the server keeps them.
    let big = SysfsFixture::new().unwrap();
    big.roce_pfs_with_vfs(8, 64).unwrap();
    big.write_attr("module/ib_core/parameters/netns_mode", "N")
        .unwrap();
    let mut driver_b = start_driver(
        &api,
        "node-b",
        &big,
        &api.dir.join("node-b"),
        "driver-b.log",
    );
    let pool = || api.get(&["resourceslices", "--field-selector", "spec.nodeName=node-b"]);
    wait_for("node-b's five slices", || {
        pool()["items"].as_array().map_or(0, Vec::len) == 5
    });
    let items = pool()["items"].as_array().unwrap().clone();
    let devices: usize = items
        .iter()
        .map(|s| s["spec"]["devices"].as_array().unwrap().len())
        .sum();
    assert_eq!(devices, 520);
    assert!(items
        .iter()
        .all(|s| s["spec"]["pool"]["resourceSliceCount"] == 5
            && s["spec"]["pool"]["generation"] == 0));
    for d in [&mut driver, &mut driver_b] {
        let _ = d.kill();
        let _ = d.wait();
    }
    let logs = std::fs::read_to_string(api.dir.join("driver-a2.log")).unwrap_or_default();
    assert!(!logs.contains("reconcile:"), "a reconcile failed: {logs}");
}
