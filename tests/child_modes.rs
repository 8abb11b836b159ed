//! Root integration tests of the child-interface modes on the host kernel: macvlan children of a
//! veth standing in for a RoCE netdev, created directly in the pod; the IPoIB parent checks
//! (this kernel has no InfiniBand; the VM tier covers the real kernel's refusal).

mod common;

use common::*;
use serde_json::{json, Value};

fn macvlan_conf(version: &str, master: &str, data: &DataDir) -> Value {
    json!({"cniVersion": version, "name": "mvnet", "type": "rdma-ns", "mode": "macvlan",
           "master": master, "dataDir": data.state(),
           "ipam": {"type": "static", "addresses": [{"address": "10.90.0.5/24"}]}})
}

#[test]
fn macvlan_child_is_created_in_the_pod_checked_and_deleted() {
    let (ns, veth, data) = veth_pod();
    let mut conf = macvlan_conf("1.1.0", &veth.nic, &data);
    conf["mtu"] = json!(1400);
    conf["macvlanMode"] = json!("private");
    conf["runtimeConfig"] = json!({"mac": "02:11:22:33:44:55"});
    // Debian's static stops at 1.0.0: the 1.1.0 test IPAM hands out the same address.
    conf["ipam"]["type"] = json!("cni-test-ipam");
    let add = Call::new("ADD", "mv1", &ns.path(), "net1").run(&conf);
    add.ok();
    let result = add.json();
    assert_eq!(
        result["interfaces"][0]["mac"], "02:11:22:33:44:55",
        "{result}"
    );
    assert_eq!(result["interfaces"][0]["mtu"], 1400, "{result}");
    let link = ns.link("net1").expect("child in the pod");
    assert_eq!(link["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(link["linkinfo"]["info_data"]["mode"], "private");
    assert_eq!(link["mtu"], 1400);
    assert_eq!(ns.addrs("net1"), vec!["10.90.0.5/24"]);
    assert!(
        host_link(&veth.nic).is_some(),
        "the parent stays in the host"
    );
    assert_eq!(data.records().len(), 1, "the record while attached");

    let mut with_prev = conf.clone();
    with_prev["prevResult"] = result;
    Call::new("CHECK", "mv1", &ns.path(), "net1")
        .run(&with_prev)
        .ok();
    sh(&[
        "ip",
        "-n",
        &ns.name,
        "addr",
        "del",
        "10.90.0.5/24",
        "dev",
        "net1",
    ]);
    let msg = Call::new("CHECK", "mv1", &ns.path(), "net1")
        .run(&with_prev)
        .err(108);
    assert!(msg.contains("10.90.0.5/24"), "{msg}");

    // The leak probe's presence twin: while the child exists, the same check must see it.
    assert!(child_gone(&ns, "net1", &veth.nic).is_err());
    Call::new("DEL", "mv1", &ns.path(), "net1")
        .run(&with_prev)
        .ok();
    child_gone(&ns, "net1", &veth.nic).unwrap();
    Call::new("DEL", "mv1", &ns.path(), "net1").run(&conf).ok();
    assert!(data.records().is_empty());
}

#[test]
fn macvlan_mac_from_cni_args_and_mtu_rules() {
    let (ns, veth, data) = veth_pod();
    let conf = macvlan_conf("1.0.0", &veth.nic, &data);
    let mut call = Call::new("ADD", "mv2", &ns.path(), "eth0");
    call.args = "IgnoreUnknown=1;MAC=02:aa:bb:cc:dd:ee".into();
    call.run(&conf).ok();
    assert_eq!(ns.link("eth0").unwrap()["address"], "02:aa:bb:cc:dd:ee");
    assert_eq!(data.records().len(), 1, "the record while attached");
    assert_eq!(
        ns.link("eth0").unwrap()["mtu"],
        1500,
        "the parent's MTU by default"
    );
    call.command = "DEL".into();
    call.run(&conf).ok();
    child_and_record_gone(&ns, "eth0", &veth.nic, &data).unwrap();

    let mut too_big = conf.clone();
    too_big["mtu"] = json!(9000);
    let msg = Call::new("ADD", "mv3", &ns.path(), "eth0")
        .run(&too_big)
        .err(7);
    assert!(msg.contains("1500") && msg.contains(&veth.nic), "{msg}");
    assert!(ns.link("eth0").is_none());
    assert!(data.records().is_empty());
}

#[test]
fn a_failed_macvlan_add_at_each_step_leaves_nothing_behind() {
    let veth = Veth::new();
    // The host half of the leak probe must see a child left in the host: plant one with iproute2.
    let planted = format!("{}m", veth.nic);
    sh(&[
        "ip", "link", "add", "link", &veth.nic, "name", &planted, "type", "macvlan",
    ]);
    assert_eq!(host_children(&veth.nic), vec![planted.clone()]);
    sh(&["ip", "link", "del", &planted]);
    assert!(host_children(&veth.nic).is_empty());
    for step in [
        "state-intent",
        "ipam",
        "create",
        "addresses",
        "up",
        "routes",
        "gids",
        "state",
    ] {
        let ns = TestNetns::new();
        let data = DataDir::new();
        let conf = macvlan_conf("1.0.0", &veth.nic, &data);
        let msg = Call::new("ADD", "mvf", &ns.path(), "net1")
            .env("RDMA_NS_TEST_FAIL_AFTER", step)
            .run(&conf)
            .err(106);
        assert!(msg.contains(step), "{msg}");
        child_and_record_gone(&ns, "net1", &veth.nic, &data)
            .unwrap_or_else(|e| panic!("{step}: {e}"));
        // Presence twins of both probes, through the same netns and data dir: a real ADD's child
        // and record are seen.
        Call::new("ADD", "mvf", &ns.path(), "net1").run(&conf).ok();
        assert!(child_gone(&ns, "net1", &veth.nic).is_err(), "{step}");
        assert_eq!(data.records().len(), 1, "{step}");
        Call::new("DEL", "mvf", &ns.path(), "net1").run(&conf).ok();
        child_and_record_gone(&ns, "net1", &veth.nic, &data)
            .unwrap_or_else(|e| panic!("{step}: {e}"));
    }
}

#[test]
fn macvlan_del_after_the_pod_netns_was_deleted() {
    let (ns, veth, data) = veth_pod();
    let conf = macvlan_conf("1.0.0", &veth.nic, &data);
    Call::new("ADD", "mvg", &ns.path(), "net1").run(&conf).ok();
    assert!(child_gone(&ns, "net1", &veth.nic).is_err());
    assert_eq!(data.records().len(), 1);
    let path = ns.path();
    ns.delete();
    Call::new("DEL", "mvg", &path, "net1").run(&conf).ok();
    Call::new("DEL", "mvg", "", "net1").run(&conf).ok();
    assert!(data.records().is_empty());
    assert!(
        host_children(&veth.nic).is_empty(),
        "no child refunded to the host"
    );
}

#[test]
fn name_taken_and_unsuitable_parents_are_clean_errors() {
    let (ns, veth, data) = veth_pod();
    sh(&[
        "ip", "-n", &ns.name, "link", "add", "net1", "type", "veth", "peer", "name", "x1",
    ]);
    let msg = Call::new("ADD", "mvt", &ns.path(), "net1")
        .run(&macvlan_conf("1.0.0", &veth.nic, &data))
        .err(103);
    assert!(msg.contains("net1"), "{msg}");

    let ipoib = json!({"cniVersion": "1.0.0", "name": "ibnet", "type": "rdma-ns", "mode": "ipoib",
                       "master": veth.nic, "pkey": "0x8001", "dataDir": data.state()});
    let msg = Call::new("ADD", "ib1", &ns.path(), "ib1")
        .run(&ipoib)
        .err(110);
    assert!(msg.contains(&veth.nic) && msg.contains("IPoIB"), "{msg}");
    let mut bad_pkey = ipoib.clone();
    bad_pkey["pkey"] = json!("0x8000");
    let msg = Call::new("ADD", "ib1", &ns.path(), "ib1")
        .run(&bad_pkey)
        .err(7);
    assert!(msg.contains("pkey"), "{msg}");
    let msg = Call::new("ADD", "ib1", &ns.path(), "ib1")
        .run(&json!({"cniVersion": "1.0.0", "name": "ibnet", "type": "rdma-ns", "mode": "ipoib", "dataDir": data.state()}))
        .err(7);
    assert!(msg.contains("master"), "{msg}");
    assert!(data.records().is_empty());
}
