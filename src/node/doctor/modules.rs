//! `modules`: the RDMA core modules, and the RDMA driver of every NIC function that has one.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Report, Severity};
use crate::kernel::topology::{IbDevice, IbParent};
use crate::node::Node;

/// The RDMA core modules, how bad their absence is, and what they provide.
const CORE_MODULES: [(&str, Severity, &str); 4] = [
    (
        "ib_core",
        Severity::Fail,
        "the RDMA core: no ib device and no RDMA netlink without it",
    ),
    (
        "ib_uverbs",
        Severity::Fail,
        "verbs from user space (/dev/infiniband/uverbsN): no RDMA application runs without it",
    ),
    (
        "rdma_ucm",
        Severity::Warn,
        "the RDMA connection manager from user space (/dev/infiniband/rdma_cm), used by UCX, \
         MPI and perftest -R",
    ),
    (
        "ib_umad",
        Severity::Warn,
        "management datagrams from user space (/dev/infiniband/umadN), used by ibstat, \
         ibdiagnet and opensm",
    ),
];

/// PCI drivers of RDMA-capable NICs and the module that gives their functions ib devices.
const RDMA_DRIVERS: [(&str, &str); 7] = [
    ("mlx5_core", "mlx5_ib"),
    ("mlx4_core", "mlx4_ib"),
    ("bnxt_en", "bnxt_re"),
    ("ice", "irdma"),
    ("i40e", "irdma"),
    ("qede", "qedr"),
    ("cxgb4", "iw_cxgb4"),
];

/// How to load a module now and at every boot.
pub(super) fn load_fix(module: &str) -> String {
    format!(
        "modprobe {module}; to load it at every boot: echo {module} >> \
         /etc/modules-load.d/rdma.conf"
    )
}

/// The PCI functions bound to a NIC driver whose RDMA module is `module`.
#[derive(Default)]
struct DriverFunctions {
    /// Functions with an ib device (their own, or one of an SF on them).
    with_ib: Vec<String>,
    /// `<bdf> (<driver>)` of the functions without one.
    without_ib: Vec<String>,
}

pub(super) struct ModulesCheck<'a> {
    pub(super) node: &'a Node,
    pub(super) devices: &'a [IbDevice],
}

impl ModulesCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        self.core(r);
        for (module, functions) in self.nic_functions() {
            self.nic_driver(module, &functions, r);
        }
        self.software(r);
    }

    fn core(&self, r: &mut Report) {
        for (module, severity, what) in CORE_MODULES {
            if self.node.module_present(module) {
                r.push("modules", Severity::Ok, module, "loaded", None);
            } else {
                r.push(
                    "modules",
                    severity,
                    module,
                    format!("not loaded ({what})"),
                    Some(load_fix(module)),
                );
            }
        }
    }

    /// The NIC functions by the RDMA module their driver needs: a function bound to mlx5_core
    /// without mlx5_ib loaded has no ib device.
    fn nic_functions(&self) -> BTreeMap<&'static str, DriverFunctions> {
        let mut by_module: BTreeMap<&'static str, DriverFunctions> = BTreeMap::new();
        let functions = self
            .node
            .sys
            .list_dir("bus/pci/devices")
            .unwrap_or_default();
        for bdf in &functions {
            let Ok(target) = std::fs::read_link(
                self.node
                    .sys
                    .path(Path::new("bus/pci/devices").join(bdf).join("driver")),
            ) else {
                continue;
            };
            let driver = target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some((_, module)) = RDMA_DRIVERS.iter().find(|(d, _)| *d == driver) else {
                continue;
            };
            let has_ib = self
                .devices
                .iter()
                .any(|d| d.pci_bdf() == Some(bdf.as_str()));
            let e = by_module.entry(module).or_default();
            if has_ib {
                e.with_ib.push(bdf.clone());
            } else {
                e.without_ib.push(format!("{bdf} ({driver})"));
            }
        }
        by_module
    }

    fn nic_driver(&self, module: &str, functions: &DriverFunctions, r: &mut Report) {
        let DriverFunctions {
            with_ib,
            without_ib,
        } = functions;
        let vendor = module.trim_end_matches("_ib");
        if !self.node.module_present(module) {
            // mlx5 is what RDMA clusters run; other vendors' NICs often carry no RDMA on
            // purpose.
            let severity = if module == "mlx5_ib" {
                Severity::Fail
            } else {
                Severity::Warn
            };
            r.push(
                "modules",
                severity,
                module,
                format!("not loaded, so {} have no ib device", without_ib.join(", ")),
                Some(format!(
                    "{}; if it fails, dmesg | grep -i {vendor} tells why",
                    load_fix(module)
                )),
            );
        } else if !without_ib.is_empty() {
            r.push(
                "modules",
                Severity::Warn,
                module,
                format!(
                    "loaded, but {} have no ib device (RoCE disabled on the function?)",
                    without_ib.join(", ")
                ),
                Some(format!(
                    "devlink dev param show pci/{} name enable_roce; dmesg | grep -i {vendor}",
                    without_ib[0].split(' ').next().unwrap_or_default()
                )),
            );
        } else {
            r.push(
                "modules",
                Severity::Ok,
                module,
                format!("loaded; ib devices on {}", with_ib.join(", ")),
                None,
            );
        }
    }

    /// Software RDMA devices (rxe, siw) hang off a netdev, not a bus device.
    fn software(&self, r: &mut Report) {
        let soft: Vec<&str> = self
            .devices
            .iter()
            .filter(|d| matches!(d.parent, IbParent::Netdev(_)))
            .map(|d| d.name.as_str())
            .collect();
        if soft.is_empty() {
            return;
        }
        let module = ["rdma_rxe", "siw"]
            .into_iter()
            .find(|m| self.node.module_present(m))
            .unwrap_or("rdma_rxe");
        r.push(
            "modules",
            Severity::Ok,
            module,
            format!("software RDMA devices: {}", soft.join(", ")),
            None,
        );
    }
}
