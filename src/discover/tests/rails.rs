//! A pod with several rails: the variables when their GID indexes agree or differ, and the
//! per-rail facts `--format json` lists for GPU–NIC affinity.

use super::model::NoView;
use super::*;
use crate::discover::vars::rails;

const V6_LL_V2: &str = "fe80:0000:0000:0000:0e42:a1ff:fe3b:0002";

/// Moved netdevs, one rail each: the PF (10.59.0.5, RoCE v2 at 3), the VF (10.60.0.5 at 5,
/// after an IPv6 pair), the SF (10.61.0.5 at 3) and the IPoIB parent (port GID, index 0).
fn four_rails() -> (SysfsFixture, TempDir, Vec<Iface>) {
    let fx = SysfsFixture::all().unwrap();
    let vf6 = "2001:0db8:0000:0000:0000:0000:0000:0006";
    add_gid(&fx, "mlx5_2", 1, 2, vf6, "IB/RoCE v1", "ens1f0v0");
    add_gid(&fx, "mlx5_2", 1, 3, vf6, "RoCE v2", "ens1f0v0");
    let vf4 = "0000:0000:0000:0000:0000:ffff:0a3c:0005";
    add_gid(&fx, "mlx5_2", 1, 4, vf4, "IB/RoCE v1", "ens1f0v0");
    add_gid(&fx, "mlx5_2", 1, 5, vf4, "RoCE v2", "ens1f0v0");
    let sf4 = "0000:0000:0000:0000:0000:ffff:0a3d:0005";
    add_gid(&fx, "mlx5_3", 1, 2, sf4, "IB/RoCE v1", "enp6s0f0s88");
    add_gid(&fx, "mlx5_3", 1, 3, sf4, "RoCE v2", "enp6s0f0s88");
    let mut ib = iface("ibp94s0", None, &["192.168.1.5/24"]);
    ib.link_type = 32;
    let ifaces = vec![
        iface("ens1f0np0", None, &["10.59.0.5/24"]),
        iface("ens1f0v0", None, &["10.60.0.5/24"]),
        iface("enp6s0f0s88", None, &["10.61.0.5/24"]),
        ib,
    ];
    (fx, dev_dir(&[0, 1, 2, 3]), ifaces)
}

#[test]
fn rails_with_differing_indexes_leave_each_devices_gid_to_nccl_and_ucx() {
    let (fx, dev, ifaces) = four_rails();
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let (vars, problems) = variables(&d);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        vars,
        vec![
            ("NCCL_IB_DISABLE", "0".to_string()),
            (
                "NCCL_IB_HCA",
                "=ibp94s0:1,mlx5_0:1,mlx5_2:1,mlx5_3:1".into()
            ),
            ("NCCL_IB_ADDR_FAMILY", "AF_INET".into()),
            ("NCCL_IB_ROCE_VERSION_NUM", "2".into()),
            (
                "NCCL_SOCKET_IFNAME",
                "=ibp94s0,ens1f0np0,ens1f0v0,enp6s0f0s88".into()
            ),
            (
                "UCX_NET_DEVICES",
                "ibp94s0:1,mlx5_0:1,mlx5_2:1,mlx5_3:1".into()
            ),
        ]
    );
    let vf = &d.interfaces[2];
    assert_eq!(
        (vf.gid_index, vf.auto_gid_index),
        (
            Some(5),
            AutoGid {
                nccl: Some(5),
                ucx: Some(5)
            }
        )
    );
}

#[test]
fn json_lists_each_rail_with_its_pci_function_and_numa_node() {
    let (fx, dev, ifaces) = four_rails();
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    let doc = serde_json::to_value(rails(&d)).unwrap();
    assert_eq!(
        doc,
        serde_json::json!([
            {"netdev": "ibp94s0", "ip": "192.168.1.5", "ibdev": "ibp94s0", "port": 1,
             "gidIndex": 0, "numaNode": 1, "pciAddress": "0000:5e:00.0"},
            {"netdev": "ens1f0np0", "ip": "10.59.0.5", "ibdev": "mlx5_0", "port": 1,
             "gidIndex": 3, "numaNode": 0, "pciAddress": "0000:3b:00.0"},
            {"netdev": "ens1f0v0", "ip": "10.60.0.5", "ibdev": "mlx5_2", "port": 1,
             "gidIndex": 5, "numaNode": 0, "pciAddress": "0000:3b:00.2"},
            // An SF's function is the PCI function its aux device sits under.
            {"netdev": "enp6s0f0s88", "ip": "10.61.0.5", "ibdev": "mlx5_3", "port": 1,
             "gidIndex": 3, "numaNode": 0, "pciAddress": "0000:06:00.0"},
        ])
    );
    // A virtual device has no PCI function and no NUMA node.
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net1");
    let dev = dev_dir(&[4]);
    let mv = [pod_macvlan()];
    let d = discover(fx.root(), dev.path(), &mv, &NoView).unwrap();
    let doc = serde_json::to_value(rails(&d)).unwrap();
    assert_eq!(doc[0]["pciAddress"], serde_json::Value::Null);
    assert_eq!(doc[0]["numaNode"], serde_json::Value::Null);
    assert_eq!(doc[0]["ibdev"], "rxe0");
}

#[test]
fn rails_that_agree_set_their_one_index_and_no_family() {
    let (fx, dev, ifaces) = four_rails();
    // The PF and the SF both hold their pod address at 3.
    let both = [ifaces[0].clone(), ifaces[2].clone()];
    let d = discover(fx.root(), dev.path(), &both, &NoView).unwrap();
    let (vars, problems) = variables(&d);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(var(&vars, "NCCL_IB_GID_INDEX"), Some("3"));
    assert_eq!(var(&vars, "UCX_IB_GID_INDEX"), Some("3"));
    assert_eq!(var(&vars, "NCCL_IB_ADDR_FAMILY"), None);
    assert_eq!(var(&vars, "NCCL_IB_ROCE_VERSION_NUM"), None);
    // Twin: with the VF's index 5 they differ, and the family is set instead.
    let d = discover(fx.root(), dev.path(), &ifaces[..3], &NoView).unwrap();
    let (vars, _) = variables(&d);
    assert_eq!(var(&vars, "NCCL_IB_GID_INDEX"), None);
    assert_eq!(var(&vars, "NCCL_IB_ADDR_FAMILY"), Some("AF_INET"));
}

#[test]
fn rails_of_different_families_with_differing_indexes_are_a_problem() {
    let (fx, dev, ifaces) = four_rails();
    // The VF with its IPv6 address only (v2 at 3); the PF keeps IPv4 at 3: they agree.
    let vf6 = iface("ens1f0v0", None, &["2001:db8::6/64"]);
    let d = discover(
        fx.root(),
        dev.path(),
        &[ifaces[0].clone(), vf6.clone()],
        &NoView,
    )
    .unwrap();
    let (vars, problems) = variables(&d);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(var(&vars, "NCCL_IB_GID_INDEX"), Some("3"));
    // With the SF moved to index 5, they differ, and NCCL_IB_ADDR_FAMILY cannot serve both.
    let sf4 = "0000:0000:0000:0000:0000:ffff:0a3d:0005";
    fx.write_attr("class/infiniband/mlx5_3/ports/1/gids/3", V6_LL_V2)
        .unwrap();
    add_gid(&fx, "mlx5_3", 1, 5, sf4, "RoCE v2", "enp6s0f0s88");
    let d = discover(fx.root(), dev.path(), &[ifaces[2].clone(), vf6], &NoView).unwrap();
    let (vars, problems) = variables(&d);
    let kinds: Vec<ProblemKind> = problems.iter().map(|p| p.kind).collect();
    assert_eq!(kinds, vec![ProblemKind::GidFamilyConflict]);
    assert!(
        problems[0]
            .msg
            .contains("ens1f0v0 AF_INET6, enp6s0f0s88 AF_INET"),
        "{}",
        problems[0]
    );
    assert_eq!(var(&vars, "NCCL_IB_ADDR_FAMILY"), None);
    assert_eq!(var(&vars, "NCCL_IB_GID_INDEX"), None);
}

#[test]
fn ipv6_rails_that_differ_are_a_problem_because_ucx_takes_the_link_local_gid() {
    let (fx, dev, _) = four_rails();
    // The SF gets an IPv6 address at 5; the VF has its own at 3. UCX, with no IPv4 RoCE v2
    // GID on either port, takes the first RoCE v2 IPv6 one: link-local entry 1.
    let sf6 = "2001:0db8:0000:0000:0000:0000:0000:0007";
    add_gid(&fx, "mlx5_3", 1, 4, sf6, "IB/RoCE v1", "enp6s0f0s88");
    add_gid(&fx, "mlx5_3", 1, 5, sf6, "RoCE v2", "enp6s0f0s88");
    fx.remove("class/infiniband/mlx5_2/ports/1/gids/5").unwrap();
    fx.remove("class/infiniband/mlx5_3/ports/1/gids/3").unwrap();
    let rails6 = [
        iface("ens1f0v0", None, &["2001:db8::6/64"]),
        iface("enp6s0f0s88", None, &["2001:db8::7/64"]),
    ];
    let d = discover(fx.root(), dev.path(), &rails6, &NoView).unwrap();
    let (vars, problems) = variables(&d);
    assert_eq!(var(&vars, "NCCL_IB_ADDR_FAMILY"), Some("AF_INET6"));
    assert_eq!(
        kinds_by_interface(&problems),
        vec![
            (ProblemKind::AutoGidNotThePods, Some("ens1f0v0")),
            (ProblemKind::AutoGidNotThePods, Some("enp6s0f0s88"))
        ]
    );
    // NCCL skips link-local GIDs and finds the pod's; UCX does not.
    assert!(
        problems[0]
            .msg
            .contains("that is UCX index 1, not the pod's index 3")
            && !problems[0].msg.contains("NCCL index"),
        "{}",
        problems[0]
    );
}
