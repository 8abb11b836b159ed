//! Prometheus text exposition format (version 0.0.4) of the node's RDMA ports and of the
//! attachments in the records. Written by hand: the format is lines of `# HELP`, `# TYPE` and
//! `name{label="value"} number`, and the crates that produce it bring a registry, locking and
//! more code than the rendering below (docs/architecture.md, "Dependencies").
//!
//! Units follow Prometheus conventions: bytes and bits per second, `_total` for counters. The
//! PMA data counters `port_xmit_data`/`port_rcv_data` count 4-octet words (IBA 16.1.3.5,
//! K:Documentation/ABI/stable/sysfs-class-infiniband), so they are multiplied by 4.

mod attachments;
mod ports;
mod stamp;
mod text;

use std::path::PathBuf;

use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{CounterListings, RdmaSysfs};
use attachments::Records;
use ports::PortText;
pub use text::escape_label_value;
use text::{Family, FamilyText};

/// Where the exporter reads from.
#[derive(Debug, Clone)]
pub struct Sources {
    pub sys: SysRoot,
    pub data_dirs: Vec<PathBuf>,
}

/// Renders the metrics, scrape after scrape. It keeps what one scrape built for the next: the
/// port families' text buffers (so a scrape allocates nothing per counter), the names in each
/// counter directory, listed again only when the directory is not the one listed, and the
/// records as last read, which are read again only when a file in the data dirs changed.
pub struct Scraper {
    src: Sources,
    ports: PortText,
    listings: CounterListings,
    records: Records,
}

impl Scraper {
    pub fn new(src: Sources) -> Scraper {
        Scraper {
            src,
            ports: PortText::new(),
            listings: CounterListings::default(),
            records: Records::default(),
        }
    }

    /// Renders every metric into `out` (cleared first), UTF-8 text. Read errors do not stop a
    /// scrape: they are counted in `rdma_ns_exporter_read_errors`.
    pub fn render(&mut self, out: &mut Vec<u8>) {
        out.clear();
        let started = std::time::Instant::now();
        let topo = RdmaSysfs::new(&self.src.sys);
        self.ports.read(&topo, &mut self.listings);
        self.records.read(&self.src.data_dirs);
        self.ports.write_to(out);
        self.records.write_to(out);
        let unreadable = Family::gauge(
            "rdma_ns_records_unreadable",
            "Attachment records that could not be read (rdma-ns doctor names them).",
        );
        FamilyText::new(out, &unreadable).sample(b"", self.records.unreadable as u64);
        let errors = Family::gauge(
            "rdma_ns_exporter_read_errors",
            "sysfs reads that failed during this scrape (missing counters of a device included).",
        );
        FamilyText::new(out, &errors).sample(b"", self.ports.errors);
        let took = Family::gauge(
            "rdma_ns_exporter_render_seconds",
            "How long reading sysfs and the records and rendering this text took.",
        );
        FamilyText::new(out, &took).seconds(started.elapsed());
    }
}

#[cfg(test)]
mod tests;
