//! What a hostile or broken runtime can hand the plugin: each test reproduces a defect a
//! hostile-runtime harness found, through the real binary.

mod common;

use common::*;
use serde_json::{json, Value};

/// Links in the host netns whose lower device is `parent` (a macvlan made in the host shows
/// `"link": "<parent>"`).
fn host_children_of(parent: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&sh(&["ip", "-j", "-d", "link", "show"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|l| l["link"] == parent && l["linkinfo"]["info_kind"] == "macvlan")
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

/// A /run/netns name for the host's netns, removed on drop even when the test fails (a leftover
/// changes how iproute2 prints other tests' links).
struct HostAlias(String);

impl HostAlias {
    fn new() -> HostAlias {
        let name = unique("rnhost");
        // The test runs in the host netns: its own pid names it.
        sh(&[
            "ip",
            "netns",
            "attach",
            &name,
            &std::process::id().to_string(),
        ]);
        HostAlias(name)
    }
}

impl Drop for HostAlias {
    fn drop(&mut self) {
        let _ = sh_ok(&["ip", "netns", "del", &self.0]);
    }
}

/// The host's own netns as CNI_NETNS, by /proc path or by a /run/netns name bound to it: refused
/// with code 4 before anything changes, in move and macvlan mode.
#[test]
fn the_hosts_own_netns_is_refused_as_a_pod_netns() {
    let veth = Veth::new();
    let data = DataDir::new();
    let host_alias = HostAlias::new();
    let host_alias = &host_alias.0;
    let before = host_view(&veth.nic);

    // The probe finds a host-side macvlan child while one exists.
    let probe = unique("rnmv");
    sh(&[
        "ip", "link", "add", "link", &veth.nic, "name", &probe, "type", "macvlan",
    ]);
    assert_eq!(host_children_of(&veth.nic), vec![probe.clone()]);
    sh(&["ip", "link", "del", &probe]);
    assert!(host_children_of(&veth.nic).is_empty());

    for netns in [
        "/proc/self/ns/net".to_string(),
        format!("/run/netns/{host_alias}"),
    ] {
        let mut move_conf = move_conf("1.0.0", "hostns", &veth.nic, &data);
        move_conf["ipam"] = static_ipam("10.93.0.5/24");
        let macvlan = json!({"cniVersion": "1.0.0", "name": "hostnsmv", "type": "rdma-ns",
            "mode": "macvlan", "master": veth.nic, "dataDir": data.state(),
            "ipam": static_ipam("10.93.0.6/24")});
        for conf in [move_conf, macvlan] {
            let msg = Call::new("ADD", "hostns", &netns, "net1").run(&conf).err(4);
            assert!(
                msg.contains("CNI_NETNS") && msg.contains("own network namespace"),
                "{msg}"
            );
            assert_eq!(
                host_view(&veth.nic),
                before,
                "{netns}: the NIC is untouched"
            );
            assert!(
                host_link("net1").is_none(),
                "{netns}: nothing renamed in the host"
            );
            assert!(
                host_children_of(&veth.nic).is_empty(),
                "{netns}: no host macvlan"
            );
            assert!(data.records().is_empty(), "{netns}");
        }
    }
    // The same binary and conf attach to a real pod netns.
    let ns = TestNetns::new();
    let mut conf = move_conf("1.0.0", "hostns", &veth.nic, &data);
    conf["ipam"] = static_ipam("10.93.0.5/24");
    Call::new("ADD", "hostns", &ns.path(), "net1")
        .run(&conf)
        .ok();
    assert!(ns.link("net1").is_some());
    Call::new("DEL", "hostns", &ns.path(), "net1")
        .run(&conf)
        .ok();
}

/// CNI_NETNS naming a FIFO, a plain file or a procfs file that is no namespace: code 104 at once
/// (a FIFO used to block open(2) forever).
#[test]
fn files_that_are_no_netns_are_refused_at_once() {
    let veth = Veth::new();
    let data = DataDir::new();
    let fifo = data.path().join("fifo");
    sh(&["mkfifo", fifo.to_str().unwrap()]);
    let plain = data.path().join("plain");
    std::fs::write(&plain, b"{}").unwrap();
    let conf = move_conf("1.0.0", "notns", &veth.nic, &data);
    for path in [
        fifo.display().to_string(),
        plain.display().to_string(),
        "/proc/self/status".to_string(),
        "/proc/self/ns/uts".to_string(),
    ] {
        let started = std::time::Instant::now();
        let msg = Call::new("ADD", "notns", &path, "net1").run(&conf).err(104);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{path}"
        );
        assert!(msg.contains(&path), "{msg}");
        assert!(host_link(&veth.nic).is_some(), "{path}");
    }
}
