//! `rdma-ns doctor` and `rdma-ns exporter` exec'd as an operator or a DaemonSet would, on
//! fixture sysfs trees (`--sysfs`): exit codes, stdout carrying only the output, the NFD file,
//! the exporter scraped over 127.0.0.1 and stopped by SIGTERM. Run as root (CI does): it
//! mknods the fixture's char devices in a temp dir. Every wait is bounded.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use nix::unistd::Pid;
use rdma_ns::kernel::topology::fixtures::SysfsFixture;
use rdma_ns::kernel::topology::RdmaSysfs;

mod exporter_support;
use exporter_support::{wait_exit, Exporter};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-ns");

/// A fixture node: every preset, modules loaded, shared mode, RoCE MTU 9000, every char
/// device node present 0666, a containerd with unlimited memlock, an empty data dir.
struct FixtureNode {
    fx: SysfsFixture,
    dir: PathBuf,
}

impl FixtureNode {
    fn new(tag: &str) -> FixtureNode {
        let fx = SysfsFixture::all().unwrap();
        fx.load_modules(&[
            "ib_core",
            "ib_uverbs",
            "rdma_ucm",
            "ib_umad",
            "mlx5_ib",
            "rdma_rxe",
        ])
        .unwrap();
        for n in ["ens1f0np0", "ens1f0v0", "enp6s0f0s88", "v0"] {
            fx.write_attr(format!("class/net/{n}/mtu"), "9000").unwrap();
        }
        let dir =
            std::env::temp_dir().join(format!("rdma-ns-node-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["dev", "proc/77", "data", "confs"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(dir.join("proc/77/comm"), "containerd\n").unwrap();
        std::fs::write(
            dir.join("proc/77/limits"),
            "Max locked memory         unlimited            unlimited            bytes\n",
        )
        .unwrap();
        let topo = RdmaSysfs::new(fx.root());
        let mut chars = topo.char_devices().unwrap();
        chars.extend(topo.rdma_cm().unwrap());
        for c in chars {
            let p = dir.join("dev").join(&c.name);
            mknod(
                &p,
                SFlag::S_IFCHR,
                Mode::empty(),
                makedev(c.major.into(), c.minor.into()),
            )
            .unwrap_or_else(|e| panic!("mknod {} (needs root): {e}", p.display()));
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o666))
                .unwrap();
        }
        FixtureNode { fx, dir }
    }

    /// `rdma-ns doctor` on this node (its sysfs, char devices, /proc, records and confs).
    fn doctor_command(&self, extra: &[&str]) -> Command {
        let d = |s: &str| self.dir.join(s).display().to_string();
        let mut cmd = Command::new(BIN);
        cmd.arg("doctor")
            .args(["--sysfs", &self.fx.path().display().to_string()])
            .args([
                "--dev",
                &d("dev"),
                "--proc",
                &d("proc"),
                "--data-dir",
                &d("data"),
            ])
            .args(["--conf-dir", &d("confs")])
            .args(extra)
            .env_remove("CNI_COMMAND")
            .stdin(Stdio::null());
        cmd
    }

    fn doctor(&self, extra: &[&str]) -> std::process::Output {
        self.doctor_command(extra).output().unwrap()
    }
}

impl Drop for FixtureNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn doctor_exit_code_is_the_worst_finding_and_json_says_the_same() {
    let node = FixtureNode::new("exit");
    // The fixture's downgraded PCIe link and this host lacking the fixture's netdevs (no
    // addresses to check) are warnings: exit 1.
    let out = node.doctor(&[]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{table}");
    assert!(table.contains("WARN  pcie"), "{table}");
    assert!(table.lines().last().unwrap().ends_with("0 FAIL"), "{table}");
    // A missing uverbs node is a failure: exit 2, and --json on stdout alone.
    std::fs::remove_file(node.dir.join("dev/uverbs0")).unwrap();
    let out = node.doctor(&["--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON");
    assert_eq!(v["exitCode"], 2);
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["status"] == "FAIL")
        .unwrap();
    assert_eq!(f["check"], "char-dev");
    assert!(f["object"].as_str().unwrap().ends_with("/uverbs0"));
    assert!(f["fix"].as_str().unwrap().contains("modprobe ib_uverbs"));
    // A usage error is 3, with the usage on stderr and nothing on stdout.
    let out = node.doctor(&["--bogus"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
}

#[test]
fn doctor_reads_the_conf_dir() {
    let node = FixtureNode::new("confs");
    std::fs::write(
        node.dir.join("confs/10-roce.conflist"),
        r#"{"cniVersion":"1.0.0","name":"roce","plugins":[{"type":"rdma-ns","mode":"rdma"}]}"#,
    )
    .unwrap();
    let out = node.doctor(&[]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(2), "{table}");
    assert!(
        table.contains("FAIL  netns-mode") && table.contains("roce (mode rdma) need exclusive"),
        "{table}"
    );
}

#[test]
fn doctor_nfd_writes_the_feature_file() {
    let node = FixtureNode::new("nfd");
    let file = node.dir.join("rdma-ns.features");
    let out = node.doctor(&["--nfd", &file.display().to_string(), "--expiry", "600"]);
    assert_eq!(out.status.code(), Some(1));
    let text = std::fs::read_to_string(&file).unwrap();
    for line in [
        "rdma-capable=true",
        "rdma-link-layer-infiniband=true",
        "rdma-link-layer-ethernet=true",
        "rdma-netns-mode=shared",
        "rdma-max-rate-gbps=100",
        "rdma-pcie-degraded=true",
        "rdma-ipoib-connected=false",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in {text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("# +expiry-time=")),
        "{text}"
    );
}

#[test]
fn doctor_nfd_every_refreshes_until_sigterm() {
    let node = FixtureNode::new("every");
    let file = node.dir.join("features");
    let nfd = file.display().to_string();
    let mut child = node
        .doctor_command(&["--nfd", &nfd, "--every", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(Instant::now() < deadline, "no feature file within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(
        wait_exit(&mut child, Duration::from_secs(5)).code(),
        Some(0)
    );
}

#[test]
fn exporter_serves_and_stops_cleanly_on_sigterm() {
    let node = FixtureNode::new("exporter");
    let port = "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0/ports/1";
    node.fx
        .write_attr(format!("{port}/counters/port_rcv_data"), "25")
        .unwrap();
    let exporter = Exporter::start(
        BIN,
        &[
            "--sysfs".as_ref(),
            node.fx.path().as_os_str(),
            "--data-dir".as_ref(),
            node.dir.join("data").as_os_str(),
        ],
    );
    let addr = exporter.addr().to_string();
    let resp = exporter.get(Duration::from_secs(10));
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert!(
        resp.contains("rdma_port_receive_bytes_total{device=\"mlx5_0\",port=\"1\"} 100\n"),
        "{resp}"
    );
    assert_eq!(exporter.stop(Duration::from_secs(5)).code(), Some(0));
    assert!(
        TcpStream::connect(&addr).is_err(),
        "the port is closed after exit"
    );
}

#[test]
fn exporter_refuses_a_bad_listen_address() {
    let out = Command::new(BIN)
        .args(["exporter", "--listen", "nowhere"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen \"nowhere\""));
    assert!(out.stdout.is_empty());
}
