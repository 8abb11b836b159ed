//! Unit tests of move mode over the fake kernel: step order, one-request moves, rollback from
//! every step, DEL from the pod and from the host, altname and name clashes.

use std::ffi::OsString;
use std::path::Path;

use nix::errno::Errno;

use crate::attach::config::PluginConf;
use crate::attach::modes::move_dev;
use crate::attach::state::Store;
use crate::attach::testkit::{FakeIpam, FakeKernel, FakeRdma};
use crate::attach::Ctx;
use crate::cni::env::RawEnv;
use crate::cni::result::{CniResult, IpConfig, Route};
use crate::cni::{Command, NetConf, Request};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::Link;
use crate::testutil::TempDir;

/// Any real netns file works as the "pod" for the fake: only its path is used as a key.
const POD: &str = "/proc/self/ns/net";

const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x07];

fn host_nic() -> Link {
    Link {
        index: 7,
        name: "ens1f0v0".into(),
        mtu: 1500,
        hwaddr: MAC.to_vec(),
        up: true,
        link_type: 1,
        parent_dev: Some("0000:3b:00.2".into()),
        parent_bus: Some("pci".into()),
        ..Default::default()
    }
}

fn request(command: Command, conf: &str, netns: Option<&str>) -> Request {
    let vars: Vec<(OsString, OsString)> = [
        ("CNI_COMMAND", command.as_str()),
        ("CNI_CONTAINERID", "c0ffee"),
        ("CNI_NETNS", netns.unwrap_or("")),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/nonexistent"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    let env = RawEnv::from_vars(vars).validate(command).unwrap();
    let conf = NetConf::parse(conf.as_bytes(), command).unwrap();
    Request {
        env,
        conf,
        stdin: Vec::new(),
    }
}

fn conf(data_dir: &Path) -> String {
    format!(
        r#"{{"cniVersion":"1.1.0","name":"rdma-net","type":"rdma-ns","device":"ens1f0v0","mtu":9000,
            "dataDir":"{}","ipam":{{"type":"fake"}}}}"#,
        data_dir.display()
    )
}

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

struct World {
    _tmp: TempDir,
    kernel: FakeKernel,
    ipam: FakeIpam,
    rdma: FakeRdma,
    sys: SysRoot,
    store: Store,
    conf: String,
}

impl World {
    fn new() -> World {
        let tmp = TempDir::new("attach");
        let kernel = FakeKernel::with_host_links(vec![host_nic()]);
        kernel
            .state
            .borrow_mut()
            .addrs
            .insert(7, vec!["192.0.2.7/24".parse().unwrap()]);
        let conf = conf(&tmp.path().join("data"));
        World {
            store: Store::new(tmp.path().join("data")),
            sys: SysRoot::new(tmp.path().join("sys")),
            rdma: FakeRdma::new(Some(crate::kernel::nldev::NetnsMode::Shared), &[]),
            kernel,
            ipam: FakeIpam {
                result: Some(ipam_result()),
                ..Default::default()
            },
            conf,
            _tmp: tmp,
        }
    }

    fn ctx(&self, fail_after: Option<&str>) -> Ctx<'_> {
        Ctx {
            kernel: &self.kernel,
            sys: &self.sys,
            store: &self.store,
            ipam: &self.ipam,
            rdma: &self.rdma,
            dev_dir: std::path::Path::new("/nonexistent/dev/infiniband"),
            fault: fail_after.map(|s| crate::attach::plan::Fault::FailAfter(s.to_string())),
        }
    }

    fn run_with(
        &self,
        command: Command,
        fault: Option<crate::attach::plan::Fault>,
    ) -> crate::error::Result<()> {
        let (netns, conf) = match command {
            Command::Gc => (None, crate::attach::tests::kill_points::gc_conf(&self.conf)),
            _ => (Some(POD), self.conf.clone()),
        };
        let req = request(command, &conf, netns);
        let pc = PluginConf::from_conf(&req.conf).unwrap();
        let mut ctx = self.ctx(None);
        ctx.fault = fault;
        match command {
            Command::Add => move_dev::add(&ctx, &req, &pc).map(drop),
            Command::Del => crate::attach::lifecycle::del(&ctx, &req, &pc),
            _ => crate::attach::gc::gc(&ctx, &req, pc.lock_timeout),
        }
    }

    fn add(&self, fail_after: Option<&str>) -> crate::error::Result<CniResult> {
        let req = request(Command::Add, &self.conf, Some(POD));
        let pc = PluginConf::from_conf(&req.conf).unwrap();
        move_dev::add(&self.ctx(fail_after), &req, &pc)
    }

    fn del(&self, netns: Option<&str>) -> crate::error::Result<()> {
        let req = request(Command::Del, &self.conf, netns);
        let pc = PluginConf::from_conf(&req.conf).unwrap();
        crate::attach::lifecycle::del(&self.ctx(None), &req, &pc)
    }

    /// The host exactly as before ADD: same name, MTU, admin state, addresses; no record.
    fn assert_host_as_before(&self) {
        let (ns, link) = self.kernel.locate(&MAC).expect("device exists");
        assert_eq!(ns, "host");
        assert_eq!(link.name, "ens1f0v0");
        assert_eq!(link.mtu, 1500);
        assert!(link.up, "admin state restored");
        assert_eq!(
            self.kernel.addrs_of(7),
            vec!["192.0.2.7/24".parse().unwrap()]
        );
        assert!(self
            .store
            .load("rdma-net", "c0ffee", "net1")
            .unwrap()
            .is_none());
    }
}

#[test]
fn add_moves_renames_and_sets_mtu_in_one_request_then_addresses_up_routes() {
    let w = World::new();
    let result = w.add(None).unwrap();
    let calls = w.kernel.calls();
    let moves: Vec<_> = calls.iter().filter(|c| c.contains("netns=")).collect();
    assert_eq!(
        moves,
        vec![&format!("set_link host 7 netns={POD} name=net1 mtu=9000")]
    );
    let pos = |needle: &str| calls.iter().position(|c| c.contains(needle)).unwrap();
    assert!(pos("netns=") < pos("add_address"));
    assert!(pos("add_address") < pos("up=true"));
    assert!(
        pos("up=true") < pos("add_route"),
        "routes after up: {calls:?}"
    );
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!(
        (ns.as_str(), link.name.as_str(), link.mtu, link.up),
        (POD, "net1", 9000, true)
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
    assert_eq!(att.phase, crate::attach::state::Phase::Ready);
    assert_eq!(att.moved().unwrap().host.name, "ens1f0v0");
    assert_eq!(att.moved().unwrap().host.mtu, 1500);
    assert_eq!(att.device_key, "pci-0000:3b:00.2");
    assert!(att.moved().unwrap().pod_interface.ipam_result.is_some());
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
        let w = World::new();
        let err = w.add(Some(step)).unwrap_err();
        assert!(err.to_string().contains(step), "{step}: {err}");
        w.assert_host_as_before();
        // IPAM ADD runs beside the intent record and the move: released after any step.
        let ipam_calls = w.ipam.calls.lock().unwrap().clone();
        assert_eq!(ipam_calls, vec!["add", "del"], "{step}: IPAM released");
    }
}

#[test]
fn a_kernel_refusal_at_any_kernel_step_rolls_back() {
    for (call, errno) in [
        ("set_link host 7 netns=", Errno::EBUSY),
        ("add_address /proc/self/ns/net", Errno::EADDRNOTAVAIL),
        ("/proc/self/ns/net 7 up=true", Errno::ENETDOWN),
        ("add_route", Errno::ENETUNREACH),
    ] {
        let w = World::new();
        w.kernel.fail_on(call, errno);
        let err = w.add(None).unwrap_err();
        assert_eq!(err.code(), 105, "{call}: {err}");
        assert!(err.to_string().contains(errno.desc()), "{call}: {err}");
        w.assert_host_as_before();
    }
}

#[test]
fn a_move_that_failed_half_way_is_still_rolled_back() {
    let w = World::new();
    w.kernel.state.borrow_mut().partial_rename_failure = Some("set_link host 7 netns=".into());
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), 105, "{err}");
    w.assert_host_as_before();
}

#[test]
fn an_undo_that_fails_is_reported_with_the_cause() {
    let w = World::new();
    w.kernel.fail_on("add_route", Errno::ENETUNREACH);
    w.kernel
        .fail_on(&format!("set_link {POD} 7 netns=host"), Errno::EIO);
    let err = w.add(None).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("adding route"), "{text}");
    assert!(text.contains("moving"), "undo failure named: {text}");
    assert_eq!(err.code(), 109);
}

#[test]
fn an_ipam_failure_brings_back_what_moved_beside_it() {
    let mut w = World::new();
    w.ipam.fail_add = true;
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), 11, "IPAM's own code passes through: {err}");
    let calls = w.kernel.calls();
    let moved_in = calls
        .iter()
        .position(|c| c.starts_with("set_link host 7 netns="))
        .expect("the move ran beside IPAM ADD");
    assert!(
        calls[moved_in..]
            .iter()
            .any(|c| c.starts_with(&format!("set_link {POD} 7 netns=host"))),
        "and was undone: {calls:?}"
    );
    assert_eq!(
        *w.ipam.calls.lock().unwrap(),
        vec!["add"],
        "no DEL for a failed ADD"
    );
    w.assert_host_as_before();
}

#[test]
fn an_ifname_taken_in_the_pod_is_refused_before_anything_moves() {
    let w = World::new();
    w.kernel.state.borrow_mut().links.push((
        POD.into(),
        Link {
            index: 3,
            name: "net1".into(),
            hwaddr: vec![2, 0, 0, 0, 0, 3],
            ..Default::default()
        },
    ));
    let err = w.add(None).unwrap_err();
    assert_eq!(err.code(), 103, "{err}");
    assert!(err.to_string().contains("net1"), "{err}");
    assert_eq!(w.ipam.calls.lock().unwrap().len(), 0);
    w.assert_host_as_before();
}

#[test]
fn del_brings_the_device_back_down_with_name_and_mtu_and_is_idempotent() {
    let w = World::new();
    w.add(None).unwrap();
    w.del(Some(POD)).unwrap();
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!(
        (ns.as_str(), link.name.as_str(), link.mtu, link.up),
        ("host", "ens1f0v0", 1500, false)
    );
    let back: Vec<_> = w
        .kernel
        .calls()
        .into_iter()
        .filter(|c| c.contains("netns=host"))
        .collect();
    assert_eq!(
        back,
        vec![format!(
            "set_link {POD} 7 netns=host name=ens1f0v0 mtu=1500"
        )]
    );
    assert!(w
        .store
        .load("rdma-net", "c0ffee", "net1")
        .unwrap()
        .is_none());
    w.del(Some(POD)).unwrap();
    w.del(None).unwrap();
    assert_eq!(
        *w.ipam.calls.lock().unwrap(),
        vec!["add", "del", "del", "del"],
        "IPAM DEL always runs"
    );
}

#[test]
fn del_after_the_netns_died_renames_the_returned_device_in_the_host() {
    let w = World::new();
    w.add(None).unwrap();
    // What the kernel does to a physical netdev when its netns dies: back to the host, still
    // named as in the pod, down.
    {
        let mut st = w.kernel.state.borrow_mut();
        let entry = st.links.iter_mut().find(|(_, l)| l.hwaddr == MAC).unwrap();
        entry.0 = "host".into();
        entry.1.up = false;
    }
    w.del(None).unwrap();
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!(
        (ns.as_str(), link.name.as_str(), link.mtu),
        ("host", "ens1f0v0", 1500)
    );
}

#[test]
fn del_when_the_device_vanished_with_its_netns_succeeds() {
    let w = World::new();
    w.add(None).unwrap();
    w.kernel
        .state
        .borrow_mut()
        .links
        .retain(|(_, l)| l.hwaddr != MAC);
    w.del(None).unwrap();
    assert!(w
        .store
        .load("rdma-net", "c0ffee", "net1")
        .unwrap()
        .is_none());
}

#[test]
fn a_lingering_altname_is_dropped_before_renaming_back() {
    let w = World::new();
    w.add(None).unwrap();
    {
        let mut st = w.kernel.state.borrow_mut();
        let entry = st.links.iter_mut().find(|(_, l)| l.hwaddr == MAC).unwrap();
        entry.1.altnames.push("ens1f0v0".into());
    }
    w.del(Some(POD)).unwrap();
    let calls = w.kernel.calls();
    let drop_pos = calls
        .iter()
        .position(|c| c.starts_with("del_altname") && c.ends_with("ens1f0v0"));
    let move_pos = calls.iter().position(|c| c.contains("netns=host"));
    assert!(drop_pos.unwrap() < move_pos.unwrap(), "{calls:?}");
    assert_eq!(w.kernel.locate(&MAC).unwrap().1.name, "ens1f0v0");
}

#[test]
fn del_with_the_name_taken_in_the_host_still_brings_the_device_home_and_says_so() {
    let w = World::new();
    w.add(None).unwrap();
    w.kernel.state.borrow_mut().links.push((
        "host".into(),
        Link {
            index: 40,
            name: "ens1f0v0".into(),
            hwaddr: vec![2, 0, 0, 0, 0, 40],
            ..Default::default()
        },
    ));
    let err = w.del(Some(POD)).unwrap_err();
    assert_eq!(err.code(), 102, "{err}");
    assert!(err.to_string().contains("rdmans7"), "{err}");
    let (ns, link) = w.kernel.locate(&MAC).unwrap();
    assert_eq!((ns.as_str(), link.name.as_str()), ("host", "rdmans7"));
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
    let w = World::new();
    w.add(None).unwrap();
    let other = conf(w.store.dir()).replace("rdma-net", "other-net");
    let req = request(Command::Add, &other, Some(POD));
    let pc = PluginConf::from_conf(&req.conf).unwrap();
    let err = move_dev::add(&w.ctx(None), &req, &pc).unwrap_err();
    assert_eq!(err.code(), 102, "{err}");
    assert!(err.to_string().contains("container c0ffee"), "{err}");
}

#[test]
fn check_verifies_presence_mtu_and_prev_result_addresses() {
    let w = World::new();
    let result = w.add(None).unwrap();
    let prev = result.to_value("1.1.0").unwrap();
    let mut conf: serde_json::Value = serde_json::from_str(&w.conf).unwrap();
    conf["prevResult"] = prev;
    let conf = conf.to_string();
    let req = request(Command::Check, &conf, Some(POD));
    let pc = PluginConf::from_conf(&req.conf).unwrap();
    move_dev::check(&w.ctx(None), &req, &pc).unwrap();

    w.kernel
        .state
        .borrow_mut()
        .addrs
        .get_mut(&7)
        .unwrap()
        .clear();
    let err = move_dev::check(&w.ctx(None), &req, &pc).unwrap_err();
    assert_eq!(err.code(), 108);
    assert!(err.to_string().contains("10.10.0.2/24"), "{err}");

    w.kernel
        .state
        .borrow_mut()
        .links
        .iter_mut()
        .for_each(|(_, l)| l.mtu = 1400);
    let err = move_dev::check(&w.ctx(None), &req, &pc).unwrap_err();
    assert!(err.to_string().contains("MTU 1400"), "{err}");
}

#[test]
fn a_kill_at_any_step_leaves_nothing_after_del_and_gc() {
    crate::attach::tests::kill_points::every_kill_point(
        World::new,
        |w, command, fault| w.run_with(command, fault),
        |w, case| {
            let (ns, link) = w.kernel.locate(&MAC).expect("device exists");
            assert_eq!(
                (ns.as_str(), link.name.as_str(), link.mtu),
                ("host", "ens1f0v0", 1500),
                "{case}: the device back under its name and MTU"
            );
            assert!(
                w.store
                    .load("rdma-net", "c0ffee", "net1")
                    .unwrap()
                    .is_none(),
                "{case}: record left"
            );
            crate::attach::tests::kill_points::ipam_released(&w.ipam.calls.lock().unwrap(), case);
            crate::attach::tests::kill_points::no_temp_files(w.store.dir(), case);
        },
    );
}

/// A pod netns that died with no DEL: the kernel returned the physical netdev to the host under
/// the pod's name (or `devN` on a clash) with the pod's MTU. The orphan's replayed DEL finds it
/// by its address, restores name and MTU, releases IPAM and drops the record.
#[test]
fn an_orphan_whose_netns_died_is_released_from_its_record() {
    use crate::attach::operations::{netns_state, orphan_del, NetnsState};
    for returned_as in ["net1", "dev7"] {
        let w = World::new();
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
            dev.0 = "host".into();
            dev.1.name = returned_as.into();
        }
        att.netns = "/run/netns/rdma-ns-test-gone".into();
        att.conf = Some(serde_json::from_str(&w.conf).unwrap());
        w.store.save(&att).unwrap();
        assert_eq!(netns_state(&att), NetnsState::Gone);

        let req = orphan_del(&att, w.store.dir()).unwrap();
        assert_eq!(req.env.netns, None);
        let pc = PluginConf::from_conf(&req.conf).unwrap();
        crate::attach::lifecycle::del(&w.ctx(None), &req, &pc).unwrap();
        let (ns, link) = w.kernel.locate(&MAC).unwrap();
        assert_eq!(
            (ns.as_str(), link.name.as_str(), link.mtu),
            ("host", "ens1f0v0", 1500),
            "{returned_as}: name and MTU restored"
        );
        assert!(w
            .store
            .load("rdma-net", "c0ffee", "net1")
            .unwrap()
            .is_none());
        crate::attach::tests::kill_points::ipam_released(
            &w.ipam.calls.lock().unwrap(),
            returned_as,
        );
    }
}
