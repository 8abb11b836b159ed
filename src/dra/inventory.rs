//! What this node can hand out, read from sysfs through `kernel::topology` (the readers the
//! CNI and the doctor use): one device per RDMA port of a hardware ib device that has a netdev
//! (a RoCE PF, VF or SF netdev, an IPoIB netdev), plus each configured Soft-RoCE-capable netdev.
//! Software ib devices (rxe, siw) are not published: they are the pods' own (conf `softRoce`)
//! or hand-made, and a pod asks for Soft-RoCE through a soft-roce device instead.
//!
//! Nothing is kept between reads: every reconcile reads the node again.

use std::io;
use std::path::Path;

use crate::dra::config::DriverConfig;
use crate::kernel::nldev::NetnsMode;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{
    BusDevice, CharDev, CharDevKind, IbDevice, IbParent, IbPort, LinkLayer, RdmaSysfs,
};
use crate::node::Node;
use crate::records::lock::{device_key, NetdevIdentity};

/// What kind of device: what the pod gets and how rdma-ns attaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A RoCE netdev and its ib device port.
    Roce,
    /// An IPoIB netdev and its InfiniBand port.
    Ipoib,
    /// A netdev without RDMA hardware, on which each pod gets a Soft-RoCE device.
    SoftRoce,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Roce => "roce",
            Kind::Ipoib => "ipoib",
            Kind::SoftRoce => "soft-roce",
        }
    }
}

/// One device as the driver publishes, prepares and watches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvDevice {
    /// Its name in the ResourceSlice: a DNS label of at most [`MAX_NAME`] characters.
    pub name: String,
    pub kind: Kind,
    pub netdev: String,
    pub ibdev: Option<String>,
    pub port: Option<u32>,
    pub pci_address: Option<String>,
    /// `pf`, `vf` or `sf`.
    pub function: Option<&'static str>,
    /// The PCI root complex the function sits under (`pci0000:3a`).
    pub pcie_root: Option<String>,
    pub numa_node: Option<u32>,
    pub port_state: Option<String>,
    pub phys_state: Option<String>,
    pub rate: Option<String>,
    pub speed_mbps: Option<i64>,
    pub node_guid: Option<String>,
    pub firmware: Option<String>,
    pub driver: Option<String>,
    pub netns_mode: Option<NetnsMode>,
    pub rail: Option<String>,
    /// The key the CNI locks this device by (`pci-<bdf>`, else `mac-<address>`).
    pub lock_key: String,
    /// The device's uverbs, umad and issm nodes (umad/issm of its port only).
    pub char_devs: Vec<CharDev>,
    /// Why the device cannot carry traffic now; None when it can.
    pub unhealthy: Option<String>,
}

impl InvDevice {
    /// Whether several pods' children share the device: in shared RDMA netns mode (a Soft-RoCE
    /// netdev too: each pod gets its own rxe device on its own child). In exclusive mode rdma-ns
    /// refuses children, which would get no ib device, so every device is whole there: moved.
    pub fn shared(&self) -> bool {
        self.netns_mode != Some(NetnsMode::Exclusive)
    }
}

/// The longest device name: `rdma-ns:` and the name must fit the 64 characters of a string
/// attribute (`k8s.cni.cncf.io/deviceID`).
pub const MAX_NAME: usize = 56;

/// How the inventory learns a netdev's permanent hardware address, which sysfs does not show
/// (IFLA_PERM_ADDRESS): part of the device's lock key (records::lock::device_key).
pub type PermAddress<'a> = &'a dyn Fn(&str) -> Option<Vec<u8>>;

/// Every device of the node, sorted by name; permanent addresses from rtnetlink in the host's
/// netns when `sys` is the host's /sys (a fixture sysfs has no netdevs behind it: none).
pub fn read(sys: &SysRoot, cfg: &DriverConfig) -> io::Result<Vec<InvDevice>> {
    let real = sys.root() == Path::new("/sys");
    let kernel = real
        .then(crate::kernel::rtnetlink::RealKernel::new)
        .and_then(Result::ok);
    let perm = |netdev: &str| -> Option<Vec<u8>> {
        use crate::kernel::rtnetlink::NetOps;
        let link = kernel
            .as_ref()?
            .link_by_name(crate::kernel::Ns::Host, netdev)
            .ok()??;
        link.perm_hwaddr
    };
    read_with(sys, cfg, &perm)
}

/// [`read`], with the permanent addresses from `perm`.
pub fn read_with(
    sys: &SysRoot,
    cfg: &DriverConfig,
    perm: PermAddress<'_>,
) -> io::Result<Vec<InvDevice>> {
    let topo = RdmaSysfs::new(sys);
    let netns_mode = netns_mode(sys);
    let mut out = Vec::new();
    for dev in topo.hardware_devices()? {
        for port in &dev.ports {
            let Some(netdev) = port.netdevs.first() else {
                continue;
            };
            let mut d = hardware_port(&topo, &dev, port, netdev, perm)?;
            d.netns_mode = netns_mode;
            out.push(d);
        }
    }
    for netdev in &cfg.soft_roce_netdevs {
        if let Some(mut d) = soft_roce(&topo, netdev, perm)? {
            d.netns_mode = netns_mode;
            out.push(d);
        }
    }
    for d in &mut out {
        d.rail = rail_of(cfg, d);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    Ok(out)
}

fn netns_mode(sys: &SysRoot) -> Option<NetnsMode> {
    let node = Node {
        sys: sys.clone(),
        ..Node::system()
    };
    node.netns_mode_from_sysfs()
}

fn hardware_port(
    topo: &RdmaSysfs<'_>,
    dev: &IbDevice,
    port: &IbPort,
    netdev: &str,
    perm: PermAddress<'_>,
) -> io::Result<InvDevice> {
    let kind = match port.link_layer {
        LinkLayer::InfiniBand => Kind::Ipoib,
        _ => Kind::Roce,
    };
    let bus = match &dev.parent {
        IbParent::Device(b) => Some(b),
        _ => None,
    };
    let pci = dev.pci_bdf().map(str::to_string);
    let function = pci
        .as_deref()
        .map(|bdf| topo.pci_function(bdf))
        .transpose()?
        .flatten();
    let role = match (bus, &function) {
        (Some(BusDevice::Auxiliary { .. }), _) => Some("sf"),
        (_, Some(f)) if f.physfn.is_some() => Some("vf"),
        (_, Some(_)) => Some("pf"),
        _ => None,
    };
    let char_devs = dev
        .char_devs
        .iter()
        .filter(|c| c.kind == CharDevKind::Uverbs || c.port == Some(port.index))
        .cloned()
        .collect();
    Ok(InvDevice {
        name: device_name(&format!("{}-p{}", dev.name, port.index)),
        kind,
        netdev: netdev.to_string(),
        ibdev: Some(dev.name.clone()),
        port: Some(port.index),
        lock_key: lock_key(topo, netdev, perm)?,
        pcie_root: pci.as_deref().and_then(|bdf| pcie_root(topo, bdf)),
        numa_node: function.as_ref().and_then(|f| f.numa_node),
        driver: function.as_ref().and_then(|f| f.driver.clone()),
        pci_address: pci,
        function: role,
        port_state: Some(port.state.to_string()),
        phys_state: Some(port.phys_state.to_string()),
        speed_mbps: port.rate.as_deref().and_then(speed_mbps),
        rate: port.rate.clone(),
        node_guid: dev.node_guid.map(|g| g.to_string()),
        firmware: dev.fw_ver.clone(),
        netns_mode: None,
        rail: None,
        char_devs,
        unhealthy: port_problem(dev, port),
    })
}

/// Why a port cannot carry traffic: not ACTIVE, or its physical link not up.
fn port_problem(dev: &IbDevice, port: &IbPort) -> Option<String> {
    const LINK_UP: u32 = 5;
    (!port.is_active() || port.phys_state.num != LINK_UP).then(|| {
        format!(
            "port {} of {} is {} (physical state {})",
            port.index, dev.name, port.state, port.phys_state
        )
    })
}

fn soft_roce(
    topo: &RdmaSysfs<'_>,
    netdev: &str,
    perm: PermAddress<'_>,
) -> io::Result<Option<InvDevice>> {
    let Some(n) = topo.netdev(netdev)? else {
        return Ok(None);
    };
    let pci = n
        .device
        .as_ref()
        .and_then(|d| d.pci_bdf())
        .map(str::to_string);
    // Where the netdev sits: its PCI function, or a virtio netdev's virtio-pci function (cloud
    // VMs, the lab's nodes), whose root complex and NUMA node are the netdev's too.
    let placed = n
        .device
        .as_ref()
        .and_then(|d| d.placement_bdf())
        .map(str::to_string);
    let function = placed
        .as_deref()
        .map(|bdf| topo.pci_function(bdf))
        .transpose()?
        .flatten();
    let carrier = topo
        .sys_root()
        .read_attr(Path::new("class/net").join(netdev).join("carrier"));
    let unhealthy = match carrier.as_deref() {
        Ok("1") => None,
        _ => Some(format!(
            "netdev {netdev} has no carrier (down or unplugged)"
        )),
    };
    Ok(Some(InvDevice {
        name: device_name(&format!("softroce-{netdev}")),
        kind: Kind::SoftRoce,
        netdev: netdev.to_string(),
        ibdev: None,
        port: None,
        lock_key: lock_key(topo, netdev, perm)?,
        pcie_root: placed.as_deref().and_then(|bdf| pcie_root(topo, bdf)),
        numa_node: function.as_ref().and_then(|f| f.numa_node),
        driver: function.as_ref().and_then(|f| f.driver.clone()),
        function: pci.as_ref().map(|_| "pf"),
        pci_address: placed,
        port_state: None,
        phys_state: None,
        rate: None,
        speed_mbps: None,
        node_guid: None,
        firmware: None,
        netns_mode: None,
        rail: None,
        char_devs: Vec::new(),
        unhealthy,
    }))
}

/// The key the CNI locks `netdev` by (records::lock::device_key): its own PCI function (an SF's
/// netdev sits on the auxiliary bus: not its PF's), else its permanent address, else its
/// current one.
fn lock_key(topo: &RdmaSysfs<'_>, netdev: &str, perm: PermAddress<'_>) -> io::Result<String> {
    let n = topo.netdev(netdev)?;
    let pci = n.as_ref().and_then(|n| match &n.device {
        Some(BusDevice::Pci { bdf }) => Some(bdf.as_str()),
        _ => None,
    });
    let hwaddr = n
        .as_ref()
        .and_then(|n| crate::kernel::rtnetlink::parse_hwaddr(&n.address))
        .unwrap_or_default();
    let perm = perm(netdev);
    Ok(device_key(&NetdevIdentity {
        pci,
        perm_hwaddr: perm.as_deref(),
        hwaddr: &hwaddr,
    }))
}

/// The root complex of a PCI function: the first directory under `devices/` on its path
/// (`devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0` → `pci0000:3a`), the value of the standard
/// `resource.kubernetes.io/pcieRoot` attribute.
fn pcie_root(topo: &RdmaSysfs<'_>, bdf: &str) -> Option<String> {
    let sys = topo.sys_root();
    let real = std::fs::canonicalize(sys.path(Path::new("bus/pci/devices").join(bdf))).ok()?;
    let root = std::fs::canonicalize(sys.root()).ok()?;
    let rel = real.strip_prefix(root.join("devices")).ok()?;
    let first = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    first.starts_with("pci").then_some(first)
}

/// `100 Gb/sec (4X EDR)` → 100000.
fn speed_mbps(rate: &str) -> Option<i64> {
    let gbps: f64 = rate.split_whitespace().next()?.parse().ok()?;
    Some((gbps * 1000.0).round() as i64)
}

fn rail_of(cfg: &DriverConfig, d: &InvDevice) -> Option<String> {
    [
        d.ibdev.as_deref(),
        Some(d.netdev.as_str()),
        d.pci_address.as_deref(),
    ]
    .into_iter()
    .flatten()
    .find_map(|k| cfg.rails.get(k).cloned())
}

/// A DNS label from `raw`: lowercase letters, digits and `-`, at most [`MAX_NAME`].
pub fn device_name(raw: &str) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let mut name = mapped.trim_matches('-').to_string();
    name.truncate(MAX_NAME);
    name.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::topology::fixtures::{NetdevSpec, PciSpec, SysfsFixture};

    fn by_name<'a>(devs: &'a [InvDevice], name: &str) -> &'a InvDevice {
        devs.iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} missing from {devs:#?}"))
    }

    /// Every reconcile reads the inventory, also while a pod's Soft-RoCE device comes and goes.
    /// A software device is passed over unread (an rxe port's GID table is 1024 sysfs reads,
    /// which on the lab's emulated nodes took over a second, and a pod's device vanishes
    /// mid-read with ENODEV), and no hardware port's GID table is read: nothing published
    /// comes from one. Unreadable GID entries stand for both here.
    #[test]
    fn the_inventory_reads_no_gid_table() {
        let fx = SysfsFixture::all().unwrap();
        for port in [
            "class/infiniband/rxe0/ports/1",
            "class/infiniband/mlx5_0/ports/1",
        ] {
            let entry = format!("{port}/gids/0");
            fx.remove(&entry).unwrap();
            std::fs::create_dir(fx.path().join(&entry)).unwrap();
        }
        let devs = read(fx.root(), &DriverConfig::default()).unwrap();
        let pf = by_name(&devs, "mlx5-0-p1");
        assert_eq!((pf.kind, pf.netdev.as_str()), (Kind::Roce, "ens1f0np0"));
        assert!(
            devs.iter().all(|d| d.ibdev.as_deref() != Some("rxe0")),
            "{devs:#?}"
        );
    }

    /// The fixture node of every preset: one device per port of each hardware ib device with a
    /// netdev (PF, VF, SF, IPoIB), none for rxe0 (a software device), and the configured
    /// Soft-RoCE netdev; each with the topology the scheduler matches on.
    #[test]
    fn every_rdma_port_with_a_netdev_is_one_device_with_its_topology() {
        let fx = SysfsFixture::all().unwrap();
        fx.write_attr("module/ib_core/parameters/netns_mode", "Y")
            .unwrap();
        fx.write_attr("class/net/v1/carrier", "1").unwrap();
        let cfg = DriverConfig {
            soft_roce_netdevs: vec!["v1".into(), "absent0".into()],
            rails: [("mlx5_2".to_string(), "rail1".to_string())].into(),
            ..DriverConfig::default()
        };
        let devs = read(fx.root(), &cfg).unwrap();
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ibp94s0-p1",
                "mlx5-0-p1",
                "mlx5-2-p1",
                "mlx5-3-p1",
                "softroce-v1"
            ],
            "{devs:#?}"
        );
        let pf = by_name(&devs, "mlx5-0-p1");
        assert_eq!((pf.kind, pf.netdev.as_str()), (Kind::Roce, "ens1f0np0"));
        assert_eq!(pf.pci_address.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(pf.pcie_root.as_deref(), Some("pci0000:3a"));
        assert_eq!((pf.numa_node, pf.function), (Some(0), Some("pf")));
        assert_eq!(pf.speed_mbps, Some(100_000));
        assert_eq!(pf.firmware.as_deref(), Some("16.35.2000"));
        assert_eq!(pf.node_guid.as_deref(), Some("0c42:a103:003b:0000"));
        assert_eq!(pf.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(pf.lock_key, "pci-0000:3b:00.0");
        assert_eq!(pf.netns_mode, Some(NetnsMode::Shared));
        assert!(pf.shared() && pf.unhealthy.is_none() && pf.rail.is_none());
        assert!(pf.char_devs.iter().any(|c| c.kind == CharDevKind::Uverbs));

        let vf = by_name(&devs, "mlx5-2-p1");
        assert_eq!(
            (vf.function, vf.rail.as_deref()),
            (Some("vf"), Some("rail1"))
        );
        let sf = by_name(&devs, "mlx5-3-p1");
        assert_eq!(
            (sf.function, sf.netdev.as_str()),
            (Some("sf"), "enp6s0f0s88")
        );
        assert_eq!(sf.pcie_root.as_deref(), Some("pci0000:00"));
        let ib = by_name(&devs, "ibp94s0-p1");
        assert_eq!((ib.kind, ib.numa_node), (Kind::Ipoib, Some(1)));
        assert_eq!(ib.pcie_root.as_deref(), Some("pci0000:5d"));

        let soft = by_name(&devs, "softroce-v1");
        assert_eq!((soft.kind, soft.ibdev.as_ref()), (Kind::SoftRoce, None));
        assert_eq!(soft.lock_key, "mac-ee:3a:4b:5c:6d:7e");
        assert!(soft.unhealthy.is_none(), "{soft:?}");
    }

    /// A port that goes down, or a netdev without carrier, is named unhealthy with what was
    /// seen; exclusive netns mode makes every device whole (not shared), shared mode shares
    /// them all.
    #[test]
    fn a_port_down_is_unhealthy_and_exclusive_mode_makes_devices_whole() {
        let fx = SysfsFixture::all().unwrap();
        fx.write_attr("module/ib_core/parameters/netns_mode", "N")
            .unwrap();
        fx.write_attr("class/infiniband/mlx5_0/ports/1/state", "1: DOWN")
            .unwrap();
        fx.write_attr("class/infiniband/mlx5_0/ports/1/phys_state", "3: Disabled")
            .unwrap();
        fx.write_attr("class/net/v1/carrier", "0").unwrap();
        let cfg = DriverConfig {
            soft_roce_netdevs: vec!["v1".into()],
            ..DriverConfig::default()
        };
        let devs = read(fx.root(), &cfg).unwrap();
        let pf = by_name(&devs, "mlx5-0-p1");
        let why = pf.unhealthy.as_deref().expect("a port down is unhealthy");
        assert!(
            why.contains("1: DOWN") && why.contains("3: Disabled"),
            "{why}"
        );
        assert!(!pf.shared());
        assert!(by_name(&devs, "mlx5-2-p1").unhealthy.is_none());
        let soft = by_name(&devs, "softroce-v1");
        assert!(!soft.shared());
        assert!(soft.unhealthy.as_deref().unwrap().contains("no carrier"));
        fx.write_attr("module/ib_core/parameters/netns_mode", "Y")
            .unwrap();
        let shared = read(fx.root(), &cfg).unwrap();
        assert!(shared.iter().all(InvDevice::shared), "{shared:#?}");
    }

    /// A virtio netdev (a cloud VM's NIC, the lab's rails) hangs under a virtio device, not a
    /// PCI function: this machine's own eth0 is `devices/pci0000:00/0000:00:03.0/virtio2/net/
    /// eth0`, with `virtio2/subsystem -> bus/virtio`. Its Soft-RoCE device still gets the root
    /// complex and NUMA node of the virtio-pci function, and its lock key stays its address.
    #[test]
    fn a_virtio_netdev_is_placed_under_its_virtio_pci_function() {
        let fx = SysfsFixture::new().unwrap();
        let pci = fx
            .add_pci_function(&PciSpec {
                bdf: "0000:41:00.0",
                upstream: "pci0000:40/0000:40:00.0",
                numa_node: 1,
                current_link: ("2.5 GT/s PCIe", 1),
                max_link: ("2.5 GT/s PCIe", 1),
                driver: Some("virtio-pci"),
            })
            .unwrap();
        let virtio = pci.join("virtio3");
        fx.symlink(virtio.join("subsystem"), "bus/virtio").unwrap();
        fx.add_netdev(&NetdevSpec::ethernet(
            "rail1",
            4,
            Some(&virtio),
            "52:54:00:1a:02:01",
        ))
        .unwrap();
        fx.write_attr("class/net/rail1/carrier", "1").unwrap();
        let published = |netdev: &str| {
            let cfg = DriverConfig {
                soft_roce_netdevs: vec![netdev.into()],
                ..DriverConfig::default()
            };
            read(fx.root(), &cfg).unwrap()
        };
        let devs = published("rail1");
        let soft = by_name(&devs, "softroce-rail1");
        assert_eq!(soft.pcie_root.as_deref(), Some("pci0000:40"));
        assert_eq!(soft.pci_address.as_deref(), Some("0000:41:00.0"));
        assert_eq!(soft.numa_node, Some(1));
        assert_eq!(soft.lock_key, "mac-52:54:00:1a:02:01");
        assert_eq!(soft.function, None);

        // Its presence twin: a netdev with no device at all (veth) is placed nowhere.
        fx.add_netdev(&NetdevSpec::ethernet("v9", 5, None, "ee:00:00:00:00:09"))
            .unwrap();
        let devs = published("v9");
        let veth = by_name(&devs, "softroce-v9");
        assert_eq!((veth.pcie_root.as_ref(), veth.numa_node), (None, None));
    }

    /// §9 of issue 39: the driver locks a device by the key the CNI locks it by, one function
    /// for both: an SF's netdev by its own permanent address (not its PF's function, which
    /// another SF shares), a netdev whose address was changed by its permanent one, a PF by its
    /// function; the CNI computes each from the rtnetlink link it selects.
    #[test]
    fn the_driver_and_the_cni_lock_a_device_by_one_key() {
        use crate::kernel::rtnetlink::Link;
        let fx = SysfsFixture::all().unwrap();
        fx.write_attr("class/net/v1/carrier", "1").unwrap();
        let cfg = DriverConfig {
            soft_roce_netdevs: vec!["v1".into()],
            ..DriverConfig::default()
        };
        let sf_perm = vec![0x7e, 0x3c, 0x5e, 0, 0, 0x58];
        let v1_perm = vec![0x52, 0x54, 0, 0x1a, 2, 1];
        let perm = |netdev: &str| match netdev {
            "enp6s0f0s88" => Some(sf_perm.clone()),
            "v1" => Some(v1_perm.clone()),
            _ => None,
        };
        let devs = read_with(fx.root(), &cfg, &perm).unwrap();
        let links = [
            (
                "mlx5-3-p1",
                Link {
                    name: "enp6s0f0s88".into(),
                    hwaddr: vec![0x7e, 0x3c, 0x5e, 0, 0, 0x58],
                    perm_hwaddr: Some(sf_perm.clone()),
                    parent_bus: Some("auxiliary".into()),
                    parent_dev: Some("mlx5_core.sf.4".into()),
                    ..Default::default()
                },
            ),
            (
                "softroce-v1",
                Link {
                    name: "v1".into(),
                    hwaddr: vec![0xee, 0x3a, 0x4b, 0x5c, 0x6d, 0x7e],
                    perm_hwaddr: Some(v1_perm.clone()),
                    ..Default::default()
                },
            ),
            (
                "mlx5-0-p1",
                Link {
                    name: "ens1f0np0".into(),
                    hwaddr: vec![0x0c, 0x42, 0xa1, 0x3b, 0, 0],
                    parent_bus: Some("pci".into()),
                    parent_dev: Some("0000:3b:00.0".into()),
                    ..Default::default()
                },
            ),
        ];
        for (name, link) in links {
            let cni = crate::attach::modes::move_dev::device_key(&link);
            assert_eq!(by_name(&devs, name).lock_key, cni, "{name}");
        }
        assert_eq!(
            by_name(&devs, "mlx5-3-p1").lock_key,
            "mac-7e:3c:5e:00:00:58"
        );
        assert_eq!(
            by_name(&devs, "softroce-v1").lock_key,
            "mac-52:54:00:1a:02:01"
        );
    }

    #[test]
    fn device_names_are_dns_labels_that_fit_the_device_id() {
        assert_eq!(device_name("mlx5_0-p1"), "mlx5-0-p1");
        assert_eq!(device_name("rocep59s0f2-p1"), "rocep59s0f2-p1");
        assert_eq!(device_name("_Eth.1_"), "eth-1");
        let long = device_name(&"x".repeat(80));
        assert_eq!(long.len(), MAX_NAME);
        assert!(format!("rdma-ns:{long}").len() <= 64);
    }
}
