//! Helpers for VM-only integration tests (`tests/vm_*.rs`, test functions named `vm_...`).
//!
//! These tests run inside the VM that `tests/vm/run.sh` boots (see docs/testing.md, "VM tier");
//! the host tier skips them with `cargo test -- --skip vm_`. Include with `mod common;` and
//! `mod vm_support;`: the attachment records are read from `common::state_dir`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{state_dir, Call};

/// Panics with a clear message unless running inside the VM tier (`RDMA_NS_IN_VM=1`).
pub fn require_vm() {
    if std::env::var("RDMA_NS_IN_VM").as_deref() != Ok("1") {
        panic!(
            "VM-only test: run it with `tests/vm/run.sh <case>`; on the host, name the test \
             targets to run (`cargo test --lib --test move_mode ...`, as tests/run.sh does)"
        );
    }
}

/// The rdma-ns binary built on the host (`RDMA_NS_BIN`).
pub fn rdma_ns_bin() -> PathBuf {
    PathBuf::from(std::env::var_os("RDMA_NS_BIN").expect("RDMA_NS_BIN is set by the VM runner"))
}

/// The probe built beside the plugin (`rdma-ns-probe`, feature verbs).
pub fn probe_bin() -> &'static str {
    // Set only when the probe was built (feature verbs): a build without it compiles the VM
    // targets, and the tests that need it fail saying why.
    match option_env!("CARGO_BIN_EXE_rdma-ns-probe") {
        Some(p) => p,
        None => panic!(
            "rdma-ns-probe was not built: tests/vm/run.sh builds the VM tests with --features verbs"
        ),
    }
}

/// The probe's arguments for a `--listen`/`--connect` exchange on `device` at `gid_index`:
/// `iters` ping-pongs and a WRITE stream of 64 KiB writes, `role` last.
pub fn probe_exchange_args(device: &str, gid_index: u32, iters: u32, role: &[&str]) -> Vec<String> {
    let (gid_index, iters) = (gid_index.to_string(), iters.to_string());
    let mut args: Vec<String> = [
        "--device",
        device,
        "--gid-index",
        &gid_index,
        "--iters",
        &iters,
        "--size",
        "65536",
        "--timeout-ms",
        "30000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(role.iter().map(|s| s.to_string()));
    args
}

/// The fresh network namespace the runner made for this case (`RDMA_NS_VM_NETNS`, a path
/// under /run/netns).
pub fn case_netns() -> PathBuf {
    PathBuf::from(std::env::var_os("RDMA_NS_VM_NETNS").expect("RDMA_NS_VM_NETNS is set"))
}

/// The kernel this case runs on, as tests/vm/cases names it (`6.1` or `7`;
/// `RDMA_NS_VM_KERNEL_NAME`).
pub fn kernel_name() -> String {
    std::env::var("RDMA_NS_VM_KERNEL_NAME").expect("RDMA_NS_VM_KERNEL_NAME is set by the VM runner")
}

/// Runs a command; panics with its output unless it exits 0; returns its stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "`{cmd} {}` failed ({}): {}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Reads a (sysfs, procfs) text file, trimmed.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
        .trim()
        .to_string()
}

/// Waits until `netdev`'s IPv6 link-local address, which is GID 0 of an rxe device over it, is
/// past DAD. Each case's veth is new, and its DAD (up to about 2 s under TCG) may still run. While
/// the address is "tentative" the kernel has no local route to it, and a QP's move to RTR towards
/// that GID fails: the kernel resolves a RoCE v2 GID's MAC through the IP stack
/// (ib_resolve_unicast_gid_dmac). A fresh machine's run of ibv_rc_pingpong failed so: "Failed to
/// modify QP to RTR".
pub fn wait_link_local_usable(netdev: &str) {
    let budget = Budget::Within {
        within: Duration::from_secs(10),
        every: Duration::from_millis(100),
    };
    wait_until(
        &format!("{netdev}'s IPv6 link-local address past DAD"),
        budget,
        || {
            let addrs = run(
                "ip",
                &["-6", "addr", "show", "dev", netdev, "scope", "link"],
            );
            addrs.contains("inet6") && !addrs.contains("tentative")
        },
    );
}

/// Names of the links in the current netns, or in `netns` (a name under /run/netns).
pub fn link_names(netns: Option<&str>) -> Vec<String> {
    let mut args = vec![];
    if let Some(ns) = netns {
        args.extend(["-n", ns]);
    }
    args.extend(["-o", "link", "show"]);
    run("ip", &args)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// The index of the GID table entry of `ibdev` port 1 that holds `gid` (uncompressed, as sysfs
/// prints it) on `ndev`, read straight from sysfs, independently of rdma-ns's own reader.
pub fn sysfs_gid_index(ibdev: &str, gid: &str, ndev: &str) -> Option<u32> {
    let port = format!("/sys/class/infiniband/{ibdev}/ports/1");
    let mut entries: Vec<u32> = std::fs::read_dir(format!("{port}/gids"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    entries.sort();
    entries.into_iter().find(|i| {
        std::fs::read_to_string(format!("{port}/gids/{i}")).is_ok_and(|s| s.trim() == gid)
            && std::fs::read_to_string(format!("{port}/gid_attrs/ndevs/{i}"))
                .is_ok_and(|s| s.trim() == ndev)
    })
}

/// `sysfs_gid_index`, polled briefly (the kernel adds GIDs from a workqueue); panics when the
/// entry does not appear.
pub fn wait_for_sysfs_gid_index(ibdev: &str, gid: &str, ndev: &str) -> u32 {
    for _ in 0..100 {
        if let Some(i) = sysfs_gid_index(ibdev, gid, ndev) {
            return i;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("no GID {gid} on {ndev} in {ibdev}'s table");
}

/// The running kernel's release (`uname -r`), e.g. `6.1.0-57-amd64` or `7.3.4+deb13-amd64`.
pub fn kernel_release() -> String {
    read("/proc/sys/kernel/osrelease")
}

/// The running kernel's (major, minor) version, from [`kernel_release`]; panics naming the
/// release when it does not start with two numbers.
pub fn kernel_version() -> (u32, u32) {
    let release = kernel_release();
    let mut numbers = release.split(['.', '-', '+']).map(str::parse::<u32>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
        _ => panic!("kernel release {release:?} does not start with major.minor"),
    }
}

/// Panics unless the VM runs Linux 7.1 or later, whose rxe opens its UDP socket in the netns
/// of the device's netdev (drivers/infiniband/sw/rxe/rxe_ns.c), so a rxe device on a pod's
/// interface receives RoCE in the pod.
pub fn require_per_netns_rxe() {
    assert!(
        kernel_version() >= (7, 1),
        "this case needs Linux 7.1 or later (rxe with per-netns sockets); the VM runs {}",
        kernel_release()
    );
}

/// Runs a command inside the netns `pod` (a name under /run/netns), as a container would:
/// `ip netns exec` also gives it a sysfs of that netns. Panics unless it exits 0; its stdout.
pub fn in_pod(pod: &str, cmd: &str, args: &[&str]) -> String {
    let mut all = vec!["netns", "exec", pod, cmd];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// Runs a command in the netns `netns` (a name under /run/netns, as [`in_pod`]) or, with None,
/// in this one; panics unless it exits 0; its stdout.
pub fn run_in(netns: Option<&str>, cmd: &str, args: &[&str]) -> String {
    match netns {
        Some(ns) => in_pod(ns, cmd, args),
        None => run(cmd, args),
    }
}

/// `stdout` parsed as JSON; panics naming it when it is not.
pub fn json_of(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The index of `ip`'s RoCE v2 GID on `dev` port 1 as rdma-core reads it (`ibv_devinfo -v`
/// prints a RoCE v2 GID with inet_ntop: `GID[  1]:  ::ffff:10.91.0.1, RoCE v2`), run in the
/// netns `pod` (None: this one), polled briefly: the kernel adds GIDs from a workqueue.
pub fn verbs_gid_index(pod: Option<&str>, dev: &str, ip: &str) -> u32 {
    let wanted = format!("::ffff:{ip}, RoCE v2");
    for _ in 0..200 {
        let info = run_in(pod, "ibv_devinfo", &["-d", dev, "-v"]);
        let hit = info.lines().map(str::trim).find_map(|l| {
            let (index, gid) = l.strip_prefix("GID[")?.split_once("]:")?;
            (gid.trim() == wanted).then(|| index.trim().parse().ok())?
        });
        if let Some(i) = hit {
            return i;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("ibv_devinfo -d {dev} shows no RoCE v2 GID for {ip}");
}

/// Where the record of the attachment of `container`'s `ifname` on `network` is, in the case's
/// state dir (`<network>/<containerID>:<ifname>.json`, src/attach/store.rs).
fn record_path(network: &str, container: &str, ifname: &str) -> String {
    format!("{}/{network}/{container}:{ifname}.json", state_dir())
}

/// Whether the attachment has a record (the intent is written before the kernel changes).
pub fn record_exists(network: &str, container: &str, ifname: &str) -> bool {
    Path::new(&record_path(network, container, ifname)).exists()
}

/// The attachment record: JSON lines, the last one current (see src/attach/store.rs); panics
/// naming the file when there is none.
pub fn record(network: &str, container: &str, ifname: &str) -> Value {
    let path = record_path(network, container, ifname);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    serde_json::from_str(last).unwrap()
}

/// A pod attached by rdma-ns: a macvlan child `net1` of rxev0 with `ip`/24 in the netns `netns`
/// (a name under /run/netns; also the container id); DEL on drop, after its own rxe device (if
/// any) is gone.
pub struct MacvlanPod {
    netns: &'static str,
    conf: Value,
    rxe: Option<&'static str>,
}

impl MacvlanPod {
    pub fn attach(netns: &'static str, ip: &str) -> MacvlanPod {
        let conf = json!({"cniVersion": "1.0.0", "name": "vmenv", "type": "rdma-ns",
            "mode": "macvlan", "master": "rxev0", "dataDir": state_dir(),
            "ipam": {"type": "static", "addresses": [{"address": format!("{ip}/24")}]}});
        Call::new("ADD", netns, &format!("/run/netns/{netns}"), "net1")
            .run(&conf)
            .ok();
        MacvlanPod {
            netns,
            conf,
            rxe: None,
        }
    }

    /// `rdma link add <name> type rxe netdev net1`, run inside the pod.
    pub fn add_rxe(&mut self, name: &'static str) {
        in_pod(
            self.netns,
            "rdma",
            &["link", "add", name, "type", "rxe", "netdev", "net1"],
        );
        self.rxe = Some(name);
    }
}

impl Drop for MacvlanPod {
    fn drop(&mut self) {
        if let Some(rxe) = self.rxe {
            let _ = Command::new("ip")
                .args(["netns", "exec", self.netns, "rdma", "link", "delete", rxe])
                .output();
        }
        let path = format!("/run/netns/{}", self.netns);
        Call::new("DEL", self.netns, &path, "net1")
            .run(&self.conf)
            .ok();
    }
}

/// A netns of the test's own (`ip netns add`), deleted on drop.
pub struct ExtraNetns(pub &'static str);

impl ExtraNetns {
    pub fn add(name: &'static str) -> ExtraNetns {
        run("ip", &["netns", "add", name]);
        ExtraNetns(name)
    }
}

impl Drop for ExtraNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", self.0])
            .output();
    }
}

/// `args` in the netns `pod` under `timeout -s KILL` (`bound` seconds: a hung verbs tool such as
/// `ibv_rc_pingpong` ignores SIGTERM), as a command not yet run, its output piped.
pub fn tool(pod: &str, bound: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", pod, "timeout", "-s", "KILL", bound])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A command's exit status, stdout and stderr, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "exit {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How long [`wait_until`] polls: a check, then a pause of `every` before the next one.
#[derive(Clone, Copy, Debug)]
pub enum Budget {
    /// At most this many checks. A check that execs a tool adds its own time, which under TCG
    /// can be seconds, so the wall time grows with the check.
    Checks { checks: u32, every: Duration },
    /// Checks until `within` has passed since the first one began.
    Within { within: Duration, every: Duration },
}

/// What a server started by [`server_and_client`] may take to listen (TCG: seconds).
pub const SERVER_LISTENS: Budget = Budget::Checks {
    checks: 300,
    every: Duration::from_millis(100),
};

/// Polls `ready` until it holds; panics naming `what` when `budget` is spent first.
pub fn wait_until(what: &str, budget: Budget, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut checks = 0;
    while !ready() {
        checks += 1;
        let (spent, every) = match budget {
            Budget::Checks {
                checks: most,
                every,
            } => (checks >= most, every),
            Budget::Within { within, every } => (start.elapsed() >= within, every),
        };
        assert!(!spent, "timed out waiting for {what} ({budget:?})");
        std::thread::sleep(every);
    }
}

/// Switches the RDMA subsystem to exclusive netns mode, which the kernel allows only while the
/// initial netns is the only one: deletes the case's netns `vmpod`, then retries within
/// `budget` (until the kernel has freed the netns the switch answers EBUSY). ib_core's
/// `netns_mode` parameter must follow the switch: `rdma-ns doctor` reads the mode there.
/// Nothing here switches back: the caller does, or the runner after the case.
pub fn switch_to_exclusive(budget: Budget) {
    run("ip", &["netns", "del", "vmpod"]);
    wait_until("exclusive netns mode", budget, || {
        Command::new("rdma")
            .args(["system", "set", "netns", "exclusive"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    assert_eq!(read("/sys/module/ib_core/parameters/netns_mode"), "N");
}

/// Exclusive RDMA netns mode until dropped (declare it first: it must drop after the pods);
/// the cases of vm_soft_roce.rs and vm_qos.rs in exclusive mode.
pub struct Exclusive;

impl Exclusive {
    /// The mode changes only while the initial netns is the only one: the case's `vmpod` goes.
    pub fn switch() -> Exclusive {
        switch_to_exclusive(Budget::Checks {
            checks: 300,
            every: Duration::from_millis(100),
        });
        Exclusive
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        // The pods' netns are freed asynchronously; until then the switch answers EBUSY.
        for _ in 0..100 {
            let back = Command::new("rdma")
                .args(["system", "set", "netns", "shared"])
                .output();
            if back.is_ok_and(|o| o.status.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("ip").args(["netns", "add", "vmpod"]).output();
    }
}

/// A veth pair in the host whose ends move into two pods (or one, the other staying home).
pub struct VethPair(pub &'static str, pub &'static str);

impl VethPair {
    /// `b` is up: rxe's port follows `a`'s carrier, which needs its peer up, and pod a's ADD
    /// waits for the port before pod b's moves `b`.
    pub fn new(a: &'static str, b: &'static str) -> VethPair {
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

/// A TCP socket listens on `port` in the netns `pod` (`ss`).
pub fn tcp_listening(pod: &str, port: u16) -> bool {
    let filter = format!("sport = :{port}");
    in_pod(pod, "ss", &["-Htln", &filter])
        .lines()
        .any(|l| !l.trim().is_empty())
}

/// An RDMA CM id listens in the netns `pod` (`rdma resource show cm_id`, state LISTEN); the
/// list is logged, for the device it is bound to.
pub fn rdma_cm_listening(pod: &str) -> bool {
    let ids = in_pod(pod, "rdma", &["resource", "show", "cm_id"]);
    let listening = ids.contains("LISTEN");
    if listening {
        eprintln!("{pod}: {ids}");
    }
    listening
}

/// Starts `server` in the netns `server_pod`, waits until `ready`, runs `client` in
/// `client_pod`, each bounded by `bound` seconds; both outputs (server first).
pub fn server_and_client(
    bound: &str,
    server_pod: &str,
    server: &[&str],
    ready: impl Fn() -> bool,
    client_pod: &str,
    client: &[&str],
) -> (Output, Output) {
    let child = tool(server_pod, bound, server)
        .spawn()
        .expect("server runs");
    wait_until(&server.join(" "), SERVER_LISTENS, ready);
    let c = tool(client_pod, bound, client)
        .output()
        .expect("client runs");
    let s = child.wait_with_output().unwrap();
    (s, c)
}

/// Both exited 0, else a panic with both outputs.
pub fn both_ok(what: &str, (s, c): &(Output, Output)) {
    assert!(
        s.status.success() && c.status.success(),
        "{what}:\nserver {}\nclient {}",
        text(s),
        text(c)
    );
}
