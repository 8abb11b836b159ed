//! Discovery on the fixture trees (src/kernel/topology/fixtures.rs). Run as root (CI does):
//! uverbs nodes are made with mknod in a temp dir standing for /dev/infiniband.

use std::path::Path;

use nix::sys::stat::{makedev, mknod, Mode, SFlag};

mod identity;
mod lower;
mod model;
mod qos;
mod rails;

use super::vars::variables;
use super::*;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;
use model::NoView;

/// uverbsN nodes as the presets number them: mlx5_0 0, mlx5_2 1, ibp94s0 2, mlx5_3 3, rxe0 4.
fn dev_dir(nodes: &[u32]) -> TempDir {
    let dir = TempDir::new("discover-dev");
    for n in nodes {
        let p = dir.path().join(format!("uverbs{n}"));
        mknod(
            &p,
            SFlag::S_IFCHR,
            Mode::empty(),
            makedev(231, 192 + u64::from(*n)),
        )
        .unwrap_or_else(|e| panic!("mknod {} (tests need root): {e}", p.display()));
    }
    dir
}

fn iface(name: &str, kind: Option<&str>, addrs: &[&str]) -> Iface {
    Iface {
        lower: None,
        lower_netnsid: None,
        name: name.into(),
        index: 10,
        kind: kind.map(str::to_string),
        link_type: 1,
        mtu: 1500,
        hwaddr: vec![2, 0, 0, 0, 0, 1],
        up: true,
        addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        alias: None,
    }
}

/// Adds GID `index` = `gid` (sysfs text) of `type` for `ndev` to a port of the fixture.
fn add_gid(fx: &SysfsFixture, dev: &str, port: u32, index: u32, gid: &str, t: &str, ndev: &str) {
    let p = format!("class/infiniband/{dev}/ports/{port}");
    fx.write_attr(format!("{p}/gids/{index}"), gid).unwrap();
    fx.write_attr(format!("{p}/gid_attrs/types/{index}"), t)
        .unwrap();
    fx.write_attr(format!("{p}/gid_attrs/ndevs/{index}"), ndev)
        .unwrap();
}

const POD_V4: &str = "0000:0000:0000:0000:0000:ffff:0a09:0007"; // 10.9.0.7

/// The pod's macvlan child, whose address is `POD_V4`.
fn pod_macvlan() -> Iface {
    iface("net1", Some("macvlan"), &["10.9.0.7/24"])
}

fn kinds(d: &Discovery) -> Vec<ProblemKind> {
    d.problems.iter().map(|p| p.kind).collect()
}

/// Each problem's kind and interface, in order.
fn kinds_by_interface(problems: &[Problem]) -> Vec<(ProblemKind, Option<&str>)> {
    problems
        .iter()
        .map(|p| (p.kind, p.ifname.as_deref()))
        .collect()
}

fn var<'a>(vars: &'a [(&str, String)], name: &str) -> Option<&'a str> {
    vars.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_macvlan_child_on_rxe_gets_the_index_of_its_address_in_the_kernels_table() {
    let fx = SysfsFixture::all().unwrap();
    // As on the 6.1 VM: the pod's IPv4 at index 2, not 3.
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net1");
    let dev = dev_dir(&[4]);
    let d = discover(fx.root(), dev.path(), &[pod_macvlan()], &NoView).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let f = &d.interfaces[0];
    assert_eq!(
        (f.ibdev.as_str(), f.port, f.via),
        ("rxe0", 1, Via::GidTable)
    );
    assert_eq!(f.gid_index, Some(2));
    assert_eq!(
        f.uverbs.as_deref(),
        Some(dev.path().join("uverbs4").as_path())
    );
    let (vars, problems) = variables(&d);
    assert!(problems.is_empty());
    assert_eq!(
        vars,
        vec![
            ("NCCL_IB_DISABLE", "0".to_string()),
            ("NCCL_IB_HCA", "=rxe0:1".into()),
            ("NCCL_IB_GID_INDEX", "2".into()),
            ("NCCL_SOCKET_IFNAME", "=net1".into()),
            ("UCX_NET_DEVICES", "rxe0:1".into()),
            ("UCX_IB_GID_INDEX", "2".into()),
        ]
    );
}

#[test]
fn a_moved_roce_netdev_prefers_the_roce_v2_entry_of_its_ipv4_address() {
    let fx = SysfsFixture::all().unwrap();
    let dev = dev_dir(&[0]);
    // The PF preset: 10.59.0.5 at 2 (v1) and 3 (v2); 2001:db8::5 at 4 (v1) and 5 (v2).
    let d = discover(
        fx.root(),
        dev.path(),
        &[iface(
            "ens1f0np0",
            None,
            &["2001:db8::5/64", "10.59.0.5/24", "fe80::1/64"],
        )],
        &NoView,
    )
    .unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let f = &d.interfaces[0];
    assert_eq!((f.ibdev.as_str(), f.via), ("mlx5_0", Via::OwnDevice));
    assert_eq!(
        f.gid_index,
        Some(3),
        "IPv4's v2 entry, though IPv6 came first"
    );
    // Link-local addresses are left out; the IPv6 one has its own v2 index.
    assert_eq!(f.gids.len(), 2);
    assert_eq!(f.gids[0].index, Some(5));
}

#[test]
fn an_ipoib_child_is_found_by_its_port_gid_and_uses_gid_0() {
    let fx = SysfsFixture::all().unwrap();
    let dev = dev_dir(&[2]);
    let mut child = iface("ib0.8001", Some("ipoib"), &["192.168.1.5/24"]);
    child.link_type = 32;
    // flags/QPN, then the port GID fe80::43f:7203:da:2130 of ibp94s0 port 1.
    child.hwaddr = vec![
        0x80, 0, 0x10, 0x2a, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x04, 0x3f, 0x72, 0x03, 0x00, 0xda,
        0x21, 0x30,
    ];
    let mut stranger = child.clone();
    stranger.name = "ib1".into();
    stranger.hwaddr[19] = 0x31;
    let d = discover(fx.root(), dev.path(), &[child, stranger], &NoView).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(
        d.interfaces.len(),
        1,
        "only the child's GID is a port's: {d:?}"
    );
    let f = &d.interfaces[0];
    assert_eq!(
        (f.ibdev.as_str(), f.via, f.gid_index),
        ("ibp94s0", Via::PortGid, Some(0))
    );
    let (vars, _) = variables(&d);
    assert_eq!(var(&vars, "NCCL_IB_GID_INDEX"), Some("0"));
    assert_eq!(var(&vars, "NCCL_IB_HCA"), Some("=ibp94s0:1"));
}

#[test]
fn veth_addresses_are_never_searched_for_but_the_same_address_on_a_macvlan_is() {
    let fx = SysfsFixture::all().unwrap();
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "eth0");
    let dev = dev_dir(&[4]);
    let veth = iface("eth0", Some("veth"), &["10.9.0.7/24"]);
    let d = discover(fx.root(), dev.path(), &[veth], &NoView).unwrap();
    assert!(d.interfaces.is_empty(), "{d:?}");
    assert_eq!(kinds(&d), vec![ProblemKind::NoRdmaInterface]);
    assert!(d.problems[0].msg.contains("eth0"), "{}", d.problems[0]);
    assert!(
        variables(&d).0.is_empty(),
        "no variable without a usable device"
    );
    // Presence twin: the same table entry, the interface a macvlan.
    let mv = iface("eth0", Some("macvlan"), &["10.9.0.7/24"]);
    let d = discover(fx.root(), dev.path(), &[mv], &NoView).unwrap();
    assert_eq!(d.interfaces.len(), 1, "{d:?}");
}

#[test]
fn a_port_that_is_not_active_is_named_and_not_used() {
    let fx = SysfsFixture::all().unwrap();
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net1");
    let dev = dev_dir(&[4]);
    let ifaces = [pod_macvlan()];
    // Twin: active, usable.
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    assert!(d.interfaces[0].usable());
    fx.write_attr("class/infiniband/rxe0/ports/1/state", "1: DOWN")
        .unwrap();
    fx.write_attr("class/infiniband/rxe0/ports/1/phys_state", "3: Disabled")
        .unwrap();
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    assert_eq!(kinds(&d), vec![ProblemKind::PortNotActive]);
    let msg = d.problems[0].to_string();
    assert!(msg.starts_with("net1: port 1 of rxe0 is 1: DOWN"), "{msg}");
    assert!(!d.interfaces[0].usable());
    assert!(variables(&d).0.is_empty());
}

#[test]
fn an_address_without_a_roce_v2_gid_is_a_problem() {
    let fx = SysfsFixture::all().unwrap();
    let dev = dev_dir(&[0, 4]);
    // Twin: 10.59.0.5 has its v2 entry on the PF.
    let d = discover(
        fx.root(),
        dev.path(),
        &[iface("ens1f0np0", None, &["10.59.0.5/24"])],
        &NoView,
    )
    .unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let d = discover(
        fx.root(),
        dev.path(),
        &[iface("ens1f0np0", None, &["10.59.0.99/24"])],
        &NoView,
    )
    .unwrap();
    assert_eq!(kinds(&d), vec![ProblemKind::NoRoceV2Gid]);
    assert!(
        d.problems[0].msg.contains("no RoCE v2 GID for 10.59.0.99"),
        "{}",
        d.problems[0]
    );
    // Only a v1 entry: named as such.
    add_gid(&fx, "rxe0", 1, 3, POD_V4, "IB/RoCE v1", "net1");
    let d = discover(fx.root(), dev.path(), &[pod_macvlan()], &NoView).unwrap();
    assert_eq!(kinds(&d), vec![ProblemKind::NoRoceV2Gid]);
    assert!(
        d.problems[0]
            .msg
            .contains("only a IB/RoCE v1 GID (index 3)"),
        "{}",
        d.problems[0]
    );
}

#[test]
fn a_missing_uverbs_node_is_named_with_the_device_found_for_the_interface() {
    let fx = SysfsFixture::all().unwrap();
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net1");
    let ifaces = [pod_macvlan()];
    let dev = dev_dir(&[0]);
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    assert_eq!(kinds(&d), vec![ProblemKind::NoUverbs]);
    assert_eq!(d.interfaces[0].ibdev, "rxe0", "found in the second pass");
    assert!(d.problems[0].msg.contains("uverbs4"), "{}", d.problems[0]);
    // A node with other numbers is not rxe0's.
    let dev = TempDir::new("discover-dev");
    mknod(
        &dev.path().join("uverbs4"),
        SFlag::S_IFCHR,
        Mode::empty(),
        makedev(231, 200),
    )
    .unwrap();
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    assert_eq!(kinds(&d), vec![ProblemKind::NoUverbs]);
    // Twin: the right node.
    let dev = dev_dir(&[4]);
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
}

#[test]
fn rails_list_in_natural_device_order_and_disagreeing_indexes_set_no_gid_variable() {
    let fx = SysfsFixture::all().unwrap();
    // Two pod interfaces on one device, plus the PF's own netdev.
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net2");
    add_gid(
        &fx,
        "rxe0",
        1,
        4,
        "0000:0000:0000:0000:0000:ffff:0a09:0008",
        "RoCE v2",
        "net1",
    );
    let dev = dev_dir(&[0, 4]);
    let ifaces = [
        iface("net2", Some("macvlan"), &["10.9.0.7/24"]),
        iface("net1", Some("macvlan"), &["10.9.0.8/24"]),
        iface("ens1f0np0", None, &["10.59.0.5/24"]),
    ];
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    let order: Vec<(&str, &str)> = d
        .interfaces
        .iter()
        .map(|f| (f.ibdev.as_str(), f.ifname.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![("mlx5_0", "ens1f0np0"), ("rxe0", "net1"), ("rxe0", "net2")]
    );
    let (vars, problems) = variables(&d);
    // The indexes differ, so NCCL and UCX would pick per device; on rxe0 the first RoCE v2
    // IPv4 GID is v0's own address (index 1), not the pods'.
    assert_eq!(
        kinds_by_interface(&problems),
        vec![
            (ProblemKind::AutoGidNotThePods, Some("net1")),
            (ProblemKind::AutoGidNotThePods, Some("net2"))
        ]
    );
    assert!(
        problems[0].msg.contains("net1 on rxe0:1: 4")
            && problems[0].msg.contains("NCCL index 1 and UCX index 1")
            && problems[0].msg.contains("not the pod's index 4"),
        "{}",
        problems[0]
    );
    assert_eq!(var(&vars, "NCCL_IB_ADDR_FAMILY"), Some("AF_INET"));
    assert_eq!(var(&vars, "NCCL_IB_HCA"), Some("=mlx5_0:1,rxe0:1"));
    assert_eq!(var(&vars, "UCX_NET_DEVICES"), Some("mlx5_0:1,rxe0:1"));
    assert_eq!(
        var(&vars, "NCCL_SOCKET_IFNAME"),
        Some("=ens1f0np0,net1,net2")
    );
    assert_eq!(var(&vars, "NCCL_IB_GID_INDEX"), None);
    assert_eq!(var(&vars, "UCX_IB_GID_INDEX"), None);
    // Twin: agreeing indexes give the variable.
    let d = discover(fx.root(), dev.path(), &ifaces[..1], &NoView).unwrap();
    assert_eq!(var(&variables(&d).0, "NCCL_IB_GID_INDEX"), Some("2"));
}

#[test]
fn natural_order_compares_numbers_as_numbers() {
    let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_1", "ibp94s0", "mlx5_02"];
    v.sort_by(|a, b| natural_cmp(a, b));
    assert_eq!(v, vec!["ibp94s0", "mlx5_1", "mlx5_2", "mlx5_02", "mlx5_10"]);
}

#[test]
fn the_gid_search_reads_only_what_it_needs() {
    // A table entry the search cannot read (a directory where a GID file should be) is an
    // error when read, so a search that stops at its hit must not reach it.
    let fx = SysfsFixture::all().unwrap();
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net1");
    let topo = RdmaSysfs::new(fx.root());
    let want = [Ipv6Addr::from(0xffff_0a09_0007u128)];
    fx.remove("class/infiniband/rxe0/ports/1/gids/9").unwrap();
    fx.write_attr("class/infiniband/rxe0/ports/1/gids/9/x", "")
        .unwrap();
    let hits = topo.scan_gids("rxe0", 1, &want, true).unwrap().hits;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].index, 2);
    assert!(topo.scan_gids("rxe0", 1, &want, false).is_err());
    assert!(Path::new(fx.path()).exists());
}

#[test]
fn a_scan_learns_the_first_roce_v2_gid_of_each_family_and_stops_once_it_knows_enough() {
    let fx = SysfsFixture::all().unwrap();
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net1");
    let pod6 = "2001:0db8:0000:0000:0000:0000:0000:0009";
    add_gid(&fx, "rxe0", 1, 3, pod6, "RoCE v2", "net1");
    // Entry 9 cannot be read: a scan that reaches it fails.
    fx.remove("class/infiniband/rxe0/ports/1/gids/9").unwrap();
    fx.write_attr("class/infiniband/rxe0/ports/1/gids/9/x", "")
        .unwrap();
    let topo = RdmaSysfs::new(fx.root());
    let v4 = [Ipv6Addr::from(0xffff_0a09_0007u128)];
    let scan = topo.scan_gids("rxe0", 1, &v4, true).unwrap();
    // v0's link-local default GID at 0 and its own address at 1 come before the pod's.
    assert_eq!(
        scan.first_v2,
        crate::kernel::topology::pod::FirstRoceV2 {
            ipv4: Some(1),
            ipv6_routable: None,
            ipv6: Some(0),
        }
    );
    assert_eq!(scan.hits.len(), 1);
    // An IPv6-only interface: UCX would still take an IPv4 GID first, so the scan must know
    // whether there is one. Here entry 1 is, and the scan stops at the pod's entry 3.
    let v6: [Ipv6Addr; 1] = [pod6.parse().unwrap()];
    let scan = topo.scan_gids("rxe0", 1, &v6, true).unwrap();
    assert_eq!(
        (scan.first_v2.ipv6_routable, scan.hits[0].index),
        (Some(3), 3)
    );
    // Twin: without any IPv4 GID in the table, the scan goes on and reaches entry 9.
    fx.remove("class/infiniband/rxe0/ports/1/gids/1").unwrap();
    fx.remove("class/infiniband/rxe0/ports/1/gids/2").unwrap();
    assert!(topo.scan_gids("rxe0", 1, &v6, true).is_err());
}
