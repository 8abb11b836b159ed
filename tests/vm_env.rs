//! VM case `env`: the guarantees the VM runner (tests/vm/guest.sh) gives every case.
//! VM-only: run with `tests/vm/run.sh env`; the host tier skips these (`--skip vm_`).

mod common;
mod vm_support;

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use vm_support::{
    case_netns, kernel_name, kernel_release, kernel_version, link_names, rdma_ns_bin, read,
    require_vm, run,
};

const MODULES: &[&str] = &[
    "ib_core",
    "rdma_rxe",
    "ib_umad",
    "rdma_ucm",
    "ib_uverbs",
    "veth",
    "macvlan",
    "dummy",
    "ipvlan",
];

/// "6.1" is Debian 12's kernel; "7" the newest of trixie-backports, at least 7.1 (rxe's
/// per-netns sockets).
#[test]
fn vm_kernel_is_the_debian_kernel_the_case_names() {
    require_vm();
    let release = kernel_release();
    assert!(
        release.ends_with("-amd64"),
        "expected a Debian -amd64 kernel, got {release}"
    );
    let (major, minor) = kernel_version();
    match kernel_name().as_str() {
        "6.1" => assert_eq!(
            (major, minor),
            (6, 1),
            "expected Debian 12's 6.1, got {release}"
        ),
        "7" => assert!(
            (major, minor) >= (7, 1),
            "expected trixie-backports' Linux 7 (>= 7.1), got {release}"
        ),
        other => panic!("unknown kernel name {other:?} from the runner"),
    }
}

#[test]
fn vm_modules_loaded() {
    require_vm();
    let modules = read("/proc/modules");
    let loaded: BTreeSet<&str> = modules
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for m in MODULES {
        assert!(loaded.contains(m), "module {m} not in /proc/modules");
    }
}

#[test]
fn vm_rxe0_registered_over_rxev0() {
    require_vm();
    assert_eq!(read("/sys/class/infiniband/rxe0/parent"), "rxev0");
    assert!(read("/sys/class/infiniband/rxe0/node_type").contains("CA"));
    let link = run("rdma", &["link", "show", "rxe0/1"]);
    assert!(
        link.contains("netdev rxev0"),
        "rdma link show rxe0/1: {link}"
    );
}

#[test]
fn vm_rxe0_port_active() {
    require_vm();
    let port = "/sys/class/infiniband/rxe0/ports/1";
    assert_eq!(read(&format!("{port}/state")), "4: ACTIVE");
    assert_eq!(read(&format!("{port}/phys_state")), "5: LinkUp");
    assert_eq!(read(&format!("{port}/link_layer")), "Ethernet");
}

#[test]
fn vm_char_devices_present() {
    require_vm();
    let cm = std::fs::metadata("/dev/infiniband/rdma_cm").expect("/dev/infiniband/rdma_cm");
    assert!(
        cm.file_type().is_char_device(),
        "rdma_cm is not a char device"
    );

    let mut rxe0_verbs = vec![];
    for entry in std::fs::read_dir("/dev/infiniband").expect("/dev/infiniband") {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if !name.starts_with("uverbs") {
            continue;
        }
        assert!(
            entry.metadata().unwrap().file_type().is_char_device(),
            "{name} not a char device"
        );
        if read(&format!("/sys/class/infiniband_verbs/{name}/ibdev")) == "rxe0" {
            rxe0_verbs.push(name);
        }
    }
    assert_eq!(
        rxe0_verbs.len(),
        1,
        "expected one uverbs device for rxe0: {rxe0_verbs:?}"
    );
}

#[test]
fn vm_netns_mode_shared() {
    require_vm();
    assert_eq!(read("/sys/module/ib_core/parameters/netns_mode"), "Y");
    let system = run("rdma", &["system"]);
    assert!(system.contains("netns shared"), "rdma system: {system}");
}

#[test]
fn vm_fresh_links_and_netns() {
    require_vm();
    let host: BTreeSet<String> = link_names(None).into_iter().collect();
    let want: BTreeSet<String> = ["lo", "rxev0", "rxev1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(host, want, "host netns links");
    for dev in ["rxev0", "rxev1"] {
        assert_eq!(
            read(&format!("/sys/class/net/{dev}/operstate")),
            "up",
            "{dev} operstate"
        );
    }

    let pod = case_netns();
    assert!(pod.exists(), "{} missing", pod.display());
    let pod_name = pod.file_name().unwrap().to_str().unwrap();
    let netns: Vec<String> = run("ip", &["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert_eq!(netns, vec![pod_name.to_string()], "ip netns list");
    assert_eq!(
        link_names(Some(pod_name)),
        vec!["lo".to_string()],
        "links in {pod_name}"
    );
}

#[test]
fn vm_runner_env() {
    require_vm();
    let bin = rdma_ns_bin();
    let meta = std::fs::metadata(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    assert!(
        meta.is_file() && meta.permissions().mode() & 0o111 != 0,
        "{} not executable",
        bin.display()
    );
    let state = std::path::Path::new("/var/lib/cni/rdma-ns");
    assert!(
        !state.exists() || std::fs::read_dir(state).unwrap().next().is_none(),
        "state dir {} not empty at case start",
        state.display()
    );
}
