//! The CNI's side of a claim beyond finding its device (attach/claim/): the pods the kubelet
//! added to a prepared claim (its checkpoint), and what an ADD reports into the claim's CDI
//! spec and DEL takes back.

use std::path::Path;

use serde_json::json;

use crate::attach::claim::kubelet::{self, CHECKPOINT_FILE};
use crate::attach::claim::report::{report_add, report_del, ClaimDirs};
use crate::attach::claim::{
    resolve_add, ClaimRef, ClaimStore, DraDevice, PreparedClaim, PreparedDevice,
};
use crate::attach::record::Attachment;
use crate::attach::tests::kit::{one_address, TestHost};
use crate::cni::env::RawEnv;
use crate::cni::{Command, NetConf, Request};
use crate::kernel::fake::POD;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::records::cdi;
use crate::testutil::TempDir;

/// A checkpoint as the v1.37.2 kubelet writes it (written by its own
/// pkg/kubelet/cm/dra/state.NewCheckpoint): claim 0d6b…01 prepared for pod-uid-1 and then
/// given pod-uid-2 without a second prepare; claim 7f0e…02 for pod-uid-3.
fn kubelet_checkpoint() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/attach/testdata/kubelet/dra_manager_state"
    ))
    .unwrap()
}

const SHARED: &str = "0d6b5c1e-aaaa-4bbb-8ccc-000000000001";

#[test]
fn the_kubelets_checkpoint_names_the_claims_of_a_pod() {
    let bytes = kubelet_checkpoint();
    assert_eq!(kubelet::parse(&bytes, "pod-uid-2").unwrap(), [SHARED]);
    assert_eq!(kubelet::parse(&bytes, "pod-uid-1").unwrap(), [SHARED]);
    assert_eq!(
        kubelet::parse(&bytes, "pod-uid-3").unwrap(),
        ["7f0e2d10-bbbb-4ccc-8ddd-000000000002"]
    );
    assert!(kubelet::parse(&bytes, "pod-uid-9").unwrap().is_empty());
    // A torn or edited file fails its checksum; another version is not read.
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let data = v["Data"]
        .as_str()
        .unwrap()
        .replace("pod-uid-2", "pod-uid-7");
    v["Data"] = data.clone().into();
    let e = kubelet::parse(v.to_string().as_bytes(), "pod-uid-7").unwrap_err();
    assert!(e.contains("checksum"), "{e}");
    assert!(kubelet::parse(b"{}", "pod-uid-2").is_err());
}

fn device(name: &str, kind: &str, ibdev: Option<&str>) -> PreparedDevice {
    PreparedDevice {
        request: "rdma".into(),
        pool: "node-a".into(),
        device: name.into(),
        share_id: None,
        kind: kind.into(),
        netdev: "ens2f0np0".into(),
        ibdev: ibdev.map(str::to_string),
        port: ibdev.map(|_| 1),
        pci_address: None,
        lock_key: "mac-x".into(),
        cdi_device_ids: vec![],
        attach: json!({"mode": "macvlan"}).as_object().unwrap().clone(),
        umad: false,
        rail: None,
        pods: Vec::new(),
    }
}

fn prepared(uid: &str, pods: &[&str], d: PreparedDevice) -> PreparedClaim {
    PreparedClaim {
        claim: ClaimRef {
            namespace: "team".into(),
            name: "shared-rdma".into(),
            uid: uid.into(),
        },
        pod_uids: pods.iter().map(|p| p.to_string()).collect(),
        extended_resource: false,
        devices: vec![d],
        allocation: String::new(),
        written_by: None,
    }
}

/// §4 of issue 39: a claim shared by two pods of a node. The kubelet prepared it for pod-uid-1
/// and only added pod-uid-2 to it (its checkpoint says so); pod-uid-2's ADD finds it before the
/// driver saw the claim change. Without the checkpoint, the record alone does not name it.
#[test]
fn a_second_pod_of_a_shared_claim_is_found_through_the_kubelets_checkpoint() {
    let kubelet_dir = TempDir::new("kubelet");
    let fields = format!(
        r#""dra":{{"kubeletDir":"{}"}}"#,
        kubelet_dir.path().display()
    );
    let w = TestHost::new("rdma-dra", "c2")
        .fields(&fields)
        .ipam(one_address("10.9.0.6/24"))
        .build();
    let claims = ClaimStore::new(w.store.dir());
    claims
        .save(&prepared(
            SHARED,
            &["pod-uid-1"],
            device("mlx5-0-p1", "roce", Some("mlx5_0")),
        ))
        .unwrap();
    let req = add_request(
        &w.conf(Command::Add),
        "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p2;K8S_POD_UID=pod-uid-2",
    );
    let e = resolve_add(&req, &claims).unwrap_err();
    assert_eq!(e.code(), 122, "{e}");
    std::fs::write(
        kubelet_dir.path().join(CHECKPOINT_FILE),
        kubelet_checkpoint(),
    )
    .unwrap();
    let (_, dra) = resolve_add(&req, &claims).unwrap().expect("a DRA network");
    assert_eq!(dra.claim.uid, SHARED);
    // A pod the checkpoint lists for another claim gets nothing of this one.
    let other = add_request(&w.conf(Command::Add), "K8S_POD_UID=pod-uid-3");
    assert_eq!(resolve_add(&other, &claims).unwrap_err().code(), 122);
}

fn add_request(conf: &str, args: &str) -> Request {
    let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c2"),
        ("CNI_NETNS", POD),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/nonexistent"),
        ("CNI_ARGS", args),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    Request {
        env: RawEnv::from_vars(vars).validate(Command::Add).unwrap(),
        conf: NetConf::parse(conf.as_bytes(), Command::Add).unwrap(),
        stdin: conf.as_bytes().to_vec(),
    }
}

/// A frozen record of `case` (records-schema-2) as the CNI writes it for claim device `dra`,
/// saved under `data`, with `soft_roce` as its Soft-RoCE step's ib device.
fn attachment(
    data: &Path,
    case: &str,
    file: &str,
    dra: &DraDevice,
    soft_roce: Option<&str>,
) -> Attachment {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/attach/testdata/records-schema-2")
            .join(case)
            .join(file),
    )
    .unwrap();
    let mut att: Attachment = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    att.conf = Some(
        json!({"cniVersion": "1.1.0", "name": att.network, "type": "rdma-ns", "draDevice": dra}),
    );
    if let Some(ib) = soft_roce {
        att.steps
            .set("softRoce", &json!({"ibdev": ib, "netdev": "net1"}))
            .unwrap();
    }
    crate::attach::store::Store::new(data).save(&att).unwrap();
    att
}

fn dra_of(claim: &PreparedClaim) -> DraDevice {
    let d = &claim.devices[0];
    DraDevice {
        claim: claim.claim.clone(),
        request: d.request.clone(),
        pool: d.pool.clone(),
        device: d.device.clone(),
        share_id: None,
        netdev: d.netdev.clone(),
    }
}

fn uverbs(cdi_dir: &Path, uid: &str) -> Vec<String> {
    let spec = cdi::read(cdi_dir, uid).unwrap().expect("a spec");
    spec.devices[0]
        .container_edits
        .device_nodes
        .iter()
        .filter(|n| n.path.contains("uverbs"))
        .map(|n| format!("{} {}:{}", n.path, n.major, n.minor))
        .collect()
}

/// A node's claims under a temp dir: its data dir, its CDI dir, and the fixture sysfs.
struct ClaimNode {
    fx: SysfsFixture,
    tmp: TempDir,
}

impl ClaimNode {
    fn new() -> ClaimNode {
        ClaimNode {
            fx: SysfsFixture::all().unwrap(),
            tmp: TempDir::new("claim-cdi"),
        }
    }
    fn data(&self) -> std::path::PathBuf {
        self.tmp.path().join("data")
    }
    fn cdi(&self) -> std::path::PathBuf {
        self.tmp.path().join("cdi")
    }
    fn report(&self, att: &Attachment, dra: &DraDevice, env: &[String]) {
        let (data, cdi) = (self.data(), self.cdi());
        let dirs = ClaimDirs {
            data_dir: &data,
            cdi_dir: &cdi,
        };
        report_add(self.fx.root(), &dirs, att, dra, env).unwrap();
    }
    fn unreport(&self, att: &Attachment) {
        let (data, cdi) = (self.data(), self.cdi());
        let dirs = ClaimDirs {
            data_dir: &data,
            cdi_dir: &cdi,
        };
        report_del(self.fx.root(), &dirs, att).unwrap();
    }
}

/// §1 of issue 39, and the Soft-RoCE path: ADD reports the node of the Soft-RoCE device it made
/// (its number the kernel's choice then), read from the host's sysfs, into the claim's spec
/// under the CDI dir the conf names, never a path a record names; a second ADD of the same
/// attachment replaces its report; DEL takes it back.
#[test]
fn add_reports_the_pods_soft_roce_node_into_its_claims_spec_and_del_takes_it_back() {
    let n = ClaimNode::new();
    let claims = ClaimStore::new(&n.data());
    // rxe0 is uverbs4 (231:196) in the fixture; before ADD the claim has no uverbs node.
    let soft = prepared("uid-soft", &["p"], device("softroce-v1", "soft-roce", None));
    claims.save(&soft).unwrap();
    // A record naming a file elsewhere (an earlier release's `cdiSpec`) is not followed.
    let victim = n.tmp.path().join("victim.json");
    std::fs::write(&victim, "{}").unwrap();
    let path = n.data().join("_claims/uid-soft.json");
    let mut raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    raw["cdiSpec"] = victim.display().to_string().into();
    std::fs::write(&path, raw.to_string()).unwrap();
    let att = attachment(
        &n.data(),
        "macvlan",
        "c1:net1.json",
        &dra_of(&soft),
        Some("rxe0"),
    );
    n.report(&att, &dra_of(&soft), &["NCCL_IB_GID_INDEX=1".into()]);
    assert_eq!(
        uverbs(&n.cdi(), "uid-soft"),
        ["/dev/infiniband/uverbs4 231:196"]
    );
    let spec = cdi::read(&n.cdi(), "uid-soft").unwrap().unwrap();
    let env = &spec.devices[0].container_edits.env;
    assert!(
        env.contains(&"RDMA_NS_IB_DEVICE=rxe0".into())
            && env.contains(&"NCCL_IB_GID_INDEX=1".into()),
        "{env:?}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "{}");
    n.report(&att, &dra_of(&soft), &[]);
    assert_eq!(
        claims.load("uid-soft").unwrap().unwrap().devices[0]
            .pods
            .len(),
        1
    );
    n.unreport(&att);
    assert!(
        uverbs(&n.cdi(), "uid-soft").is_empty(),
        "DEL took the pod's node back"
    );
    assert!(claims.load("uid-soft").unwrap().unwrap().devices[0]
        .pods
        .is_empty());
}

/// §3 of issue 39: in exclusive netns mode the claim's device moved into the pod, which
/// registered its char devices again under new numbers; ADD reports those (the host's sysfs
/// lists every uverbs node, whatever netns its device is in), replacing what prepare read.
#[test]
fn add_reports_a_moved_devices_new_numbers() {
    let n = ClaimNode::new();
    let whole = prepared(
        "uid-move",
        &["p"],
        device("mlx5-0-p1", "roce", Some("mlx5_0")),
    );
    ClaimStore::new(&n.data()).save(&whole).unwrap();
    let att = attachment(
        &n.data(),
        "move-exclusive-ib",
        "c9:net1.json",
        &dra_of(&whole),
        None,
    );
    let verbs = n.fx.path().join("class/infiniband_verbs");
    std::fs::remove_file(verbs.join("uverbs0")).unwrap();
    let moved = n.fx.path().join("devices/virtual/infiniband_verbs/uverbs7");
    std::fs::create_dir_all(&moved).unwrap();
    std::fs::write(moved.join("dev"), "231:199\n").unwrap();
    std::fs::write(moved.join("ibdev"), "mlx5_0\n").unwrap();
    std::os::unix::fs::symlink(&moved, verbs.join("uverbs7")).unwrap();
    n.report(&att, &dra_of(&whole), &[]);
    assert_eq!(
        uverbs(&n.cdi(), "uid-move"),
        ["/dev/infiniband/uverbs7 231:199"]
    );
}

/// Issue 40 §2: a pod written for the device plugin (its NAD names no claim) whose extended
/// resource was backed by DRA: its attachment is tied to the device of its extended-resource
/// claim on the same netdev; a claim device on another netdev refuses the ADD naming both; a
/// pod without such a claim (or with an ordinary one) is left as it was.
#[test]
fn a_device_plugin_pods_attachment_is_tied_to_its_extended_resource_claim() {
    let n = ClaimNode::new();
    let claims = ClaimStore::new(&n.data());
    let kubelet_dir = n.tmp.path().join("kubelet");
    // The frozen macvlan record's parent is ens1f0np0.
    let on = |netdev: &str| {
        let mut d = device("mlx5-0-p1", "roce", Some("mlx5_0"));
        d.netdev = netdev.into();
        d
    };
    let att = {
        let plain = prepared("uid-x", &[], on("x"));
        attachment(&n.data(), "macvlan", "c1:net1.json", &dra_of(&plain), None)
    };
    let find =
        |uid: &str| crate::attach::claim::extended::device_of(&claims, &kubelet_dir, uid, &att);
    let mut ordinary = prepared("uid-ordinary", &["pod-1"], on("ens1f0np0"));
    claims.save(&ordinary).unwrap();
    assert_eq!(
        find("pod-1").unwrap(),
        None,
        "an ordinary claim's device is the conf's business"
    );
    ordinary.claim.uid = "uid-extended".into();
    ordinary.extended_resource = true;
    claims.save(&ordinary).unwrap();
    let dra = find("pod-1")
        .unwrap()
        .expect("the extended claim's device on ens1f0np0");
    assert_eq!(
        (dra.claim.uid.as_str(), dra.netdev.as_str()),
        ("uid-extended", "ens1f0np0")
    );
    assert_eq!(find("pod-9").unwrap(), None, "another pod's claim");

    let mut elsewhere = prepared("uid-elsewhere", &["pod-2"], on("ens2f0np0"));
    elsewhere.extended_resource = true;
    claims.save(&elsewhere).unwrap();
    let e = find("pod-2").unwrap_err().to_string();
    for part in [
        "pod-2",
        "ens2f0np0",
        "attaches ens1f0np0",
        "netdev == \"ens1f0np0\"",
    ] {
        assert!(e.contains(part), "{part}: {e}");
    }
}
