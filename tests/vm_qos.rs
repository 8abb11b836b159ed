//! VM tier (Linux 7): a network's `roceQos` on the wire. Pods attached by the plugin with
//! `"softRoce": true` (rxe between pods needs 7.1), each tool run pod to pod while tcpdump
//! captures UDP 4791 on the pod's interface; the IP header's TOS byte (IPv6: traffic class) of
//! every RoCE packet, in both directions, must be the one the network's QoS makes:
//!
//! - `ucx_perftest` started by `rdma-ns env --exec` (UCX reads UCX_IB_TRAFFIC_CLASS);
//! - `ib_write_bw` given env's values (`-x` NCCL_IB_GID_INDEX, `--tclass` NCCL_IB_TC);
//! - `rping`, which sets no traffic class: RDMA CM's default, which the plugin wrote into the
//!   configfs of the pod's own Soft-RoCE device;
//! - controls: a second network with another DSCP whose pods run at the same time, each pair
//!   with its own byte; a network without roceQos, where UCX sends its default 106 and
//!   perftest 0; `ibv_rc_pingpong`, which has no option, 0 on a roceQos network too;
//! - one IPv6 pair, through the traffic class field;
//! - exclusive netns mode, where the device is moved into the pod and the default is written
//!   after the move, and RDMA CM does not work on a moved rxe device (docs/soft-roce.md, "RDMA CM does not
//!   work on a moved rxe device"): asserted as it is.
//!
//! Nothing rewrites the byte on the way: each pod has no netfilter rule and only its
//! interface's default qdisc, which the tests check. Every verbs tool runs under `timeout -s
//! KILL`; nothing is timed (TCG).

mod common;
mod vm_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{state_dir, Call, PLUGIN};
use serde_json::{json, Value};
use vm_support::{
    both_ok, in_pod, json_of, rdma_cm_listening, require_per_netns_rxe, require_vm, run,
    server_and_client, tcp_listening, text, wait_until, Budget, Exclusive,
};

/// A bound for each verbs tool, in seconds (TCG: generous, only a hang reaches it).
const TOOL_TIMEOUT: &str = "120";

/// A network and the traffic class byte its pods must send.
struct Net {
    name: &'static str,
    /// `roceQos` of the conf; None for the control network.
    qos: Option<Value>,
    /// The byte: dscp << 2 | ECT(0) with ecn.
    byte: Option<u8>,
}

/// DSCP 24 without ECN, priority 3: 96 (Spectrum-X's class).
fn net_a() -> Net {
    Net {
        name: "qos-a",
        qos: Some(json!({"dscp": 24, "ecn": false, "priority": 3})),
        byte: Some(96),
    }
}

/// DSCP 46 with ECN, priority 5: 186.
fn net_b() -> Net {
    Net {
        name: "qos-b",
        qos: Some(json!({"dscp": 46, "ecn": true, "priority": 5})),
        byte: Some(186),
    }
}

/// No roceQos.
fn net_plain() -> Net {
    Net {
        name: "qos-none",
        qos: None,
        byte: None,
    }
}

/// DSCP 34 with ECN, priority 4: 138, for the IPv6 pair.
fn net_v6() -> Net {
    Net {
        name: "qos-v6",
        qos: Some(json!({"dscp": 34, "ecn": true, "priority": 4})),
        byte: Some(138),
    }
}

/// configfs at /sys/kernel/config, which the VM does not mount; unmounted on drop when this
/// mounted it.
struct Configfs(bool);

impl Configfs {
    fn mount() -> Configfs {
        let mounted = Command::new("mountpoint")
            .args(["-q", "/sys/kernel/config"])
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            run("mount", &["-t", "configfs", "none", "/sys/kernel/config"]);
        }
        assert!(
            PathBuf::from("/sys/kernel/config/rdma_cm").is_dir(),
            "no rdma_cm in configfs (rdma_ucm loads rdma_cm)"
        );
        Configfs(!mounted)
    }
}

impl Drop for Configfs {
    fn drop(&mut self) {
        if self.0 {
            let _ = Command::new("umount").arg("/sys/kernel/config").status();
        }
    }
}

/// How a pod gets its interface.
#[derive(Clone, Copy)]
enum Shape {
    /// A macvlan child of rxev1 (no ib device of its own, so RDMA CM binds the pod's).
    Macvlan,
    /// The veth end `nic` moved into the pod.
    Move { nic: &'static str },
}

/// One pod attached by the plugin with a Soft-RoCE device of its own.
struct Pod {
    netns: &'static str,
    ip: &'static str,
    conf: Value,
}

impl Pod {
    /// `ip` with its prefix (`10.94.0.1/24`, `fd00:94::1/64`).
    fn new(netns: &'static str, ip: &'static str, prefix: u8, net: &Net, shape: Shape) -> Pod {
        run("ip", &["netns", "add", netns]);
        // Addresses usable at once: no DAD holding an IPv6 GID back.
        for key in ["all", "default"] {
            let dad = format!("net.ipv6.conf.{key}.accept_dad=0");
            in_pod(netns, "sysctl", &["-qw", &dad]);
        }
        let mut conf = json!({"cniVersion": "1.0.0", "name": net.name, "type": "rdma-ns",
            "softRoce": true, "dataDir": state_dir(), "logLevel": "info",
            "ipam": {"type": "static", "addresses": [{"address": format!("{ip}/{prefix}")}]}});
        if let Some(q) = &net.qos {
            conf["roceQos"] = q.clone();
        }
        match shape {
            Shape::Macvlan => {
                conf["mode"] = json!("macvlan");
                conf["master"] = json!("rxev1");
            }
            Shape::Move { nic } => {
                conf["mode"] = json!("move");
                conf["device"] = json!(nic);
            }
        }
        Pod { netns, ip, conf }
    }

    fn call(&self, command: &str) -> Call {
        Call::new(
            command,
            self.netns,
            &format!("/run/netns/{}", self.netns),
            "net1",
        )
    }

    /// ADD; its result, which CHECK is given as prevResult (static IPAM checks against it).
    fn add(&mut self) {
        let result = self.call("ADD").run(&self.conf).ok().json();
        self.conf["prevResult"] = result;
    }

    /// CHECK with ADD's result, which must pass.
    fn check(&self) {
        self.call("CHECK").run(&self.conf).ok();
    }

    /// What `rdma-ns env` names in the pod, from the pod's own view (its alias and tables).
    fn env(&self) -> Value {
        json_of(&in_pod(self.netns, PLUGIN, &["env", "--format", "json"]))
    }

    /// The pod's device and GID index, as env names them.
    fn view(&self) -> (String, String) {
        view_of(&self.env())
    }
}

/// The device and GID index of env's document.
fn view_of(doc: &Value) -> (String, String) {
    let f = &doc["interfaces"][0];
    let dev = f["ibdev"].as_str().expect("env names a device").to_string();
    (dev, f["gidIndex"].to_string())
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.call("DEL").run(&self.conf);
        let _ = Command::new("ip")
            .args(["netns", "delete", self.netns])
            .output();
    }
}

/// A veth pair in the host whose ends move into two pods.
struct VethPair(&'static str, &'static str);

impl VethPair {
    fn new(a: &'static str, b: &'static str) -> VethPair {
        run("ip", &["link", "add", a, "type", "veth", "peer", "name", b]);
        run("ip", &["link", "set", b, "up"]);
        VethPair(a, b)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for end in [self.0, self.1] {
            let _ = Command::new("ip").args(["link", "del", end]).output();
        }
    }
}

/// The pod interface carries the bytes unchanged: no netfilter rule in the pod, IPv4 or IPv6,
/// and no qdisc or filter but the interface's default one.
fn nothing_rewrites_the_byte(pod: &Pod) {
    for save in ["iptables-save", "ip6tables-save"] {
        let rules = in_pod(pod.netns, save, &[]);
        let rules: Vec<&str> = rules.lines().filter(|l| l.starts_with('-')).collect();
        assert!(rules.is_empty(), "{}: {save}: {rules:?}", pod.netns);
    }
    let qdiscs = in_pod(pod.netns, "tc", &["qdisc", "show", "dev", "net1"]);
    assert_eq!(
        qdiscs.lines().count(),
        1,
        "{}: one default qdisc: {qdiscs}",
        pod.netns
    );
    assert!(qdiscs.contains("noqueue"), "{}: {qdiscs}", pod.netns);
    for hook in ["ingress", "egress"] {
        let f = in_pod(pod.netns, "tc", &["filter", "show", "dev", "net1", hook]);
        assert!(f.trim().is_empty(), "{}: tc filter {hook}: {f}", pod.netns);
    }
}

/// tcpdump on the pod's net1 (RoCE v2, UDP 4791), into a file of the case's scratch dir.
struct Capture {
    child: Option<Child>,
    file: PathBuf,
    what: String,
}

impl Capture {
    fn start(pod: &Pod, what: &str) -> Capture {
        let file = scratch().join(format!("{}-{}.pcap", pod.netns, what.replace(' ', "-")));
        let _ = std::fs::remove_file(&file);
        let child = Command::new("ip")
            .args([
                "netns", "exec", pod.netns, "tcpdump", "-i", "net1", "-U", "-n", "-w",
            ])
            .arg(&file)
            .args(["udp", "port", "4791"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump runs");
        // The file gets its header when tcpdump has opened the interface.
        wait_until(
            &format!("tcpdump on {}", pod.netns),
            Budget::Checks {
                checks: 300,
                every: Duration::from_millis(100),
            },
            || std::fs::metadata(&file).is_ok_and(|m| m.len() >= 24),
        );
        Capture {
            child: Some(child),
            file,
            what: format!("{} on {}", what, pod.netns),
        }
    }

    /// Stops tcpdump (SIGINT flushes the file) and reads what it captured. Without
    /// `--immediate-mode` tcpdump left packets of a short run in its ring buffer ("0 packets
    /// captured, 100 packets received by filter" on 7.3); with it, a moment after the tool
    /// ended lets the last ACK through.
    fn stop(mut self) -> Packets {
        std::thread::sleep(Duration::from_secs(1));
        let child = self.child.take().unwrap();
        run("kill", &["-INT", &child.id().to_string()]);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}: tcpdump: {}",
            self.what,
            text(&out)
        );
        Packets::read(&self.file, &self.what)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn scratch() -> PathBuf {
    PathBuf::from(std::env::var("RDMA_NS_VM_SCRATCH").unwrap_or_else(|_| "/tmp".into()))
}

/// The RoCE v2 packets of a capture, by direction: the TOS bytes (IPv4) or traffic classes
/// (IPv6) seen, and how many packets.
struct Packets {
    what: String,
    by_direction: BTreeMap<(IpAddr, IpAddr), (BTreeSet<u8>, usize)>,
}

impl Packets {
    /// A pcap file (tcpdump -w: the classic format, Ethernet frames).
    fn read(path: &PathBuf, what: &str) -> Packets {
        let data = std::fs::read(path).unwrap();
        assert!(data.len() >= 24, "{what}: no pcap header");
        let le = match &data[..4] {
            [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
            [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
            other => panic!("{what}: not a pcap file ({other:02x?})"),
        };
        let u32_at = |b: &[u8]| {
            let a: [u8; 4] = b[..4].try_into().unwrap();
            if le {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            }
        };
        assert_eq!(u32_at(&data[20..]), 1, "{what}: link type Ethernet");
        let mut out = Packets {
            what: what.to_string(),
            by_direction: BTreeMap::new(),
        };
        let mut at = 24;
        while at + 16 <= data.len() {
            let len = u32_at(&data[at + 8..]) as usize;
            let frame = &data[at + 16..(at + 16 + len).min(data.len())];
            out.add(frame);
            at += 16 + len;
        }
        out
    }

    fn add(&mut self, frame: &[u8]) {
        let Some(ethertype) = frame.get(12..14) else {
            return;
        };
        let ip = &frame[14..];
        let (byte, src, dst, udp) = match ethertype {
            [0x08, 0x00] if ip.len() >= 28 => {
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                let v4 = |b: &[u8]| IpAddr::from(<[u8; 4]>::try_from(b).unwrap());
                (
                    ip[1],
                    v4(&ip[12..16]),
                    v4(&ip[16..20]),
                    ip.get(ihl..ihl + 4),
                )
            }
            [0x86, 0xdd] if ip.len() >= 48 => {
                let v6 = |b: &[u8]| IpAddr::from(<[u8; 16]>::try_from(b).unwrap());
                let tc = (ip[0] & 0x0f) << 4 | ip[1] >> 4;
                (tc, v6(&ip[8..24]), v6(&ip[24..40]), ip.get(40..44))
            }
            _ => return,
        };
        // RoCE v2's destination port; rxe's source port is a hash of the QP.
        let Some(udp) = udp.filter(|u| u16::from_be_bytes([u[2], u[3]]) == 4791) else {
            return;
        };
        let _ = udp;
        let entry = self.by_direction.entry((src, dst)).or_default();
        entry.0.insert(byte);
        entry.1 += 1;
    }

    /// Packets went both ways between `a` and `b`, and every one carried `byte`.
    fn assert_only(&self, a: &str, b: &str, byte: u8) {
        let (a, b): (IpAddr, IpAddr) = (a.parse().unwrap(), b.parse().unwrap());
        for dir in [(a, b), (b, a)] {
            let (bytes, count) = self.by_direction.get(&dir).unwrap_or_else(|| {
                panic!(
                    "{}: no RoCE packet {} -> {}: {self}",
                    self.what, dir.0, dir.1
                )
            });
            assert!(*count > 0);
            assert_eq!(
                bytes,
                &BTreeSet::from([byte]),
                "{}: {} -> {}: {self}",
                self.what,
                dir.0,
                dir.1
            );
        }
        // Straight to the case log, past libtest's capture of a passing test's output: what
        // was seen on the wire is the point of the case.
        let seen = format!("on the wire: {}: {self}\n", self.what);
        let _ = std::io::Write::write_all(&mut std::io::stderr(), seen.as_bytes());
    }
}

impl std::fmt::Display for Packets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for ((src, dst), (bytes, count)) in &self.by_direction {
            write!(f, "[{src} -> {dst}: {count} packets, TOS {bytes:?}] ")?;
        }
        Ok(())
    }
}

const UCX_PORT_A: &str = "13361";
const UCX_PORT_B: &str = "13362";
const UCX_PORT_N: &str = "13363";
const PERF_PORT_A: &str = "18561";
const PERF_PORT_B: &str = "18562";
const PERF_PORT_N: &str = "18564";
const PINGPONG_PORT: &str = "18563";

/// `ucx_perftest` from `client` to `server`, each started by `rdma-ns env --exec` in its pod;
/// UCX's info log must show the traffic class env set (none for a network without roceQos).
fn ucx(client: &Pod, server: &Pod, port: &'static str, byte: Option<u8>) -> (Output, Output) {
    let exec = |rest: &[&str]| -> Vec<String> {
        let head = ["env", "UCX_LOG_LEVEL=info", PLUGIN, "env", "--exec", "--"];
        let tool = ["ucx_perftest", "-p", port];
        head.iter()
            .chain(&tool)
            .chain(rest)
            .map(|s| s.to_string())
            .collect()
    };
    let client_args = exec(&[
        server.ip, "-t", "tag_bw", "-n", "20", "-s", "4096", "-w", "2",
    ]);
    let out = server_and_client(
        TOOL_TIMEOUT,
        server.netns,
        &strs(&exec(&[])),
        || tcp_listening(server.netns, port.parse().unwrap()),
        client.netns,
        &strs(&client_args),
    );
    both_ok("ucx_perftest", &out);
    let log = text(&out.1);
    match byte {
        Some(b) => assert!(log.contains(&format!("UCX_IB_TRAFFIC_CLASS={b}")), "{log}"),
        None => assert!(!log.contains("UCX_IB_TRAFFIC_CLASS"), "{log}"),
    }
    out
}

/// `ib_write_bw` from `client` to `server` with env's GID index and, when env gives one,
/// its traffic class (`--tclass`), on both sides.
fn perftest(client: &Pod, server: &Pod, port: &'static str) -> (Output, Output) {
    let args = |pod: &Pod, peer: Option<&str>| -> Vec<String> {
        let doc = pod.env();
        let (dev, gid) = view_of(&doc);
        let mut a: Vec<String> = ["ib_write_bw", "-d", &dev, "-x", &gid, "-p", port]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if let Some(tc) = doc["env"]["NCCL_IB_TC"].as_str() {
            a.push(format!("--tclass={tc}"));
        }
        a.extend(["-n", "10", "-s", "4096", "-F"].map(String::from));
        a.extend(peer.map(String::from));
        a
    };
    let (s, c) = (args(server, None), args(client, Some(server.ip)));
    let out = server_and_client(
        TOOL_TIMEOUT,
        server.netns,
        &strs(&s),
        || tcp_listening(server.netns, port.parse().unwrap()),
        client.netns,
        &strs(&c),
    );
    both_ok("ib_write_bw", &out);
    out
}

/// `rping` from `client` to `server`: no traffic class of its own, so RDMA CM's default.
fn rping(client: &Pod, server: &Pod) -> (Output, Output) {
    server_and_client(
        TOOL_TIMEOUT,
        server.netns,
        &["rping", "-s", "-a", server.ip, "-C", "3"],
        || rdma_cm_listening(server.netns),
        client.netns,
        &["rping", "-c", "-v", "-a", server.ip, "-C", "3"],
    )
}

/// `ibv_rc_pingpong`, which has no traffic class option.
fn rc_pingpong(client: &Pod, server: &Pod) -> (Output, Output) {
    let (sd, sg) = server.view();
    let (cd, cg) = client.view();
    let out = server_and_client(
        TOOL_TIMEOUT,
        server.netns,
        &[
            "ibv_rc_pingpong",
            "-d",
            &sd,
            "-g",
            &sg,
            "-p",
            PINGPONG_PORT,
            "-n",
            "10",
        ],
        || tcp_listening(server.netns, PINGPONG_PORT.parse().unwrap()),
        client.netns,
        &[
            "ibv_rc_pingpong",
            "-d",
            &cd,
            "-g",
            &cg,
            "-p",
            PINGPONG_PORT,
            "-n",
            "10",
            server.ip,
        ],
    );
    both_ok("ibv_rc_pingpong", &out);
    out
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `tool` between each pair, all at once, each captured on its client's interface; the
/// captures in the pairs' order. `tool` gets the pair's position.
fn at_once(
    what: &str,
    pairs: &[(&Pod, &Pod)],
    tool: impl Fn(&Pod, &Pod, usize) + Sync,
) -> Vec<Packets> {
    let captures: Vec<Capture> = pairs.iter().map(|(c, _)| Capture::start(c, what)).collect();
    std::thread::scope(|s| {
        let runs: Vec<_> = pairs
            .iter()
            .enumerate()
            .map(|(i, (client, server))| {
                let tool = &tool;
                s.spawn(move || tool(client, server, i))
            })
            .collect();
        for run in runs {
            run.join().expect("a pair's run");
        }
    });
    captures.into_iter().map(Capture::stop).collect()
}

/// `tool` between one pair, captured on the client's interface.
fn alone(what: &str, client: &Pod, server: &Pod, tool: impl Fn(&Pod, &Pod)) -> Packets {
    let capture = Capture::start(client, what);
    tool(client, server);
    capture.stop()
}

/// The variables env gives for a network's QoS, from the pod's alias.
fn assert_env_qos(pod: &Pod, net: &Net) {
    let doc = pod.env();
    let env = &doc["env"];
    let (tc, sl) = match (&net.qos, net.byte) {
        (Some(q), Some(b)) => (Some(b.to_string()), Some(q["priority"].to_string())),
        _ => (None, None),
    };
    let value = |name: &str| env[name].as_str().map(str::to_string);
    assert_eq!(value("NCCL_IB_TC"), tc, "{}: {doc}", pod.netns);
    assert_eq!(value("UCX_IB_TRAFFIC_CLASS"), tc, "{}: {doc}", pod.netns);
    assert_eq!(value("NCCL_IB_SL"), sl, "{}: {doc}", pod.netns);
    assert_eq!(value("UCX_IB_SL"), sl, "{}: {doc}", pod.netns);
    assert_eq!(value("NCCL_IB_FIFO_TC"), None, "{doc}");
}

/// RDMA CM's default of the pod's own device, read in configfs under its name; None without
/// a group.
fn cm_default(pod: &Pod) -> Option<u8> {
    let (dev, _) = pod.view();
    let path = format!("/sys/kernel/config/rdma_cm/{dev}/ports/1/default_roce_tos");
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().parse().unwrap())
}

/// The configfs groups rdma-ns made for Soft-RoCE devices.
fn rxe_groups() -> Vec<String> {
    std::fs::read_dir("/sys/kernel/config/rdma_cm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("rxe_"))
                .collect()
        })
        .unwrap_or_default()
}

fn soft_roce_devices() -> Vec<String> {
    run("rdma", &["dev"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter(|d| d.starts_with("rxe_"))
        .map(str::to_string)
        .collect()
}

/// Without configfs a pod's own device cannot get its default: ADD is refused with 120 saying
/// what to mount, and leaves nothing.
fn refused_without_configfs(net: &Net) {
    let mounted = Command::new("mountpoint")
        .args(["-q", "/sys/kernel/config"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        !mounted,
        "the VM mounts no configfs: this refusal is its twin"
    );
    let pod = Pod::new("qcfg", "10.94.0.9", 24, net, Shape::Macvlan);
    let msg = pod.call("ADD").run(&pod.conf).err(120);
    assert!(
        msg.contains("configfs is not mounted") && msg.contains("mount -t configfs"),
        "{msg}"
    );
    assert_eq!(soft_roce_devices(), Vec::<String>::new());
    assert!(!vm_support::record_exists(net.name, "qcfg", "net1"));
}

#[test]
fn vm_qos_shared_mode_pods_send_their_networks_byte_and_the_controls_theirs() {
    require_vm();
    require_per_netns_rxe();
    let (a, b, plain) = (net_a(), net_b(), net_plain());
    refused_without_configfs(&a);
    let _configfs = Configfs::mount();
    let mut pods = [
        Pod::new("qa1", "10.94.0.1", 24, &a, Shape::Macvlan),
        Pod::new("qa2", "10.94.0.2", 24, &a, Shape::Macvlan),
        Pod::new("qb1", "10.94.0.3", 24, &b, Shape::Macvlan),
        Pod::new("qb2", "10.94.0.4", 24, &b, Shape::Macvlan),
        Pod::new("qn1", "10.94.0.5", 24, &plain, Shape::Macvlan),
        Pod::new("qn2", "10.94.0.6", 24, &plain, Shape::Macvlan),
    ];
    for p in &mut pods {
        p.add();
    }
    let [a1, a2, b1, b2, n1, n2] = &pods;
    for client in [a1, b1, n1] {
        nothing_rewrites_the_byte(client);
    }
    for (pod, net) in [(a1, &a), (b1, &b), (n1, &plain)] {
        assert_env_qos(pod, net);
        pod.check();
    }
    // The pods' own devices got their network's RDMA CM default; the control's none.
    assert_eq!(
        (cm_default(a1), cm_default(b1), cm_default(n1)),
        (Some(96), Some(186), None)
    );

    // Both networks and the control at once: each pair its own byte.
    let pairs = [(a1, a2), (b1, b2), (n1, n2)];
    let ucx_ports = [UCX_PORT_A, UCX_PORT_B, UCX_PORT_N];
    let caught = at_once("ucx", &pairs, |c, s, i| {
        drop(ucx(c, s, ucx_ports[i], [Some(96), Some(186), None][i]))
    });
    let bytes = [96, 186, 106];
    for ((c, s), (p, byte)) in pairs.iter().zip(caught.iter().zip(bytes)) {
        p.assert_only(c.ip, s.ip, byte);
    }
    let perf_ports = [PERF_PORT_A, PERF_PORT_B, PERF_PORT_N];
    let caught = at_once("perftest", &pairs, |c, s, i| {
        drop(perftest(c, s, perf_ports[i]))
    });
    for ((c, s), (p, byte)) in pairs.iter().zip(caught.iter().zip([96, 186, 0])) {
        p.assert_only(c.ip, s.ip, byte);
    }
    let caught = at_once("rping", &pairs[..2], |c, s, _| {
        both_ok("rping", &rping(c, s))
    });
    caught[0].assert_only(a1.ip, a2.ip, 96);
    caught[1].assert_only(b1.ip, b2.ip, 186);

    let p = alone("rc_pingpong", a1, a2, |c, s| drop(rc_pingpong(c, s)));
    p.assert_only(a1.ip, a2.ip, 0);

    drop(pods);
    assert_eq!(soft_roce_devices(), Vec::<String>::new());
    assert_eq!(
        rxe_groups(),
        Vec::<String>::new(),
        "DEL removed the groups it made"
    );
}

#[test]
fn vm_qos_an_ipv6_pair_sends_its_byte_in_the_traffic_class() {
    require_vm();
    require_per_netns_rxe();
    let v6 = net_v6();
    let _configfs = Configfs::mount();
    let mut pods = [
        Pod::new("qv1", "fd00:94::1", 64, &v6, Shape::Macvlan),
        Pod::new("qv2", "fd00:94::2", 64, &v6, Shape::Macvlan),
    ];
    for p in &mut pods {
        p.add();
        nothing_rewrites_the_byte(p);
    }
    let [v1, v2] = &pods;
    assert_env_qos(v1, &v6);
    let doc = v1.env();
    assert_eq!(
        doc["interfaces"][0]["ip"], "fd00:94::1",
        "an IPv6 GID: {doc}"
    );
    // rping, RDMA CM over IPv6: perftest 4.5 and UCX 1.13 make their own connection over IPv4
    // only ("Address family for hostname not supported" for fd00:94::2).
    let p = alone("rping6", v1, v2, |c, s| both_ok("rping", &rping(c, s)));
    p.assert_only(v1.ip, v2.ip, 138);
}

#[test]
fn vm_qos_exclusive_mode_writes_the_moved_devices_default_and_perftest_sends_the_byte() {
    require_vm();
    require_per_netns_rxe();
    let a = net_a();
    let _configfs = Configfs::mount();
    let _exclusive = Exclusive::switch();
    let _veth = VethPair::new("qxa", "qxb");
    let mut pods = [
        Pod::new("qe1", "10.94.1.1", 24, &a, Shape::Move { nic: "qxa" }),
        Pod::new("qe2", "10.94.1.2", 24, &a, Shape::Move { nic: "qxb" }),
    ];
    for p in &mut pods {
        p.add();
        nothing_rewrites_the_byte(p);
    }
    let [e1, e2] = &pods;
    // The device is the pod's: the host does not see it, and its default, written after the
    // move (which resets it), reads the network's byte under the device's name.
    let (dev, _) = e1.view();
    assert!(!run("rdma", &["dev"]).contains(&dev), "{dev} is in the pod");
    assert_eq!(cm_default(e1), Some(96));
    assert_env_qos(e1, &a);
    e1.check();
    let p = alone("perftest", e1, e2, |c, s| drop(perftest(c, s, PERF_PORT_A)));
    p.assert_only(e1.ip, e2.ip, 96);
    // RDMA CM does not work on a moved rxe device (its QP1 cannot be made again after the
    // move): rping fails before a RoCE packet leaves, whatever the default.
    let p = alone("rping", e1, e2, |c, s| {
        let (server, client) = rping(c, s);
        assert!(!client.status.success(), "rping client: {}", text(&client));
        assert!(text(&client).contains("rdma_connect"), "{}", text(&client));
        drop(server);
    });
    assert!(p.by_direction.is_empty(), "{}: {p}", p.what);
    drop(pods);
    assert_eq!(rxe_groups(), Vec::<String>::new());
}

/// The RDMA CM scenarios the fake host is held to (src/kernel/conformance.rs), here against
/// Linux 7's configfs: on a rxe device made in the host and moved into a pod and back, in
/// exclusive netns mode. Before them what the node offers: no configfs (the VM mounts none),
/// then configfs without RDMA CM's directory (rdma_cm unloaded), then both.
#[test]
fn vm_qos_rdma_cm_configfs_behaves_as_the_conformance_scenarios_say() {
    use rdma_ns::kernel::conformance;
    use rdma_ns::kernel::rdma_cm::CmFs;
    use rdma_ns::kernel::rdma_ops::{RdmaOps, RealRdma};
    use rdma_ns::kernel::{Netns, Ns};
    require_vm();
    require_per_netns_rxe();
    let rdma = RealRdma::default();
    assert_eq!(rdma.cm_availability(), CmFs::NoConfigfs);
    let configfs = Configfs::mount();
    assert_eq!(rdma.cm_availability(), CmFs::Ready);
    run("modprobe", &["-r", "rdma_ucm", "rdma_cm"]);
    let without = rdma.cm_availability();
    run("modprobe", &["rdma_ucm"]);
    assert_eq!(without, CmFs::NoRdmaCm);
    assert_eq!(rdma.cm_availability(), CmFs::Ready);

    let _exclusive = Exclusive::switch();
    let _veth = VethPair::new("qca", "qcb");
    run("ip", &["link", "set", "qca", "up"]);
    run(
        "rdma",
        &["link", "add", "rxe_qc", "type", "rxe", "netdev", "qca"],
    );
    run("ip", &["netns", "add", "qcpod"]);
    let pod = Netns::open(std::path::Path::new("/run/netns/qcpod")).unwrap();
    let outcome = conformance::rdma_cm_defaults_stay_with_the_device_until_it_moves(
        &rdma,
        Ns::Pod(&pod),
        "rxe_qc",
    )
    .and_then(|()| conformance::a_deleted_devices_group_reads_enodev(&rdma, "rxe_qc"));
    let _ = Command::new("rdma")
        .args(["link", "delete", "rxe_qc"])
        .output();
    let _ = Command::new("ip")
        .args(["netns", "delete", "qcpod"])
        .output();
    drop(configfs);
    outcome.unwrap();
}

/// A macvlan pod on rxev0, whose rxe0 every pod shares: ADD writes nothing on it and warns
/// that its default differs from the network's; `doctor` says the same, and N/A for DCB on the
/// veth; both agree once the node sets the default.
#[test]
fn vm_qos_a_shared_devices_default_is_the_nodes_and_add_and_doctor_say_when_it_differs() {
    require_vm();
    let a = net_a();
    let _configfs = Configfs::mount();
    run("mkdir", &["-p", "/sys/kernel/config/rdma_cm/rxe0"]);
    let tos = "/sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos";
    std::fs::write(tos, "0").unwrap();
    let mut pod = Pod::new("qs1", "10.94.2.1", 24, &a, Shape::Macvlan);
    pod.conf["master"] = json!("rxev0");
    pod.conf.as_object_mut().unwrap().remove("softRoce");
    let added = pod.call("ADD").run(&pod.conf);
    added.ok();
    assert!(
        added.stderr.contains("rxe0 port 1 is shared with the node, and its RDMA CM default ToS is 0, not network qos-a's traffic class 96"),
        "{}",
        added.stderr
    );
    assert_eq!(
        run("cat", &[tos]).trim(),
        "0",
        "nothing written on a shared device"
    );
    assert_env_qos(&pod, &a);
    let conf_file = scratch().join("qos-shared.conflist");
    std::fs::write(
        &conf_file,
        json!({"cniVersion": "1.0.0", "name": a.name, "plugins": [pod.conf.clone()]}).to_string(),
    )
    .unwrap();
    let doctor = |severity_of_default: &str| {
        let out = Command::new(PLUGIN)
            .args(["doctor", "--json", "--conf"])
            .arg(&conf_file)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let qos: Vec<&Value> = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "roce-qos")
            .collect();
        let status = |object: &str| {
            qos.iter()
                .find(|f| f["object"].as_str().unwrap().starts_with(object))
                .map(|f| f["status"].as_str().unwrap().to_string())
        };
        assert_eq!(status("rxev0 ").as_deref(), Some("N/A"), "{qos:#?}");
        assert_eq!(
            status("rxe0/1 ").as_deref(),
            Some(severity_of_default),
            "{qos:#?}"
        );
    };
    doctor("WARN");
    std::fs::write(tos, "96").unwrap();
    doctor("OK");
    std::fs::write(tos, "0").unwrap();
    drop(pod);
    let _ = Command::new("rmdir")
        .arg("/sys/kernel/config/rdma_cm/rxe0")
        .status();
}
