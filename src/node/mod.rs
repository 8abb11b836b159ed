//! The node side of rdma-ns: `doctor` checks ([`doctor`]), Node Feature Discovery labels
//! ([`nfd`]) and Prometheus metrics ([`metrics`]), all read-only views of what the plugin
//! already reads (sysfs topology, the netns mode, attachment records, confs).
//!
//! Everything the kernel is asked goes through a [`Node`] (where to look) and a [`NetView`]
//! (the two facts sysfs does not give: a netdev's addresses, and the netns mode when
//! `ib_core`'s parameter file is missing), so tests run every check on fixture trees.

pub mod confs;
pub mod doctor;
pub mod metrics;
pub mod nfd;
pub mod values;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::kernel::dcbnl::DcbIeee;
use crate::kernel::ethtool::Pause;
use crate::kernel::nldev::NetnsMode;
use crate::kernel::sysfs::SysRoot;

/// Where the node's state is read from.
#[derive(Debug, Clone)]
pub struct Node {
    pub sys: SysRoot,
    /// `/dev/infiniband`.
    pub dev_dir: PathBuf,
    /// `/proc`: the container runtime's limits.
    pub proc_dir: PathBuf,
    /// `modules.builtin` of the running kernel: a built-in module without parameters has no
    /// `/sys/module` entry, so this list is the only way to tell it is there.
    pub modules_builtin: Option<PathBuf>,
    /// Attachment record directories (the default and every conf's `dataDir`).
    pub data_dirs: Vec<PathBuf>,
}

impl Node {
    /// The running system: /sys, /dev/infiniband, /proc and this kernel's modules.builtin.
    pub fn system() -> Node {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| r.trim().to_string())
            .unwrap_or_default();
        Node {
            sys: SysRoot::default(),
            dev_dir: PathBuf::from("/dev/infiniband"),
            proc_dir: PathBuf::from("/proc"),
            modules_builtin: (!release.is_empty()).then(|| {
                Path::new("/lib/modules")
                    .join(release)
                    .join("modules.builtin")
            }),
            data_dirs: vec![PathBuf::from(crate::attach::store::DEFAULT_DATA_DIR)],
        }
    }

    /// Whether a kernel module is loaded or built in.
    pub fn module_present(&self, name: &str) -> bool {
        if self.sys.device_exists(Path::new("module").join(name)) {
            return true;
        }
        let Some(list) = &self.modules_builtin else {
            return false;
        };
        let Ok(text) = std::fs::read_to_string(list) else {
            return false;
        };
        // Lines are paths such as `kernel/drivers/infiniband/core/ib_uverbs.ko`; modules.builtin
        // spells `-` as in the file name, /sys/module always with `_`.
        text.lines().any(|l| {
            l.rsplit('/')
                .next()
                .and_then(|f| f.strip_suffix(".ko"))
                .is_some_and(|m| m.replace('-', "_") == name)
        })
    }

    /// The RDMA netns mode from `ib_core`'s `netns_mode` parameter, which the kernel keeps
    /// current (`rdma system set netns` writes the same variable, K:drivers/infiniband/core/
    /// device.c `rdma_compatdev_set`); None when the file is missing.
    pub fn netns_mode_from_sysfs(&self) -> Option<NetnsMode> {
        match self
            .sys
            .read_attr("module/ib_core/parameters/netns_mode")
            .ok()?
            .as_str()
        {
            "Y" | "1" => Some(NetnsMode::Shared),
            "N" | "0" => Some(NetnsMode::Exclusive),
            _ => None,
        }
    }
}

/// What sysfs cannot tell: a netdev's IP addresses, an altname's netdev, and the netns mode
/// over RDMA netlink (for a kernel without the parameter file).
pub trait NetView {
    /// The netdev's addresses; Err names why they could not be read.
    fn addresses(&self, ifname: &str) -> Result<Vec<IpAddr>, String>;
    /// The netdev's name when `name` is one of its altnames; None when no netdev has it.
    fn resolve_name(&self, name: &str) -> Option<String>;
    fn netns_mode(&self) -> Result<NetnsMode, String>;
    /// The netdev's IEEE DCB configuration (DCB netlink); None when its driver has no DCB.
    fn dcb(&self, ifname: &str) -> Result<Option<DcbIeee>, String>;
    /// The netdev's global pause settings; None when its driver has none.
    fn pause(&self, ifname: &str) -> Result<Option<Pause>, String>;
}

/// The kernel, through rtnetlink and RDMA netlink; sockets are opened on first use (neither
/// needs privileges for these reads).
#[derive(Default)]
pub struct KernelView {
    route: std::cell::OnceCell<Result<crate::kernel::rtnetlink::RealKernel, String>>,
}

impl KernelView {
    fn route(&self) -> Result<&crate::kernel::rtnetlink::RealKernel, String> {
        self.route
            .get_or_init(|| {
                crate::kernel::rtnetlink::RealKernel::new()
                    .map_err(|e| format!("cannot open an rtnetlink socket: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl NetView for KernelView {
    fn addresses(&self, ifname: &str) -> Result<Vec<IpAddr>, String> {
        use crate::kernel::rtnetlink::NetOps;
        use crate::kernel::Ns;
        let k = self.route()?;
        let link = k
            .link_by_name(Ns::Host, ifname)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no netdev {ifname}"))?;
        Ok(k.addresses(Ns::Host, link.index)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|a| a.ip())
            .collect())
    }

    fn resolve_name(&self, name: &str) -> Option<String> {
        use crate::kernel::rtnetlink::NetOps;
        use crate::kernel::Ns;
        self.route()
            .ok()?
            .link_by_name(Ns::Host, name)
            .ok()
            .flatten()
            .map(|l| l.name)
    }

    fn netns_mode(&self) -> Result<NetnsMode, String> {
        crate::kernel::rdma_ops::RdmaNetlink::open()
            .and_then(|nl| nl.get_netns_mode())
            .map_err(|e| e.to_string())
    }

    fn dcb(&self, ifname: &str) -> Result<Option<DcbIeee>, String> {
        use crate::kernel::netlink::{NlSocket, Route};
        let mut sock = NlSocket::<Route>::open()
            .map_err(|e| format!("cannot open an rtnetlink socket: {e}"))?;
        crate::kernel::dcbnl::query(&mut sock, ifname).map_err(|e| {
            crate::kernel::KernelError::netlink(
                "read the IEEE DCB configuration",
                ifname,
                crate::kernel::Ns::Host,
                e,
            )
            .to_string()
        })
    }

    fn pause(&self, ifname: &str) -> Result<Option<Pause>, String> {
        crate::kernel::ethtool::pause(ifname).map_err(|e| format!("{ifname}: pause settings: {e}"))
    }
}
