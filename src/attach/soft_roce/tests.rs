//! Step `soft-roce` over the fake host: the device added from the pod's netns after the pod
//! interface is configured, its refusals (each leaving nothing), its part in permissions,
//! device-info and the GID wait, and its release wherever the kernel left it.

use super::*;
use crate::attach::tests::kill_points;
use crate::attach::tests::kit::{fail_after, one_address, TestHost, World};
use crate::cni::Command;
use crate::kernel::fake::{ethernet_link, Call, NsKey, POD};
use crate::kernel::topology::fixtures::{
    CharDevSpec, GidSpec, IbDeviceSpec, IbParentSpec, PortSpec, SysfsFixture,
};
use crate::kernel::topology::CharDevKind;
use crate::testutil::TempDir;

/// Move mode's device: a veth end, as the VM tier and kind-like clusters have.
const MOVE: &str = r#""device":"vnic""#;
/// Macvlan mode on the same netdev.
const MACVLAN: &str = r#""mode":"macvlan","master":"vnic""#;

/// The name the kit's attachment (network cn, container c1, net1) gets.
fn name() -> String {
    device_name("cn", "c1", "net1")
}

fn nic() -> Link {
    ethernet_link(7, "vnic")
}

/// The shapes the device is made in: move and macvlan mode in shared RDMA netns mode, and move
/// mode in exclusive mode, where the device moves into the pod.
const SHAPES: [(&str, NetnsMode); 3] = [
    (MOVE, NetnsMode::Shared),
    (MACVLAN, NetnsMode::Shared),
    (MOVE, NetnsMode::Exclusive),
];

/// The node with `mode_fields` and `"softRoce": true` in the conf.
fn host(mode_fields: &str) -> TestHost {
    TestHost::new("cn", "c1")
        .links(vec![nic()])
        .fields(&format!(r#"{mode_fields},"softRoce":true"#))
        .ipam(one_address("10.9.0.5/24"))
}

fn world(mode_fields: &str) -> World {
    host(mode_fields).build()
}

/// The Soft-RoCE devices of the fake host.
fn rxe(w: &World) -> Vec<crate::kernel::fake::FakeRxe> {
    w.kernel.state.borrow().rxe.clone()
}

fn record_of(w: &World) -> Option<SoftRoceRecord> {
    let att = w.store.load("cn", "c1", "net1").unwrap()?;
    att.steps.get(CONF_KEY).unwrap()
}

/// Nothing of the attachment is left: no rxe device, no pod interface, no record.
fn assert_nothing_left(w: &World, case: &str) {
    assert_eq!(rxe(w), vec![], "{case}: a Soft-RoCE device is left");
    assert!(
        w.rdma.location(&name()).is_none(),
        "{case}: the ib device is left"
    );
    let pod_links = w.kernel.state.borrow().links.clone();
    assert!(
        !pod_links.iter().any(|(ns, _)| *ns == NsKey::pod()),
        "{case}: a link is left in the pod: {pod_links:?}"
    );
    assert!(
        w.store.load("cn", "c1", "net1").unwrap().is_none(),
        "{case}: record left"
    );
}

/// ADD fails with `code` and a message holding each of `words`; nothing of it is left.
fn refused(w: &World, code: u32, words: &[&str], case: &str) -> crate::error::Error {
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), code, "{case}: {err}");
    for word in words {
        assert!(
            err.to_string().contains(word),
            "{case}: {word:?} not in {err}"
        );
    }
    assert_nothing_left(w, case);
    err
}

fn position(calls: &[Call], what: impl Fn(&Call) -> bool) -> usize {
    calls
        .iter()
        .position(what)
        .unwrap_or_else(|| panic!("not called: {calls:?}"))
}

#[test]
fn the_device_is_added_from_the_pod_on_the_configured_interface_and_del_removes_it() {
    for mode in [MOVE, MACVLAN] {
        let w = world(mode);
        w.add(None).unwrap();
        let calls = w.calls();
        let up = position(
            &calls,
            |c| matches!(c, Call::SetLink { ns, up: Some(true), .. } if *ns == NsKey::pod()),
        );
        let added = position(&calls, |c| matches!(c, Call::AddRdmaLink { .. }));
        assert!(up < added, "{mode}: the interface is up first: {calls:?}");
        assert_eq!(
            calls[added],
            Call::AddRdmaLink {
                ns: NsKey::pod(),
                name: name(),
                link_type: "rxe".into(),
                netdev: "net1".into(),
            },
            "{mode}"
        );
        let checked = position(&calls, |c| matches!(c, Call::UdpPortBound { .. }));
        assert_eq!(
            calls[checked],
            Call::UdpPortBound {
                ns: NsKey::pod(),
                port: 4791
            }
        );
        let devices = rxe(&w);
        assert_eq!(devices.len(), 1, "{mode}");
        assert_eq!(
            (devices[0].netdev_ns.clone(), devices[0].name.clone()),
            (NsKey::pod(), name())
        );
        let rec = record_of(&w).expect("recorded");
        assert_eq!(
            rec,
            SoftRoceRecord {
                ibdev: name(),
                index: Some(devices[0].index),
                netdev: "net1".into(),
                in_pod: false,
            },
            "{mode}"
        );
        w.run(Command::Check, POD, None).unwrap();
        w.run(Command::Del, POD, None).unwrap();
        assert_nothing_left(&w, mode);
        w.run(Command::Del, POD, None).unwrap();
    }
}

#[test]
fn in_exclusive_netns_mode_the_device_moves_into_the_pod() {
    let w = host(MOVE).rdma(Some(NetnsMode::Exclusive), &[]).build();
    w.add(None).unwrap();
    let index = rxe(&w)[0].index;
    let calls = w.calls();
    let added = position(&calls, |c| matches!(c, Call::AddRdmaLink { .. }));
    let checked = position(&calls, |c| matches!(c, Call::UdpPortBound { .. }));
    let moved = position(&calls, |c| matches!(c, Call::MoveIb { .. }));
    assert!(added < checked && checked < moved, "{calls:?}");
    assert_eq!(
        calls[moved],
        Call::MoveIb {
            ns: NsKey::Host,
            index,
            target: NsKey::pod()
        }
    );
    assert_eq!(w.rdma.location(&name()), Some(NsKey::pod()));
    assert!(record_of(&w).unwrap().in_pod);
    w.run(Command::Check, POD, None).unwrap();
    w.run(Command::Del, POD, None).unwrap();
    assert_nothing_left(&w, "exclusive");
}

#[test]
fn check_fails_when_the_device_is_gone() {
    let w = world(MACVLAN);
    w.add(None).unwrap();
    w.kernel.state.borrow_mut().rxe.clear();
    w.kernel
        .state
        .borrow_mut()
        .ib_devices
        .retain(|(_, n, _)| *n != name());
    let err = w.run(Command::Check, POD, None).unwrap_err();
    assert_eq!(err.code(), 108, "{err}");
    assert!(err.to_string().contains(&name()), "{err}");
}

/// An ADD killed right after the kernel made the device, whose pod netns then died: its macvlan
/// went with it, and the device (this fake's, unlike rxe, which would delete it) stayed.
fn killed_and_orphaned() -> World {
    let w = world(MACVLAN);
    let e = w
        .add(Some(crate::attach::plan::Fault::SimulatedKillAt(
            "soft-roce-link".into(),
        )))
        .unwrap_err();
    assert!(e.to_string().contains("killed"), "{e}");
    let mut att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
    att.netns = "/run/netns/rdma-ns-test-gone".into();
    w.store.save(&att).unwrap();
    w.kernel
        .state
        .borrow_mut()
        .links
        .retain(|(ns, _)| *ns != NsKey::pod());
    assert_eq!(rxe(&w).len(), 1, "the device outlived its netdev");
    w
}

/// DEL deletes a device left in the host when the pod netns is gone, and so does `reconcile`,
/// which replays DEL from the record.
#[test]
fn del_and_reconcile_delete_a_device_left_when_the_pod_netns_is_gone() {
    let w = killed_and_orphaned();
    let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
    let req = crate::attach::operations::orphan_del(&att, w.store.dir()).unwrap();
    assert_eq!(req.env.netns, None);
    w.dispatch(&req, None).unwrap();
    assert_nothing_left(&w, "reconcile");

    let w = killed_and_orphaned();
    w.run(Command::Del, "", None).unwrap();
    assert!(
        w.calls()
            .iter()
            .any(|c| matches!(c, Call::DeleteRdmaLink { ns, .. } if *ns == NsKey::Host)),
        "deleted from the host"
    );
    assert_nothing_left(&w, "netns gone");
}

#[test]
fn remove_device_leaves_a_device_that_took_the_name_since_and_deletes_its_own() {
    let w = world(MACVLAN);
    let rdma = &w.rdma;
    let rec = |index| SoftRoceRecord {
        ibdev: "rxe_other".into(),
        index,
        netdev: "net1".into(),
        in_pod: false,
    };
    remove_device(rdma, None, &rec(Some(5))).unwrap();
    rdma.configure(Some(NetnsMode::Shared), &[("rxe_other", 9)]);
    remove_device(rdma, None, &rec(Some(5))).unwrap();
    assert_eq!(w.rdma.location("rxe_other"), Some(NsKey::Host), "not ours");
    assert!(!w
        .calls()
        .iter()
        .any(|c| matches!(c, Call::DeleteRdmaLink { .. })));
    // A hardware device under the name refuses DELLINK: reported, not hidden.
    let err = remove_device(rdma, None, &rec(None)).unwrap_err();
    assert_eq!(err.code(), 105, "{err}");
    assert!(err.to_string().contains("rxe_other"), "{err}");
}

#[test]
fn a_failure_after_any_step_leaves_nothing() {
    for (mode, exclusive) in [(MOVE, false), (MACVLAN, false), (MOVE, true)] {
        let steps = [
            "soft-roce-link",
            "soft-roce-netns",
            "soft-roce",
            "gids",
            "state",
        ];
        for step in steps
            .iter()
            .filter(|s| exclusive || **s != "soft-roce-netns")
        {
            let netns_mode = if exclusive {
                NetnsMode::Exclusive
            } else {
                NetnsMode::Shared
            };
            let w = host(mode).rdma(Some(netns_mode), &[]).build();
            let err = w.add(fail_after(step)).unwrap_err();
            assert!(err.to_string().contains(step), "{mode} {step}: {err}");
            let case = format!("{mode} exclusive={exclusive} failed after {step}");
            if mode == MOVE {
                let (ns, link) = w.kernel.locate(&nic().hwaddr).unwrap();
                assert_eq!((ns, link.name.as_str()), (NsKey::Host, "vnic"), "{case}");
            }
            assert_nothing_left(&w, &case);
        }
    }
}

#[test]
fn a_kernel_refusal_of_any_soft_roce_call_rolls_back() {
    type Pick = fn(&Call) -> bool;
    let calls: [(&str, Pick); 4] = [
        ("add", |c| matches!(c, Call::AddRdmaLink { .. })),
        ("socket", |c| matches!(c, Call::UdpPortBound { .. })),
        ("move", |c| matches!(c, Call::MoveIb { .. })),
        ("port", |c| matches!(c, Call::IbPortState { .. })),
    ];
    for (what, pick) in calls {
        let w = host(MOVE).rdma(Some(NetnsMode::Exclusive), &[]).build();
        w.kernel.fail_when(pick, nix::errno::Errno::EIO);
        refused(&w, 105, &[CONF_KEY], what);
    }
}

#[test]
fn a_kill_at_any_step_leaves_no_device_after_del_and_gc() {
    for (mode, netns_mode) in SHAPES {
        kill_points::every_kill_point(
            || host(mode).rdma(Some(netns_mode), &[]).build(),
            |w, case| {
                let case = format!("{mode} {netns_mode:?}: {case}");
                assert_nothing_left(w, &case);
                kill_points::ipam_released(&w.ipam.calls.lock().unwrap(), &case);
            },
        );
    }
}

mod published;
mod refusals;

#[test]
fn the_name_is_the_attachments_own_and_fits_the_kernels_bound() {
    let long = "f".repeat(4096);
    let names = [
        device_name("cn", "c1", "net1"),
        device_name("cn", "c1", "net2"),
        device_name("cn", "c2", "net1"),
        device_name("cm", "c1", "net1"),
        device_name("cn", "c1n", "et1"),
        device_name(&long, &long, "net1"),
    ];
    assert_eq!(
        names[0],
        device_name("cn", "c1", "net1"),
        "the same every time"
    );
    // The same for every binary: records hold the name, and a DEL by a newer binary finds the
    // device by it.
    assert_eq!(names[0], "rxe_5582107245a");
    assert_eq!(nth_name("cn", "c1", "net1", 2), "rxe_f150182c581");
    for (i, n) in names.iter().enumerate() {
        // UCX finds no device whose name needs more than its 16 bytes with the NUL.
        assert!(n.len() <= 15 && n.starts_with("rxe_"), "{n}");
        assert!(!names[..i].contains(n), "{n} given twice: {names:?}");
    }
    let nth: Vec<String> = (0..4).map(|n| nth_name("cn", "c1", "net1", n)).collect();
    assert_eq!(nth[0], names[0]);
    for (i, n) in nth.iter().enumerate() {
        assert!(n.len() <= 15 && !nth[..i].contains(n), "{nth:?}");
    }
}

/// Two attachments whose names hash alike: the later one takes its next name, recorded, and the
/// other's device is left alone.
#[test]
fn a_name_another_attachment_holds_is_passed_over() {
    let w = world(MACVLAN);
    let mut other = {
        let probe = world(MACVLAN);
        probe.add(None).unwrap();
        probe.store.load("cn", "c1", "net1").unwrap().unwrap()
    };
    other.container_id = "c2".into();
    w.store.save(&other).unwrap();
    w.rdma.configure(Some(NetnsMode::Shared), &[(&name(), 40)]);
    w.add(None).unwrap();
    let rec = record_of(&w).unwrap();
    assert_eq!(rec.ibdev, nth_name("cn", "c1", "net1", 1), "the next name");
    assert_eq!(rxe(&w)[0].name, rec.ibdev);
    assert_eq!(
        w.rdma.location(&name()),
        Some(NsKey::Host),
        "the other's stays"
    );
    w.run(Command::Del, POD, None).unwrap();
    assert_eq!(rxe(&w), vec![]);
    assert_eq!(
        w.rdma.location(&name()),
        Some(NsKey::Host),
        "the other's still stays"
    );
}
