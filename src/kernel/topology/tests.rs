use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::files::{absent, EINVAL};
use super::fixtures::SysfsFixture;
use super::pci::parse_gts;
use super::*;

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn dev(fx: &SysfsFixture, name: &str) -> IbDevice {
    RdmaSysfs::new(fx.root())
        .device(name)
        .unwrap()
        .unwrap_or_else(|| panic!("no {name}"))
}

fn chardev(d: &IbDevice, kind: CharDevKind) -> &CharDev {
    d.char_devs
        .iter()
        .find(|c| c.kind == kind)
        .unwrap_or_else(|| panic!("{} has no {kind:?}", d.name))
}

fn port_ref(ibdev: &str, via: NetdevLink) -> IbPortRef {
    IbPortRef {
        ibdev: ibdev.to_string(),
        port: 1,
        via,
    }
}

// ---- value formats ----

#[test]
fn numbered_states_parse_as_the_kernel_prints_them() {
    let s: NumberedState = "4: ACTIVE".parse().unwrap();
    assert_eq!((s.num, s.text.as_str()), (4, "ACTIVE"));
    assert_eq!(s.to_string(), "4: ACTIVE");
    let p: NumberedState = "7: Phy Test".parse().unwrap();
    assert_eq!((p.num, p.text.as_str()), (7, "Phy Test"));
    let n: NumberedState = "1: CA".parse().unwrap();
    assert_eq!(n.num, 1);
    assert!("ACTIVE".parse::<NumberedState>().is_err());
    assert!("x: ACTIVE".parse::<NumberedState>().is_err());
}

#[test]
fn guids_round_trip_in_sysfs_form() {
    let g: Guid = "248a:0703:0049:aee0".parse().unwrap();
    assert_eq!(g, Guid(0x248a_0703_0049_aee0));
    assert_eq!(g.to_string(), "248a:0703:0049:aee0");
    assert_eq!(
        Guid(0x0c42_a103_003b_0000).to_string(),
        "0c42:a103:003b:0000"
    );
    assert!("248a:0703:0049".parse::<Guid>().is_err());
    assert!("248a:703:0049:aee0".parse::<Guid>().is_err());
    assert!("248a:0703:0049:aeeg".parse::<Guid>().is_err());
}

#[test]
fn gids_must_be_uncompressed_and_map_to_ipv6() {
    assert_eq!(
        parse_gid("fe80:0000:0000:0000:2861:d6ff:fe59:e610").unwrap(),
        "fe80::2861:d6ff:fe59:e610".parse::<Ipv6Addr>().unwrap()
    );
    let mapped = parse_gid("0000:0000:0000:0000:0000:ffff:0a09:0005").unwrap();
    assert_eq!(mapped.to_ipv4_mapped(), Some(Ipv4Addr::new(10, 9, 0, 5)));
    // `rdma`/ibv_devinfo print compressed forms; sysfs never does.
    assert!(parse_gid("fe80::1").is_err());
    assert!(parse_gid("::ffff:10.9.0.5").is_err());
}

#[test]
fn gid_entries_expose_ipv4_only_for_roce_v2() {
    let mut e = GidEntry {
        index: 3,
        gid: "::ffff:10.9.0.5".parse().unwrap(),
        gid_type: Some(GidType::RoceV2),
        ndev: Some("v0".into()),
    };
    assert_eq!(e.ipv4(), Some(Ipv4Addr::new(10, 9, 0, 5)));
    assert_eq!(e.ip(), Some(v4(10, 9, 0, 5)));
    e.gid_type = Some(GidType::IbRoceV1);
    assert_eq!(e.ipv4(), None);
    assert_eq!(e.ip(), None);
    let six = GidEntry {
        index: 5,
        gid: "2001:db8::5".parse().unwrap(),
        gid_type: Some(GidType::RoceV2),
        ndev: None,
    };
    assert_eq!(six.ipv4(), None);
    assert_eq!(six.ip(), Some("2001:db8::5".parse().unwrap()));
}

#[test]
fn gid_types_and_link_layers_parse() {
    assert_eq!(GidType::parse("RoCE v2"), GidType::RoceV2);
    assert_eq!(GidType::parse("IB/RoCE v1"), GidType::IbRoceV1);
    assert_eq!(GidType::RoceV2.to_string(), "RoCE v2");
    assert_eq!(GidType::IbRoceV1.to_string(), "IB/RoCE v1");
    assert_eq!(GidType::parse("x"), GidType::Other("x".into()));
    assert_eq!(LinkLayer::parse("InfiniBand"), LinkLayer::InfiniBand);
    assert_eq!(LinkLayer::parse("Ethernet"), LinkLayer::Ethernet);
    assert_eq!(
        LinkLayer::parse("Unknown"),
        LinkLayer::Other("Unknown".into())
    );
}

#[test]
fn devnums_and_pcie_speeds_parse() {
    assert_eq!(parse_devnum("231:192").unwrap(), (231, 192));
    assert_eq!(parse_devnum("10:124").unwrap(), (10, 124));
    assert!(parse_devnum("231").is_err());
    assert!(parse_devnum("a:1").is_err());
    assert_eq!(parse_gts("8.0 GT/s PCIe"), Some(8000));
    assert_eq!(parse_gts("2.5 GT/s PCIe"), Some(2500));
    assert_eq!(parse_gts("16.0 GT/s PCIe"), Some(16000));
    assert_eq!(parse_gts("64.0 GT/s PCIe"), Some(64000));
    // Kernels before 5.7 printed `8 GT/s` and `Unknown speed`.
    assert_eq!(parse_gts("8 GT/s"), Some(8000));
    assert_eq!(parse_gts("2.5 GT/s"), Some(2500));
    assert_eq!(parse_gts("Unknown"), None);
    assert_eq!(parse_gts("Unknown speed"), None);
    let link = PcieLink::parse("Unknown", "0");
    assert_eq!((link.mts, link.width), (None, None));
}

#[test]
fn einval_and_missing_attributes_both_count_as_absent() {
    assert!(absent(&io::Error::from_raw_os_error(EINVAL)));
    assert!(absent(&io::Error::from(io::ErrorKind::NotFound)));
    assert!(!absent(&io::Error::from_raw_os_error(nix::libc::EACCES)));
}

#[test]
fn find_gid_prefers_roce_v2_and_falls_back_to_v1() {
    let ip = v4(10, 1, 0, 2);
    let g = |index, gid_type| GidEntry {
        index,
        gid: "::ffff:10.1.0.2".parse().unwrap(),
        gid_type: Some(gid_type),
        ndev: Some("eth0".into()),
    };
    let only_v1 = [g(2, GidType::IbRoceV1)];
    assert_eq!(find_gid(&only_v1, ip, "eth0"), Some((2, GidType::IbRoceV1)));
    let both = [g(2, GidType::IbRoceV1), g(3, GidType::RoceV2)];
    assert_eq!(find_gid(&both, ip, "eth0"), Some((3, GidType::RoceV2)));
    assert_eq!(find_gid(&both, ip, "eth1"), None);
    assert_eq!(find_gid(&both, v4(10, 1, 0, 3), "eth0"), None);
}

// ---- (a) mlx5 RoCE PF with VFs ----

fn fixture_a() -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    fx
}

#[test]
fn roce_pf_device_model() {
    let fx = fixture_a();
    let d = dev(&fx, "mlx5_0");
    assert_eq!(
        d.parent,
        IbParent::Device(BusDevice::Pci {
            bdf: "0000:3b:00.0".into()
        })
    );
    assert_eq!(d.pci_bdf(), Some("0000:3b:00.0"));
    assert_eq!(d.node_type.to_string(), "1: CA");
    assert_eq!(d.node_guid, Some(Guid(0x0c42_a103_003b_0000)));
    assert_eq!(d.fw_ver.as_deref(), Some("16.35.2000"));
    assert_eq!(d.ports.len(), 1);
    let p = d.port(1).unwrap();
    assert!(p.is_active());
    assert_eq!(p.state.text, "ACTIVE");
    assert_eq!(p.phys_state.num, NumberedState::PHYS_LINK_UP);
    assert_eq!(p.phys_state.text, "LinkUp");
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(p.rate.as_deref(), Some("100 Gb/sec (4X EDR)"));
    // The VLAN is a virtual netdev: tied to the port by its GIDs only.
    assert_eq!(p.netdevs, vec!["ens1f0np0"]);
    assert_eq!(p.gid_ndevs(), vec!["ens1f0np0", "ens1f0np0.100"]);
    assert_eq!(d.netdevs(), vec!["ens1f0np0"]);
}

#[test]
fn roce_pf_gid_table_skips_empty_entries_and_decodes_types() {
    let fx = fixture_a();
    let d = dev(&fx, "mlx5_0");
    let gids = &d.port(1).unwrap().gids;
    let indexes: Vec<u32> = gids.iter().map(|g| g.index).collect();
    assert_eq!(indexes, (0..10).collect::<Vec<_>>(), "16 entries, 6 empty");
    assert_eq!(
        gids[0].gid,
        "fe80::e42:a1ff:fe3b:0".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(gids[0].gid_type, Some(GidType::IbRoceV1));
    assert_eq!(gids[1].gid_type, Some(GidType::RoceV2));
    assert_eq!(gids[3].ipv4(), Some(Ipv4Addr::new(10, 59, 0, 5)));
    assert_eq!(gids[2].ipv4(), None, "v1 entry");
    assert_eq!(gids[5].ip(), Some("2001:db8::5".parse().unwrap()));
    assert_eq!(gids[9].ndev.as_deref(), Some("ens1f0np0.100"));
    assert_eq!(gids[9].ipv4(), Some(Ipv4Addr::new(10, 100, 0, 5)));
}

#[test]
fn gid_entry_attrs_read_as_absent_when_missing() {
    let fx = fixture_a();
    let port = "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0/ports/1";
    // The entry emptied between the gid read and the attr reads: EINVAL on a real kernel.
    fx.remove(format!("{port}/gid_attrs/types/3")).unwrap();
    fx.remove(format!("{port}/gid_attrs/ndevs/3")).unwrap();
    // A zero GID is an empty entry even if attrs are present.
    fx.write_attr(
        format!("{port}/gids/4"),
        "0000:0000:0000:0000:0000:0000:0000:0000",
    )
    .unwrap();
    let gids = RdmaSysfs::new(fx.root()).gid_table("mlx5_0", 1).unwrap();
    let g3 = gids.iter().find(|g| g.index == 3).unwrap();
    assert_eq!((g3.gid_type.as_ref(), g3.ndev.as_ref()), (None, None));
    assert!(gids.iter().all(|g| g.index != 4));
    // Without a type the entry cannot be matched to an IP: v1 entry 2 is the answer.
    assert_eq!(
        RdmaSysfs::new(fx.root())
            .find_gid_for_ip("mlx5_0", 1, v4(10, 59, 0, 5), "ens1f0np0")
            .unwrap(),
        Some((2, GidType::IbRoceV1))
    );
}

#[test]
fn roce_find_gid_for_ip_on_pf_and_vlan() {
    let fx = fixture_a();
    let r = RdmaSysfs::new(fx.root());
    assert_eq!(
        r.find_gid_for_ip("mlx5_0", 1, v4(10, 59, 0, 5), "ens1f0np0")
            .unwrap(),
        Some((3, GidType::RoceV2))
    );
    assert_eq!(
        r.find_gid_for_ip("mlx5_0", 1, "2001:db8::5".parse().unwrap(), "ens1f0np0")
            .unwrap(),
        Some((5, GidType::RoceV2))
    );
    assert_eq!(
        r.find_gid_for_ip("mlx5_0", 1, v4(10, 100, 0, 5), "ens1f0np0.100")
            .unwrap(),
        Some((9, GidType::RoceV2))
    );
    // Right address, wrong netdev.
    assert_eq!(
        r.find_gid_for_ip("mlx5_0", 1, v4(10, 59, 0, 5), "ens1f0np0.100")
            .unwrap(),
        None
    );
    let e = r
        .find_gid_for_ip("mlx5_0", 2, v4(10, 59, 0, 5), "ens1f0np0")
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(r
        .find_gid_for_ip("mlx5_9", 1, v4(10, 59, 0, 5), "ens1f0np0")
        .is_err());
}

#[test]
fn roce_vf_device_and_its_char_devices() {
    let fx = fixture_a();
    let d = dev(&fx, "mlx5_2");
    assert_eq!(d.pci_bdf(), Some("0000:3b:00.2"));
    assert_eq!(d.netdevs(), vec!["ens1f0v0"]);
    // Numbered by the char device IDA, not by the ib device: mlx5_2 has uverbs1.
    let u = d.uverbs().unwrap();
    assert_eq!((u.name.as_str(), u.major, u.minor), ("uverbs1", 231, 193));
    assert_eq!(u.devnode(), Path::new("/dev/infiniband/uverbs1"));
    let umad = chardev(&d, CharDevKind::Umad);
    assert_eq!(
        (umad.name.as_str(), umad.port, umad.minor),
        ("umad1", Some(1), 1)
    );
    let issm = chardev(&d, CharDevKind::Issm);
    assert_eq!((issm.name.as_str(), issm.minor), ("issm1", 65));
    let pf = dev(&fx, "mlx5_0");
    assert_eq!(pf.uverbs().unwrap().name, "uverbs0");
    assert_eq!(pf.char_devs.len(), 3);
}

#[test]
fn roce_netdev_to_ib_device_in_every_way() {
    let fx = fixture_a();
    let r = RdmaSysfs::new(fx.root());
    assert_eq!(
        r.ib_ports_for_netdev("ens1f0np0").unwrap(),
        vec![port_ref("mlx5_0", NetdevLink::Device)]
    );
    assert_eq!(
        r.ib_ports_for_netdev("ens1f0v0").unwrap(),
        vec![port_ref("mlx5_2", NetdevLink::Device)]
    );
    assert_eq!(
        r.ib_ports_for_netdev("ens1f0np0.100").unwrap(),
        vec![port_ref("mlx5_0", NetdevLink::GidTable)]
    );
    assert_eq!(r.ib_ports_for_netdev("eth9").unwrap(), vec![]);
    assert_eq!(
        r.netdevs_of_ib_device("mlx5_0").unwrap(),
        vec![(1, "ens1f0np0".to_string())]
    );
    assert!(r.netdevs_of_ib_device("mlx5_9").is_err());
}

#[test]
fn roce_netdevs_as_sysfs_shows_them() {
    let fx = fixture_a();
    let r = RdmaSysfs::new(fx.root());
    let n = r.netdev("ens1f0np0").unwrap().unwrap();
    assert_eq!(
        (n.ifindex, n.link_type, n.addr_len, n.dev_port),
        (4, 1, 6, Some(0))
    );
    assert_eq!(n.address, "0c:42:a1:3b:00:00");
    assert_eq!(
        n.device,
        Some(BusDevice::Pci {
            bdf: "0000:3b:00.0".into()
        })
    );
    let vlan = r.netdev("ens1f0np0.100").unwrap().unwrap();
    assert_eq!(vlan.device, None);
    assert_eq!(r.netdev("eth9").unwrap(), None);
}

#[test]
fn pf_and_vfs_both_directions_with_pcie_links() {
    let fx = fixture_a();
    let r = RdmaSysfs::new(fx.root());
    let pf = r.pci_function("0000:3b:00.0").unwrap().unwrap();
    assert_eq!(pf.numa_node, Some(0));
    assert_eq!(pf.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(
        pf.virtfns,
        vec![
            (0, "0000:3b:00.2".to_string()),
            (1, "0000:3b:00.3".to_string())
        ]
    );
    assert_eq!((pf.sriov_numvfs, pf.sriov_totalvfs), (Some(2), Some(8)));
    assert_eq!(pf.physfn, None);
    let cur = pf.current_link.as_ref().unwrap();
    let max = pf.max_link.as_ref().unwrap();
    assert_eq!(
        (cur.speed.as_str(), cur.mts, cur.width),
        ("8.0 GT/s PCIe", Some(8000), Some(8))
    );
    assert_eq!((max.mts, max.width), (Some(16000), Some(16)));
    assert_eq!(pf.link_degraded(), Some(true));
    assert_eq!(pf.netdevs, vec!["ens1f0np0"]);
    assert_eq!(pf.ib_devices, vec!["mlx5_0"]);

    let vf0 = r.pci_function("0000:3b:00.2").unwrap().unwrap();
    assert_eq!(vf0.physfn.as_deref(), Some("0000:3b:00.0"));
    assert!(vf0.virtfns.is_empty());
    assert_eq!(vf0.link_degraded(), None, "VFs report no link");
    assert_eq!(vf0.ib_devices, vec!["mlx5_2"]);
    let vf1 = r.pci_function("0000:3b:00.3").unwrap().unwrap();
    assert_eq!(vf1.physfn.as_deref(), Some("0000:3b:00.0"));
    assert_eq!(vf1.driver.as_deref(), Some("vfio-pci"));
    assert!(vf1.netdevs.is_empty() && vf1.ib_devices.is_empty());
    assert_eq!(r.pci_function("0000:99:00.0").unwrap(), None);
}

#[test]
fn numa_node_minus_one_means_none() {
    let fx = fixture_a();
    fx.write_attr(
        "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/numa_node",
        "-1",
    )
    .unwrap();
    let pf = RdmaSysfs::new(fx.root())
        .pci_function("0000:3b:00.0")
        .unwrap()
        .unwrap();
    assert_eq!(pf.numa_node, None);
}

// ---- (b) IB port with IPoIB ----

fn fixture_b() -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_ib_ipoib().unwrap();
    fx
}

#[test]
fn ib_port_with_ipoib_netdev() {
    let fx = fixture_b();
    let d = dev(&fx, "ibp94s0");
    assert_eq!(d.pci_bdf(), Some("0000:5e:00.0"));
    assert_eq!(d.node_guid, Some(Guid(0x043f_7203_00da_2130)));
    let p = d.port(1).unwrap();
    assert_eq!(p.link_layer, LinkLayer::InfiniBand);
    assert_eq!(p.gids.len(), 1);
    assert_eq!(p.gids[0].gid_type, Some(GidType::IbRoceV1));
    assert_eq!(p.gids[0].ndev, None, "IB GIDs have no netdev (EINVAL)");
    assert!(p.gid_ndevs().is_empty());
    assert_eq!(
        p.netdevs,
        vec!["ibp94s0"],
        "found through device/net + dev_port"
    );
    assert_eq!(d.uverbs().unwrap().name, "uverbs2");
}

#[test]
fn ipoib_netdev_values_and_its_ib_device() {
    let fx = fixture_b();
    let r = RdmaSysfs::new(fx.root());
    let n = r.netdev("ibp94s0").unwrap().unwrap();
    assert_eq!((n.link_type, n.addr_len, n.dev_port), (32, 20, Some(0)));
    // Bytes 4..20 of the IPoIB address are the port GID.
    let bytes = crate::kernel::rtnetlink::parse_hwaddr(&n.address).unwrap();
    let gid = Ipv6Addr::from(<[u8; 16]>::try_from(&bytes[4..20]).unwrap());
    assert_eq!(gid, dev(&fx, "ibp94s0").port(1).unwrap().gids[0].gid);
    assert_eq!(
        r.ib_ports_for_netdev("ibp94s0").unwrap(),
        vec![port_ref("ibp94s0", NetdevLink::Device)]
    );
}

#[test]
fn dev_port_picks_the_port() {
    let fx = fixture_b();
    // dev_port 1 means port 2, which this one-port device does not have.
    fx.write_attr(
        "devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0/net/ibp94s0/dev_port",
        "1",
    )
    .unwrap();
    let r = RdmaSysfs::new(fx.root());
    assert_eq!(r.ib_ports_for_netdev("ibp94s0").unwrap(), vec![]);
    assert!(dev(&fx, "ibp94s0").port(1).unwrap().netdevs.is_empty());
}

// ---- (c) SF on the auxiliary bus ----

fn fixture_c() -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_sf().unwrap();
    fx
}

#[test]
fn sf_device_hangs_under_its_aux_device() {
    let fx = fixture_c();
    let d = dev(&fx, "mlx5_3");
    assert_eq!(
        d.parent,
        IbParent::Device(BusDevice::Auxiliary {
            name: "mlx5_core.sf.4".into(),
            pci_parent: Some("0000:06:00.0".into()),
        })
    );
    assert_eq!(d.pci_bdf(), Some("0000:06:00.0"));
    assert_eq!(d.netdevs(), vec!["enp6s0f0s88"]);
    let u = d.uverbs().unwrap();
    assert_eq!((u.name.as_str(), u.minor), ("uverbs3", 195));
}

#[test]
fn sf_netdev_maps_to_the_sf_ib_device_not_the_pf() {
    let fx = fixture_c();
    let r = RdmaSysfs::new(fx.root());
    let n = r.netdev("enp6s0f0s88").unwrap().unwrap();
    assert_eq!(
        n.device,
        Some(BusDevice::Auxiliary {
            name: "mlx5_core.sf.4".into(),
            pci_parent: Some("0000:06:00.0".into()),
        })
    );
    assert_eq!(
        r.ib_ports_for_netdev("enp6s0f0s88").unwrap(),
        vec![port_ref("mlx5_3", NetdevLink::Device)]
    );
    // The PF uplink has no ib device of its own here.
    assert_eq!(r.ib_ports_for_netdev("enp6s0f0np0").unwrap(), vec![]);
    let pf = r.pci_function("0000:06:00.0").unwrap().unwrap();
    assert_eq!(pf.netdevs, vec!["enp6s0f0np0"]);
    assert!(pf.ib_devices.is_empty());
    assert_eq!(pf.link_degraded(), Some(false));
}

// ---- (d) rxe over veth ----

fn fixture_d() -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    fx.rxe_over_veth().unwrap();
    fx
}

#[test]
fn rxe_device_model() {
    let fx = fixture_d();
    let d = dev(&fx, "rxe0");
    assert_eq!(d.parent, IbParent::Netdev("v0".into()));
    assert_eq!(d.pci_bdf(), None);
    assert_eq!(d.fw_ver, None, "rxe prints an empty fw_ver");
    assert_eq!(d.node_guid.unwrap().to_string(), "2861:d6ff:fe59:e610");
    let p = d.port(1).unwrap();
    assert_eq!(p.rate.as_deref(), Some("10 Gb/sec (1X FDR10)"));
    assert_eq!(p.netdevs, vec!["v0"]);
    assert_eq!(p.gids.len(), 2);
    assert_eq!(p.gids[1].ipv4(), Some(Ipv4Addr::new(10, 9, 0, 5)));
    assert_eq!(
        p.find_gid(v4(10, 9, 0, 5), "v0"),
        Some((1, GidType::RoceV2))
    );
    let u = d.uverbs().unwrap();
    assert_eq!((u.name.as_str(), u.major, u.minor), ("uverbs4", 231, 196));
    assert_eq!(chardev(&d, CharDevKind::Umad).minor, 4);
    assert_eq!(chardev(&d, CharDevKind::Issm).minor, 68);
}

#[test]
fn rxe_netdev_found_through_parent_file() {
    let fx = fixture_d();
    let r = RdmaSysfs::new(fx.root());
    assert_eq!(
        r.ib_ports_for_netdev("v0").unwrap(),
        vec![port_ref("rxe0", NetdevLink::Parent)]
    );
    assert_eq!(r.ib_ports_for_netdev("v1").unwrap(), vec![]);
    let v0 = r.netdev("v0").unwrap().unwrap();
    assert_eq!((v0.ifindex, v0.device), (3, None));
    assert_eq!(
        r.netdevs_of_ib_device("rxe0").unwrap(),
        vec![(1, "v0".into())]
    );
}

// ---- all four in one tree ----

#[test]
fn combined_tree_lists_everything_once() {
    let fx = SysfsFixture::all().unwrap();
    let r = RdmaSysfs::new(fx.root());
    let names: Vec<String> = r.devices().unwrap().into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["ibp94s0", "mlx5_0", "mlx5_2", "mlx5_3", "rxe0"]);
    let chars = r.char_devices().unwrap();
    assert_eq!(chars.len(), 15, "abi_version files are not devices");
    for c in &chars {
        let owner = c.ibdev.as_deref().unwrap();
        assert!(names.iter().any(|n| n == owner), "{c:?}");
    }
    let cm = r.rdma_cm().unwrap().unwrap();
    assert_eq!((cm.major, cm.minor, cm.ibdev.as_deref()), (10, 124, None));
    assert_eq!(cm.devnode(), Path::new("/dev/infiniband/rdma_cm"));
    // The IPoIB netdev and the ib device share a name; each lookup stays in its namespace.
    assert_eq!(
        r.ib_ports_for_netdev("ibp94s0").unwrap(),
        vec![port_ref("ibp94s0", NetdevLink::Device)]
    );
    assert_eq!(r.device("nope").unwrap(), None);
    assert_eq!(
        r.device("../x").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn a_device_moved_away_vanishes_but_its_char_devices_stay() {
    // Exclusive-mode move: the tagged infiniband entries (class link and the dir under the
    // PCI function) disappear from the host's /sys; the untagged char device classes keep
    // theirs.
    let fx = SysfsFixture::all().unwrap();
    fx.remove("class/infiniband/mlx5_2").unwrap();
    fx.remove("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.2/infiniband/mlx5_2")
        .unwrap();
    let r = RdmaSysfs::new(fx.root());
    assert_eq!(r.device("mlx5_2").unwrap(), None);
    assert!(r
        .char_devices()
        .unwrap()
        .iter()
        .any(|c| c.ibdev.as_deref() == Some("mlx5_2")));
    assert_eq!(r.ib_ports_for_netdev("ens1f0v0").unwrap(), vec![]);
}

#[test]
fn empty_sysfs_has_no_devices() {
    let fx = SysfsFixture::new().unwrap();
    let r = RdmaSysfs::new(fx.root());
    assert!(r.devices().unwrap().is_empty());
    assert!(r.char_devices().unwrap().is_empty());
    assert_eq!(r.rdma_cm().unwrap(), None);
}
