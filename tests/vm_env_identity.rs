//! VM-tier cases of `rdma-ns env` tying a device to the pod's interface by identity
//! (tests/vm/run.sh builds them). Each case starts with rxe0 over the veth rxev0 (peer
//! rxev1), an empty netns `vmpod` and shared netns mode.
//!
//! - `vm_env_in_two_pods_names_each_pods_own_soft_roce_device` needs Linux 7.1 or later (rxe
//!   with a UDP socket per netns, so a rxe link is added from inside a pod on its `net1`).
//!   Two pods get a macvlan child `net1` of rxev0 from rdma-ns, and each a rxe device on it
//!   (`ip netns exec POD rdma link add`): shared mode shows both pods both devices, whose
//!   `parent` files both say `net1`. RDMA netlink in a pod names a port's netdev only for the
//!   pod's own device, and env must take exactly that one.
//! - `vm_env_finds_a_macvlans_parent_from_the_node_and_searches_without_privilege` runs on
//!   any VM kernel: from the node (root, `--netns`) env looks the child's parent up through
//!   IFLA_LINK_NETNSID; unprivileged in the pod the kernel refuses that and env searches the
//!   GID tables. Both name the index the kernel's table holds.

mod common;

use std::process::Command;

use common::*;
use serde_json::{json, Value};

const POD_A: &str = "vmpod";
const POD_B: &str = "vmpodb";

fn require_vm() {
    assert_eq!(
        std::env::var("RDMA_NS_IN_VM").as_deref(),
        Ok("1"),
        "VM-only test: run it with `tests/vm/run.sh <case>`"
    );
}

/// Linux 7.1 gave rxe a UDP socket per netns (drivers/infiniband/sw/rxe/rxe_ns.c).
fn require_per_netns_rxe() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = release.trim().split(['.', '-']);
    let major: u32 = parts.next().unwrap().parse().unwrap();
    let minor: u32 = parts.next().unwrap().parse().unwrap();
    assert!(
        (major, minor) >= (7, 1),
        "this case needs Linux 7.1 or later (rxe with per-netns sockets); the VM runs {release}"
    );
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &str, args: &[&str]) -> Out {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn in_pod(pod: &str, cmd: &str, args: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", pod, cmd];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn json_of(o: &Out) -> Value {
    serde_json::from_str(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} / {}", o.stdout, o.stderr))
}

/// The index of the entry holding `gid` on `ndev` in `dev`'s table, straight from sysfs,
/// polled briefly (the kernel adds GIDs from a workqueue).
fn sysfs_gid_index(dev: &str, gid: &str, ndev: &str) -> u32 {
    let port = format!("/sys/class/infiniband/{dev}/ports/1");
    for _ in 0..200 {
        let entries = std::fs::read_dir(format!("{port}/gids")).unwrap();
        let mut indexes: Vec<u32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect();
        indexes.sort();
        let hit = indexes.into_iter().find(|i| {
            std::fs::read_to_string(format!("{port}/gids/{i}")).is_ok_and(|s| s.trim() == gid)
                && std::fs::read_to_string(format!("{port}/gid_attrs/ndevs/{i}"))
                    .is_ok_and(|s| s.trim() == ndev)
        });
        if let Some(i) = hit {
            return i;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("no GID {gid} on {ndev} in {dev}'s table");
}

/// A pod attached by rdma-ns: a macvlan child `net1` of rxev0 with `ip`/24; DEL on drop,
/// after its own rxe device (if any) is gone.
struct Pod {
    netns: &'static str,
    conf: Value,
    rxe: Option<&'static str>,
}

impl Pod {
    fn attach(netns: &'static str, ip: &str) -> Pod {
        let conf = json!({"cniVersion": "1.0.0", "name": "vmident", "type": "rdma-ns",
            "mode": "macvlan", "master": "rxev0", "dataDir": state_dir(),
            "ipam": {"type": "static", "addresses": [{"address": format!("{ip}/24")}]}});
        Call::new("ADD", netns, &format!("/run/netns/{netns}"), "net1")
            .run(&conf)
            .ok();
        Pod {
            netns,
            conf,
            rxe: None,
        }
    }

    /// `rdma link add <name> type rxe netdev net1`, run inside the pod.
    fn add_rxe(&mut self, name: &'static str) {
        let o = in_pod(
            self.netns,
            "rdma",
            &["link", "add", name, "type", "rxe", "netdev", "net1"],
        );
        assert_eq!(
            o.code, 0,
            "rdma link add {name} in {}: {}",
            self.netns, o.stderr
        );
        self.rxe = Some(name);
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(rxe) = self.rxe {
            in_pod(self.netns, "rdma", &["link", "delete", rxe]);
        }
        let path = format!("/run/netns/{}", self.netns);
        Call::new("DEL", self.netns, &path, "net1")
            .run(&self.conf)
            .ok();
    }
}

/// A netns of the test's own, deleted on drop.
struct ExtraNetns(&'static str);

impl ExtraNetns {
    fn add(name: &'static str) -> ExtraNetns {
        sh(&["ip", "netns", "add", name]);
        ExtraNetns(name)
    }
}

impl Drop for ExtraNetns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "delete", self.0]);
    }
}

fn v4_gid(last: u8) -> String {
    format!("0000:0000:0000:0000:0000:ffff:0a5b:00{last:02x}")
}

#[test]
fn vm_env_in_two_pods_names_each_pods_own_soft_roce_device() {
    require_vm();
    require_per_netns_rxe();
    let _b_ns = ExtraNetns::add(POD_B);
    let mut a = Pod::attach(POD_A, "10.91.0.1");
    let mut b = Pod::attach(POD_B, "10.91.0.2");
    a.add_rxe("rxa");
    b.add_rxe("rxb");
    let index_a = sysfs_gid_index("rxa", &v4_gid(1), "net1");
    let index_b = sysfs_gid_index("rxb", &v4_gid(2), "net1");
    // What the tie relies on: both devices name a `net1`, and RDMA netlink in pod a reports
    // a netdev for its own device only.
    assert_eq!(
        std::fs::read_to_string("/sys/class/infiniband/rxa/parent")
            .unwrap()
            .trim(),
        "net1"
    );
    assert_eq!(
        std::fs::read_to_string("/sys/class/infiniband/rxb/parent")
            .unwrap()
            .trim(),
        "net1"
    );
    let links = in_pod(POD_A, "rdma", &["link", "show"]);
    assert!(
        links
            .stdout
            .lines()
            .any(|l| l.starts_with("link rxa/1") && l.contains("netdev net1")),
        "{}",
        links.stdout
    );
    assert!(
        links
            .stdout
            .lines()
            .any(|l| l.starts_with("link rxb/1") && !l.contains("netdev")),
        "{}",
        links.stdout
    );
    for (pod, ibdev, index, other) in [
        (POD_A, "rxa", index_a, "rxb"),
        (POD_B, "rxb", index_b, "rxa"),
    ] {
        let o = in_pod(pod, PLUGIN, &["env", "--format", "json"]);
        assert_eq!(o.code, 0, "{pod}: {} / {}", o.stdout, o.stderr);
        let doc = json_of(&o);
        let interfaces = doc["interfaces"].as_array().unwrap();
        assert_eq!(interfaces.len(), 1, "{pod}: {doc}");
        assert_eq!(interfaces[0]["ibdev"], ibdev, "{pod}: {doc}");
        assert_eq!(interfaces[0]["via"], "soft-rdma-parent", "{pod}: {doc}");
        assert_eq!(interfaces[0]["gidIndex"], index, "{pod}: {doc}");
        assert!(!o.stdout.contains(other), "{pod} names {other}: {doc}");
        assert_eq!(
            doc["env"]["NCCL_IB_HCA"],
            format!("={ibdev}:1"),
            "{pod}: {doc}"
        );
        assert_eq!(
            doc["env"]["NCCL_IB_GID_INDEX"],
            index.to_string(),
            "{pod}: {doc}"
        );
        assert_eq!(doc["rails"][0]["pciAddress"], Value::Null, "{pod}: {doc}");
    }
}

#[test]
fn vm_env_finds_a_macvlans_parent_from_the_node_and_searches_without_privilege() {
    require_vm();
    let _pod = Pod::attach(POD_A, "10.9.0.5");
    let index = sysfs_gid_index("rxe0", "0000:0000:0000:0000:0000:ffff:0a09:0005", "net1");
    let node = run(
        PLUGIN,
        &["env", "--netns", "/run/netns/vmpod", "--format", "json"],
    );
    assert_eq!(node.code, 0, "{} / {}", node.stdout, node.stderr);
    let unprivileged = in_pod(
        POD_A,
        "setpriv",
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            PLUGIN,
            "env",
            "--format",
            "json",
        ],
    );
    assert_eq!(
        unprivileged.code, 0,
        "{} / {}",
        unprivileged.stdout, unprivileged.stderr
    );
    for doc in [json_of(&node), json_of(&unprivileged)] {
        assert_eq!(doc["interfaces"][0]["ibdev"], "rxe0", "{doc}");
        assert_eq!(doc["interfaces"][0]["via"], "gid-table", "{doc}");
        assert_eq!(doc["interfaces"][0]["gidIndex"], index, "{doc}");
        assert_eq!(doc["env"]["NCCL_IB_GID_INDEX"], index.to_string(), "{doc}");
    }
}
