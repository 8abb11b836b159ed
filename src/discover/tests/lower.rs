//! RoCE upper devices placed through their lower device, on a node shaped like the bench's:
//! 16 mlx5 devices, each on its own PCI function, with 2 RoCE ports whose tables are full of
//! the node's addresses. Every port but the one a test expects has an unreadable entry (a
//! directory where `gids/1` should be), so reading any other table fails the discovery.

use super::model::{lower, Kernel, NoView};
use super::*;
use crate::kernel::topology::fixtures::{
    CharDevSpec, GidSpec, IbDeviceSpec, IbParentSpec, PciSpec, PortSpec,
};
use crate::kernel::topology::CharDevKind;

const DEVICES: u32 = 16;
const GIDS: u32 = 32;

fn v4_gid(a: u8, b: u8, c: u8, d: u8) -> String {
    format!("0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}")
}

/// The PCI function of mlx5_`d`.
fn bdf(d: u32) -> String {
    format!("0000:{:02x}:00.0", d + 0x10)
}

/// The netdev of mlx5_`d` port `p` (its default GID, entry 0, names it).
fn port_netdev(d: u32, p: u32) -> String {
    format!("ens{d}f{}np{}", p - 1, p - 1)
}

/// The node, with `planted` = (device, port, index, IPv4 octets, netdev) entries.
fn node(planted: &[(u32, u32, u32, [u8; 4], &str)]) -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    for d in 0..DEVICES {
        let pci = fx
            .add_pci_function(&PciSpec {
                bdf: &bdf(d),
                upstream: &format!("pci0000:00/0000:00:{:02x}.0", d + 1),
                numa_node: (d / 8) as i32,
                current_link: ("16.0 GT/s PCIe", 16),
                max_link: ("16.0 GT/s PCIe", 16),
                driver: Some("mlx5_core"),
            })
            .unwrap();
        let tables: Vec<Vec<(String, String)>> =
            (1..=2).map(|p| port_table(d, p, planted)).collect();
        let specs: Vec<Vec<GidSpec>> = tables
            .iter()
            .map(|t| {
                t.iter()
                    .enumerate()
                    .map(|(i, (gid, ndev))| GidSpec {
                        index: i as u32,
                        gid,
                        gid_type: "RoCE v2",
                        ndev: Some(ndev),
                    })
                    .collect()
            })
            .collect();
        let ports: Vec<PortSpec> = specs
            .iter()
            .enumerate()
            .map(|(i, gids)| PortSpec {
                index: i as u32 + 1,
                state: "4: ACTIVE",
                phys_state: "5: LinkUp",
                link_layer: "Ethernet",
                rate: "200 Gb/sec (4X HDR)",
                lid: "0x0",
                gid_tbl_len: GIDS,
                gids,
                pkeys: &["0xffff"],
            })
            .collect();
        let name = format!("mlx5_{d}");
        fx.add_ib_device(&IbDeviceSpec {
            name: &name,
            parent: IbParentSpec::Device(&pci),
            node_type: "1: CA",
            node_guid: "0c42:a103:0000:0000",
            sys_image_guid: "0c42:a103:0000:0000",
            fw_ver: "28.39.1002",
            ports: &ports,
        })
        .unwrap();
        fx.add_char_dev(&CharDevSpec {
            kind: CharDevKind::Uverbs,
            name: &format!("uverbs{d}"),
            ibdev: &name,
            port: None,
            parent: Some(&pci),
            major: 231,
            minor: 192 + d,
            abi_version: Some(1),
        })
        .unwrap();
    }
    fx
}

/// (GID text, netdev) of every entry of mlx5_`d` port `p`: the port netdev's default GID,
/// then the node's addresses, with the planted ones in place.
fn port_table(d: u32, p: u32, planted: &[(u32, u32, u32, [u8; 4], &str)]) -> Vec<(String, String)> {
    (0..GIDS)
        .map(|i| {
            if let Some((.., ip, ndev)) = planted
                .iter()
                .find(|(pd, pp, pi, ..)| (*pd, *pp, *pi) == (d, p, i))
            {
                return (v4_gid(ip[0], ip[1], ip[2], ip[3]), ndev.to_string());
            }
            if i == 0 {
                let ll = format!("fe80:0000:0000:0000:0e42:a1ff:fe{:02x}:{:04x}", d, p);
                return (ll, port_netdev(d, p));
            }
            (
                v4_gid(172, 16 + d as u8, p as u8, i as u8),
                format!("host{}", i % 8),
            )
        })
        .collect()
}

/// Makes every table but those of `keep` unreadable.
fn trap_all_but(fx: &SysfsFixture, keep: &[(u32, u32)]) {
    for d in 0..DEVICES {
        for p in 1..=2 {
            if keep.contains(&(d, p)) {
                continue;
            }
            let entry = format!("class/infiniband/mlx5_{d}/ports/{p}/gids/1");
            fx.remove(&entry).unwrap();
            fx.write_attr(format!("{entry}/x"), "").unwrap();
        }
    }
}

/// A macvlan child made in the pod on a host parent: IFLA_LINK `lower`, in netns id 0.
fn child(name: &str, index: u32, lower: u32, addr: &str) -> Iface {
    let mut i = iface(name, Some("macvlan"), &[addr]);
    i.index = index;
    i.lower = Some(lower);
    i.lower_netnsid = Some(0);
    i
}

#[test]
fn a_macvlan_on_a_pci_parent_reads_only_the_table_of_its_parents_port() {
    let last = GIDS - 1;
    let fx = node(&[
        (14, 2, last, [10, 20, 14, 2], "net1"),
        (15, 2, last, [10, 21, 15, 2], "net2"),
    ]);
    trap_all_but(&fx, &[(14, 2), (15, 2)]);
    let dev = dev_dir(&[14, 15]);
    let rails = [
        child("net1", 2, 40, "10.20.14.2/16"),
        child("net2", 3, 41, "10.21.15.2/16"),
    ];
    let k = Kernel::default();
    let parents = vec![
        (2, lower(&port_netdev(14, 2), 40, Some(("pci", &bdf(14))))),
        (3, lower(&port_netdev(15, 2), 41, Some(("pci", &bdf(15))))),
    ];
    let d = discover(fx.root(), dev.path(), &rails, &k.seen_from("pod", parents)).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let found: Vec<_> = d
        .interfaces
        .iter()
        .map(|f| (f.ifname.as_str(), f.hca(), f.gid_index, f.via))
        .collect();
    assert_eq!(
        found,
        vec![
            ("net1", "mlx5_14:2".to_string(), Some(last), Via::GidTable),
            ("net2", "mlx5_15:2".to_string(), Some(last), Via::GidTable)
        ]
    );
    assert_eq!(d.interfaces[1].numa_node, Some(1));
    assert_eq!(d.interfaces[1].pci_address.as_deref(), Some("0000:1f:00.0"));
    // Twin: a pod that cannot look its parents up searches the tables of the devices it can
    // open, port 1 first, and reaches an unreadable entry.
    let err = discover(fx.root(), dev.path(), &rails, &NoView).unwrap_err();
    assert!(err.to_string().contains("mlx5_14 port 1"), "{err}");
}

#[test]
fn a_macvlan_on_a_virtual_parent_finds_the_port_whose_default_gid_names_the_parent() {
    let last = GIDS - 1;
    let fx = node(&[(14, 2, last, [10, 20, 14, 2], "net1")]);
    trap_all_but(&fx, &[(14, 2)]);
    let dev = dev_dir(&[14, 15]);
    let rails = [child("net1", 2, 40, "10.20.14.2/16")];
    let k = Kernel::default();
    // A bond or a veth has no parent device: only its name, matched against GID 0's netdev.
    let parents = vec![(2, lower(&port_netdev(14, 2), 40, None))];
    let d = discover(fx.root(), dev.path(), &rails, &k.seen_from("pod", parents)).unwrap();
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(d.interfaces[0].hca(), "mlx5_14:2");
    assert_eq!(d.interfaces[0].gid_index, Some(last));
    // Twin: a parent no default GID names leaves the search, which reaches a trap.
    let parents = vec![(2, lower("bond7", 40, None))];
    let view = k.seen_from("pod", parents);
    assert!(discover(fx.root(), dev.path(), &rails, &view).is_err());
}

#[test]
fn the_parents_own_port_without_the_childs_gid_is_named_not_searched_past() {
    let fx = node(&[]);
    trap_all_but(&fx, &[(14, 2)]);
    let dev = dev_dir(&[14, 15]);
    let rails = [child("net1", 2, 40, "10.20.14.2/16")];
    let k = Kernel::default();
    let parents = vec![(2, lower(&port_netdev(14, 2), 40, Some(("pci", &bdf(14)))))];
    let d = discover(fx.root(), dev.path(), &rails, &k.seen_from("pod", parents)).unwrap();
    let f = &d.interfaces[0];
    assert_eq!(
        (f.hca(), f.via),
        ("mlx5_14:2".to_string(), Via::LowerDevice)
    );
    assert_eq!(kinds(&d), vec![ProblemKind::NoRoceV2Gid]);
    assert!(
        d.problems[0].msg.contains("no RoCE v2 GID for 10.20.14.2"),
        "{}",
        d.problems[0]
    );
}

#[test]
fn a_macvlan_on_a_parent_without_rdma_is_not_searched_for() {
    let fx = node(&[]);
    trap_all_but(&fx, &[]);
    let dev = dev_dir(&[14, 15]);
    let rails = [child("net1", 2, 40, "10.20.14.2/16")];
    let k = Kernel::default();
    let parents = vec![(2, lower("eno1", 40, Some(("pci", "0000:99:00.0"))))];
    let d = discover(fx.root(), dev.path(), &rails, &k.seen_from("pod", parents)).unwrap();
    assert!(d.interfaces.is_empty(), "{d:?}");
    assert_eq!(kinds(&d), vec![ProblemKind::NoRdmaInterface]);
    // Twin: unknown, the parent could be any device's, and the search reaches a trap.
    assert!(discover(fx.root(), dev.path(), &rails, &NoView).is_err());
}

#[test]
fn a_vlan_of_a_moved_netdev_is_placed_on_its_lowers_own_port() {
    let fx = SysfsFixture::all().unwrap();
    // Every table but mlx5_0's is unreadable.
    for (dev, port) in [("mlx5_2", 1), ("mlx5_3", 1), ("rxe0", 1), ("ibp94s0", 1)] {
        let entry = format!("class/infiniband/{dev}/ports/{port}/gids/1");
        fx.remove(&entry).unwrap();
        fx.write_attr(format!("{entry}/x"), "").unwrap();
    }
    // The pod has every uverbs node but mlx5_0's, so a search would start elsewhere.
    let dev = dev_dir(&[1, 3, 4]);
    let mut vlan = iface("ens1f0np0.100", Some("vlan"), &["10.100.0.5/24"]);
    vlan.index = 7;
    vlan.lower = Some(4);
    let k = Kernel::default();
    let lowers = vec![(7, lower("ens1f0np0", 4, Some(("pci", "0000:3b:00.0"))))];
    let view = k.seen_from("pod", lowers);
    let d = discover(fx.root(), dev.path(), std::slice::from_ref(&vlan), &view).unwrap();
    let f = &d.interfaces[0];
    assert_eq!((f.hca(), f.gid_index), ("mlx5_0:1".to_string(), Some(9)));
    assert_eq!(kinds(&d), vec![ProblemKind::NoUverbs]);
    // Twin: searched for, it is looked for on the devices the pod can open first.
    assert!(discover(fx.root(), dev.path(), &[vlan], &NoView).is_err());
}
