//! Root tests of `softRoce` on the host kernel, which has no RDMA (no ib_core): ADD is refused
//! with code 120 after the pod interface was made, and leaves nothing (device home, no child,
//! no lease, no record); the same conf without `softRoce` attaches, so the probes that find
//! nothing left find what an ADD leaves. And the check that tells kernels apart (a UDP socket
//! bound to 4791 in the pod's netns, asked through sock_diag from inside it) against this
//! kernel, with a socket bound there by hand. The VM tier runs the step on kernels with
//! rdma_rxe (tests/vm_soft_roce.rs).

mod common;

use std::io::BufRead;

use common::*;
use rdma_ns::kernel::rdma_ops::{RdmaOps, RealRdma};
use rdma_ns::kernel::{Netns, Ns};
use serde_json::{json, Value};

fn conf(mode: &str, nic: &str, data: &DataDir, soft_roce: bool) -> Value {
    let mut conf = json!({"cniVersion": "1.1.0", "name": "softroce", "type": "rdma-ns",
        "mode": mode, "dataDir": data.state(), "softRoce": soft_roce,
        "ipam": test_ipam("10.97.0.5/24", data)});
    set_parent(&mut conf, mode, nic);
    conf
}

#[test]
fn soft_roce_is_refused_on_a_kernel_without_rdma_and_leaves_nothing() {
    for mode in ["move", "macvlan"] {
        let (ns, veth, data) = veth_pod();
        let with = conf(mode, &veth.nic, &data, true);
        let before = host_view(&veth.nic);
        let msg = Call::new("ADD", "sr1", &ns.path(), "net1")
            .run(&with)
            .err(120);
        for word in ["softRoce", "no RDMA netlink", "modprobe rdma_rxe"] {
            assert!(msg.contains(word), "{mode}: {word:?} not in {msg}");
        }
        back_in_host(&veth.nic, &before).unwrap_or_else(|e| panic!("{mode}: {e}"));
        child_and_record_gone(&ns, "net1", &veth.nic, &data)
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(test_ipam_leases(&data), 0, "{mode}: the lease was released");

        // The presence twin: without softRoce the same ADD attaches, and the same probes see
        // the pod interface, the lease and the record.
        let without = conf(mode, &veth.nic, &data, false);
        Call::new("ADD", "sr1", &ns.path(), "net1")
            .run(&without)
            .ok();
        assert!(ns.link("net1").is_some(), "{mode}: the pod interface");
        assert_eq!(test_ipam_leases(&data), 1, "{mode}: the lease");
        assert_eq!(data.records().len(), 1, "{mode}: the record");
        Call::new("DEL", "sr1", &ns.path(), "net1")
            .run(&without)
            .ok();
        back_in_host(&veth.nic, &before).unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
}

/// A process in `ns` that binds UDP `port` on 0.0.0.0 and holds it until dropped.
struct BoundPort(std::process::Child);

impl BoundPort {
    fn new(ns: &TestNetns, port: u16) -> BoundPort {
        let script = format!(
            "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.bind(('0.0.0.0',{port}))\nprint('bound',flush=True)\nsys.stdin.read()"
        );
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.name, "python3", "-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 in the netns");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "bound", "the socket was bound");
        BoundPort(child)
    }
}

impl Drop for BoundPort {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_udp_port_bound_in_a_netns_is_found_from_inside_it_only() {
    let ns = TestNetns::new();
    let other = TestNetns::new();
    let rdma = RealRdma::default();
    let netns = Netns::open(std::path::Path::new(&ns.path())).unwrap();
    let elsewhere = Netns::open(std::path::Path::new(&other.path())).unwrap();
    let bound = |n: &Netns| rdma.udp_port_bound(Ns::Pod(n), 4791).unwrap();
    assert!(!bound(&netns), "nothing is bound before");
    let _socket = BoundPort::new(&ns, 4791);
    assert!(bound(&netns), "the socket bound in the netns is found");
    assert!(!bound(&elsewhere), "not from another netns");
    assert!(
        !rdma.udp_port_bound(Ns::Pod(&netns), 4792).unwrap(),
        "another port is not"
    );
}
