//! `rdma-ns doctor`: the field guide's troubleshooting routine as checks. Each check yields
//! findings (OK / WARN / FAIL) that name the object, the value found, what was expected and
//! the command that fixes it, so an operator can act without reading code.
//!
//! Nothing here changes the node: files are read, netlink is only asked (GET requests), and in
//! `--pod` mode uverbs nodes are opened and closed again to see whether the pod may use them.
//!
//! Each check family is a file under `doctor/` with one type: it holds what the check reads
//! and its `check` pushes the findings; [`run`] calls them in report order. A new check is such
//! a file, one line in [`run`], and its row in docs/node.md's table.

mod char_dev;
mod conf;
mod data_dir;
mod ipoib;
mod memlock;
mod modules;
mod netns_mode;
mod pcie;
mod peers;
mod ports;
mod qos;
mod roce;

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::confs::{ConfError, PeerEntry, RdmaNetwork};
use super::{NetView, Node};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::topology::{IbDevice, RdmaSysfs};
use char_dev::CharDevCheck;
use conf::ConfCheck;
use data_dir::DataDirCheck;
use ipoib::IpoibCheck;
pub use memlock::memlock_soft;
use memlock::MemlockCheck;
use modules::ModulesCheck;
use netns_mode::NetnsModeCheck;
use pcie::PcieCheck;
use peers::PeerCheck;
use ports::{DevicesCheck, PortsCheck};
use qos::QosCheck;
pub use roce::roce_active_mtu;
use roce::RoceCheck;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Severity {
    /// The check does not apply to the object (a virtual NIC has no DCB): said, and neither a
    /// pass nor a problem; it ranks below OK, so it never decides the exit code.
    #[serde(rename = "N/A")]
    NotApplicable,
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
            Severity::NotApplicable | Severity::Ok => 0,
            Severity::Warn => 1,
            Severity::Fail => 2,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::NotApplicable => "N/A",
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
    /// Entries of the peer plugins rdma-ns replaces or chains after.
    pub peer_entries: Vec<PeerEntry>,
}

/// Runs every check, in the order the report lists them.
pub fn run(node: &Node, net: &dyn NetView, opts: &Options) -> Report {
    let mut r = Report::default();
    let topo = &RdmaSysfs::new(&node.sys);
    let devices = &read_devices(node, topo, &mut r);
    r.facts.ib_devices = devices.len();
    ModulesCheck { node, devices }.check(&mut r);
    let networks = &opts.networks;
    let mode = NetnsModeCheck {
        node,
        net,
        networks,
    }
    .check(&mut r);
    DevicesCheck {
        devices,
        mode,
        pod: opts.pod,
        soft_roce_module: node.module_present("rdma_rxe"),
    }
    .check(&mut r);
    PortsCheck { topo, devices }.check(&mut r);
    PcieCheck { topo, devices }.check(&mut r);
    if !opts.pod {
        ConfCheck {
            topo,
            net,
            devices,
            opts,
        }
        .check(&mut r);
        PeerCheck { opts }.check(&mut r);
    }
    IpoibCheck {
        node,
        topo,
        networks,
    }
    .check(&mut r);
    RoceCheck { topo, net, devices }.check(&mut r);
    let records = records_and_qos(node, topo, net, opts, mode, &mut r);
    CharDevCheck {
        node,
        topo,
        devices,
        opts,
        records: &records,
    }
    .check(&mut r);
    MemlockCheck {
        proc_dir: &node.proc_dir,
        pod: opts.pod,
    }
    .check(&mut r);
    r
}

/// The node's own checks of the attachment records and, with them, of the networks' RoCE QoS
/// (a pod has neither to look at): the records, for the checks after them.
fn records_and_qos(
    node: &Node,
    topo: &RdmaSysfs<'_>,
    net: &dyn NetView,
    opts: &Options,
    mode: Option<NetnsMode>,
    r: &mut Report,
) -> Vec<crate::attach::record::Attachment> {
    if opts.pod {
        return Vec::new();
    }
    let records = DataDirCheck {
        dirs: &node.data_dirs,
    }
    .check(r);
    QosCheck {
        node,
        topo,
        net,
        networks: &opts.networks,
        records: &records,
        mode,
    }
    .check(r);
    records
}

/// The ib devices every check looks at; a topology that cannot be read is a FAIL of its own.
fn read_devices(node: &Node, topo: &RdmaSysfs<'_>, r: &mut Report) -> Vec<IbDevice> {
    match topo.devices() {
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
    }
}

#[cfg(test)]
mod tests;
