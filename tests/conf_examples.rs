//! Every example network configuration under conf/ parses and is accepted by the plugin: each
//! rdma-ns entry of each conflist gets cniVersion and name injected (as runtimes do), its device
//! replaced by a test veth, and runs ADD and DEL for real where this kernel can (move, macvlan).
//! IPoIB needs an InfiniBand parent, so there the plugin must get past conf validation and stop
//! at the parent check (code 110), never at 7.

mod common;

use common::*;
use serde_json::{json, Value};

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
            let add = Call::new("ADD", "example", &ns.path(), "net1").run(&conf);
            match conf["mode"].as_str() {
                Some("ipoib") => {
                    let msg = add.err(110);
                    assert!(msg.contains("IPoIB"), "{file}: {msg}");
                }
                _ => {
                    add.ok();
                    assert!(ns.link("net1").is_some(), "{file}");
                    Call::new("DEL", "example", &ns.path(), "net1")
                        .run(&conf)
                        .ok();
                    assert!(ns.link("net1").is_none(), "{file}");
                }
            }
            assert!(data.records().is_empty(), "{file}");
        }
    }
}
