//! `rdma-ns doctor` and `rdma-ns exporter` on the VM's real rxe0 (over veth rxev0): a healthy
//! setup in shared mode, exclusive mode against the confs, a deliberately broken setup (a
//! module unloaded, the port down) and the finding each gets, each next to the same probe
//! passing; and the exporter scraped while `ibv_rc_pingpong` carries traffic over rxe0's GID 0
//! in the initial netns, with the counters growing. VM only (`tests/vm/run.sh node-doctor
//! node-exclusive node-exporter`); time nothing here (TCG).

mod common;
mod exporter_support;
mod vm_support;

use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use exporter_support::Exporter;
use serde_json::Value;
use vm_support::{
    rdma_ns_bin, read, require_vm, run, switch_to_exclusive, wait_link_local_usable, wait_until,
    Budget,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn scratch() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var_os("RDMA_NS_VM_SCRATCH").expect("RDMA_NS_VM_SCRATCH"))
}

/// Runs the doctor with an unlimited RLIMIT_MEMLOCK (as a node whose runtime is set up right),
/// a scratch data dir and no conf dir, plus `extra`; returns its exit code and JSON.
fn doctor(extra: &[&str]) -> (i32, Value, Output) {
    let data = scratch().join("data");
    let out = Command::new("prlimit")
        .args(["--memlock=unlimited:unlimited", "--"])
        .arg(rdma_ns_bin())
        .args(["doctor", "--json", "--conf-dir", "/nonexistent"])
        .args(["--data-dir", &data.display().to_string()])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("prlimit (util-linux) runs rdma-ns");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v, out)
}

/// The findings of `check` whose object contains `object`.
fn findings<'a>(v: &'a Value, check: &str, object: &str) -> Vec<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check && f["object"].as_str().unwrap().contains(object))
        .collect()
}

fn one<'a>(v: &'a Value, check: &str, object: &str, status: &str) -> &'a Value {
    let f = findings(v, check, object);
    assert_eq!(f.len(), 1, "{check} {object}: {v:#}");
    assert_eq!(f[0]["status"], status, "{:#}", f[0]);
    f[0]
}

fn write_conf(name: &str, conf: &Value) -> String {
    let p = scratch().join(name);
    std::fs::write(&p, conf.to_string()).unwrap();
    p.display().to_string()
}

/// How long each wait here polls: wall time, whatever a check takes.
const WAIT: Budget = Budget::Within {
    within: Duration::from_secs(30),
    every: Duration::from_millis(50),
};

fn port_state() -> String {
    read("/sys/class/infiniband/rxe0/ports/1/state")
}

/// MTU 9000 on both veth ends and an address on rxev0 with its RoCE v2 GID; undone on drop.
struct Healthy;

impl Healthy {
    fn set_up() -> Healthy {
        for l in ["rxev0", "rxev1"] {
            run("ip", &["link", "set", l, "mtu", "9000"]);
        }
        run("ip", &["addr", "add", "10.77.0.1/24", "dev", "rxev0"]);
        wait_until("the RoCE v2 GID of 10.77.0.1", WAIT, || {
            (0..16).any(|i| {
                std::fs::read_to_string(format!("/sys/class/infiniband/rxe0/ports/1/gids/{i}"))
                    .is_ok_and(|g| g.trim() == "0000:0000:0000:0000:0000:ffff:0a4d:0001")
            })
        });
        Healthy
    }
}

impl Drop for Healthy {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", "10.77.0.1/24", "dev", "rxev0"])
            .status();
        for l in ["rxev0", "rxev1"] {
            let _ = Command::new("ip")
                .args(["link", "set", l, "mtu", "1500"])
                .status();
        }
    }
}

fn macvlan_conf() -> String {
    write_conf(
        "roce.conflist",
        &serde_json::json!({"cniVersion":"1.0.0","name":"roce","plugins":[
            {"type":"rdma-ns","mode":"macvlan","master":"rxev0",
             "devicePermissions":{"uverbs":"0666","rdma_cm":"0666"}}]}),
    )
}

#[test]
fn vm_doctor_on_healthy_rxe_in_shared_mode_exits_0() {
    require_vm();
    let _g = serial();
    let _h = Healthy::set_up();
    let conf = macvlan_conf();
    let (code, v, _) = doctor(&["--conf", &conf]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["exitCode"], 0);
    assert!(run("rdma", &["system", "show"]).contains("netns shared"));
    let f = one(&v, "netns-mode", "", "OK");
    assert!(
        f["finding"]
            .as_str()
            .unwrap()
            .starts_with("shared, as roce"),
        "{f:#}"
    );
    let f = one(&v, "port", "rxe0/1", "OK");
    assert!(
        f["finding"]
            .as_str()
            .unwrap()
            .starts_with("4: ACTIVE, 5: LinkUp, Ethernet"),
        "{f:#}"
    );
    one(&v, "modules", "rdma_rxe", "OK");
    for m in ["ib_core", "ib_uverbs", "rdma_ucm", "ib_umad"] {
        one(&v, "modules", m, "OK");
    }
    let f = one(&v, "roce-gid", "rxev0 (rxe0/1)", "OK");
    assert!(
        f["finding"].as_str().unwrap().contains("10.77.0.1 at "),
        "{f:#}"
    );
    one(&v, "roce-mtu", "rxev0", "OK");
    one(&v, "conf", "network roce", "OK");
    let f = one(&v, "char-dev", "/dev/infiniband/uverbs", "OK");
    assert!(
        f["finding"].as_str().unwrap().contains("0666 by roce"),
        "{f:#}"
    );
    one(&v, "memlock", "", "OK");

    // The NFD file from the same run.
    let file = scratch().join("features");
    let (_, _, _) = doctor(&["--conf", &conf, "--nfd", &file.display().to_string()]);
    let text = std::fs::read_to_string(&file).unwrap();
    for line in [
        "rdma-capable=true",
        "rdma-link-layer-ethernet=true",
        "rdma-link-layer-infiniband=false",
        "rdma-netns-mode=shared",
        "rdma-pcie-degraded=false",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}: {text}");
    }
    let rate = read("/sys/class/infiniband/rxe0/ports/1/rate");
    let gbps = rate.split_whitespace().next().unwrap();
    assert!(
        text.lines()
            .any(|l| l == format!("rdma-max-rate-gbps={gbps}")),
        "{rate}: {text}"
    );
}

#[test]
fn vm_doctor_finds_a_missing_module_and_a_down_port() {
    require_vm();
    let _g = serial();
    let _h = Healthy::set_up();
    // Presence twins first: the module is there and the port is up.
    let (_, v, _) = doctor(&[]);
    one(&v, "modules", "rdma_ucm", "OK");
    one(&v, "port", "rxe0/1", "OK");

    run("modprobe", &["-r", "rdma_ucm"]);
    let (code, v, _) = doctor(&[]);
    run("modprobe", &["rdma_ucm"]);
    let f = one(&v, "modules", "rdma_ucm", "WARN");
    assert!(
        f["fix"].as_str().unwrap().starts_with("modprobe rdma_ucm"),
        "{f:#}"
    );
    assert!(code >= 1, "{v:#}");
    assert!(
        findings(&v, "char-dev", "rdma_cm").is_empty(),
        "no rdma_cm node to check without the module"
    );

    run("ip", &["link", "set", "rxev0", "down"]);
    wait_until("rxe0 port DOWN", WAIT, || !port_state().contains("ACTIVE"));
    let (code, v, _) = doctor(&[]);
    run("ip", &["link", "set", "rxev0", "up"]);
    wait_until("rxe0 port ACTIVE again", WAIT, || {
        port_state().contains("ACTIVE")
    });
    assert_eq!(code, 2, "{v:#}");
    let f = one(&v, "port", "rxe0/1", "FAIL");
    let finding = f["finding"].as_str().unwrap();
    assert!(
        finding.starts_with("1: DOWN") && finding.contains("expected 4: ACTIVE"),
        "{f:#}"
    );
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .starts_with("ip link set rxev0 up"),
        "{f:#}"
    );
}

#[test]
fn vm_doctor_in_exclusive_mode_names_the_networks_that_need_shared() {
    require_vm();
    let _g = serial();
    switch_to_exclusive(WAIT);
    let macvlan = macvlan_conf();
    let (code, v, _) = doctor(&["--conf", &macvlan]);
    let chained = write_conf(
        "vf.conflist",
        &serde_json::json!({"cniVersion":"1.0.0","name":"vf","plugins":[
            {"type":"sriov"},{"type":"rdma-ns","mode":"rdma"}]}),
    );
    let (_, v2, _) = doctor(&["--conf", &chained]);
    run("rdma", &["system", "set", "netns", "shared"]);
    assert_eq!(read("/sys/module/ib_core/parameters/netns_mode"), "Y");
    assert_eq!(code, 2, "{v:#}");
    let f = one(&v, "netns-mode", "", "FAIL");
    assert!(
        f["finding"]
            .as_str()
            .unwrap()
            .starts_with("exclusive, but roce (mode macvlan) need shared"),
        "{f:#}"
    );
    assert!(f["fix"]
        .as_str()
        .unwrap()
        .contains("rdma system set netns shared"));
    let f = one(&v2, "netns-mode", "", "OK");
    assert!(
        f["finding"]
            .as_str()
            .unwrap()
            .starts_with("exclusive, as vf"),
        "{f:#}"
    );
}

/// A child killed and reaped when the test ends, passing or not.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Reap {
    /// Ends the process and returns what it printed (stdout, then stderr, where piped).
    fn output(mut self) -> String {
        use std::io::Read;
        let _ = self.0.kill();
        let _ = self.0.wait();
        let mut text = String::new();
        if let Some(mut out) = self.0.stdout.take() {
            let _ = out.read_to_string(&mut text);
        }
        if let Some(mut err) = self.0.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        text
    }
}

#[test]
fn vm_exporter_counters_grow_while_rc_pingpong_runs() {
    require_vm();
    let _g = serial();
    let data = scratch().join("data");
    let exporter = Exporter::start(rdma_ns_bin(), &["--data-dir".as_ref(), data.as_os_str()]);
    // TCG is slow: a scrape may take seconds.
    let scrape = || exporter.series(Duration::from_secs(30));
    let before = scrape();
    let sent = r#"rdma_port_hw_counter_total{device="rxe0",port="1",counter="sent_pkts"}"#;
    let rcvd = r#"rdma_port_hw_counter_total{device="rxe0",port="1",counter="rcvd_pkts"}"#;
    assert!(before.contains_key(sent), "{before:#?}");
    assert_eq!(
        before[r#"rdma_port_state{device="rxe0",port="1"}"#], 4.0,
        "ACTIVE"
    );

    // RC traffic between two QPs of rxe0 over GID 0 in the initial netns (rxe loops it back
    // through its UDP socket there).
    wait_link_local_usable("rxev0");
    let args = [
        "-d", "rxe0", "-g", "0", "-p", "18777", "-n", "200", "-s", "1024",
    ];
    let server = Reap(
        Command::new("ibv_rc_pingpong")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut client = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        let out = Command::new("timeout")
            .args(["-s", "KILL", "120"])
            .arg("ibv_rc_pingpong")
            .args(args)
            .arg("127.0.0.1")
            .output()
            .unwrap();
        let refused = String::from_utf8_lossy(&out.stderr).contains("Couldn't connect");
        if !refused {
            client = Some(out);
            break;
        }
    }
    let client = client.expect("the server listened within 10 s");
    let mid = scrape();
    let server = server.output();
    assert!(
        client.status.success(),
        "ibv_rc_pingpong: {}{}\nthe server printed: {server}",
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(
        mid[sent] >= before[sent] + 200.0,
        "{} -> {}",
        before[sent],
        mid[sent]
    );
    assert!(
        mid[rcvd] >= before[rcvd] + 200.0,
        "{} -> {}",
        before[rcvd],
        mid[rcvd]
    );
    for (series, v) in &before {
        if series.contains("_total{") {
            assert!(mid[series] >= *v, "{series}: {v} -> {}", mid[series]);
        }
    }
    // The exporter stops on SIGTERM.
    assert_eq!(exporter.stop(Duration::from_secs(20)).code(), Some(0));
}
