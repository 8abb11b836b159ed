//! Step `roce-qos` over the fake host, whose RDMA CM configfs keeps values as the kernel does
//! (kernel/conformance.rs holds the two to the same behaviour): the conf's checks, the alias in
//! every shape, RDMA CM's default on the pod's own ports (written after a move, the host's
//! value back after DEL) and never on a shared one, its refusals, and a kill after every step.

use super::*;
use crate::attach::tests::kill_points;
use crate::attach::tests::kit::{fail_after, one_address, TestHost, World};
use crate::cni::Command;
use crate::kernel::fake::{ethernet_link, Call, NsKey, POD};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::parse_hwaddr;
use crate::kernel::topology::fixtures::SysfsFixture;

/// DSCP 26 with ECN, priority 3: traffic class 106.
const QOS: &str = r#""roceQos":{"dscp":26,"ecn":true,"priority":3}"#;
const TC: u8 = 106;
const ALIAS: &str = "rdma-ns roceQos dscp=26 ecn=1 priority=3";

fn conf(fields: &str) -> NetConf {
    let text = format!(r#"{{"cniVersion":"1.1.0","name":"n","type":"rdma-ns",{fields}}}"#);
    NetConf::parse(text.as_bytes(), Command::Add).unwrap()
}

#[test]
fn the_conf_is_read_into_its_values() {
    let qos = from_conf(&conf(QOS)).unwrap().unwrap();
    assert_eq!(
        (qos.dscp, qos.ecn, qos.priority, qos.fifo_dscp),
        (26, true, 3, None)
    );
    assert_eq!(qos.traffic_class(), TC);
    let fifo = r#""roceQos":{"dscp":0,"ecn":false,"priority":7,"fifoDscp":63}"#;
    let qos = from_conf(&conf(fifo)).unwrap().unwrap();
    assert_eq!(
        (qos.traffic_class(), qos.fifo_traffic_class()),
        (0, Some(252))
    );
    for absent in [r#""x":1"#, r#""roceQos":null"#] {
        assert_eq!(from_conf(&conf(absent)).unwrap(), None, "{absent}");
    }
}

#[test]
fn a_wrong_value_names_its_field_and_value() {
    for (fields, field, says) in [
        (
            r#""roceQos":{"dscp":64,"ecn":true,"priority":3}"#,
            "roceQos.dscp",
            "64 is not",
        ),
        (
            r#""roceQos":{"dscp":-1,"ecn":true,"priority":3}"#,
            "roceQos.dscp",
            "-1 is not",
        ),
        (
            r#""roceQos":{"dscp":"26","ecn":true,"priority":3}"#,
            "roceQos.dscp",
            "\"26\"",
        ),
        (
            r#""roceQos":{"dscp":26,"ecn":1,"priority":3}"#,
            "roceQos.ecn",
            "1 is not true or false",
        ),
        (
            r#""roceQos":{"dscp":26,"ecn":true,"priority":8}"#,
            "roceQos.priority",
            "8 is not",
        ),
        (
            r#""roceQos":{"dscp":26,"ecn":true,"priority":3,"fifoDscp":99}"#,
            "roceQos.fifoDscp",
            "99 is not",
        ),
        (
            r#""roceQos":{"ecn":true,"priority":3}"#,
            "roceQos.dscp",
            "is required",
        ),
        (
            r#""roceQos":{"dscp":26,"priority":3}"#,
            "roceQos.ecn",
            "is required",
        ),
        (
            r#""roceQos":{"dscp":26,"ecn":false}"#,
            "roceQos.priority",
            "is required",
        ),
        (
            r#""roceQos":{"dscp":26,"ecn":true,"priority":3,"tos":106}"#,
            "roceQos.tos",
            "unknown key `tos`",
        ),
        (r#""roceQos":106"#, "roceQos", "must be an object"),
    ] {
        let e = from_conf(&conf(fields)).unwrap_err();
        assert_eq!(e.code(), 7, "{fields}: {e}");
        let text = e.to_string();
        assert!(text.contains(&format!("`{field}`")), "{fields}: {text}");
        assert!(text.contains(says), "{fields}: {says:?} not in {text}");
    }
}

// ---- the nodes ----

const ROCE_MAC: &str = "0c:42:a1:3b:00:00";

/// mlx5_0's RoCE netdev (fixture sysfs: PCI 0000:3b:00.0), with an alias of the node's.
fn roce_netdev() -> Link {
    Link {
        index: 4,
        name: "ens1f0np0".into(),
        mtu: 1500,
        hwaddr: parse_hwaddr(ROCE_MAC).unwrap(),
        up: true,
        link_type: 1,
        parent_dev: Some("0000:3b:00.0".into()),
        parent_bus: Some("pci".into()),
        alias: Some("uplink to leaf 3".into()),
        ..Default::default()
    }
}

/// Exclusive netns mode, move mode on the RoCE netdev, whose ib device mlx5_0 (index 3) moves.
fn exclusive_move(fields: &str) -> TestHost {
    TestHost::new("qn", "c1")
        .links(vec![roce_netdev()])
        .sysfs(SysfsFixture::all().unwrap())
        .rdma(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)])
        .fields(&format!(r#""device":"ens1f0np0",{fields}"#))
}

/// A veth end for Soft-RoCE devices, in move or macvlan mode (`mode_fields`).
fn soft_roce(mode_fields: &str, netns_mode: NetnsMode) -> World {
    TestHost::new("qn", "c1")
        .links(vec![ethernet_link(7, "vnic")])
        .rdma(Some(netns_mode), &[])
        .fields(&format!(r#"{mode_fields},"softRoce":true,{QOS}"#))
        .ipam(one_address("10.9.0.5/24"))
        .build()
}

fn rxe_name() -> String {
    crate::attach::soft_roce::device_name("qn", "c1", "net1")
}

/// The host's default of mlx5_0 before any pod: `value`, with a group of the node's when
/// `group`.
fn node_default(w: &World, value: u8, group: bool) {
    let mut st = w.kernel.state.borrow_mut();
    st.cm.tos.insert((3, 1), value);
    if group {
        st.cm.groups.push("mlx5_0".into());
    }
}

fn cm_value(w: &World, index: u32) -> u8 {
    w.kernel
        .state
        .borrow()
        .cm
        .tos
        .get(&(index, 1))
        .copied()
        .unwrap_or(0)
}

fn groups(w: &World) -> Vec<String> {
    w.kernel.state.borrow().cm.groups.clone()
}

fn alias_of(w: &World, ns: NsKey, index: u32) -> Option<String> {
    let st = w.kernel.state.borrow();
    let (_, link) = st
        .links
        .iter()
        .find(|(k, l)| *k == ns && l.index == index)
        .unwrap();
    link.alias.clone()
}

fn position(calls: &[Call], what: impl Fn(&Call) -> bool) -> usize {
    calls
        .iter()
        .position(what)
        .unwrap_or_else(|| panic!("not called: {calls:?}"))
}

fn record(w: &World) -> QosRecord {
    let att = w.store.load("qn", "c1", "net1").unwrap().unwrap();
    att.steps.get(CONF_KEY).unwrap().unwrap()
}

// ---- exclusive netns mode: the moved device ----

#[test]
fn a_moved_device_gets_the_byte_after_its_move_and_its_own_value_back_after_del() {
    for group in [false, true] {
        let w = exclusive_move(QOS).build();
        node_default(&w, 40, group);
        w.add(None).unwrap();
        let calls = w.calls();
        let read = position(&calls, |c| matches!(c, Call::CmDefaultTos { .. }));
        let moved = position(&calls, |c| matches!(c, Call::MoveIb { .. }));
        let written = position(&calls, |c| {
            *c == Call::CmSetDefaultTos {
                name: "mlx5_0".into(),
                port: 1,
                tos: TC,
            }
        });
        assert!(read < moved && moved < written, "group {group}: {calls:?}");
        assert_eq!(cm_value(&w, 3), TC, "group {group}");
        assert_eq!(alias_of(&w, NsKey::pod(), 4).as_deref(), Some(ALIAS));
        let d = &record(&w).defaults[0];
        assert_eq!(
            (d.made_group, d.before, d.written, d.restore),
            (!group, Some(40), Some(TC), true),
            "group {group}"
        );
        w.run(Command::Check, POD, None).unwrap();
        w.run(Command::Del, POD, None).unwrap();
        assert_eq!(w.rdma.location("mlx5_0"), Some(NsKey::Host));
        assert_eq!(cm_value(&w, 3), 40, "group {group}: the node's value back");
        assert_eq!(groups(&w).contains(&"mlx5_0".to_string()), group);
        let back = alias_of(&w, NsKey::Host, 4);
        assert_eq!(back.as_deref(), Some("uplink to leaf 3"), "group {group}");
    }
}

#[test]
fn check_names_a_default_or_an_alias_that_changed() {
    let w = exclusive_move(QOS).build();
    w.add(None).unwrap();
    w.kernel.state.borrow_mut().cm.tos.insert((3, 1), 0);
    let e = w.run(Command::Check, POD, None).unwrap_err();
    assert_eq!(e.code(), 108);
    assert!(
        e.to_string().contains("mlx5_0 port 1 is 0, ADD wrote 106"),
        "{e}"
    );
    w.kernel.state.borrow_mut().cm.tos.insert((3, 1), TC);
    w.run(Command::Check, POD, None).unwrap();
    w.kernel
        .set_alias(Ns::Pod(&Netns::open(Path::new(POD)).unwrap()), 4, "x")
        .unwrap();
    let e = w.run(Command::Check, POD, None).unwrap_err();
    assert_eq!(e.code(), 108);
    assert!(
        e.to_string().contains("net1 has the alias Some(\"x\")"),
        "{e}"
    );
}

#[test]
fn a_kill_at_any_step_of_a_move_leaves_the_nodes_value_and_alias() {
    kill_points::every_kill_point(
        || {
            let w = exclusive_move(QOS).build();
            node_default(&w, 40, false);
            w
        },
        |w, case| {
            assert_eq!(w.rdma.location("mlx5_0"), Some(NsKey::Host), "{case}");
            assert_eq!(cm_value(w, 3), 40, "{case}: the node's default");
            assert_eq!(groups(w), Vec::<String>::new(), "{case}: a group is left");
            let alias = alias_of(w, NsKey::Host, 4);
            assert_eq!(alias.as_deref(), Some("uplink to leaf 3"), "{case}");
            assert!(
                w.store.load("qn", "c1", "net1").unwrap().is_none(),
                "{case}"
            );
        },
    );
}

#[test]
fn the_steps_own_kill_points_are_visited() {
    crate::attach::plan::VISITED.with(|v| v.borrow_mut().clear());
    exclusive_move(QOS).build().add(None).unwrap();
    let visited = crate::attach::plan::VISITED.with(|v| std::mem::take(&mut *v.borrow_mut()));
    let at = |step: &str| visited.iter().position(|s| s == step).unwrap_or(usize::MAX);
    let order = [
        "state-intent",
        "roce-qos-host",
        "ib-move",
        "roce-qos-alias",
        "roce-qos",
        "state",
    ];
    for pair in order.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{pair:?} in {visited:?}");
    }
}

#[test]
fn del_waits_for_a_device_that_is_not_home_yet() {
    let w = exclusive_move(QOS).build();
    node_default(&w, 40, false);
    w.add(None).unwrap();
    // The move home fails: the device stays in the pod, and a value written now would be lost
    // to the move that brings it home later.
    let refuse = std::rc::Rc::new(std::cell::Cell::new(true));
    let now = refuse.clone();
    w.kernel.fail_when(
        move |c| {
            now.get()
                && matches!(
                    c,
                    Call::MoveIb {
                        target: NsKey::Host,
                        ..
                    }
                )
        },
        nix::errno::Errno::ENOMEM,
    );
    let e = w.run(Command::Del, POD, None).unwrap_err();
    assert!(
        e.to_string().contains("not back in the host netns yet"),
        "{e}"
    );
    assert!(
        w.store.load("qn", "c1", "net1").unwrap().is_some(),
        "kept for the retry"
    );
    assert_eq!(cm_value(&w, 3), TC, "nothing written into the pod's device");
    refuse.set(false);
    w.run(Command::Del, POD, None).unwrap();
    assert_eq!(cm_value(&w, 3), 40);
    assert_eq!(groups(&w), Vec::<String>::new());
    assert!(w.store.load("qn", "c1", "net1").unwrap().is_none());
}

#[test]
fn without_configfs_a_device_that_moves_is_refused_and_nothing_is_left() {
    use crate::kernel::rdma_cm::CmFs;
    for (missing, says) in [
        (CmFs::NoConfigfs, "mount -t configfs"),
        (CmFs::NoRdmaCm, "modprobe rdma_cm"),
    ] {
        let w = exclusive_move(QOS).build();
        w.kernel.state.borrow_mut().cm.availability = missing;
        let e = w.add(None).unwrap_err();
        assert_eq!(e.code(), 120, "{e}");
        let text = e.to_string();
        assert!(text.contains("mlx5_0") && text.contains(says), "{text}");
        assert!(!w.calls().iter().any(|c| matches!(c, Call::MoveIb { .. })));
        assert!(w.store.load("qn", "c1", "net1").unwrap().is_none());
        assert_eq!(
            alias_of(&w, NsKey::Host, 4).as_deref(),
            Some("uplink to leaf 3")
        );
    }
}

#[test]
fn a_moved_infiniband_device_gets_the_alias_and_no_default() {
    let ipoib_addr = "00:00:10:29:fe:80:00:00:00:00:00:00:04:3f:72:03:00:da:21:30";
    let w = TestHost::new("qn", "c1")
        .links(vec![Link {
            index: 5,
            name: "ibp94s0".into(),
            mtu: 4092,
            hwaddr: parse_hwaddr(ipoib_addr).unwrap(),
            up: true,
            link_type: 32,
            parent_dev: Some("0000:5e:00.0".into()),
            parent_bus: Some("pci".into()),
            ..Default::default()
        }])
        .sysfs(SysfsFixture::all().unwrap())
        .rdma(Some(NetnsMode::Exclusive), &[("ibp94s0", 4)])
        .ipoib_follows(parse_hwaddr(ipoib_addr).unwrap())
        .fields(&format!(r#""device":"ibp94s0",{QOS}"#))
        .build();
    w.add(None).unwrap();
    assert!(!w.calls().iter().any(Call::is_rdma_cm), "{:?}", w.calls());
    assert_eq!(record(&w).alias.map(|a| a.ours).as_deref(), Some(ALIAS));
    w.run(Command::Del, POD, None).unwrap();
}

// ---- Soft-RoCE: the pod's own device ----

#[test]
fn a_soft_roce_device_gets_the_byte_and_its_group_goes_with_it() {
    for (mode, netns_mode) in [
        (r#""device":"vnic""#, NetnsMode::Shared),
        (r#""mode":"macvlan","master":"vnic""#, NetnsMode::Shared),
        (r#""device":"vnic""#, NetnsMode::Exclusive),
    ] {
        let w = soft_roce(mode, netns_mode);
        w.add(None).unwrap();
        let name = rxe_name();
        let index = w.kernel.state.borrow().rxe[0].index;
        assert_eq!(cm_value(&w, index), TC, "{mode} {netns_mode:?}");
        let calls = w.calls();
        let written = position(&calls, |c| matches!(c, Call::CmSetDefaultTos { .. }));
        if netns_mode == NetnsMode::Exclusive {
            let moved = position(&calls, |c| matches!(c, Call::MoveIb { .. }));
            assert!(moved < written, "written after the move: {calls:?}");
        }
        let d = &record(&w).defaults[0];
        assert_eq!(
            (
                d.ibdev.as_str(),
                d.made_group,
                d.before,
                d.written,
                d.restore
            ),
            (name.as_str(), true, Some(0), Some(TC), false)
        );
        w.run(Command::Check, POD, None).unwrap();
        w.run(Command::Del, POD, None).unwrap();
        assert_eq!(groups(&w), Vec::<String>::new(), "{mode}: the group went");
        assert!(w.kernel.state.borrow().cm.tos.is_empty());
    }
}

#[test]
fn a_kill_at_any_step_with_soft_roce_leaves_no_group() {
    for netns_mode in [NetnsMode::Shared, NetnsMode::Exclusive] {
        kill_points::every_kill_point(
            || soft_roce(r#""device":"vnic""#, netns_mode),
            |w, case| {
                assert_eq!(groups(w), Vec::<String>::new(), "{netns_mode:?} {case}");
                assert!(w.kernel.state.borrow().rxe.is_empty(), "{case}");
                assert!(
                    w.store.load("qn", "c1", "net1").unwrap().is_none(),
                    "{case}"
                );
            },
        );
    }
}

#[test]
fn a_failure_after_the_step_takes_everything_back() {
    for step in ["roce-qos-alias", "roce-qos", "devperm", "state"] {
        let w = soft_roce(r#""device":"vnic""#, NetnsMode::Exclusive);
        let e = w.add(fail_after(step)).unwrap_err();
        assert!(e.to_string().contains(step), "{e}");
        assert_eq!(groups(&w), Vec::<String>::new(), "{step}");
        assert!(w.kernel.state.borrow().rxe.is_empty(), "{step}");
        assert_eq!(alias_of(&w, NsKey::Host, 7), None, "{step}");
    }
}

// ---- shared devices ----

/// A macvlan child of mlx5_0's netdev, its GID where the kernel puts it.
fn shared_macvlan(fields: &str) -> World {
    let fx = SysfsFixture::all().unwrap();
    let port = "class/infiniband/mlx5_0/ports/1";
    fx.write_attr(
        format!("{port}/gids/6"),
        "0000:0000:0000:0000:0000:ffff:0a09:0005",
    )
    .unwrap();
    fx.write_attr(format!("{port}/gid_attrs/types/6"), "RoCE v2")
        .unwrap();
    fx.write_attr(format!("{port}/gid_attrs/ndevs/6"), "net1")
        .unwrap();
    TestHost::new("qn", "c1")
        .links(vec![roce_netdev()])
        .sysfs(fx)
        .rdma(Some(NetnsMode::Shared), &[("mlx5_0", 3)])
        .fields(&format!(
            r#""mode":"macvlan","master":"ens1f0np0",{fields}"#
        ))
        .ipam(one_address("10.9.0.5/24"))
        .build()
}

#[test]
fn a_shared_device_is_read_never_written() {
    for group in [false, true] {
        let w = shared_macvlan(QOS);
        node_default(&w, 40, group);
        w.add(None).unwrap();
        let writes: Vec<Call> = w
            .calls()
            .into_iter()
            .filter(|c| {
                matches!(
                    c,
                    Call::CmMakeGroup { .. }
                        | Call::CmRemoveGroup { .. }
                        | Call::CmSetDefaultTos { .. }
                )
            })
            .collect();
        assert_eq!(writes, vec![], "group {group}");
        let read = w
            .calls()
            .iter()
            .any(|c| matches!(c, Call::CmDefaultTos { .. }));
        assert_eq!(read, group, "read only through the node's group");
        assert!(record(&w).defaults.is_empty());
        let child = w
            .kernel
            .state
            .borrow()
            .links
            .iter()
            .find(|(k, _)| *k == NsKey::pod())
            .cloned();
        assert_eq!(child.unwrap().1.alias.as_deref(), Some(ALIAS));
        assert_eq!(cm_value(&w, 3), 40);
        w.run(Command::Del, POD, None).unwrap();
    }
    let w = shared_macvlan(QOS);
    node_default(&w, 40, true);
    let ctx = w.ctx(None);
    assert_eq!(shared_default(ctx.rdma, "mlx5_0", 1).unwrap(), Some(40));
    w.kernel.state.borrow_mut().cm.groups.clear();
    assert_eq!(shared_default(ctx.rdma, "mlx5_0", 1).unwrap(), None);
}

#[test]
fn a_shared_device_needs_no_configfs() {
    let w = shared_macvlan(QOS);
    w.kernel.state.borrow_mut().cm.availability = crate::kernel::rdma_cm::CmFs::NoConfigfs;
    w.add(None).unwrap();
    w.run(Command::Del, POD, None).unwrap();
}

#[test]
fn without_roce_qos_the_step_does_nothing() {
    let w = exclusive_move(r#""mtu":1500"#).build();
    w.add(None).unwrap();
    assert!(!w.calls().iter().any(Call::is_rdma_cm));
    assert!(!w.calls().iter().any(|c| matches!(c, Call::SetAlias { .. })));
    let att = w.store.load("qn", "c1", "net1").unwrap().unwrap();
    assert_eq!(att.steps.get::<QosRecord>(CONF_KEY).unwrap(), None);
}

// ---- chained mode: the VF's device moves, the previous plugin's interface ----

#[test]
fn chained_mode_writes_the_vfs_device_and_puts_both_back() {
    let prev = r#""prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:0a","sandbox":"/proc/self/ns/net"}],"ips":[{"address":"10.1.0.2/24","interface":0}]}"#;
    let w = TestHost::new("qn", "c1")
        .sysfs(SysfsFixture::all().unwrap())
        .rdma(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)])
        .fields(&format!(
            r#""mode":"rdma","deviceID":"0000:3b:00.2",{prev},{QOS}"#
        ))
        .build();
    w.put_link(
        NsKey::pod(),
        Link {
            index: 12,
            name: "net1".into(),
            hwaddr: vec![2, 0, 0, 0, 0, 10],
            parent_dev: Some("0000:3b:00.2".into()),
            parent_bus: Some("pci".into()),
            ..Default::default()
        },
    );
    w.kernel.state.borrow_mut().cm.tos.insert((9, 1), 12);
    w.add(None).unwrap();
    assert_eq!(cm_value(&w, 9), TC);
    assert_eq!(alias_of(&w, NsKey::pod(), 12).as_deref(), Some(ALIAS));
    w.run(Command::Check, POD, None).unwrap();
    w.run(Command::Del, POD, None).unwrap();
    assert_eq!(cm_value(&w, 9), 12, "the VF's value from before the pod");
    assert_eq!(
        alias_of(&w, NsKey::pod(), 12),
        None,
        "the previous plugin's link as it was"
    );
    assert_eq!(groups(&w), Vec::<String>::new());
}
