//! VM-tier cases of the plugin on a real RDMA kernel (Debian 6.1 with Soft-RoCE). They run only
//! inside the VM (tests/vm/run.sh; the host tier skips `vm_*`), where each case starts with
//! rxe0 over the veth rxev0 (peer rxev1), an empty netns `vmpod` and shared netns mode.

mod common;
mod vm_support;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use vm_support::{record, record_exists, switch_to_exclusive, sysfs_gid_index, Budget};

const POD: &str = "/run/netns/vmpod";

fn macvlan_conf(extra: Value) -> Value {
    let mut conf = json!({"cniVersion": "1.0.0", "name": "vmroce", "type": "rdma-ns", "mode": "macvlan",
        "master": "rxev0", "dataDir": state_dir(),
        "ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24"}]}});
    for (k, v) in extra.as_object().unwrap() {
        conf[k] = v.clone();
    }
    conf
}

#[test]
fn vm_macvlan_on_rxe_reports_the_gid_index_the_kernel_chose() {
    let log = format!("{}/gid.log", scratch());
    let conf = macvlan_conf(json!({"logFile": log, "logLevel": "info"}));
    let add = Call::new("ADD", "gidpod", POD, "net1").run(&conf);
    add.ok();
    let rec = record("vmroce", "gidpod", "net1");
    let gid = &rec["gids"][0];
    assert_eq!(gid["ibdev"], "rxe0", "{rec}");
    assert_eq!(gid["ip"], "10.9.0.5", "{rec}");
    assert_eq!(gid["gidType"], "RoCE v2", "{rec}");
    let kernel_index = sysfs_gid_index("rxe0", "0000:0000:0000:0000:0000:ffff:0a09:0005", "net1")
        .expect("the kernel added the pod IP's GID on net1");
    assert_eq!(
        gid["index"], kernel_index,
        "the plugin reports exactly the kernel's index: {rec}"
    );
    eprintln!("pod IP 10.9.0.5 on net1: GID index {kernel_index}");
    // The operator setting NCCL_IB_GID_INDEX by hand reads it in the log too.
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let want = format!("net1: 10.9.0.5 has GID index {kernel_index} (RoCE v2) on rxe0 port 1");
    assert!(logged.contains(&want), "want {want:?} in the log: {logged}");

    let mut with_prev = conf.clone();
    with_prev["prevResult"] = add.json();
    Call::new("CHECK", "gidpod", POD, "net1")
        .run(&with_prev)
        .ok();
    // The kernel drops the GID with the address: CHECK must notice.
    sh(&[
        "ip",
        "-n",
        "vmpod",
        "addr",
        "del",
        "10.9.0.5/24",
        "dev",
        "net1",
    ]);
    let msg = Call::new("CHECK", "gidpod", POD, "net1")
        .run(&with_prev)
        .err(108);
    assert!(msg.contains("10.9.0.5"), "{msg}");
    Call::new("DEL", "gidpod", POD, "net1").run(&conf).ok();
    assert!(link_in(Some("vmpod"), "net1").is_none());
}

#[test]
fn vm_macvlan_on_rxe_del_after_the_pod_netns_was_deleted() {
    let conf = macvlan_conf(json!({}));
    let ns = TestNetns::new();
    // Attachment records of network vmroce: a missing dir holds none, so the count alone could
    // pass with a wrong path; it must see the record while attached.
    let records = || {
        std::fs::read_dir(format!("{}/vmroce", state_dir()))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    Call::new("ADD", "gonepod", &ns.path(), "net1")
        .run(&conf)
        .ok();
    assert_eq!(records(), 1, "the record while attached");
    let path = ns.path();
    ns.delete();
    Call::new("DEL", "gonepod", &path, "net1").run(&conf).ok();
    Call::new("DEL", "gonepod", "", "net1").run(&conf).ok();
    assert_eq!(records(), 0, "no record after DEL");
}

fn char_dev_of(class: &str, prefix: &str, ibdev: &str) -> String {
    for e in std::fs::read_dir(format!("/sys/class/{class}"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix)
            && std::fs::read_to_string(e.path().join("ibdev"))
                .map(|s| s.trim() == ibdev)
                .unwrap_or(false)
        {
            return format!("/dev/infiniband/{name}");
        }
    }
    panic!("no {prefix} device for {ibdev}");
}

fn mode_of(path: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn vm_device_permissions_on_real_char_devices_are_set_and_restored() {
    let uverbs = char_dev_of("infiniband_verbs", "uverbs", "rxe0");
    let umad = char_dev_of("infiniband_mad", "umad", "rxe0");
    let (uverbs_before, umad_before) = (mode_of(&uverbs), mode_of(&umad));
    let conf = macvlan_conf(json!({"devicePermissions": {"uverbs": "0600", "umad": "0660"}}));
    Call::new("ADD", "permpod", POD, "net1").run(&conf).ok();
    assert_eq!(mode_of(&uverbs), 0o600, "{uverbs}");
    assert_eq!(mode_of(&umad), 0o660, "{umad}");
    Call::new("DEL", "permpod", POD, "net1").run(&conf).ok();
    assert_eq!(
        (mode_of(&uverbs), mode_of(&umad)),
        (uverbs_before, umad_before),
        "restored"
    );
}

#[test]
fn vm_ipoib_needs_an_infiniband_parent() {
    let conf = json!({"cniVersion": "1.0.0", "name": "vmib", "type": "rdma-ns", "mode": "ipoib",
        "master": "rxev0", "pkey": "0x8001", "dataDir": state_dir()});
    let msg = Call::new("ADD", "ibpod", POD, "ib0").run(&conf).err(110);
    assert!(msg.contains("rxev0") && msg.contains("IPoIB"), "{msg}");
    assert!(link_in(Some("vmpod"), "ib0").is_none());
}

/// How long the cases here wait for the switch to exclusive mode (the runner switches back).
const EXCLUSIVE_SWITCH: Budget = Budget::Checks {
    checks: 200,
    every: Duration::from_millis(50),
};

#[test]
fn vm_exclusive_mode_refused_ib_move_leaves_the_host_exactly_as_before() {
    switch_to_exclusive(EXCLUSIVE_SWITCH);
    sh(&["ip", "addr", "add", "192.0.2.1/24", "dev", "rxev0"]);
    sh(&["ip", "link", "set", "rxev0", "mtu", "1400"]);
    let before = host_view("rxev0");
    let ifindex = host_link("rxev0").unwrap()["ifindex"].clone();
    // rxe0 as the rdma tool sees it: its port, state and netdev.
    let rxe_before = sh(&["rdma", "link", "show", "rxe0/1"]);
    assert!(rxe_before.contains("netdev rxev0"), "{rxe_before}");
    let ns = TestNetns::new();
    for rdma in ["auto", "exclusive"] {
        let conf = json!({"cniVersion": "1.0.0", "name": "vmexcl", "type": "rdma-ns", "mode": "move",
            "device": "rxev0", "rdma": rdma, "dataDir": state_dir(),
            "ipam": {"type": "static", "addresses": [{"address": "10.9.1.2/24"}]}});
        let msg = Call::new("ADD", "exclpod", &ns.path(), "net1")
            .run(&conf)
            .err(105);
        assert!(
            msg.contains("rxe0") && msg.contains("rdma_rxe"),
            "names device and driver: {msg}"
        );
        assert!(
            msg.contains("Operation not supported") && msg.contains("disassociate"),
            "says why: {msg}"
        );
        assert_eq!(
            host_view("rxev0"),
            before,
            "rdma={rdma}: the netdev is as before"
        );
        assert_eq!(
            host_link("rxev0").unwrap()["ifindex"],
            ifindex,
            "rdma={rdma}: the same netdev, not a new one"
        );
        assert_eq!(
            sh(&["rdma", "link", "show", "rxe0/1"]),
            rxe_before,
            "rdma={rdma}: rxe0 as before"
        );
        assert!(ns.link("net1").is_none() && ns.link("rxev0").is_none());
    }
    ns.delete();
}

#[test]
fn vm_chained_mode_error_paths_on_rxe() {
    let prev =
        json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": POD}], "ips": []});
    let conf = json!({"cniVersion": "1.0.0", "name": "vmchain", "type": "rdma-ns", "mode": "rdma",
        "dataDir": state_dir(), "prevResult": prev});
    let msg = Call::new("ADD", "chainpod", POD, "net1")
        .run(&conf)
        .err(120);
    assert!(
        msg.contains("shared") && msg.contains("netns_mode=0"),
        "{msg}"
    );

    switch_to_exclusive(EXCLUSIVE_SWITCH);
    let ns = TestNetns::new();
    sh(&[
        "ip", "link", "add", "chainv0", "type", "veth", "peer", "name", "chainv1",
    ]);
    sh(&[
        "ip", "link", "set", "chainv0", "netns", &ns.name, "name", "net1",
    ]);
    let mut conf = conf.clone();
    conf["prevResult"]["interfaces"][0]["sandbox"] = json!(ns.path());
    let msg = Call::new("ADD", "chainpod", &ns.path(), "net1")
        .run(&conf)
        .err(100);
    assert!(
        msg.contains("no PCI parent") && msg.contains("deviceID"),
        "{msg}"
    );
    ns.delete();
    let _ = sh_ok(&["ip", "link", "del", "chainv1"]);
}

/// What Multus gives a macvlan NAD of the RDMA shared device plugin's resource (its index in
/// deviceID and pciBusID), with the parent named by its ib device: the pod's device-info file
/// names rxe0, which has no PCI function, so it carries no pci-address.
#[test]
fn vm_macvlan_by_rdma_device_writes_device_info_naming_rxe0() {
    let devinfo = DevinfoDir::new();
    let info = format!("{}/cni/vmpod-net1.json", devinfo.path().display());
    let mut conf = macvlan_conf(
        json!({"rdmaDevice": "rxe0", "deviceID": "0", "pciBusID": "0",
        "capabilities": {"CNIDeviceInfoFile": true},
        "runtimeConfig": {"CNIDeviceInfoFile": info}}),
    );
    conf.as_object_mut().unwrap().remove("master");
    Call::new("ADD", "infopod", POD, "net1").run(&conf).ok();
    let rec = record("vmroce", "infopod", "net1");
    assert_eq!(
        rec["host"]["name"], "rxev0",
        "rdmaDevice rxe0 names rxev0: {rec}"
    );
    assert_eq!(rec["deviceId"], "0", "{rec}");
    assert_eq!(rec["deviceInfoFile"], info.as_str(), "{rec}");
    let written: Value = serde_json::from_slice(&std::fs::read(&info).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"type": "pci", "version": "1.1.0", "pci": {"rdma-device": "rxe0"}})
    );
    assert!(link_in(Some("vmpod"), "net1").is_some());
    Call::new("DEL", "infopod", POD, "net1").run(&conf).ok();
    assert!(!std::path::Path::new(&info).exists(), "removed on DEL");
    assert!(link_in(Some("vmpod"), "net1").is_none());
}

/// In exclusive netns mode a child would give the pod a netdev and no ib device: both child modes
/// are refused with 120 and leave nothing; `"rdma": "off"` attaches the netdev alone.
#[test]
fn vm_child_modes_are_refused_in_exclusive_netns_mode() {
    switch_to_exclusive(EXCLUSIVE_SWITCH);
    let ns = TestNetns::new();
    for mode in ["macvlan", "ipoib"] {
        let mut conf = macvlan_conf(json!({"mode": mode}));
        conf["name"] = json!(format!("vmx{mode}"));
        let msg = Call::new("ADD", "xpod", &ns.path(), "net1")
            .run(&conf)
            .err(120);
        assert!(
            msg.contains("exclusive") && msg.contains("shared device plugin"),
            "{mode}: {msg}"
        );
        assert!(ns.link("net1").is_none(), "{mode}: no child");
        assert!(
            !record_exists(&format!("vmx{mode}"), "xpod", "net1"),
            "{mode}: no record"
        );
    }
    let conf = macvlan_conf(json!({"rdma": "off"}));
    Call::new("ADD", "xpod", &ns.path(), "net1").run(&conf).ok();
    assert!(ns.link("net1").is_some(), "rdma off: the netdev alone");
    assert!(
        record_exists("vmroce", "xpod", "net1"),
        "the probe finds a record that exists"
    );
    Call::new("DEL", "xpod", &ns.path(), "net1").run(&conf).ok();
    assert!(ns.link("net1").is_none());
    ns.delete();
}
