//! Helpers for VM-only integration tests (`tests/vm_*.rs`, test functions named `vm_...`).
//!
//! These tests run inside the VM that `tests/vm/run.sh` boots (see tests/README.md, "VM tier");
//! the host tier skips them with `cargo test -- --skip vm_`. Include with `mod vm_support;`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

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
