//! VM tier: `"softRoce": true` on real rxe. On Linux 7 (7.1 and later: rxe opens its UDP socket
//! in the netns of the device's netdev) two pods attached by the plugin, exec'd as a runtime
//! does, each get a rxe device of their own on their interface, and RDMA runs between them over
//! exactly what `rdma-ns env` names in each pod: the probe's ping-pong and verified WRITE
//! stream, `ibv_rc_pingpong`, RDMA CM (`rping`, through /dev/infiniband/rdma_cm), and UCX's
//! `ucx_perftest` started by `rdma-ns env --exec`. Shapes: macvlan children of rxev0 and moved
//! veth ends, in shared netns mode, and moved veth ends in exclusive netns mode, where each pod
//! sees only its own device and RDMA CM fails (below). Then the soft-roce step's kill points,
//! and on 6.1 the refusal.
//!
//! RDMA CM on a moved rxe device: moving an ib device between netns unregisters and
//! re-registers its clients; the MAD layer then creates the port's GSI QP (QP1) again, which
//! rxe refuses ("Couldn't create ib_mad QP1" in the kernel log), so the CM cannot send. The
//! exclusive-mode test asserts that failure and its log line: a kernel that fixes it fails the
//! test, which then says so.
//!
//! Every verbs tool runs under `timeout -s KILL` (a hung `ibv_rc_pingpong` ignores SIGTERM).
//! Nothing is timed (TCG).

mod common;
mod vm_support;

use std::process::{Command, Output};

use common::{state_dir, Call, PLUGIN};
use serde_json::{json, Value};
use vm_support::{
    both_ok, in_pod, json_of, kernel_release, kernel_version, probe_bin, probe_exchange_args,
    rdma_cm_listening, record, record_exists, require_per_netns_rxe, require_vm, run, run_in,
    server_and_client, tcp_listening, text, verbs_gid_index, Exclusive, VethPair,
};

/// The network of every attachment here (the record's directory in the state dir).
const NETWORK: &str = "softroce";

/// A bound for each verbs tool, in seconds (TCG: generous, only a hang reaches it).
const TOOL_TIMEOUT: &str = "90";

/// How a pod gets its interface.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// A macvlan child of rxev1 (whose own MTU, 1500, it keeps): the veth without an ib
    /// device. rxev0's rxe0 would hold the GIDs of its macvlan children too, and RDMA CM, which
    /// picks a device by address, could bind there instead of the pod's own.
    Macvlan,
    /// One end of a veth pair moved into the pod, at this MTU.
    Move { mtu: u32 },
}

/// One pod attached by the plugin: its netns, address and conf.
struct Pod {
    netns: &'static str,
    ip: &'static str,
    conf: Value,
}

impl Pod {
    fn new(netns: &'static str, ip: &'static str, shape: Shape, nic: &str) -> Pod {
        run("ip", &["netns", "add", netns]);
        let mut conf = json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "rdma-ns",
            "softRoce": true, "dataDir": state_dir(), "logLevel": "debug",
            "ipam": {"type": "static", "addresses": [{"address": format!("{ip}/24")}]}});
        match shape {
            Shape::Macvlan => {
                conf["mode"] = json!("macvlan");
                conf["master"] = json!("rxev1");
            }
            Shape::Move { mtu } => {
                conf["mode"] = json!("move");
                conf["device"] = json!(nic);
                conf["mtu"] = json!(mtu);
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

    /// Whether the attachment has a record.
    fn has_record(&self) -> bool {
        record_exists(NETWORK, self.netns, "net1")
    }

    /// The rxe device the record names (`steps.softRoce.ibdev`, src/attach/soft_roce.rs): the
    /// step records the name before the kernel makes the device.
    fn recorded_ibdev(&self) -> String {
        let rec = record(NETWORK, self.netns, "net1");
        let ibdev = rec["steps"]["softRoce"]["ibdev"]
            .as_str()
            .unwrap_or_default();
        assert!(
            ibdev.starts_with("rxe_"),
            "the record names a rxe device: {rec}"
        );
        ibdev.to_string()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.call("DEL").run(&self.conf);
        let _ = Command::new("ip")
            .args(["netns", "delete", self.netns])
            .output();
    }
}

/// What `rdma-ns env` names in a pod, each value checked against the kernel's own view.
struct PodView {
    ibdev: String,
    gid_index: u32,
}

/// The ib devices a netns sees (`rdma dev`), by name.
fn devices_seen(netns: Option<&str>) -> Vec<String> {
    run_in(netns, "rdma", &["dev"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(str::to_string)
        .collect()
}

/// The pod's own device as RDMA netlink in its netns tells it (a port's netdev is reported
/// only to a socket in the netdev's netns): the one port whose netdev is `net1` there.
fn own_device(pod: &Pod) -> String {
    let links = in_pod(pod.netns, "rdma", &["link", "show"]);
    let own: Vec<&str> = links
        .lines()
        .filter(|l| l.contains(" netdev net1"))
        .filter_map(|l| l.strip_prefix("link ")?.split('/').next())
        .collect();
    assert_eq!(own.len(), 1, "{}: {links}", pod.netns);
    own[0].to_string()
}

/// `active_mtu` of `dev` port 1 as rdma-core reads it in `pod`.
fn verbs_active_mtu(pod: &Pod, dev: &str) -> u32 {
    let info = in_pod(pod.netns, "ibv_devinfo", &["-d", dev]);
    info.lines()
        .find_map(|l| l.trim().strip_prefix("active_mtu:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no active_mtu for {dev}: {info}"))
}

/// `rdma-ns env` in the pod names the pod's own device (the record's, and the one RDMA netlink
/// ties to net1) and the GID index rdma-core reads for the pod's IP; the probe in the pod
/// reports the device's active MTU, which follows the interface's.
fn pod_view(pod: &Pod, active_mtu: u32) -> PodView {
    let doc = json_of(&in_pod(pod.netns, PLUGIN, &["env", "--format", "json"]));
    let interfaces = doc["interfaces"].as_array().expect("interfaces");
    assert_eq!(interfaces.len(), 1, "{}: {doc}", pod.netns);
    let ibdev = interfaces[0]["ibdev"].as_str().unwrap().to_string();
    assert_eq!(ibdev, pod.recorded_ibdev(), "{}: {doc}", pod.netns);
    assert_eq!(ibdev, own_device(pod), "{}: {doc}", pod.netns);
    assert_eq!(interfaces[0]["via"], "soft-rdma-parent", "{doc}");
    let gid_index = verbs_gid_index(Some(pod.netns), &ibdev, pod.ip);
    assert_eq!(interfaces[0]["gidIndex"], gid_index, "{}: {doc}", pod.netns);
    let env = &doc["env"];
    assert_eq!(env["UCX_NET_DEVICES"], format!("{ibdev}:1"), "{doc}");
    assert_eq!(env["UCX_IB_GID_INDEX"], gid_index.to_string(), "{doc}");
    assert_eq!(env["NCCL_IB_GID_INDEX"], gid_index.to_string(), "{doc}");
    assert_eq!(env["UCX_UD_ETH_DGID_CHECK"], "n", "{doc}");
    assert_eq!(verbs_active_mtu(pod, &ibdev), active_mtu, "{}", pod.netns);
    let probe = json_of(&in_pod(pod.netns, probe_bin(), &[]));
    let port = &probe["ports"][0];
    assert_eq!(port["hca"], format!("{ibdev}:1"), "{probe}");
    assert_eq!(port["gidIndex"], gid_index, "{probe}");
    assert_eq!(port["activeMtu"], active_mtu, "{probe}");
    assert_eq!(port["qpState"], "RTS", "{probe}");
    eprintln!(
        "{}: env names {ibdev} GID index {gid_index}, active MTU {active_mtu}",
        pod.netns
    );
    PodView { ibdev, gid_index }
}

const PROBE_PORT: u16 = 18516;
const PINGPONG_PORT: &str = "18517";
const UCX_PORT: &str = "13337";

/// The probe's SEND ping-pong and WRITE stream from pod a to pod b, on env's values; the
/// listener verifies the written data, and both report the path MTU.
fn probe_exchange(a: &Pod, va: &PodView, b: &Pod, vb: &PodView, mtu: u32) {
    let args = |v: &PodView, role: &[&str]| -> Vec<String> {
        let mut all = vec![probe_bin().to_string()];
        all.extend(probe_exchange_args(&v.ibdev, v.gid_index, 50, role));
        all
    };
    let port = PROBE_PORT.to_string();
    let server = args(vb, &["--listen", &port]);
    let client = args(va, &["--connect", &format!("{}:{PROBE_PORT}", b.ip)]);
    let out = server_and_client(
        TOOL_TIMEOUT,
        b.netns,
        &strs(&server),
        || tcp_listening(b.netns, PROBE_PORT),
        a.netns,
        &strs(&client),
    );
    both_ok("rdma-ns-probe", &out);
    for (o, v, peer) in [(&out.0, vb, a), (&out.1, va, b)] {
        let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
        let x = &doc["exchange"];
        assert_eq!(x["writeVerified"], true, "{doc}");
        assert_eq!(x["gidIndex"], v.gid_index, "{doc}");
        assert_eq!(x["peerGid"], format!("::ffff:{}", peer.ip), "{doc}");
        assert_eq!(x["pathMtu"], mtu, "{doc}");
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// rdma-core's RC ping-pong between the pods on env's devices and GID indexes.
fn rc_pingpong(a: &Pod, va: &PodView, b: &Pod, vb: &PodView) {
    let (ga, gb) = (va.gid_index.to_string(), vb.gid_index.to_string());
    let common = ["-p", PINGPONG_PORT, "-n", "20"];
    let server = [
        &["ibv_rc_pingpong", "-d", &vb.ibdev, "-g", &gb],
        &common[..],
    ]
    .concat();
    let client = [
        &["ibv_rc_pingpong", "-d", &va.ibdev, "-g", &ga],
        &common[..],
        &[b.ip],
    ]
    .concat();
    let port = PINGPONG_PORT.parse().unwrap();
    let out = server_and_client(
        TOOL_TIMEOUT,
        b.netns,
        &server,
        || tcp_listening(b.netns, port),
        a.netns,
        &client,
    );
    both_ok("ibv_rc_pingpong", &out);
    assert!(text(&out.1).contains("20 iters in"), "{}", text(&out.1));
}

/// `rping` (RDMA CM through /dev/infiniband/rdma_cm), each side bounded by `bound` seconds: the
/// server bound to pod b's address, the client from pod a; the outputs.
fn rping(bound: &str, a: &Pod, b: &Pod) -> (Output, Output) {
    server_and_client(
        bound,
        b.netns,
        &["rping", "-s", "-a", b.ip, "-C", "5"],
        || rdma_cm_listening(b.netns),
        a.netns,
        &["rping", "-c", "-v", "-a", b.ip, "-C", "5"],
    )
}

/// `ucx_perftest` (tag-matching bandwidth) between the pods, each started by `rdma-ns env
/// --exec` so that UCX runs on the variables env sets; UCX's info log names the transport and
/// device each endpoint uses, which must be RC verbs on the pod's own device.
fn ucx_perftest(a: &Pod, va: &PodView, b: &Pod, vb: &PodView) {
    let exec = |rest: &[&'static str]| -> Vec<&'static str> {
        [
            &[
                "env",
                "UCX_LOG_LEVEL=info",
                PLUGIN,
                "env",
                "--exec",
                "--",
                "ucx_perftest",
                "-p",
                UCX_PORT,
            ],
            rest,
        ]
        .concat()
    };
    let port = UCX_PORT.parse().unwrap();
    let client_args = [b.ip, "-t", "tag_bw", "-n", "200", "-s", "65536", "-w", "10"];
    let out = server_and_client(
        TOOL_TIMEOUT,
        b.netns,
        &exec(&[]),
        || tcp_listening(b.netns, port),
        a.netns,
        &exec(&client_args),
    );
    both_ok("ucx_perftest", &out);
    for (o, v) in [(&out.0, vb), (&out.1, va)] {
        let log = text(o);
        let transport = format!("rc_verbs/{}:1", v.ibdev);
        let variables = format!("UCX_NET_DEVICES={}:1", v.ibdev);
        assert!(
            log.contains(&transport) && log.contains(&variables),
            "{log}"
        );
    }
    assert!(text(&out.1).contains("Final:"), "{}", text(&out.1));
}

/// The plugin's Soft-RoCE devices (`rxe_…`, not the runner's rxe0) that `netns` sees (None: the
/// host).
fn soft_roce_devices(netns: Option<&str>) -> Vec<String> {
    devices_seen(netns)
        .into_iter()
        .filter(|d| d.starts_with("rxe_"))
        .collect()
}

/// DEL of both pods removes both devices: the host and each pod's netns see none, no record
/// is left. Before, each was there (the presence twin is `pod_view`).
fn del_removes_every_device(pods: &[&Pod]) {
    for pod in pods {
        pod.call("DEL").run(&pod.conf).ok();
    }
    assert_eq!(soft_roce_devices(None), Vec::<String>::new());
    for pod in pods {
        assert_eq!(
            soft_roce_devices(Some(pod.netns)),
            Vec::<String>::new(),
            "{}",
            pod.netns
        );
        assert!(!pod.has_record(), "{}", pod.netns);
    }
}

/// Two pods of one shape in shared netns mode: each pod's own device and index, then every tool
/// between them on exactly those, then DEL.
fn shared_mode_pods(shape: Shape, active_mtu: u32) {
    require_vm();
    require_per_netns_rxe();
    let _veth = matches!(shape, Shape::Move { .. }).then(|| VethPair::new("srva", "srvb"));
    let a = Pod::new("sra", "10.93.0.1", shape, "srva");
    let b = Pod::new("srb", "10.93.0.2", shape, "srvb");
    a.call("ADD").run(&a.conf).ok();
    b.call("ADD").run(&b.conf).ok();
    let (va, vb) = (pod_view(&a, active_mtu), pod_view(&b, active_mtu));
    assert_ne!(va.ibdev, vb.ibdev);
    // Shared mode: each pod lists the other's device too (docs/soft-roce.md, "What another pod sees").
    assert!(devices_seen(Some(a.netns)).contains(&vb.ibdev));
    probe_exchange(&a, &va, &b, &vb, active_mtu);
    rc_pingpong(&a, &va, &b, &vb);
    let cm = rping(TOOL_TIMEOUT, &a, &b);
    both_ok("rping", &cm);
    assert!(
        text(&cm.1).contains("ping data: rdma-ping-4"),
        "{}",
        text(&cm.1)
    );
    ucx_perftest(&a, &va, &b, &vb);
    del_removes_every_device(&[&a, &b]);
}

#[test]
fn vm_soft_roce_macvlan_pods_carry_verbs_rdma_cm_and_ucx_on_what_env_names() {
    // A macvlan child at rxev0's MTU, 1500: RoCE's active MTU 1024.
    shared_mode_pods(Shape::Macvlan, 1024);
}

#[test]
fn vm_soft_roce_moved_pods_carry_verbs_rdma_cm_and_ucx_on_what_env_names() {
    // Moved veth ends at MTU 9000: RoCE's active MTU 4096.
    shared_mode_pods(Shape::Move { mtu: 9000 }, 4096);
}

/// The uverbs node of `ibdev` as sysfs in `pod` names it.
fn uverbs_of(pod: &Pod, ibdev: &str) -> String {
    let script = format!("grep -lx {ibdev} /sys/class/infiniband_verbs/*/ibdev");
    let found = in_pod(pod.netns, "sh", &["-c", &script]);
    let node = found
        .lines()
        .next()
        .and_then(|l| l.split('/').nth(4))
        .unwrap_or_else(|| panic!("no uverbs node for {ibdev} in {}", pod.netns));
    format!("/dev/infiniband/{node}")
}

/// Opens `path` read-write from `pod`: `opened` or the errno's name.
fn open_from(pod: &Pod, path: &str) -> String {
    let script = "import errno, os, sys\n\
        try:\n    os.close(os.open(sys.argv[1], os.O_RDWR)); print('opened')\n\
        except OSError as e:\n    print(errno.errorcode[e.errno])";
    in_pod(pod.netns, "python3", &["-c", script, path])
        .trim()
        .to_string()
}

/// In exclusive mode each pod sees only its own device, the host neither, and a pod cannot
/// open the other's uverbs node (EPERM) while its owner can.
fn each_pod_sees_only_its_own(a: &Pod, va: &PodView, b: &Pod, vb: &PodView) {
    assert_eq!(devices_seen(Some(a.netns)), [va.ibdev.as_str()]);
    assert_eq!(devices_seen(Some(b.netns)), [vb.ibdev.as_str()]);
    assert_eq!(soft_roce_devices(None), Vec::<String>::new());
    let node = uverbs_of(b, &vb.ibdev);
    assert_eq!(
        open_from(b, &node),
        "opened",
        "{} opens its own {node}",
        b.netns
    );
    assert_eq!(
        open_from(a, &node),
        "EPERM",
        "{} opens {}'s {node}",
        a.netns,
        b.netns
    );
}

/// RDMA CM on a moved rxe device: the netns move re-registers the device's clients, and rxe
/// refuses the MAD layer's second GSI QP (it keeps the first one's number for the port), so
/// the CM cannot send: `rdma_connect` fails with EINVAL. A kernel where rping passes here has
/// fixed that, and docs/soft-roce.md must then say so.
fn rdma_cm_fails_on_moved_devices(a: &Pod, va: &PodView, b: &Pod, vb: &PodView) {
    let release = kernel_release();
    let (s, c) = rping("20", a, b);
    assert!(
        !c.status.success() && !text(&c).contains("ping data"),
        "RDMA CM works on a moved rxe device on {release}: docs/soft-roce.md (\"What another \
         pod sees of it\") and this test say it does not; update both.\nclient {}\nserver {}",
        text(&c),
        text(&s)
    );
    assert!(
        text(&c).contains("rdma_connect: Invalid argument"),
        "{}",
        text(&c)
    );
    let log = run("dmesg", &[]);
    for dev in [&va.ibdev, &vb.ibdev] {
        let refused = format!("infiniband {dev}: Couldn't create ib_mad QP1");
        assert!(log.contains(&refused), "no {refused:?} in the kernel log");
    }
}

#[test]
fn vm_soft_roce_exclusive_pods_see_only_their_own_device_and_carry_verbs_and_ucx() {
    require_vm();
    require_per_netns_rxe();
    let _mode = Exclusive::switch();
    let _veth = VethPair::new("srva", "srvb");
    let shape = Shape::Move { mtu: 1500 };
    let a = Pod::new("sra", "10.93.0.1", shape, "srva");
    let b = Pod::new("srb", "10.93.0.2", shape, "srvb");
    a.call("ADD").run(&a.conf).ok();
    b.call("ADD").run(&b.conf).ok();
    let (va, vb) = (pod_view(&a, 1024), pod_view(&b, 1024));
    each_pod_sees_only_its_own(&a, &va, &b, &vb);
    probe_exchange(&a, &va, &b, &vb, 1024);
    rc_pingpong(&a, &va, &b, &vb);
    ucx_perftest(&a, &va, &b, &vb);
    rdma_cm_fails_on_moved_devices(&a, &va, &b, &vb);
    del_removes_every_device(&[&a, &b]);
}

/// The `step X done: T ms` lines of a debug log that name a soft-roce kill point, in order.
fn soft_roce_steps(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(" debug: "))
        .filter_map(|l| Some(l.split_once(" step ")?.1.split_once(" done: ")?.0))
        .filter(|s| s.starts_with("soft-roce"))
        .map(str::to_string)
        .collect()
}

/// Where the ib device `ibdev` is: "host", "pod" or "nowhere".
fn location(pod: &Pod, ibdev: &String) -> &'static str {
    if devices_seen(None).contains(ibdev) {
        "host"
    } else if devices_seen(Some(pod.netns)).contains(ibdev) {
        "pod"
    } else {
        "nowhere"
    }
}

#[test]
fn vm_soft_roce_a_kill_after_each_soft_roce_step_leaves_no_device_after_del_or_reconcile() {
    require_vm();
    require_per_netns_rxe();
    // Exclusive mode: the step's three kill points (the device made, moved, its port ACTIVE).
    let _mode = Exclusive::switch();
    let _veth = VethPair::new("srka", "srkb");
    let mut pod = Pod::new("srk", "10.93.1.1", Shape::Move { mtu: 1500 }, "srka");
    let log = format!("{}/clean.log", common::scratch());
    pod.conf["logFile"] = json!(log);
    pod.call("ADD").run(&pod.conf).ok();
    let steps = soft_roce_steps(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(steps, ["soft-roce-link", "soft-roce-netns", "soft-roce"]);
    assert_eq!(location(&pod, &pod.recorded_ibdev()), "pod");
    pod.call("DEL").run(&pod.conf).ok();
    for (n, step) in steps.iter().enumerate() {
        let add = pod
            .call("ADD")
            .env("RDMA_NS_TEST_KILL_AT", step)
            .run(&pod.conf);
        assert_eq!(add.code, -1, "killed after {step}: {}", add.stdout);
        let ibdev = pod.recorded_ibdev();
        let made = if step == "soft-roce-link" {
            "host"
        } else {
            "pod"
        };
        assert_eq!(
            location(&pod, &ibdev),
            made,
            "{ibdev} after a kill after {step}"
        );
        if n + 1 < steps.len() {
            pod.call("DEL").run(&pod.conf).ok();
        } else {
            // Orphaned: the pod's netns goes without a DEL, and reconcile replays it.
            run("ip", &["netns", "del", pod.netns]);
            let out = run(PLUGIN, &["reconcile", "--data-dir", &state_dir()]);
            assert!(out.contains("released"), "{out}");
        }
        assert_eq!(
            soft_roce_devices(None),
            Vec::<String>::new(),
            "after {step}"
        );
        assert!(!pod.has_record(), "the record after {step}");
        if n + 1 < steps.len() {
            assert_eq!(location(&pod, &ibdev), "nowhere", "after {step}");
        }
    }
}

#[test]
fn vm_soft_roce_is_refused_where_rxe_receives_only_in_the_host_netns() {
    require_vm();
    assert_eq!(
        kernel_version(),
        (6, 1),
        "this case runs on 6.1, not {}",
        kernel_release()
    );
    let _veth = VethPair::new("srva", "srvb");
    for shape in [Shape::Macvlan, Shape::Move { mtu: 1500 }] {
        let pod = Pod::new("sra", "10.93.0.1", shape, "srva");
        let msg = pod.call("ADD").run(&pod.conf).err(120);
        assert!(
            msg.contains("4791") && msg.contains("7.1"),
            "{shape:?}: {msg}"
        );
        assert_eq!(soft_roce_devices(None), Vec::<String>::new(), "{shape:?}");
        assert_eq!(vm_support::link_names(Some(pod.netns)), ["lo"], "{shape:?}");
        assert!(!pod.has_record(), "{shape:?}");
        // The twin: without softRoce the same ADD attaches, and the same probes see it.
        let mut without = pod.conf.clone();
        without["softRoce"] = json!(false);
        pod.call("ADD").run(&without).ok();
        assert!(vm_support::link_names(Some(pod.netns)).contains(&"net1".to_string()));
        assert!(pod.has_record(), "{shape:?}");
        pod.call("DEL").run(&without).ok();
    }
}
