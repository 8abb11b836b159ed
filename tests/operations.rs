//! `rdma-ns list` and `rdma-ns reconcile` on real attachments made by the binary: a pod netns
//! deleted with no DEL is an orphan that reconcile releases (record and IPAM lease), while a
//! live attachment is never touched.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;

use common::*;
use serde_json::{json, Value};

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(PLUGIN)
        .args(args)
        .env_remove("CNI_COMMAND")
        .output()
        .expect("run rdma-ns");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn listed(data: &DataDir) -> Vec<Value> {
    let (code, out, err) = cli(&["list", "--json", "--data-dir", &data.state()]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn reconcile_releases_orphans_and_leaves_live_attachments() {
    let data = DataDir::new();
    let ipam = |addr: &str| test_ipam(addr, &data);
    let gone_veth = Veth::new();
    let gone_ns = TestNetns::new();
    let mut moved = move_conf("1.1.0", "opsmove", &gone_veth.nic, &data);
    moved["ipam"] = ipam("10.97.0.5/24");
    let mut add = Call::new("ADD", "orphan1", &gone_ns.path(), "net1");
    add.args = "K8S_POD_NAMESPACE=team;K8S_POD_NAME=trainer-0;K8S_POD_UID=u-1".into();
    add.run(&moved).ok();

    let live_veth = Veth::new();
    sh(&["ip", "link", "set", &live_veth.nic, "up"]);
    let live_ns = TestNetns::new();
    let child = json!({"cniVersion": "1.1.0", "name": "opschild", "type": "rdma-ns",
        "mode": "macvlan", "master": live_veth.nic, "dataDir": data.state(),
        "ipam": ipam("10.98.0.5/24")});
    Call::new("ADD", "live1", &live_ns.path(), "net1")
        .run(&child)
        .ok();

    // The probes see both, alive, with what the records say.
    let rows = listed(&data);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let row = |id: &str| {
        listed(&data)
            .into_iter()
            .find(|r| r["containerId"] == id)
            .unwrap_or_else(|| panic!("{id} listed"))
    };
    let orphan = row("orphan1");
    assert_eq!(orphan["netnsState"], "alive");
    assert_eq!(orphan["pod"]["name"], "trainer-0");
    assert_eq!(orphan["device"], gone_veth.nic.as_str());
    assert_eq!(orphan["mode"], "move");
    assert_eq!(
        row("live1")["device"],
        format!("macvlan on {}", live_veth.nic)
    );
    assert_eq!(test_ipam_leases(&data), 2);
    let (code, table, _) = cli(&["list", "--data-dir", &data.state()]);
    assert_eq!(code, 0);
    assert!(
        table.starts_with("POD") && table.contains("team/trainer-0"),
        "{table}"
    );

    // The pod netns dies with no DEL (the veth goes with it).
    gone_ns.delete();
    assert_eq!(row("orphan1")["netnsState"], "gone");
    assert_eq!(row("live1")["netnsState"], "alive");

    let (code, out, err) = cli(&["reconcile", "--dry-run", "--data-dir", &data.state()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("would release orphan1:net1"), "{out}");
    assert!(!out.contains("live1"), "{out}");
    assert_eq!(data.records().len(), 2, "a dry run changes nothing");
    assert_eq!(test_ipam_leases(&data), 2);

    let (code, out, err) = cli(&["reconcile", "--data-dir", &data.state()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("released orphan1:net1"), "{out}");
    let rows = listed(&data);
    assert_eq!(rows.len(), 1, "only the live attachment is left: {rows:?}");
    assert_eq!(rows[0]["containerId"], "live1");
    assert_eq!(test_ipam_leases(&data), 1, "the orphan's lease is released");
    assert!(
        live_ns.link("net1").is_some(),
        "the live pod keeps its interface"
    );

    let (code, out, _) = cli(&["reconcile", "--data-dir", &data.state()]);
    assert_eq!((code, out.as_str()), (0, ""), "nothing more to do");

    Call::new("DEL", "live1", &live_ns.path(), "net1")
        .run(&child)
        .ok();
    assert_eq!(test_ipam_leases(&data), 0);
}

#[test]
fn list_and_reconcile_refuse_unknown_arguments() {
    for args in [
        &["list", "--bogus"][..],
        &["reconcile", "--interval", "0"],
        &["reconcile", "--data-dir"],
    ] {
        let (code, out, err) = cli(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(out.is_empty() && !err.is_empty(), "{args:?}");
    }
}

/// The files under the data dir that belong to one attachment (issue 22): its lock file, which
/// its IPAM plugins inherit, and temp records left by a plugin killed mid-write.
struct AttachmentFiles<'a> {
    data: &'a DataDir,
    network: &'a str,
}

impl AttachmentFiles<'_> {
    /// Its lock file, as every release names it.
    fn lock(&self, id: &str, ifname: &str) -> std::path::PathBuf {
        let name = format!("ipam-{}-{id}-{ifname}.lock", self.network);
        std::path::Path::new(&self.data.state())
            .join("locks")
            .join(name)
    }

    /// What a killed ADD leaves: a temp record of a writer that is gone, and the lock file.
    fn plant(&self, id: &str) -> Vec<std::path::PathBuf> {
        let mut gone = Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        let dir = std::path::Path::new(&self.data.state()).join(self.network);
        let temp = dir.join(format!(".{id}:net1.json.tmp-{pid}"));
        let lock = self.lock(id, "net1");
        for f in [&temp, &lock] {
            std::fs::write(f, b"").unwrap();
        }
        vec![temp, lock]
    }

    /// The network's attachment lock files, by name.
    fn locks(&self) -> Vec<String> {
        let prefix = format!("ipam-{}-", self.network);
        let mut found: Vec<String> = std::fs::read_dir(format!("{}/locks", self.data.state()))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        found.sort();
        found
    }
}

fn all_gone(files: &[std::path::PathBuf], by: &str) {
    for f in files {
        assert!(!f.exists(), "{by} left {}", f.display());
    }
}

/// A process holding the flock of `path` (as a writer at work does), until dropped.
struct Holder(std::process::Child);

impl Holder {
    fn new(path: &std::path::Path) -> Holder {
        // flock(1) and the sleep it runs share the lock: both go, as one process group.
        let child = Command::new("flock")
            .arg(path)
            .args(["sleep", "30"])
            .process_group(0)
            .spawn()
            .unwrap();
        let free = || {
            Command::new("flock")
                .arg("-n")
                .arg(path)
                .arg("true")
                .status()
                .unwrap()
                .success()
        };
        while free() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Holder(child)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        sh(&["kill", "-KILL", "--", &format!("-{}", self.0.id())]);
        self.0.wait().unwrap();
    }
}

#[test]
fn no_file_outlives_its_attachment() {
    let data = DataDir::new();
    let veth = Veth::new();
    sh(&["ip", "link", "set", &veth.nic, "up"]);
    let ns = TestNetns::new();
    let conf = json!({"cniVersion": "1.1.0", "name": "opsfiles", "type": "rdma-ns",
        "mode": "macvlan", "master": veth.nic, "dataDir": data.state(), "lockTimeoutMs": 200,
        "ipam": test_ipam("10.99.0.5/24", &data)});
    let files = AttachmentFiles {
        data: &data,
        network: "opsfiles",
    };
    let call = |command: &str, id: &str| Call::new(command, id, &ns.path(), "net1");

    // Three pods, three times: each lock file exists while its attachment does, and goes with it.
    for _ in 0..3 {
        for pod in 0..3 {
            Call::new(
                "ADD",
                &format!("pod{pod}"),
                &ns.path(),
                &format!("net{pod}"),
            )
            .run(&conf)
            .ok();
        }
        assert_eq!(
            files.locks(),
            [
                "ipam-opsfiles-pod0-net0.lock",
                "ipam-opsfiles-pod1-net1.lock",
                "ipam-opsfiles-pod2-net2.lock"
            ]
        );
        for pod in 0..3 {
            Call::new(
                "DEL",
                &format!("pod{pod}"),
                &ns.path(),
                &format!("net{pod}"),
            )
            .run(&conf)
            .ok();
        }
        assert_eq!(files.locks(), Vec::<String>::new());
    }

    // What a killed ADD left goes with the next operation on its attachment, record or not: its
    // temp record with any, its lock file with the DEL that finds the attachment gone.
    for command in ["DEL", "CHECK", "ADD"] {
        let left = files.plant("killed1");
        assert!(left.iter().all(|f| f.exists()));
        call(command, "killed1").run(&conf);
        all_gone(&left[..1], command);
        if command == "ADD" {
            call("DEL", "killed1").run(&conf).ok();
        }
    }
    all_gone(&[files.lock("killed1", "net1")], "DEL");

    // ... and with `rdma-ns list`, `reconcile` (not its dry run) and GC, also what no operation
    // on its attachment will come for.
    let left = files.plant("left1");
    cli(&["list", "--data-dir", &data.state()]);
    all_gone(&left, "list");
    let left = files.plant("left2");
    cli(&["reconcile", "--dry-run", "--data-dir", &data.state()]);
    assert!(left.iter().all(|f| f.exists()), "a dry run changes nothing");
    cli(&["reconcile", "--data-dir", &data.state()]);
    all_gone(&left, "reconcile");
    let left = files.plant("left3");
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    Call::new("GC", "", "", "").run(&gc).ok();
    all_gone(&left, "GC");

    // What someone holds (a writer at work, an IPAM plugin still running) stays.
    let left = files.plant("held1");
    let holders: Vec<Holder> = left.iter().map(|f| Holder::new(f)).collect();
    let busy = call("DEL", "held1").run(&conf).err(11);
    assert!(busy.contains("IPAM plugin of held1:net1"), "{busy}");
    cli(&["list", "--data-dir", &data.state()]);
    Call::new("GC", "", "", "").run(&gc).ok();
    assert!(left.iter().all(|f| f.exists()), "a held file was removed");
    drop(holders);
    cli(&["list", "--data-dir", &data.state()]);
    all_gone(&left, "list once they were free");
    assert_eq!(test_ipam_leases(&data), 0);
}
