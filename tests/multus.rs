//! The cluster path as Multus and libcni really call the plugin: every NetworkAttachmentDefinition
//! in conf/ gets exactly what Multus injects for its `resourceName` (the device the kubelet
//! allocated, in both of Multus's injection styles), the `runtimeConfig` libcni builds from the
//! plugin's declared capabilities, and the `CNI_ARGS` Multus sets for a pod. The result runs
//! through the real binary in a real netns, with a veth standing in for the NIC and Debian's
//! host-local standing in for whereabouts (which needs the Kubernetes API).

mod common;

use common::*;
use serde_json::{json, Map, Value};

/// How Multus writes the allocated device into the delegate config.
#[derive(Debug, Clone, Copy)]
enum Injection {
    /// Multus v4 (`addDeviceIDInConfList`, `delegateAddDeviceID`): `deviceID` and `pciBusID`
    /// in every plugin of a conflist, or in the single config.
    V4,
    /// Older releases: `deviceID` in the first plugin only.
    FirstPluginOnly,
}

/// What each device plugin in the recipe of docs/install.md hands the kubelet as a device ID.
fn allocated_device(resource: &str) -> &'static str {
    match resource {
        // k8s-rdma-shared-dev-plugin names its devices "0", "1", ... up to rdmaHcaMax; the
        // multi-rail NADs take one HCA from each rail's resource of it.
        "rdma/hca_shared" | "rdma/rail0" | "rdma/rail1" | "rdma/rail2" | "rdma/rail3" => "0",
        // The SR-IOV network device plugin: the VF's PCI address.
        "nvidia.com/rdma_vf" => VF_PCI,
        other => panic!("no device plugin in the recipe serves {other}"),
    }
}

const VF_PCI: &str = "0000:3b:00.2";

struct Nad {
    file: String,
    resource: String,
    conflist: Value,
}

fn nads() -> Vec<Nad> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/conf");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !file.ends_with(".yaml") {
            continue;
        }
        let doc: Value =
            serde_norway::from_str(&std::fs::read_to_string(entry.path()).unwrap()).unwrap();
        if doc["kind"] != "NetworkAttachmentDefinition" {
            continue;
        }
        let resource = doc["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: every recipe NAD names its device plugin resource"))
            .to_string();
        let conflist = serde_json::from_str(doc["spec"]["config"].as_str().unwrap()).unwrap();
        found.push(Nad {
            file,
            resource,
            conflist,
        });
    }
    found.sort_by(|a, b| a.file.cmp(&b.file));
    assert!(found.len() >= 4, "the recipe's NADs: {}", found.len());
    found
}

/// Multus's rewrite of the delegate config for an allocated `device_id`.
fn multus_delegate(conflist: &Value, device_id: &str, injection: Injection) -> Value {
    let mut out = conflist.clone();
    let plugins = out["plugins"].as_array_mut().unwrap();
    match injection {
        Injection::V4 => {
            for p in plugins.iter_mut() {
                p["deviceID"] = json!(device_id);
                p["pciBusID"] = json!(device_id);
            }
        }
        Injection::FirstPluginOnly => plugins[0]["deviceID"] = json!(device_id),
    }
    out
}

/// libcni's per-plugin config: the list's name and cniVersion, and `runtimeConfig` holding the
/// capability arguments the plugin declares (`injectRuntimeConfig`).
fn libcni_plugin_conf(list: &Value, plugin: &Value, capability_args: &Map<String, Value>) -> Value {
    let mut conf = plugin.clone();
    conf["name"] = list["name"].clone();
    conf["cniVersion"] = list["cniVersion"].clone();
    let mut runtime = Map::new();
    if let Some(caps) = plugin["capabilities"].as_object() {
        for (cap, on) in caps {
            if on == &json!(true) {
                if let Some(v) = capability_args.get(cap) {
                    runtime.insert(cap.clone(), v.clone());
                }
            }
        }
    }
    if !runtime.is_empty() {
        conf["runtimeConfig"] = Value::Object(runtime);
    }
    conf
}

/// The CNI_ARGS Multus passes for a pod (`CreateCNIRuntimeConf`).
fn multus_cni_args(pod_uid: &str, infra_id: &str) -> String {
    format!(
        "IgnoreUnknown=true;K8S_POD_NAMESPACE=default;K8S_POD_NAME=rdma-trainer;\
         K8S_POD_INFRA_CONTAINER_ID={infra_id};K8S_POD_UID={pod_uid}"
    )
}

/// Every NAD of the recipe, in both injection styles, with and without the pod asking for an IP
/// and a MAC: ADD works (or stops at what this kernel lacks, never at the conf), the record
/// keeps the device ID, the device-info file appears where the capability is declared, and DEL
/// leaves no interface, lease or record.
#[test]
fn every_recipe_nad_works_with_what_multus_injects() {
    let mut ran = 0;
    for nad in nads() {
        let device_id = allocated_device(&nad.resource);
        for injection in [Injection::V4, Injection::FirstPluginOnly] {
            for pod_asks in [false, true] {
                let what = format!("{} {injection:?} pod_asks={pod_asks}", nad.file);
                let veth = Veth::new();
                let ns = TestNetns::new();
                let data = DataDir::new();
                let sys = FixtureSys::new();
                sys.add_pci(VF_PCI, &[&veth.nic]);
                let (sys_k, sys_v) = sys.env();
                let infra = unique("infra");
                let devinfo = DevinfoDir::new();
                let info_path = devinfo
                    .path()
                    .join(format!("cni/default-rdma-trainer-{infra}.json"));

                let mut delegate = multus_delegate(&nad.conflist, device_id, injection);
                for p in delegate["plugins"].as_array_mut().unwrap() {
                    for field in ["master", "device"] {
                        if p.get(field).is_some() {
                            p[field] = json!(veth.nic);
                        }
                    }
                    if p["ipam"]["type"] == "whereabouts" {
                        let range = p["ipam"]["range"].as_str().unwrap().to_string();
                        p["ipam"] = json!({"type": "host-local", "subnet": range,
                            "dataDir": data.path().join("host-local")});
                    }
                    p["dataDir"] = json!(data.state());
                }
                let subnet: ipnetwork::Ipv4Network = delegate["plugins"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find_map(|p| p["ipam"]["subnet"].as_str())
                    .unwrap_or("10.0.0.0/24")
                    .parse()
                    .unwrap();
                let asked_ip = format!("{}/{}", subnet.nth(77).unwrap(), subnet.prefix());
                let mut caps = Map::new();
                caps.insert("deviceID".into(), json!(device_id));
                caps.insert(
                    "CNIDeviceInfoFile".into(),
                    json!(info_path.display().to_string()),
                );
                if pod_asks {
                    caps.insert("ips".into(), json!([asked_ip]));
                    caps.insert("mac".into(), json!("02:5a:00:00:00:77"));
                }

                let plugins = delegate["plugins"].as_array().unwrap().clone();
                for (index, plugin) in plugins.iter().enumerate() {
                    if plugin["type"] != "rdma-ns" {
                        continue;
                    }
                    ran += 1;
                    let mut conf = libcni_plugin_conf(&delegate, plugin, &caps);
                    if index > 0 {
                        // The plugin before it (sriov) cannot run here: its result, as libcni
                        // passes it on, stands in.
                        conf["prevResult"] = json!({"cniVersion": conf["cniVersion"],
                            "interfaces": [{"name": "net1", "sandbox": ns.path()}], "ips": []});
                    }
                    let mut call = Call::new("ADD", &infra, &ns.path(), "net1").env(&sys_k, &sys_v);
                    call.args = multus_cni_args("6b1d0c4e-7f3a-4a8e-9d55-1f2e3c4b5a69", &infra);
                    let before = host_view(&veth.nic);
                    let add = call.run(&conf);
                    match conf["mode"].as_str() {
                        Some("ipoib") => {
                            let msg = add.err(110);
                            assert!(msg.contains("IPoIB"), "{what}: {msg}");
                            assert!(data.records().is_empty(), "{what}");
                            continue;
                        }
                        Some("rdma") => {
                            let msg = add.err(120);
                            assert!(msg.contains("exclusive"), "{what}: {msg}");
                            assert!(data.records().is_empty(), "{what}");
                            continue;
                        }
                        _ => {}
                    }
                    assert_eq!(add.code, 0, "{what}: {} / {}", add.stdout, add.stderr);
                    let link = ns.link("net1").unwrap_or_else(|| panic!("{what}: net1"));
                    let addrs = ns.addrs("net1");
                    assert_eq!(addrs.len(), 1, "{what}: {addrs:?}");
                    if pod_asks {
                        assert_eq!(addrs[0], asked_ip, "{what}: the ips capability");
                        if conf["mode"] == "macvlan" {
                            assert_eq!(link["address"], "02:5a:00:00:00:77", "{what}: mac");
                        }
                    }
                    let records = data.records();
                    assert_eq!(records.len(), 1, "{what}");
                    let last = std::fs::read_to_string(&records[0]).unwrap();
                    let record: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
                    assert_eq!(record["deviceId"], device_id, "{what}: {record}");
                    let lease_dir = data.path().join("host-local");
                    assert_eq!(
                        leases(&lease_dir).len(),
                        1,
                        "{what}: the lease, while it exists"
                    );
                    // Every recipe NAD declares CNIDeviceInfoFile; a file is written when
                    // there is something to describe: move mode's VF (its PCI address), not a
                    // macvlan child of this veth, which has no ib device and no PCI function.
                    let declares_info = conf["runtimeConfig"]["CNIDeviceInfoFile"].is_string()
                        && conf["mode"] == "move";
                    if declares_info {
                        let info: Value =
                            serde_json::from_slice(&std::fs::read(&info_path).unwrap()).unwrap();
                        assert_eq!(info["pci"]["pci-address"], VF_PCI, "{what}: {info}");
                    } else {
                        assert!(!info_path.exists(), "{what}");
                    }

                    call.command = "DEL".into();
                    call.run(&conf).ok();
                    child_gone(&ns, "net1", &veth.nic).unwrap_or_else(|e| panic!("{what}: {e}"));
                    back_in_host(&veth.nic, &before).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(leases(&lease_dir).is_empty(), "{what}: lease released");
                    assert!(data.records().is_empty(), "{what}: record gone");
                    assert!(!info_path.exists(), "{what}: device-info removed");
                }
            }
        }
    }
    // 9 NADs (5 single-network, one of them with roceQos; 4 rails) x 2 injections x 2 pod
    // requests, one rdma-ns plugin each.
    assert_eq!(ran, 36);
}

/// The move recipe fed a shared device plugin's index (a NAD pointed at the wrong resource):
/// refused with the fix named, nothing touched.
#[test]
fn move_mode_given_only_a_shared_plugin_index_says_what_to_use() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let conf = json!({"cniVersion": "1.0.0", "name": "rdma-move", "type": "rdma-ns",
        "mode": "move", "deviceID": "0", "pciBusID": "0", "dataDir": data.state(),
        "capabilities": {"deviceID": true}, "runtimeConfig": {"deviceID": "0"}});
    let msg = Call::new("ADD", "mv0", &ns.path(), "net1")
        .run(&conf)
        .err(7);
    assert!(msg.contains("RDMA shared device plugin"), "{msg}");
    assert!(msg.contains("SR-IOV network device plugin"), "{msg}");
    assert!(data.records().is_empty());

    // With an explicit device the index gives way.
    let mut conf = conf;
    conf["device"] = json!(veth.nic);
    Call::new("ADD", "mv0", &ns.path(), "net1").run(&conf).ok();
    assert!(ns.link("net1").is_some());
    Call::new("DEL", "mv0", &ns.path(), "net1").run(&conf).ok();
    assert!(ns.link("net1").is_none());
    assert!(host_link(&veth.nic).is_some());
}

/// `master` as an altname selects the parent, as `device` does in move mode; a missing master is
/// named as `master`.
#[test]
fn a_master_altname_selects_the_parent_and_a_missing_master_is_named() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let alt = unique("alt-");
    sh(&[
        "ip", "link", "property", "add", "dev", &veth.nic, "altname", &alt,
    ]);
    assert!(
        sh(&["ip", "-d", "link", "show", "dev", &alt]).contains(&veth.nic),
        "the altname resolves to the veth"
    );
    let conf = json!({"cniVersion": "1.0.0", "name": "mvalt", "type": "rdma-ns",
        "mode": "macvlan", "master": alt, "dataDir": data.state(),
        "ipam": static_ipam("10.91.0.5/24")});
    Call::new("ADD", "alt", &ns.path(), "net1").run(&conf).ok();
    let record = std::fs::read_to_string(&data.records()[0]).unwrap();
    assert!(
        record.contains(&format!("\"name\":\"{}\"", veth.nic)),
        "the parent is recorded by its name: {record}"
    );
    Call::new("DEL", "alt", &ns.path(), "net1").run(&conf).ok();
    assert!(ns.link("net1").is_none());

    let mut missing = conf.clone();
    missing["master"] = json!("nosuchnic0");
    let msg = Call::new("ADD", "alt", &ns.path(), "net1")
        .run(&missing)
        .err(100);
    assert!(msg.contains("master=nosuchnic0"), "{msg}");
}

/// A hung IPAM plugin fails ADD at `ipamTimeoutMs` with a named error, killed and reaped, and the
/// device is back in the host as it was; one that answers in time works.
#[test]
fn a_hung_ipam_plugin_is_killed_at_ipam_timeout_and_add_rolls_back() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let before = host_view(&veth.nic);
    let pid_file = data.path().join("ipam.pid");
    let mut conf = move_conf("1.1.0", "slowipam", &veth.nic, &data);
    conf["ipamTimeoutMs"] = json!(500);
    conf["ipam"] = json!({"type": "cni-test-ipam", "addresses": [{"address": "10.92.0.5/24"}],
        "sleepMs": {"ADD": 30000}, "pidFile": pid_file});
    let started = std::time::Instant::now();
    let msg = Call::new("ADD", "slow", &ns.path(), "net1")
        .run(&conf)
        .err(107);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert!(
        msg.contains("cni-test-ipam") && msg.contains("ipamTimeoutMs=500"),
        "{msg}"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "the IPAM plugin {pid} was reaped"
    );
    assert_eq!(host_view(&veth.nic), before, "the device is back as it was");
    assert!(ns.link("net1").is_none());
    assert!(data.records().is_empty());

    // The twin: the same plugin, answering within the timeout.
    conf["ipam"]["sleepMs"] = json!({"ADD": 100});
    conf["ipamTimeoutMs"] = json!(20000);
    Call::new("ADD", "slow", &ns.path(), "net1").run(&conf).ok();
    assert_eq!(ns.addrs("net1"), vec!["10.92.0.5/24".to_string()]);
    Call::new("DEL", "slow", &ns.path(), "net1").run(&conf).ok();
}

/// The multi-rail pod of conf/trainer-rails.yaml as Multus attaches it: one delegate call per
/// network of its annotation, in order, as net1 ... net4 of one pod netns, each rail's master
/// a veth of its own and host-local standing in for whereabouts with the NAD's range, gateway
/// and routes. All four attach; each rail's addresses look up a table of their own in which
/// the east-west route leaves by that rail; DEL, in Multus's reverse order, leaves nothing.
#[test]
fn a_pod_with_four_rail_networks_attaches_all_four() {
    let pod: Value = serde_norway::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/conf/trainer-rails.yaml"
        ))
        .unwrap(),
    )
    .unwrap();
    let networks: Vec<String> = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    assert_eq!(networks.len(), 4);
    let all = nads();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let infra = unique("infra");
    let mut attached = Vec::new();
    for (i, network) in networks.iter().enumerate() {
        let nad = all
            .iter()
            .find(|n| n.conflist["name"] == network.as_str())
            .unwrap_or_else(|| panic!("no NAD for {network}"));
        let veth = Veth::new();
        sh(&["ip", "link", "set", &veth.nic, "up"]);
        let mut delegate = multus_delegate(
            &nad.conflist,
            allocated_device(&nad.resource),
            Injection::V4,
        );
        let plugin = &mut delegate["plugins"][0];
        plugin["master"] = json!(veth.nic);
        plugin["dataDir"] = json!(data.state());
        let ipam = plugin["ipam"].clone();
        plugin["ipam"] = json!({"type": "host-local", "subnet": ipam["range"],
            "rangeStart": ipam["range_start"], "gateway": ipam["gateway"],
            "routes": ipam["routes"], "dataDir": data.path().join("host-local")});
        let conf = libcni_plugin_conf(&delegate, &delegate["plugins"][0], &Map::new());
        let mut call = Call::new("ADD", &infra, &ns.path(), &format!("net{}", i + 1));
        call.args = multus_cni_args("0c6f2a51-3b44-4d1e-8a0b-5e2f7c9d1a34", &infra);
        let result = call.run(&conf).ok().json();
        let ip = result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        attached.push((
            call,
            conf,
            veth,
            ip,
            ipam["gateway"].as_str().unwrap().to_string(),
        ));
    }
    assert_eq!(ns.source_rules().len(), 4, "{:?}", ns.source_rules());
    let route_get = |dst: &str, from: &str| {
        let argv = ["ip", "-n", &ns.name, "route", "get", dst, "from", from];
        sh(&argv)
    };
    for (i, (_, _, _, ip, gw)) in attached.iter().enumerate() {
        // A peer on the next rail's subnet: east-west, through this rail's own gateway.
        let got = route_get(&format!("10.10{}.9.9", (i + 1) % 4), ip);
        let via = format!("via {gw} dev net{}", i + 1);
        assert!(got.contains(&via), "rail {i}: {got}");
    }
    let main = sh(&["ip", "-n", &ns.name, "route", "show", "table", "main"]);
    assert!(
        !main.contains("10.100.0.0/14"),
        "no rail route in main: {main}"
    );

    for (mut call, conf, veth, _, _) in attached.into_iter().rev() {
        call.command = "DEL".into();
        call.run(&conf).ok();
        child_gone(&ns, &call.ifname, &veth.nic).unwrap();
    }
    assert!(ns.source_rules().is_empty(), "{:?}", ns.source_rules());
    assert!(leases(&data.path().join("host-local")).is_empty());
    assert!(data.records().is_empty());
}
