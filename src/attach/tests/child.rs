//! Unit tests of the child-interface modes: MTU and mode decisions, one-request creation in the
//! pod, rollback, and DEL wherever the kernel left the child.

use crate::attach::config::PluginConf;
use crate::attach::modes::child::{ChildKind, ChildPlan, ChildState};
use crate::attach::modes::ipoib::{plan_ipoib, IpoibConf, IpoibModeConf, IPOIB_CM_MTU};
use crate::attach::modes::macvlan::plan_macvlan;
use crate::attach::modes::ModeConf;
use crate::attach::tests::kill_points;
use crate::attach::tests::kit::{fail_after, one_address, TestHost, World};
use crate::cni::{Command, NetConf};
use crate::kernel::fake::{Call, NsKey, POD};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::{Link, LinkKind};
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;

fn ib_parent(byte0: u8, mtu: u32, up: bool) -> Link {
    let mut hwaddr = vec![0u8; 20];
    hwaddr[0] = byte0;
    hwaddr[4] = 0xfe;
    hwaddr[5] = 0x80;
    Link {
        index: 5,
        name: "ib0".into(),
        mtu,
        hwaddr,
        up,
        link_type: 32,
        ..Default::default()
    }
}

fn eth_parent() -> Link {
    Link {
        index: 4,
        name: "ens1f0np0".into(),
        mtu: 9000,
        hwaddr: vec![2, 0, 0, 0, 0, 4],
        up: true,
        link_type: 1,
        ..Default::default()
    }
}

fn pc(json: serde_json::Value) -> PluginConf {
    let mut base = serde_json::json!({"cniVersion": "1.1.0", "name": "n", "type": "rdma-ns"});
    for (k, v) in json.as_object().unwrap() {
        base[k] = v.clone();
    }
    let conf = NetConf::parse(base.to_string().as_bytes(), Command::Add).unwrap();
    PluginConf::from_conf(&conf).unwrap()
}

/// The IPoIB child of `parent` that conf fields `fields` ask for.
fn ipoib_plan(parent: &Link, fields: serde_json::Value) -> crate::error::Result<ChildPlan> {
    let pc = pc(fields);
    match &pc.mode {
        ModeConf::Ipoib(settings) => plan_ipoib(parent, settings, pc.mtu),
        other => panic!("not an ipoib conf: {other:?}"),
    }
}

/// The macvlan child of `parent` that conf fields `fields` ask for, with no MAC given.
fn macvlan_plan(parent: &Link, fields: serde_json::Value) -> crate::error::Result<ChildPlan> {
    let pc = pc(fields);
    match &pc.mode {
        ModeConf::Macvlan(settings) => plan_macvlan(parent, settings, pc.mtu, None),
        other => panic!("not a macvlan conf: {other:?}"),
    }
}

/// (parent, conf fields, Ok((IPoIB mode, MTU)) or Err(CNI code)).
type IpoibCase = (Link, serde_json::Value, Result<(u16, u32), u64>);

#[test]
fn ipoib_mode_and_mtu_follow_the_parent_and_the_table() {
    use serde_json::json;
    let cm = ib_parent(0x80, 2044, true);
    let enhanced = ib_parent(0x00, 4092, true);
    let cases: Vec<IpoibCase> = vec![
        (cm.clone(), json!({"mode": "ipoib"}), Ok((1, IPOIB_CM_MTU))),
        (enhanced.clone(), json!({"mode": "ipoib"}), Ok((0, 4092))),
        (
            cm.clone(),
            json!({"mode": "ipoib", "ipoibMode": "datagram"}),
            Ok((0, 2044)),
        ),
        (
            cm.clone(),
            json!({"mode": "ipoib", "ipoibMode": "connected", "mtu": 9000}),
            Ok((1, 9000)),
        ),
        (
            cm.clone(),
            json!({"mode": "ipoib", "ipoibMode": "connected", "mtu": 65535}),
            Err(7),
        ),
        (
            cm.clone(),
            json!({"mode": "ipoib", "ipoibMode": "datagram", "mtu": 4092}),
            Err(7),
        ),
        (
            enhanced.clone(),
            json!({"mode": "ipoib", "ipoibMode": "connected"}),
            Err(110),
        ),
        (
            enhanced.clone(),
            json!({"mode": "ipoib", "mtu": 2044}),
            Ok((0, 2044)),
        ),
        (
            ib_parent(0x80, 2044, false),
            json!({"mode": "ipoib"}),
            Err(110),
        ),
        (eth_parent(), json!({"mode": "ipoib"}), Err(110)),
    ];
    for (parent, conf, want) in cases {
        let got = ipoib_plan(&parent, conf.clone());
        match (got, want) {
            (Ok(p), Ok((mode, mtu))) => {
                assert!(
                    matches!(p.kind, LinkKind::Ipoib { mode: Some(m), .. } if m == mode),
                    "{conf}: {p:?}"
                );
                assert_eq!(p.mtu, Some(mtu), "{conf}");
            }
            (Err(e), Err(code)) => assert_eq!(e.code() as u64, code, "{conf}: {e}"),
            (got, want) => panic!("{conf}: got {got:?}, want {want:?}"),
        }
    }
    let err = ipoib_plan(
        &enhanced,
        json!({"mode": "ipoib", "ipoibMode": "connected"}),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("Enhanced IPoIB") && err.to_string().contains("ipoib_enhanced=0"),
        "{err}"
    );
}

#[test]
fn ipoib_pkey_and_umcast_reach_the_request() {
    let p = ipoib_plan(
        &ib_parent(0x80, 2044, true),
        serde_json::json!({"mode": "ipoib", "pkey": "0x8001", "umcast": true, "ipoibMode": "datagram"}),
    )
    .unwrap();
    assert_eq!(
        p.kind,
        LinkKind::Ipoib {
            pkey: Some(0x8001),
            mode: Some(0),
            umcast: Some(1)
        }
    );
    assert!(p.summary.contains("datagram"), "{}", p.summary);
    let default = pc(serde_json::json!({"mode": "ipoib"}));
    assert_eq!(default.mode, ModeConf::Ipoib(IpoibConf::default()));
    assert_eq!(IpoibConf::default().ipoib_mode, IpoibModeConf::Auto);
    let p = ipoib_plan(
        &ib_parent(0x80, 2044, true),
        serde_json::json!({"mode": "ipoib"}),
    )
    .unwrap();
    assert!(
        matches!(p.kind, LinkKind::Ipoib { pkey: None, .. }),
        "no pkey: the parent's is inherited"
    );
}

#[test]
fn macvlan_needs_an_ethernet_parent_and_an_mtu_not_above_it() {
    use serde_json::json;
    assert!(macvlan_plan(&eth_parent(), json!({"mode": "macvlan", "mtu": 9000})).is_ok());
    let e = macvlan_plan(&eth_parent(), json!({"mode": "macvlan", "mtu": 9001})).unwrap_err();
    assert_eq!(e.code(), 7);
    assert!(e.to_string().contains("9000"), "{e}");
    let e = macvlan_plan(&ib_parent(0x80, 2044, true), json!({"mode": "macvlan"})).unwrap_err();
    assert_eq!(e.code(), 110);
    assert!(e.to_string().contains("ipoib"), "{e}");
}

/// Host links and the conf's fields (`fields` names the parent itself, if at all).
fn host(links: Vec<Link>, fields: &str) -> TestHost {
    TestHost::new("cn", "c1")
        .links(links)
        .fields(fields)
        .ipam(one_address("10.9.0.5/24"))
}

/// `parent` alone in the host, named as the conf's master.
fn with_master(parent: Link, mode_fields: &str) -> TestHost {
    let fields = format!(r#""master":"{}",{mode_fields}"#, parent.name);
    host(vec![parent], &fields)
}

fn world(parent: Link, mode_fields: &str) -> World {
    with_master(parent, mode_fields).build()
}

/// Host links and conf fields on the fixture sysfs tree of every preset.
fn on_fixture(links: Vec<Link>, fields: &str) -> World {
    host(links, fields)
        .sysfs(SysfsFixture::all().unwrap())
        .build()
}

/// Every child interface, wherever it is (the fixture's VLAN is not one of ours).
fn children(w: &World) -> Vec<(NsKey, Link)> {
    w.kernel
        .state
        .borrow()
        .links
        .iter()
        .filter(|(_, l)| l.link.is_some() && l.kind.as_deref() != Some("vlan"))
        .cloned()
        .collect()
}

#[test]
fn macvlan_is_created_in_the_pod_in_one_request_and_deleted_on_del() {
    let w = world(eth_parent(), r#""mode":"macvlan","mtu":1500"#);
    w.run(Command::Add, POD, None).unwrap();
    let creates: Vec<_> = w
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::CreateLink { .. }))
        .collect();
    assert_eq!(
        creates,
        vec![Call::CreateLink {
            ns: NsKey::Host,
            name: "net1".into(),
            parent: 4,
            target: Some(NsKey::pod()),
        }]
    );
    let kids = children(&w);
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].0, NsKey::pod());
    assert_eq!(kids[0].1.mtu, 1500);
    let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
    assert_eq!(
        att.state::<ChildState>().unwrap().child.kind,
        ChildKind::Macvlan
    );
    assert_eq!(
        att.state::<ChildState>().unwrap().parent.name,
        "ens1f0np0",
        "the parent is recorded"
    );
    w.run(Command::Del, POD, None).unwrap();
    assert!(children(&w).is_empty());
    assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());
    w.run(Command::Del, POD, None).unwrap();
}

#[test]
fn a_failed_child_add_at_any_step_leaves_nothing() {
    for step in [
        "state-intent",
        "ipam",
        "create",
        "created",
        "addresses",
        "up",
        "routes",
        "gids",
        "device-info",
        "state",
    ] {
        let w = world(eth_parent(), r#""mode":"macvlan""#);
        let err = w.run(Command::Add, POD, fail_after(step)).unwrap_err();
        assert!(err.to_string().contains(step), "{step}: {err}");
        assert!(children(&w).is_empty(), "{step}: child deleted");
        assert!(
            w.store.load("cn", "c1", "net1").unwrap().is_none(),
            "{step}"
        );
    }
}

#[test]
fn an_ipoib_child_refunded_to_the_host_is_found_and_deleted() {
    let w = world(
        ib_parent(0x80, 2044, true),
        r#""mode":"ipoib","pkey":"0x8001""#,
    );
    w.run(Command::Add, POD, None).unwrap();
    // The pod netns died: the kernel pushed the IPoIB child back to the host as dev<ifindex>.
    {
        let mut st = w.kernel.state.borrow_mut();
        let kid = st.links.iter_mut().find(|(_, l)| l.link.is_some()).unwrap();
        kid.0 = NsKey::Host;
        kid.1.name = format!("dev{}", kid.1.index);
        kid.1.kind = Some("ipoib".into());
    }
    w.run(Command::Del, "", None).unwrap();
    assert!(children(&w).is_empty(), "refunded child deleted");
}

#[test]
fn a_name_taken_in_the_pod_is_refused_cleanly() {
    let w = world(eth_parent(), r#""mode":"macvlan""#);
    w.kernel.fail_when(
        |c| matches!(c, Call::CreateLink { .. }),
        nix::errno::Errno::EEXIST,
    );
    let err = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(err.code(), 103, "{err}");
    assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());
    assert_eq!(
        *w.ipam.calls.lock().unwrap(),
        vec![Command::Add, Command::Del]
    );
}

#[test]
fn an_ipam_failure_beside_the_create_deletes_the_child_and_the_record() {
    let mut w = world(eth_parent(), r#""mode":"macvlan""#);
    w.ipam.fail_add = true;
    let err = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(err.code(), 11, "IPAM's own code reaches the runtime: {err}");
    assert!(children(&w).is_empty(), "child deleted");
    assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());
    assert_eq!(
        *w.ipam.calls.lock().unwrap(),
        vec![Command::Add],
        "nothing to release"
    );
}

#[test]
fn an_intent_record_that_cannot_be_written_releases_ipam_and_creates_nothing() {
    let w = world(eth_parent(), r#""mode":"macvlan""#);
    // The data dir is a file: the intent record cannot be written.
    std::fs::write(w.store.dir(), b"not a directory").unwrap();
    let err = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(err.code(), 5, "{err}");
    assert!(children(&w).is_empty());
    assert!(
        !w.calls()
            .iter()
            .any(|c| matches!(c, Call::CreateLink { .. })),
        "no kernel change without a durable intent"
    );
    assert_eq!(
        *w.ipam.calls.lock().unwrap(),
        vec![Command::Add, Command::Del]
    );
}

#[test]
fn ipam_and_intent_failing_together_are_both_reported() {
    let mut w = world(eth_parent(), r#""mode":"macvlan""#);
    w.ipam.fail_add = true;
    std::fs::write(w.store.dir(), b"not a directory").unwrap();
    let err = w.run(Command::Add, POD, None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("pool exhausted") && text.contains("state"),
        "{text}"
    );
    assert!(children(&w).is_empty());
}

#[test]
fn del_reports_an_ipam_failure_and_keeps_the_record() {
    let mut w = world(eth_parent(), r#""mode":"macvlan""#);
    w.run(Command::Add, POD, None).unwrap();
    w.ipam.fail_del = true;
    let err = w.run(Command::Del, POD, None).unwrap_err();
    assert_eq!(err.code(), 11, "{err}");
    assert!(children(&w).is_empty(), "the child is deleted all the same");
    assert!(
        w.store.load("cn", "c1", "net1").unwrap().is_some(),
        "kept for the retry"
    );
    w.ipam.fail_del = false;
    w.run(Command::Del, POD, None).unwrap();
    assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());
}

mod gids {
    use super::*;

    /// The macvlan child's GID, as the kernel adds it: ::ffff:10.9.0.5, RoCE v2, ndev net1.
    fn add_pod_gid(fx: &SysfsFixture, index: u32) {
        let port = "class/infiniband/mlx5_0/ports/1";
        fx.write_attr(
            format!("{port}/gids/{index}"),
            "0000:0000:0000:0000:0000:ffff:0a09:0005",
        )
        .unwrap();
        fx.write_attr(format!("{port}/gid_attrs/types/{index}"), "RoCE v2")
            .unwrap();
        fx.write_attr(format!("{port}/gid_attrs/ndevs/{index}"), "net1")
            .unwrap();
    }

    /// `parent` as the conf's master, on `fx`.
    fn world_on(parent: Link, mode_fields: &str, fx: SysfsFixture) -> World {
        with_master(parent, mode_fields).sysfs(fx).build()
    }

    fn roce_parent() -> Link {
        Link {
            name: "ens1f0np0".into(),
            ..eth_parent()
        }
    }

    #[test]
    fn the_pod_ips_gid_index_is_found_and_recorded() {
        let fx = SysfsFixture::all().unwrap();
        add_pod_gid(&fx, 6);
        let w = world_on(roce_parent(), r#""mode":"macvlan""#, fx);
        w.run(Command::Add, POD, None).unwrap();
        let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
        assert_eq!(att.gids().len(), 1);
        let g = &att.gids()[0];
        assert_eq!(
            (g.ibdev.as_str(), g.port, g.index, g.gid_type.as_str()),
            ("mlx5_0", 1, 6, "RoCE v2")
        );
        assert_eq!(g.ip.to_string(), "10.9.0.5");
    }

    #[test]
    fn a_gid_that_never_appears_fails_add_and_leaves_nothing() {
        let w = world_on(
            roce_parent(),
            r#""mode":"macvlan","gidTimeoutMs":60"#,
            SysfsFixture::all().unwrap(),
        );
        let err = w.run(Command::Add, POD, None).unwrap_err();
        assert_eq!(err.code(), 121, "{err}");
        assert!(
            err.to_string().contains("10.9.0.5") && err.to_string().contains("mlx5_0"),
            "{err}"
        );
        assert!(children(&w).is_empty(), "child deleted");
        assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());
    }

    #[test]
    fn a_parent_without_rdma_records_no_gids() {
        let w = world_on(
            eth_parent(),
            r#""mode":"macvlan""#,
            SysfsFixture::new().unwrap(),
        );
        w.run(Command::Add, POD, None).unwrap();
        assert!(w
            .store
            .load("cn", "c1", "net1")
            .unwrap()
            .unwrap()
            .gids()
            .is_empty());
    }
}

#[test]
fn a_plugin_killed_after_creating_the_child_leaves_del_enough_to_find_it() {
    // A kill between the create and the record's next line leaves the intent line alone: it
    // must identify the child (macvlan: the address chosen before the create; IPoIB: kind,
    // parent and name), in the pod and, for IPoIB, after a refund to the host.
    let cases = [
        (eth_parent(), r#""mode":"macvlan""#, false),
        (
            eth_parent(),
            r#""mode":"macvlan","macvlanMode":"passthru""#,
            false,
        ),
        (ib_parent(0x80, 2044, true), r#""mode":"ipoib""#, false),
        (ib_parent(0x80, 2044, true), r#""mode":"ipoib""#, true),
    ];
    for (parent, fields, refunded) in cases {
        let w = world(parent, fields);
        w.run(Command::Add, POD, None).unwrap();
        let path = w.store.dir().join("cn/c1:net1.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "intent, after create, final: {text}");
        let intent: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        let created = children(&w);
        assert_eq!(created.len(), 1, "{fields}: the child exists");
        if fields.contains("macvlan") {
            assert_eq!(
                intent["child"]["hwaddr"],
                created[0].1.hwaddr_string(),
                "{fields}: the intent names the child's address before it exists"
            );
        }
        std::fs::write(&path, format!("{}\n", lines[0])).unwrap();
        let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
        assert_eq!(att.phase, crate::attach::record::Phase::Adding);
        if refunded {
            let mut st = w.kernel.state.borrow_mut();
            let kid = st.links.iter_mut().find(|(_, l)| l.link.is_some()).unwrap();
            kid.0 = NsKey::Host;
            kid.1.name = format!("dev{}", kid.1.index);
        }
        w.run(Command::Del, if refunded { "" } else { POD }, None)
            .unwrap();
        assert!(
            children(&w).is_empty(),
            "{fields}: DEL found and deleted the child"
        );
        assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());
    }
}

#[test]
fn an_unrecorded_ipoib_child_is_never_guessed_among_several() {
    let w = world(ib_parent(0x80, 2044, true), r#""mode":"ipoib""#);
    w.run(Command::Add, POD, None).unwrap();
    let path = w.store.dir().join("cn/c1:net1.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{}\n", text.lines().next().unwrap())).unwrap();
    {
        let mut st = w.kernel.state.borrow_mut();
        let kid = st.links.iter_mut().find(|(_, l)| l.link.is_some()).unwrap();
        kid.0 = NsKey::Host;
        kid.1.name = format!("dev{}", kid.1.index);
        let mut twin = kid.1.clone();
        twin.index += 100;
        twin.name = format!("dev{}", twin.index);
        st.links.push((NsKey::Host, twin));
    }
    let e = w.run(Command::Del, "", None).unwrap_err();
    assert!(e.to_string().contains("ip link del"), "{e}");
    assert_eq!(children(&w).len(), 2, "neither deleted");
    assert!(
        w.store.load("cn", "c1", "net1").unwrap().is_some(),
        "record kept"
    );
}

/// The mlx5 PF and VF netdevs of the fixture tree, as the kernel reports them over netlink.
fn mlx5_links() -> Vec<Link> {
    let link = |index, name: &str, bdf: &str, mac: [u8; 6]| Link {
        index,
        name: name.into(),
        mtu: 1500,
        hwaddr: mac.to_vec(),
        up: true,
        link_type: 1,
        parent_bus: Some("pci".into()),
        parent_dev: Some(bdf.into()),
        ..Default::default()
    };
    vec![
        link(
            4,
            "ens1f0np0",
            "0000:3b:00.0",
            [0x0c, 0x42, 0xa1, 0x3b, 0, 0],
        ),
        link(
            6,
            "ens1f0v0",
            "0000:3b:00.2",
            [0x0c, 0x42, 0xa1, 0x3b, 0, 2],
        ),
        Link {
            index: 7,
            name: "ens1f0np0.100".into(),
            link: Some(4),
            kind: Some("vlan".into()),
            ..link(7, "", "", [0x0c, 0x42, 0xa1, 0x3b, 0, 0])
        },
    ]
}

#[test]
fn a_shared_device_plugin_index_selects_nothing_and_is_recorded() {
    // What Multus v4 injects for the RDMA shared device plugin's resource: its device index in
    // deviceID and pciBusID, and in runtimeConfig where the capability is declared.
    for (parent, fields) in [
        (
            eth_parent(),
            r#""mode":"macvlan","deviceID":"0","pciBusID":"0","runtimeConfig":{"deviceID":"0"}"#,
        ),
        (
            ib_parent(0x80, 2044, true),
            r#""mode":"ipoib","deviceID":"3""#,
        ),
    ] {
        let w = world(parent.clone(), fields);
        w.run(Command::Add, POD, None).unwrap();
        let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
        assert_eq!(
            att.state::<ChildState>().unwrap().parent.name,
            parent.name,
            "{fields}"
        );
        assert!(
            att.device_id.as_deref() == Some("0") || att.device_id.as_deref() == Some("3"),
            "{fields}: {:?}",
            att.device_id
        );
        w.run(Command::Del, POD, None).unwrap();
    }
    // Without master or rdmaDevice, the index alone names no parent: code 7 saying so.
    let w = host(vec![eth_parent()], r#""mode":"macvlan","deviceID":"0""#).build();
    let e = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(e.code(), 7, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("master") && msg.contains("deviceID=0"),
        "{msg}"
    );
    assert!(children(&w).is_empty());
}

#[test]
fn a_pci_device_id_selects_the_parent_and_must_agree_with_master() {
    let w = on_fixture(
        mlx5_links(),
        r#""mode":"macvlan","deviceID":"0000:3b:00.2","rdma":"off""#,
    );
    w.run(Command::Add, POD, None).unwrap();
    let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
    assert_eq!(att.state::<ChildState>().unwrap().parent.name, "ens1f0v0");
    assert_eq!(att.device_id.as_deref(), Some("0000:3b:00.2"));
    w.run(Command::Del, POD, None).unwrap();

    let w = on_fixture(
        mlx5_links(),
        r#""mode":"macvlan","deviceID":"0000:3b:00.2","master":"ens1f0np0","rdma":"off""#,
    );
    let e = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(e.code(), 7, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("deviceID=0000:3b:00.2")
            && msg.contains("ens1f0v0")
            && msg.contains("master=ens1f0np0"),
        "{msg}"
    );
    assert!(children(&w).is_empty());
    assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());

    let w = on_fixture(
        mlx5_links(),
        r#""mode":"macvlan","deviceID":"0000:3b:00.0","master":"ens1f0np0","rdma":"off""#,
    );
    w.run(Command::Add, POD, None).unwrap();
    assert_eq!(children(&w).len(), 1);
}

#[test]
fn rdma_device_names_the_parent_netdev() {
    let w = on_fixture(
        mlx5_links(),
        r#""mode":"macvlan","rdmaDevice":"mlx5_0","rdma":"off""#,
    );
    w.run(Command::Add, POD, None).unwrap();
    let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
    assert_eq!(att.state::<ChildState>().unwrap().parent.name, "ens1f0np0");
    let kids = children(&w);
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].1.link, Some(4), "created on the PF netdev");

    let w = on_fixture(
        mlx5_links(),
        r#""mode":"macvlan","rdmaDevice":"mlx5_0","master":"ens1f0v0","rdma":"off""#,
    );
    let e = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(e.code(), 7, "{e}");
    assert!(e.to_string().contains("rdmaDevice=mlx5_0"), "{e}");
}

#[test]
fn a_missing_master_is_named_as_master() {
    let w = host(
        vec![eth_parent()],
        r#""mode":"macvlan","master":"ens9f9np9""#,
    )
    .build();
    let e = w.run(Command::Add, POD, None).unwrap_err();
    assert_eq!(e.code(), 100, "{e}");
    assert!(e.to_string().contains("master=ens9f9np9"), "{e}");
    assert!(!e.to_string().contains("device="), "{e}");
}

#[test]
fn child_modes_refuse_exclusive_rdma_netns_mode_unless_rdma_is_off() {
    for fields in [r#""mode":"macvlan""#, r#""mode":"ipoib""#] {
        let parent = if fields.contains("ipoib") {
            ib_parent(0x80, 2044, true)
        } else {
            eth_parent()
        };
        let w = with_master(parent.clone(), fields)
            .rdma(Some(NetnsMode::Exclusive), &[])
            .build();
        let e = w.run(Command::Add, POD, None).unwrap_err();
        assert_eq!(e.code(), 120, "{fields}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("exclusive") && msg.contains("shared") && msg.contains("\"off\""),
            "{msg}"
        );
        assert!(children(&w).is_empty(), "{fields}");
        assert!(w.store.load("cn", "c1", "net1").unwrap().is_none());

        let off = format!(r#"{fields},"rdma":"off""#);
        let w = with_master(parent, &off)
            .rdma(Some(NetnsMode::Exclusive), &[])
            .build();
        w.run(Command::Add, POD, None).unwrap();
        assert_eq!(children(&w).len(), 1, "{off}");
    }
    let conf = NetConf::parse(
        br#"{"cniVersion":"1.1.0","name":"n","type":"rdma-ns","mode":"macvlan","rdma":"exclusive"}"#,
        Command::Add,
    )
    .unwrap();
    assert_eq!(PluginConf::from_conf(&conf).unwrap_err().code(), 2);
}

/// A macvlan conf on `master` without RDMA that asks for a device-info file at `file`.
fn macvlan_with_device_info(master: &str, file: &std::path::Path) -> String {
    format!(
        r#""mode":"macvlan","master":"{master}","rdma":"off",
            "runtimeConfig":{{"CNIDeviceInfoFile":"{}"}}"#,
        file.display()
    )
}

#[test]
fn child_modes_write_the_parents_device_info_and_remove_it_on_del() {
    let tmp = TempDir::devinfo("child");
    let file = tmp.path().join("cni/pod-net1.json");
    let fields = macvlan_with_device_info("ens1f0v0", &file);
    let w = on_fixture(mlx5_links(), &fields);
    w.run(Command::Add, POD, None).unwrap();
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(info["type"], "pci");
    assert_eq!(info["pci"]["pci-address"], "0000:3b:00.2");
    assert_eq!(info["pci"]["pf-pci-address"], "0000:3b:00.0");
    assert_eq!(info["pci"]["rdma-device"], "mlx5_2");
    w.run(Command::Del, POD, None).unwrap();
    assert!(!file.exists());

    // Soft-RoCE over a veth: no PCI function, so the ib device alone.
    let v0 = Link {
        index: 3,
        name: "v0".into(),
        mtu: 1500,
        hwaddr: vec![0x2a, 0x61, 0xd6, 0x59, 0xe6, 0x10],
        up: true,
        link_type: 1,
        ..Default::default()
    };
    let fields = macvlan_with_device_info("v0", &file);
    let w = on_fixture(vec![v0], &fields);
    w.run(Command::Add, POD, None).unwrap();
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(info["type"], "pci");
    assert_eq!(info["pci"]["rdma-device"], "rxe0");
    assert!(info["pci"].get("pci-address").is_none(), "{info}");
    w.run(Command::Del, POD, None).unwrap();
    assert!(!file.exists());
}

#[test]
fn a_kill_at_any_step_leaves_nothing_after_del_and_gc() {
    for (parent, fields) in [
        (eth_parent(), r#""mode":"macvlan""#),
        (ib_parent(0x80, 2044, true), r#""mode":"ipoib""#),
    ] {
        kill_points::every_kill_point(
            || world(parent.clone(), fields),
            |w, case| {
                assert!(children(w).is_empty(), "{fields} {case}: a child is left");
                assert!(
                    w.store.load("cn", "c1", "net1").unwrap().is_none(),
                    "{fields} {case}: record left"
                );
                kill_points::ipam_released(&w.ipam.calls.lock().unwrap(), case);
                kill_points::no_temp_files(w.store.dir(), case);
            },
        );
    }
}

#[test]
fn a_kill_at_any_step_leaves_no_device_info_file() {
    let tmp = TempDir::devinfo("child-kills");
    let file = tmp.path().join("cni/pod-net1.json");
    let fields = macvlan_with_device_info("ens1f0v0", &file);
    let clean = on_fixture(mlx5_links(), &fields);
    clean.run(Command::Add, POD, None).unwrap();
    assert!(file.exists(), "the probe finds the file an ADD wrote");
    clean.run(Command::Del, POD, None).unwrap();
    kill_points::every_kill_point(
        || on_fixture(mlx5_links(), &fields),
        |w, case| {
            assert!(!file.exists(), "{case}: device-info file left");
            kill_points::no_temp_files(tmp.path(), case);
            assert!(children(w).is_empty(), "{case}: a child is left");
        },
    );
}
