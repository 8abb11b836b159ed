//! Root integration tests of move mode: the built binary exec'd as a runtime does, real network
//! namespaces, veth ends standing in for NICs, Debian's IPAM plugins (host-local, static) and a
//! 1.1.0 test IPAM. Also run on the VM tier's 6.1 kernel.

mod common;

use common::*;
use serde_json::{json, Value};

fn host_local(dir: &DataDir, subnet: &str) -> Value {
    json!({"type": "host-local", "ranges": [[{"subnet": subnet}]],
           "dataDir": format!("{}/host-local", dir.str())})
}

fn test_ipam(dir: &DataDir, address: &str) -> Value {
    json!({"type": "cni-test-ipam", "addresses": [{"address": address}],
           "logFile": format!("{}/ipam.log", dir.str())})
}

fn ipam_log(dir: &DataDir) -> Vec<String> {
    std::fs::read_to_string(dir.path().join("ipam.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn add_check_del_in_every_cni_version() {
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let (ns, veth, data) = veth_pod();
        let mut conf = move_conf(version, "rnet", &veth.nic, &data);
        conf["mtu"] = json!(9000);
        conf["ipam"] = if version == "1.1.0" {
            test_ipam(&data, "10.77.1.2/24")
        } else {
            host_local(&data, "10.77.0.0/24")
        };
        let add = Call::new("ADD", "ctr1", &ns.path(), "net1").run(&conf);
        add.ok();
        let result = add.json();
        assert_eq!(result["cniVersion"], version, "{result}");
        let iface = &result["interfaces"][0];
        assert_eq!(iface["name"], "net1");
        assert_eq!(iface["sandbox"], ns.path());
        assert_eq!(iface["mac"], veth.mac_in(&ns), "{result}");
        let ip = &result["ips"][0];
        assert_eq!(ip["interface"], 0);
        match version {
            "0.3.0" | "0.3.1" | "0.4.0" => {
                assert_eq!(ip["version"], "4", "{result}");
                assert!(iface.get("mtu").is_none(), "{result}");
            }
            "1.0.0" => {
                assert!(ip.get("version").is_none(), "{result}");
                assert!(iface.get("mtu").is_none(), "{result}");
            }
            _ => assert_eq!(iface["mtu"], 9000, "{result}"),
        }
        let pod_link = ns.link("net1").expect("net1 in the pod");
        assert_eq!(pod_link["mtu"], 9000);
        assert!(host_link(&veth.nic).is_none(), "moved out of the host");
        let addr = ip["address"].as_str().unwrap().to_string();
        assert_eq!(ns.addrs("net1"), vec![addr.clone()], "{version}");

        let mut with_prev = conf.clone();
        with_prev["prevResult"] = result.clone();
        if version != "0.3.0" && version != "0.3.1" {
            Call::new("CHECK", "ctr1", &ns.path(), "net1")
                .run(&with_prev)
                .ok();
        }
        Call::new("DEL", "ctr1", &ns.path(), "net1")
            .run(&with_prev)
            .ok();
        assert_back_in_host(&veth.nic, 1500);
        assert!(ns.link("net1").is_none());
        assert!(data.records().is_empty(), "{version}: {:?}", data.records());
    }
}

impl Veth {
    fn mac_in(&self, ns: &TestNetns) -> String {
        ns.link("net1").unwrap()["address"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

#[test]
fn without_ipam_the_device_moves_and_gets_no_address() {
    let (ns, veth, data) = veth_pod();
    let conf = move_conf("1.0.0", "rnet", &veth.nic, &data);
    let add = Call::new("ADD", "ctr2", &ns.path(), "eth0").run(&conf);
    add.ok();
    let result = add.json();
    assert!(result.get("ips").is_none() || result["ips"].as_array().unwrap().is_empty());
    assert!(ns.addrs("eth0").is_empty());
    let link = ns.link("eth0").unwrap();
    assert!(
        link["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
        "{link}"
    );
    Call::new("DEL", "ctr2", "", "eth0").run(&conf).ok();
    assert_back_in_host(&veth.nic, 1500);
}

#[test]
fn static_ipam_addresses_gateway_and_routes_are_applied() {
    let (ns, veth, data) = veth_pod();
    let mut conf = move_conf("1.0.0", "rnet", &veth.nic, &data);
    conf["ipam"] = json!({"type": "static",
        "addresses": [{"address": "10.78.0.2/24", "gateway": "10.78.0.1"},
                      {"address": "fd00:78::2/64"}],
        "routes": [{"dst": "10.200.0.0/16", "gw": "10.78.0.1"}, {"dst": "10.201.0.0/16"}]});
    Call::new("ADD", "ctr3", &ns.path(), "net1").run(&conf).ok();
    let mut addrs = ns.addrs("net1");
    addrs.sort();
    assert_eq!(addrs, vec!["10.78.0.2/24", "fd00:78::2/64"]);
    let routes = sh(&["ip", "-n", &ns.name, "route", "show"]);
    assert!(
        routes.contains("10.200.0.0/16 via 10.78.0.1 dev net1"),
        "{routes}"
    );
    assert!(routes.contains("10.201.0.0/16 dev net1"), "{routes}");
    Call::new("DEL", "ctr3", &ns.path(), "net1").run(&conf).ok();
    assert_back_in_host(&veth.nic, 1500);
}

#[test]
fn selection_by_hwaddr_pci_aux_and_kernelpath() {
    let sys = FixtureSys::new();
    let data = DataDir::new();
    let (a, b, c, d) = (Veth::new(), Veth::new(), Veth::new(), Veth::new());
    sys.add_pci("0000:3b:00.2", &[&b.nic]);
    sys.add_aux("mlx5_core.sf.4", &c.nic);
    let kpath = sys.add_pci("0000:3b:00.3", &[&d.nic]);
    let base =
        json!({"cniVersion": "1.1.0", "name": "sel", "type": "rdma-ns", "dataDir": data.state()});
    let cases: Vec<(&Veth, Value)> = vec![
        (&a, json!({"hwaddr": a.mac().to_uppercase()})),
        (&b, json!({"pciBusID": "0000:3b:00.2"})),
        (&b, json!({"deviceID": "3b:00.2"})),
        (
            &b,
            json!({"runtimeConfig": {"deviceID": "0000:3b:00.2"}, "device": "ignored-static"}),
        ),
        (&c, json!({"deviceID": "mlx5_core.sf.4"})),
        (&d, json!({"kernelpath": kpath})),
    ];
    for (veth, sel) in cases {
        let ns = TestNetns::new();
        let before = host_view(&veth.nic);
        let mut conf = base.clone();
        for (k, v) in sel.as_object().unwrap() {
            conf[k] = v.clone();
        }
        let (k, v) = sys.env();
        let out = Call::new("ADD", "sel1", &ns.path(), "net1")
            .env(&k, &v)
            .run(&conf);
        out.ok();
        assert!(host_link(&veth.nic).is_none(), "{sel}: {} moved", veth.nic);
        let result = out.json();
        if sel.get("pciBusID").is_some() {
            assert_eq!(
                result["interfaces"][0]["pciID"], "0000:3b:00.2",
                "the selected function: {result}"
            );
        }
        if sel.get("hwaddr").is_some() {
            assert_eq!(
                result["interfaces"][0].get("pciID"),
                None,
                "a veth has no PCI parent: {result}"
            );
        }
        Call::new("DEL", "sel1", &ns.path(), "net1")
            .env(&k, &v)
            .run(&conf)
            .ok();
        back_in_host(&veth.nic, &before).unwrap_or_else(|e| panic!("{sel}: {e}"));
    }
}

#[test]
fn zero_or_several_matches_name_the_selector_and_candidates() {
    let sys = FixtureSys::new();
    let data = DataDir::new();
    let (a, b) = (Veth::new(), Veth::new());
    sys.add_pci("0000:5e:00.0", &[&a.nic, &b.nic]);
    let ns = TestNetns::new();
    let (k, v) = sys.env();
    let conf = json!({"cniVersion": "1.0.0", "name": "sel", "type": "rdma-ns", "dataDir": data.state(),
                      "pciBusID": "0000:5e:00.0"});
    let msg = Call::new("ADD", "amb", &ns.path(), "net1")
        .env(&k, &v)
        .run(&conf)
        .err(101);
    assert!(
        msg.contains(&a.nic) && msg.contains(&b.nic) && msg.contains("pciBusID=0000:5e:00.0"),
        "{msg}"
    );
    let conf = move_conf("1.0.0", "sel", "rn-nonexistent", &data);
    let msg = Call::new("ADD", "amb", &ns.path(), "net1")
        .run(&conf)
        .err(100);
    assert!(msg.contains("device=rn-nonexistent"), "{msg}");
    let mut conf =
        json!({"cniVersion": "1.0.0", "name": "sel", "type": "rdma-ns", "dataDir": data.state()});
    conf["pciBusID"] = json!("0000:99:00.0");
    let msg = Call::new("ADD", "amb", &ns.path(), "net1")
        .env(&k, &v)
        .run(&conf)
        .err(100);
    assert!(msg.contains("0000:99:00.0"), "{msg}");
    assert!(host_link(&a.nic).is_some() && host_link(&b.nic).is_some());
}

#[test]
fn an_ifname_taken_in_the_pod_moves_nothing() {
    let (ns, veth, data) = veth_pod();
    sh(&[
        "ip", "-n", &ns.name, "link", "add", "net1", "type", "veth", "peer", "name", "other",
    ]);
    let mut conf = move_conf("1.0.0", "rnet", &veth.nic, &data);
    conf["ipam"] = test_ipam(&data, "10.79.0.2/24");
    let msg = Call::new("ADD", "taken", &ns.path(), "net1")
        .run(&conf)
        .err(103);
    assert!(msg.contains("net1"), "{msg}");
    assert!(host_link(&veth.nic).is_some());
    assert!(
        ipam_log(&data).is_empty(),
        "IPAM not even asked: {:?}",
        ipam_log(&data)
    );
    assert!(data.records().is_empty());
}

#[test]
fn a_host_device_named_like_the_pod_interface_is_never_mistaken_for_it() {
    let (ns, veth, data) = veth_pod();
    let clash = unique("rnc");
    sh(&[
        "ip",
        "link",
        "add",
        &clash,
        "type",
        "veth",
        "peer",
        "name",
        &format!("{clash}p"),
    ]);
    let clash_mac = host_link(&clash).unwrap()["address"].clone();
    let mut conf = move_conf("1.1.0", "rnet", &veth.nic, &data);
    conf["ipam"] = test_ipam(&data, "10.80.0.2/24");
    let add = Call::new("ADD", "same", &ns.path(), &clash).run(&conf);
    add.ok();
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = add.json();
    Call::new("CHECK", "same", &ns.path(), &clash)
        .run(&with_prev)
        .ok();
    sh(&["ip", "-n", &ns.name, "addr", "flush", "dev", &clash]);
    let msg = Call::new("CHECK", "same", &ns.path(), &clash)
        .run(&with_prev)
        .err(108);
    assert!(msg.contains("10.80.0.2/24"), "{msg}");
    Call::new("DEL", "same", &ns.path(), &clash)
        .run(&with_prev)
        .ok();
    assert_eq!(
        host_link(&clash).unwrap()["address"],
        clash_mac,
        "host device untouched"
    );
    assert_back_in_host(&veth.nic, 1500);
    sh(&["ip", "link", "del", &clash]);
}

#[test]
fn del_after_the_pod_netns_was_deleted_and_repeated_dels_succeed() {
    let (ns, veth, data) = veth_pod();
    let mut conf = move_conf("1.1.0", "rnet", &veth.nic, &data);
    conf["ipam"] = test_ipam(&data, "10.81.0.2/24");
    Call::new("ADD", "gone", &ns.path(), "eth0").run(&conf).ok();
    let path = ns.path();
    ns.delete();
    // A veth is destroyed with its netns (virtual devices are not refunded to the host).
    for netns in [path.as_str(), "", ""] {
        Call::new("DEL", "gone", netns, "eth0").run(&conf).ok();
    }
    assert!(data.records().is_empty());
    assert_eq!(
        ipam_log(&data),
        vec!["ADD", "DEL", "DEL", "DEL"],
        "IPAM DEL always runs"
    );
}

#[test]
fn del_three_times_without_prev_result() {
    let (ns, veth, data) = veth_pod();
    let mut conf = move_conf("1.0.0", "rnet", &veth.nic, &data);
    conf["ipam"] = host_local(&data, "10.82.0.0/24");
    let device_lock = data
        .path()
        .join(format!("state/locks/mac-{}.lock", veth.mac()));
    Call::new("ADD", "thrice", &ns.path(), "net1")
        .run(&conf)
        .ok();
    assert!(device_lock.exists(), "the moved device's lock file");
    for _ in 0..3 {
        Call::new("DEL", "thrice", &ns.path(), "net1")
            .run(&conf)
            .ok();
    }
    assert_back_in_host(&veth.nic, 1500);
    assert!(!device_lock.exists(), "DEL removed the device's lock file");
    let leases: Vec<_> = std::fs::read_dir(data.path().join("host-local/rnet"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("10."))
        .collect();
    assert!(
        leases.is_empty(),
        "host-local released the address: {leases:?}"
    );
}

#[test]
fn a_failed_add_at_each_step_leaves_the_host_exactly_as_before() {
    let veth = Veth::new();
    sh(&["ip", "link", "set", &veth.nic, "mtu", "1400", "up"]);
    sh(&["ip", "addr", "add", "192.0.2.10/24", "dev", &veth.nic]);
    let before = host_view(&veth.nic);
    assert!(
        before.up && before.addrs == vec!["192.0.2.10/24"],
        "{before:?}"
    );
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
        let ns = TestNetns::new();
        let data = DataDir::new();
        let mut conf = move_conf("1.1.0", "rnet", &veth.nic, &data);
        conf["mtu"] = json!(9000);
        conf["ipam"] = test_ipam(&data, "10.83.0.2/24");
        conf["ipam"]["routes"] = json!([{"dst": "10.210.0.0/16"}]);
        let out = Call::new("ADD", "fail", &ns.path(), "net1")
            .env("RDMA_NS_TEST_FAIL_AFTER", step)
            .run(&conf);
        let msg = out.err(106);
        assert!(msg.contains(step), "{msg}");
        assert_eq!(host_view(&veth.nic), before, "after failing at {step}");
        assert!(ns.link("net1").is_none(), "{step}: nothing left in the pod");
        assert!(data.records().is_empty(), "{step}: no record left");
        let locks: Vec<_> = std::fs::read_dir(data.path().join("state/locks"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(locks.is_empty(), "{step}: lock files left: {locks:?}");
        // IPAM ADD runs beside the intent record and the move: released after any step.
        assert_eq!(ipam_log(&data), vec!["ADD", "DEL"], "{step}");
    }
}

#[test]
fn a_kernel_refusal_mid_add_rolls_back_with_code_105() {
    let (ns, veth, data) = veth_pod();
    let before = host_view(&veth.nic);
    let mut conf = move_conf("1.0.0", "rnet", &veth.nic, &data);
    conf["ipam"] = json!({"type": "static", "addresses": [{"address": "10.84.0.2/24"}],
                          "routes": [{"dst": "10.220.0.0/16", "gw": "10.99.99.1"}]});
    let msg = Call::new("ADD", "refuse", &ns.path(), "net1")
        .run(&conf)
        .err(105);
    assert!(
        msg.contains("10.220.0.0/16") && msg.contains("unreachable"),
        "{msg}"
    );
    assert_eq!(host_view(&veth.nic), before);
    assert!(data.records().is_empty());
}

#[test]
fn thirty_two_parallel_adds_and_dels_on_distinct_devices() {
    let data = DataDir::new();
    let pods: Vec<(TestNetns, Veth)> = (0..32).map(|_| (TestNetns::new(), Veth::new())).collect();
    let run_all = |command: &'static str| {
        std::thread::scope(|s| {
            let handles: Vec<_> = pods
                .iter()
                .enumerate()
                .map(|(i, (ns, veth))| {
                    let data = &data;
                    s.spawn(move || {
                        let mut conf = move_conf("1.0.0", "par", &veth.nic, data);
                        conf["ipam"] = json!({"type": "static",
                            "addresses": [{"address": format!("10.85.{i}.2/24")}]});
                        Call::new(command, &format!("par{i}"), &ns.path(), "net1").run(&conf)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    for out in run_all("ADD") {
        out.ok();
    }
    for (ns, veth) in &pods {
        assert!(ns.link("net1").is_some() && host_link(&veth.nic).is_none());
    }
    for out in run_all("DEL") {
        out.ok();
    }
    for (ns, veth) in &pods {
        assert!(ns.link("net1").is_none());
        assert_back_in_host(&veth.nic, 1500);
    }
    assert!(data.records().is_empty());
}

#[test]
fn a_lingering_altname_does_not_block_the_rename_back() {
    let (ns, veth, data) = veth_pod();
    let conf = move_conf("1.0.0", "rnet", &veth.nic, &data);
    Call::new("ADD", "alt", &ns.path(), "net1").run(&conf).ok();
    // What some udev setups leave behind (sriov-cni #445): the old name as an altname.
    sh(&[
        "ip", "-n", &ns.name, "link", "property", "add", "dev", "net1", "altname", &veth.nic,
    ]);
    Call::new("DEL", "alt", &ns.path(), "net1").run(&conf).ok();
    let link = host_link(&veth.nic).expect("back under its name");
    assert_eq!(link["ifname"], veth.nic.as_str());
    assert!(link.get("altnames").is_none(), "{link}");
}

#[test]
fn every_error_code_is_reachable_and_well_formed() {
    let (ns, veth, data) = veth_pod();
    let good = move_conf("1.0.0", "codes", &veth.nic, &data);
    let call = |cmd: &str| Call::new(cmd, "codes", &ns.path(), "net1");

    let mut c = good.clone();
    c["cniVersion"] = json!("0.2.0");
    let msg = call("ADD").run(&c).err(1);
    assert!(msg.contains("1.1.0"), "lists supported versions: {msg}");
    let mut c = good.clone();
    c["mode"] = json!("teleport");
    let msg = call("ADD").run(&c).err(2);
    assert!(msg.contains("mode") && msg.contains("teleport"), "{msg}");
    let msg = Call::new("ADD", "codes", &ns.path(), "").run(&good).err(4);
    assert!(msg.contains("CNI_IFNAME"), "{msg}");
    let mut c = good.clone();
    c["dataDir"] = json!("/etc/hostname/state");
    let msg = call("ADD").run(&c).err(5);
    assert!(msg.contains("/etc/hostname/state"), "{msg}");
    call("ADD").run_raw(b"{not json").err(6);
    let mut c = good.clone();
    c.as_object_mut().unwrap().remove("name");
    call("ADD").run(&c).err(7);
    let mut c = good.clone();
    c["mtu"] = json!(20);
    let msg = call("ADD").run(&c).err(7);
    assert!(msg.contains("mtu"), "{msg}");
    let msg = Call::new("ADD", "codes", "/etc/hostname", "net1")
        .run(&good)
        .err(104);
    assert!(msg.contains("/etc/hostname"), "{msg}");
    let mut c = good.clone();
    c["ipam"] = json!({"type": "no-such-ipam"});
    let msg = call("ADD").run(&c).err(107);
    assert!(msg.contains("no-such-ipam"), "{msg}");
    assert!(host_link(&veth.nic).is_some(), "failed ADDs moved nothing");

    // 11: another invocation holds the device lock.
    let mut c = good.clone();
    c["lockTimeoutMs"] = json!(200);
    let lock_dir = data.path().join("state/locks");
    std::fs::create_dir_all(&lock_dir).unwrap();
    let lock = lock_dir.join(format!("mac-{}.lock", veth.mac()));
    let mut holder = std::process::Command::new("flock")
        // -o: the sleep does not inherit the lock, so killing flock releases it at once.
        .args(["-o", lock.to_str().unwrap(), "sleep", "30"])
        .spawn()
        .unwrap();
    // Wait until the holder really has the lock: `flock -n` fails (1) exactly then. A fixed
    // sleep would race with a slow start of the holder.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sh_ok(&["flock", "-n", lock.to_str().unwrap(), "true"]) {
        assert!(
            std::time::Instant::now() < deadline,
            "flock never took {}",
            lock.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let msg = call("ADD").run(&c).err(11);
    assert!(msg.contains("lock"), "{msg}");
    holder.kill().unwrap();
    holder.wait().unwrap();

    // 102: held by another live attachment; 3: CHECK once the netns is gone; 106: corrupt record.
    call("ADD").run(&good).ok();
    let other = TestNetns::new();
    let msg = Call::new("ADD", "thief", &other.path(), "net1")
        .run(&good)
        .err(102);
    assert!(msg.contains("codes"), "names the holder: {msg}");
    let record = data.records().pop().unwrap();
    let saved = std::fs::read(&record).unwrap();
    std::fs::write(&record, b"{").unwrap();
    let msg = call("DEL").run(&good).err(106);
    assert!(
        msg.contains(record.file_name().unwrap().to_str().unwrap()),
        "{msg}"
    );
    std::fs::write(&record, saved).unwrap();
    call("DEL").run(&good).ok();
    call("ADD").run(&good).ok();
    let gone = ns.path();
    ns.delete();
    Call::new("CHECK", "codes", &gone, "net1").run(&good).err(3);
    Call::new("DEL", "codes", "", "net1").run(&good).ok();
}

#[test]
fn status_and_gc() {
    let data = DataDir::new();
    let mut conf = json!({"cniVersion": "1.1.0", "name": "gcnet", "type": "rdma-ns",
                          "dataDir": data.state(), "ipam": test_ipam(&data, "10.86.0.2/24")});
    Call::new("STATUS", "", "", "").run(&conf).ok();
    let mut unwritable = conf.clone();
    unwritable["dataDir"] = json!("/proc/rdma-ns");
    Call::new("STATUS", "", "", "").run(&unwritable).err(50);
    let mut ipam_down = conf.clone();
    ipam_down["ipam"]["fail"] = json!({"STATUS": 51});
    Call::new("STATUS", "", "", "").run(&ipam_down).err(51);

    let (ns1, ns2) = (TestNetns::new(), TestNetns::new());
    let (v1, v2) = (Veth::new(), Veth::new());
    for (id, ns, v) in [("keep", &ns1, &v1), ("stale", &ns2, &v2)] {
        let mut c = conf.clone();
        c["device"] = json!(v.nic);
        Call::new("ADD", id, &ns.path(), "net1").run(&c).ok();
    }
    conf["cni.dev/valid-attachments"] = json!([{"containerID": "keep", "ifname": "net1"}]);
    Call::new("GC", "", "", "").run(&conf).ok();
    assert_back_in_host(&v2.nic, 1500);
    assert!(ns1.link("net1").is_some(), "valid attachment kept");
    assert_eq!(data.records().len(), 1);
    assert!(ipam_log(&data).contains(&"GC".to_string()));
}

#[test]
fn version_about_cni_args_and_runtime_config_spellings() {
    let out = Call::new("VERSION", "", "", "").run(&json!({"cniVersion": "1.0.0"}));
    out.ok();
    let v = out.json();
    assert_eq!(v["cniVersion"], "1.0.0");
    assert_eq!(
        v["supportedVersions"],
        json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );

    let about = std::process::Command::new(PLUGIN)
        .env_clear()
        .output()
        .unwrap();
    assert!(about.status.success());
    assert!(about.stdout.is_empty(), "stdout is only for CNI JSON");
    let text = String::from_utf8_lossy(&about.stderr);
    assert!(text.contains("rdma-ns") && text.contains("1.1.0"), "{text}");

    let (ns, veth, data) = veth_pod();
    let mut conf = move_conf("1.0.0", "args", &veth.nic, &data);
    conf["runtimeConfig"] =
        json!({"PortMappings": [], "io.kubernetes.cri.pod-annotations": {}, "Dns": {}});
    conf["logFile"] = json!(format!("{}/plugin.log", data.str()));
    conf["logLevel"] = json!("debug");
    let mut call = Call::new("ADD", "args", &ns.path(), "net1");
    call.args = "FOO=bar".into();
    let msg = call.run(&conf).err(2);
    assert!(
        msg.contains("FOO") && msg.contains("IgnoreUnknown"),
        "{msg}"
    );
    call.args = "IgnoreUnknown=True;K8S_POD_NAME=p;FOO=bar".into();
    call.run(&conf).ok();
    let log = std::fs::read_to_string(data.path().join("plugin.log")).unwrap();
    assert!(log.contains("debug"), "logFile at logLevel debug: {log}");
    call.command = "DEL".into();
    call.run(&conf).ok();
}

#[test]
fn the_device_info_file_is_written_for_the_pci_function_and_removed_on_del() {
    let sys = FixtureSys::new();
    let data = DataDir::new();
    let veth = Veth::new();
    let before = host_view(&veth.nic);
    let ns = TestNetns::new();
    sys.add_pci("0000:3b:00.2", &[&veth.nic]);
    let devinfo = DevinfoDir::new();
    let info_path = devinfo.path().join("cni/net1-deviceinfo.json");
    let conf = json!({"cniVersion": "1.0.0", "name": "dinfo", "type": "rdma-ns", "dataDir": data.state(),
        "capabilities": {"deviceID": true, "CNIDeviceInfoFile": true},
        "runtimeConfig": {"deviceID": "0000:3b:00.2", "CNIDeviceInfoFile": info_path.display().to_string()}});
    let (k, v) = sys.env();
    Call::new("ADD", "di", &ns.path(), "net1")
        .env(&k, &v)
        .run(&conf)
        .ok();
    let info: Value = serde_json::from_str(&std::fs::read_to_string(&info_path).unwrap()).unwrap();
    assert_eq!(info["type"], "pci", "{info}");
    assert_eq!(info["version"], "1.1.0", "{info}");
    assert_eq!(info["pci"]["pci-address"], "0000:3b:00.2", "{info}");
    Call::new("DEL", "di", &ns.path(), "net1")
        .env(&k, &v)
        .run(&conf)
        .ok();
    assert!(!info_path.exists(), "removed on DEL");
    back_in_host(&veth.nic, &before).unwrap();
}

/// `roceQos` puts the network's QoS in the pod interface's alias (where `rdma-ns env` reads
/// it), which CHECK holds ADD to and DEL takes back: the NIC comes home with its own alias. A
/// value out of range is code 7 naming the field and value, before anything moved.
#[test]
fn roce_qos_sets_the_pod_interfaces_alias_check_holds_it_and_del_puts_the_nics_back() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    sh(&["ip", "link", "set", &veth.nic, "alias", "uplink to leaf 3"]);
    let mut conf = move_conf("1.1.0", "qos", &veth.nic, &data);
    conf["roceQos"] = json!({"dscp": 24, "ecn": false, "priority": 3, "fifoDscp": 46});
    let before = host_view(&veth.nic);
    assert_eq!(before.alias.as_deref(), Some("uplink to leaf 3"));
    let call = |c: &str| Call::new(c, "qos1", &ns.path(), "net1");
    call("ADD").run(&conf).ok();
    let ours = "rdma-ns roceQos dscp=24 ecn=0 priority=3 fifoDscp=46";
    assert_eq!(ns.link("net1").unwrap()["ifalias"], ours);
    let record = std::fs::read_to_string(&data.records()[0]).unwrap();
    let last: Value = serde_json::from_str(record.lines().last().unwrap()).unwrap();
    let qos = &last["steps"]["roceQos"];
    assert_eq!(qos["trafficClass"], 96, "{last}");
    assert_eq!(qos["alias"]["before"], "uplink to leaf 3", "{last}");
    call("CHECK").run(&conf).ok();
    sh(&[
        "ip", "-n", &ns.name, "link", "set", "net1", "alias", "changed",
    ]);
    let msg = call("CHECK").run(&conf).err(108);
    assert!(
        msg.contains("roceQos") && msg.contains("\"changed\""),
        "{msg}"
    );
    sh(&["ip", "-n", &ns.name, "link", "set", "net1", "alias", ours]);
    call("CHECK").run(&conf).ok();
    call("DEL").run(&conf).ok();
    back_in_host(&veth.nic, &before).unwrap();

    conf["roceQos"]["dscp"] = json!(64);
    let msg = call("ADD").run(&conf).err(7);
    assert!(
        msg.contains("`roceQos.dscp`") && msg.contains("64"),
        "{msg}"
    );
    back_in_host(&veth.nic, &before).unwrap();
    assert!(data.records().is_empty());
}
