//! Unit tests of step `rail` over the fake kernel: the rules, the table and the ARP values in
//! every mode, their order against `addresses`, CHECK naming what is missing, DEL twice, two
//! rails of one pod against the same pod without `rail`, and the kill-point loop of each mode.

use nix::errno::Errno;

use crate::attach::rail::{RailRecord, CONF_KEY};
use crate::attach::tests::kill_points;
use crate::attach::tests::kit::{fail_after, TestHost, World};
use crate::cni::result::{CniResult, IpConfig, Route};
use crate::cni::Command;
use crate::kernel::fake::{Call, NsKey, POD};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::{Ipv4Setting, Link, RouteSpec, RuleSpec};
use crate::kernel::topology::fixtures::SysfsFixture;

/// A host netdev standing for rail `n`'s NIC: ifindex 10 + n, up.
fn nic(n: u32) -> Link {
    Link {
        index: 10 + n,
        name: format!("ens{n}f0np0"),
        mtu: 9000,
        hwaddr: vec![2, 0, 0, 0, 0, 10 + n as u8],
        up: true,
        link_type: 1,
        ..Default::default()
    }
}

/// What IPAM gives rail `n`: 10.10{n}.0.2/24 behind gateway .1, and the east-west route
/// every rail carries, through that gateway.
fn rail_ipam(n: u32) -> CniResult {
    let gw = format!("10.10{n}.0.1").parse().unwrap();
    CniResult {
        ips: vec![IpConfig {
            address: format!("10.10{n}.0.2/24").parse().unwrap(),
            gateway: Some(gw),
            interface: None,
        }],
        routes: vec![Route::new("10.100.0.0/14".parse().unwrap(), Some(gw))],
        ..Default::default()
    }
}

/// `mode` with `rail` as given (`""` for none) over rail 0's NIC.
fn world(mode: &str, rail: &str) -> World {
    let selector = match mode {
        "move" => r#""device":"ens0f0np0""#,
        _ => r#""master":"ens0f0np0""#,
    };
    TestHost::new("rails", "c1")
        .links(vec![nic(0), nic(1)])
        .fields(&format!(r#""mode":"{mode}",{selector}{rail}"#))
        .ipam(rail_ipam(0))
        .build()
}

const RAIL: &str = r#","rail":true"#;

/// The one pod interface the mode put in the pod (by name).
fn pod_link(w: &World, ifname: &str) -> Link {
    w.kernel
        .state
        .borrow()
        .links
        .iter()
        .find(|(ns, l)| *ns == NsKey::pod() && l.name == ifname)
        .map(|(_, l)| l.clone())
        .unwrap_or_else(|| panic!("{ifname} in the pod"))
}

fn rules(w: &World) -> Vec<RuleSpec> {
    let st = w.kernel.state.borrow();
    st.rules.iter().map(|(_, r)| *r).collect()
}

/// The pod's routes in `table` (None: main), as (destination, gateway).
fn routes_in(w: &World, table: Option<u32>) -> Vec<(String, Option<String>)> {
    let st = w.kernel.state.borrow();
    st.routes
        .iter()
        .filter(|(ns, r)| *ns == NsKey::pod() && r.table == table)
        .map(|(_, r)| (r.dst.to_string(), r.gateway.map(|g| g.to_string())))
        .collect()
}

fn ipv4(w: &World, index: u32, setting: Ipv4Setting) -> u32 {
    let st = w.kernel.state.borrow();
    st.ipv4_conf
        .get(&index)
        .and_then(|c| c.get(setting))
        .unwrap_or(0)
}

fn east_west(gw: &str) -> (String, Option<String>) {
    ("10.100.0.0/14".into(), Some(gw.into()))
}

#[test]
fn every_mode_routes_the_rails_addresses_through_its_own_table() {
    for mode in ["move", "macvlan"] {
        let w = world(mode, RAIL);
        let result = w.add(None).unwrap();
        let index = pod_link(&w, "net1").index;
        let table = 1000 + index;
        assert_eq!(
            rules(&w),
            [RuleSpec {
                src: "10.100.0.2/32".parse().unwrap(),
                table,
                priority: 1000,
            }],
            "{mode}"
        );
        assert_eq!(
            routes_in(&w, Some(table)),
            [("10.100.0.0/24".into(), None), east_west("10.100.0.1")],
            "{mode}: the connected route, then IPAM's"
        );
        assert!(routes_in(&w, None).is_empty(), "{mode}: nothing in main");
        for (setting, want) in [
            (Ipv4Setting::ArpIgnore, 1),
            (Ipv4Setting::ArpAnnounce, 2),
            (Ipv4Setting::RpFilter, 2),
        ] {
            assert_eq!(ipv4(&w, index, setting), want, "{mode}: {setting:?}");
        }
        // The result lists the table's routes with their table (CNI 1.1.0).
        let listed: Vec<_> = result.routes.iter().map(|r| (r.table, r.scope)).collect();
        assert_eq!(
            listed,
            [(Some(table), Some(253)), (Some(table), None)],
            "{mode}"
        );
        let rec: RailRecord = w
            .store
            .load("rails", "c1", "net1")
            .unwrap()
            .unwrap()
            .steps
            .get(CONF_KEY)
            .unwrap()
            .expect("the rail is recorded");
        assert_eq!(
            (rec.ifindex, rec.table, rec.routes.len()),
            (index, table, 2)
        );

        w.run(Command::Del, POD, None).unwrap();
        assert!(rules(&w).is_empty(), "{mode}: DEL removes the rule");
        assert!(routes_in(&w, Some(table)).is_empty(), "{mode}");
        w.run(Command::Del, POD, None).unwrap();
    }
}

#[test]
fn arp_values_are_set_before_the_link_comes_up_and_rules_before_routes() {
    let w = world("move", RAIL);
    w.add(None).unwrap();
    let calls = w.calls();
    let at = |want: &dyn Fn(&Call) -> bool| calls.iter().position(want).expect("called");
    let conf = at(&|c| matches!(c, Call::SetIpv4Conf { .. }));
    let up = at(&|c| matches!(c, Call::SetLink { up: Some(true), .. }));
    let rule = at(&|c| matches!(c, Call::AddRule { .. }));
    let route = at(&|c| matches!(c, Call::AddRoute { .. }));
    assert!(conf < up, "ARP values while the link is down: {calls:?}");
    assert!(rule < route, "{calls:?}");
}

#[test]
fn without_rail_nothing_of_it_happens() {
    let w = world("macvlan", "");
    w.add(None).unwrap();
    let rail_calls = w.calls().into_iter().filter(|c| {
        matches!(
            c,
            Call::SetIpv4Conf { .. } | Call::AddRule { .. } | Call::Routes { .. }
        )
    });
    assert_eq!(rail_calls.count(), 0);
    assert_eq!(
        routes_in(&w, None),
        [east_west("10.100.0.1")],
        "IPAM's route in main"
    );
    let att = w.store.load("rails", "c1", "net1").unwrap().unwrap();
    assert!(att.steps.get::<RailRecord>(CONF_KEY).unwrap().is_none());
}

/// Two rails of one pod, each with the same east-west route through its own gateway: with
/// `rail` both attach, each in its own table; without it the second collides in main.
#[test]
fn two_rails_of_one_pod_with_rail_and_the_twin_without() {
    for rail in [RAIL, ""] {
        let mut w = world("macvlan", rail);
        w.add(None).unwrap();
        w.ipam.result = Some(rail_ipam(1));
        let conf = w.conf(Command::Add).replace("ens0f0np0", "ens1f0np0");
        let second = w.dispatch(&w.request_for(Command::Add, &conf, POD, "net2"), None);
        if rail.is_empty() {
            let e = second.expect_err("the same route in main twice");
            assert_eq!(e.code(), 105, "{e}");
            assert!(e.to_string().contains("10.100.0.0/14"), "{e}");
            continue;
        }
        second.unwrap();
        let (one, two) = (pod_link(&w, "net1").index, pod_link(&w, "net2").index);
        assert_ne!(one, two);
        assert_eq!(
            routes_in(&w, Some(1000 + one)),
            [("10.100.0.0/24".into(), None), east_west("10.100.0.1")]
        );
        assert_eq!(
            routes_in(&w, Some(1000 + two)),
            [("10.101.0.0/24".into(), None), east_west("10.101.0.1")]
        );
        let tables: Vec<u32> = rules(&w).iter().map(|r| r.table).collect();
        assert_eq!(tables, [1000 + one, 1000 + two]);
    }
}

#[test]
fn a_table_another_rail_holds_is_refused_naming_the_field() {
    let mut w = world("macvlan", r#","rail":{"table":2001}"#);
    w.add(None).unwrap();
    w.ipam.result = Some(rail_ipam(1));
    let conf = w.conf(Command::Add).replace("ens0f0np0", "ens1f0np0");
    let e = w
        .dispatch(&w.request_for(Command::Add, &conf, POD, "net2"), None)
        .unwrap_err();
    assert_eq!(e.code(), 7, "{e}");
    assert!(e.to_string().contains("rail.table"), "{e}");
    assert_eq!(rules(&w).len(), 1, "the first rail's rule alone");
}

#[test]
fn overrides_set_table_priority_and_values() {
    let w = world(
        "move",
        r#","rail":{"table":3000,"priority":200,"arpIgnore":2,"arpAnnounce":1,"rpFilter":0}"#,
    );
    w.add(None).unwrap();
    let index = pod_link(&w, "net1").index;
    assert_eq!((rules(&w)[0].table, rules(&w)[0].priority), (3000, 200));
    assert_eq!(routes_in(&w, Some(3000)).len(), 2);
    assert_eq!(ipv4(&w, index, Ipv4Setting::ArpIgnore), 2);
    assert_eq!(ipv4(&w, index, Ipv4Setting::ArpAnnounce), 1);
    assert_eq!(ipv4(&w, index, Ipv4Setting::RpFilter), 0);
}

/// A change made to the fake host by hand.
type Breakage = Box<dyn Fn(&World)>;

/// CHECK with prevResult: passes as ADD left it, then names each thing taken away.
#[test]
fn check_names_a_missing_rule_route_or_arp_value() {
    let w = world("macvlan", RAIL);
    let result = w.add(None).unwrap();
    let mut conf: serde_json::Value = serde_json::from_str(&w.conf(Command::Check)).unwrap();
    conf["prevResult"] = result.to_value("1.1.0").unwrap();
    let req = w.request_with_conf(Command::Check, &conf.to_string(), POD);
    w.dispatch(&req, None).unwrap();
    let index = pod_link(&w, "net1").index;
    let breakages: [(&str, Breakage); 3] = [
        (
            "arp_ignore 1 (it is 0)",
            Box::new(move |w| {
                let mut st = w.kernel.state.borrow_mut();
                st.ipv4_conf.get_mut(&index).unwrap().0[18] = 0;
            }),
        ),
        (
            "route 10.100.0.0/14 via 10.100.0.1",
            Box::new(|w| {
                w.kernel
                    .state
                    .borrow_mut()
                    .routes
                    .retain(|(_, r)| r.gateway.is_none())
            }),
        ),
        (
            "rule from 10.100.0.2/32 lookup",
            Box::new(|w| w.kernel.state.borrow_mut().rules.clear()),
        ),
    ];
    for (named, break_it) in breakages {
        break_it(&w);
        let e = w.dispatch(&req, None).unwrap_err();
        assert_eq!(e.code(), 108, "{e}");
        assert!(e.to_string().contains(named), "{named}: {e}");
    }
}

/// A failure after the rail's steps rolls back: no rule, no route, the interface gone.
#[test]
fn a_failure_after_each_rail_step_leaves_nothing() {
    for step in ["rail-sysctls", "rail-intent", "rail-rules", "routes"] {
        let w = world("macvlan", RAIL);
        w.add(fail_after(step)).unwrap_err();
        assert!(rules(&w).is_empty(), "{step}: a rule is left");
        assert!(w.kernel.state.borrow().routes.is_empty(), "{step}");
        assert!(
            w.store.load("rails", "c1", "net1").unwrap().is_none(),
            "{step}"
        );
    }
}

/// DEL when the rules are already gone (a second DEL, a hand cleanup) or a delete fails for
/// another reason: the first succeeds, the second is reported and the record kept.
#[test]
fn del_tolerates_what_is_gone_and_reports_what_fails() {
    let w = world("move", RAIL);
    w.add(None).unwrap();
    w.kernel.state.borrow_mut().rules.clear();
    w.run(Command::Del, POD, None).unwrap();

    let w = world("move", RAIL);
    w.add(None).unwrap();
    w.kernel
        .fail_when(|c| matches!(c, Call::DelRule { .. }), Errno::EPERM);
    let e = w.run(Command::Del, POD, None).unwrap_err();
    assert!(
        e.to_string().contains("removing rule from 10.100.0.2/32"),
        "{e}"
    );
    assert!(
        w.store.load("rails", "c1", "net1").unwrap().is_some(),
        "kept for a retry"
    );
}

#[test]
fn a_kill_at_any_step_leaves_no_rule_or_route_after_del_and_gc() {
    for mode in ["move", "macvlan", "ipoib"] {
        let make = || match mode {
            "ipoib" => TestHost::new("rails", "c1")
                .links(vec![ib_parent()])
                .fields(&format!(r#""mode":"ipoib","master":"ib0"{RAIL}"#))
                .ipam(rail_ipam(0))
                .build(),
            _ => world(mode, RAIL),
        };
        // The loop's clean run: the probes below see what ADD made.
        let w = make();
        w.add(None).unwrap();
        assert_eq!(rules(&w).len(), 1, "{mode}: the rule, while it exists");
        assert_eq!(w.kernel.state.borrow().routes.len(), 2, "{mode}");
        kill_points::every_kill_point(make, |w, case| {
            assert!(rules(w).is_empty(), "{mode} {case}: a rule is left");
            assert!(
                w.kernel.state.borrow().routes.is_empty(),
                "{mode} {case}: a route"
            );
            assert!(
                w.store.load("rails", "c1", "net1").unwrap().is_none(),
                "{mode} {case}: record left"
            );
            kill_points::ipam_released(&w.ipam.calls.lock().unwrap(), case);
        });
    }
}

/// An IPoIB parent that can carry a connected-mode child.
fn ib_parent() -> Link {
    let mut hwaddr = vec![0x80, 0, 0, 0x48, 0xfe, 0x80];
    hwaddr.resize(20, 0x11);
    Link {
        index: 20,
        name: "ib0".into(),
        mtu: 2044,
        hwaddr,
        up: true,
        link_type: 32,
        ..Default::default()
    }
}

mod chained {
    use super::*;

    /// The previous plugin's VF netdev `net1` in the pod: up, addressed, prevResult's route in
    /// main; its ib device mlx5_2 in the host, exclusive mode.
    fn world(rail: &str) -> World {
        let prev = r#""prevResult":{"cniVersion":"1.1.0",
            "interfaces":[{"name":"net1","sandbox":"/proc/self/ns/net"}],
            "ips":[{"address":"10.100.0.2/24","interface":0}],
            "routes":[{"dst":"10.100.0.0/14","gw":"10.100.0.1"}]}"#;
        let w = TestHost::new("rails", "c1")
            .sysfs(SysfsFixture::all().unwrap())
            .rdma(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)])
            .fields(&format!(
                r#""mode":"rdma","deviceID":"0000:3b:00.2",{prev}{rail}"#
            ))
            .build();
        w.put_link(
            NsKey::pod(),
            Link {
                index: 12,
                name: "net1".into(),
                up: true,
                hwaddr: vec![2, 0, 0, 0, 0, 12],
                ..Default::default()
            },
        );
        let mut st = w.kernel.state.borrow_mut();
        st.addrs.insert(12, vec!["10.100.0.2/24".parse().unwrap()]);
        st.routes.push((NsKey::pod(), main_route()));
        drop(st);
        w
    }

    fn main_route() -> RouteSpec {
        RouteSpec {
            dst: "10.100.0.0/14".parse().unwrap(),
            gateway: Some("10.100.0.1".parse().unwrap()),
            oif: 12,
            metric: None,
            mtu: None,
            table: None,
            scope: None,
        }
    }

    #[test]
    fn the_rail_takes_prev_results_routes_out_of_main_into_its_table() {
        let w = world(RAIL);
        let result = w.add(None).unwrap();
        assert_eq!(
            routes_in(&w, Some(1012)),
            [("10.100.0.0/24".into(), None), east_west("10.100.0.1")]
        );
        assert!(
            routes_in(&w, None).is_empty(),
            "main is free for the next rail"
        );
        assert_eq!(rules(&w)[0].src, "10.100.0.2/32".parse().unwrap());
        assert_eq!(ipv4(&w, 12, Ipv4Setting::ArpIgnore), 1);
        assert!(result.routes.iter().all(|r| r.table == Some(1012)));
        w.run(Command::Check, POD, None).unwrap();
        w.run(Command::Del, POD, None).unwrap();
        assert!(rules(&w).is_empty());
        assert!(routes_in(&w, Some(1012)).is_empty());
    }

    #[test]
    fn a_rollback_gives_the_previous_plugin_its_routes_and_values_back() {
        let w = world(RAIL);
        w.kernel
            .state
            .borrow_mut()
            .ipv4_conf
            .insert(12, crate::kernel::rtnetlink::Ipv4Conf(vec![0; 33]));
        w.add(fail_after("rail-routes")).unwrap_err();
        assert_eq!(routes_in(&w, None), [east_west("10.100.0.1")]);
        assert!(routes_in(&w, Some(1012)).is_empty());
        assert!(rules(&w).is_empty());
        assert_eq!(
            ipv4(&w, 12, Ipv4Setting::ArpIgnore),
            0,
            "the old value is back"
        );
    }

    #[test]
    fn a_kill_at_any_step_leaves_no_rule_after_del_and_gc() {
        kill_points::every_kill_point(
            || world(RAIL),
            |w, case| {
                assert!(rules(w).is_empty(), "{case}: a rule is left");
                assert!(routes_in(w, Some(1012)).is_empty(), "{case}: the table");
                assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::Host), "{case}");
            },
        );
    }
}
