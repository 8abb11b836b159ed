//! VM-tier cases of `rdma-ns env` and `rdma-ns-probe` on a real RDMA kernel (Debian 6.1 with
//! Soft-RoCE; tests/vm/run.sh builds them with `--features verbs`). Each case starts with rxe0
//! over the veth rxev0 (peer rxev1), an empty netns `vmpod` and shared netns mode.
//!
//! "In the pod" means `ip netns exec vmpod`, which, like a container runtime, gives the
//! command a sysfs mounted inside the pod's netns. What these kernels cannot show: RDMA
//! traffic between pods (rxe's UDP socket lives in the initial netns only), so the probe's
//! traffic test runs host to host on rxe GID 0, where rxe does carry it.

mod common;
mod vm_support;

use std::process::Command;

use common::*;
use serde_json::{json, Value};
use vm_support::{
    probe_bin, probe_exchange_args, require_vm, wait_for_sysfs_gid_index, wait_link_local_usable,
    MacvlanPod,
};

const POD: &str = "/run/netns/vmpod";
const POD_IP: &str = "10.9.0.5";
const POD_GID: &str = "0000:0000:0000:0000:0000:ffff:0a09:0005";

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &str, args: &[&str]) -> Out {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Runs a command inside the pod, as a container would.
fn in_pod(cmd: &str, args: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", "vmpod", cmd];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn json_of(o: &Out) -> Value {
    serde_json::from_str(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} / {}", o.stdout, o.stderr))
}

#[test]
fn vm_env_in_a_macvlan_pod_names_the_gid_index_the_kernel_chose() {
    require_vm();
    let bin = PLUGIN;
    let _pod = MacvlanPod::attach("vmpod", POD_IP);
    let index = wait_for_sysfs_gid_index("rxe0", POD_GID, "net1");
    eprintln!("kernel's GID index for {POD_IP} on net1: {index}");

    let o = in_pod(bin, &["env", "--format", "json"]);
    assert_eq!(o.code, 0, "{} / {}", o.stdout, o.stderr);
    let doc = json_of(&o);
    let f = &doc["interfaces"][0];
    assert_eq!(doc["interfaces"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(f["ifname"], "net1", "{doc}");
    assert_eq!(f["ibdev"], "rxe0", "{doc}");
    assert_eq!(f["via"], "gid-table", "{doc}");
    assert_eq!(f["gidIndex"], index, "{doc}");
    assert_eq!(f["portActive"], true, "{doc}");
    let env = &doc["env"];
    assert_eq!(env["NCCL_IB_GID_INDEX"], index.to_string(), "{doc}");
    assert_eq!(env["UCX_IB_GID_INDEX"], index.to_string(), "{doc}");
    assert_eq!(env["NCCL_IB_HCA"], "=rxe0:1", "{doc}");
    assert_eq!(env["UCX_NET_DEVICES"], "rxe0:1", "{doc}");
    assert_eq!(env["NCCL_SOCKET_IFNAME"], "=net1", "{doc}");
    assert_eq!(env["NCCL_IB_DISABLE"], "0", "{doc}");

    // The node's view of the same pod: rtnetlink and a sysfs from inside its netns.
    let node = run(bin, &["env", "--netns", POD, "--format", "json"]);
    assert_eq!(node.code, 0, "{}", node.stderr);
    assert_eq!(json_of(&node)["env"], doc["env"]);

    // --exec hands the variables to the command.
    let o = in_pod(
        bin,
        &[
            "env",
            "--exec",
            "--",
            "sh",
            "-c",
            "echo $NCCL_IB_GID_INDEX $NCCL_IB_HCA",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout.trim(), format!("{index} =rxe0:1"));
    let o = in_pod(bin, &["env"]);
    assert!(
        o.stdout
            .contains(&format!("export NCCL_IB_GID_INDEX='{index}'\n")),
        "{}",
        o.stdout
    );
}

#[test]
fn vm_env_names_a_port_that_went_down_and_prints_nothing_unless_best_effort() {
    require_vm();
    let _pod = MacvlanPod::attach("vmpod", POD_IP);
    wait_for_sysfs_gid_index("rxe0", POD_GID, "net1");
    // Twin: usable while the port is up.
    assert_eq!(in_pod(PLUGIN, &["env"]).code, 0);
    // rxe follows its netdev's carrier: the peer down takes rxev0's carrier and the port.
    sh(&["ip", "link", "set", "rxev1", "down"]);
    let down = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::read_to_string("/sys/class/infiniband/rxe0/ports/1/state")
            .is_ok_and(|s| !s.contains("ACTIVE"))
    });
    let o = in_pod(PLUGIN, &["env"]);
    let be = in_pod(PLUGIN, &["env", "--best-effort", "--format", "json"]);
    sh(&["ip", "link", "set", "rxev1", "up"]);
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::read_to_string("/sys/class/infiniband/rxe0/ports/1/state")
            .is_ok_and(|s| s.contains("ACTIVE"))
    });
    assert!(up, "rxe0's port did not come back");
    assert!(down, "rxe0's port never left ACTIVE");
    assert_eq!(o.code, 1, "{} / {}", o.stdout, o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert!(o.stderr.contains("net1: port 1 of rxe0 is"), "{}", o.stderr);
    assert!(o.stderr.contains("not ACTIVE"), "{}", o.stderr);
    assert_eq!(be.code, 0, "{}", be.stderr);
    let doc = json_of(&be);
    assert_eq!(
        doc["env"],
        json!({}),
        "no variable for an unusable port: {doc}"
    );
    assert_eq!(doc["problems"][0]["kind"], "port-not-active", "{doc}");
    assert_eq!(doc["interfaces"][0]["ibdev"], "rxe0", "{doc}");
}

#[test]
fn vm_probe_in_the_pod_brings_an_rc_qp_to_rts_on_envs_gid_index() {
    require_vm();
    let _pod = MacvlanPod::attach("vmpod", POD_IP);
    let index = wait_for_sysfs_gid_index("rxe0", POD_GID, "net1");
    let o = in_pod(probe_bin(), &[]);
    assert_eq!(o.code, 0, "{} / {}", o.stdout, o.stderr);
    let doc = json_of(&o);
    let p = &doc["ports"][0];
    assert_eq!(p["hca"], "rxe0:1", "{doc}");
    assert_eq!(p["ifname"], "net1", "{doc}");
    assert_eq!(p["gidIndex"], index, "{doc}");
    assert_eq!(p["gid"], format!("::ffff:{POD_IP}"), "{doc}");
    assert_eq!(p["portState"], "active", "{doc}");
    assert_eq!(p["qpState"], "RTS", "{doc}");
    assert!(p["gidEntries"].as_u64().unwrap() >= 3, "{doc}");
    eprintln!("probe in the pod: {p}");
    // Absence twin of the pod's view: with no RDMA interface the probe is not ready.
    let bare = run(probe_bin(), &[]);
    assert_eq!(bare.code, 1, "{} / {}", bare.stdout, bare.stderr);
}

#[test]
fn vm_probe_ping_pong_and_write_stream_host_to_host_on_rxe_gid_0() {
    require_vm();
    wait_link_local_usable("rxev0");
    let args = |role: &[&str]| probe_exchange_args("rxe0", 0, 100, role);
    // One try and a hundred round trips: each is a chance for the listener's send completion
    // and the connector's next message to land in one poll, which a wait that counted any
    // completion toward any wait turned into a lost receive (the exchange then stopped at an
    // iteration between 2 and 87). Retries would hide that, so there are none.
    let server = Command::new(probe_bin())
        .args(args(&["--listen", "18515"]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = None;
    for _ in 0..100 {
        let o = Command::new(probe_bin())
            .args(args(&["--connect", "127.0.0.1:18515"]))
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stderr).contains("Connection refused") {
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        client = Some(o);
        break;
    }
    let s = server.wait_with_output().unwrap();
    let c = client.expect("the listener never accepted");
    assert!(
        s.status.success() && c.status.success(),
        "listener: {} {}\nconnector: {} {}",
        String::from_utf8_lossy(&s.stdout),
        String::from_utf8_lossy(&s.stderr),
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    let (sout, cout) = (
        String::from_utf8_lossy(&s.stdout),
        String::from_utf8_lossy(&c.stdout),
    );
    let sd: Value = serde_json::from_str(&sout).unwrap();
    let cd: Value = serde_json::from_str(&cout).unwrap();
    assert_eq!(sd["exchange"]["writeVerified"], true, "{sd}");
    assert_eq!(cd["exchange"]["writeVerified"], true, "{cd}");
    assert_eq!(cd["exchange"]["iters"], 100, "{cd}");
    assert_eq!(cd["exchange"]["gidIndex"], 0, "{cd}");
    assert!(
        cd["exchange"]["rttMedianUs"].as_f64().unwrap() > 0.0,
        "{cd}"
    );
    // Guest timing under TCG means nothing; only that traffic flowed is asserted.
    eprintln!("host-to-host on rxe0 GID 0 (TCG, not a performance figure): {cd}");
}
