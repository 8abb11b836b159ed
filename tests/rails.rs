//! Multi-rail pods on the host kernel, with real policy routing and ARP: `"rail"` against the
//! same pods without it.
//!
//! - A routed two-rail fabric: two pods with two rails each (move mode), every rail its own
//!   subnet behind its own gateway in a router netns, every rail carrying the same east-west
//!   route. With `rail` all four attach, `ip route get <peer> from <rail IP>` leaves by that
//!   rail's interface and gateway, and a ping bound to a rail's IP crosses the router on that
//!   rail (the router's per-port counters); without it the second rail of each pod fails.
//! - Same-subnet rails on one L2 segment (macvlan mode): with `rail`, ARP replies for a rail's
//!   IP come only from its own interface; without it, from the other rail too.

mod common;

use common::fabric::*;
use common::*;
use serde_json::{json, Value};

#[test]
fn a_routed_two_rail_fabric_with_rail_routes_each_rail_by_its_own_gateway() {
    let router = Router::new();
    let pods = fabric(&router);
    let data = DataDir::new();
    for pod in &pods {
        for r in 0..2 {
            let conf = pod.conf(r, &data.state(), json!({"rail": true}));
            let add = call("ADD", pod, r).run(&conf);
            add.ok();
            let result = add.json();
            for route in result["routes"].as_array().unwrap() {
                assert!(route["table"].as_u64().unwrap() > 1000, "{result}");
            }
        }
        assert_eq!(
            pod.ns.source_rules().len(),
            2,
            "{:?}",
            pod.ns.source_rules()
        );
    }
    let (a, b) = (&pods[0], &pods[1]);
    for r in 0..2u32 {
        let (mine, peer) = (format!("{}.2", subnet(0, r)), format!("{}.2", subnet(1, r)));
        let via = format!("via {}.1 dev net{}", subnet(0, r), r + 1);
        let got = route_get(a, &[&peer, "from", &mine]);
        assert!(got.contains(&via), "rail {r}: {got}");
        // RoCE resolves with the GID's netdev as output interface too.
        let oif = format!("net{}", r + 1);
        let got = route_get(a, &[&peer, "from", &mine, "oif", &oif]);
        assert!(got.contains(&via), "rail {r}, oif pinned: {got}");
    }
    // Nothing of the rails went into main: unbound traffic is not steered by them.
    let main = sh(&["ip", "-n", &a.ns.name, "route", "show", "table", "main"]);
    assert!(!main.contains(EAST_WEST), "{main}");

    // Traffic bound to rail 1's address crosses the router on rail 1, both ways.
    let (a1, b1) = (&a.nics[1].peer, &b.nics[1].peer);
    let (a0_before, a1_before) = (router.rx_packets(&a.nics[0].peer), router.rx_packets(a1));
    sh(&[
        "ip",
        "netns",
        "exec",
        &a.ns.name,
        "ping",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        "-I",
        "10.101.0.2",
        "10.101.1.2",
    ]);
    assert!(
        router.rx_packets(a1) >= a1_before + 3,
        "rail 1 carried the pings"
    );
    assert!(router.rx_packets(b1) >= 3, "and the replies");
    assert!(
        router.rx_packets(&a.nics[0].peer) < a0_before + 3,
        "rail 0 carried none of them"
    );

    for pod in &pods {
        for r in 0..2 {
            let conf = pod.conf(r, &data.state(), json!({"rail": true}));
            call("DEL", pod, r).run(&conf).ok();
            call("DEL", pod, r).run(&conf).ok();
        }
        assert!(
            pod.ns.source_rules().is_empty(),
            "{:?}",
            pod.ns.source_rules()
        );
        assert!(pod.ns.link("net1").is_none() && pod.ns.link("net2").is_none());
    }
    assert!(data.records().is_empty());
}

/// The twin: the same fabric without `rail`. Each pod's second rail brings the same east-west
/// route through another gateway into main, which already holds the first's: its ADD fails and
/// rolls back, and main sends the peer's rail-1 address by rail 0.
#[test]
fn the_same_fabric_without_rail_fails_the_second_rail_of_each_pod() {
    let router = Router::new();
    let pods = fabric(&router);
    let data = DataDir::new();
    for pod in &pods {
        call("ADD", pod, 0)
            .run(&pod.conf(0, &data.state(), json!({})))
            .ok();
        let second = pod.conf(1, &data.state(), json!({}));
        let msg = call("ADD", pod, 1).run(&second).err(105);
        assert!(
            msg.contains(EAST_WEST) && msg.contains("File exists"),
            "{msg}"
        );
        assert!(pod.ns.link("net2").is_none(), "the failed rail rolled back");
    }
    let got = route_get(&pods[0], &["10.101.1.2"]);
    assert!(got.contains("via 10.100.0.1 dev net1"), "by rail 0: {got}");
    for pod in &pods {
        call("DEL", pod, 0)
            .run(&pod.conf(0, &data.state(), json!({})))
            .ok();
    }
}

/// Two rails of one pod in one subnet, on one L2 segment (a bridge in a switch netns), and a
/// prober on the same segment: which MACs answer ARP for each rail's address.
struct SameSegment {
    /// Held for its bridge: the segment lives as long as this netns.
    _switch: TestNetns,
    prober: TestNetns,
    parents: Vec<Veth>,
    pod: TestNetns,
    data: DataDir,
}

impl SameSegment {
    fn new() -> SameSegment {
        let switch = TestNetns::new();
        sh(&[
            "ip",
            "-n",
            &switch.name,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
        ]);
        sh(&["ip", "-n", &switch.name, "link", "set", "br0", "up"]);
        let prober = TestNetns::new();
        let plug = |peer: &str| {
            sh(&["ip", "link", "set", peer, "netns", &switch.name]);
            sh(&[
                "ip",
                "-n",
                &switch.name,
                "link",
                "set",
                peer,
                "master",
                "br0",
                "up",
            ]);
        };
        let parents: Vec<Veth> = (0..3).map(|_| Veth::new()).collect();
        for v in &parents {
            plug(&v.peer);
        }
        // The third veth's NIC end is the prober's port.
        let probe = &parents[2].nic;
        sh(&[
            "ip",
            "link",
            "set",
            probe,
            "netns",
            &prober.name,
            "name",
            "eth0",
        ]);
        sh(&[
            "ip",
            "-n",
            &prober.name,
            "addr",
            "add",
            "10.50.0.100/24",
            "dev",
            "eth0",
        ]);
        sh(&["ip", "-n", &prober.name, "link", "set", "eth0", "up"]);
        for v in &parents[..2] {
            sh(&["ip", "link", "set", &v.nic, "up"]);
        }
        SameSegment {
            _switch: switch,
            prober,
            parents,
            pod: TestNetns::new(),
            data: DataDir::new(),
        }
    }

    fn conf(&self, r: usize, rail: bool) -> Value {
        let mut conf = json!({"cniVersion": "1.0.0", "name": format!("seg{r}"), "type": "rdma-ns",
            "mode": "macvlan", "master": self.parents[r].nic, "dataDir": self.data.state(),
            "ipam": {"type": "static", "addresses": [{"address": format!("10.50.0.{}/24", r + 2)}]}});
        if rail {
            conf["rail"] = json!(true);
        }
        conf
    }

    fn call(&self, command: &str, r: usize) -> Call {
        Call::new(command, "segc", &self.pod.path(), &format!("net{}", r + 1))
    }

    /// The MACs that answer the prober's broadcast ARP requests for `ip`.
    fn arp_answers(&self, ip: &str) -> Vec<String> {
        let out = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.prober.name,
                "arping",
                "-b",
                "-c",
                "4",
                "-w",
                "3",
            ])
            .args(["-I", "eth0", ip])
            .output()
            .expect("arping (iputils-arping) runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut macs: Vec<String> = text
            .lines()
            .filter(|l| l.contains("reply from"))
            .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_lowercase()))
            .collect();
        macs.sort();
        macs.dedup();
        macs
    }

    fn mac_of(&self, ifname: &str) -> String {
        self.pod.link(ifname).unwrap()["address"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

#[test]
fn same_subnet_rails_answer_arp_only_for_their_own_address_with_rail_and_the_twin_without() {
    for rail in [true, false] {
        let seg = SameSegment::new();
        for r in 0..2 {
            seg.call("ADD", r).run(&seg.conf(r, rail)).ok();
        }
        let (m1, m2) = (seg.mac_of("net1"), seg.mac_of("net2"));
        for (ip, own, other) in [("10.50.0.2", &m1, &m2), ("10.50.0.3", &m2, &m1)] {
            let answers = seg.arp_answers(ip);
            assert!(
                answers.contains(own),
                "rail={rail} {ip}: its own MAC in {answers:?}"
            );
            if rail {
                assert_eq!(answers, vec![own.clone()], "{ip}: only its own interface");
            } else {
                assert!(
                    answers.contains(other),
                    "the twin: {ip} from both {answers:?}"
                );
            }
        }
        for r in 0..2 {
            seg.call("DEL", r).run(&seg.conf(r, rail)).ok();
        }
        assert!(seg.data.records().is_empty());
    }
}
