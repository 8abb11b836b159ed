//! The port metrics: each port's state and rate, its PMA and driver counters, and each
//! device's own driver counters. Samples are written as sysfs is read, each into its family's
//! body (a [`ScrapeSink`]); the families are put together at the end. The bodies are kept
//! between scrapes, so a scrape allocates nothing per counter.

use super::text::{counter_head, push_bytes, push_counter, push_labels, push_sample, Family};
use crate::kernel::topology::node::PortInfo;
use crate::kernel::topology::{CounterDir, CounterListings, RdmaSysfs, ScrapeSink};
use crate::node::values::{link_layer_name, rate_mbps};

const INFO: usize = 0;
const STATE: usize = 1;
const PHYS_STATE: usize = 2;
const RATE: usize = 3;
const PMA: usize = 8;
const PORT_HW: usize = 9;
const DEVICE_HW: usize = 10;

/// The families, in the order of the text.
const FAMILIES: [Family; 11] = [
    Family::gauge(
        "rdma_port_info",
        "An ib device port: link layer, state, physical state, rate and netdev (always 1).",
    ),
    Family::gauge(
        "rdma_port_state",
        "Port state number from sysfs (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).",
    ),
    Family::gauge(
        "rdma_port_phys_state",
        "Physical port state number from sysfs (5 LinkUp, 3 Disabled, 2 Polling).",
    ),
    Family::gauge(
        "rdma_port_rate_bits_per_second",
        "Port rate from sysfs, in bits per second.",
    ),
    Family::counter(
        "rdma_port_transmit_bytes_total",
        "Bytes sent by the port (PMA port_xmit_data, which counts 4-octet words, times 4).",
    ),
    Family::counter(
        "rdma_port_receive_bytes_total",
        "Bytes received by the port (PMA port_rcv_data, which counts 4-octet words, times 4).",
    ),
    Family::counter(
        "rdma_port_transmit_packets_total",
        "Packets sent by the port (PMA port_xmit_packets).",
    ),
    Family::counter(
        "rdma_port_receive_packets_total",
        "Packets received by the port (PMA port_rcv_packets).",
    ),
    Family::counter(
        "rdma_port_counter_total",
        "Other PMA port counters (ports/N/counters), raw; `counter` names the sysfs file.",
    ),
    Family::counter(
        "rdma_port_hw_counter_total",
        "Driver port counters (ports/N/hw_counters), raw; `counter` names the sysfs file.",
    ),
    Family::counter(
        "rdma_device_hw_counter_total",
        "Driver device-wide counters (hw_counters), raw; `counter` names the sysfs file.",
    ),
];

/// The PMA counters with a family of their own, and the factor to its base unit: the data
/// counters count 4-octet words.
const DATA_COUNTERS: [(&str, usize, u64); 4] = [
    ("port_xmit_data", 4, 4),
    ("port_rcv_data", 5, 4),
    ("port_xmit_packets", 6, 1),
    ("port_rcv_packets", 7, 1),
];

/// The port families' text of one scrape.
pub(super) struct PortText {
    bodies: [Vec<u8>; 11],
    /// The ib device of the port being read.
    device: String,
    /// `device="…",port="…"` of the port being read.
    port_labels: Vec<u8>,
    /// What the samples of a counter file start with, up to the file's name, per counter
    /// family (`rdma_port_counter_total{device="…",port="…",counter="`).
    heads: [Vec<u8>; 3],
    /// sysfs reads that failed (a counter directory, a counter file).
    pub(super) errors: u64,
}

impl PortText {
    pub(super) fn new() -> PortText {
        PortText {
            bodies: Default::default(),
            device: String::new(),
            port_labels: Vec::new(),
            heads: Default::default(),
            errors: 0,
        }
    }

    /// Reads every port of the node into the families. A port whose state cannot be read
    /// leaves no port metric and one error, as the node's topology cannot be read then.
    /// `listings` are the counter directories' names, kept from the scrape before.
    pub(super) fn read(&mut self, topo: &RdmaSysfs<'_>, listings: &mut CounterListings) {
        self.bodies.iter_mut().for_each(Vec::clear);
        self.device.clear();
        self.errors = 0;
        if topo.scrape(listings, self).is_err() {
            self.bodies.iter_mut().for_each(Vec::clear);
            self.errors = 1;
        }
    }

    pub(super) fn write_to(&self, out: &mut Vec<u8>) {
        for (family, body) in FAMILIES.iter().zip(&self.bodies) {
            family.write(out, body);
        }
    }
}

impl ScrapeSink for PortText {
    fn port(&mut self, p: &PortInfo) {
        if self.device != p.ibdev {
            self.device.clone_from(&p.ibdev);
            let head = &mut self.heads[DEVICE_HW - PMA];
            head.clear();
            counter_head(head, FAMILIES[DEVICE_HW].name(), &[("device", &p.ibdev)]);
        }
        let port = p.port.index.to_string();
        let labels = [("device", p.ibdev.as_str()), ("port", &port)];
        self.port_labels.clear();
        push_labels(&mut self.port_labels, &labels);
        for family in [PMA, PORT_HW] {
            let head = &mut self.heads[family - PMA];
            head.clear();
            counter_head(head, FAMILIES[family].name(), &labels);
        }
        let info = &mut self.bodies[INFO];
        push_bytes(info, FAMILIES[INFO].name().as_bytes());
        info.push(b'{');
        push_bytes(info, &self.port_labels);
        info.push(b',');
        push_labels(
            info,
            &[
                ("link_layer", link_layer_name(&p.port.link_layer)),
                ("state", &p.port.state.to_string()),
                ("phys_state", &p.port.phys_state.to_string()),
                ("rate", p.rate.as_deref().unwrap_or("")),
                (
                    "netdev",
                    p.netdevs.first().map(String::as_str).unwrap_or(""),
                ),
            ],
        );
        push_bytes(info, b"} 1\n");
        let gauges = [
            (STATE, Some(u64::from(p.port.state.num))),
            (PHYS_STATE, Some(u64::from(p.port.phys_state.num))),
            (
                RATE,
                p.rate.as_deref().and_then(rate_mbps).map(|m| m * 1_000_000),
            ),
        ];
        for (family, value) in gauges {
            if let Some(v) = value {
                let name = FAMILIES[family].name();
                push_sample(&mut self.bodies[family], name, &self.port_labels, v);
            }
        }
    }

    fn counter(&mut self, dir: CounterDir, name: &str, value: u64) {
        let family = match dir {
            CounterDir::Pma => {
                if let Some((_, family, factor)) = DATA_COUNTERS.iter().find(|(n, ..)| *n == name) {
                    let body = &mut self.bodies[*family];
                    let v = value.saturating_mul(*factor);
                    push_sample(body, FAMILIES[*family].name(), &self.port_labels, v);
                    return;
                }
                PMA
            }
            CounterDir::PortHw => PORT_HW,
            CounterDir::DeviceHw => DEVICE_HW,
        };
        push_counter(
            &mut self.bodies[family],
            &self.heads[family - PMA],
            name,
            value,
        );
    }

    fn unreadable(&mut self, _: CounterDir, _: Option<&str>, _: &str) {
        self.errors += 1;
    }
}
