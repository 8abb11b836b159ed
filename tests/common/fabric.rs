//! A routed rail fabric for the root and VM tiers: a router netns forwarding between the rails'
//! subnets, and pods with one NIC (a veth whose peer is the router's port) per rail. Rail `r` of
//! pod `p` is `10.10<r>.<p>.0/24`, the pod at .2, its gateway (the router) at .1, and every rail
//! routes the east-west range through its own gateway.

use serde_json::{json, Value};

use super::{sh, Call, TestNetns, Veth};

/// The east-west range every rail routes through its own gateway.
pub const EAST_WEST: &str = "10.100.0.0/14";

/// Rail `r` of pod `p`: its subnet's prefix (`10.10<r>.<p>`), address .2, gateway .1.
pub fn subnet(p: u32, r: u32) -> String {
    format!("10.10{r}.{p}")
}

/// A router netns forwarding between the rails' subnets, with reverse-path filtering off (it
/// routes for every subnet it holds).
pub struct Router {
    pub ns: TestNetns,
}

impl Router {
    pub fn new() -> Router {
        let ns = TestNetns::new();
        for key in ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"] {
            sh(&["ip", "netns", "exec", &ns.name, "sysctl", "-q", "-w", key]);
        }
        Router { ns }
    }

    /// Takes the peer end of `veth` as the gateway `<subnet>.1/24` of one rail.
    pub fn port(&self, veth: &Veth, subnet: &str) {
        sh(&["ip", "link", "set", &veth.peer, "netns", &self.ns.name]);
        let gw = format!("{subnet}.1/24");
        sh(&[
            "ip",
            "-n",
            &self.ns.name,
            "addr",
            "add",
            &gw,
            "dev",
            &veth.peer,
        ]);
        sh(&["ip", "-n", &self.ns.name, "link", "set", &veth.peer, "up"]);
    }

    /// Packets the router received on `port`.
    pub fn rx_packets(&self, port: &str) -> u64 {
        let out = sh(&[
            "ip",
            "-n",
            &self.ns.name,
            "-j",
            "-s",
            "link",
            "show",
            "dev",
            port,
        ]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v[0]["stats64"]["rx"]["packets"].as_u64().unwrap()
    }
}

/// One pod of the fabric: its netns and one NIC (veth) per rail, the peers in the router.
pub struct Pod {
    /// `p` in the rails' subnets.
    pub index: u32,
    pub ns: TestNetns,
    pub nics: Vec<Veth>,
}

impl Pod {
    /// The conf of this pod's rail `r` (see [`rail_conf`]).
    pub fn conf(&self, r: u32, data_dir: &str, extra: Value) -> Value {
        rail_conf(self.index, r, &self.nics[r as usize].nic, data_dir, extra)
    }
}

/// The conf of rail `r` of pod `p` (move mode, its NIC `device`, the plugin's `dataDir`), with
/// the fields of `extra` (an object: `{"rail": true}`, `{}` for none) added.
pub fn rail_conf(p: u32, r: u32, device: &str, data_dir: &str, extra: Value) -> Value {
    let net = subnet(p, r);
    let mut conf = json!({"cniVersion": "1.1.0", "name": format!("rail{r}"), "type": "rdma-ns",
        "mode": "move", "device": device, "dataDir": data_dir,
        "ipam": {"type": "cni-test-ipam",
                 "addresses": [{"address": format!("{net}.2/24"), "gateway": format!("{net}.1")}],
                 "routes": [{"dst": EAST_WEST, "gw": format!("{net}.1")}]}});
    for (k, v) in extra.as_object().expect("an object of fields") {
        conf[k] = v.clone();
    }
    conf
}

pub fn fabric(router: &Router) -> Vec<Pod> {
    (0..2)
        .map(|p| {
            let nics: Vec<Veth> = (0..2).map(|_| Veth::new()).collect();
            for (r, nic) in nics.iter().enumerate() {
                router.port(nic, &subnet(p, r as u32));
            }
            Pod {
                index: p,
                ns: TestNetns::new(),
                nics,
            }
        })
        .collect()
}

pub fn call(command: &str, pod: &Pod, r: u32) -> Call {
    Call::new(
        command,
        &format!("{}c", pod.ns.name),
        &pod.ns.path(),
        &format!("net{}", r + 1),
    )
}

pub fn route_get(pod: &Pod, args: &[&str]) -> String {
    let mut argv = vec!["ip", "-n", &pod.ns.name, "route", "get"];
    argv.extend(args);
    sh(&argv)
}
