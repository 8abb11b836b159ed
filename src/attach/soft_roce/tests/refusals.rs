//! What `softRoce` refuses, each with its code and a message naming what is missing and what
//! to do, and nothing left behind.

use super::*;

#[test]
fn a_kernel_without_rdma_netlink_is_refused_before_any_device() {
    for mode in [MOVE, MACVLAN] {
        let w = host(mode).rdma(None, &[]).build();
        refused(&w, 120, &["no RDMA netlink", "modprobe rdma_rxe"], mode);
        assert!(!w
            .calls()
            .iter()
            .any(|c| matches!(c, Call::AddRdmaLink { .. })));
        if mode == MOVE {
            let (ns, _) = w.kernel.locate(&nic().hwaddr).unwrap();
            assert_eq!(ns, NsKey::Host, "the device came back");
        }
    }
}

#[test]
fn no_rdma_rxe_module_is_named() {
    let w = world(MACVLAN);
    w.kernel.state.borrow_mut().rxe_module = false;
    refused(
        &w,
        120,
        &["no rdma_rxe module", "modprobe rdma_rxe"],
        "no module",
    );
    // With the module there, the same EINVAL is the kernel's own refusal, passed on as such.
    let fx = SysfsFixture::new().unwrap();
    fx.load_modules(&["rdma_rxe"]).unwrap();
    let w = host(MACVLAN).sysfs(fx).build();
    w.kernel.state.borrow_mut().rxe_module = false;
    refused(
        &w,
        105,
        &["adding Soft-RoCE device", "EINVAL"],
        "module loaded",
    );
}

/// Linux 6.1: rxe's one socket is in the host netns, so the pod's device would never receive.
/// Found by behaviour once the device is added; the device is deleted again.
#[test]
fn a_kernel_whose_rxe_receives_only_in_the_host_is_refused() {
    for (mode, netns_mode) in SHAPES {
        let w = host(mode).rdma(Some(netns_mode), &[]).build();
        w.kernel.state.borrow_mut().rxe_netns_sockets = false;
        let case = format!("{mode} {netns_mode:?}");
        refused(&w, 120, &["UDP 4791", "Linux 7.1", &name()], &case);
        let calls = w.calls();
        assert!(
            calls.iter().any(|c| matches!(c, Call::AddRdmaLink { .. })),
            "{case}"
        );
        assert!(
            calls
                .iter()
                .any(|c| matches!(c, Call::DeleteRdmaLink { .. })),
            "{case}"
        );
        assert!(
            !calls.iter().any(|c| matches!(c, Call::MoveIb { .. })),
            "{case}"
        );
    }
}

#[test]
fn a_taken_name_is_refused_and_the_device_under_it_is_left_alone() {
    let w = world(MACVLAN);
    w.rdma.configure(Some(NetnsMode::Shared), &[(&name(), 40)]);
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), 102, "{err}");
    assert!(err.to_string().contains("left by an earlier ADD"), "{err}");
    assert_eq!(
        w.rdma.location(&name()),
        Some(NsKey::Host),
        "not ours to delete"
    );
    assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());
}

/// EEXIST is both a taken name (Linux 7; 6.1 answers ENFILE) and a netdev that has a rxe
/// device: the message says which by looking the name up.
#[test]
fn a_netdev_with_a_device_already_is_told_from_a_taken_name() {
    let w = world(MACVLAN);
    w.kernel.fail_when(
        |c| matches!(c, Call::AddRdmaLink { .. }),
        nix::errno::Errno::EEXIST,
    );
    refused(
        &w,
        102,
        &["net1 in the pod has a Soft-RoCE device already"],
        "EEXIST",
    );
    let w = world(MACVLAN);
    w.rdma.configure(Some(NetnsMode::Shared), &[(&name(), 40)]);
    w.kernel.fail_when(
        |c| matches!(c, Call::AddRdmaLink { .. }),
        nix::errno::Errno::ENFILE,
    );
    let err = w.add(None).unwrap_err();
    assert!(
        err.to_string().contains("left by an earlier ADD"),
        "6.1: {err}"
    );
}

#[test]
fn a_port_that_never_becomes_active_is_refused() {
    let w = host(r#""device":"vnic","gidTimeoutMs":30"#).build();
    w.kernel.state.borrow_mut().port_state = 1;
    refused(&w, 121, &["not ACTIVE", "net1", "carrier"], "port down");
}

#[test]
fn modes_and_settings_that_cannot_run_it_are_refused_when_the_conf_is_read() {
    for (fields, code, word) in [
        (
            r#""mode":"ipoib","master":"ib0","softRoce":true"#,
            2,
            "InfiniBand",
        ),
        (
            r#""mode":"rdma","softRoce":true"#,
            2,
            "modes move and macvlan",
        ),
        (
            r#""device":"vnic","rdma":"off","softRoce":true"#,
            2,
            "rdma \"off\"",
        ),
        (
            r#""mode":"macvlan","master":"vnic","rdma":"off","softRoce":true"#,
            2,
            "rdma \"off\"",
        ),
        (r#""device":"vnic","softRoce":"yes""#, 7, "softRoce"),
    ] {
        let w = TestHost::new("cn", "c1")
            .links(vec![nic()])
            .fields(fields)
            .build();
        for command in [Command::Add, Command::Check] {
            let err = w.run(command, POD, None).unwrap_err();
            assert_eq!(err.code(), code, "{fields}: {err}");
            assert!(err.to_string().contains(word), "{fields}: {err}");
        }
        assert!(
            w.calls().is_empty(),
            "{fields}: refused before any kernel call"
        );
    }
}

#[test]
fn without_soft_roce_no_device_is_made() {
    for fields in [MOVE, r#""device":"vnic","softRoce":false"#] {
        let w = TestHost::new("cn", "c1")
            .links(vec![nic()])
            .fields(fields)
            .ipam(one_address("10.9.0.5/24"))
            .build();
        w.add(None).unwrap();
        let calls = w.calls();
        assert!(!calls.iter().any(Call::is_rdma_link), "{fields}: {calls:?}");
        assert!(record_of(&w).is_none());
        w.run(Command::Del, POD, None).unwrap();
    }
}
