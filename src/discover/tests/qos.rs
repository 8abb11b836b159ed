//! The network's RoCE QoS in the pod interface's alias, as rdma-ns writes it (src/qos.rs): the
//! variables it gives, rails that agree and rails that do not, and an alias that is broken.

use super::model::NoView;
use super::*;
use crate::discover::vars::rails;

/// rdma-ns's alias for DSCP 26 with ECN, priority 3 (traffic class 106).
const ALIAS_106: &str = "rdma-ns roceQos dscp=26 ecn=1 priority=3";

fn aliased(mut i: Iface, alias: &str) -> Iface {
    i.alias = Some(alias.to_string());
    i
}

/// The PF and the SF of the fixture, each a rail whose pod address is at GID index 3.
fn two_rails(aliases: [Option<&str>; 2]) -> (SysfsFixture, TempDir, Vec<Iface>) {
    let fx = SysfsFixture::all().unwrap();
    let sf4 = "0000:0000:0000:0000:0000:ffff:0a3d:0005";
    add_gid(&fx, "mlx5_3", 1, 3, sf4, "RoCE v2", "enp6s0f0s88");
    let ifaces = [
        iface("ens1f0np0", None, &["10.59.0.5/24"]),
        iface("enp6s0f0s88", None, &["10.61.0.5/24"]),
    ]
    .into_iter()
    .zip(aliases)
    .map(|(i, a)| match a {
        Some(a) => aliased(i, a),
        None => i,
    })
    .collect();
    (fx, dev_dir(&[0, 3]), ifaces)
}

#[test]
fn a_rails_alias_gives_the_traffic_class_and_sl_to_nccl_and_ucx() {
    let fx = SysfsFixture::all().unwrap();
    add_gid(&fx, "rxe0", 1, 2, POD_V4, "RoCE v2", "net1");
    let dev = dev_dir(&[4]);
    let pod = [aliased(pod_macvlan(), ALIAS_106)];
    let d = discover(fx.root(), dev.path(), &pod, &NoView).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let (vars, problems) = variables(&d);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        vars,
        vec![
            ("NCCL_IB_DISABLE", "0".to_string()),
            ("NCCL_IB_HCA", "=rxe0:1".into()),
            ("NCCL_IB_GID_INDEX", "2".into()),
            ("NCCL_IB_TC", "106".into()),
            ("NCCL_IB_SL", "3".into()),
            ("NCCL_SOCKET_IFNAME", "=net1".into()),
            ("UCX_NET_DEVICES", "rxe0:1".into()),
            ("UCX_IB_GID_INDEX", "2".into()),
            ("UCX_IB_TRAFFIC_CLASS", "106".into()),
            ("UCX_IB_SL", "3".into()),
        ]
    );
    let doc = serde_json::to_value(rails(&d)).unwrap();
    assert_eq!(
        doc[0]["roceQos"],
        serde_json::json!({"dscp": 26, "ecn": true, "priority": 3})
    );
    // The twin without an alias: no QoS variable, no roceQos in the JSON.
    let d = discover(fx.root(), dev.path(), &[pod_macvlan()], &NoView).unwrap();
    let (vars, _) = variables(&d);
    for name in [
        "NCCL_IB_TC",
        "NCCL_IB_SL",
        "UCX_IB_TRAFFIC_CLASS",
        "UCX_IB_SL",
    ] {
        assert_eq!(var(&vars, name), None, "{name}");
    }
    assert!(serde_json::to_value(rails(&d)).unwrap()[0]
        .get("roceQos")
        .is_none());
}

#[test]
fn a_fifo_dscp_gives_nccl_its_own_traffic_class() {
    let (fx, dev, ifaces) =
        two_rails([Some("rdma-ns roceQos dscp=24 ecn=0 priority=3 fifoDscp=46"); 2]);
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    let (vars, problems) = variables(&d);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(var(&vars, "NCCL_IB_TC"), Some("96"));
    assert_eq!(var(&vars, "NCCL_IB_FIFO_TC"), Some("184"));
    assert_eq!(var(&vars, "UCX_IB_TRAFFIC_CLASS"), Some("96"));
    assert_eq!(var(&vars, "NCCL_IB_SL"), Some("3"));
}

#[test]
fn rails_that_disagree_on_qos_set_none_and_say_why() {
    let other = "rdma-ns roceQos dscp=46 ecn=1 priority=5";
    for (aliases, each) in [
        (
            [Some(ALIAS_106), Some(other)],
            "traffic class 186, priority 5",
        ),
        ([Some(ALIAS_106), None], "enp6s0f0s88 (mlx5_3:1): none"),
    ] {
        let (fx, dev, ifaces) = two_rails(aliases);
        let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
        let (vars, problems) = variables(&d);
        assert_eq!(
            kinds_by_interface(&problems),
            vec![(ProblemKind::RoceQosConflict, None)]
        );
        let msg = &problems[0].msg;
        assert!(
            msg.contains("ens1f0np0 (mlx5_0:1): DSCP 26 with ECN, traffic class 106"),
            "{msg}"
        );
        assert!(msg.contains(each), "{each:?} not in {msg}");
        for name in [
            "NCCL_IB_TC",
            "NCCL_IB_SL",
            "UCX_IB_TRAFFIC_CLASS",
            "UCX_IB_SL",
        ] {
            assert_eq!(var(&vars, name), None, "{name}");
        }
        assert_eq!(var(&vars, "NCCL_IB_GID_INDEX"), Some("3"), "the rest stays");
    }
    // The twin: the same QoS on both rails.
    let (fx, dev, ifaces) = two_rails([Some(ALIAS_106); 2]);
    let d = discover(fx.root(), dev.path(), &ifaces, &NoView).unwrap();
    let (vars, problems) = variables(&d);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(var(&vars, "NCCL_IB_TC"), Some("106"));
}

#[test]
fn a_broken_alias_of_rdma_ns_is_a_problem_and_anothers_alias_is_nothing() {
    let (fx, dev, ifaces) = two_rails([Some("rdma-ns roceQos dscp=99 ecn=1 priority=3"), None]);
    let d = discover(fx.root(), dev.path(), &ifaces[..1], &NoView).unwrap();
    assert_eq!(
        kinds_by_interface(&d.problems),
        vec![(ProblemKind::RoceQosUnreadable, Some("ens1f0np0"))]
    );
    assert!(d.problems[0].msg.contains("`dscp` 99"), "{}", d.problems[0]);
    let (fx2, dev2, ifaces2) = two_rails([Some("uplink to leaf 3"), None]);
    let d = discover(fx2.root(), dev2.path(), &ifaces2[..1], &NoView).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(d.interfaces[0].roce_qos, None);
    drop((fx, dev));
}
