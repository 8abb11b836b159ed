//! Unit tests of move mode over the fake kernel: step order, one-request moves, rollback from
//! every step, DEL from the pod and from the host, altname and name clashes.

use nix::errno::Errno;

use crate::attach::modes::move_dev::MoveState;
use crate::attach::tests::kill_points;
use crate::attach::tests::kit::{fail_after, TestHost, World};
use crate::cni::result::{CniResult, IpConfig, Route};
use crate::cni::Command;
use crate::kernel::fake::{ethernet_link, Call, NsKey, POD};
use crate::kernel::rtnetlink::Link;

const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x07];

fn host_nic() -> Link {
    Link {
        parent_dev: Some("0000:3b:00.2".into()),
        parent_bus: Some("pci".into()),
        ..ethernet_link(7, "ens1f0v0")
    }
}

const FIELDS: &str = r#""device":"ens1f0v0","mtu":9000"#;

fn ipam_result() -> CniResult {
    CniResult {
        ips: vec![IpConfig {
            address: "10.10.0.2/24".parse().unwrap(),
            gateway: Some("10.10.0.1".parse().unwrap()),
            interface: None,
        }],
        routes: vec![Route::new(
            "10.20.0.0/16".parse().unwrap(),
            Some("10.10.0.1".parse().unwrap()),
        )],
        ..Default::default()
    }
}

/// The NIC up in the host with an address, to be moved into the pod as `net1`.
fn world() -> World {
    TestHost::new("rdma-net", "c0ffee")
        .links(vec![host_nic()])
        .address(7, "192.0.2.7/24")
        .fields(FIELDS)
        .ipam(ipam_result())
        .build()
}

/// The host exactly as before ADD: same name, MTU, admin state, addresses; no record.
fn assert_host_as_before(w: &World) {
    let (ns, link) = w.kernel.locate(&MAC).expect("device exists");
    assert_eq!(ns, NsKey::Host);
    assert_eq!(link.name, "ens1f0v0");
    assert_eq!(link.mtu, 1500);
    assert!(link.up, "admin state restored");
    assert_eq!(w.kernel.addrs_of(7), vec!["192.0.2.7/24".parse().unwrap()]);
    assert!(w
        .store
        .load("rdma-net", "c0ffee", "net1")
        .unwrap()
        .is_none());
}

/// The NIC's move into the pod (ifindex 7 from the host).
fn moves_in(c: &Call) -> bool {
    matches!(
        c,
        Call::SetLink {
            ns: NsKey::Host,
            index: 7,
            netns: Some(NsKey::Pod(_)),
            ..
        }
    )
}

/// The NIC's move back from the pod to the host.
fn moves_back(c: &Call) -> bool {
    matches!(
        c,
        Call::SetLink {
            ns: NsKey::Pod(_),
            index: 7,
            netns: Some(NsKey::Host),
            ..
        }
    )
}

#[test]
fn add_moves_renames_and_sets_mtu_in_one_request_then_addresses_up_routes() {
    let w = world();
    let result = w.add(None).unwrap();
    let calls = w.calls();
    let moves: Vec<_> = calls
        .iter()
        .filter(|c| matches!(c, Call::SetLink { netns: Some(_), .. }))
        .collect();
    assert_eq!(
        moves,
        vec![&Call::SetLink {
            ns: NsKey::Host,
            index: 7,
            netns: Some(NsKey::pod()),
            name: Some("net1".into()),
            mtu: Some(9000),
            up: None,
        }]
    );
    let pos = |what: fn(&Call) -> bool| calls.iter().position(what).unwrap();
    let addresses = |c: &Call| matches!(c, Call::AddAddress { .. });
    let up = |c: &Call| {
        matches!(
            c,
            Call::SetLink {
                ns: NsKey::Pod(_),
                index: 7,
                up: Some(true),
                ..
            }
        )
    };
    let routes = |c: &Call| matches!(c, Call::AddRoute { .. });
    assert!(pos(moves_in) < pos(addresses));
    assert!(pos(addresses) < pos(up));
    assert!(pos(up) < pos(routes), "routes after up: {calls:?}");
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!(
        (ns, link.name.as_str(), link.mtu, link.up),
        (NsKey::pod(), "net1", 9000, true)
    );
    assert_eq!(w.kernel.addrs_of(7), vec!["10.10.0.2/24".parse().unwrap()]);

    let iface = &result.interfaces[0];
    assert_eq!(iface.name, "net1");
    assert_eq!(iface.mac.as_deref(), Some("02:00:00:00:00:07"));
    assert_eq!(iface.mtu, Some(9000));
    assert_eq!(iface.sandbox.as_deref(), Some(POD));
    assert_eq!(iface.pci_id.as_deref(), Some("0000:3b:00.2"));
    assert_eq!(result.ips[0].interface, Some(0));

    let att = w.store.load("rdma-net", "c0ffee", "net1").unwrap().unwrap();
    assert_eq!(att.phase, crate::attach::record::Phase::Ready);
    assert_eq!(att.state::<MoveState>().unwrap().host.name, "ens1f0v0");
    assert_eq!(att.state::<MoveState>().unwrap().host.mtu, 1500);
    assert_eq!(att.device_key, "pci-0000:3b:00.2");
    assert!(att
        .state::<MoveState>()
        .unwrap()
        .pod_interface
        .ipam_result
        .is_some());
}

#[test]
fn a_failure_after_any_step_leaves_the_host_exactly_as_before() {
    for step in [
        "state-intent",
        "ipam",
        "move",
        "addresses",
        "up",
        "routes",
        "gids",
        "state",
    ] {
        let w = world();
        let err = w.add(fail_after(step)).unwrap_err();
        assert!(err.to_string().contains(step), "{step}: {err}");
        assert_host_as_before(&w);
        // IPAM ADD runs beside the intent record and the move: released after any step.
        let ipam_calls = w.ipam.calls.lock().unwrap().clone();
        assert_eq!(
            ipam_calls,
            vec![Command::Add, Command::Del],
            "{step}: IPAM released"
        );
    }
}

/// (what is refused, the calls that are, the errno they get)
type Refusal = (&'static str, fn(&Call) -> bool, Errno);

#[test]
fn a_kernel_refusal_at_any_kernel_step_rolls_back() {
    let cases: [Refusal; 4] = [
        ("the move", moves_in, Errno::EBUSY),
        (
            "an address in the pod",
            |c| {
                matches!(
                    c,
                    Call::AddAddress {
                        ns: NsKey::Pod(_),
                        ..
                    }
                )
            },
            Errno::EADDRNOTAVAIL,
        ),
        (
            "up in the pod",
            |c| {
                *c == Call::SetLink {
                    ns: NsKey::pod(),
                    index: 7,
                    netns: None,
                    name: None,
                    mtu: None,
                    up: Some(true),
                }
            },
            Errno::ENETDOWN,
        ),
        (
            "a route",
            |c| matches!(c, Call::AddRoute { .. }),
            Errno::ENETUNREACH,
        ),
    ];
    for (call, refused, errno) in cases {
        let w = world();
        w.kernel.fail_when(refused, errno);
        let err = w.add(None).unwrap_err();
        assert_eq!(err.code(), 105, "{call}: {err}");
        assert!(err.to_string().contains(errno.desc()), "{call}: {err}");
        assert_host_as_before(&w);
    }
}

#[test]
fn a_move_that_failed_half_way_is_still_rolled_back() {
    let w = world();
    w.kernel.fail_rename_after_move_when(moves_in);
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), 105, "{err}");
    assert_host_as_before(&w);
}

#[test]
fn an_undo_that_fails_is_reported_with_the_cause() {
    let w = world();
    w.kernel
        .fail_when(|c| matches!(c, Call::AddRoute { .. }), Errno::ENETUNREACH);
    w.kernel.fail_when(moves_back, Errno::EIO);
    let err = w.add(None).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("adding route"), "{text}");
    assert!(text.contains("moving"), "undo failure named: {text}");
    assert_eq!(err.code(), 109);
}

#[test]
fn an_ipam_failure_brings_back_what_moved_beside_it() {
    let mut w = world();
    w.ipam.fail_add = true;
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), 11, "IPAM's own code passes through: {err}");
    let calls = w.calls();
    let moved_in = calls
        .iter()
        .position(moves_in)
        .expect("the move ran beside IPAM ADD");
    assert!(
        calls[moved_in..].iter().any(moves_back),
        "and was undone: {calls:?}"
    );
    assert_eq!(
        *w.ipam.calls.lock().unwrap(),
        vec![Command::Add],
        "no DEL for a failed ADD"
    );
    assert_host_as_before(&w);
}

#[test]
fn an_ifname_taken_in_the_pod_is_refused_before_anything_moves() {
    let w = world();
    w.put_link(
        NsKey::pod(),
        Link {
            index: 3,
            name: "net1".into(),
            hwaddr: vec![2, 0, 0, 0, 0, 3],
            ..Default::default()
        },
    );
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), 103, "{err}");
    assert!(err.to_string().contains("net1"), "{err}");
    assert_eq!(w.ipam.calls.lock().unwrap().len(), 0);
    assert_host_as_before(&w);
}

#[test]
fn del_brings_the_device_back_down_with_name_and_mtu_and_is_idempotent() {
    let w = world();
    w.add(None).unwrap();
    w.run(Command::Del, POD, None).unwrap();
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!(
        (ns, link.name.as_str(), link.mtu, link.up),
        (NsKey::Host, "ens1f0v0", 1500, false)
    );
    let back: Vec<_> = w
        .calls()
        .into_iter()
        .filter(|c| {
            matches!(
                c,
                Call::SetLink {
                    netns: Some(NsKey::Host),
                    ..
                }
            )
        })
        .collect();
    assert_eq!(
        back,
        vec![Call::SetLink {
            ns: NsKey::pod(),
            index: 7,
            netns: Some(NsKey::Host),
            name: Some("ens1f0v0".into()),
            mtu: Some(1500),
            up: None,
        }]
    );
    assert!(w
        .store
        .load("rdma-net", "c0ffee", "net1")
        .unwrap()
        .is_none());
    w.run(Command::Del, POD, None).unwrap();
    w.run(Command::Del, "", None).unwrap();
    assert_eq!(
        *w.ipam.calls.lock().unwrap(),
        vec![Command::Add, Command::Del, Command::Del, Command::Del],
        "IPAM DEL always runs"
    );
}

#[test]
fn del_after_the_netns_died_renames_the_returned_device_in_the_host() {
    let w = world();
    w.add(None).unwrap();
    // What the kernel does to a physical netdev when its netns dies: back to the host, still
    // named as in the pod, down.
    {
        let mut st = w.kernel.state.borrow_mut();
        let entry = st.links.iter_mut().find(|(_, l)| l.hwaddr == MAC).unwrap();
        entry.0 = NsKey::Host;
        entry.1.up = false;
    }
    w.run(Command::Del, "", None).unwrap();
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!(
        (ns, link.name.as_str(), link.mtu),
        (NsKey::Host, "ens1f0v0", 1500)
    );
}

#[test]
fn del_when_the_device_vanished_with_its_netns_succeeds() {
    let w = world();
    w.add(None).unwrap();
    w.kernel
        .state
        .borrow_mut()
        .links
        .retain(|(_, l)| l.hwaddr != MAC);
    w.run(Command::Del, "", None).unwrap();
    assert!(w
        .store
        .load("rdma-net", "c0ffee", "net1")
        .unwrap()
        .is_none());
}

#[test]
fn a_lingering_altname_is_dropped_before_renaming_back() {
    let w = world();
    w.add(None).unwrap();
    {
        let mut st = w.kernel.state.borrow_mut();
        let entry = st.links.iter_mut().find(|(_, l)| l.hwaddr == MAC).unwrap();
        entry.1.altnames.push("ens1f0v0".into());
    }
    w.run(Command::Del, POD, None).unwrap();
    let calls = w.calls();
    let drop_pos = calls
        .iter()
        .position(|c| matches!(c, Call::DelAltname { altname, .. } if altname == "ens1f0v0"));
    let move_pos = calls.iter().position(|c| {
        matches!(
            c,
            Call::SetLink {
                netns: Some(NsKey::Host),
                ..
            }
        )
    });
    assert!(drop_pos.unwrap() < move_pos.unwrap(), "{calls:?}");
    assert_eq!(w.kernel.locate(&MAC).unwrap().1.name, "ens1f0v0");
}

#[test]
fn del_with_the_name_taken_in_the_host_still_brings_the_device_home_and_says_so() {
    let w = world();
    w.add(None).unwrap();
    w.put_link(
        NsKey::Host,
        Link {
            index: 40,
            name: "ens1f0v0".into(),
            hwaddr: vec![2, 0, 0, 0, 0, 40],
            ..Default::default()
        },
    );
    let err = w.run(Command::Del, POD, None).unwrap_err();
    assert_eq!(err.code(), 102, "{err}");
    assert!(err.to_string().contains("rdmans7"), "{err}");
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!((ns, link.name.as_str()), (NsKey::Host, "rdmans7"));
    assert!(
        w.store
            .load("rdma-net", "c0ffee", "net1")
            .unwrap()
            .is_some(),
        "the record stays while DEL reports an error"
    );
}

#[test]
fn a_device_held_by_another_live_attachment_is_refused_naming_the_holder() {
    let w = world();
    w.add(None).unwrap();
    let other = w.conf(Command::Add).replace("rdma-net", "other-net");
    let req = w.request_with_conf(Command::Add, &other, POD);
    let err = w.dispatch(&req, None).unwrap_err();
    assert_eq!(err.code(), 102, "{err}");
    assert!(err.to_string().contains("container c0ffee"), "{err}");
}

#[test]
fn check_verifies_presence_mtu_and_prev_result_addresses() {
    let w = world();
    let result = w.add(None).unwrap();
    let prev = result.to_value("1.1.0").unwrap();
    let mut conf: serde_json::Value = serde_json::from_str(&w.conf(Command::Check)).unwrap();
    conf["prevResult"] = prev;
    let conf = conf.to_string();
    let req = w.request_with_conf(Command::Check, &conf, POD);
    w.dispatch(&req, None).unwrap();

    w.kernel
        .state
        .borrow_mut()
        .addrs
        .get_mut(&7)
        .unwrap()
        .clear();
    let err = w.dispatch(&req, None).unwrap_err();
    assert_eq!(err.code(), 108);
    assert!(err.to_string().contains("10.10.0.2/24"), "{err}");

    w.kernel
        .state
        .borrow_mut()
        .links
        .iter_mut()
        .for_each(|(_, l)| l.mtu = 1400);
    let err = w.dispatch(&req, None).unwrap_err();
    assert!(err.to_string().contains("MTU 1400"), "{err}");
}

#[test]
fn a_kill_at_any_step_leaves_nothing_after_del_and_gc() {
    kill_points::every_kill_point(world, |w, case| {
        let (ns, link) = w.kernel.locate(&MAC).expect("device exists");
        assert_eq!(
            (ns, link.name.as_str(), link.mtu),
            (NsKey::Host, "ens1f0v0", 1500),
            "{case}: the device back under its name and MTU"
        );
        assert!(
            w.store
                .load("rdma-net", "c0ffee", "net1")
                .unwrap()
                .is_none(),
            "{case}: record left"
        );
        kill_points::ipam_released(&w.ipam.calls.lock().unwrap(), case);
        kill_points::no_temp_files(w.store.dir(), case);
    });
}

/// A pod netns that died with no DEL: the kernel returned the physical netdev to the host under
/// the pod's name (or `devN` on a clash) with the pod's MTU. The orphan's replayed DEL finds it
/// by its address, restores name and MTU, releases IPAM and drops the record.
#[test]
fn an_orphan_whose_netns_died_is_released_from_its_record() {
    use crate::attach::operations::{netns_state, orphan_del, NetnsState};
    for returned_as in ["net1", "dev7"] {
        let w = world();
        w.add(None).unwrap();
        let mut att = w.store.load("rdma-net", "c0ffee", "net1").unwrap().unwrap();
        assert_eq!(
            netns_state(&att),
            NetnsState::Alive,
            "the probe sees a live netns"
        );
        {
            let mut st = w.kernel.state.borrow_mut();
            let dev = st.links.iter_mut().find(|(_, l)| l.hwaddr == MAC).unwrap();
            assert_eq!((dev.1.name.as_str(), dev.1.mtu), ("net1", 9000));
            dev.0 = NsKey::Host;
            dev.1.name = returned_as.into();
        }
        att.netns = "/run/netns/rdma-ns-test-gone".into();
        att.conf = Some(serde_json::from_str(&w.conf(Command::Add)).unwrap());
        w.store.save(&att).unwrap();
        assert_eq!(netns_state(&att), NetnsState::Gone);

        let req = orphan_del(&att, w.store.dir()).unwrap();
        assert_eq!(req.env.netns, None);
        assert_eq!(req.env.command, Command::Del);
        w.dispatch(&req, None).unwrap();
        let (ns, link) = w.kernel.locate(&MAC).unwrap();
        assert_eq!(
            (ns, link.name.as_str(), link.mtu),
            (NsKey::Host, "ens1f0v0", 1500),
            "{returned_as}: name and MTU restored"
        );
        assert!(w
            .store
            .load("rdma-net", "c0ffee", "net1")
            .unwrap()
            .is_none());
        kill_points::ipam_released(&w.ipam.calls.lock().unwrap(), returned_as);
    }
}

/// Selectors are ADD's alone: CHECK, DEL and GC work from the record, so a conf whose selector
/// no longer parses still checks and releases what ADD attached; ADD itself refuses it.
#[test]
fn a_broken_selector_stops_add_but_never_check_del_or_gc() {
    let mut w = world();
    w.add(None).unwrap();
    w.fields = r#""deviceID":"0","device":"a/b","mtu":9000"#.into();
    w.run(Command::Check, POD, None).unwrap();
    w.run(Command::Del, POD, None).unwrap();
    let (ns, link) = w.kernel.locate(&MAC).expect("device exists");
    assert_eq!((ns, link.name.as_str()), (NsKey::Host, "ens1f0v0"));
    assert!(w
        .store
        .load("rdma-net", "c0ffee", "net1")
        .unwrap()
        .is_none());
    w.run(Command::Gc, "", None).unwrap();
    let e = w.add(None).unwrap_err();
    assert_eq!(e.code(), 7, "{e}");
    assert!(e.to_string().contains("\"a/b\""), "{e}");
    assert_eq!(
        w.kernel.locate(&MAC).unwrap().0,
        NsKey::Host,
        "nothing moved"
    );
}
