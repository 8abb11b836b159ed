//! Unit tests of ib device handling in move mode over the fake kernel and fake RDMA netlink,
//! on fixture sysfs trees of real mlx5 layouts: the exclusive-mode success paths need mlx5
//! hardware, so this seam is where they are covered (the VM tier covers rxe's refusal for real).

use nix::errno::Errno;

use crate::attach::tests::kill_points;
use crate::attach::tests::kit::{fail_after, TestHost, World};
use crate::cni::Command;
use crate::kernel::fake::{Call, NsKey, POD};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::{parse_hwaddr, Link};
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;

const ROCE_MAC: &str = "0c:42:a1:3b:00:00";
const IPOIB_ADDR: &str = "00:00:10:29:fe:80:00:00:00:00:00:00:04:3f:72:03:00:da:21:30";
/// The conf's fields that select the RoCE netdev.
const ROCE: &str = r#""device":"ens1f0np0""#;

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
        ..Default::default()
    }
}

fn ipoib_netdev() -> Link {
    Link {
        index: 5,
        name: "ibp94s0".into(),
        mtu: 4092,
        hwaddr: parse_hwaddr(IPOIB_ADDR).unwrap(),
        up: true,
        link_type: 32,
        parent_dev: Some("0000:5e:00.0".into()),
        parent_bus: Some("pci".into()),
        ..Default::default()
    }
}

/// `links` in the host on the fixture sysfs of every preset, the RDMA subsystem in `mode` with
/// these (name, index) ib devices, and the conf's `fields`.
fn host(
    links: Vec<Link>,
    mode: Option<NetnsMode>,
    devices: &[(&str, u32)],
    fields: &str,
) -> TestHost {
    TestHost::new("rn", "c9")
        .links(links)
        .sysfs(SysfsFixture::all().unwrap())
        .rdma(mode, devices)
        .fields(fields)
}

/// The RoCE netdev in the host and its ib device mlx5_0 (index 3), in exclusive mode.
fn exclusive_roce() -> World {
    host(
        vec![roce_netdev()],
        Some(NetnsMode::Exclusive),
        &[("mlx5_0", 3)],
        ROCE,
    )
    .build()
}

/// (namespace, link) of the netdev with this address, wherever it is.
fn netdev(w: &World, hw: &str) -> (NsKey, Link) {
    let want = parse_hwaddr(hw).unwrap();
    w.kernel
        .state
        .borrow()
        .links
        .iter()
        // IPoIB netdevs are recognized by their port GID: bytes 0-3 change on re-creation.
        .find(|(_, l)| match want.len() {
            20 => l.hwaddr.len() == 20 && l.hwaddr[4..] == want[4..],
            _ => l.hwaddr == want,
        })
        .cloned()
        .unwrap()
}

/// Every ib device move so far, in order.
fn moves(w: &World) -> Vec<Call> {
    w.calls()
        .into_iter()
        .filter(|c| matches!(c, Call::MoveIb { .. }))
        .collect()
}

fn move_ib(ns: NsKey, index: u32, target: NsKey) -> Call {
    Call::MoveIb { ns, index, target }
}

fn refuse_ib_moves(w: &World) {
    w.kernel
        .fail_when(|c| matches!(c, Call::MoveIb { .. }), Errno::EOPNOTSUPP);
}

#[test]
fn exclusive_mode_moves_the_ib_device_first_and_brings_it_back_first() {
    let w = exclusive_roce();
    w.run(Command::Add, POD, None).unwrap();
    assert_eq!(moves(&w), vec![move_ib(NsKey::Host, 3, NsKey::pod())]);
    assert_eq!(w.rdma.location("mlx5_0"), Some(NsKey::pod()));
    let calls = w.calls();
    let ib_in = calls.iter().position(|c| matches!(c, Call::MoveIb { .. }));
    let netdev_in = calls.iter().position(|c| {
        matches!(
            c,
            Call::SetLink {
                ns: NsKey::Host,
                index: 4,
                netns: Some(_),
                ..
            }
        )
    });
    assert!(netdev_in.is_some(), "then the netdev: {calls:?}");
    assert!(ib_in < netdev_in, "the ib device first: {calls:?}");
    let att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
    let rec = att.ib_device().cloned().expect("ib device recorded");
    assert_eq!(
        (rec.ibdev.as_str(), rec.index, rec.infiniband),
        ("mlx5_0", 3, false)
    );
    assert_eq!(rec.driver, "mlx5_core");

    w.run(Command::Check, POD, None).unwrap();
    w.run(Command::Del, POD, None).unwrap();
    assert_eq!(
        moves(&w)[1],
        move_ib(NsKey::pod(), 3, NsKey::Host),
        "ib device back, from the pod"
    );
    assert_eq!(w.rdma.location("mlx5_0"), Some(NsKey::Host));
    let (ns, link) = netdev(&w, ROCE_MAC);
    assert_eq!((ns, link.name.as_str()), (NsKey::Host, "ens1f0np0"));
}

#[test]
fn a_refused_ib_move_moves_nothing_and_says_why() {
    let w = exclusive_roce();
    refuse_ib_moves(&w);
    let err = w.run(Command::Add, POD, None).unwrap_err();
    let text = err.to_string();
    assert_eq!(err.code(), 105, "{text}");
    assert!(
        text.contains("mlx5_0") && text.contains("mlx5_core") && text.contains("disassociate"),
        "{text}"
    );
    assert!(
        !w.calls()
            .iter()
            .any(|c| matches!(c, Call::SetLink { netns: Some(_), .. })),
        "the netdev never moved"
    );
    assert_eq!(netdev(&w, ROCE_MAC).1.name, "ens1f0np0");
    assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
}

#[test]
fn a_failure_after_the_netdev_moved_undoes_both_in_reverse() {
    for step in ["ib-move", "move", "addresses", "up", "state"] {
        let w = exclusive_roce();
        let err = w.run(Command::Add, POD, fail_after(step)).unwrap_err();
        // The failure must be the injected one, not an earlier step failing on its own.
        assert!(
            err.to_string().contains(&format!("after step `{step}`")),
            "{step}: {err}"
        );
        assert_eq!(w.rdma.location("mlx5_0"), Some(NsKey::Host), "{step}");
        let (ns, link) = netdev(&w, ROCE_MAC);
        assert_eq!(
            (ns, link.name.as_str(), link.up),
            (NsKey::Host, "ens1f0np0", true),
            "{step}"
        );
        // One sequence for both seams: the ib device went in first and comes back last, the
        // netdev in between.
        let calls = w.calls();
        let at = |what: Call| {
            calls
                .iter()
                .position(|c| *c == what)
                .unwrap_or_else(|| panic!("{step}: no `{what}` in {calls:?}"))
        };
        let ib_in = at(move_ib(NsKey::Host, 3, NsKey::pod()));
        let ib_back = at(move_ib(NsKey::pod(), 3, NsKey::Host));
        assert!(ib_in < ib_back, "{step}: {calls:?}");
        if step != "ib-move" {
            let netdev_in = calls
                .iter()
                .position(|c| {
                    matches!(
                        c,
                        Call::SetLink { ns: NsKey::Host, index: 4, netns: Some(to), .. }
                            if *to == NsKey::pod()
                    )
                })
                .unwrap_or_else(|| panic!("{step}: the netdev never moved in: {calls:?}"));
            let netdev_back = calls
                .iter()
                .position(|c| {
                    matches!(
                        c,
                        Call::SetLink {
                            netns: Some(NsKey::Host),
                            ..
                        }
                    )
                })
                .unwrap_or_else(|| panic!("{step}: the netdev never came back: {calls:?}"));
            assert!(
                ib_in < netdev_in && netdev_in < netdev_back && netdev_back < ib_back,
                "{step}: ib in, netdev in, netdev back, ib back, in that order: {calls:?}"
            );
        }
        assert!(
            w.store.load("rn", "c9", "net1").unwrap().is_none(),
            "{step}"
        );
    }
}

#[test]
fn a_kill_at_any_step_of_an_exclusive_move_leaves_nothing_after_del_and_gc() {
    for (link, ibdev, index, mac) in [
        (roce_netdev(), "mlx5_0", 3, ROCE_MAC),
        (ipoib_netdev(), "ibp94s0", 7, IPOIB_ADDR),
    ] {
        let fields = format!(r#""device":"{}""#, link.name);
        kill_points::every_kill_point(
            || {
                let host = host(
                    vec![link.clone()],
                    Some(NetnsMode::Exclusive),
                    &[(ibdev, index)],
                    &fields,
                );
                if mac == IPOIB_ADDR {
                    // The kernel re-creates IPoIB netdevs when their ib device moves.
                    host.ipoib_follows(parse_hwaddr(IPOIB_ADDR).unwrap())
                        .build()
                } else {
                    host.build()
                }
            },
            |w, case| {
                assert_eq!(
                    w.rdma.location(ibdev),
                    Some(NsKey::Host),
                    "{case}: {ibdev} back in the host"
                );
                let (ns, back) = netdev(w, mac);
                assert_eq!(
                    (ns, back.name.as_str(), back.mtu),
                    (NsKey::Host, link.name.as_str(), link.mtu),
                    "{case}: the netdev back under its name and MTU"
                );
                assert!(
                    w.store.load("rn", "c9", "net1").unwrap().is_none(),
                    "{case}"
                );
                kill_points::no_temp_files(w.store.dir(), case);
            },
        );
    }
}

#[test]
fn shared_mode_leaves_the_ib_device_unless_exclusive_is_required() {
    let mut w = host(
        vec![roce_netdev()],
        Some(NetnsMode::Shared),
        &[("mlx5_0", 3)],
        ROCE,
    )
    .build();
    w.run(Command::Add, POD, None).unwrap();
    assert!(moves(&w).is_empty());
    w.run(Command::Del, POD, None).unwrap();

    w.fields = r#""device":"ens1f0np0","rdma":"exclusive""#.into();
    let err = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(err.code(), 120, "{err}");
    assert!(err.to_string().contains("netns_mode=0"), "{err}");
    // A kernel whose RDMA netns mode cannot be asked.
    w.rdma.configure(None, &[]);
    let err = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(err.code(), 120, "{err}");
    w.fields = ROCE.into();
    w.run(Command::Add, POD, None).unwrap();
    w.run(Command::Del, POD, None).unwrap();

    w.rdma
        .configure(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)]);
    w.fields = r#""device":"ens1f0np0","rdma":"off""#.into();
    let asked_before = w.calls().len();
    w.run(Command::Add, POD, None).unwrap();
    let rdma_calls: Vec<_> = w.calls()[asked_before..]
        .iter()
        .filter(|c| c.is_rdma())
        .cloned()
        .collect();
    assert!(rdma_calls.is_empty(), "off never asks: {rdma_calls:?}");
}

#[test]
fn ipoib_follows_its_ib_device_and_is_renamed_on_both_sides() {
    let mut w = host(
        vec![ipoib_netdev()],
        Some(NetnsMode::Exclusive),
        &[("ibp94s0", 7)],
        r#""rdmaDevice":"ibp94s0","mtu":2044"#,
    )
    .ipoib_follows(parse_hwaddr(IPOIB_ADDR).unwrap())
    .build();
    w.run(Command::Add, POD, None).unwrap();
    let (ns, link) = netdev(&w, IPOIB_ADDR);
    assert_eq!(
        (ns, link.name.as_str(), link.mtu, link.up),
        (NsKey::pod(), "net1", 2044, true)
    );
    assert!(
        !w.calls().iter().any(|c| matches!(
            c,
            Call::SetLink {
                ns: NsKey::Host,
                index: 5,
                netns: Some(_),
                ..
            }
        )),
        "the IPoIB netdev is not moved by itself: the kernel re-creates it with its ib device"
    );
    assert!(
        w.store
            .load("rn", "c9", "net1")
            .unwrap()
            .unwrap()
            .ib_device()
            .unwrap()
            .infiniband
    );
    w.fields = r#""rdmaDevice":"ibp94s0""#.into();
    w.run(Command::Del, POD, None).unwrap();
    let (ns, link) = netdev(&w, IPOIB_ADDR);
    assert_eq!(
        (ns, link.name.as_str(), link.mtu),
        (NsKey::Host, "ibp94s0", 4092)
    );
    assert_eq!(w.rdma.location("ibp94s0"), Some(NsKey::Host));
}

#[test]
fn ipoib_rollback_renames_the_recreated_host_netdev() {
    let w = host(
        vec![ipoib_netdev()],
        Some(NetnsMode::Exclusive),
        &[("ibp94s0", 7)],
        r#""rdmaDevice":"ibp94s0""#,
    )
    .ipoib_follows(parse_hwaddr(IPOIB_ADDR).unwrap())
    .build();
    w.run(Command::Add, POD, fail_after("up")).unwrap_err();
    let (ns, link) = netdev(&w, IPOIB_ADDR);
    assert_eq!(
        (ns, link.name.as_str(), link.up),
        (NsKey::Host, "ibp94s0", true)
    );
    assert_eq!(w.rdma.location("ibp94s0"), Some(NsKey::Host));
}

#[test]
fn check_fails_when_the_ib_port_is_not_active() {
    let w = exclusive_roce();
    w.run(Command::Add, POD, None).unwrap();
    // IB_PORT_DOWN
    w.rdma.state.borrow_mut().port_state = 1;
    let err = w.run(Command::Check, POD, None).unwrap_err();
    assert_eq!(err.code(), 108);
    assert!(err.to_string().contains("not ACTIVE"), "{err}");
}

mod chained {
    use super::*;

    /// The VF's netdev as the previous plugin left it: `net1` in the pod, on function
    /// 0000:3b:00.2, whose ib device is mlx5_2.
    fn put_vf_netdev_in_pod(w: &World) {
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
    }

    fn prev() -> String {
        r#""prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:0a","sandbox":"/proc/self/ns/net"}],
            "ips":[{"address":"10.1.0.2/24","interface":0}]}"#
            .to_string()
    }

    /// Chained mode's conf with these other fields.
    fn chained_fields(fields: &str) -> String {
        format!(r#""mode":"rdma",{fields}"#)
    }

    /// No netdev in the host; the VF's ib device mlx5_2 (index 9) there, in exclusive mode.
    fn world(fields: &str) -> World {
        host(
            vec![],
            Some(NetnsMode::Exclusive),
            &[("mlx5_2", 9)],
            &chained_fields(fields),
        )
        .build()
    }

    fn vf_by_pci_address() -> String {
        format!(r#""deviceID":"0000:3b:00.2",{}"#, prev())
    }

    #[test]
    fn a_kill_at_any_step_leaves_nothing_after_del_and_gc() {
        kill_points::every_kill_point(
            || world(&vf_by_pci_address()),
            |w, case| {
                assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::Host), "{case}");
                assert!(
                    w.store.load("rn", "c9", "net1").unwrap().is_none(),
                    "{case}"
                );
                kill_points::no_temp_files(w.store.dir(), case);
            },
        );
    }

    #[test]
    fn moves_the_vf_ib_device_after_the_previous_plugin_and_passes_prev_result() {
        let w = world(&vf_by_pci_address());
        let out = w.add(None).unwrap();
        assert_eq!(out.interfaces[0].name, "net1");
        assert_eq!(
            out.ips[0].address.to_string(),
            "10.1.0.2/24",
            "prevResult passes through"
        );
        assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::pod()));
        w.run(Command::Check, POD, None).unwrap();
        w.run(Command::Del, POD, None).unwrap();
        assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::Host));
        assert_eq!(
            moves(&w),
            vec![
                move_ib(NsKey::Host, 9, NsKey::pod()),
                move_ib(NsKey::pod(), 9, NsKey::Host)
            ]
        );
        w.run(Command::Del, POD, None).unwrap();
    }

    #[test]
    fn finds_the_function_from_the_pod_interface_without_device_id() {
        let w = world(&prev());
        put_vf_netdev_in_pod(&w);
        w.run(Command::Add, POD, None).unwrap();
        assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::pod()));
        // CNI_NETNS empty on DEL while the pod netns lives on: the recorded netns, still the
        // same one, is where the ib device is brought back from.
        w.run(Command::Del, "", None).unwrap();
        assert_eq!(moves(&w).len(), 2, "moved back from the recorded netns");
        assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::Host));
        assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
    }

    #[test]
    fn an_empty_cni_netns_with_the_pod_gone_moves_nothing() {
        let w = world(&vf_by_pci_address());
        w.run(Command::Add, POD, None).unwrap();
        // The recorded path now names another netns (the pod's is gone, the path reused): its
        // identity differs, so nothing is moved from it.
        let mut att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
        let id = att.netns_id.as_mut().expect("the identity is recorded");
        id.ino += 1;
        w.store.save(&att).unwrap();
        w.run(Command::Del, "", None).unwrap();
        assert_eq!(moves(&w).len(), 1, "nothing moved from a reused path");
        assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
    }

    #[test]
    fn a_shared_device_plugin_index_leaves_the_pod_interface_to_decide() {
        let w = world(&format!(r#""deviceID":"0","pciBusID":"0",{}"#, prev()));
        put_vf_netdev_in_pod(&w);
        w.run(Command::Add, POD, None).unwrap();
        assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::pod()));
        let att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
        assert_eq!(att.device_id.as_deref(), Some("0"));
        w.run(Command::Del, POD, None).unwrap();
        assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::Host));
    }

    #[test]
    fn chained_mode_writes_the_vfs_device_info_and_removes_it_on_del() {
        let mut w = world(&vf_by_pci_address());
        let tmp = TempDir::devinfo("chained");
        let file = tmp.path().join("net1.json");
        w.fields = chained_fields(&format!(
            r#""deviceID":"0000:3b:00.2","runtimeConfig":{{"CNIDeviceInfoFile":"{}"}},{}"#,
            file.display(),
            prev()
        ));
        w.run(Command::Add, POD, None).unwrap();
        let info: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(info["pci"]["pci-address"], "0000:3b:00.2");
        assert_eq!(info["pci"]["rdma-device"], "mlx5_2");
        assert_eq!(info["pci"]["pf-pci-address"], "0000:3b:00.0");
        w.run(Command::Del, POD, None).unwrap();
        assert!(!file.exists());
    }

    #[test]
    fn errors_are_clear_and_leave_nothing() {
        let mut w = world(r#""deviceID":"0000:3b:00.2""#);
        let err = w.run(Command::Add, POD, None).unwrap_err();
        assert_eq!(err.code(), 7, "{err}");
        assert!(err.to_string().contains("prevResult"), "{err}");

        w.fields = chained_fields(&vf_by_pci_address());
        w.rdma.configure(Some(NetnsMode::Shared), &[("mlx5_2", 9)]);
        let err = w.run(Command::Add, POD, None).unwrap_err();
        assert_eq!(err.code(), 120, "{err}");
        assert!(err.to_string().contains("netns_mode=0"), "{err}");

        w.rdma
            .configure(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        refuse_ib_moves(&w);
        let err = w.run(Command::Add, POD, None).unwrap_err();
        assert!(
            err.to_string().contains("mlx5_2") && err.to_string().contains("disassociate"),
            "{err}"
        );
        assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
        assert_eq!(w.rdma.location("mlx5_2"), Some(NsKey::Host));
    }
}

mod published {
    use super::*;
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(p: &std::path::Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn device_permissions_apply_after_the_move_and_are_restored_on_del_and_rollback() {
        let dev = TempDir::new("devdir");
        let uverbs = dev.path().join("uverbs0");
        mknod(
            &uverbs,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(231, 192),
        )
        .unwrap();
        std::fs::set_permissions(&uverbs, std::fs::Permissions::from_mode(0o666)).unwrap();
        let w = host(
            vec![roce_netdev()],
            Some(NetnsMode::Exclusive),
            &[("mlx5_0", 3)],
            r#""device":"ens1f0np0","devicePermissions":{"uverbs":"0600"}"#,
        )
        .dev_dir(dev.path())
        .build();
        w.run(Command::Add, POD, None).unwrap();
        assert_eq!(mode_of(&uverbs), 0o600);
        let att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
        assert_eq!(att.perm_changes.len(), 1);
        assert_eq!(att.perm_changes[0].old_mode & 0o777, 0o666);
        w.run(Command::Del, POD, None).unwrap();
        assert_eq!(mode_of(&uverbs), 0o666, "restored on DEL");

        w.run(Command::Add, POD, fail_after("addresses"))
            .unwrap_err();
        assert_eq!(mode_of(&uverbs), 0o666, "restored on rollback");

        // An unreadable record might be a live attachment's that changed this node too: DEL
        // keeps the node as it is rather than restore it under that pod.
        w.run(Command::Add, POD, None).unwrap();
        let corrupt = w.store.dir().join("other-net/c1:net2.json");
        std::fs::create_dir_all(corrupt.parent().unwrap()).unwrap();
        std::fs::write(&corrupt, b"{torn").unwrap();
        w.run(Command::Del, POD, None).unwrap();
        assert_eq!(mode_of(&uverbs), 0o600, "held while a record is unreadable");
        std::fs::remove_file(&corrupt).unwrap();
        std::fs::set_permissions(&uverbs, std::fs::Permissions::from_mode(0o666)).unwrap();

        std::fs::remove_file(&uverbs).unwrap();
        let err = w.run(Command::Add, POD, None).unwrap_err();
        assert_eq!(err.code(), 111, "{err}");
        assert!(
            err.to_string().contains("ib_uverbs"),
            "names the module to load: {err}"
        );
        assert_eq!(w.rdma.location("mlx5_0"), Some(NsKey::Host), "rolled back");
    }
}
