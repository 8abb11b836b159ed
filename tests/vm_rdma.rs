//! RDMA checks against a real RDMA kernel. They run only inside the VM tier; the host run
//! leaves them out with `cargo test -- --skip vm_`.
//!
//! They assume: running as root in a VM whose kernel has rdma_rxe (Debian 12's 6.1 or
//! trixie-backports' Linux 7), with
//!
//! ```text
//! modprobe -a rdma_rxe ib_uverbs ib_umad rdma_ucm
//! ip link add rxev0 type veth peer name rxev1; ip link set rxev0 up; ip link set rxev1 up
//! rdma link add rxe0 type rxe netdev rxev0
//! ```
//!
//! the netns mode shared, and iproute2 and ibverbs-utils installed (the tests parse `rdma` and
//! `ibv_devinfo` output to cross-check): what tests/vm/run.sh gives each case (the case's empty
//! netns `vmpod` is removed first where a test needs init_net alone). Run them with
//! `tests/vm/run.sh discovery netns-mode`.
//!
//! Tests take one lock: they change shared state (netns mode, addresses on v0, the set of
//! namespaces) that the others read.

mod common;
mod vm_support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use nix::errno::Errno;
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::{major, minor, stat, SFlag};
use rdma_ns::kernel::nldev::NetnsMode;
use rdma_ns::kernel::rdma_ops::RdmaNetlink;
use rdma_ns::kernel::sysfs::SysRoot;
use rdma_ns::kernel::topology::{
    CharDevKind, GidType, IbParent, IbPortRef, LinkLayer, NetdevLink, RdmaSysfs,
};
use rdma_ns::kernel::Netns;
use vm_support::kernel_name;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What `ibv_devinfo -v -d rxe0` says about the device and port 1.
struct IbvInfo {
    node_guid: String,
    port_state: u32,
    phys_state: u32,
    link_layer: String,
    gids: Vec<(u32, Ipv6Addr, String)>,
}

/// `(PORT_ACTIVE (4)` → 4
fn paren_number(v: &str) -> u32 {
    let inner = v.rsplit_once('(').unwrap().1.trim_end_matches(')');
    inner.parse().unwrap()
}

fn ibv_devinfo() -> IbvInfo {
    let text = run("ibv_devinfo", &["-v", "-d", "rxe0"]);
    let mut info = IbvInfo {
        node_guid: String::new(),
        port_state: 0,
        phys_state: 0,
        link_layer: String::new(),
        gids: Vec::new(),
    };
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "node_guid" => info.node_guid = value.to_string(),
            "state" => info.port_state = paren_number(value),
            "phys_state" => info.phys_state = paren_number(value),
            "link_layer" => info.link_layer = value.to_string(),
            k if k.starts_with("GID[") => {
                let index = k[4..].trim_end_matches(']').trim().parse().unwrap();
                let (gid, gid_type) = value.split_once(", ").unwrap();
                info.gids
                    .push((index, gid.parse().unwrap(), gid_type.to_string()));
            }
            _ => {}
        }
    }
    info
}

fn rdma_link_json() -> serde_json::Value {
    let text = run("rdma", &["-j", "link", "show", "rxe0/1"]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[0].clone()
}

fn ifindex(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// (major, minor) of a device node, checking it is a char device.
fn devnum(path: &Path) -> (u32, u32) {
    let st = stat(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT,
        SFlag::S_IFCHR,
        "{} is not a char device",
        path.display()
    );
    (major(st.st_rdev) as u32, minor(st.st_rdev) as u32)
}

/// A new network namespace, held by fd (its thread has ended).
fn new_netns() -> Netns {
    std::thread::spawn(|| {
        unshare(CloneFlags::CLONE_NEWNET).unwrap();
        Netns::current().unwrap()
    })
    .join()
    .unwrap()
}

#[test]
fn vm_sysfs_discovers_rxe0_as_the_rdma_tools_see_it() {
    let _g = serial();
    let sys = SysRoot::default();
    let r = RdmaSysfs::new(&sys);
    let dev = r
        .device("rxe0")
        .unwrap()
        .expect("rxe0 in /sys/class/infiniband");
    assert_eq!(dev.parent, IbParent::Netdev("rxev0".into()));
    assert_eq!(dev.pci_bdf(), None);
    assert_eq!(dev.ports.len(), 1);
    let port = dev.port(1).unwrap();

    let ibv = ibv_devinfo();
    assert_eq!(dev.node_guid.unwrap().to_string(), ibv.node_guid);
    assert!(port.is_active());
    assert_eq!(port.state.text, "ACTIVE");
    assert_eq!(port.state.num, ibv.port_state);
    assert_eq!(port.phys_state.num, ibv.phys_state);
    assert_eq!(port.phys_state.text, "LinkUp");
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert_eq!(ibv.link_layer, "Ethernet");
    assert!(port.rate.as_deref().unwrap().contains("Gb/sec"));

    let link = rdma_link_json();
    assert_eq!(link["state"], "ACTIVE");
    assert_eq!(link["physical_state"], "LINK_UP");
    assert_eq!(link["netdev"], "rxev0");
    assert_eq!(link["netdev_index"], ifindex("rxev0"));
    assert_eq!(port.netdevs, vec!["rxev0"]);

    // GID table: the same entries as verbs, every one on v0 (no uppers in this setup).
    let ours: Vec<(u32, Ipv6Addr, String)> = port
        .gids
        .iter()
        .map(|g| (g.index, g.gid, g.gid_type.as_ref().unwrap().to_string()))
        .collect();
    assert_eq!(ours, ibv.gids);
    assert!(!ours.is_empty());
    assert!(port.gids.iter().all(|g| g.ndev.as_deref() == Some("rxev0")));
    assert!(port
        .gids
        .iter()
        .all(|g| g.gid_type == Some(GidType::RoceV2)));

    // Char devices: each sysfs dev number is the node's, and fixed minors hold for the
    // first devices (uverbs 192+N, umad N, issm 64+N, major 231). Linux 7 gives rxe's RoCE
    // port no issm (/sys/class/infiniband_mad lists umad0 alone), 6.1 does.
    let issm = kernel_name() == "6.1";
    assert_eq!(
        dev.char_devs.iter().any(|c| c.kind == CharDevKind::Issm),
        issm,
        "issm on kernel {}: {:?}",
        kernel_name(),
        dev.char_devs
    );
    let kinds = [CharDevKind::Uverbs, CharDevKind::Umad, CharDevKind::Issm];
    for kind in kinds
        .into_iter()
        .filter(|k| issm || *k != CharDevKind::Issm)
    {
        let c = dev
            .char_devs
            .iter()
            .find(|c| c.kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?} for rxe0"));
        assert_eq!(c.ibdev.as_deref(), Some("rxe0"));
        assert_eq!(devnum(&c.devnode()), (c.major, c.minor), "{c:?}");
        let n: u32 = c.name.trim_start_matches(kind.prefix()).parse().unwrap();
        let base = match kind {
            CharDevKind::Uverbs => 192,
            CharDevKind::Issm => 64,
            _ => 0,
        };
        assert_eq!((c.major, c.minor), (231, base + n), "{c:?}");
        if kind != CharDevKind::Uverbs {
            assert_eq!(c.port, Some(1));
        }
    }
    let cm = r.rdma_cm().unwrap().expect("rdma_ucm loaded");
    assert_eq!(devnum(&cm.devnode()), (cm.major, cm.minor));
    assert_eq!(cm.major, 10, "a misc device");

    assert_eq!(
        r.ib_ports_for_netdev("rxev0").unwrap(),
        vec![IbPortRef {
            ibdev: "rxe0".into(),
            port: 1,
            via: NetdevLink::Parent
        }]
    );
    assert_eq!(r.ib_ports_for_netdev("rxev1").unwrap(), vec![]);
    let v0 = r.netdev("rxev0").unwrap().unwrap();
    assert_eq!(
        (v0.ifindex, v0.link_type, v0.device),
        (ifindex("rxev0"), 1, None)
    );
}

#[test]
fn vm_netns_mode_switches_and_the_kernel_refusals() {
    let _g = serial();
    // The mode can change only while init_net is the only netns: drop the runner's `vmpod` and
    // wait until the kernel has freed it (netns cleanup is deferred).
    let _ = Command::new("ip").args(["netns", "del", "vmpod"]).status();
    let nl = RdmaNetlink::open().unwrap();
    for _ in 0..200 {
        if nl.set_netns_mode(NetnsMode::Shared).is_ok()
            && nl.set_netns_mode(NetnsMode::Exclusive).is_ok()
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    nl.set_netns_mode(NetnsMode::Shared).unwrap();
    assert_eq!(nl.get_netns_mode().unwrap(), NetnsMode::Shared);
    assert!(run("rdma", &["system", "show"]).contains("netns shared"));

    nl.set_netns_mode(NetnsMode::Exclusive).unwrap();
    assert_eq!(nl.get_netns_mode().unwrap(), NetnsMode::Exclusive);
    assert!(run("rdma", &["system", "show"]).contains("netns exclusive"));
    nl.set_netns_mode(NetnsMode::Shared).unwrap();
    assert_eq!(nl.get_netns_mode().unwrap(), NetnsMode::Shared);

    // With another netns alive the mode cannot change.
    let other = new_netns();
    let e = nl.set_netns_mode(NetnsMode::Exclusive).unwrap_err();
    assert!(e.is_errno(Errno::EBUSY), "{e}");
    assert_eq!(nl.get_netns_mode().unwrap(), NetnsMode::Shared);

    // Shared mode, and rxe cannot disassociate user contexts: no move.
    let rxe = nl.device_by_name("rxe0").unwrap().unwrap();
    let e = nl.move_device_to_netns(rxe.index, other.fd()).unwrap_err();
    assert!(e.is_errno(Errno::EOPNOTSUPP), "{e}");
    assert!(e.to_string().contains("move ib device to netns"), "{e}");

    // A socket opened inside the other netns acts there: in shared mode it sees rxe0 too,
    // but the port's netdev rxev0 lives in init_net, so the kernel leaves it out.
    let inside = RdmaNetlink::open_in(&other, &Netns::current().unwrap()).unwrap();
    let seen = inside
        .device_by_name("rxe0")
        .unwrap()
        .expect("compat device");
    assert_eq!(seen.index, rxe.index);
    assert_eq!(inside.port_netdev(seen.index, 1).unwrap(), None);
    assert_eq!(
        nl.port_netdev(rxe.index, 1).unwrap(),
        Some((ifindex("rxev0"), "rxev0".into()))
    );
}

#[test]
fn vm_netlink_devices_and_ports_agree_with_sysfs() {
    let _g = serial();
    let sys = SysRoot::default();
    let sysfs_dev = RdmaSysfs::new(&sys).device("rxe0").unwrap().unwrap();
    let nl = RdmaNetlink::open().unwrap();
    let devs = nl.devices().unwrap();
    let rxe = devs
        .iter()
        .find(|d| d.name == "rxe0")
        .expect("rxe0 in dump");
    assert_eq!(rxe.port_count as usize, sysfs_dev.ports.len());
    assert_eq!(rxe.node_guid, sysfs_dev.node_guid);
    assert_eq!(rxe.protocol.as_deref(), Some("roce"));
    assert_eq!(&nl.device(rxe.index).unwrap(), rxe);
    assert_eq!(nl.device_by_name("nosuchdev").unwrap(), None);

    let port = nl.port(rxe.index, 1).unwrap();
    let sysfs_port = sysfs_dev.port(1).unwrap();
    assert_eq!(port.state.map(u32::from), Some(sysfs_port.state.num));
    assert_eq!(
        port.phys_state.map(u32::from),
        Some(sysfs_port.phys_state.num)
    );
    assert_eq!(port.netdev, Some((ifindex("rxev0"), "rxev0".into())));

    let e = nl.port(rxe.index, 2).unwrap_err();
    assert!(e.is_errno(Errno::EINVAL), "{e}");
    let e = nl.device(rxe.index + 1000).unwrap_err();
    assert!(e.is_errno(Errno::EINVAL), "{e}");
}

#[test]
fn vm_find_gid_for_ip_follows_address_changes() {
    let _g = serial();
    let sys = SysRoot::default();
    let r = RdmaSysfs::new(&sys);
    let ip = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
    let lookup = || r.find_gid_for_ip("rxe0", 1, ip, "rxev0").unwrap();
    // RoCE GIDs follow address events from a workqueue (roce_gid_mgmt.c): poll, bounded by
    // count, not by time.
    let wait_for = |want_some: bool| {
        for _ in 0..600 {
            let got = lookup();
            if got.is_some() == want_some {
                return got;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!(
            "GID for {ip} never became {}",
            if want_some { "present" } else { "absent" }
        );
    };
    assert_eq!(lookup(), None);
    run("ip", &["addr", "add", "10.77.0.1/24", "dev", "rxev0"]);
    let (index, gid_type) = wait_for(true).unwrap();
    assert_eq!(gid_type, GidType::RoceV2);
    let entry = r
        .gid_table("rxe0", 1)
        .unwrap()
        .into_iter()
        .find(|g| g.index == index)
        .unwrap();
    assert_eq!(entry.ipv4(), Some(Ipv4Addr::new(10, 77, 0, 1)));
    assert_eq!(entry.ndev.as_deref(), Some("rxev0"));
    let ibv = ibv_devinfo();
    assert!(
        ibv.gids
            .iter()
            .any(|(i, g, t)| *i == index && *g == entry.gid && t == "RoCE v2"),
        "{:?}",
        ibv.gids
    );
    assert_eq!(r.find_gid_for_ip("rxe0", 1, ip, "rxev1").unwrap(), None);
    run("ip", &["addr", "del", "10.77.0.1/24", "dev", "rxev0"]);
    assert_eq!(wait_for(false), None);
}
