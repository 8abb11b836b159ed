//! Fake `/sys` trees with the real layouts of RDMA NICs, for tests.
//!
//! A plain `pub mod` (not `cfg(test)`) so integration tests under `tests/` and other modules'
//! tests can build the same trees: `tests/` link the library built without `cfg(test)`.
//!
//! Shapes follow `shared/notes/sysfs-layouts.md` and what a 6.1 kernel showed for rxe. Every
//! symlink is written relative, the way the kernel writes them (`virtfn0 -> ../0000:3b:00.2`),
//! so code that joins a link target onto a directory by hand fails here as it would on a host.
//! A GID attribute whose read(2) fails with EINVAL on a real kernel (empty entries; ndevs of
//! IB ports) is left out: a regular file cannot fail a read, and readers treat both alike.
//!
//! Presets, which combine in one tree (names and char device numbers do not collide):
//! - [`SysfsFixture::mlx5_roce_pf_with_vfs`]: ConnectX RoCE PF `0000:3b:00.0` (`ens1f0np0`,
//!   `mlx5_0`, VLAN upper `ens1f0np0.100`) with VFs `0000:3b:00.2` (`ens1f0v0`, `mlx5_2`) and
//!   `0000:3b:00.3` (bound to vfio-pci, no netdev);
//! - [`SysfsFixture::mlx5_ib_ipoib`]: IB port on `0000:5e:00.0`, ib device and IPoIB netdev
//!   both named `ibp94s0`;
//! - [`SysfsFixture::mlx5_sf`]: SF `mlx5_core.sf.4` (sfnum 88) under `0000:06:00.0` with
//!   `enp6s0f0s88` and `mlx5_3`;
//! - [`SysfsFixture::rxe_over_veth`]: `rxe0` over veth `v0`, as seen on a 6.1 VM.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::CharDevKind;
use crate::kernel::sysfs::SysRoot;

/// A PCI function to create under `devices/`.
#[derive(Debug, Clone)]
pub struct PciSpec<'a> {
    pub bdf: &'a str,
    /// The directories above the function, e.g. `pci0000:3a/0000:3a:00.0` (root bus and
    /// root port); real chains can be much deeper.
    pub upstream: &'a str,
    /// `numa_node`, -1 for none.
    pub numa_node: i32,
    /// `current_link_speed` and `current_link_width`.
    pub current_link: (&'a str, u32),
    /// `max_link_speed` and `max_link_width`.
    pub max_link: (&'a str, u32),
    pub driver: Option<&'a str>,
}

impl<'a> PciSpec<'a> {
    /// A VF bound to `driver`. VFs implement no Link Status/Capabilities registers of their
    /// own (they are RsvdP in the SR-IOV spec), which the kernel prints as an unknown speed and
    /// width 0. UNCONFIRMED on hardware.
    pub fn vf(bdf: &'a str, upstream: &'a str, driver: &'a str) -> PciSpec<'a> {
        PciSpec {
            bdf,
            upstream,
            numa_node: 0,
            current_link: ("Unknown", 0),
            max_link: ("Unknown", 0),
            driver: Some(driver),
        }
    }
}

/// A netdev to create.
#[derive(Debug, Clone)]
pub struct NetdevSpec<'a> {
    pub name: &'a str,
    pub ifindex: u32,
    /// The parent device directory (root-relative, as returned by the `add_*` calls); None
    /// puts the netdev under `devices/virtual/net` with no `device` link.
    pub parent: Option<&'a Path>,
    /// ARPHRD_*: 1 Ethernet, 32 InfiniBand.
    pub link_type: u16,
    /// `aa:bb:...`; `addr_len` is derived from it.
    pub address: &'a str,
    pub dev_port: u32,
    pub dev_id: &'a str,
    pub mtu: u32,
    /// Further attributes, e.g. IPoIB's `mode` and `pkey`.
    pub extra: &'a [(&'a str, &'a str)],
}

impl<'a> NetdevSpec<'a> {
    /// An Ethernet netdev as most drivers show one: first port (`dev_port` 0), `dev_id` 0x0,
    /// MTU 1500, no further attributes.
    pub fn ethernet(
        name: &'a str,
        ifindex: u32,
        parent: Option<&'a Path>,
        address: &'a str,
    ) -> NetdevSpec<'a> {
        NetdevSpec {
            name,
            ifindex,
            parent,
            link_type: 1,
            address,
            dev_port: 0,
            dev_id: "0x0",
            mtu: 1500,
            extra: &[],
        }
    }
}

/// Where an ib device hangs.
#[derive(Debug, Clone, Copy)]
pub enum IbParentSpec<'a> {
    /// Under a device directory (PCI function or aux device), with a `device` link to it.
    Device(&'a Path),
    /// Under `devices/virtual/infiniband` with a `parent` file naming this netdev (rxe).
    Netdev(&'a str),
}

#[derive(Debug, Clone)]
pub struct GidSpec<'a> {
    pub index: u32,
    /// Uncompressed, as `%pI6` prints: `fe80:0000:0000:0000:0e42:a1ff:fe3b:0000`.
    pub gid: &'a str,
    /// `IB/RoCE v1` or `RoCE v2`.
    pub gid_type: &'a str,
    /// None leaves `ndevs/N` out (IB ports: read(2) gives EINVAL).
    pub ndev: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub struct PortSpec<'a> {
    pub index: u32,
    /// `4: ACTIVE`
    pub state: &'a str,
    /// `5: LinkUp`
    pub phys_state: &'a str,
    /// `InfiniBand` or `Ethernet`
    pub link_layer: &'a str,
    /// `100 Gb/sec (4X EDR)`
    pub rate: &'a str,
    /// `0x0` on RoCE.
    pub lid: &'a str,
    /// Entries 0..len of `gids/` exist; those not in `gids` read as the zero GID and have no
    /// attrs.
    pub gid_tbl_len: u32,
    pub gids: &'a [GidSpec<'a>],
    pub pkeys: &'a [&'a str],
}

impl<'a> PortSpec<'a> {
    /// Port 1, ACTIVE and LinkUp, with no LID (as RoCE ports have) and the default P_Key.
    pub fn active(
        link_layer: &'a str,
        rate: &'a str,
        gid_tbl_len: u32,
        gids: &'a [GidSpec<'a>],
    ) -> PortSpec<'a> {
        PortSpec {
            index: 1,
            state: "4: ACTIVE",
            phys_state: "5: LinkUp",
            link_layer,
            rate,
            lid: "0x0",
            gid_tbl_len,
            gids,
            pkeys: &["0xffff"],
        }
    }
}

#[derive(Debug, Clone)]
pub struct IbDeviceSpec<'a> {
    pub name: &'a str,
    pub parent: IbParentSpec<'a>,
    /// `1: CA`
    pub node_type: &'a str,
    /// `0c42:a103:003b:0000`
    pub node_guid: &'a str,
    pub sys_image_guid: &'a str,
    /// Empty for rxe.
    pub fw_ver: &'a str,
    pub ports: &'a [PortSpec<'a>],
}

/// A uverbs, umad or issm device.
#[derive(Debug, Clone)]
pub struct CharDevSpec<'a> {
    pub kind: CharDevKind,
    /// `uverbs0`
    pub name: &'a str,
    pub ibdev: &'a str,
    /// umad/issm only.
    pub port: Option<u32>,
    /// The ib device's parent device directory (uverbs and umad take it as their own parent,
    /// uverbs_main.c `ib_uverbs_add_one`, user_mad.c `ib_umad_init_port_dev`); None for
    /// virtual devices (rxe).
    pub parent: Option<&'a Path>,
    pub major: u32,
    pub minor: u32,
    /// uverbs' driver ABI (`abi_version`): mlx5 1, rxe 2.
    pub abi_version: Option<u32>,
}

/// A temporary directory standing for `/sys`, removed on drop.
#[derive(Debug)]
pub struct SysfsFixture {
    dir: PathBuf,
    root: SysRoot,
}

impl SysfsFixture {
    /// An empty tree with the class and bus directories a kernel with the RDMA core has.
    pub fn new() -> io::Result<SysfsFixture> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rdma-ns-sysfs-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let fx = SysfsFixture {
            root: SysRoot::new(&dir),
            dir,
        };
        for d in [
            "class/net",
            "class/infiniband",
            "class/infiniband_verbs",
            "class/infiniband_mad",
            "class/misc",
            "bus/pci/devices",
            "bus/pci/drivers",
            "bus/auxiliary/devices",
            "devices/virtual/net",
        ] {
            fs::create_dir_all(fx.dir.join(d))?;
        }
        // Class-level ABI files sit next to the device links (ib_user_verbs.h
        // IB_USER_VERBS_ABI_VERSION 6, ib_user_mad.h IB_USER_MAD_ABI_VERSION 5), so listings
        // of these classes must skip them.
        fx.write_attr("class/infiniband_verbs/abi_version", "6")?;
        fx.write_attr("class/infiniband_mad/abi_version", "5")?;
        Ok(fx)
    }

    /// All four presets in one tree.
    pub fn all() -> io::Result<SysfsFixture> {
        let fx = SysfsFixture::new()?;
        fx.mlx5_roce_pf_with_vfs()?;
        fx.mlx5_ib_ipoib()?;
        fx.mlx5_sf()?;
        fx.rxe_over_veth()?;
        Ok(fx)
    }

    pub fn root(&self) -> &SysRoot {
        &self.root
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `value` plus the newline every sysfs `show` adds, creating parent dirs.
    pub fn write_attr(&self, rel: impl AsRef<Path>, value: &str) -> io::Result<()> {
        let p = self.dir.join(rel.as_ref());
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(p, format!("{value}\n"))
    }

    /// Marks `modules` loaded (`module/<name>/refcnt`) and ib_core's `netns_mode` parameter
    /// shared (`Y`), as /sys shows a node whose RDMA stack is up.
    pub fn load_modules(&self, modules: &[&str]) -> io::Result<()> {
        for m in modules {
            self.write_attr(format!("module/{m}/refcnt"), "1")?;
        }
        self.write_attr("module/ib_core/parameters/netns_mode", "Y")
    }

    /// Removes a file, link or directory tree (to stand for absent or EINVAL attributes).
    pub fn remove(&self, rel: impl AsRef<Path>) -> io::Result<()> {
        let p = self.dir.join(rel.as_ref());
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(p),
            Ok(_) => fs::remove_file(p),
            Err(e) => Err(e),
        }
    }

    /// Creates `link` pointing at `target` (both root-relative), written as a relative path.
    pub fn symlink(&self, link: impl AsRef<Path>, target: impl AsRef<Path>) -> io::Result<()> {
        let link = link.as_ref();
        let p = self.dir.join(link);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink(relative_target(link, target.as_ref()), p)
    }

    /// Adds a PCI function; returns its root-relative device directory.
    pub fn add_pci_function(&self, spec: &PciSpec<'_>) -> io::Result<PathBuf> {
        let dir = Path::new("devices").join(spec.upstream).join(spec.bdf);
        fs::create_dir_all(self.dir.join(&dir))?;
        self.symlink(dir.join("subsystem"), "bus/pci")?;
        self.symlink(Path::new("bus/pci/devices").join(spec.bdf), &dir)?;
        self.write_attr(dir.join("numa_node"), &spec.numa_node.to_string())?;
        self.write_attr(dir.join("current_link_speed"), spec.current_link.0)?;
        self.write_attr(
            dir.join("current_link_width"),
            &spec.current_link.1.to_string(),
        )?;
        self.write_attr(dir.join("max_link_speed"), spec.max_link.0)?;
        self.write_attr(dir.join("max_link_width"), &spec.max_link.1.to_string())?;
        if let Some(driver) = spec.driver {
            let drv = Path::new("bus/pci/drivers").join(driver);
            fs::create_dir_all(self.dir.join(&drv))?;
            self.symlink(dir.join("driver"), &drv)?;
        }
        Ok(dir)
    }

    /// Links a PF and its VFs: `virtfnN -> ../<VF>` on the PF, `physfn -> ../<PF>` on each VF
    /// (K:Documentation/ABI/testing/sysfs-bus-pci).
    pub fn add_sriov(&self, pf: &Path, total_vfs: u32, vfs: &[&Path]) -> io::Result<()> {
        self.write_attr(pf.join("sriov_totalvfs"), &total_vfs.to_string())?;
        self.write_attr(pf.join("sriov_numvfs"), &vfs.len().to_string())?;
        for (n, vf) in vfs.iter().enumerate() {
            self.symlink(pf.join(format!("virtfn{n}")), vf)?;
            self.symlink(vf.join("physfn"), pf)?;
        }
        Ok(())
    }

    /// Adds an auxiliary-bus device under `parent` (mlx5 SFs sit under their PCI function);
    /// `sfnum` is written for SFs. Returns its device directory.
    pub fn add_aux_device(
        &self,
        parent: &Path,
        name: &str,
        sfnum: Option<u32>,
    ) -> io::Result<PathBuf> {
        let dir = parent.join(name);
        fs::create_dir_all(self.dir.join(&dir))?;
        self.symlink(dir.join("subsystem"), "bus/auxiliary")?;
        self.symlink(Path::new("bus/auxiliary/devices").join(name), &dir)?;
        if let Some(n) = sfnum {
            self.write_attr(dir.join("sfnum"), &n.to_string())?;
        }
        Ok(dir)
    }

    /// Adds a netdev: `<parent>/net/<name>/` (or `devices/virtual/net/<name>/`), its
    /// `class/net` link and, with a parent, `device -> ../../../<parent>`.
    pub fn add_netdev(&self, spec: &NetdevSpec<'_>) -> io::Result<PathBuf> {
        let dir = match spec.parent {
            Some(p) => p.join("net").join(spec.name),
            None => Path::new("devices/virtual/net").join(spec.name),
        };
        fs::create_dir_all(self.dir.join(&dir))?;
        self.symlink(Path::new("class/net").join(spec.name), &dir)?;
        self.symlink(dir.join("subsystem"), "class/net")?;
        if let Some(p) = spec.parent {
            self.symlink(dir.join("device"), p)?;
        }
        let addr_len = spec.address.split(':').count();
        for (attr, value) in [
            ("ifindex", spec.ifindex.to_string()),
            ("iflink", spec.ifindex.to_string()),
            ("type", spec.link_type.to_string()),
            ("addr_len", addr_len.to_string()),
            ("address", spec.address.to_string()),
            ("dev_port", spec.dev_port.to_string()),
            ("dev_id", spec.dev_id.to_string()),
            ("mtu", spec.mtu.to_string()),
            ("operstate", "up".to_string()),
        ] {
            self.write_attr(dir.join(attr), &value)?;
        }
        for (attr, value) in spec.extra {
            self.write_attr(dir.join(attr), value)?;
        }
        Ok(dir)
    }

    /// Adds an ib device with its ports and GID tables; returns its directory.
    pub fn add_ib_device(&self, spec: &IbDeviceSpec<'_>) -> io::Result<PathBuf> {
        let dir = match spec.parent {
            IbParentSpec::Device(p) => p.join("infiniband").join(spec.name),
            IbParentSpec::Netdev(_) => Path::new("devices/virtual/infiniband").join(spec.name),
        };
        fs::create_dir_all(self.dir.join(&dir))?;
        self.symlink(Path::new("class/infiniband").join(spec.name), &dir)?;
        self.symlink(dir.join("subsystem"), "class/infiniband")?;
        match spec.parent {
            IbParentSpec::Device(p) => self.symlink(dir.join("device"), p)?,
            IbParentSpec::Netdev(n) => self.write_attr(dir.join("parent"), n)?,
        }
        self.write_attr(dir.join("node_type"), spec.node_type)?;
        self.write_attr(dir.join("node_guid"), spec.node_guid)?;
        self.write_attr(dir.join("sys_image_guid"), spec.sys_image_guid)?;
        self.write_attr(dir.join("fw_ver"), spec.fw_ver)?;
        for port in spec.ports {
            let pd = dir.join("ports").join(port.index.to_string());
            for (attr, value) in [
                ("state", port.state),
                ("phys_state", port.phys_state),
                ("link_layer", port.link_layer),
                ("rate", port.rate),
                ("lid", port.lid),
                ("sm_lid", "0x0"),
                ("lid_mask_count", "0"),
                ("sm_sl", "0"),
                ("cap_mask", "0x00010000"),
            ] {
                self.write_attr(pd.join(attr), value)?;
            }
            fs::create_dir_all(self.dir.join(pd.join("gid_attrs/types")))?;
            fs::create_dir_all(self.dir.join(pd.join("gid_attrs/ndevs")))?;
            for i in 0..port.gid_tbl_len {
                match port.gids.iter().find(|g| g.index == i) {
                    Some(g) => {
                        self.write_attr(pd.join("gids").join(i.to_string()), g.gid)?;
                        self.write_attr(
                            pd.join("gid_attrs/types").join(i.to_string()),
                            g.gid_type,
                        )?;
                        if let Some(n) = g.ndev {
                            self.write_attr(pd.join("gid_attrs/ndevs").join(i.to_string()), n)?;
                        }
                    }
                    None => self.write_attr(
                        pd.join("gids").join(i.to_string()),
                        "0000:0000:0000:0000:0000:0000:0000:0000",
                    )?,
                }
            }
            for (i, pkey) in port.pkeys.iter().enumerate() {
                self.write_attr(pd.join("pkeys").join(i.to_string()), pkey)?;
            }
        }
        Ok(dir)
    }

    /// Adds a uverbs/umad/issm device and its class link.
    pub fn add_char_dev(&self, spec: &CharDevSpec<'_>) -> io::Result<()> {
        let class = match spec.kind {
            CharDevKind::Uverbs => "infiniband_verbs",
            CharDevKind::Umad | CharDevKind::Issm => "infiniband_mad",
            CharDevKind::RdmaCm => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "rdma_cm is added with add_rdma_cm",
                ))
            }
        };
        let dir = match spec.parent {
            Some(p) => p.join(class).join(spec.name),
            None => Path::new("devices/virtual").join(class).join(spec.name),
        };
        fs::create_dir_all(self.dir.join(&dir))?;
        self.symlink(Path::new("class").join(class).join(spec.name), &dir)?;
        self.symlink(dir.join("subsystem"), Path::new("class").join(class))?;
        if let Some(p) = spec.parent {
            self.symlink(dir.join("device"), p)?;
        }
        self.write_attr(dir.join("ibdev"), spec.ibdev)?;
        self.write_attr(dir.join("dev"), &format!("{}:{}", spec.major, spec.minor))?;
        if let Some(port) = spec.port {
            self.write_attr(dir.join("port"), &port.to_string())?;
        }
        if let Some(abi) = spec.abi_version {
            self.write_attr(dir.join("abi_version"), &abi.to_string())?;
        }
        Ok(())
    }

    /// Adds the rdma_ucm misc device (`10:124` on the 6.1 VM; the minor is dynamic).
    pub fn add_rdma_cm(&self) -> io::Result<()> {
        let dir = Path::new("devices/virtual/misc/rdma_cm");
        if self.dir.join(dir).exists() {
            return Ok(());
        }
        fs::create_dir_all(self.dir.join(dir))?;
        self.symlink("class/misc/rdma_cm", dir)?;
        self.write_attr(dir.join("dev"), "10:124")?;
        self.write_attr(dir.join("abi_version"), "4")
    }

    /// A big node: `pfs` RoCE PFs (`0000:<10+i>:00.0`, netdev `enp<i>f0np0`, ib device
    /// `mlx5_<i*(vfs+1)>`), each with `vfs` VFs that have their own netdev and ib device, as
    /// 8 ConnectX PFs with 64 VFs each show; every port ACTIVE. No char devices: the inventory
    /// does not need them.
    pub fn roce_pfs_with_vfs(&self, pfs: u32, vfs: u32) -> io::Result<()> {
        let mut ib = 0;
        for i in 0..pfs {
            let bus = 0x10 + i;
            let upstream = format!("pci0000:{bus:02x}/0000:{bus:02x}:00.0");
            let pf_bdf = format!("0000:{:02x}:00.0", bus + 1);
            let pf = self.add_pci_function(&PciSpec::vf(&pf_bdf, &upstream, "mlx5_core"))?;
            let mut vf_dirs = Vec::new();
            for j in 0..=vfs {
                let (dir, name) = match j {
                    0 => (pf.clone(), format!("enp{i}f0np0")),
                    _ => {
                        let bdf = format!("0000:{:02x}:{:02x}.{}", bus + 1, j / 8, j % 8);
                        let vf =
                            self.add_pci_function(&PciSpec::vf(&bdf, &upstream, "mlx5_core"))?;
                        vf_dirs.push(vf.clone());
                        (vf, format!("enp{i}f0v{}", j - 1))
                    }
                };
                let mac = format!("0c:42:a1:{:02x}:{:02x}:{:02x}", i, j >> 8, j & 0xff);
                self.add_netdev(&NetdevSpec::ethernet(&name, 100 + ib, Some(&dir), &mac))?;
                self.add_ib_device(&IbDeviceSpec {
                    name: &format!("mlx5_{ib}"),
                    parent: IbParentSpec::Device(&dir),
                    node_type: "1: CA",
                    node_guid: &format!("0c42:a103:00{i:02x}:{j:04x}"),
                    sys_image_guid: "0c42:a103:0000:0000",
                    fw_ver: "28.39.1002",
                    ports: &[PortSpec::active("Ethernet", "200 Gb/sec (4X HDR)", 4, &[])],
                })?;
                ib += 1;
            }
            let refs: Vec<&Path> = vf_dirs.iter().map(PathBuf::as_path).collect();
            self.add_sriov(&pf, vfs, &refs)?;
        }
        Ok(())
    }

    /// (a) ConnectX RoCE PF `0000:3b:00.0` with two VFs.
    pub fn mlx5_roce_pf_with_vfs(&self) -> io::Result<()> {
        let (pf, vf0) = self.add_roce_pf_and_vfs()?;
        self.add_netdev(&NetdevSpec {
            extra: &[("phys_port_name", "p0")],
            ..NetdevSpec::ethernet("ens1f0np0", 4, Some(&pf), "0c:42:a1:3b:00:00")
        })?;
        self.add_netdev(&NetdevSpec::ethernet(
            "ens1f0v0",
            6,
            Some(&vf0),
            "0c:42:a1:3b:00:02",
        ))?;
        // A VLAN on the PF: virtual, but mlx5 RoCE adds GIDs for its addresses.
        self.add_netdev(&NetdevSpec::ethernet(
            "ens1f0np0.100",
            7,
            None,
            "0c:42:a1:3b:00:00",
        ))?;
        self.add_roce_pf_ib_devices(&pf, &vf0)?;
        // Numbers deliberately differ from the ib device numbers: mlx5_2 gets uverbs1.
        self.add_ib_char_devs("mlx5_0", Some(&pf), 0, Some(1))?;
        self.add_ib_char_devs("mlx5_2", Some(&vf0), 1, Some(1))?;
        self.add_rdma_cm()
    }

    /// The PCI functions of preset (a): the PF and its VFs `0000:3b:00.2` (mlx5_core) and
    /// `0000:3b:00.3` (vfio-pci); returns the PF's and the first VF's directories.
    fn add_roce_pf_and_vfs(&self) -> io::Result<(PathBuf, PathBuf)> {
        let upstream = "pci0000:3a/0000:3a:00.0";
        let pf = self.add_pci_function(&PciSpec {
            bdf: "0000:3b:00.0",
            upstream,
            numa_node: 0,
            // A x16 Gen4 card trained at Gen3 x8: the case `link_degraded` reports.
            current_link: ("8.0 GT/s PCIe", 8),
            max_link: ("16.0 GT/s PCIe", 16),
            driver: Some("mlx5_core"),
        })?;
        let vf0 = self.add_pci_function(&PciSpec::vf("0000:3b:00.2", upstream, "mlx5_core"))?;
        let vf1 = self.add_pci_function(&PciSpec::vf("0000:3b:00.3", upstream, "vfio-pci"))?;
        self.add_sriov(&pf, 8, &[&vf0, &vf1])?;
        Ok((pf, vf0))
    }

    /// The ib devices of preset (a): `mlx5_0` on the PF, with GIDs for the PF's link-local,
    /// IPv4 and IPv6 addresses and the VLAN's, each as RoCE v1 and v2, and `mlx5_2` on the VF.
    fn add_roce_pf_ib_devices(&self, pf: &Path, vf0: &Path) -> io::Result<()> {
        let ll = "fe80:0000:0000:0000:0e42:a1ff:fe3b:0000";
        let v4 = "0000:0000:0000:0000:0000:ffff:0a3b:0005"; // 10.59.0.5
        let v6 = "2001:0db8:0000:0000:0000:0000:0000:0005";
        let vlan_v4 = "0000:0000:0000:0000:0000:ffff:0a64:0005"; // 10.100.0.5
        let pf_gids = [
            gid(0, ll, V1, Some("ens1f0np0")),
            gid(1, ll, V2, Some("ens1f0np0")),
            gid(2, v4, V1, Some("ens1f0np0")),
            gid(3, v4, V2, Some("ens1f0np0")),
            gid(4, v6, V1, Some("ens1f0np0")),
            gid(5, v6, V2, Some("ens1f0np0")),
            gid(6, ll, V1, Some("ens1f0np0.100")),
            gid(7, ll, V2, Some("ens1f0np0.100")),
            gid(8, vlan_v4, V1, Some("ens1f0np0.100")),
            gid(9, vlan_v4, V2, Some("ens1f0np0.100")),
        ];
        self.add_ib_device(&IbDeviceSpec {
            name: "mlx5_0",
            parent: IbParentSpec::Device(pf),
            node_type: "1: CA",
            // mlx5 derives the GUID from the MAC with 03:00 inserted in the middle
            // (MAC 24:8a:07:49:ae:e0 ↔ GUID 248a:0703:0049:aee0 in the notes).
            node_guid: "0c42:a103:003b:0000",
            sys_image_guid: "0c42:a103:003b:0000",
            fw_ver: "16.35.2000",
            ports: &[PortSpec::active(
                "Ethernet",
                "100 Gb/sec (4X EDR)",
                16,
                &pf_gids,
            )],
        })?;
        let vf_ll = "fe80:0000:0000:0000:0e42:a1ff:fe3b:0002";
        self.add_ib_device(&IbDeviceSpec {
            name: "mlx5_2",
            parent: IbParentSpec::Device(vf0),
            node_type: "1: CA",
            node_guid: "0c42:a103:003b:0002",
            sys_image_guid: "0c42:a103:003b:0000",
            fw_ver: "16.35.2000",
            ports: &[PortSpec::active(
                "Ethernet",
                "100 Gb/sec (4X EDR)",
                8,
                &[
                    gid(0, vf_ll, V1, Some("ens1f0v0")),
                    gid(1, vf_ll, V2, Some("ens1f0v0")),
                ],
            )],
        })?;
        Ok(())
    }

    /// (b) ConnectX IB port with its IPoIB netdev. The ib device and the netdev are both
    /// `ibp94s0` (rdma-core's NAME_FALLBACK and systemd's predictable names agree), which
    /// catches any mix-up of the two namespaces.
    pub fn mlx5_ib_ipoib(&self) -> io::Result<()> {
        let pf = self.add_pci_function(&PciSpec {
            bdf: "0000:5e:00.0",
            upstream: "pci0000:5d/0000:5d:00.0",
            numa_node: 1,
            current_link: ("16.0 GT/s PCIe", 16),
            max_link: ("16.0 GT/s PCIe", 16),
            driver: Some("mlx5_core"),
        })?;
        // IPoIB parent: type ARPHRD_INFINIBAND, INFINIBAND_ALEN 20 bytes = flags/QPN + port
        // GID; dev_port = port − 1 and dev_id printed with %#x, so 0 reads `0`
        // (ipoib_main.c `ipoib_parent_init`, `dev_id_show`).
        self.add_netdev(&NetdevSpec {
            name: "ibp94s0",
            ifindex: 5,
            parent: Some(&pf),
            link_type: 32,
            address: "00:00:10:29:fe:80:00:00:00:00:00:00:04:3f:72:03:00:da:21:30",
            dev_port: 0,
            dev_id: "0",
            mtu: 4092,
            extra: &[("mode", "datagram"), ("pkey", "0xffff"), ("umcast", "0")],
        })?;
        self.add_ib_device(&IbDeviceSpec {
            name: "ibp94s0",
            parent: IbParentSpec::Device(&pf),
            node_type: "1: CA",
            node_guid: "043f:7203:00da:2130",
            sys_image_guid: "043f:7203:00da:2130",
            fw_ver: "20.39.1002",
            ports: &[PortSpec {
                lid: "0x1a",
                // IB GIDs have no netdev: `ndevs/0` answers EINVAL, so it is left out.
                ..PortSpec::active(
                    "InfiniBand",
                    "100 Gb/sec (4X EDR)",
                    8,
                    &[gid(0, "fe80:0000:0000:0000:043f:7203:00da:2130", V1, None)],
                )
            }],
        })?;
        self.add_ib_char_devs("ibp94s0", Some(&pf), 2, Some(1))?;
        self.add_rdma_cm()
    }

    /// (c) mlx5 SF `mlx5_core.sf.4` (sfnum 88) on the auxiliary bus under `0000:06:00.0`.
    pub fn mlx5_sf(&self) -> io::Result<()> {
        let pf = self.add_pci_function(&PciSpec {
            bdf: "0000:06:00.0",
            upstream: "pci0000:00/0000:00:03.0",
            numa_node: 0,
            current_link: ("8.0 GT/s PCIe", 16),
            max_link: ("8.0 GT/s PCIe", 16),
            driver: Some("mlx5_core"),
        })?;
        self.add_netdev(&NetdevSpec {
            extra: &[("phys_port_name", "p0")],
            ..NetdevSpec::ethernet("enp6s0f0np0", 8, Some(&pf), "0c:42:a1:06:00:00")
        })?;
        // Every mlx5 PCI function also carries eth/rdma aux devices (core/dev.c
        // `mlx5_adev_devices`); netdevs and ib devices do not hang under them.
        self.add_aux_device(&pf, "mlx5_core.eth.2", None)?;
        self.add_aux_device(&pf, "mlx5_core.rdma.2", None)?;
        let sf = self.add_aux_device(&pf, "mlx5_core.sf.4", Some(88))?;
        self.add_netdev(&NetdevSpec::ethernet(
            "enp6s0f0s88",
            9,
            Some(&sf),
            "7e:3c:5e:00:00:58",
        ))?;
        let ll = "fe80:0000:0000:0000:7c3c:5eff:fe00:0058";
        self.add_ib_device(&IbDeviceSpec {
            name: "mlx5_3",
            parent: IbParentSpec::Device(&sf),
            node_type: "1: CA",
            node_guid: "7e3c:5e03:0000:0058",
            sys_image_guid: "0c42:a103:0006:0000",
            fw_ver: "22.36.1010",
            ports: &[PortSpec::active(
                "Ethernet",
                "25 Gb/sec (1X EDR)",
                8,
                &[
                    gid(0, ll, V1, Some("enp6s0f0s88")),
                    gid(1, ll, V2, Some("enp6s0f0s88")),
                ],
            )],
        })?;
        self.add_ib_char_devs("mlx5_3", Some(&sf), 3, Some(1))?;
        self.add_rdma_cm()
    }

    /// (d) `rdma link add rxe0 type rxe netdev v0` over a veth pair, with the values a 6.1
    /// kernel showed after `ip addr add 10.9.0.5/24 dev v0` (the real table has 1024 entries,
    /// RXE_PORT_GID_TBL_LEN).
    pub fn rxe_over_veth(&self) -> io::Result<()> {
        for (name, ifindex, address) in [
            ("v1", 2, "ee:3a:4b:5c:6d:7e"),
            ("v0", 3, "2a:61:d6:59:e6:10"),
        ] {
            self.add_netdev(&NetdevSpec::ethernet(name, ifindex, None, address))?;
        }
        self.add_rxe(
            "rxe0",
            "v0",
            &[
                gid(0, "fe80:0000:0000:0000:2861:d6ff:fe59:e610", V2, Some("v0")),
                gid(1, "0000:0000:0000:0000:0000:ffff:0a09:0005", V2, Some("v0")),
            ],
            4,
        )?;
        self.add_rdma_cm()
    }

    /// A Soft-RoCE device `name` over `netdev` (`parent`, one RoCE v2 port with a 16-entry
    /// table holding `gids`), with uverbsN, umadN and issmN numbered `n`.
    pub fn add_rxe(
        &self,
        name: &str,
        netdev: &str,
        gids: &[GidSpec<'_>],
        n: u32,
    ) -> io::Result<()> {
        self.add_ib_device(&IbDeviceSpec {
            name,
            parent: IbParentSpec::Netdev(netdev),
            node_type: "1: CA",
            node_guid: "2861:d6ff:fe59:e610",
            sys_image_guid: "2861:d6ff:fe59:e610",
            fw_ver: "",
            ports: &[PortSpec::active(
                "Ethernet",
                "10 Gb/sec (1X FDR10)",
                16,
                gids,
            )],
        })?;
        self.add_ib_char_devs(name, None, n, Some(2))
    }

    /// uverbsN, umadN and issmN for a one-port ib device, numbered `n` with the fixed
    /// minors of the first 32/64 devices (uverbs 192+N, umad N, issm 64+N, major 231).
    fn add_ib_char_devs(
        &self,
        ibdev: &str,
        parent: Option<&Path>,
        n: u32,
        uverbs_abi: Option<u32>,
    ) -> io::Result<()> {
        for (kind, minor, port, abi) in [
            (CharDevKind::Uverbs, 192 + n, None, uverbs_abi),
            (CharDevKind::Umad, n, Some(1), None),
            (CharDevKind::Issm, 64 + n, Some(1), None),
        ] {
            self.add_char_dev(&CharDevSpec {
                kind,
                name: &format!("{}{n}", kind.prefix()),
                ibdev,
                port,
                parent,
                major: 231,
                minor,
                abi_version: abi,
            })?;
        }
        Ok(())
    }
}

impl Drop for SysfsFixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

const V1: &str = "IB/RoCE v1";
const V2: &str = "RoCE v2";

fn gid<'a>(index: u32, gid: &'a str, gid_type: &'a str, ndev: Option<&'a str>) -> GidSpec<'a> {
    GidSpec {
        index,
        gid,
        gid_type,
        ndev,
    }
}

/// The path from `link`'s directory to `target`, both relative to the tree's root and free of
/// `..`, computed the way kernfs does (fs/kernfs/symlink.c `kernfs_get_target_path`): climb
/// with `../` until reaching an ancestor of the target's *parent*, then descend. So a link to
/// an ancestor still ends in its name (`net/eth0/device -> ../../../0000:3b:00.0`, never
/// `../..`), and the last component of any link target names the device.
fn relative_target(link: &Path, target: &Path) -> PathBuf {
    let from: Vec<Component<'_>> = link
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    let to: Vec<Component<'_>> = target.components().collect();
    let target_parent = &to[..to.len().saturating_sub(1)];
    let common = from
        .iter()
        .zip(target_parent)
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c.as_os_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_targets_climb_to_the_common_prefix() {
        assert_eq!(
            relative_target(
                Path::new("class/net/eth0"),
                Path::new("devices/pci0/x/net/eth0")
            ),
            Path::new("../../devices/pci0/x/net/eth0")
        );
        assert_eq!(
            relative_target(
                Path::new("devices/p/0000:3b:00.0/virtfn0"),
                Path::new("devices/p/0000:3b:00.2")
            ),
            Path::new("../0000:3b:00.2")
        );
        assert_eq!(
            relative_target(
                Path::new("devices/p/0000:3b:00.0/net/eth0/device"),
                Path::new("devices/p/0000:3b:00.0")
            ),
            Path::new("../../../0000:3b:00.0")
        );
        assert_eq!(
            relative_target(
                Path::new("devices/p/0000:3b:00.0/infiniband/mlx5_0/device"),
                Path::new("devices/p/0000:3b:00.0")
            ),
            Path::new("../../../0000:3b:00.0")
        );
    }

    #[test]
    fn every_symlink_in_the_full_tree_is_relative_and_resolves() {
        let fx = SysfsFixture::all().unwrap();
        let mut checked = 0;
        let mut stack = vec![fx.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                let ft = entry.file_type().unwrap();
                if ft.is_symlink() {
                    let target = fs::read_link(entry.path()).unwrap();
                    assert!(target.is_relative(), "{:?} -> {target:?}", entry.path());
                    let real = fs::canonicalize(entry.path())
                        .unwrap_or_else(|e| panic!("dangling {:?}: {e}", entry.path()));
                    assert_eq!(
                        target.file_name(),
                        real.file_name(),
                        "{:?} -> {target:?}",
                        entry.path()
                    );
                    checked += 1;
                } else if ft.is_dir() {
                    stack.push(entry.path());
                }
            }
        }
        assert!(checked > 50, "only {checked} links");
    }
}
