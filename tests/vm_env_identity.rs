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

use common::PLUGIN;
use serde_json::Value;
use vm_support::{
    in_pod, json_of, read, require_per_netns_rxe, require_vm, run, verbs_gid_index, ExtraNetns,
    MacvlanPod,
};

const POD_A: &str = "vmpod";
const POD_B: &str = "vmpodb";

#[test]
fn vm_env_in_two_pods_names_each_pods_own_soft_roce_device() {
    require_vm();
    require_per_netns_rxe();
    let _b_ns = ExtraNetns::add(POD_B);
    let mut a = MacvlanPod::attach(POD_A, "10.91.0.1");
    let mut b = MacvlanPod::attach(POD_B, "10.91.0.2");
    a.add_rxe("rxa");
    b.add_rxe("rxb");
    let index_a = verbs_gid_index(None, "rxa", "10.91.0.1");
    let index_b = verbs_gid_index(None, "rxb", "10.91.0.2");
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
    let _pod = MacvlanPod::attach(POD_A, "10.9.0.5");
    let index = verbs_gid_index(None, "rxe0", "10.9.0.5");
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
