//! Every example network configuration under conf/ parses and is accepted by the plugin: each
//! rdma-ns entry of each conflist gets cniVersion and name injected (as runtimes do), its device
//! replaced by a test veth, and runs ADD and DEL for real where this kernel can (move, macvlan).
//! IPoIB needs an InfiniBand parent, so there the plugin must get past conf validation and stop
//! at the parent check (code 110), never at 7.

mod common;

use common::*;
use serde_json::{json, Value};

/// NetworkAttachmentDefinitions and pods in conf/*.yaml, by file name.
fn yaml_docs() -> Vec<(String, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/conf");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            let v: Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            found.push((name, v));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The conflists NADs carry in spec.config (a JSON string).
fn nad_conflists() -> Vec<(String, Value)> {
    yaml_docs()
        .into_iter()
        .filter(|(_, d)| d["kind"] == "NetworkAttachmentDefinition")
        .map(|(name, d)| {
            assert_eq!(d["apiVersion"], "k8s.cni.cncf.io/v1", "{name}");
            assert!(d["metadata"]["name"].is_string(), "{name}: metadata.name");
            let config = d["spec"]["config"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: spec.config"));
            let v: Value =
                serde_json::from_str(config).unwrap_or_else(|e| panic!("{name}: spec.config: {e}"));
            assert_eq!(
                v["name"], d["metadata"]["name"],
                "{name}: the network is named like the NAD"
            );
            (name, v)
        })
        .collect()
}

#[test]
fn the_pod_example_requests_the_shared_hca_and_a_defined_network() {
    let docs = yaml_docs();
    let (_, pod) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "Pod")
        .expect("conf/pod.yaml");
    let limits = &pod["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["rdma/hca_shared"], 1, "{pod}");
    let network = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap();
    let nads: Vec<String> = nad_conflists()
        .into_iter()
        .map(|(_, c)| c["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        nads.contains(&network.to_string()),
        "{network} is one of {nads:?}"
    );
    let modprobe = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/conf/modprobe.d/ib_core.conf"
    ))
    .unwrap();
    assert!(
        modprobe
            .lines()
            .any(|l| l.trim() == "options ib_core netns_mode=0"),
        "{modprobe}"
    );
}

/// The multi-rail pod: one network per rail, each a NAD whose rdma-ns entry asks for `rail`,
/// each rail with its own NIC, its own subnet and gateway and the same east-west route, and the
/// pod asking for each NAD's resource.
#[test]
fn the_rails_pod_asks_for_one_rail_network_and_resource_per_rail() {
    let docs = yaml_docs();
    let (_, pod) = docs
        .iter()
        .find(|(f, _)| f == "trainer-rails.yaml")
        .expect("conf/trainer-rails.yaml");
    assert_eq!(pod["kind"], "Pod");
    let networks: Vec<&str> = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(networks, ["rail0", "rail1", "rail2", "rail3"]);
    let limits = &pod["spec"]["containers"][0]["resources"]["limits"];
    let (mut masters, mut gateways, mut east_west) = (Vec::new(), Vec::new(), Vec::new());
    for network in &networks {
        let (file, nad) = docs
            .iter()
            .find(|(_, d)| {
                d["kind"] == "NetworkAttachmentDefinition" && d["metadata"]["name"] == *network
            })
            .unwrap_or_else(|| panic!("no NAD for {network}"));
        let resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
            .as_str()
            .unwrap();
        assert_eq!(limits[resource], 1, "{file}: the pod asks for {resource}");
        let conflist: Value =
            serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
        let entry = conflist["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "rdma-ns")
            .unwrap();
        assert_eq!(entry["rail"], true, "{file}");
        masters.push(entry["master"].as_str().unwrap().to_string());
        gateways.push(entry["ipam"]["gateway"].as_str().unwrap().to_string());
        let routes = entry["ipam"]["routes"].as_array().unwrap();
        assert_eq!(
            routes[0]["gw"], entry["ipam"]["gateway"],
            "{file}: through its gateway"
        );
        east_west.push(routes[0]["dst"].as_str().unwrap().to_string());
    }
    for list in [&masters, &gateways] {
        let mut unique = list.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), networks.len(), "one per rail: {list:?}");
    }
    assert!(
        east_west.iter().all(|d| d == &east_west[0]),
        "{east_west:?}"
    );
}

fn examples() -> Vec<(String, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/conf");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".conflist") || name.ends_with(".conf") {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            found.push((name, v));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found.extend(nad_conflists());
    found
}

#[test]
fn every_example_conf_is_accepted_by_the_plugin() {
    let list = examples();
    let names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
    for mode in ["move", "macvlan", "ipoib"] {
        assert!(
            names.contains(&format!("{mode}.conflist").as_str()),
            "conf/{mode}.conflist exists: {names:?}"
        );
    }
    for (file, conflist) in list {
        let plugins = conflist["plugins"]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: no plugins"));
        for plugin in plugins.iter().filter(|p| p["type"] == "rdma-ns") {
            let veth = Veth::new();
            let ns = TestNetns::new();
            let data = DataDir::new();
            let mut conf = plugin.clone();
            conf["cniVersion"] = conflist["cniVersion"].clone();
            conf["name"] = conflist["name"].clone();
            conf["dataDir"] = json!(data.state());
            for field in ["device", "master"] {
                if conf.get(field).is_some() {
                    conf[field] = json!(veth.nic);
                }
            }
            if conf["ipam"]["type"] == "host-local" {
                conf["ipam"]["dataDir"] = json!(format!("{}/host-local", data.str()));
            }
            if conf["ipam"]["type"] == "whereabouts" {
                // A cluster-wide IPAM (needs the Kubernetes API): static stands in for it here.
                conf["ipam"] =
                    json!({"type": "static", "addresses": [{"address": "10.123.0.2/24"}]});
            }
            if conf["mode"] == "rdma" {
                conf["prevResult"] = json!({"cniVersion": conf["cniVersion"],
                    "interfaces": [{"name": "net1", "sandbox": ns.path()}], "ips": []});
            }
            // Without a device name, a device plugin allocates the device and Multus passes it as
            // deviceID: a fixture sysfs maps that PCI address to the test veth.
            let sys = FixtureSys::new();
            sys.add_pci("0000:3b:00.2", &[&veth.nic]);
            if conf["mode"] == "move" && conf.get("device").is_none() {
                conf["deviceID"] = json!("0000:3b:00.2");
            }
            let (k, v) = sys.env();
            let call = |cmd: &str| Call::new(cmd, "example", &ns.path(), "net1").env(&k, &v);
            let before = host_view(&veth.nic);
            let add = call("ADD").run(&conf);
            match conf["mode"].as_str() {
                Some("ipoib") => {
                    let msg = add.err(110);
                    assert!(msg.contains("IPoIB"), "{file}: {msg}");
                }
                Some("rdma") => {
                    // This kernel has no RDMA at all: the conf is accepted, the environment is not.
                    let msg = add.err(120);
                    assert!(msg.contains("exclusive"), "{file}: {msg}");
                }
                _ => {
                    add.ok();
                    assert!(ns.link("net1").is_some(), "{file}");
                    assert_eq!(data.records().len(), 1, "{file}: the record while attached");
                    Call::new("DEL", "example", &ns.path(), "net1")
                        .run(&conf)
                        .ok();
                    assert!(ns.link("net1").is_none(), "{file}");
                    // Moved back, or as a child's parent never changed: the full host view.
                    back_in_host(&veth.nic, &before).unwrap_or_else(|e| panic!("{file}: {e}"));
                    assert!(host_children(&veth.nic).is_empty(), "{file}: no child left");
                }
            }
            assert!(data.records().is_empty(), "{file}");
        }
    }
}
