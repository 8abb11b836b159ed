//! `rdma-ns doctor`: the field guide's troubleshooting routine as checks. Each check yields
//! findings (OK / WARN / FAIL) that name the object, the value found, what was expected and
//! the command that fixes it, so an operator can act without reading code.
//!
//! Nothing here changes the node: files are read, netlink is only asked (GET requests), and in
//! `--pod` mode uverbs nodes are opened and closed again to see whether the pod may use them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use serde::Serialize;

use super::confs::{ConfError, RdmaNetwork};
use super::{NetView, Node};
use crate::attach::modes::ipoib::IpoibModeConf;
use crate::attach::modes::Mode;
use crate::attach::record::Attachment;
use crate::attach::store::Store;
use crate::kernel::nldev::NetnsMode;
use crate::kernel::topology::{
    BusDevice, CharDev, CharDevKind, GidType, IbDevice, IbParent, LinkLayer, NumberedState,
    PciFunction, PcieLink, RdmaSysfs,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Severity {
    #[serde(rename = "OK")]
    Ok,
    #[serde(rename = "WARN")]
    Warn,
    #[serde(rename = "FAIL")]
    Fail,
}

impl Severity {
    /// The exit code of a run whose worst finding is this: 0, 1, 2 (usable as a probe).
    pub fn exit_code(self) -> u8 {
        match self {
            Severity::Ok => 0,
            Severity::Warn => 1,
            Severity::Fail => 2,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Ok => "OK",
            Severity::Warn => "WARN",
            Severity::Fail => "FAIL",
        })
    }
}

/// One finding: `object` names what was looked at (a module, `mlx5_0/1`, a PCI address, a
/// network, a file), `finding` what was found against what was expected, `fix` what to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: &'static str,
    #[serde(rename = "status")]
    pub severity: Severity,
    pub object: String,
    pub finding: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// What the labels for Node Feature Discovery are made of, gathered while checking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub ib_devices: usize,
    pub active_ports: usize,
    pub link_layers: BTreeSet<String>,
    pub netns_mode: Option<NetnsMode>,
    /// The fastest ACTIVE port, in Mb/s.
    pub max_rate_mbps: Option<u64>,
    pub pcie_degraded: bool,
    /// Some IPoIB netdev can run connected mode (address byte 0 has the RC flag).
    pub ipoib_connected: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub facts: Facts,
}

impl Report {
    pub fn worst(&self) -> Severity {
        self.findings
            .iter()
            .map(|f| f.severity)
            .max()
            .unwrap_or(Severity::Ok)
    }

    pub fn count(&self, s: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == s).count()
    }

    fn push(
        &mut self,
        check: &'static str,
        severity: Severity,
        object: impl Into<String>,
        finding: impl Into<String>,
        fix: Option<String>,
    ) {
        self.findings.push(Finding {
            check,
            severity,
            object: object.into(),
            finding: finding.into(),
            fix,
        });
    }
}

/// What to check besides the node itself.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Running inside a pod: the pod's view (its sysfs, its /dev/infiniband, its own limits);
    /// node-wide checks (confs, records, the runtime's limits) are left out.
    pub pod: bool,
    pub networks: Vec<RdmaNetwork>,
    pub conf_errors: Vec<ConfError>,
}

/// Runs every check.
pub fn run(node: &Node, net: &dyn NetView, opts: &Options) -> Report {
    let mut r = Report::default();
    let topo = RdmaSysfs::new(&node.sys);
    let devices = match topo.devices() {
        Ok(d) => d,
        Err(e) => {
            r.push(
                "devices",
                Severity::Fail,
                node.sys.path("class/infiniband").display().to_string(),
                format!("cannot read the RDMA topology: {e}"),
                Some("run the doctor where /sys is the host's (or the pod's) sysfs".into()),
            );
            Vec::new()
        }
    };
    r.facts.ib_devices = devices.len();
    check_modules(node, &devices, &mut r);
    let mode = check_netns_mode(node, net, opts, &mut r);
    check_devices(&devices, mode, opts, &mut r);
    check_ports(node, &devices, &mut r);
    check_pcie(node, &devices, &mut r);
    if !opts.pod {
        check_confs(node, net, &devices, opts, &mut r);
    }
    check_ipoib(node, opts, &mut r);
    check_roce(node, net, &devices, &mut r);
    let records = if opts.pod {
        Vec::new()
    } else {
        check_data_dirs(node, &mut r)
    };
    check_char_devices(node, &devices, opts, &records, &mut r);
    check_memlock(node, opts, &mut r);
    r
}

// ---------------------------------------------------------------- modules

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

fn load_fix(module: &str) -> String {
    format!(
        "modprobe {module}; to load it at every boot: echo {module} >> \
         /etc/modules-load.d/rdma.conf"
    )
}

fn check_modules(node: &Node, devices: &[IbDevice], r: &mut Report) {
    for (module, severity, what) in CORE_MODULES {
        if node.module_present(module) {
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
    // The NIC drivers: a function bound to mlx5_core without mlx5_ib loaded has no ib device.
    let mut by_module: BTreeMap<&str, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let functions = node.sys.list_dir("bus/pci/devices").unwrap_or_default();
    for bdf in &functions {
        let Ok(target) = std::fs::read_link(
            node.sys
                .path(Path::new("bus/pci/devices").join(bdf).join("driver")),
        ) else {
            continue;
        };
        let driver = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some((_, module)) = RDMA_DRIVERS.iter().find(|(d, _)| *d == driver) {
            // Its own ib device, or one of an SF on it.
            let has_ib = devices.iter().any(|d| d.pci_bdf() == Some(bdf.as_str()));
            let e = by_module.entry(module).or_default();
            if has_ib {
                e.0.push(bdf.clone());
            } else {
                e.1.push(format!("{bdf} ({driver})"));
            }
        }
    }
    for (module, (with_ib, without_ib)) in by_module {
        if !node.module_present(module) {
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
                    "{}; if it fails, dmesg | grep -i {} tells why",
                    load_fix(module),
                    module.trim_end_matches("_ib")
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
                    "devlink dev param show pci/{} name enable_roce; dmesg | grep -i {}",
                    without_ib[0].split(' ').next().unwrap_or_default(),
                    module.trim_end_matches("_ib")
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
    let soft: Vec<&str> = devices
        .iter()
        .filter(|d| matches!(d.parent, IbParent::Netdev(_)))
        .map(|d| d.name.as_str())
        .collect();
    if !soft.is_empty() {
        let module = ["rdma_rxe", "siw"]
            .into_iter()
            .find(|m| node.module_present(m))
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

// ---------------------------------------------------------------- netns mode

fn mode_name(m: NetnsMode) -> &'static str {
    match m {
        NetnsMode::Shared => "shared",
        NetnsMode::Exclusive => "exclusive",
    }
}

fn switch_fix(to: NetnsMode) -> String {
    match to {
        NetnsMode::Exclusive => "echo 'options ib_core netns_mode=0' > \
             /etc/modprobe.d/ib_core.conf and reboot (or, while no pod runs: rdma system set \
             netns exclusive)"
            .into(),
        NetnsMode::Shared => "remove `options ib_core netns_mode=0` from /etc/modprobe.d and \
             reboot (or, while no pod runs: rdma system set netns shared)"
            .into(),
    }
}

fn check_netns_mode(
    node: &Node,
    net: &dyn NetView,
    opts: &Options,
    r: &mut Report,
) -> Option<NetnsMode> {
    let mode = match node.netns_mode_from_sysfs() {
        Some(m) => m,
        None => match net.netns_mode() {
            Ok(m) => m,
            Err(e) => {
                r.push(
                    "netns-mode",
                    Severity::Fail,
                    "RDMA netns mode",
                    format!(
                        "unknown: {} is missing and RDMA netlink answered: {e}",
                        node.sys
                            .path("module/ib_core/parameters/netns_mode")
                            .display()
                    ),
                    Some(load_fix("ib_core")),
                );
                return None;
            }
        },
    };
    r.facts.netns_mode = Some(mode);
    let mut needs: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for n in &opts.networks {
        if let Some(m) = n.needs() {
            needs.entry(mode_name(m)).or_default().push(format!(
                "{} (mode {})",
                n.name,
                n.mode.as_str()
            ));
        }
    }
    if needs.len() > 1 {
        r.push(
            "netns-mode",
            Severity::Fail,
            "RDMA netns mode",
            format!(
                "{}; networks need both: shared for {}, exclusive for {}; one node runs one mode",
                mode_name(mode),
                needs["shared"].join(", "),
                needs["exclusive"].join(", ")
            ),
            Some(
                "run the two kinds of network on separate node pools: select nodes by the \
                 label feature.node.kubernetes.io/rdma-netns-mode (rdma-ns doctor --nfd)"
                    .into(),
            ),
        );
        return Some(mode);
    }
    match needs.into_iter().next() {
        Some((need, who)) if need != mode_name(mode) => {
            let to = if need == "shared" {
                NetnsMode::Shared
            } else {
                NetnsMode::Exclusive
            };
            r.push(
                "netns-mode",
                Severity::Fail,
                "RDMA netns mode",
                format!(
                    "{}, but {} need {need}: their ADDs fail with code 120",
                    mode_name(mode),
                    who.join(", ")
                ),
                Some(switch_fix(to)),
            );
        }
        Some((_, who)) => r.push(
            "netns-mode",
            Severity::Ok,
            "RDMA netns mode",
            format!("{}, as {} need", mode_name(mode), who.join(", ")),
            None,
        ),
        None => r.push(
            "netns-mode",
            Severity::Ok,
            "RDMA netns mode",
            mode_name(mode),
            None,
        ),
    }
    Some(mode)
}

// ---------------------------------------------------------------- devices and ports

fn check_devices(devices: &[IbDevice], mode: Option<NetnsMode>, opts: &Options, r: &mut Report) {
    if !devices.is_empty() {
        return;
    }
    let fix = if opts.pod && mode == Some(NetnsMode::Exclusive) {
        "in exclusive netns mode a pod sees only the ib devices moved into it: attach it with \
         mode move (rdma auto or exclusive) or chain mode rdma after sriov-cni"
    } else {
        "load the NIC's RDMA driver (modprobe mlx5_ib; dmesg | grep -i mlx5 shows why it \
         failed), or for Soft-RoCE: rdma link add rxe0 type rxe netdev <ethernet netdev>"
    };
    r.push(
        "devices",
        Severity::Fail,
        "/sys/class/infiniband",
        "no ib device",
        Some(fix.into()),
    );
}

/// `100 Gb/sec (4X EDR)` → 100000 Mb/s; `2.5 Gb/sec (1X SDR)` → 2500.
pub fn rate_mbps(rate: &str) -> Option<u64> {
    let mut words = rate.split_whitespace();
    let number = words.next()?;
    if words.next()? != "Gb/sec" {
        return None;
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let mut mbps = int.parse::<u64>().ok()?.checked_mul(1000)?;
    let mut scale = 100;
    for c in frac.chars().take(3) {
        mbps += u64::from(c.to_digit(10)?) * scale;
        scale /= 10;
    }
    Some(mbps)
}

fn check_ports(node: &Node, devices: &[IbDevice], r: &mut Report) {
    let topo = RdmaSysfs::new(&node.sys);
    for d in devices {
        for p in &d.ports {
            let object = format!("{}/{}", d.name, p.index);
            let layer = match &p.link_layer {
                LinkLayer::InfiniBand => "InfiniBand".to_string(),
                LinkLayer::Ethernet => "Ethernet".to_string(),
                LinkLayer::Other(o) => o.clone(),
            };
            r.facts.link_layers.insert(layer.clone());
            let rate = p.rate.as_deref().unwrap_or("rate unknown");
            let netdev = p.netdevs.first().map(String::as_str);
            let netdev_text = netdev.map(|n| format!(", netdev {n}")).unwrap_or_default();
            let phys_up = p.phys_state.num == NumberedState::PHYS_LINK_UP;
            if p.is_active() && phys_up {
                r.facts.active_ports += 1;
                if let Some(m) = p.rate.as_deref().and_then(rate_mbps) {
                    r.facts.max_rate_mbps = Some(r.facts.max_rate_mbps.unwrap_or(0).max(m));
                }
                r.push(
                    "port",
                    Severity::Ok,
                    object,
                    format!(
                        "{}, {}, {layer}, {rate}{netdev_text}",
                        p.state, p.phys_state
                    ),
                    None,
                );
                continue;
            }
            let operstate = netdev
                .and_then(|n| topo.netdev_settings(n).ok().flatten())
                .and_then(|s| s.operstate);
            let fix = match (&p.link_layer, netdev, operstate.as_deref()) {
                (LinkLayer::Ethernet, Some(n), Some("down")) => format!(
                    "ip link set {n} up; if it stays down, check cable and switch port \
                     (ethtool {n})"
                ),
                (LinkLayer::Ethernet, Some(n), _) => format!(
                    "no Ethernet link on {n}: check cable, transceiver and switch port \
                     (ethtool {n}; dmesg | grep -i {n})"
                ),
                (LinkLayer::InfiniBand, _, _) if phys_up => format!(
                    "the link is up but no subnet manager has configured the port ({}): start \
                     opensm on a node of this fabric (systemctl start opensm) or enable the \
                     switch's SM; ibstat {} shows the SM LID",
                    p.state, d.name
                ),
                _ => format!(
                    "no physical link: check cable and switch port (ibstat {}; iblinkinfo)",
                    d.name
                ),
            };
            r.push(
                "port",
                Severity::Fail,
                object,
                format!(
                    "{}, {} (expected 4: ACTIVE, 5: LinkUp); {layer}, {rate}{netdev_text}{}",
                    p.state,
                    p.phys_state,
                    operstate
                        .map(|o| format!(" (operstate {o})"))
                        .unwrap_or_default()
                ),
                Some(fix),
            );
        }
    }
}

// ---------------------------------------------------------------- PCIe

/// Usable bandwidth of a link in Mb/s after line encoding: 8b/10b up to 5 GT/s, 128b/130b
/// from 8 GT/s (PCIe 3.0 and later).
fn pcie_mbps(link: &PcieLink) -> Option<u64> {
    let mts = u64::from(link.mts?);
    let lanes = u64::from(link.width?);
    let per_lane = if mts <= 5000 {
        mts * 8 / 10
    } else {
        mts * 128 / 130
    };
    Some(per_lane * lanes)
}

fn link_text(l: &PcieLink) -> String {
    format!(
        "{} x{}",
        l.speed.trim_end_matches(" PCIe").trim_end_matches(" PCI"),
        l.width.map(|w| w.to_string()).unwrap_or_else(|| "?".into())
    )
}

fn check_pcie(node: &Node, devices: &[IbDevice], r: &mut Report) {
    let topo = RdmaSysfs::new(&node.sys);
    // One finding per physical function: VFs and SFs have no link of their own (their PF's
    // is the one that carries them).
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut fastest_port: BTreeMap<String, u64> = BTreeMap::new();
    for d in devices {
        let bdf = match &d.parent {
            IbParent::Device(BusDevice::Pci { bdf }) => bdf.clone(),
            IbParent::Device(BusDevice::Auxiliary {
                pci_parent: Some(p),
                ..
            }) => p.clone(),
            _ => continue,
        };
        let bdf = match topo.pci_function(&bdf) {
            Ok(Some(PciFunction {
                physfn: Some(pf), ..
            })) => pf,
            _ => bdf,
        };
        let rate = d
            .ports
            .iter()
            .filter_map(|p| p.rate.as_deref().and_then(rate_mbps))
            .max()
            .unwrap_or(0);
        let e = fastest_port.entry(bdf.clone()).or_default();
        *e = (*e).max(rate);
        seen.entry(bdf).or_default().push(d.name.clone());
    }
    for (bdf, ibdevs) in seen {
        let object = format!("{bdf} ({})", ibdevs.join(", "));
        let f = match topo.pci_function(&bdf) {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => {
                r.push(
                    "pcie",
                    Severity::Warn,
                    object,
                    format!("cannot read the PCIe link: {e}"),
                    Some(format!("lspci -vv -s {bdf} | grep -E 'LnkCap|LnkSta'")),
                );
                continue;
            }
        };
        let (Some(cur), Some(max)) = (&f.current_link, &f.max_link) else {
            continue;
        };
        let port_rate = fastest_port.get(&bdf).copied().unwrap_or(0);
        let bw_note = match pcie_mbps(cur) {
            Some(bw) if port_rate > bw => format!(
                "; about {} Gb/s over PCIe, less than the port's {} Gb/s",
                bw / 1000,
                port_rate / 1000
            ),
            _ => String::new(),
        };
        match f.link_degraded() {
            Some(true) => {
                r.facts.pcie_degraded = true;
                let up = topo.pci_upstream(&bdf).ok().flatten();
                let slot = up.as_ref().and_then(|u| u.max_link.clone().map(|m| (u, m)));
                let slot_limits = slot.as_ref().is_some_and(|(_, m)| {
                    m.mts.zip(max.mts).is_some_and(|(s, c)| s < c)
                        || m.width.zip(max.width).is_some_and(|(s, c)| s < c)
                });
                let (finding, fix) = match slot {
                    Some((u, m)) if slot_limits => (
                        format!(
                            "link at {}, the card can do {}, but its slot (upstream port {}) \
                             at most {}{bw_note}",
                            link_text(cur),
                            link_text(max),
                            u.bdf,
                            link_text(&m)
                        ),
                        format!(
                            "move the card to a slot that does {} (see the board manual), or \
                             accept the lower bandwidth; lspci -vv -s {bdf} | grep -E \
                             'LnkCap|LnkSta'",
                            link_text(max)
                        ),
                    ),
                    _ => (
                        format!(
                            "link at {}, below what the card ({}) and its slot{} can do{bw_note}",
                            link_text(cur),
                            link_text(max),
                            up.as_ref()
                                .and_then(|u| u.max_link.as_ref().map(|m| format!(
                                    " (upstream port {}, {})",
                                    u.bdf,
                                    link_text(m)
                                )))
                                .unwrap_or_default()
                        ),
                        format!(
                            "reseat the card and its riser, check the BIOS PCIe speed setting; \
                             dmesg | grep -i 'bandwidth' names the limiting link; lspci -vv -s \
                             {bdf} | grep -E 'LnkCap|LnkSta'"
                        ),
                    ),
                };
                r.push("pcie", Severity::Warn, object, finding, Some(fix));
            }
            Some(false) => r.push(
                "pcie",
                Severity::Ok,
                object,
                format!("link at {}, the card's maximum{bw_note}", link_text(cur)),
                None,
            ),
            None => {}
        }
    }
}

// ---------------------------------------------------------------- confs

fn check_confs(
    node: &Node,
    net: &dyn NetView,
    devices: &[IbDevice],
    opts: &Options,
    r: &mut Report,
) {
    let topo = RdmaSysfs::new(&node.sys);
    for e in &opts.conf_errors {
        r.push(
            "conf",
            Severity::Fail,
            match &e.network {
                Some(n) => format!("network {n} ({})", e.source),
                None => e.source.clone(),
            },
            format!("the plugin would refuse it: {}", e.msg),
            Some(format!("correct the field named above in {}", e.source)),
        );
    }
    for n in &opts.networks {
        let object = format!("network {} ({})", n.name, n.source);
        if let Some(ib) = &n.rdma_device {
            if devices.iter().any(|d| &d.name == ib) {
                r.push(
                    "conf",
                    Severity::Ok,
                    object.clone(),
                    format!("rdmaDevice {ib} exists"),
                    None,
                );
            } else {
                r.push(
                    "conf",
                    Severity::Fail,
                    object.clone(),
                    format!(
                        "rdmaDevice {ib}: no such ib device (have: {})",
                        names(devices.iter().map(|d| d.name.as_str()))
                    ),
                    Some("name one of the ib devices `rdma link show` lists".into()),
                );
            }
            if n.netdev().is_none() {
                continue;
            }
        }
        let Some(wanted) = n.netdev() else {
            let how = if n.mode == Mode::Rdma {
                "chained: the ib device follows the interface the plugin before it made"
            } else {
                "no netdev named: the device plugin's deviceID selects it per pod"
            };
            r.push("conf", Severity::Ok, object, how, None);
            continue;
        };
        let field = if n.master.is_some() {
            "master"
        } else {
            "device"
        };
        let name = match topo.netdev(wanted) {
            Ok(Some(_)) => wanted.to_string(),
            _ => match net.resolve_name(wanted) {
                Some(real) => real,
                None => {
                    r.push(
                        "conf",
                        Severity::Fail,
                        object,
                        format!("{field} {wanted}: no such netdev in the host"),
                        Some(format!(
                            "ip -br link lists the netdevs; set {field} in {} to one of them",
                            n.source
                        )),
                    );
                    continue;
                }
            },
        };
        let Ok(Some(dev)) = topo.netdev(&name) else {
            continue;
        };
        let ports = topo.ib_ports_for_netdev(&name).unwrap_or_default();
        let port_layer = ports.first().and_then(|p| {
            devices
                .iter()
                .find(|d| d.name == p.ibdev)
                .and_then(|d| d.port(p.port))
                .map(|port| port.link_layer.clone())
        });
        let type_name = |t: u16| match t {
            1 => "Ethernet".to_string(),
            32 => "InfiniBand (IPoIB)".to_string(),
            other => format!("ARPHRD {other}"),
        };
        let (want_type, want_layer, other_mode) = match n.mode {
            Mode::Macvlan => (Some(1u16), Some(LinkLayer::Ethernet), "ipoib"),
            Mode::Ipoib => (Some(32u16), Some(LinkLayer::InfiniBand), "macvlan"),
            _ => (None, None, ""),
        };
        if let Some(t) = want_type.filter(|t| *t != dev.link_type) {
            r.push(
                "conf",
                Severity::Fail,
                object,
                format!(
                    "{field} {name} is {}, mode {} needs {}: ADD fails with code 110",
                    type_name(dev.link_type),
                    n.mode.as_str(),
                    type_name(t)
                ),
                Some(format!(
                    "use mode {other_mode} for this parent, or name a {} netdev",
                    type_name(t)
                )),
            );
            continue;
        }
        let Some(first) = ports.first() else {
            r.push(
                "conf",
                if n.rdma == crate::attach::ib_device::RdmaConf::Off {
                    Severity::Ok
                } else {
                    Severity::Fail
                },
                object,
                format!(
                    "{field} {name} has no ib device behind it: pods get a netdev without RDMA"
                ),
                Some(format!(
                    "name the netdev of an RDMA port (rdma link show lists port → netdev), or \
                     set \"rdma\": \"off\" in {} if no RDMA is meant",
                    n.source
                )),
            );
            continue;
        };
        if let Some(l) = want_layer.filter(|l| Some(l) != port_layer.as_ref()) {
            r.push(
                "conf",
                Severity::Fail,
                object,
                format!(
                    "{field} {name} is on {}/{} whose link layer is {:?}, mode {} needs {l:?}",
                    first.ibdev,
                    first.port,
                    port_layer,
                    n.mode.as_str()
                ),
                Some(format!("use mode {other_mode}, or another parent")),
            );
            continue;
        }
        r.push(
            "conf",
            Severity::Ok,
            object,
            format!(
                "{field} {name}: {}, ib device {} port {}",
                type_name(dev.link_type),
                first.ibdev,
                first.port
            ),
            None,
        );
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

// ---------------------------------------------------------------- IPoIB

/// IPOIB_CM_MTU: connected mode's maximum (0x10000 - 0x10).
const IPOIB_CM_MTU: u32 = 65520;

fn check_ipoib(node: &Node, opts: &Options, r: &mut Report) {
    let topo = RdmaSysfs::new(&node.sys);
    for name in node.sys.list_dir("class/net").unwrap_or_default() {
        let Ok(Some(dev)) = topo.netdev(&name) else {
            continue;
        };
        // Parents only: they hang under their HCA; children are virtual.
        if dev.link_type != 32 || dev.device.is_none() {
            continue;
        }
        let Ok(Some(settings)) = topo.netdev_settings(&name) else {
            continue;
        };
        // Byte 0 of the 20-byte address carries the RC flag 0x80 (IPOIB_CM_SUPPORTED);
        // Enhanced IPoIB leaves it 0.
        let cm_capable = u8::from_str_radix(dev.address.get(..2).unwrap_or("00"), 16)
            .is_ok_and(|b| b & 0x80 != 0);
        r.facts.ipoib_connected |= cm_capable;
        let mode = settings.ipoib_mode.as_deref().unwrap_or("unknown");
        let mtu = settings.mtu.unwrap_or(0);
        let kind = if cm_capable {
            "connected mode possible"
        } else {
            "Enhanced IPoIB (datagram only)"
        };
        let object = format!("{name} (IPoIB)");
        let mut conflicts = 0;
        for n in opts
            .networks
            .iter()
            .filter(|n| n.mode == Mode::Ipoib && n.netdev() == Some(name.as_str()))
        {
            if cm_capable {
                continue;
            }
            let asks_cm = n.ipoib_mode == Some(IpoibModeConf::Connected);
            let asks_mtu = n.mtu.filter(|m| *m > mtu);
            if asks_cm || asks_mtu.is_some() {
                conflicts += 1;
                r.push(
                    "ipoib",
                    Severity::Fail,
                    format!("network {} ({})", n.name, n.source),
                    format!(
                        "asks {} of {name}, which runs {kind} with MTU {mtu}: ADD fails (code \
                         110 for connected mode, 7 for the MTU)",
                        if asks_cm {
                            "connected mode".to_string()
                        } else {
                            format!("MTU {}", asks_mtu.unwrap_or(0))
                        }
                    ),
                    Some(format!(
                        "set \"ipoibMode\": \"auto\" (or datagram) and an mtu of at most {mtu} \
                         in {}; 65520 needs a connected-mode port (upstream kernels have no \
                         switch to turn Enhanced IPoIB off)",
                        n.source
                    )),
                );
            }
        }
        if conflicts > 0 {
            continue;
        }
        if mode == "connected" && mtu < IPOIB_CM_MTU {
            r.push(
                "ipoib",
                Severity::Warn,
                object,
                format!("connected mode with MTU {mtu} (connected mode allows {IPOIB_CM_MTU})"),
                Some(format!("ip link set {name} mtu {IPOIB_CM_MTU}")),
            );
        } else {
            let children = if cm_capable {
                "; ipoib children with ipoibMode auto get connected mode, MTU 65520"
            } else {
                "; ipoib children get datagram mode"
            };
            r.push(
                "ipoib",
                Severity::Ok,
                object,
                format!("{mode} mode, MTU {mtu}, {kind}{children}"),
                None,
            );
        }
    }
}

// ---------------------------------------------------------------- RoCE

/// The RoCE path MTU a netdev MTU allows: the netdev MTU less the largest header stack
/// (GRH, UDP, BTH, XRC, AtomicETH, ICRC: 96 bytes), rounded down to an IB MTU
/// (include/rdma/ib_addr.h `iboe_get_mtu`).
pub fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let payload = netdev_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| payload >= *m)
}

fn check_roce(node: &Node, net: &dyn NetView, devices: &[IbDevice], r: &mut Report) {
    let topo = RdmaSysfs::new(&node.sys);
    for d in devices {
        for p in d
            .ports
            .iter()
            .filter(|p| p.link_layer == LinkLayer::Ethernet)
        {
            for nd in &p.netdevs {
                let object = format!("{nd} ({}/{})", d.name, p.index);
                let Some(mtu) = topo.netdev_settings(nd).ok().flatten().and_then(|s| s.mtu) else {
                    continue;
                };
                match roce_active_mtu(mtu) {
                    Some(4096) => r.push(
                        "roce-mtu",
                        Severity::Ok,
                        object,
                        format!("MTU {mtu}: RoCE active MTU 4096"),
                        None,
                    ),
                    active => {
                        r.push(
                            "roce-mtu",
                            Severity::Warn,
                            object,
                            format!(
                            "MTU {mtu} gives RoCE an active MTU of {} (4096 needs a netdev MTU \
                             of at least 4192)",
                            active.map(|a| a.to_string()).unwrap_or_else(|| "none".into())
                        ),
                            Some(format!(
                                "ip link set {nd} mtu 9000 (the switch ports and peers need it \
                             too; persist it in the node's network configuration)"
                            )),
                        )
                    }
                }
            }
            // The port's own netdevs and their upper devices (VLANs) that have GIDs, as far
            // as this netns sees them: a pod's netdev in the host's GID table is not here.
            let mut netdevs: Vec<&str> = p.netdevs.iter().map(String::as_str).collect();
            for n in p.gid_ndevs() {
                if !netdevs.contains(&n) {
                    netdevs.push(n);
                }
            }
            for nd in netdevs {
                if !matches!(topo.netdev(nd), Ok(Some(_))) {
                    continue;
                }
                let object = format!("{nd} ({}/{})", d.name, p.index);
                let addrs = match net.addresses(nd) {
                    Ok(a) => a,
                    Err(e) => {
                        r.push(
                            "roce-gid",
                            Severity::Warn,
                            object,
                            format!("cannot list its addresses: {e}"),
                            Some(format!("ip -br addr show {nd}")),
                        );
                        continue;
                    }
                };
                check_gids(d, p, nd, &addrs, object, r);
            }
        }
    }
}

fn check_gids(
    d: &IbDevice,
    p: &crate::kernel::topology::IbPort,
    nd: &str,
    addrs: &[IpAddr],
    object: String,
    r: &mut Report,
) {
    let mut found = Vec::new();
    for ip in addrs {
        match p.find_gid(*ip, nd) {
            Some((index, GidType::RoceV2)) => found.push(format!("{ip} at {index}")),
            Some((index, t)) => r.push(
                "roce-gid",
                Severity::Fail,
                object.clone(),
                format!(
                    "{ip} has only a {t} GID (index {index}) on {}/{}: not routable, RoCE v2 \
                     expected",
                    d.name, p.index
                ),
                Some(format!(
                    "check the RoCE mode: cma_roce_mode -d {} -p {} (rdma-core) should say \
                     RoCE v2",
                    d.name, p.index
                )),
            ),
            None => r.push(
                "roce-gid",
                Severity::Fail,
                object.clone(),
                format!(
                    "{ip} has no RoCE v2 GID on {}/{}: RDMA to this address fails",
                    d.name, p.index
                ),
                Some(format!(
                    "the kernel adds GIDs when addresses change: re-add it (ip addr del {ip}/<len> \
                     dev {nd}; ip addr add ...); if it still has none, look at \
                     /sys/class/infiniband/{}/ports/{}/gid_attrs/ndevs/*",
                    d.name, p.index
                )),
            ),
        }
    }
    if !found.is_empty() {
        r.push(
            "roce-gid",
            Severity::Ok,
            object,
            format!("RoCE v2 GIDs: {}", found.join(", ")),
            None,
        );
    }
}

// ---------------------------------------------------------------- data dir

fn check_data_dirs(node: &Node, r: &mut Report) -> Vec<Attachment> {
    let mut all = Vec::new();
    for dir in &node.data_dirs {
        let object = dir.display().to_string();
        match std::fs::read_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                r.push(
                    "data-dir",
                    Severity::Ok,
                    object,
                    "absent: no attachment made yet",
                    None,
                );
                continue;
            }
            Err(e) => {
                r.push(
                    "data-dir",
                    Severity::Warn,
                    object,
                    format!(
                        "cannot read it as uid {}: {e}",
                        nix::unistd::getuid().as_raw()
                    ),
                    Some("run the doctor as root (the data dir is 0700)".into()),
                );
                continue;
            }
            Ok(_) => {}
        }
        let (records, unreadable) = Store::new(dir).list_all();
        for e in &unreadable {
            r.push(
                "data-dir",
                Severity::Fail,
                object.clone(),
                format!("unreadable attachment record: {e}"),
                Some(
                    "DEL and GC cannot release what it holds: look at the file (the last JSON \
                     line counts); if its pod is gone, release the device by hand and move the \
                     file away"
                        .into(),
                ),
            );
        }
        let mut stale = 0;
        for a in &records {
            if netns_alive(a) {
                continue;
            }
            stale += 1;
            let pod = a
                .pod
                .as_ref()
                .map(|p| {
                    format!(
                        " of pod {}/{}",
                        p.namespace.as_deref().unwrap_or("?"),
                        p.name.as_deref().unwrap_or("?")
                    )
                })
                .unwrap_or_default();
            r.push(
                "data-dir",
                Severity::Warn,
                format!("{}/{}:{}", a.network, a.container_id, a.ifname),
                format!(
                    "attachment{pod} ({}, host device {}): its netns {} is gone, no DEL came",
                    a.mode().as_str(),
                    a.netdev_name(),
                    a.netns
                ),
                Some(format!(
                    "let the runtime's CNI GC release it (containerd and CRI-O run GC on \
                     restart), or run DEL for network {} container {} ifname {} by hand",
                    a.network, a.container_id, a.ifname
                )),
            );
        }
        if unreadable.is_empty() && stale == 0 {
            r.push(
                "data-dir",
                Severity::Ok,
                object,
                format!(
                    "{} attachment records, every pod netns present",
                    records.len()
                ),
                None,
            );
        }
        all.extend(records);
    }
    all
}

fn netns_alive(a: &Attachment) -> bool {
    if a.netns.is_empty() {
        return true;
    }
    match std::fs::metadata(&a.netns) {
        Ok(m) => a
            .netns_id
            .as_ref()
            .map_or(true, |id| id.dev == m.dev() && id.ino == m.ino()),
        Err(_) => false,
    }
}

// ---------------------------------------------------------------- char devices

fn check_char_devices(
    node: &Node,
    devices: &[IbDevice],
    opts: &Options,
    records: &[Attachment],
    r: &mut Report,
) {
    let topo = RdmaSysfs::new(&node.sys);
    let mut nodes: Vec<CharDev> = devices
        .iter()
        .flat_map(|d| d.char_devs.iter().cloned())
        .collect();
    if let Ok(Some(cm)) = topo.rdma_cm() {
        nodes.push(cm);
    }
    // What the confs' devicePermissions ask, per kind.
    let mut asked: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for n in &opts.networks {
        if let Some(p) = &n.permissions {
            for kind in [
                CharDevKind::Uverbs,
                CharDevKind::Umad,
                CharDevKind::Issm,
                CharDevKind::RdmaCm,
            ] {
                if let Some(m) = p.mode_for(kind) {
                    asked
                        .entry(kind.prefix())
                        .or_default()
                        .insert(format!("{m:04o} by {}", n.name));
                }
            }
        }
    }
    for c in &nodes {
        let path = node.dev_dir.join(&c.name);
        let object = path.display().to_string();
        let module = crate::attach::permissions::module_for(c.kind);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                r.push(
                    "char-dev",
                    Severity::Fail,
                    object,
                    format!(
                        "missing ({e}); sysfs has {} as char {}:{}",
                        c.name, c.major, c.minor
                    ),
                    Some(if opts.pod {
                        "the device plugin mounts the pod's nodes: request its resource \
                         (e.g. rdma/hca_shared: 1) in the pod spec"
                            .to_string()
                    } else {
                        format!(
                            "devtmpfs creates it when {module} loads: modprobe {module}; is \
                             /dev a devtmpfs (findmnt /dev)?"
                        )
                    }),
                );
                continue;
            }
        };
        let rdev = meta.rdev();
        let (maj, min) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
        if !meta.file_type().is_char_device()
            || (maj, min) != (u64::from(c.major), u64::from(c.minor))
        {
            r.push(
                "char-dev",
                Severity::Fail,
                object.clone(),
                format!(
                    "not char device {}:{} as sysfs says, but {} {maj}:{min}",
                    c.major,
                    c.minor,
                    if meta.file_type().is_symlink() {
                        "a symlink"
                    } else if meta.file_type().is_char_device() {
                        "char device"
                    } else {
                        "another kind of file"
                    }
                ),
                Some(format!(
                    "remove {object} and reload {module} (modprobe -r {module}; modprobe \
                     {module}) so devtmpfs re-creates it; devicePermissions refuses such nodes \
                     (code 111)"
                )),
            );
            continue;
        }
        let mode = meta.mode() & 0o7777;
        let owner = format!("{:04o} uid {} gid {}", mode, meta.uid(), meta.gid());
        // A node an attachment changed must still have what it set.
        if let Some((a, pc)) = records.iter().find_map(|a| {
            a.perm_changes
                .iter()
                .find(|pc| pc.path == path && pc.rdev == (c.major, c.minor))
                .map(|pc| (a, pc))
        }) {
            if mode != pc.new_mode || meta.gid() != pc.new_gid {
                r.push(
                    "char-dev",
                    Severity::Warn,
                    object,
                    format!(
                        "{owner}, but attachment {}/{} set {:04o} gid {}: something changed it \
                         since (a udev rule?)",
                        a.network, a.container_id, pc.new_mode, pc.new_gid
                    ),
                    Some(format!(
                        "chmod {:04o} {}; find the rule that reset it: udevadm test \
                         $(udevadm info -q path -n {})",
                        pc.new_mode,
                        path.display(),
                        path.display()
                    )),
                );
                continue;
            }
        }
        let user_kind = matches!(c.kind, CharDevKind::Uverbs | CharDevKind::RdmaCm);
        let asked_here = asked.get(c.kind.prefix());
        if opts.pod && c.kind == CharDevKind::Uverbs {
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
            {
                Ok(_) => {}
                Err(e) => {
                    let why = match e.raw_os_error() {
                        Some(nix::libc::EPERM) => "EPERM: the ib device belongs to another \
                                                   netns (exclusive mode)"
                            .to_string(),
                        Some(nix::libc::EACCES) => format!(
                            "EACCES: mode {owner} does not let uid {} open it",
                            nix::unistd::geteuid().as_raw()
                        ),
                        _ => e.to_string(),
                    };
                    r.push(
                        "char-dev",
                        Severity::Fail,
                        object,
                        format!("this pod cannot open it: {why}"),
                        Some(
                            "set devicePermissions (e.g. {\"uverbs\": \"0666\"}) in the \
                             network conf, or run the container with a uid that may open it; in \
                             exclusive mode the pod must get the device moved in (mode move)"
                                .into(),
                        ),
                    );
                    continue;
                }
            }
        }
        if user_kind && mode & 0o006 != 0o006 && asked_here.is_none() && !opts.pod {
            r.push(
                "char-dev",
                Severity::Warn,
                object,
                format!("{owner}: pods not running as root cannot open it"),
                Some(format!(
                    "add \"devicePermissions\": {{\"{}\": \"0666\"}} to the network conf \
                     (rdma-ns sets it per attachment and restores it), rather than chmod by hand",
                    c.kind.prefix()
                )),
            );
            continue;
        }
        let note = match asked_here {
            Some(a) => format!(
                "; devicePermissions asks {} (set at ADD)",
                a.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            None => String::new(),
        };
        r.push(
            "char-dev",
            Severity::Ok,
            object,
            format!("char {}:{}, {owner}{note}", c.major, c.minor),
            None,
        );
    }
}

// ---------------------------------------------------------------- RLIMIT_MEMLOCK

/// The container runtimes whose limits pods inherit (runc/crun pass the runtime's own limits
/// on unless the OCI spec sets rlimits).
const RUNTIMES: [&str; 3] = ["containerd", "crio", "dockerd"];

/// `Max locked memory` of a /proc/<pid>/limits text: the soft limit, None for unlimited.
pub fn memlock_soft(limits: &str) -> Option<Option<u64>> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(None)
    } else {
        soft.parse().ok().map(Some)
    }
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn check_memlock(node: &Node, opts: &Options, r: &mut Report) {
    let mut source = None;
    if !opts.pod {
        for entry in std::fs::read_dir(&node.proc_dir)
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            if let Some(rt) = RUNTIMES.iter().find(|rt| comm.trim() == **rt) {
                if let Ok(limits) = std::fs::read_to_string(entry.path().join("limits")) {
                    source = Some((format!("{rt} (pid {name})"), *rt, limits));
                    break;
                }
            }
        }
    }
    let (object, runtime, limits) = match source {
        Some((o, rt, l)) => (o, Some(rt), l),
        None => (
            if opts.pod {
                "this pod".to_string()
            } else {
                "this shell (no containerd, crio or dockerd process found)".to_string()
            },
            None,
            std::fs::read_to_string(node.proc_dir.join("self/limits")).unwrap_or_default(),
        ),
    };
    let fix = match runtime {
        Some("crio") => "set default_ulimits = [\"memlock=-1:-1\"] in /etc/crio/crio.conf \
                         ([crio.runtime]) and restart crio"
            .to_string(),
        Some(rt) => format!(
            "systemctl edit {rt}: [Service] LimitMEMLOCK=infinity; then systemctl restart {rt}"
        ),
        None if opts.pod => "pods inherit the container runtime's limit: on the node, \
                             LimitMEMLOCK=infinity for containerd (systemctl edit containerd) \
                             or default_ulimits memlock=-1:-1 for CRI-O"
            .to_string(),
        None => "ulimit -l unlimited (or LimitMEMLOCK=infinity for the service that runs it)"
            .to_string(),
    };
    match memlock_soft(&limits) {
        Some(None) => r.push(
            "memlock",
            Severity::Ok,
            object,
            "RLIMIT_MEMLOCK unlimited",
            None,
        ),
        Some(Some(bytes)) => r.push(
            "memlock",
            Severity::Warn,
            object,
            format!(
                "RLIMIT_MEMLOCK {} (expected unlimited): RDMA memory registration beyond it \
                 fails with ENOMEM{}",
                human(bytes),
                if runtime.is_some() {
                    ", and pods inherit it"
                } else {
                    ""
                }
            ),
            Some(fix),
        ),
        None => r.push(
            "memlock",
            Severity::Warn,
            object,
            "cannot read RLIMIT_MEMLOCK",
            Some("cat /proc/<pid>/limits of the container runtime".into()),
        ),
    }
}

#[cfg(test)]
mod tests;
