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
//!   GID tables. Both name the index rdma-core reads for the pod's address.

mod common;
mod vm_support;

use common::{state_dir, Call, PLUGIN};
use serde_json::{json, Value};
use vm_support::{read, require_vm, run};

const POD_A: &str = "vmpod";
const POD_B: &str = "vmpodb";

/// Linux 7.1 gave rxe a UDP socket per netns (drivers/infiniband/sw/rxe/rxe_ns.c).
fn require_per_netns_rxe() {
    let release = read("/proc/sys/kernel/osrelease");
    let mut parts = release.split(['.', '-']);
    let major: u32 = parts.next().unwrap().parse().unwrap();
    let minor: u32 = parts.next().unwrap().parse().unwrap();
    assert!(
        (major, minor) >= (7, 1),
        "this case needs Linux 7.1 or later (rxe with per-netns sockets); the VM runs {release}"
    );
}

/// Runs a command inside `pod`, as a container would; panics unless it exits 0.
fn in_pod(pod: &str, cmd: &str, args: &[&str]) -> String {
    let mut all = vec!["netns", "exec", pod, cmd];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The index of `ip`'s RoCE v2 GID on `dev` port 1 as rdma-core reads it (`ibv_devinfo -v`
/// prints a RoCE v2 GID with inet_ntop: `GID[  1]:  ::ffff:10.91.0.1, RoCE v2`), polled
/// briefly: the kernel adds GIDs from a workqueue.
fn verbs_gid_index(dev: &str, ip: &str) -> u32 {
    let wanted = format!("::ffff:{ip}, RoCE v2");
    for _ in 0..200 {
        let info = run("ibv_devinfo", &["-d", dev, "-v"]);
        let hit = info.lines().map(str::trim).find_map(|l| {
            let (index, gid) = l.strip_prefix("GID[")?.split_once("]:")?;
            (gid.trim() == wanted).then(|| index.trim().parse().ok())?
        });
        if let Some(i) = hit {
            return i;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("ibv_devinfo -d {dev} shows no RoCE v2 GID for {ip}");
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
        in_pod(
            self.netns,
            "rdma",
            &["link", "add", name, "type", "rxe", "netdev", "net1"],
        );
        self.rxe = Some(name);
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(rxe) = self.rxe {
            let _ = std::process::Command::new("ip")
                .args(["netns", "exec", self.netns, "rdma", "link", "delete", rxe])
                .output();
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
        run("ip", &["netns", "add", name]);
        ExtraNetns(name)
    }
}

impl Drop for ExtraNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", self.0])
            .output();
    }
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
    let index_a = verbs_gid_index("rxa", "10.91.0.1");
    let index_b = verbs_gid_index("rxb", "10.91.0.2");
    // What the tie relies on: both devices name a `net1`, and RDMA netlink in pod a reports
    // a netdev for its own device only.
    assert_eq!(read("/sys/class/infiniband/rxa/parent"), "net1");
    assert_eq!(read("/sys/class/infiniband/rxb/parent"), "net1");
    let links = in_pod(POD_A, "rdma", &["link", "show"]);
    let line = |dev: &str| {
        links
            .lines()
            .find(|l| l.starts_with(&format!("link {dev}/1 ")))
            .unwrap_or_else(|| panic!("no {dev}/1 in {links}"))
    };
    assert!(line("rxa").contains("netdev net1"), "{links}");
    assert!(!line("rxb").contains("netdev"), "{links}");
    for (pod, ibdev, index, other) in [
        (POD_A, "rxa", index_a, "rxb"),
        (POD_B, "rxb", index_b, "rxa"),
    ] {
        let out = in_pod(pod, PLUGIN, &["env", "--format", "json"]);
        let doc = json_of(&out);
        let interfaces = doc["interfaces"].as_array().unwrap();
        assert_eq!(interfaces.len(), 1, "{pod}: {doc}");
        assert_eq!(interfaces[0]["ibdev"], ibdev, "{pod}: {doc}");
        assert_eq!(interfaces[0]["via"], "soft-rdma-parent", "{pod}: {doc}");
        assert_eq!(interfaces[0]["gidIndex"], index, "{pod}: {doc}");
        assert!(!out.contains(other), "{pod} names {other}: {doc}");
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
    let index = verbs_gid_index("rxe0", "10.9.0.5");
    let node = run(
        PLUGIN,
        &["env", "--netns", "/run/netns/vmpod", "--format", "json"],
    );
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
    for doc in [json_of(&node), json_of(&unprivileged)] {
        assert_eq!(doc["interfaces"][0]["ibdev"], "rxe0", "{doc}");
        assert_eq!(doc["interfaces"][0]["via"], "gid-table", "{doc}");
        assert_eq!(doc["interfaces"][0]["gidIndex"], index, "{doc}");
        assert_eq!(doc["env"]["NCCL_IB_GID_INDEX"], index.to_string(), "{doc}");
    }
}
