//! Builds the benchmark's fixture node for `tests/bench/bench.py --only node`: 16 ib devices
//! with 2 ports each (PMA counters, driver hw_counters, a GID table, a netdev per port), their
//! char devices, the RDMA modules, shared netns mode, and 64 attachment records.
//!
//! `cargo run --example node_fixture -- DIR` writes `DIR/sys` (the sysfs tree), `DIR/dev`
//! (char device nodes, when run as root), `DIR/data` (records), `DIR/proc` (a containerd with
//! an unlimited RLIMIT_MEMLOCK) and `DIR/confs` (one conflist per network).

use std::path::{Path, PathBuf};

use rdma_ns::attach::record::Attachment;
use rdma_ns::attach::store::Store;
use rdma_ns::kernel::topology::fixtures::{
    CharDevSpec, GidSpec, IbDeviceSpec, IbParentSpec, NetdevSpec, PciSpec, PortSpec, SysfsFixture,
};
use rdma_ns::kernel::topology::CharDevKind;

const DEVICES: u32 = 16;
const PORTS: u32 = 2;
const RECORDS: u32 = 64;

/// The PMA counters of an mlx5 port (`ports/N/counters`), as a 6.x kernel lists them.
const PMA: [&str; 20] = [
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
];

/// Driver counters of an mlx5 port (`ports/N/hw_counters`), a representative set.
const HW: [&str; 30] = [
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "rx_atomic_requests",
    "rx_dct_connect",
    "rx_icrc_encapsulated",
    "rx_read_requests",
    "rx_write_requests",
    "lifespan",
];

fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: node_fixture DIR (created; must not exist)"),
    );
    std::fs::create_dir_all(&dir).unwrap();
    // SysfsFixture makes its tree under the temp dir and removes it on drop: point the temp
    // dir at DIR, keep the tree (forget), and rename it to DIR/sys.
    std::env::set_var("TMPDIR", &dir);
    let fx = SysfsFixture::new().unwrap();
    build(&fx);
    let tree = fx.path().to_path_buf();
    std::mem::forget(fx);
    std::fs::rename(&tree, dir.join("sys")).unwrap();
    records(&dir.join("data"));
    let sys = rdma_ns::kernel::sysfs::SysRoot::new(dir.join("sys"));
    dev_nodes(&sys, &dir.join("dev"));
    let pid = dir.join("proc/4242");
    std::fs::create_dir_all(&pid).unwrap();
    std::fs::write(pid.join("comm"), "containerd\n").unwrap();
    std::fs::write(
        pid.join("limits"),
        "Max locked memory         unlimited            unlimited            bytes\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("confs")).unwrap();
    for n in 0..4 {
        std::fs::write(
            dir.join(format!("confs/{n}-roce{n}.conflist")),
            format!(
                r#"{{"cniVersion":"1.0.0","name":"roce{n}","plugins":[{{"type":"rdma-ns","mode":"macvlan","master":"ens{n}np0","devicePermissions":{{"uverbs":"0666"}}}}]}}"#
            ),
        )
        .unwrap();
    }
    println!("{}", dir.display());
}

fn build(fx: &SysfsFixture) {
    fx.load_modules(&["ib_core", "ib_uverbs", "rdma_ucm", "ib_umad", "mlx5_ib"])
        .unwrap();
    fx.add_rdma_cm().unwrap();
    for d in 0..DEVICES {
        let bdf = format!("0000:{:02x}:00.0", 0x10 + d);
        let bridge = format!("pci0000:{:02x}/0000:{:02x}:00.0", 0x10 + d, 0x10 + d);
        let pf = fx
            .add_pci_function(&PciSpec {
                bdf: &bdf,
                upstream: &bridge,
                numa_node: (d % 2) as i32,
                current_link: ("16.0 GT/s PCIe", 16),
                max_link: ("16.0 GT/s PCIe", 16),
                driver: Some("mlx5_core"),
            })
            .unwrap();
        let netdevs: Vec<String> = (0..PORTS).map(|p| format!("ens{d}np{p}")).collect();
        for (p, name) in netdevs.iter().enumerate() {
            fx.add_netdev(&NetdevSpec {
                name,
                ifindex: 100 + d * PORTS + p as u32,
                parent: Some(&pf),
                link_type: 1,
                address: &format!("0c:42:a1:{:02x}:00:{p:02x}", d),
                dev_port: p as u32,
                dev_id: "0x0",
                mtu: 9000,
                extra: &[],
            })
            .unwrap();
        }
        let gid_text: Vec<(String, String)> = (0..PORTS)
            .map(|p| {
                (
                    format!("fe80:0000:0000:0000:0e42:a1ff:fe{:02x}:00{p:02x}", d),
                    format!("0000:0000:0000:0000:0000:ffff:0a{:02x}:{:02x}01", d, p),
                )
            })
            .collect();
        let gids: Vec<Vec<GidSpec<'_>>> = (0..PORTS as usize)
            .map(|p| {
                let (ll, v4) = (&gid_text[p].0, &gid_text[p].1);
                vec![
                    gid(0, ll, "IB/RoCE v1", &netdevs[p]),
                    gid(1, ll, "RoCE v2", &netdevs[p]),
                    gid(2, v4, "IB/RoCE v1", &netdevs[p]),
                    gid(3, v4, "RoCE v2", &netdevs[p]),
                ]
            })
            .collect();
        let ports: Vec<PortSpec<'_>> = (0..PORTS as usize)
            .map(|p| PortSpec {
                index: p as u32 + 1,
                state: "4: ACTIVE",
                phys_state: "5: LinkUp",
                link_layer: "Ethernet",
                rate: "200 Gb/sec (4X HDR)",
                lid: "0x0",
                gid_tbl_len: 16,
                gids: &gids[p],
                pkeys: &["0xffff"],
            })
            .collect();
        let ib = format!("mlx5_{d}");
        let dir = fx
            .add_ib_device(&IbDeviceSpec {
                name: &ib,
                parent: IbParentSpec::Device(&pf),
                node_type: "1: CA",
                node_guid: &format!("0c42:a103:00{:02x}:0000", d),
                sys_image_guid: &format!("0c42:a103:00{:02x}:0000", d),
                fw_ver: "28.39.1002",
                ports: &ports,
            })
            .unwrap();
        for p in 1..=PORTS {
            let pd = dir.join("ports").join(p.to_string());
            for (i, c) in PMA.iter().enumerate() {
                fx.write_attr(
                    pd.join("counters").join(c),
                    &(1000 * i as u64 + 7).to_string(),
                )
                .unwrap();
            }
            for (i, c) in HW.iter().enumerate() {
                fx.write_attr(pd.join("hw_counters").join(c), &(i as u64 * 3).to_string())
                    .unwrap();
            }
        }
        fx.add_char_dev(&CharDevSpec {
            kind: CharDevKind::Uverbs,
            name: &format!("uverbs{d}"),
            ibdev: &ib,
            port: None,
            parent: Some(&pf),
            major: 231,
            minor: 192 + d,
            abi_version: Some(1),
        })
        .unwrap();
        for p in 0..PORTS {
            let n = d * PORTS + p;
            for (kind, name, minor) in [
                (CharDevKind::Umad, format!("umad{n}"), n),
                (CharDevKind::Issm, format!("issm{n}"), 64 + n),
            ] {
                fx.add_char_dev(&CharDevSpec {
                    kind,
                    name: &name,
                    ibdev: &ib,
                    port: Some(p + 1),
                    parent: Some(&pf),
                    major: 231,
                    minor,
                    abi_version: None,
                })
                .unwrap();
            }
        }
    }
}

fn gid<'a>(index: u32, gid: &'a str, gid_type: &'a str, ndev: &'a str) -> GidSpec<'a> {
    GidSpec {
        index,
        gid,
        gid_type,
        ndev: Some(ndev),
    }
}

fn records(data: &Path) {
    let store = Store::new(data);
    for r in 0..RECORDS {
        let (d, p) = (r % DEVICES, (r / DEVICES) % PORTS);
        let att: Attachment = serde_json::from_value(serde_json::json!({
            "schema": 2, "network": format!("roce{}", r % 4), "containerId": format!("c{r:04}"),
            "ifname": "net1", "mode": "macvlan", "phase": "ready",
            "netns": format!("/run/netns/cni-bench-{r}"),
            "deviceKey": format!("child-roce-c{r:04}-net1"),
            "host": {"name": format!("ens{d}np{p}"), "ifindex": 100 + d * PORTS + p, "mtu": 9000,
                     "hwaddr": "0c:42:a1:00:00:00", "wasUp": true, "addresses": []},
            "child": {"kind": "macvlan", "hwaddr": format!("02:5e:00:00:{:02x}:{:02x}", r / 256, r % 256),
                      "summary": "macvlan bridge"},
            "pod": {"namespace": "ml", "name": format!("trainer-{r}"), "uid": format!("uid-{r}")},
            "gids": [{"ip": format!("10.{d}.{p}.{}", 10 + r / DEVICES), "ibdev": format!("mlx5_{d}"),
                      "port": p + 1, "index": 4 + r / DEVICES, "gidType": "RoCE v2"}]
        }))
        .unwrap();
        store.save(&att).unwrap();
    }
}

/// The char device nodes sysfs lists, made with mknod (root only: otherwise none, and the
/// doctor reports them missing, which costs it no less time).
fn dev_nodes(sys: &rdma_ns::kernel::sysfs::SysRoot, dev: &Path) {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    std::fs::create_dir_all(dev).unwrap();
    let topo = rdma_ns::kernel::topology::RdmaSysfs::new(sys);
    let mut nodes = topo.char_devices().unwrap();
    nodes.extend(topo.rdma_cm().unwrap());
    for c in nodes {
        let _ = mknod(
            &dev.join(&c.name),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(c.major.into(), c.minor.into()),
        );
    }
}
