//! Two pods whose interfaces share a name, each with a Soft-RoCE device bound to its own
//! `net1` (shared netns mode: both pods see both devices, and both `parent` files say
//! `net1`). RDMA netlink in each pod names the port's netdev only for the pod's own device.

use super::model::{Kernel, NoView};
use super::*;
use crate::kernel::topology::fixtures::GidSpec;

/// rxa on pod a's net1 (10.91.0.1) and rxb on pod b's (10.91.0.2), uverbs0 and uverbs1.
fn two_pods() -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    for (n, (name, gid)) in [
        ("rxa", "0000:0000:0000:0000:0000:ffff:0a5b:0001"),
        ("rxb", "0000:0000:0000:0000:0000:ffff:0a5b:0002"),
    ]
    .into_iter()
    .enumerate()
    {
        let gids = [
            GidSpec {
                index: 0,
                gid: "fe80:0000:0000:0000:0000:5eff:fe00:0001",
                gid_type: "RoCE v2",
                ndev: Some("net1"),
            },
            GidSpec {
                index: 1,
                gid,
                gid_type: "RoCE v2",
                ndev: Some("net1"),
            },
        ];
        fx.add_rxe(name, "net1", &gids, n as u32).unwrap();
    }
    fx
}

/// Pod `pod`'s net1: ifindex 2 in both pods (ifindexes are per netns).
fn net1(kind: &str, addr: &str) -> Iface {
    let mut i = iface("net1", Some(kind), &[addr]);
    i.index = 2;
    i
}

#[test]
fn two_pods_whose_interfaces_share_a_name_each_get_their_own_soft_roce_device() {
    let fx = two_pods();
    let dev = dev_dir(&[0, 1]);
    let mut k = Kernel::default();
    let (a, b) = (k.netdev("a", 2), k.netdev("b", 2));
    k.bind("rxa", 1, a);
    k.bind("rxb", 1, b);
    for (pod, kind, addr, ibdev) in [
        ("a", "veth", "10.91.0.1/24", "rxa"),
        ("b", "macvlan", "10.91.0.2/24", "rxb"),
    ] {
        let d = discover(
            fx.root(),
            dev.path(),
            &[net1(kind, addr)],
            &k.seen_from(pod, vec![]),
        )
        .unwrap();
        assert!(d.problems.is_empty(), "pod {pod}: {:?}", d.problems);
        let found: Vec<_> = d
            .interfaces
            .iter()
            .map(|f| (f.ibdev.as_str(), f.via, f.gid_index))
            .collect();
        assert_eq!(
            found,
            vec![(ibdev, Via::SoftRdmaParent, Some(1))],
            "pod {pod}"
        );
        let (vars, _) = variables(&d);
        assert_eq!(var(&vars, "NCCL_IB_HCA"), Some(&*format!("={ibdev}:1")));
        // UCX's UD check drops rxe's IPv4 RoCE v2 packets; the macvlan on rxe0 of
        // a_macvlan_child_on_rxe_gets_the_index_of_its_address_in_the_kernels_table gets none.
        assert_eq!(var(&vars, "UCX_UD_ETH_DGID_CHECK"), Some("n"), "pod {pod}");
    }
}

#[test]
fn by_name_alone_a_pod_takes_the_other_pods_device_too() {
    // What `rdma-ns env` did in pod a before: both devices' parent is a `net1`.
    let fx = two_pods();
    let dev = dev_dir(&[0, 1]);
    let d = discover(
        fx.root(),
        dev.path(),
        &[net1("veth", "10.91.0.1/24")],
        &NoView,
    )
    .unwrap();
    let devices: Vec<&str> = d.interfaces.iter().map(|f| f.ibdev.as_str()).collect();
    assert_eq!(devices, vec!["rxa", "rxb"]);
    assert_eq!(kinds(&d), vec![ProblemKind::NoRoceV2Gid]);
    assert!(
        d.problems[0]
            .msg
            .starts_with("rxb port 1 has no RoCE v2 GID for 10.91.0.1"),
        "{}",
        d.problems[0]
    );
}

#[test]
fn a_device_rdma_netlink_places_in_another_netns_is_not_the_pods_even_alone() {
    // Pod a's device is gone (its netdev moved away, rxe deleted it); pod b's is left.
    let fx = two_pods();
    fx.remove("class/infiniband/rxa").unwrap();
    let dev = dev_dir(&[0, 1]);
    let mut k = Kernel::default();
    let b = k.netdev("b", 2);
    k.bind("rxb", 1, b);
    let ifaces = [net1("veth", "10.91.0.1/24")];
    let d = discover(fx.root(), dev.path(), &ifaces, &k.seen_from("a", vec![])).unwrap();
    assert!(d.interfaces.is_empty(), "{d:?}");
    assert_eq!(kinds(&d), vec![ProblemKind::NoRdmaInterface]);
    // Twin: seen from pod b, the same device is its net1's.
    let d = discover(fx.root(), dev.path(), &ifaces, &k.seen_from("b", vec![])).unwrap();
    assert_eq!(d.interfaces.len(), 1);
}
