//! Crash safety of the real binary: for every step of ADD and of DEL (learnt from a clean run's
//! debug log, so a new step is covered the day it lands), the plugin SIGKILLs itself right after
//! that step (`RDMA_NS_TEST_KILL_AT`, debug builds only: no undo, no further write). DEL twice
//! and GC must then leave nothing stranded: the device back under its name, no child, no lease,
//! no record, no temp file, no rule left in the pod (with `rail`), the moved netdev's own alias
//! back (every conf has `roceQos`, which sets the pod interface's). Modes on this kernel: move
//! and macvlan, each with and without `rail` (ipoib and chained mode run the same loop over
//! fakes, src/attach/kill_points.rs).

mod common;

use common::*;
use serde_json::{json, Value};

/// The `step X done: T ms` lines of a debug log, in order, for one command's pid.
fn steps_in(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(" debug: "))
        .filter_map(|l| l.split_once(" step ").map(|(_, r)| r))
        .filter_map(|r| r.split_once(" done: ").map(|(step, _)| step))
        .map(str::to_string)
        .collect()
}

fn temp_files(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().contains(".tmp-") {
                found.push(e.path().display().to_string());
            }
        }
    }
    found
}

struct Setup {
    veth: Veth,
    ns: TestNetns,
    data: DataDir,
    conf: Value,
    before: HostView,
}

fn setup(mode: &str, rail: bool) -> Setup {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let mut conf = json!({"cniVersion": "1.1.0", "name": "crash", "type": "rdma-ns", "mode": mode,
        "dataDir": data.state(), "logLevel": "debug",
        "roceQos": {"dscp": 26, "ecn": true, "priority": 3},
        "ipam": test_ipam("10.96.0.5/24", &data)});
    // An alias of the node's own on the NIC: move mode gives it the network's QoS in the pod,
    // and DEL must bring the NIC back with this one.
    sh(&["ip", "link", "set", &veth.nic, "alias", "uplink to leaf 3"]);
    if rail {
        conf["rail"] = json!(true);
        conf["ipam"]["routes"] = json!([{"dst": "10.200.0.0/16", "gw": "10.96.0.1"}]);
    }
    set_parent(&mut conf, mode, &veth.nic);
    let before = host_view(&veth.nic);
    Setup {
        veth,
        ns,
        data,
        conf,
        before,
    }
}

impl Setup {
    fn call(&self, command: &str) -> Call {
        Call::new(command, "crash1", &self.ns.path(), "net1")
    }

    fn lease_count(&self) -> usize {
        test_ipam_leases(&self.data)
    }

    /// DEL twice, GC, then nothing may be left.
    fn recover_and_check(&self, case: &str) {
        for _ in 0..2 {
            let del = self.call("DEL").run(&self.conf);
            assert_eq!(del.code, 0, "{case}: DEL after it: {}", del.stdout);
        }
        let mut gc = self.conf.clone();
        gc["cni.dev/valid-attachments"] = json!([]);
        let out = Call::new("GC", "", "", "").run(&gc);
        assert_eq!(out.code, 0, "{case}: GC after it: {}", out.stdout);
        back_in_host(&self.veth.nic, &self.before).unwrap_or_else(|e| panic!("{case}: {e}"));
        child_gone(&self.ns, "net1", &self.veth.nic).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(self.lease_count(), 0, "{case}: a lease is left");
        let rules = self.ns.source_rules();
        assert!(rules.is_empty(), "{case}: rules left in the pod: {rules:?}");
        assert!(self.data.records().is_empty(), "{case}: a record is left");
        assert!(
            temp_files(self.data.path()).is_empty(),
            "{case}: temp files {:?}",
            temp_files(self.data.path())
        );
    }
}

fn every_kill_point(mode: &str, rail: bool) {
    // A clean run: its log names every step, and the probes see what it made.
    let s = setup(mode, rail);
    let log = s.data.path().join("clean.log");
    let mut conf = s.conf.clone();
    conf["logFile"] = json!(log);
    s.call("ADD").run(&conf).ok();
    let add_log = std::fs::read_to_string(&log).unwrap();
    let add_steps = steps_in(&add_log);
    // rdma-ns's own timings (docs/configuration.md, "Timings"): the command's, and its IPAM
    // plugin's exec.
    for timing in ["Add: ", "IPAM plugin "] {
        assert!(
            add_log.lines().any(|l| l.contains(" debug: [container=")
                && l.contains(timing)
                && l.ends_with(" ms")),
            "{mode}: no `{timing}... ms` line: {add_log}"
        );
    }
    assert!(s.ns.link("net1").is_some(), "the pod interface exists");
    assert_eq!(
        s.ns.link("net1").unwrap()["ifalias"],
        "rdma-ns roceQos dscp=26 ecn=1 priority=3",
        "the pod interface carries the network's QoS"
    );
    assert_eq!(s.before.alias.as_deref(), Some("uplink to leaf 3"));
    assert_eq!(s.lease_count(), 1, "the lease exists");
    assert_eq!(s.data.records().len(), 1, "the record exists");
    assert_eq!(
        s.ns.source_rules().len(),
        usize::from(rail),
        "the rail's rule"
    );
    std::fs::remove_file(&log).unwrap();
    s.call("DEL").run(&conf).ok();
    let del_steps = steps_in(&std::fs::read_to_string(&log).unwrap());
    s.recover_and_check("a clean ADD and DEL");
    assert!(add_steps.len() >= 6, "{mode} ADD steps: {add_steps:?}");
    assert!(
        del_steps.iter().any(|d| d == "del-release") && del_steps.len() >= 3,
        "{mode} DEL steps: {del_steps:?}"
    );

    for step in &add_steps {
        let case = format!("{mode}: killed after ADD step {step}");
        let s = setup(mode, rail);
        let add = s.call("ADD").env("RDMA_NS_TEST_KILL_AT", step).run(&s.conf);
        assert_eq!(add.code, -1, "{case}: killed by a signal: {}", add.stdout);
        s.recover_and_check(&case);
    }
    for step in &del_steps {
        let case = format!("{mode}: killed after DEL step {step}");
        let s = setup(mode, rail);
        s.call("ADD").run(&s.conf).ok();
        let del = s.call("DEL").env("RDMA_NS_TEST_KILL_AT", step).run(&s.conf);
        assert_eq!(del.code, -1, "{case}: killed by a signal: {}", del.stdout);
        s.recover_and_check(&case);
    }
}

#[test]
fn move_mode_survives_a_kill_after_every_step() {
    every_kill_point("move", false);
}

#[test]
fn macvlan_mode_survives_a_kill_after_every_step() {
    every_kill_point("macvlan", false);
}

/// With `rail`: its rule (which, unlike the interface's routes, outlives the interface in the
/// pod) is gone after DEL wherever the plugin was killed.
#[test]
fn move_mode_with_rail_survives_a_kill_after_every_step() {
    every_kill_point("move", true);
}

#[test]
fn macvlan_mode_with_rail_survives_a_kill_after_every_step() {
    every_kill_point("macvlan", true);
}
