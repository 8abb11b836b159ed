//! Tests of the tests: the leak and absence checks the other root tests rely on (`child_gone`,
//! `leases`, `back_in_host` in tests/common) must fail when the plugin really leaks. The debug
//! binary plants each fault on request (`RDMA_NS_TEST_FAULT`, see src/attach/plan.rs): DEL then
//! reports success but leaves the child, the lease, or the device's name behind. Each check must
//! catch its fault, and pass on the same sequence without it.

mod common;

use common::*;
use serde_json::{json, Value};

fn macvlan_conf(master: &str, data: &DataDir) -> Value {
    json!({"cniVersion": "1.0.0", "name": "faultnet", "type": "rdma-ns", "mode": "macvlan",
           "master": master, "dataDir": data.state(),
           "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.93.0.0/24"}]],
                    "dataDir": format!("{}/host-local", data.str())}})
}

/// ADD, then DEL with `fault` planted (or none): DEL must report success either way, since the
/// planted bugs are the silent kind.
fn add_then_del(conf: &Value, ns: &TestNetns, fault: Option<&str>) {
    Call::new("ADD", "fault1", &ns.path(), "net1")
        .run(conf)
        .ok();
    let mut del = Call::new("DEL", "fault1", &ns.path(), "net1");
    if let Some(f) = fault {
        del = del.env("RDMA_NS_TEST_FAULT", f);
    }
    del.run(conf).ok();
}

#[test]
fn no_child_left_check_catches_a_child_not_deleted() {
    for fault in [None, Some("skip-child-delete")] {
        let veth = Veth::new();
        let ns = TestNetns::new();
        let data = DataDir::new();
        add_then_del(&macvlan_conf(&veth.nic, &data), &ns, fault);
        let verdict = child_gone(&ns, "net1", &veth.nic);
        match fault {
            None => verdict.unwrap(),
            Some(f) => {
                let e = verdict.expect_err("the no-child-left check missed a child left by DEL");
                assert!(e.contains("net1"), "{f}: {e}");
            }
        }
    }
}

#[test]
fn no_lease_left_check_catches_a_lease_not_released() {
    for fault in [None, Some("skip-ipam-del")] {
        let veth = Veth::new();
        let ns = TestNetns::new();
        let data = DataDir::new();
        add_then_del(&macvlan_conf(&veth.nic, &data), &ns, fault);
        let left = leases(&data.path().join("host-local"));
        match fault {
            None => assert!(left.is_empty(), "{left:?}"),
            Some(_) => assert_eq!(
                left.len(),
                1,
                "the no-lease-left check missed the lease DEL never released"
            ),
        }
    }
}

#[test]
fn back_in_host_check_catches_a_device_not_renamed_back() {
    for fault in [None, Some("skip-rename-back")] {
        let veth = Veth::new();
        let ns = TestNetns::new();
        let data = DataDir::new();
        let mut conf = move_conf("1.0.0", "faultmv", &veth.nic, &data);
        conf["mtu"] = json!(9000);
        let before = host_view(&veth.nic);
        add_then_del(&conf, &ns, fault);
        let verdict = back_in_host(&veth.nic, &before);
        match fault {
            None => verdict.unwrap(),
            Some(_) => {
                let e = verdict.expect_err("the back-in-host check missed a device left renamed");
                assert!(e.contains(&before.mac) && e.contains("rdmans"), "{e}");
            }
        }
    }
}

#[test]
fn faults_are_planted_only_when_asked() {
    // An unknown fault name plants nothing: the switch matches whole names, not substrings.
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    add_then_del(&macvlan_conf(&veth.nic, &data), &ns, Some("skip-child"));
    child_gone(&ns, "net1", &veth.nic).unwrap();
    assert!(leases(&data.path().join("host-local")).is_empty());
}
