//! Unit tests of ib device handling in move mode over the fake kernel and fake RDMA netlink,
//! on fixture sysfs trees of real mlx5 layouts: the exclusive-mode success paths need mlx5
//! hardware, so this seam is where they are covered (the VM tier covers rxe's refusal for real).

use std::ffi::OsString;

use nix::errno::Errno;

use crate::attach::config::PluginConf;
use crate::attach::modes::move_dev;
use crate::attach::state::Store;
use crate::attach::testkit::{FakeIpam, FakeKernel, FakeRdma};
use crate::attach::Ctx;
use crate::cni::env::RawEnv;
use crate::cni::{Command, NetConf, Request};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::kernel::{parse_hwaddr, Link};
use crate::testutil::TempDir;

const POD: &str = "/proc/self/ns/net";
const ROCE_MAC: &str = "0c:42:a1:3b:00:00";
const IPOIB_ADDR: &str = "00:00:10:29:fe:80:00:00:00:00:00:00:04:3f:72:03:00:da:21:30";

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

struct World {
    _tmp: TempDir,
    fx: SysfsFixture,
    kernel: FakeKernel,
    ipam: FakeIpam,
    store: Store,
    data: String,
}

impl World {
    fn new(links: Vec<Link>) -> World {
        let tmp = TempDir::new("rdma-attach");
        let fx = SysfsFixture::all().unwrap();
        World {
            data: tmp.path().join("data").display().to_string(),
            store: Store::new(tmp.path().join("data")),
            kernel: FakeKernel::with_host_links(links),
            ipam: FakeIpam::default(),
            fx,
            _tmp: tmp,
        }
    }

    fn request(&self, command: Command, fields: &str, netns: &str) -> Request {
        let conf = format!(
            r#"{{"cniVersion":"1.1.0","name":"rn","type":"rdma-ns",{fields},"dataDir":"{}"}}"#,
            self.data
        );
        let vars: Vec<(OsString, OsString)> = [
            ("CNI_COMMAND", command.as_str()),
            ("CNI_CONTAINERID", "c9"),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", "/nonexistent"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        Request {
            env: RawEnv::from_vars(vars).validate(command).unwrap(),
            conf: NetConf::parse(conf.as_bytes(), command).unwrap(),
            stdin: Vec::new(),
        }
    }

    fn run(
        &self,
        rdma: &FakeRdma,
        command: Command,
        fields: &str,
        netns: &str,
        fail_after: Option<&str>,
    ) -> crate::error::Result<()> {
        self.run_with(
            rdma,
            command,
            fields,
            netns,
            fail_after.map(|s| crate::attach::plan::Fault::FailAfter(s.to_string())),
        )
    }

    fn run_with(
        &self,
        rdma: &FakeRdma,
        command: Command,
        fields: &str,
        netns: &str,
        fault: Option<crate::attach::plan::Fault>,
    ) -> crate::error::Result<()> {
        let fields = match command {
            Command::Gc => format!(r#"{fields},"cni.dev/valid-attachments":[]"#),
            _ => fields.to_string(),
        };
        let req = self.request(command, &fields, netns);
        let pc = PluginConf::from_conf(&req.conf)?;
        let ctx = Ctx {
            kernel: &self.kernel,
            sys: self.fx.root(),
            store: &self.store,
            ipam: &self.ipam,
            rdma,
            dev_dir: std::path::Path::new("/nonexistent/dev/infiniband"),
            fault,
        };
        match command {
            Command::Add => move_dev::add(&ctx, &req, &pc).map(|_| ()),
            Command::Del => crate::attach::lifecycle::del(&ctx, &req, &pc),
            Command::Gc => crate::attach::gc::gc(&ctx, &req, pc.lock_timeout),
            _ => move_dev::check(&ctx, &req, &pc),
        }
    }

    fn netdev(&self, hw: &str) -> (String, Link) {
        let want = parse_hwaddr(hw).unwrap();
        self.kernel
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
}

fn moves(rdma: &FakeRdma) -> Vec<String> {
    rdma.calls
        .borrow()
        .iter()
        .filter(|c| c.starts_with("move_ib"))
        .cloned()
        .collect()
}

#[test]
fn exclusive_mode_moves_the_ib_device_first_and_brings_it_back_first() {
    let w = World::new(vec![roce_netdev()]);
    let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)]);
    w.run(&rdma, Command::Add, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();
    assert_eq!(moves(&rdma), vec![format!("move_ib host 3 -> {POD}")]);
    assert_eq!(rdma.location("mlx5_0").as_deref(), Some(POD));
    let calls = w.kernel.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("set_link host 4 netns=")),
        "then the netdev: {calls:?}"
    );
    let att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
    let rec = att.ib_device().cloned().expect("ib device recorded");
    assert_eq!(
        (rec.ibdev.as_str(), rec.index, rec.infiniband),
        ("mlx5_0", 3, false)
    );
    assert_eq!(rec.driver, "mlx5_core");

    w.run(&rdma, Command::Check, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();
    w.run(&rdma, Command::Del, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();
    assert_eq!(
        moves(&rdma)[1],
        format!("move_ib {POD} 3 -> host"),
        "ib device back, from the pod"
    );
    assert_eq!(rdma.location("mlx5_0").as_deref(), Some("host"));
    let (ns, link) = w.netdev(ROCE_MAC);
    assert_eq!((ns.as_str(), link.name.as_str()), ("host", "ens1f0np0"));
}

#[test]
fn a_refused_ib_move_moves_nothing_and_says_why() {
    let w = World::new(vec![roce_netdev()]);
    let mut rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)]);
    rdma.refuse = Some(Errno::EOPNOTSUPP);
    let err = w
        .run(&rdma, Command::Add, r#""device":"ens1f0np0""#, POD, None)
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.code(), 105, "{text}");
    assert!(
        text.contains("mlx5_0") && text.contains("mlx5_core") && text.contains("disassociate"),
        "{text}"
    );
    assert!(
        !w.kernel.calls().iter().any(|c| c.contains("netns=")),
        "the netdev never moved"
    );
    assert_eq!(w.netdev(ROCE_MAC).1.name, "ens1f0np0");
    assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
}

#[test]
fn a_failure_after_the_netdev_moved_undoes_both_in_reverse() {
    for step in ["ib-move", "move", "addresses", "up", "state"] {
        let w = World::new(vec![roce_netdev()]);
        let mut rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)]);
        rdma.log_to = Some(w.kernel.state.clone());
        let err = w
            .run(
                &rdma,
                Command::Add,
                r#""device":"ens1f0np0""#,
                POD,
                Some(step),
            )
            .unwrap_err();
        // The failure must be the injected one, not an earlier step failing on its own.
        assert!(
            err.to_string().contains(&format!("after step `{step}`")),
            "{step}: {err}"
        );
        assert_eq!(rdma.location("mlx5_0").as_deref(), Some("host"), "{step}");
        let (ns, link) = w.netdev(ROCE_MAC);
        assert_eq!(
            (ns.as_str(), link.name.as_str(), link.up),
            ("host", "ens1f0np0", true),
            "{step}"
        );
        // One sequence for both seams: the ib device went in first and comes back last, the
        // netdev in between.
        let calls = w.kernel.calls();
        let at = |what: &str| {
            calls
                .iter()
                .position(|c| c.starts_with(what))
                .unwrap_or_else(|| panic!("{step}: no `{what}` in {calls:?}"))
        };
        let ib_in = at(&format!("move_ib host 3 -> {POD}"));
        let ib_back = at(&format!("move_ib {POD} 3 -> host"));
        assert!(ib_in < ib_back, "{step}: {calls:?}");
        if step != "ib-move" {
            let netdev_in = at(&format!("set_link host 4 netns={POD}"));
            let netdev_back = calls
                .iter()
                .position(|c| c.starts_with("set_link") && c.contains("netns=host"))
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
        crate::attach::tests::kill_points::every_kill_point(
            || {
                let w = World::new(vec![link.clone()]);
                let mut rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[(ibdev, index)]);
                if mac == IPOIB_ADDR {
                    // The kernel re-creates IPoIB netdevs when their ib device moves.
                    rdma.ipoib = Some((w.kernel.state.clone(), parse_hwaddr(IPOIB_ADDR).unwrap()));
                }
                (w, rdma)
            },
            |(w, rdma), command, fault| {
                let netns = if command == Command::Gc { "" } else { POD };
                w.run_with(rdma, command, &fields, netns, fault)
            },
            |(w, rdma), case| {
                assert_eq!(
                    rdma.location(ibdev).as_deref(),
                    Some("host"),
                    "{case}: {ibdev} back in the host"
                );
                let (ns, back) = w.netdev(mac);
                assert_eq!(
                    (ns.as_str(), back.name.as_str(), back.mtu),
                    ("host", link.name.as_str(), link.mtu),
                    "{case}: the netdev back under its name and MTU"
                );
                assert!(
                    w.store.load("rn", "c9", "net1").unwrap().is_none(),
                    "{case}"
                );
                crate::attach::tests::kill_points::no_temp_files(w.store.dir(), case);
            },
        );
    }
}

#[test]
fn shared_mode_leaves_the_ib_device_unless_exclusive_is_required() {
    let w = World::new(vec![roce_netdev()]);
    let rdma = FakeRdma::new(Some(NetnsMode::Shared), &[("mlx5_0", 3)]);
    w.run(&rdma, Command::Add, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();
    assert!(moves(&rdma).is_empty());
    w.run(&rdma, Command::Del, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();

    let err = w
        .run(
            &rdma,
            Command::Add,
            r#""device":"ens1f0np0","rdma":"exclusive""#,
            POD,
            None,
        )
        .unwrap_err();
    assert_eq!(err.code(), 120, "{err}");
    assert!(err.to_string().contains("netns_mode=0"), "{err}");
    let none = FakeRdma::new(None, &[]);
    let err = w
        .run(
            &none,
            Command::Add,
            r#""device":"ens1f0np0","rdma":"exclusive""#,
            POD,
            None,
        )
        .unwrap_err();
    assert_eq!(err.code(), 120, "{err}");
    w.run(&none, Command::Add, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();
    w.run(&none, Command::Del, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();
    let off = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)]);
    w.run(
        &off,
        Command::Add,
        r#""device":"ens1f0np0","rdma":"off""#,
        POD,
        None,
    )
    .unwrap();
    assert!(
        moves(&off).is_empty() && off.calls.borrow().is_empty(),
        "off never asks"
    );
}

#[test]
fn ipoib_follows_its_ib_device_and_is_renamed_on_both_sides() {
    let w = World::new(vec![ipoib_netdev()]);
    let mut rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("ibp94s0", 7)]);
    rdma.ipoib = Some((w.kernel.state.clone(), parse_hwaddr(IPOIB_ADDR).unwrap()));
    w.run(
        &rdma,
        Command::Add,
        r#""rdmaDevice":"ibp94s0","mtu":2044"#,
        POD,
        None,
    )
    .unwrap();
    let (ns, link) = w.netdev(IPOIB_ADDR);
    assert_eq!(
        (ns.as_str(), link.name.as_str(), link.mtu, link.up),
        (POD, "net1", 2044, true)
    );
    assert!(
        !w.kernel
            .calls()
            .iter()
            .any(|c| c.starts_with("set_link host 5 netns=")),
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
    w.run(&rdma, Command::Del, r#""rdmaDevice":"ibp94s0""#, POD, None)
        .unwrap();
    let (ns, link) = w.netdev(IPOIB_ADDR);
    assert_eq!(
        (ns.as_str(), link.name.as_str(), link.mtu),
        ("host", "ibp94s0", 4092)
    );
    assert_eq!(rdma.location("ibp94s0").as_deref(), Some("host"));
}

#[test]
fn ipoib_rollback_renames_the_recreated_host_netdev() {
    let w = World::new(vec![ipoib_netdev()]);
    let mut rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("ibp94s0", 7)]);
    rdma.ipoib = Some((w.kernel.state.clone(), parse_hwaddr(IPOIB_ADDR).unwrap()));
    w.run(
        &rdma,
        Command::Add,
        r#""rdmaDevice":"ibp94s0""#,
        POD,
        Some("up"),
    )
    .unwrap_err();
    let (ns, link) = w.netdev(IPOIB_ADDR);
    assert_eq!(
        (ns.as_str(), link.name.as_str(), link.up),
        ("host", "ibp94s0", true)
    );
    assert_eq!(rdma.location("ibp94s0").as_deref(), Some("host"));
}

#[test]
fn check_fails_when_the_ib_port_is_not_active() {
    let w = World::new(vec![roce_netdev()]);
    let mut rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)]);
    w.run(&rdma, Command::Add, r#""device":"ens1f0np0""#, POD, None)
        .unwrap();
    rdma.port_state = 1;
    let err = w
        .run(&rdma, Command::Check, r#""device":"ens1f0np0""#, POD, None)
        .unwrap_err();
    assert_eq!(err.code(), 108);
    assert!(err.to_string().contains("not ACTIVE"), "{err}");
}

mod chained {
    use super::*;
    use crate::attach::modes::chained as chain;

    /// The VF's netdev as the previous plugin left it: `net1` in the pod, on function
    /// 0000:3b:00.2, whose ib device is mlx5_2.
    fn put_vf_netdev_in_pod(w: &World) {
        w.kernel.state.borrow_mut().links.push((
            POD.into(),
            Link {
                index: 12,
                name: "net1".into(),
                hwaddr: vec![2, 0, 0, 0, 0, 10],
                parent_dev: Some("0000:3b:00.2".into()),
                parent_bus: Some("pci".into()),
                ..Default::default()
            },
        ));
    }

    fn prev() -> String {
        r#""prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:0a","sandbox":"/proc/self/ns/net"}],
            "ips":[{"address":"10.1.0.2/24","interface":0}]}"#
            .to_string()
    }

    fn run(
        w: &World,
        rdma: &FakeRdma,
        command: Command,
        fields: &str,
        netns: &str,
    ) -> crate::error::Result<Option<crate::cni::result::CniResult>> {
        run_with(w, rdma, command, fields, netns, None)
    }

    fn run_with(
        w: &World,
        rdma: &FakeRdma,
        command: Command,
        fields: &str,
        netns: &str,
        fault: Option<crate::attach::plan::Fault>,
    ) -> crate::error::Result<Option<crate::cni::result::CniResult>> {
        let gc = match command {
            Command::Gc => r#","cni.dev/valid-attachments":[]"#,
            _ => "",
        };
        let req = w.request(command, &format!(r#""mode":"rdma",{fields}{gc}"#), netns);
        let pc = PluginConf::from_conf(&req.conf)?;
        let ctx = Ctx {
            kernel: &w.kernel,
            sys: w.fx.root(),
            store: &w.store,
            ipam: &w.ipam,
            rdma,
            dev_dir: std::path::Path::new("/nonexistent/dev/infiniband"),
            fault,
        };
        match command {
            Command::Add => chain::add(&ctx, &req, &pc).map(Some),
            Command::Del => crate::attach::lifecycle::del(&ctx, &req, &pc).map(|_| None),
            Command::Gc => crate::attach::gc::gc(&ctx, &req, pc.lock_timeout).map(|_| None),
            _ => chain::check(&ctx, &req, &pc).map(|_| None),
        }
    }

    #[test]
    fn a_kill_at_any_step_leaves_nothing_after_del_and_gc() {
        let fields = format!(r#""deviceID":"0000:3b:00.2",{}"#, prev());
        crate::attach::tests::kill_points::every_kill_point(
            || {
                (
                    World::new(vec![]),
                    FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]),
                )
            },
            |(w, rdma), command, fault| {
                let netns = if command == Command::Gc { "" } else { POD };
                run_with(w, rdma, command, &fields, netns, fault).map(drop)
            },
            |(w, rdma), case| {
                assert_eq!(rdma.location("mlx5_2").as_deref(), Some("host"), "{case}");
                assert!(
                    w.store.load("rn", "c9", "net1").unwrap().is_none(),
                    "{case}"
                );
                crate::attach::tests::kill_points::no_temp_files(w.store.dir(), case);
            },
        );
    }

    #[test]
    fn moves_the_vf_ib_device_after_the_previous_plugin_and_passes_prev_result() {
        let w = World::new(vec![]);
        let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        let fields = format!(r#""deviceID":"0000:3b:00.2",{}"#, prev());
        let out = run(&w, &rdma, Command::Add, &fields, POD).unwrap().unwrap();
        assert_eq!(out.interfaces[0].name, "net1");
        assert_eq!(
            out.ips[0].address.to_string(),
            "10.1.0.2/24",
            "prevResult passes through"
        );
        assert_eq!(rdma.location("mlx5_2").as_deref(), Some(POD));
        run(&w, &rdma, Command::Check, &fields, POD).unwrap();
        run(&w, &rdma, Command::Del, &fields, POD).unwrap();
        assert_eq!(rdma.location("mlx5_2").as_deref(), Some("host"));
        assert_eq!(
            moves(&rdma),
            vec![
                format!("move_ib host 9 -> {POD}"),
                format!("move_ib {POD} 9 -> host")
            ]
        );
        run(&w, &rdma, Command::Del, &fields, POD).unwrap();
    }

    #[test]
    fn finds_the_function_from_the_pod_interface_without_device_id() {
        let w = World::new(vec![]);
        put_vf_netdev_in_pod(&w);
        let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        run(&w, &rdma, Command::Add, &prev(), POD).unwrap();
        assert_eq!(rdma.location("mlx5_2").as_deref(), Some(POD));
        // CNI_NETNS empty on DEL while the pod netns lives on: the recorded netns, still the
        // same one, is where the ib device is brought back from.
        run(&w, &rdma, Command::Del, &prev(), "").unwrap();
        assert_eq!(moves(&rdma).len(), 2, "moved back from the recorded netns");
        assert_eq!(rdma.location("mlx5_2").as_deref(), Some("host"));
        assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
    }

    #[test]
    fn an_empty_cni_netns_with_the_pod_gone_moves_nothing() {
        let w = World::new(vec![]);
        let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        let fields = format!(r#""deviceID":"0000:3b:00.2",{}"#, prev());
        run(&w, &rdma, Command::Add, &fields, POD).unwrap();
        // The recorded path now names another netns (the pod's is gone, the path reused): its
        // identity differs, so nothing is moved from it.
        let mut att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
        let id = att.netns_id.as_mut().expect("the identity is recorded");
        id.ino += 1;
        w.store.save(&att).unwrap();
        run(&w, &rdma, Command::Del, &fields, "").unwrap();
        assert_eq!(moves(&rdma).len(), 1, "nothing moved from a reused path");
        assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
    }

    #[test]
    fn a_shared_device_plugin_index_leaves_the_pod_interface_to_decide() {
        let w = World::new(vec![]);
        put_vf_netdev_in_pod(&w);
        let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        let fields = format!(r#""deviceID":"0","pciBusID":"0",{}"#, prev());
        run(&w, &rdma, Command::Add, &fields, POD).unwrap();
        assert_eq!(rdma.location("mlx5_2").as_deref(), Some(POD));
        let att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
        assert_eq!(att.device_id.as_deref(), Some("0"));
        run(&w, &rdma, Command::Del, &fields, POD).unwrap();
        assert_eq!(rdma.location("mlx5_2").as_deref(), Some("host"));
    }

    #[test]
    fn chained_mode_writes_the_vfs_device_info_and_removes_it_on_del() {
        let w = World::new(vec![]);
        let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        let file = w.fx.path().join("devinfo/net1.json");
        let fields = format!(
            r#""deviceID":"0000:3b:00.2","runtimeConfig":{{"CNIDeviceInfoFile":"{}"}},{}"#,
            file.display(),
            prev()
        );
        run(&w, &rdma, Command::Add, &fields, POD).unwrap();
        let info: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(info["pci"]["pci-address"], "0000:3b:00.2");
        assert_eq!(info["pci"]["rdma-device"], "mlx5_2");
        assert_eq!(info["pci"]["pf-pci-address"], "0000:3b:00.0");
        run(&w, &rdma, Command::Del, &fields, POD).unwrap();
        assert!(!file.exists());
    }

    #[test]
    fn errors_are_clear_and_leave_nothing() {
        let w = World::new(vec![]);
        let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        let err = run(&w, &rdma, Command::Add, r#""deviceID":"0000:3b:00.2""#, POD).unwrap_err();
        assert_eq!(err.code(), 7, "{err}");
        assert!(err.to_string().contains("prevResult"), "{err}");

        let shared = FakeRdma::new(Some(NetnsMode::Shared), &[("mlx5_2", 9)]);
        let fields = format!(r#""deviceID":"0000:3b:00.2",{}"#, prev());
        let err = run(&w, &shared, Command::Add, &fields, POD).unwrap_err();
        assert_eq!(err.code(), 120, "{err}");
        assert!(err.to_string().contains("netns_mode=0"), "{err}");

        let mut refusing = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_2", 9)]);
        refusing.refuse = Some(Errno::EOPNOTSUPP);
        let err = run(&w, &refusing, Command::Add, &fields, POD).unwrap_err();
        assert!(
            err.to_string().contains("mlx5_2") && err.to_string().contains("disassociate"),
            "{err}"
        );
        assert!(w.store.load("rn", "c9", "net1").unwrap().is_none());
        assert_eq!(refusing.location("mlx5_2").as_deref(), Some("host"));
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
        let w = World::new(vec![roce_netdev()]);
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
        let rdma = FakeRdma::new(Some(NetnsMode::Exclusive), &[("mlx5_0", 3)]);
        let fields = r#""device":"ens1f0np0","devicePermissions":{"uverbs":"0600"}"#;
        let run = |command, fail_after: Option<&str>| {
            let req = w.request(command, fields, POD);
            let pc = PluginConf::from_conf(&req.conf).unwrap();
            let ctx = Ctx {
                kernel: &w.kernel,
                sys: w.fx.root(),
                store: &w.store,
                ipam: &w.ipam,
                rdma: &rdma,
                dev_dir: dev.path(),
                fault: fail_after.map(|s| crate::attach::plan::Fault::FailAfter(s.to_string())),
            };
            match command {
                Command::Add => move_dev::add(&ctx, &req, &pc).map(|_| ()),
                _ => crate::attach::lifecycle::del(&ctx, &req, &pc),
            }
        };
        run(Command::Add, None).unwrap();
        assert_eq!(mode_of(&uverbs), 0o600);
        let att = w.store.load("rn", "c9", "net1").unwrap().unwrap();
        assert_eq!(att.perm_changes.len(), 1);
        assert_eq!(att.perm_changes[0].old_mode & 0o777, 0o666);
        run(Command::Del, None).unwrap();
        assert_eq!(mode_of(&uverbs), 0o666, "restored on DEL");

        run(Command::Add, Some("addresses")).unwrap_err();
        assert_eq!(mode_of(&uverbs), 0o666, "restored on rollback");

        // An unreadable record might be a live attachment's that changed this node too: DEL
        // keeps the node as it is rather than restore it under that pod.
        run(Command::Add, None).unwrap();
        let corrupt = w.store.dir().join("other-net/c1:net2.json");
        std::fs::create_dir_all(corrupt.parent().unwrap()).unwrap();
        std::fs::write(&corrupt, b"{torn").unwrap();
        run(Command::Del, None).unwrap();
        assert_eq!(mode_of(&uverbs), 0o600, "held while a record is unreadable");
        std::fs::remove_file(&corrupt).unwrap();
        std::fs::set_permissions(&uverbs, std::fs::Permissions::from_mode(0o666)).unwrap();

        std::fs::remove_file(&uverbs).unwrap();
        let err = run(Command::Add, None).unwrap_err();
        assert_eq!(err.code(), 111, "{err}");
        assert!(
            err.to_string().contains("ib_uverbs"),
            "names the module to load: {err}"
        );
        assert_eq!(
            rdma.location("mlx5_0").as_deref(),
            Some("host"),
            "rolled back"
        );
    }
}
