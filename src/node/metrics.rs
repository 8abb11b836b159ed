//! Prometheus text exposition format (version 0.0.4) of the node's RDMA ports and of the
//! attachments in the records. Written by hand: the format is lines of `# HELP`, `# TYPE` and
//! `name{label="value"} number`, and the crates that produce it bring a registry, locking and
//! more code than the rendering below (README, "Dependencies").
//!
//! Units follow Prometheus conventions: bytes and bits per second, `_total` for counters. The
//! PMA data counters `port_xmit_data`/`port_rcv_data` count 4-octet words (IBA 16.1.3.5,
//! K:Documentation/ABI/stable/sysfs-class-infiniband), so they are multiplied by 4.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::attach::store::Store;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{LinkLayer, RdmaSysfs};

/// PMA counters with a metric of their own, converted to a base unit: (file, metric, factor,
/// help).
const DATA_COUNTERS: [(&str, &str, u64, &str); 4] = [
    (
        "port_xmit_data",
        "rdma_port_transmit_bytes_total",
        4,
        "Bytes sent by the port (PMA port_xmit_data, which counts 4-octet words, times 4).",
    ),
    (
        "port_rcv_data",
        "rdma_port_receive_bytes_total",
        4,
        "Bytes received by the port (PMA port_rcv_data, which counts 4-octet words, times 4).",
    ),
    (
        "port_xmit_packets",
        "rdma_port_transmit_packets_total",
        1,
        "Packets sent by the port (PMA port_xmit_packets).",
    ),
    (
        "port_rcv_packets",
        "rdma_port_receive_packets_total",
        1,
        "Packets received by the port (PMA port_rcv_packets).",
    ),
];

/// Where the exporter reads from.
#[derive(Debug, Clone)]
pub struct Sources {
    pub sys: SysRoot,
    pub data_dirs: Vec<PathBuf>,
}

/// One metric family: its samples are appended to `body`, the header is written once.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    body: String,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            body: String::new(),
        }
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.body.push_str(self.name);
        write_labels(&mut self.body, labels);
        let _ = writeln!(self.body, " {value}");
    }

    fn write_to(&self, out: &mut String) {
        if self.body.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        out.push_str(&self.body);
    }
}

fn write_labels(out: &mut String, labels: &[(&str, &str)]) {
    if labels.is_empty() {
        return;
    }
    out.push('{');
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        escape_label_value(out, v);
        out.push('"');
    }
    out.push('}');
}

/// Label values escape `\`, `"` and newline (exposition format 0.0.4).
pub fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Renders every metric into `out` (cleared first; its capacity is kept between scrapes).
/// Read errors do not stop a scrape: they are counted in `rdma_ns_exporter_read_errors`.
pub fn render(src: &Sources, out: &mut String) {
    out.clear();
    let started = std::time::Instant::now();
    let topo = RdmaSysfs::new(&src.sys);
    let mut errors = 0u64;
    let ports = match topo.port_infos() {
        Ok(p) => p,
        Err(_) => {
            errors += 1;
            Vec::new()
        }
    };
    let mut info = Family::new(
        "rdma_port_info",
        "gauge",
        "An ib device port: link layer, state, physical state, rate and netdev (always 1).",
    );
    let mut state = Family::new(
        "rdma_port_state",
        "gauge",
        "Port state number from sysfs (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).",
    );
    let mut phys = Family::new(
        "rdma_port_phys_state",
        "gauge",
        "Physical port state number from sysfs (5 LinkUp, 3 Disabled, 2 Polling).",
    );
    let mut rate = Family::new(
        "rdma_port_rate_bits_per_second",
        "gauge",
        "Port rate from sysfs, in bits per second.",
    );
    let mut data: Vec<Family> = DATA_COUNTERS
        .iter()
        .map(|(_, name, _, help)| Family::new(name, "counter", help))
        .collect();
    let mut pma = Family::new(
        "rdma_port_counter_total",
        "counter",
        "Other PMA port counters (ports/N/counters), raw; `counter` names the sysfs file.",
    );
    let mut hw = Family::new(
        "rdma_port_hw_counter_total",
        "counter",
        "Driver port counters (ports/N/hw_counters), raw; `counter` names the sysfs file.",
    );
    let mut dev_hw = Family::new(
        "rdma_device_hw_counter_total",
        "counter",
        "Driver device-wide counters (hw_counters), raw; `counter` names the sysfs file.",
    );
    for (i, p) in ports.iter().enumerate() {
        let dev = p.ibdev.as_str();
        // Device-wide counters once per device (ports come grouped by device).
        if i == 0 || ports[i - 1].ibdev != p.ibdev {
            match topo.device_hw_counters(dev) {
                Ok(c) => {
                    errors += c.unreadable.len() as u64;
                    for (name, v) in &c.values {
                        dev_hw.sample(&[("device", dev), ("counter", name)], v);
                    }
                }
                Err(_) => errors += 1,
            }
        }
        let port = p.port.index.to_string();
        let layer = match &p.port.link_layer {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Other(o) => o.as_str(),
        };
        let state_text = p.port.state.to_string();
        let phys_text = p.port.phys_state.to_string();
        info.sample(
            &[
                ("device", dev),
                ("port", &port),
                ("link_layer", layer),
                ("state", &state_text),
                ("phys_state", &phys_text),
                ("rate", p.rate.as_deref().unwrap_or("")),
                (
                    "netdev",
                    p.netdevs.first().map(String::as_str).unwrap_or(""),
                ),
            ],
            1,
        );
        let labels = [("device", dev), ("port", port.as_str())];
        state.sample(&labels, p.port.state.num);
        phys.sample(&labels, p.port.phys_state.num);
        if let Some(mbps) = p.rate.as_deref().and_then(super::values::rate_mbps) {
            rate.sample(&labels, mbps * 1_000_000);
        }
        match topo.port_counters(dev, p.port.index) {
            Ok(c) => {
                errors += c.unreadable.len() as u64;
                for (name, v) in &c.values {
                    match DATA_COUNTERS.iter().position(|(f, ..)| f == name) {
                        Some(i) => data[i].sample(&labels, v.saturating_mul(DATA_COUNTERS[i].2)),
                        None => {
                            pma.sample(&[("device", dev), ("port", &port), ("counter", name)], v)
                        }
                    }
                }
            }
            Err(_) => errors += 1,
        }
        match topo.port_hw_counters(dev, p.port.index) {
            Ok(c) => {
                errors += c.unreadable.len() as u64;
                for (name, v) in &c.values {
                    hw.sample(&[("device", dev), ("port", &port), ("counter", name)], v);
                }
            }
            Err(_) => errors += 1,
        }
    }
    let (att_info, gid_info, unreadable) = attachments(src);
    for f in [&info, &state, &phys, &rate] {
        f.write_to(out);
    }
    for f in &data {
        f.write_to(out);
    }
    for f in [&pma, &hw, &dev_hw, &att_info, &gid_info] {
        f.write_to(out);
    }
    let mut rec = Family::new(
        "rdma_ns_records_unreadable",
        "gauge",
        "Attachment records that could not be read (rdma-ns doctor names them).",
    );
    rec.sample(&[], unreadable);
    rec.write_to(out);
    let mut err = Family::new(
        "rdma_ns_exporter_read_errors",
        "gauge",
        "sysfs reads that failed during this scrape (missing counters of a device included).",
    );
    err.sample(&[], errors);
    err.write_to(out);
    let mut took = Family::new(
        "rdma_ns_exporter_render_seconds",
        "gauge",
        "How long reading sysfs and the records and rendering this text took.",
    );
    took.sample(&[], started.elapsed().as_secs_f64());
    took.write_to(out);
}

fn attachments(src: &Sources) -> (Family, Family, usize) {
    let mut info = Family::new(
        "rdma_ns_attachment_info",
        "gauge",
        "An rdma-ns attachment from the records: pod, network, interface, mode, ib device and \
         GID index (always 1); join on device and port to the port metrics.",
    );
    let mut gids = Family::new(
        "rdma_ns_attachment_gid_info",
        "gauge",
        "A RoCE GID of an attachment's pod address: index, type and IP (always 1).",
    );
    let mut unreadable = 0;
    for dir in &src.data_dirs {
        let (records, errors) = Store::new(dir).list_all();
        unreadable += errors.len();
        for a in &records {
            let pod = a.pod.as_ref();
            let namespace = pod.and_then(|p| p.namespace.as_deref()).unwrap_or("");
            let name = pod.and_then(|p| p.name.as_deref()).unwrap_or("");
            let first_gid = a
                .gids()
                .iter()
                .find(|g| g.gid_type == "RoCE v2")
                .or(a.gids().first());
            let ibdev = a
                .ib_device()
                .map(|r| r.ibdev.as_str())
                .or(first_gid.map(|g| g.ibdev.as_str()))
                .unwrap_or("");
            let port = a
                .ib_device()
                .map(|r| r.port)
                .or(first_gid.map(|g| g.port))
                .map(|p| p.to_string())
                .unwrap_or_default();
            let index = first_gid.map(|g| g.index.to_string()).unwrap_or_default();
            let phase = match a.phase {
                crate::attach::record::Phase::Adding => "adding",
                crate::attach::record::Phase::Ready => "ready",
            };
            info.sample(
                &[
                    ("namespace", namespace),
                    ("pod", name),
                    ("network", &a.network),
                    ("container_id", &a.container_id),
                    ("interface", &a.ifname),
                    ("mode", a.mode().as_str()),
                    ("host_device", a.netdev_name()),
                    ("device", ibdev),
                    ("port", &port),
                    ("gid_index", &index),
                    ("phase", phase),
                ],
                1,
            );
            for g in a.gids() {
                let (port, index, ip) = (g.port.to_string(), g.index.to_string(), g.ip.to_string());
                gids.sample(
                    &[
                        ("namespace", namespace),
                        ("pod", name),
                        ("network", &a.network),
                        ("interface", &a.ifname),
                        ("device", &g.ibdev),
                        ("port", &port),
                        ("gid_index", &index),
                        ("gid_type", &g.gid_type),
                        ("ip", &ip),
                    ],
                    1,
                );
            }
        }
    }
    (info, gids, unreadable)
}

#[cfg(test)]
mod tests;
