//! Root integration-test helpers: real network namespaces and veth pairs standing in for NICs,
//! and the built `rdma-ns` binary exec'd exactly as a runtime does (env + stdin).
//!
//! Every object is named with a per-process, per-test unique prefix and removed on drop, so
//! tests run in parallel and leave nothing behind.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

pub mod apiserver;
#[cfg(feature = "dra")]
pub mod dra;
pub mod fabric;

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_rdma-ns");

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short unique tag: netdev names are limited to 15 bytes. The pid (mod 0x1000, 3 hex digits,
/// zero-padded so its width is fixed) and the counter are joined by `x`, which no hex digit
/// is, so two (pid, counter) pairs never give the same tag; pids 0x1000 apart can still meet,
/// which is why `DataDir`/`FixtureSys` refuse an existing path rather than wipe it.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{:03x}x{n:x}", std::process::id() % 0x1000)
}

/// Runs a setup/inspection command (iproute2 in tests only); panics with its stderr on failure.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn sh_ok(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct TestNetns {
    pub name: String,
}

impl TestNetns {
    pub fn new() -> TestNetns {
        let name = unique("rnt");
        sh(&["ip", "netns", "add", &name]);
        TestNetns { name }
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// `ip -j link show` inside the namespace.
    pub fn link(&self, ifname: &str) -> Option<Value> {
        link_in(Some(&self.name), ifname)
    }

    pub fn addrs(&self, ifname: &str) -> Vec<String> {
        addrs_in(Some(&self.name), ifname)
    }

    pub fn delete(&self) {
        let _ = sh_ok(&["ip", "netns", "delete", &self.name]);
    }

    /// The namespace's policy rules on a source (`from <IP> ...`, both families) as `ip rule`
    /// prints them: a rail's; the default rules are `from all`.
    pub fn source_rules(&self) -> Vec<String> {
        let mut all = sh(&["ip", "-n", &self.name, "rule", "show"]);
        all.push_str(&sh(&["ip", "-n", &self.name, "-6", "rule", "show"]));
        all.lines()
            .filter(|l| l.contains("from") && !l.contains("from all"))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        self.delete();
    }
}

/// A veth pair in the host: `nic` stands in for a NIC to move, `peer` stays behind.
pub struct Veth {
    pub nic: String,
    pub peer: String,
}

impl Veth {
    pub fn new() -> Veth {
        let nic = unique("rnv");
        let peer = format!("{nic}p");
        sh(&[
            "ip", "link", "add", &nic, "type", "veth", "peer", "name", &peer,
        ]);
        sh(&["ip", "link", "set", &peer, "up"]);
        Veth { nic, peer }
    }

    pub fn mac(&self) -> String {
        host_link(&self.nic).expect("nic in host")["address"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting the peer deletes both ends, wherever the nic is.
        let _ = sh_ok(&["ip", "link", "del", &self.peer]);
    }
}

pub fn link_in(ns: Option<&str>, ifname: &str) -> Option<Value> {
    let mut args = vec!["ip"];
    if let Some(n) = ns {
        args.extend(["-n", n]);
    }
    args.extend(["-j", "-d", "link", "show", "dev", ifname]);
    let out = Command::new(args[0]).args(&args[1..]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?.first().cloned()
}

pub fn host_link(ifname: &str) -> Option<Value> {
    link_in(None, ifname)
}

pub fn addrs_in(ns: Option<&str>, ifname: &str) -> Vec<String> {
    let mut args = vec!["ip"];
    if let Some(n) = ns {
        args.extend(["-n", n]);
    }
    args.extend(["-j", "addr", "show", "dev", ifname]);
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let mut found = Vec::new();
    for link in v.as_array().into_iter().flatten() {
        for a in link["addr_info"].as_array().into_iter().flatten() {
            if a["scope"] == "link" {
                continue;
            }
            found.push(format!(
                "{}/{}",
                a["local"].as_str().unwrap(),
                a["prefixlen"]
            ));
        }
    }
    found
}

/// One plugin invocation's outcome.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {:?} / {}",
                self.stdout, self.stderr
            )
        })
    }

    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(
            self.code, 0,
            "plugin failed: {} / {}",
            self.stdout, self.stderr
        );
        self
    }

    /// Asserts a CNI error with `code` and returns its msg.
    #[track_caller]
    pub fn err(&self, code: u64) -> String {
        assert_ne!(self.code, 0, "expected failure, got {}", self.stdout);
        let v = self.json();
        assert_eq!(v["code"], code, "wrong code: {v}");
        for key in ["cniVersion", "code", "msg", "details"] {
            assert!(v.get(key).is_some(), "error lacks {key}: {v}");
        }
        v["msg"].as_str().unwrap().to_string()
    }
}

/// How a runtime would call the plugin: env vars and the conf on stdin.
#[derive(Clone, Debug)]
pub struct Call {
    pub command: String,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: String,
    pub path: String,
    pub extra_env: Vec<(String, String)>,
}

pub fn cni_path() -> String {
    format!("{}/tests/support:/usr/lib/cni", env!("CARGO_MANIFEST_DIR"))
}

impl Call {
    pub fn new(command: &str, container_id: &str, netns: &str, ifname: &str) -> Call {
        Call {
            command: command.into(),
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: ifname.into(),
            args: String::new(),
            path: cni_path(),
            extra_env: Vec::new(),
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Call {
        self.extra_env.push((k.into(), v.into()));
        self
    }

    pub fn run(&self, conf: &Value) -> Outcome {
        self.run_raw(conf.to_string().as_bytes())
    }

    /// Starts the plugin with `conf` on stdin and returns at once (to kill it mid-command).
    pub fn spawn(&self, conf: &Value) -> std::process::Child {
        let mut child = self
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn plugin");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.to_string().as_bytes())
            .unwrap();
        child
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(PLUGIN);
        // libcni sets every variable, some of them empty: mimic that exactly.
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", &self.command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_ARGS", &self.args)
            .env("CNI_PATH", &self.path);
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        cmd
    }

    pub fn run_raw(&self, stdin: &[u8]) -> Outcome {
        let mut cmd = self.command();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn plugin");
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        Outcome {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A private data dir (state + locks) per test, removed on drop.
pub struct DataDir(pub PathBuf);

impl DataDir {
    pub fn new() -> DataDir {
        let p = std::env::temp_dir().join(unique("rdma-ns-it-"));
        // create_dir, not create_dir_all: a path that exists belongs to another test run, and
        // wiping it would break that run.
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        DataDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn str(&self) -> String {
        self.0.display().to_string()
    }

    /// The plugin's `dataDir` (records and locks), beside the IPAM plugins' files.
    pub fn state(&self) -> String {
        self.0.join("state").display().to_string()
    }

    /// Attachment records left under the data dir (lock files excluded).
    pub fn records(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for net in std::fs::read_dir(self.0.join("state"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if net.file_name() == "locks" || !net.path().is_dir() {
                continue;
            }
            for f in std::fs::read_dir(net.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                found.push(f.path());
            }
        }
        found
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory of this test's own under the device-info directory, the only place rdma-ns
/// writes a device-info file (docs/operations.md, threat model); removed on drop.
pub struct DevinfoDir(pub PathBuf);

impl DevinfoDir {
    pub fn new() -> DevinfoDir {
        let p = Path::new("/var/run/k8s.cni.cncf.io/devinfo").join(unique("rdma-ns-it-"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        // As in DataDir::new: never wipe a path another run may own.
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        DevinfoDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DevinfoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A move-mode conf selecting `device`, with static IPAM for `address` unless `ipam` given.
pub fn move_conf(version: &str, name: &str, device: &str, data: &DataDir) -> Value {
    serde_json::json!({
        "cniVersion": version,
        "name": name,
        "type": "rdma-ns",
        "mode": "move",
        "device": device,
        "dataDir": data.state(),
    })
}

pub fn static_ipam(address: &str) -> Value {
    serde_json::json!({"type": "static", "addresses": [{"address": address}]})
}

/// cni-test-ipam handing out `address`, with one lease file per allocation under `data`
/// ([`test_ipam_leases`] counts them), so a test sees whether DEL released it.
pub fn test_ipam(address: &str, data: &DataDir) -> Value {
    let leases = data.path().join("leases");
    std::fs::create_dir_all(&leases).unwrap();
    serde_json::json!({"type": "cni-test-ipam", "addresses": [{"address": address}],
        "leaseDir": leases})
}

/// How many leases the [`test_ipam`] of `data` holds.
pub fn test_ipam_leases(data: &DataDir) -> usize {
    std::fs::read_dir(data.path().join("leases"))
        .unwrap()
        .count()
}

/// The mode's parent in `conf`: move mode's `device`, a child mode's `master`, which is set up
/// first (a child of a down parent has no carrier).
pub fn set_parent(conf: &mut Value, mode: &str, nic: &str) {
    match mode {
        "move" => conf["device"] = serde_json::json!(nic),
        _ => {
            conf["master"] = serde_json::json!(nic);
            sh(&["ip", "link", "set", nic, "up"]);
        }
    }
}

/// A fixture sysfs root whose PCI/aux devices point at real host netdevs, so that selection by
/// `pciBusID`/`deviceID`/`kernelpath` resolves to veths the test can really move.
pub struct FixtureSys {
    pub root: PathBuf,
}

impl FixtureSys {
    pub fn new() -> FixtureSys {
        let root = std::env::temp_dir().join(unique("rdma-ns-sys-"));
        // As in DataDir::new: never wipe a path another run may own.
        std::fs::create_dir(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        std::fs::create_dir_all(root.join("bus/auxiliary/devices")).unwrap();
        FixtureSys { root }
    }

    /// `devices/pci0000:00/0000:00:02.0/<bdf>/net/<netdev>` and the relative bus symlink, as the
    /// kernel lays them out.
    pub fn add_pci(&self, bdf: &str, netdevs: &[&str]) -> String {
        let rel = format!("devices/pci0000:00/0000:00:02.0/{bdf}");
        for n in netdevs {
            std::fs::create_dir_all(self.root.join(&rel).join("net").join(n)).unwrap();
        }
        std::fs::create_dir_all(self.root.join(&rel)).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../{rel}"),
            self.root.join("bus/pci/devices").join(bdf),
        )
        .unwrap();
        format!("/sys/{rel}")
    }

    pub fn add_aux(&self, name: &str, netdev: &str) {
        let rel = format!("devices/pci0000:00/0000:00:03.0/0000:06:00.0/{name}");
        std::fs::create_dir_all(self.root.join(&rel).join("net").join(netdev)).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../{rel}"),
            self.root.join("bus/auxiliary/devices").join(name),
        )
        .unwrap();
    }

    pub fn env(&self) -> (String, String) {
        ("RDMA_NS_SYSFS_ROOT".into(), self.root.display().to_string())
    }
}

impl Drop for FixtureSys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The host-side facts a failed ADD must leave unchanged and a DEL must restore.
#[derive(Debug, PartialEq)]
pub struct HostView {
    pub present: bool,
    pub mac: String,
    pub mtu: u64,
    pub up: bool,
    pub addrs: Vec<String>,
    /// IFLA_IFALIAS (`roceQos` sets the pod interface's; a moved netdev must get its own back).
    pub alias: Option<String>,
}

pub fn host_view(ifname: &str) -> HostView {
    match host_link(ifname) {
        None => HostView {
            present: false,
            mac: String::new(),
            mtu: 0,
            up: false,
            addrs: Vec::new(),
            alias: None,
        },
        Some(l) => HostView {
            present: true,
            mac: l["address"].as_str().unwrap_or_default().to_string(),
            mtu: l["mtu"].as_u64().unwrap(),
            up: l["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
            addrs: addrs_in(None, ifname),
            alias: l["ifalias"].as_str().map(str::to_string),
        },
    }
}

/// The full "back in the host" check after a DEL: the device is in the host under its own name
/// with the MAC, MTU, admin state and addresses it had before ADD. Err says what differs.
pub fn back_in_host(ifname: &str, before: &HostView) -> Result<(), String> {
    let now = host_view(ifname);
    if !now.present {
        let by_mac: Vec<String> = host_links()
            .into_iter()
            .filter(|l| l["address"] == before.mac.as_str())
            .map(|l| l["ifname"].as_str().unwrap_or_default().to_string())
            .collect();
        return Err(format!(
            "{ifname} is not in the host under its name (host links with its MAC {}: {by_mac:?})",
            before.mac
        ));
    }
    if now != *before {
        return Err(format!(
            "{ifname}: before ADD {before:?}, after DEL {now:?}"
        ));
    }
    Ok(())
}

/// `ip -j -d link show` of the host netns.
pub fn host_links() -> Vec<Value> {
    let out = sh(&["ip", "-j", "-d", "link", "show"]);
    match serde_json::from_str(&out).expect("ip -j link show is JSON") {
        Value::Array(v) => v,
        other => panic!("ip -j link show: not an array: {other}"),
    }
}

/// Links of the host netns stacked on `parent` (macvlan, ipvlan, vlan, ipoib children), by
/// name. iproute2 names a host-side lower device as `"link": "<name>"` (`link_index` only when
/// it is in another netns), so that is what is matched; the veth's own peer also points at its
/// parent and is not a child.
pub fn host_children(parent: &str) -> Vec<String> {
    host_links()
        .into_iter()
        .filter(|l| l["link"] == parent && l["linkinfo"]["info_kind"] != "veth")
        .map(|l| l["ifname"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The "no child left" check after a DEL: `ifname` gone from the pod and no child of `parent`
/// in the host (where a refunded IPoIB child or a child the plugin never moved would be).
pub fn child_gone(ns: &TestNetns, ifname: &str, parent: &str) -> Result<(), String> {
    if let Some(l) = ns.link(ifname) {
        return Err(format!("{ifname} is still in pod netns {}: {l}", ns.name));
    }
    let left = host_children(parent);
    if !left.is_empty() {
        return Err(format!("children of {parent} left in the host: {left:?}"));
    }
    Ok(())
}

/// What each move- and child-mode test starts with: a fresh pod netns, a veth whose host end
/// stands in for the NIC (or the parent of a child), and an empty data dir.
pub fn veth_pod() -> (TestNetns, Veth, DataDir) {
    (TestNetns::new(), Veth::new(), DataDir::new())
}

/// The child-mode leak check after a DEL (or a failed ADD): `child_gone` and no attachment
/// record left in `data`. Err says what is left.
pub fn child_and_record_gone(
    ns: &TestNetns,
    ifname: &str,
    parent: &str,
    data: &DataDir,
) -> Result<(), String> {
    child_gone(ns, ifname, parent)?;
    let records = data.records();
    if !records.is_empty() {
        return Err(format!("records left: {records:?}"));
    }
    Ok(())
}

/// The move-mode check after a DEL: `nic` is back in the host, with this MTU and admin down.
pub fn assert_back_in_host(nic: &str, mtu: u64) {
    let link = host_link(nic).unwrap_or_else(|| panic!("{nic} is not back in the host"));
    assert_eq!(link["mtu"], mtu, "{link}");
    let flags = link["flags"].as_array().unwrap();
    assert!(
        !flags.iter().any(|f| f == "UP"),
        "admin down after DEL: {link}"
    );
}

/// host-local's leases under its `dataDir` (its `last_reserved_ip.*` and `lock` files are kept
/// by design and not leases), as paths.
pub fn leases(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                stack.push(e.path());
            } else if name != "lock" && !name.starts_with("last_reserved_ip") {
                found.push(e.path());
            }
        }
    }
    found
}

/// VM tier: the case's scratch dir (`RDMA_NS_VM_SCRATCH`, set by tests/vm/guest.sh).
pub fn scratch() -> String {
    std::env::var("RDMA_NS_VM_SCRATCH").expect("run inside the VM tier (RDMA_NS_VM_SCRATCH)")
}

/// VM tier: the plugin's data dir for this case, registered with the runner's leak check (it
/// must be empty when the case ends).
pub fn state_dir() -> String {
    let dir = format!("{}/state", scratch());
    if let Ok(list) = std::env::var("RDMA_NS_VM_STATE_DIRS") {
        let known = std::fs::read_to_string(&list).unwrap_or_default();
        if !known.lines().any(|l| l == dir) {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&list)
                .unwrap();
            writeln!(f, "{dir}").unwrap();
        }
    }
    dir
}
