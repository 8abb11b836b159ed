//! Every finding of the doctor on fixture trees (mlx5 PF/VF/SF, IPoIB, rxe, a downgraded PCIe
//! link), each with its presence twin: the same probe passing on the healthy tree. Run as root
//! (CI does): the char-device checks mknod nodes in temp dirs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use nix::sys::stat::{makedev, mknod, Mode as FileMode, SFlag};
use serde_json::json;

use super::*;
use crate::attach::record::Attachment;
use crate::attach::store::Store;
use crate::kernel::topology::fixtures::{PciSpec, SysfsFixture};
use crate::kernel::topology::CharDev;
use crate::node::confs::peer_entries;
use crate::node::confs::rdma_networks;
use crate::testutil::TempDir;

struct Fake {
    addrs: HashMap<String, Vec<IpAddr>>,
    altnames: HashMap<String, String>,
    mode: Result<NetnsMode, String>,
    /// The DCB_CMD_IEEE_GET reply datagram (hex, tests/data/dcb) of each netdev that has DCB;
    /// the others answer as a kernel does for a netdev without DCB ops.
    dcb: HashMap<String, &'static str>,
    pause: HashMap<String, crate::kernel::ethtool::Pause>,
    /// The netdevs DCB was asked about, in order.
    asked: std::cell::RefCell<Vec<String>>,
}

impl NetView for Fake {
    fn addresses(&self, ifname: &str) -> Result<Vec<IpAddr>, String> {
        Ok(self.addrs.get(ifname).cloned().unwrap_or_default())
    }
    fn resolve_name(&self, name: &str) -> Option<String> {
        self.altnames.get(name).cloned()
    }
    fn netns_mode(&self) -> Result<NetnsMode, String> {
        self.mode.clone()
    }
    /// The real decoder over the reply bytes: only the socket is the fake's.
    fn dcb(&self, ifname: &str) -> Result<Option<crate::kernel::dcbnl::DcbIeee>, String> {
        self.asked.borrow_mut().push(ifname.to_string());
        let Some(reply) = self.dcb.get(ifname) else {
            return Ok(None);
        };
        let datagram = crate::testutil::hex(reply);
        crate::kernel::dcbnl::decode_ieee(&datagram[16..])
            .map(Some)
            .map_err(|e| format!("{e:?}"))
    }
    fn pause(&self, ifname: &str) -> Result<Option<crate::kernel::ethtool::Pause>, String> {
        Ok(self.pause.get(ifname).copied())
    }
}

struct Env {
    fx: SysfsFixture,
    tmp: TempDir,
    net: Fake,
    opts: Options,
}

const MODULES: [&str; 7] = [
    "ib_core",
    "ib_uverbs",
    "rdma_ucm",
    "ib_umad",
    "mlx5_ib",
    "rdma_rxe",
    "ib_ipoib",
];

impl Env {
    /// Every preset, every module loaded, shared mode, every char device node present 0666,
    /// the PF's and rxe's addresses with their GIDs, an unlimited containerd.
    fn healthy() -> Env {
        let fx = SysfsFixture::all().unwrap();
        fx.load_modules(&MODULES).unwrap();
        // RoCE ports at MTU 9000 (active MTU 4096).
        for n in ["ens1f0np0", "ens1f0v0", "enp6s0f0s88", "v0"] {
            fx.write_attr(format!("class/net/{n}/mtu"), "9000").unwrap();
        }
        let tmp = TempDir::new("doctor");
        let env = Env {
            fx,
            net: Fake {
                addrs: [
                    (
                        "ens1f0np0",
                        vec!["10.59.0.5", "2001:db8::5", "fe80::e42:a1ff:fe3b:0"],
                    ),
                    ("ens1f0np0.100", vec!["10.100.0.5"]),
                    ("v0", vec!["10.9.0.5"]),
                ]
                .into_iter()
                .map(|(n, a)| {
                    (
                        n.to_string(),
                        a.iter().map(|a| a.parse().unwrap()).collect(),
                    )
                })
                .collect(),
                altnames: HashMap::new(),
                mode: Err("no RDMA netlink in tests".into()),
                dcb: HashMap::new(),
                pause: HashMap::new(),
                asked: Default::default(),
            },
            tmp,
            opts: Options::default(),
        };
        std::fs::create_dir_all(env.dev_dir()).unwrap();
        for c in env.char_devs() {
            env.mknod(&c.name, c.major, c.minor, 0o666);
        }
        env.runtime("containerd", "unlimited");
        env
    }

    fn dev_dir(&self) -> PathBuf {
        self.tmp.path().join("dev")
    }

    fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    fn node(&self) -> Node {
        Node {
            sys: self.fx.root().clone(),
            dev_dir: self.dev_dir(),
            proc_dir: self.tmp.path().join("proc"),
            modules_builtin: None,
            data_dirs: vec![self.data_dir()],
        }
    }

    fn char_devs(&self) -> Vec<CharDev> {
        let topo = RdmaSysfs::new(self.fx.root());
        let mut v = topo.char_devices().unwrap();
        v.extend(topo.rdma_cm().unwrap());
        v
    }

    fn mknod(&self, name: &str, major: u32, minor: u32, mode: u32) {
        let p = self.dev_dir().join(name);
        let _ = std::fs::remove_file(&p);
        mknod(
            &p,
            SFlag::S_IFCHR,
            FileMode::empty(),
            makedev(major.into(), minor.into()),
        )
        .unwrap_or_else(|e| panic!("mknod {} (tests need root): {e}", p.display()));
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }

    /// A fake /proc with one runtime process whose memlock soft limit is `limit`.
    fn runtime(&self, comm: &str, limit: &str) {
        let pid = self.tmp.path().join("proc/4242");
        let _ = std::fs::remove_dir_all(self.tmp.path().join("proc"));
        std::fs::create_dir_all(&pid).unwrap();
        std::fs::write(pid.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(
            pid.join("limits"),
            format!(
                "Limit                     Soft Limit           Hard Limit           Units\n\
                 Max locked memory         {limit}            {limit}            bytes\n"
            ),
        )
        .unwrap();
    }

    fn conf(&mut self, conf: serde_json::Value) {
        let file = "/etc/cni/net.d/test.conflist";
        let (n, e) = rdma_networks(file, &conf);
        self.opts.networks.extend(n);
        self.opts.conf_errors.extend(e);
        self.opts
            .peer_entries
            .extend(peer_entries(file, file, &conf));
    }

    fn run(&self) -> Report {
        run(&self.node(), &self.net, &self.opts)
    }
}

fn macvlan(name: &str, master: &str) -> serde_json::Value {
    json!({"cniVersion":"1.0.0","name":name,"plugins":[
        {"type":"rdma-ns","mode":"macvlan","master":master}]})
}

/// The findings of `check` whose object contains `object`.
fn find<'a>(r: &'a Report, check: &str, object: &str) -> Vec<&'a Finding> {
    r.findings
        .iter()
        .filter(|f| f.check == check && f.object.contains(object))
        .collect()
}

/// The one finding of `check` on `object`, asserted to have `severity`.
fn one(r: &Report, check: &str, object: &str, severity: Severity) -> Finding {
    let found = find(r, check, object);
    assert_eq!(found.len(), 1, "{check} {object}: {:#?}", r.findings);
    assert_eq!(found[0].severity, severity, "{:#?}", found[0]);
    if severity > Severity::Ok {
        assert!(
            found[0].fix.is_some(),
            "a non-OK finding names a fix: {:#?}",
            found[0]
        );
    }
    found[0].clone()
}

#[test]
fn a_healthy_fixture_node_is_all_ok() {
    let mut env = Env::healthy();
    env.conf(json!({"cniVersion":"1.0.0","name":"roce","plugins":[
        {"type":"rdma-ns","mode":"macvlan","master":"ens1f0np0",
         "devicePermissions":{"uverbs":"0666","rdma_cm":"0666"}}]}));
    let r = env.run();
    let bad: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Ok && f.check != "pcie")
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    // The PF's downgraded link is the fixture's one warning.
    assert_eq!(r.worst(), Severity::Warn);
    assert_eq!(r.facts.ib_devices, 5);
    assert_eq!(r.facts.active_ports, 5);
    assert_eq!(r.facts.max_rate_mbps, Some(100_000));
    assert!(r.facts.pcie_degraded);
    assert_eq!(r.facts.netns_mode, Some(NetnsMode::Shared));
    assert_eq!(
        r.facts.link_layers,
        ["Ethernet".to_string(), "InfiniBand".to_string()].into()
    );
}

#[test]
fn exit_codes_follow_the_worst_finding() {
    assert_eq!(Severity::Ok.exit_code(), 0);
    assert_eq!(Severity::Warn.exit_code(), 1);
    assert_eq!(Severity::Fail.exit_code(), 2);
    let mut r = Report::default();
    assert_eq!(r.worst(), Severity::Ok);
    r.push("x", Severity::Warn, "a", "b", Some("c".into()));
    r.push("x", Severity::Ok, "a", "b", None);
    assert_eq!(r.worst(), Severity::Warn);
}

#[test]
fn core_modules_missing_fail_or_warn_and_name_modprobe() {
    let env = Env::healthy();
    let r = env.run();
    for m in ["ib_core", "ib_uverbs", "rdma_ucm", "ib_umad"] {
        one(&r, "modules", m, Severity::Ok);
    }
    env.fx.remove("module/ib_uverbs").unwrap();
    env.fx.remove("module/rdma_ucm").unwrap();
    let r = env.run();
    let f = one(&r, "modules", "ib_uverbs", Severity::Fail);
    assert!(f.fix.as_deref().unwrap().starts_with("modprobe ib_uverbs"));
    let f = one(&r, "modules", "rdma_ucm", Severity::Warn);
    assert!(f.finding.contains("rdma_cm"), "{f:?}");
    assert!(f.fix.as_deref().unwrap().contains("/etc/modules-load.d/"));
}

#[test]
fn a_builtin_module_counts_as_present() {
    let env = Env::healthy();
    env.fx.remove("module/ib_uverbs").unwrap();
    let list = env.tmp.path().join("modules.builtin");
    std::fs::write(&list, "kernel/drivers/infiniband/core/ib_uverbs.ko\n").unwrap();
    let mut node = env.node();
    node.modules_builtin = Some(list);
    let r = run(&node, &env.net, &env.opts);
    one(&r, "modules", "ib_uverbs", Severity::Ok);
}

#[test]
fn mlx5_functions_without_mlx5_ib_fail_and_without_ib_device_warn() {
    let env = Env::healthy();
    let f = one(&Env::run(&env), "modules", "mlx5_ib", Severity::Ok);
    assert!(f.finding.contains("0000:3b:00.0"), "{f:?}");
    env.fx.remove("module/mlx5_ib").unwrap();
    let f = one(&env.run(), "modules", "mlx5_ib", Severity::Fail);
    assert!(f.fix.as_deref().unwrap().contains("modprobe mlx5_ib"));
    // Loaded, but a function bound to mlx5_core has no ib device.
    env.fx.write_attr("module/mlx5_ib/refcnt", "1").unwrap();
    env.fx
        .add_pci_function(&PciSpec {
            bdf: "0000:af:00.0",
            upstream: "pci0000:ae/0000:ae:00.0",
            numa_node: 1,
            current_link: ("16.0 GT/s PCIe", 16),
            max_link: ("16.0 GT/s PCIe", 16),
            driver: Some("mlx5_core"),
        })
        .unwrap();
    let f = one(&env.run(), "modules", "mlx5_ib", Severity::Warn);
    assert!(f.finding.contains("0000:af:00.0"), "{f:?}");
    assert!(f.fix.as_deref().unwrap().contains("enable_roce"));
}

#[test]
fn rxe_names_its_module() {
    let f = one(&Env::healthy().run(), "modules", "rdma_rxe", Severity::Ok);
    assert!(f.finding.contains("rxe0"));
}

#[test]
fn no_ib_device_fails_and_names_the_driver_or_rxe() {
    let env = Env::healthy();
    assert!(find(&env.run(), "devices", "").is_empty());
    let fx = SysfsFixture::new().unwrap();
    let empty = Env { fx, ..env };
    let f = one(&empty.run(), "devices", "infiniband", Severity::Fail);
    assert!(f.fix.as_deref().unwrap().contains("rdma link add"));
}

#[test]
fn no_ib_device_with_rdma_rxe_loaded_is_a_soft_roce_node_and_warns() {
    // The lab's nodes: rdma_rxe loaded, devices only made per pod by softRoce networks.
    let env = Env {
        fx: SysfsFixture::new().unwrap(),
        ..Env::healthy()
    };
    env.fx.write_attr("module/rdma_rxe/refcnt", "0").unwrap();
    let f = one(&env.run(), "devices", "infiniband", Severity::Warn);
    assert!(f.finding.contains("softRoce"), "{f:?}");
    // In a pod there is no such excuse: the pod sees its own devices or none.
    let pod = Env {
        opts: Options {
            pod: true,
            ..Options::default()
        },
        ..env
    };
    one(&pod.run(), "devices", "infiniband", Severity::Fail);
}

#[test]
fn netns_mode_is_read_from_ib_core_and_checked_against_the_confs() {
    let mut env = Env::healthy();
    env.conf(macvlan("roce", "ens1f0np0"));
    let f = one(&env.run(), "netns-mode", "", Severity::Ok);
    assert!(
        f.finding.contains("shared") && f.finding.contains("roce"),
        "{f:?}"
    );
    env.fx
        .write_attr("module/ib_core/parameters/netns_mode", "N")
        .unwrap();
    let f = one(&env.run(), "netns-mode", "", Severity::Fail);
    assert!(f.finding.contains("exclusive") && f.finding.contains("code 120"));
    assert!(f
        .fix
        .as_deref()
        .unwrap()
        .contains("rdma system set netns shared"));
    // A chained network needs exclusive: with the macvlan one, no single mode serves both.
    env.conf(json!({"cniVersion":"1.0.0","name":"vf","plugins":[
        {"type":"sriov"},{"type":"rdma-ns","mode":"rdma"}]}));
    let f = one(&env.run(), "netns-mode", "", Severity::Fail);
    assert!(f.finding.contains("both"), "{f:?}");
    assert!(f.fix.as_deref().unwrap().contains("rdma-netns-mode"));
}

#[test]
fn netns_mode_falls_back_to_rdma_netlink_and_fails_without_either() {
    let mut env = Env::healthy();
    env.fx.remove("module/ib_core/parameters").unwrap();
    let f = one(&env.run(), "netns-mode", "", Severity::Fail);
    assert!(f.finding.contains("no RDMA netlink in tests"));
    env.net.mode = Ok(NetnsMode::Exclusive);
    let f = one(&env.run(), "netns-mode", "", Severity::Ok);
    assert_eq!(f.finding, "exclusive");
}

#[test]
fn every_active_port_is_ok_and_names_layer_and_rate() {
    let r = Env::healthy().run();
    for (obj, text) in [
        (
            "mlx5_0/1",
            "Ethernet, 100 Gb/sec (4X EDR), netdev ens1f0np0",
        ),
        ("mlx5_2/1", "netdev ens1f0v0"),
        ("mlx5_3/1", "25 Gb/sec"),
        ("ibp94s0/1", "InfiniBand"),
        ("rxe0/1", "netdev v0"),
    ] {
        let f = one(&r, "port", obj, Severity::Ok);
        assert!(f.finding.contains(text), "{f:?}");
    }
}

#[test]
fn a_down_rxe_port_fails_with_ip_link_set_up() {
    let env = Env::healthy();
    // What `ip link set v0 down` does to rxe: the port follows its netdev.
    let port = "devices/virtual/infiniband/rxe0/ports/1";
    env.fx
        .write_attr(format!("{port}/state"), "1: DOWN")
        .unwrap();
    env.fx
        .write_attr(format!("{port}/phys_state"), "3: Disabled")
        .unwrap();
    env.fx.write_attr("class/net/v0/operstate", "down").unwrap();
    let r = env.run();
    let f = one(&r, "port", "rxe0/1", Severity::Fail);
    assert!(f.finding.contains("1: DOWN") && f.finding.contains("expected 4: ACTIVE"));
    assert_eq!(
        f.fix.as_deref().unwrap().split(';').next(),
        Some("ip link set v0 up")
    );
    assert_eq!(r.facts.active_ports, 4);
}

#[test]
fn an_ib_port_in_init_points_at_the_subnet_manager() {
    let env = Env::healthy();
    let port = "devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0/infiniband/ibp94s0/ports/1";
    env.fx
        .write_attr(format!("{port}/state"), "2: INIT")
        .unwrap();
    let f = one(&env.run(), "port", "ibp94s0/1", Severity::Fail);
    assert!(f.fix.as_deref().unwrap().contains("opensm"), "{f:?}");
}

/// Registers the root port above the PF `0000:3b:00.0` with its own link capability.
fn root_port(env: &Env, max: (&str, u32)) {
    env.fx
        .add_pci_function(&PciSpec {
            bdf: "0000:3a:00.0",
            upstream: "pci0000:3a",
            numa_node: 0,
            current_link: ("8.0 GT/s PCIe", 8),
            max_link: max,
            driver: Some("pcieport"),
        })
        .unwrap();
}

#[test]
fn a_gen4_card_in_a_gen3_slot_warns_naming_the_slot() {
    let env = Env::healthy();
    root_port(&env, ("8.0 GT/s PCIe", 8));
    let r = env.run();
    // The VF's ib device rides on its PF's link: one finding for both.
    let f = one(&r, "pcie", "0000:3b:00.0 (mlx5_0, mlx5_2)", Severity::Warn);
    assert!(
        f.finding.contains("link at 8.0 GT/s x8")
            && f.finding.contains("card can do 16.0 GT/s x16")
            && f.finding.contains("upstream port 0000:3a:00.0")
            && f.finding.contains("less than the port's 100 Gb/s"),
        "{f:?}"
    );
    assert!(f.fix.as_deref().unwrap().contains("move the card"));
    assert!(find(&r, "pcie", "0000:3b:00.2").is_empty());
}

#[test]
fn a_link_below_both_ends_says_reseat() {
    let env = Env::healthy();
    root_port(&env, ("16.0 GT/s PCIe", 16));
    let f = one(&env.run(), "pcie", "0000:3b:00.0", Severity::Warn);
    assert!(f.finding.contains("below what the card"), "{f:?}");
    assert!(f.fix.as_deref().unwrap().contains("reseat"));
}

#[test]
fn full_speed_links_are_ok_and_the_sf_uses_its_pf() {
    let r = Env::healthy().run();
    let f = one(&r, "pcie", "0000:06:00.0 (mlx5_3)", Severity::Ok);
    assert!(f.finding.contains("8.0 GT/s x16"), "{f:?}");
    one(&r, "pcie", "0000:5e:00.0 (ibp94s0)", Severity::Ok);
}

#[test]
fn peer_plugins_are_named_with_what_replaces_them() {
    let mut env = Env::healthy();
    // ipoib-cni's README conf: replaced by mode ipoib, with the command that converts it.
    env.conf(
        json!({"cniVersion":"0.3.1","name":"ib","type":"ipoib","master":"ib0",
        "ipam":{"type":"host-local","subnet":"192.168.5.0/24"}}),
    );
    env.conf(json!({"cniVersion":"1.0.0","name":"vf","plugins":[
        {"type":"sriov"},{"type":"rdma-ns","mode":"rdma"}]}));
    env.conf(json!({"cniVersion":"1.0.0","name":"bare-vf","plugins":[{"type":"sriov"}]}));
    env.conf(json!({"cniVersion":"1.0.0","name":"old","plugins":[
        {"type":"sriov"},{"type":"rdma"}]}));
    let r = env.run();
    let ib = one(&r, "peer", "network ib", Severity::Warn);
    assert!(
        ib.finding.contains("ipoib-cni") && ib.finding.contains("mode `ipoib`"),
        "{ib:?}"
    );
    assert_eq!(
        ib.fix
            .as_deref()
            .unwrap()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>(),
        ["rdma-ns", "migrate", "/etc/cni/net.d/test.conflist"]
    );
    let vf = one(&r, "peer", "network vf ", Severity::Ok);
    assert!(vf.finding.contains("rdma-ns follows it"), "{vf:?}");
    let bare = one(&r, "peer", "network bare-vf", Severity::Ok);
    assert!(bare.finding.contains("exclusive netns mode"), "{bare:?}");
    // rdma-cni after sriov-cni: sriov-cni stays, rdma-cni is replaced by mode rdma.
    let old = find(&r, "peer", "network old");
    assert_eq!(old.len(), 2, "{old:#?}");
    assert!(old
        .iter()
        .any(|f| f.severity == Severity::Warn && f.finding.contains("mode `rdma`")));
}

#[test]
fn a_node_with_only_rdma_ns_confs_has_no_peer_finding() {
    let mut env = Env::healthy();
    env.conf(macvlan("roce", "ens1f0np0"));
    assert!(find(&env.run(), "peer", "").is_empty());
}

#[test]
fn conf_parents_must_exist_have_the_right_type_and_an_ib_device() {
    let mut env = Env::healthy();
    env.conf(macvlan("good", "ens1f0np0"));
    env.conf(macvlan("gone", "ens9"));
    env.conf(macvlan("ipoib-parent", "ibp94s0"));
    env.conf(macvlan("no-rdma", "v1"));
    env.conf(
        json!({"cniVersion":"1.0.0","name":"ib","type":"rdma-ns","mode":"ipoib",
        "master":"ens1f0np0"}),
    );
    env.conf(
        json!({"cniVersion":"1.0.0","name":"byib","type":"rdma-ns","mode":"move",
        "rdmaDevice":"mlx5_9"}),
    );
    env.conf(json!({"cniVersion":"1.0.0","name":"vf","type":"rdma-ns","mode":"move"}));
    env.conf(
        json!({"cniVersion":"1.0.0","name":"bad","type":"rdma-ns","mode":"macvlan",
        "master":"ens1f0np0","macvlanMode":"nope"}),
    );
    let r = env.run();
    let f = one(&r, "conf", "network good", Severity::Ok);
    assert!(f.finding.contains("mlx5_0 port 1"), "{f:?}");
    let f = one(&r, "conf", "network gone", Severity::Fail);
    assert!(f.finding.contains("master ens9: no such netdev"));
    let f = one(&r, "conf", "network ipoib-parent", Severity::Fail);
    assert!(f.finding.contains("InfiniBand (IPoIB)") && f.finding.contains("code 110"));
    assert!(f.fix.as_deref().unwrap().contains("mode ipoib"));
    let f = one(&r, "conf", "network no-rdma", Severity::Fail);
    assert!(f.finding.contains("no ib device"));
    let f = one(&r, "conf", "network ib", Severity::Fail);
    assert!(f.finding.contains("needs InfiniBand"), "{f:?}");
    let f = one(&r, "conf", "network byib", Severity::Fail);
    assert!(f.finding.contains("rdmaDevice mlx5_9") && f.finding.contains("mlx5_0"));
    one(&r, "conf", "network vf", Severity::Ok);
    let f = one(&r, "conf", "network bad", Severity::Fail);
    assert!(f.finding.contains("macvlanMode"), "{f:?}");
}

#[test]
fn a_conf_naming_an_altname_is_resolved() {
    let mut env = Env::healthy();
    env.net
        .altnames
        .insert("enp59s0f0np0".into(), "ens1f0np0".into());
    env.conf(macvlan("alt", "enp59s0f0np0"));
    let f = one(&env.run(), "conf", "network alt", Severity::Ok);
    assert!(f.finding.contains("master ens1f0np0"), "{f:?}");
}

#[test]
fn enhanced_ipoib_is_ok_alone_and_fails_a_conf_asking_connected_mode() {
    let mut env = Env::healthy();
    let f = one(&env.run(), "ipoib", "ibp94s0", Severity::Ok);
    assert!(f.finding.contains("Enhanced IPoIB") && f.finding.contains("MTU 4092"));
    assert!(!env.run().facts.ipoib_connected);
    env.conf(
        json!({"cniVersion":"1.0.0","name":"p1","type":"rdma-ns","mode":"ipoib",
        "master":"ibp94s0","ipoibMode":"connected"}),
    );
    let r = env.run();
    let f = one(&r, "ipoib", "network p1", Severity::Fail);
    assert!(f.finding.contains("connected mode") && f.finding.contains("code 110"));
    assert!(f.fix.as_deref().unwrap().contains("at most 4092"));
    // The same parent's conf check passes: the parent is right, the mode is not.
    one(&r, "conf", "network p1", Severity::Ok);
}

#[test]
fn a_connected_capable_parent_in_connected_mode_wants_65520() {
    let env = Env::healthy();
    let dir = "class/net/ibp94s0";
    env.fx
        .write_attr(
            format!("{dir}/address"),
            "80:00:10:29:fe:80:00:00:00:00:00:00:04:3f:72:03:00:da:21:30",
        )
        .unwrap();
    env.fx
        .write_attr(format!("{dir}/mode"), "connected")
        .unwrap();
    env.fx.write_attr(format!("{dir}/mtu"), "2044").unwrap();
    let r = env.run();
    assert!(r.facts.ipoib_connected);
    let f = one(&r, "ipoib", "ibp94s0", Severity::Warn);
    assert_eq!(f.fix.as_deref(), Some("ip link set ibp94s0 mtu 65520"));
    env.fx.write_attr(format!("{dir}/mtu"), "65520").unwrap();
    one(&env.run(), "ipoib", "ibp94s0", Severity::Ok);
}

#[test]
fn roce_netdev_mtu_below_4192_warns_with_the_active_mtu() {
    let env = Env::healthy();
    one(&env.run(), "roce-mtu", "ens1f0np0", Severity::Ok);
    env.fx
        .write_attr("class/net/ens1f0np0/mtu", "1500")
        .unwrap();
    let f = one(&env.run(), "roce-mtu", "ens1f0np0", Severity::Warn);
    assert!(f.finding.contains("active MTU of 1024"), "{f:?}");
    assert!(f
        .fix
        .as_deref()
        .unwrap()
        .starts_with("ip link set ens1f0np0 mtu 9000"));
    assert_eq!(roce_active_mtu(4192), Some(4096));
    assert_eq!(roce_active_mtu(4191), Some(2048));
    assert_eq!(roce_active_mtu(1500), Some(1024));
    assert_eq!(roce_active_mtu(96), None);
}

#[test]
fn every_address_needs_a_roce_v2_gid() {
    let mut env = Env::healthy();
    let r = env.run();
    let f = one(&r, "roce-gid", "ens1f0np0 (mlx5_0/1)", Severity::Ok);
    assert!(f.finding.contains("10.59.0.5 at 3") && f.finding.contains("2001:db8::5 at 5"));
    one(&r, "roce-gid", "ens1f0np0.100 (mlx5_0/1)", Severity::Ok);
    one(&r, "roce-gid", "v0 (rxe0/1)", Severity::Ok);
    env.net
        .addrs
        .get_mut("v0")
        .unwrap()
        .push("10.9.0.6".parse().unwrap());
    let r = env.run();
    let found = find(&r, "roce-gid", "v0 (rxe0/1)");
    let fail = found
        .iter()
        .find(|f| f.severity == Severity::Fail)
        .unwrap_or_else(|| panic!("{found:#?}"));
    assert!(fail
        .finding
        .contains("10.9.0.6 has no RoCE v2 GID on rxe0/1"));
    assert!(fail.fix.as_deref().unwrap().contains("dev v0"));
}

#[test]
fn a_roce_v1_only_gid_fails() {
    let env = Env::healthy();
    // Index 3 is 10.59.0.5's v2 entry; leave only the v1 one at 2.
    let attrs = "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0/ports/1";
    env.fx.remove(format!("{attrs}/gid_attrs/types/3")).unwrap();
    env.fx
        .write_attr(
            format!("{attrs}/gids/3"),
            "0000:0000:0000:0000:0000:0000:0000:0000",
        )
        .unwrap();
    let r = env.run();
    let found = find(&r, "roce-gid", "ens1f0np0 (mlx5_0/1)");
    assert!(
        found.iter().any(|f| f.severity == Severity::Fail
            && f.finding.contains("only a IB/RoCE v1 GID (index 2)")),
        "{found:#?}"
    );
}

fn record(env: &Env, network: &str, cid: &str, netns: &str, perm: Option<serde_json::Value>) {
    let mut v = json!({"network":network,"containerId":cid,"ifname":"net1","mode":"macvlan",
        "phase":"ready","netns":netns,"deviceKey":format!("child-{network}-{cid}-net1"),
        "host":{"name":"ens1f0np0","ifindex":4,"mtu":9000,"hwaddr":"0c:42:a1:3b:00:00",
                "wasUp":true,"addresses":[]},
        "child":{"kind":"macvlan","hwaddr":"02:5e:00:00:00:07","summary":"macvlan bridge"},
        "pod":{"namespace":"ml","name":format!("trainer-{cid}")},
        "gids":[{"ip":"10.59.0.9","ibdev":"mlx5_0","port":1,"index":7,"gidType":"RoCE v2"}]});
    if let Some(p) = perm {
        v["permChanges"] = p;
    }
    let att: Attachment = serde_json::from_value(v).unwrap();
    Store::new(env.data_dir()).save(&att).unwrap();
}

#[test]
fn records_with_a_gone_netns_warn_and_unreadable_ones_fail() {
    let env = Env::healthy();
    let f = one(&env.run(), "data-dir", "", Severity::Ok);
    assert!(f.finding.contains("absent"));
    let alive = env.tmp.path().join("netns-alive");
    std::fs::write(&alive, "").unwrap();
    record(&env, "roce", "c1", &alive.to_string_lossy(), None);
    let f = one(&env.run(), "data-dir", "", Severity::Ok);
    assert!(f.finding.contains("1 attachment records"), "{f:?}");
    record(&env, "roce", "c2", "/run/netns/cni-gone-for-good", None);
    let f = one(&env.run(), "data-dir", "roce/c2:net1", Severity::Warn);
    assert!(
        f.finding.contains("pod ml/trainer-c2") && f.finding.contains("is gone"),
        "{f:?}"
    );
    std::fs::write(env.data_dir().join("roce/c3:net1.json"), "{not json\n").unwrap();
    let r = env.run();
    let fails = find(&r, "data-dir", "data");
    assert!(
        fails
            .iter()
            .any(|f| f.severity == Severity::Fail && f.finding.contains("c3:net1.json")),
        "{fails:#?}"
    );
}

#[test]
fn char_devices_present_missing_or_wrong_are_told_apart() {
    let mut env = Env::healthy();
    env.conf(
        json!({"cniVersion":"1.0.0","name":"roce","type":"rdma-ns","mode":"macvlan",
        "master":"ens1f0np0","devicePermissions":{"uverbs":"0666"}}),
    );
    let r = env.run();
    let f = one(&r, "char-dev", "/uverbs0", Severity::Ok);
    assert!(f.finding.contains("char 231:192") && f.finding.contains("0666 by roce"));
    one(&r, "char-dev", "/rdma_cm", Severity::Ok);
    std::fs::remove_file(env.dev_dir().join("uverbs0")).unwrap();
    env.mknod("uverbs1", 231, 200, 0o666);
    std::fs::remove_file(env.dev_dir().join("umad0")).unwrap();
    std::os::unix::fs::symlink("/dev/null", env.dev_dir().join("umad0")).unwrap();
    let r = env.run();
    let f = one(&r, "char-dev", "/uverbs0", Severity::Fail);
    assert!(
        f.finding.contains("missing") && f.fix.as_deref().unwrap().contains("modprobe ib_uverbs")
    );
    let f = one(&r, "char-dev", "/uverbs1", Severity::Fail);
    assert!(
        f.finding.contains("231:193") && f.finding.contains("231:200"),
        "{f:?}"
    );
    let f = one(&r, "char-dev", "/umad0", Severity::Fail);
    assert!(f.finding.contains("a symlink"), "{f:?}");
}

#[test]
fn uverbs_closed_to_others_warns_unless_device_permissions_open_it() {
    let mut env = Env::healthy();
    env.mknod("uverbs0", 231, 192, 0o600);
    let f = one(&env.run(), "char-dev", "/uverbs0", Severity::Warn);
    assert!(f.finding.starts_with("0600"), "{f:?}");
    assert!(f.fix.as_deref().unwrap().contains("devicePermissions"));
    // umad is for admins: 0600 is right.
    env.mknod("umad0", 231, 0, 0o600);
    one(&env.run(), "char-dev", "/umad0", Severity::Ok);
    env.conf(
        json!({"cniVersion":"1.0.0","name":"roce","type":"rdma-ns","mode":"macvlan",
        "master":"ens1f0np0","devicePermissions":{"uverbs":"0666"}}),
    );
    one(&env.run(), "char-dev", "/uverbs0", Severity::Ok);
}

#[test]
fn a_node_reset_after_an_attachment_changed_it_warns() {
    let env = Env::healthy();
    let alive = env.tmp.path().join("netns-alive");
    std::fs::write(&alive, "").unwrap();
    let path = env.dev_dir().join("uverbs0");
    let change = json!([{"path":path,"rdev":[231,192],"oldMode":0o600,"oldGid":0,
        "newMode":0o666,"newGid":0}]);
    record(&env, "roce", "c1", &alive.to_string_lossy(), Some(change));
    one(&env.run(), "char-dev", "/uverbs0", Severity::Ok);
    env.mknod("uverbs0", 231, 192, 0o600);
    let f = one(&env.run(), "char-dev", "/uverbs0", Severity::Warn);
    assert!(f.finding.contains("attachment roce/c1 set 0666"), "{f:?}");
}

#[test]
fn memlock_of_the_runtime_pods_inherit() {
    let env = Env::healthy();
    let f = one(&env.run(), "memlock", "containerd (pid 4242)", Severity::Ok);
    assert_eq!(f.finding, "RLIMIT_MEMLOCK unlimited");
    env.runtime("containerd", "8388608");
    let f = one(&env.run(), "memlock", "containerd", Severity::Warn);
    assert!(f.finding.contains("8 MiB") && f.finding.contains("pods inherit"));
    assert!(f.fix.as_deref().unwrap().contains("LimitMEMLOCK=infinity"));
    env.runtime("crio", "65536");
    let f = one(&env.run(), "memlock", "crio", Severity::Warn);
    assert!(f.fix.as_deref().unwrap().contains("default_ulimits"));
    assert_eq!(
        memlock_soft("Max locked memory  unlimited unlimited bytes"),
        Some(None)
    );
    assert_eq!(memlock_soft("nothing"), None);
}

#[test]
fn pod_mode_leaves_node_wide_checks_out() {
    let mut env = Env::healthy();
    env.conf(macvlan("gone", "ens9"));
    env.opts.pod = true;
    let r = env.run();
    assert!(find(&r, "conf", "").is_empty());
    assert!(find(&r, "data-dir", "").is_empty());
    // The pod's own limit, whatever this test process has.
    assert_eq!(
        find(&r, "memlock", "this pod").len(),
        1,
        "{:#?}",
        r.findings
    );
    // The fixture's uverbs nodes open only where an ib_uverbs driver answers major 231 (not on
    // a host without RDMA: ENXIO); either way the finding says so.
    for f in find(&r, "char-dev", "/uverbs") {
        assert!(
            f.severity == Severity::Ok || f.finding.contains("cannot open"),
            "{f:?}"
        );
    }
}

mod qos;
