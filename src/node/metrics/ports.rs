//! The port metrics: each port's state and rate, its PMA and driver counters, and each
//! device's own driver counters, read in one pass over sysfs and then written family by
//! family.

use super::text::{labels, Family, FamilyText};
use crate::kernel::topology::node::{Counters, PortInfo};
use crate::kernel::topology::RdmaSysfs;
use crate::node::values::{link_layer_name, rate_mbps};

const INFO: Family = Family::gauge(
    "rdma_port_info",
    "An ib device port: link layer, state, physical state, rate and netdev (always 1).",
);

/// The PMA data counters: they count 4-octet words, and packets.
const XMIT_DATA: &str = "port_xmit_data";
const RCV_DATA: &str = "port_rcv_data";
const XMIT_PACKETS: &str = "port_xmit_packets";
const RCV_PACKETS: &str = "port_rcv_packets";

/// A port's value in a family of one sample per port (None: no sample).
type PortValue = fn(&PortReading) -> Option<u64>;

/// The families of one sample per port, labelled with its device and port, and the port's
/// value. The PMA data counters get a family each, in base units.
const PER_PORT: [(Family, PortValue); 7] = [
    (
        Family::gauge(
            "rdma_port_state",
            "Port state number from sysfs (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).",
        ),
        |p| Some(p.brief.port.state.num.into()),
    ),
    (
        Family::gauge(
            "rdma_port_phys_state",
            "Physical port state number from sysfs (5 LinkUp, 3 Disabled, 2 Polling).",
        ),
        |p| Some(p.brief.port.phys_state.num.into()),
    ),
    (
        Family::gauge(
            "rdma_port_rate_bits_per_second",
            "Port rate from sysfs, in bits per second.",
        ),
        |p| Some(rate_mbps(p.brief.rate.as_deref()?)? * 1_000_000),
    ),
    (
        Family::counter(
            "rdma_port_transmit_bytes_total",
            "Bytes sent by the port (PMA port_xmit_data, which counts 4-octet words, times 4).",
        ),
        |p| Some(p.pma.get(XMIT_DATA)?.saturating_mul(4)),
    ),
    (
        Family::counter(
            "rdma_port_receive_bytes_total",
            "Bytes received by the port (PMA port_rcv_data, which counts 4-octet words, times 4).",
        ),
        |p| Some(p.pma.get(RCV_DATA)?.saturating_mul(4)),
    ),
    (
        Family::counter(
            "rdma_port_transmit_packets_total",
            "Packets sent by the port (PMA port_xmit_packets).",
        ),
        |p| p.pma.get(XMIT_PACKETS),
    ),
    (
        Family::counter(
            "rdma_port_receive_packets_total",
            "Packets received by the port (PMA port_rcv_packets).",
        ),
        |p| p.pma.get(RCV_PACKETS),
    ),
];

/// The families of one sample per counter file: the other PMA counters, the driver's port
/// counters, the driver's device-wide counters.
const PMA: Family = Family::counter(
    "rdma_port_counter_total",
    "Other PMA port counters (ports/N/counters), raw; `counter` names the sysfs file.",
);
const PORT_HW: Family = Family::counter(
    "rdma_port_hw_counter_total",
    "Driver port counters (ports/N/hw_counters), raw; `counter` names the sysfs file.",
);
const DEVICE_HW: Family = Family::counter(
    "rdma_device_hw_counter_total",
    "Driver device-wide counters (hw_counters), raw; `counter` names the sysfs file.",
);

/// One port as this scrape read it.
struct PortReading {
    brief: PortInfo,
    /// `device="…",port="…"`, the labels every sample of the port starts with.
    labels: String,
    pma: Counters,
    hw: Counters,
}

/// Every port and device counter of the node, read once per scrape.
pub(super) struct PortCounters {
    ports: Vec<PortReading>,
    /// `device="…"` and the device-wide counters, per device.
    devices: Vec<(String, Counters)>,
    /// sysfs reads that failed (a missing counter of a device included).
    pub(super) errors: u64,
}

impl PortCounters {
    pub(super) fn read(topo: &RdmaSysfs<'_>) -> PortCounters {
        let mut node = PortCounters {
            ports: Vec::new(),
            devices: Vec::new(),
            errors: 0,
        };
        let ports = topo.port_infos().unwrap_or_else(|_| {
            node.errors += 1;
            Vec::new()
        });
        for brief in ports {
            let dev = brief.ibdev.as_str();
            // Device-wide counters once per device (ports come grouped by device).
            if node.ports.last().map(|p| p.brief.ibdev.as_str()) != Some(dev) {
                let counters = node.counted(topo.device_hw_counters(dev));
                node.devices.push((labels(&[("device", dev)]), counters));
            }
            let pma = node.counted(topo.port_counters(dev, brief.port.index));
            let hw = node.counted(topo.port_hw_counters(dev, brief.port.index));
            node.ports.push(PortReading {
                labels: labels(&[("device", dev), ("port", &brief.port.index.to_string())]),
                brief,
                pma,
                hw,
            });
        }
        node
    }

    /// The counters read, their unreadable files and a failed directory counted as errors.
    fn counted(&mut self, read: std::io::Result<Counters>) -> Counters {
        match read {
            Ok(c) => {
                self.errors += c.unreadable.len() as u64;
                c
            }
            Err(_) => {
                self.errors += 1;
                Counters::default()
            }
        }
    }

    pub(super) fn write_to(&self, out: &mut String) {
        self.write_info(out);
        for (family, value) in &PER_PORT {
            let mut f = FamilyText::new(out, family);
            for p in &self.ports {
                if let Some(v) = value(p) {
                    f.sample(&p.labels, None, v);
                }
            }
        }
        let data = [XMIT_DATA, RCV_DATA, XMIT_PACKETS, RCV_PACKETS];
        let mut f = FamilyText::new(out, &PMA);
        for p in &self.ports {
            for (name, v) in &p.pma.values {
                if !data.contains(&name.as_str()) {
                    f.sample(&p.labels, Some(("counter", name)), *v);
                }
            }
        }
        let mut f = FamilyText::new(out, &PORT_HW);
        for p in &self.ports {
            for (name, v) in &p.hw.values {
                f.sample(&p.labels, Some(("counter", name)), *v);
            }
        }
        let mut f = FamilyText::new(out, &DEVICE_HW);
        for (labels, counters) in &self.devices {
            for (name, v) in &counters.values {
                f.sample(labels, Some(("counter", name)), *v);
            }
        }
    }

    fn write_info(&self, out: &mut String) {
        let mut f = FamilyText::new(out, &INFO);
        for p in &self.ports {
            let b = &p.brief;
            let info = labels(&[
                ("link_layer", link_layer_name(&b.port.link_layer)),
                ("state", &b.port.state.to_string()),
                ("phys_state", &b.port.phys_state.to_string()),
                ("rate", b.rate.as_deref().unwrap_or("")),
                (
                    "netdev",
                    b.netdevs.first().map(String::as_str).unwrap_or(""),
                ),
            ]);
            f.sample(&format!("{},{info}", p.labels), None, 1);
        }
    }
}
