//! What a hostile or broken runtime can hand the plugin: each test reproduces a defect a
//! hostile-runtime harness found, through the real binary.

mod common;

use common::*;
use serde_json::json;

/// A /run/netns name for the host's netns, removed on drop even when the test fails (a leftover
/// changes how iproute2 prints other tests' links).
struct HostAlias(String);

impl HostAlias {
    fn new() -> HostAlias {
        let name = unique("rnhost");
        // The test runs in the host netns: its own pid names it.
        sh(&[
            "ip",
            "netns",
            "attach",
            &name,
            &std::process::id().to_string(),
        ]);
        HostAlias(name)
    }
}

impl Drop for HostAlias {
    fn drop(&mut self) {
        let _ = sh_ok(&["ip", "netns", "del", &self.0]);
    }
}

/// The host's own netns as CNI_NETNS, by /proc path or by a /run/netns name bound to it: refused
/// with code 4 before anything changes, in move and macvlan mode.
#[test]
fn the_hosts_own_netns_is_refused_as_a_pod_netns() {
    let veth = Veth::new();
    let data = DataDir::new();
    let host_alias = HostAlias::new();
    let host_alias = &host_alias.0;
    let before = host_view(&veth.nic);

    // The probe finds a host-side macvlan child while one exists.
    let probe = unique("rnmv");
    sh(&[
        "ip", "link", "add", "link", &veth.nic, "name", &probe, "type", "macvlan",
    ]);
    assert_eq!(host_children(&veth.nic), vec![probe.clone()]);
    sh(&["ip", "link", "del", &probe]);
    assert!(host_children(&veth.nic).is_empty());

    for netns in [
        "/proc/self/ns/net".to_string(),
        format!("/run/netns/{host_alias}"),
    ] {
        let mut move_conf = move_conf("1.0.0", "hostns", &veth.nic, &data);
        move_conf["ipam"] = static_ipam("10.93.0.5/24");
        let macvlan = json!({"cniVersion": "1.0.0", "name": "hostnsmv", "type": "rdma-ns",
            "mode": "macvlan", "master": veth.nic, "dataDir": data.state(),
            "ipam": static_ipam("10.93.0.6/24")});
        for conf in [move_conf, macvlan] {
            let msg = Call::new("ADD", "hostns", &netns, "net1").run(&conf).err(4);
            assert!(
                msg.contains("CNI_NETNS") && msg.contains("own network namespace"),
                "{msg}"
            );
            assert_eq!(
                host_view(&veth.nic),
                before,
                "{netns}: the NIC is untouched"
            );
            assert!(
                host_link("net1").is_none(),
                "{netns}: nothing renamed in the host"
            );
            assert!(
                host_children(&veth.nic).is_empty(),
                "{netns}: no host macvlan"
            );
            assert!(data.records().is_empty(), "{netns}");
        }
    }
    // The same binary and conf attach to a real pod netns.
    let ns = TestNetns::new();
    let mut conf = move_conf("1.0.0", "hostns", &veth.nic, &data);
    conf["ipam"] = static_ipam("10.93.0.5/24");
    Call::new("ADD", "hostns", &ns.path(), "net1")
        .run(&conf)
        .ok();
    assert!(ns.link("net1").is_some());
    Call::new("DEL", "hostns", &ns.path(), "net1")
        .run(&conf)
        .ok();
}

/// CNI_NETNS naming a FIFO, a plain file or a procfs file that is no namespace: code 104 at once
/// (a FIFO used to block open(2) forever).
#[test]
fn files_that_are_no_netns_are_refused_at_once() {
    let veth = Veth::new();
    let data = DataDir::new();
    let fifo = data.path().join("fifo");
    sh(&["mkfifo", fifo.to_str().unwrap()]);
    let plain = data.path().join("plain");
    std::fs::write(&plain, b"{}").unwrap();
    let conf = move_conf("1.0.0", "notns", &veth.nic, &data);
    for path in [
        fifo.display().to_string(),
        plain.display().to_string(),
        "/proc/self/status".to_string(),
        "/proc/self/ns/uts".to_string(),
    ] {
        let started = std::time::Instant::now();
        let msg = Call::new("ADD", "notns", &path, "net1").run(&conf).err(104);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{path}"
        );
        assert!(msg.contains(&path), "{msg}");
        assert!(host_link(&veth.nic).is_some(), "{path}");
    }
}

/// A container ID longer than a file name: ADD and DEL work, DEL stays idempotent, and the record
/// exists while attached and is gone after (the CNI spec sets no length limit).
#[test]
fn a_very_long_container_id_attaches_and_detaches() {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let id = format!("{}{}", "a1b2c3d4".repeat(32), unique("x"));
    assert!(id.len() > 255);
    let mut conf = move_conf("1.0.0", "longid", &veth.nic, &data);
    conf["ipam"] = static_ipam("10.94.0.5/24");
    Call::new("ADD", &id, &ns.path(), "net1").run(&conf).ok();
    let records = data.records();
    assert_eq!(records.len(), 1, "the record exists while attached");
    let name = records[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.len() <= 255 && name.ends_with(":net1.json"), "{name}");
    assert!(std::fs::read_to_string(&records[0]).unwrap().contains(&id));
    for _ in 0..2 {
        Call::new("DEL", &id, &ns.path(), "net1").run(&conf).ok();
    }
    assert!(data.records().is_empty());
    assert!(host_link(&veth.nic).is_some());
}

/// `logFile` and `dataDir` must be absolute without `..`; a log file is never opened through a
/// symlink and is created 0600.
#[test]
fn log_file_and_data_dir_paths_are_checked() {
    use std::os::unix::fs::PermissionsExt;
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    let base = move_conf("1.0.0", "paths", &veth.nic, &data);
    for (field, value) in [
        ("logFile", "relative.log".to_string()),
        ("logFile", format!("{}/../escape.log", data.str())),
        ("dataDir", format!("{}/../escape", data.str())),
    ] {
        let mut conf = base.clone();
        conf[field] = json!(value);
        let msg = Call::new("ADD", "paths", &ns.path(), "net1")
            .run(&conf)
            .err(7);
        assert!(msg.contains(field), "{msg}");
    }
    assert!(!std::path::Path::new("relative.log").exists());

    let target = data.path().join("target.log");
    let link = data.path().join("link.log");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let mut conf = base.clone();
    conf["logFile"] = json!(link);
    conf["logLevel"] = json!("debug");
    let call = Call::new("ADD", "paths", &ns.path(), "net1");
    let add = call.run(&conf);
    add.ok();
    assert!(!target.exists(), "no file created through the symlink");
    assert!(add.stderr.contains("cannot open logFile"), "{}", add.stderr);
    Call::new("DEL", "paths", &ns.path(), "net1")
        .run(&conf)
        .ok();

    let log = data.path().join("plugin.log");
    conf["logFile"] = json!(log);
    Call::new("ADD", "paths", &ns.path(), "net1")
        .run(&conf)
        .ok();
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(std::fs::read_to_string(&log).unwrap().contains("debug"));
    Call::new("DEL", "paths", &ns.path(), "net1")
        .run(&conf)
        .ok();
}

/// Whether the process of `/proc/<pid>` runs: an orphan that exited stays a zombie until init
/// reaps it.
fn running(proc_dir: &str) -> bool {
    std::fs::read_to_string(format!("{proc_dir}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// A move-mode ADD whose IPAM plugin writes its lease under the data dir ([`test_ipam`]) and its
/// pid to `pid_file`.
struct KilledAdd {
    veth: Veth,
    ns: TestNetns,
    data: DataDir,
    before: HostView,
    pid_file: std::path::PathBuf,
    conf: serde_json::Value,
}

impl KilledAdd {
    fn new(name: &str) -> KilledAdd {
        let veth = Veth::new();
        let ns = TestNetns::new();
        let data = DataDir::new();
        let before = host_view(&veth.nic);
        let pid_file = data.path().join("ipam.pid");
        let mut conf = move_conf("1.1.0", name, &veth.nic, &data);
        conf["ipam"] = test_ipam("10.95.0.5/24", &data);
        conf["ipam"]["pidFile"] = json!(pid_file);
        KilledAdd {
            veth,
            ns,
            data,
            before,
            pid_file,
            conf,
        }
    }

    fn call(&self, command: &str) -> Call {
        Call::new(command, "kipam", &self.ns.path(), "net1")
    }

    fn leases(&self) -> usize {
        test_ipam_leases(&self.data)
    }

    /// The probe: a completed ADD leaves exactly its lease, and DEL removes it.
    fn probe_leases(&self) {
        self.call("ADD").run(&self.conf).ok();
        assert_eq!(self.leases(), 1);
        self.call("DEL").run(&self.conf).ok();
        assert_eq!(self.leases(), 0);
        std::fs::remove_file(&self.pid_file).unwrap();
    }

    /// ADD SIGKILLed while its IPAM plugin runs; the IPAM plugin's /proc entry, and when it
    /// started.
    fn kill_during_ipam(&self) -> (String, std::time::Instant) {
        let mut add = self.call("ADD").spawn(&self.conf);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Read once written whole: the plugin creates the file, then writes its pid.
        let pid = loop {
            match std::fs::read_to_string(&self.pid_file) {
                Ok(pid) if pid.ends_with('\n') => break pid,
                _ => assert!(
                    std::time::Instant::now() < deadline,
                    "the IPAM plugin never started"
                ),
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let started = std::time::Instant::now();
        add.kill().unwrap();
        add.wait().unwrap();
        (format!("/proc/{}", pid.trim()), started)
    }

    fn nothing_left(&self) {
        assert_eq!(self.leases(), 0, "no lease left after DEL");
        back_in_host(&self.veth.nic, &self.before).unwrap();
        assert!(self.data.records().is_empty());
    }
}

/// The plugin SIGKILLed while its IPAM ADD runs (a runtime timeout, an OOM kill): the IPAM plugin
/// is not killed with it (killed mid-allocation, host-local leaves a reservation no DEL can
/// release) and finishes; DEL's IPAM release waits for it and for anything it left running,
/// then releases, so no allocation outlives the DEL.
#[test]
fn an_ipam_allocation_never_outlives_a_killed_add() {
    let mut k = KilledAdd::new("killipam");
    k.probe_leases();
    k.conf["ipam"]["sleepMs"] = json!({"ADD": 1500});
    k.conf["ipam"]["lingerMs"] = json!(2000);
    let (ipam, started) = k.kill_during_ipam();
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        running(&ipam),
        "the IPAM plugin {ipam} died with the killed plugin"
    );
    for _ in 0..2 {
        k.call("DEL").run(&k.conf).ok();
    }
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1900),
        "DEL returned before the IPAM plugin and the allocation it left running ended"
    );
    assert!(!running(&ipam), "{ipam} outlived DEL");
    k.nothing_left();
}

/// An IPAM plugin orphaned by a killed ADD that runs on past `lockTimeoutMs`: DEL waits that
/// long for it, then fails with code 11 (the runtime retries); the DEL after it ended releases
/// the allocation it finished.
#[test]
fn del_waits_for_an_orphaned_ipam_plugin_no_longer_than_the_lock_timeout() {
    let mut k = KilledAdd::new("slowipam");
    k.conf["lockTimeoutMs"] = json!(300);
    k.probe_leases();
    k.conf["ipam"]["sleepMs"] = json!({"ADD": 2500});
    let (ipam, _) = k.kill_during_ipam();
    let asked = std::time::Instant::now();
    let msg = k.call("DEL").run(&k.conf).err(11);
    let waited = asked.elapsed();
    assert!(msg.contains("300 ms"), "{msg}");
    assert!(
        waited >= std::time::Duration::from_millis(300)
            && waited < std::time::Duration::from_millis(2000),
        "DEL waited {waited:?}"
    );
    assert!(running(&ipam), "{ipam} was stopped");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running(&ipam) {
        assert!(std::time::Instant::now() < deadline, "{ipam} never ends");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(k.leases(), 1, "the orphan finished its allocation");
    for _ in 0..2 {
        k.call("DEL").run(&k.conf).ok();
    }
    k.nothing_left();
}

/// A device-info path outside Multus's directory (the NPWG device-info spec's) is refused before
/// anything changes, with code 7 naming the directory; the same directory through /run, which
/// /var/run is, is the same place.
#[test]
fn device_info_files_are_written_only_in_the_devinfo_directory() {
    let sys = FixtureSys::new();
    let data = DataDir::new();
    let veth = Veth::new();
    let before = host_view(&veth.nic);
    let ns = TestNetns::new();
    sys.add_pci("0000:3b:00.2", &[&veth.nic]);
    let (k, v) = sys.env();
    let conf = |info: &std::path::Path| {
        json!({"cniVersion": "1.0.0", "name": "dinfo", "type": "rdma-ns", "dataDir": data.state(),
            "capabilities": {"deviceID": true, "CNIDeviceInfoFile": true},
            "runtimeConfig": {"deviceID": "0000:3b:00.2", "CNIDeviceInfoFile": info}})
    };
    let call = |command: &str| Call::new(command, "di", &ns.path(), "net1").env(&k, &v);

    let elsewhere = data.path().join("devinfo/net1.json");
    let msg = call("ADD").run(&conf(&elsewhere)).err(7);
    assert!(
        msg.contains("runtimeConfig.CNIDeviceInfoFile")
            && msg.contains("/var/run/k8s.cni.cncf.io/devinfo"),
        "{msg}"
    );
    assert!(!elsewhere.exists() && !data.path().join("devinfo").exists());
    back_in_host(&veth.nic, &before).unwrap();
    assert!(data.records().is_empty());

    let devinfo = DevinfoDir::new();
    let name = devinfo.path().file_name().unwrap();
    let under_run = std::path::Path::new("/run/k8s.cni.cncf.io/devinfo")
        .join(name)
        .join("cni/net1.json");
    let written = devinfo.path().join("cni/net1.json");
    call("ADD").run(&conf(&under_run)).ok();
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&written).unwrap()).unwrap();
    assert_eq!(info["pci"]["pci-address"], "0000:3b:00.2", "{info}");
    call("DEL").run(&conf(&under_run)).ok();
    assert!(!written.exists(), "removed on DEL");
    back_in_host(&veth.nic, &before).unwrap();
}
