//! The attachment metrics: one info sample per record, joined to the port metrics on device
//! and port, and one per RoCE GID of a pod address.

use std::path::PathBuf;

use super::stamp::Stamp;
use super::text::{labels, Family, FamilyText};
use crate::attach::record::{Attachment, Phase};
use crate::attach::store::Store;

const INFO: Family = Family::gauge(
    "rdma_ns_attachment_info",
    "An rdma-ns attachment from the records: pod, network, interface, mode, ib device and GID \
     index (always 1); join on device and port to the port metrics.",
);
const GID_INFO: Family = Family::gauge(
    "rdma_ns_attachment_gid_info",
    "A RoCE GID of an attachment's pod address: index, type and IP (always 1).",
);

/// The text of the records of every data dir as last read, and how many could not be read.
/// The text is written when the records are read: between reads it does not change.
#[derive(Default)]
pub(super) struct Records {
    text: Vec<u8>,
    pub(super) unreadable: usize,
    /// What the data dirs held when the records were read (None: never, or not readable).
    stamp: Option<Stamp>,
    /// How many times the records were read.
    pub(super) reads: u64,
}

impl Records {
    /// The records, read again unless the data dirs hold what they held at the last read.
    pub(super) fn read(&mut self, data_dirs: &[PathBuf]) {
        if self.stamp.as_ref().is_some_and(|s| s.holds(data_dirs)) {
            return;
        }
        // Taken before reading: a record that changes while it is read changes the stamp
        // again, and the next scrape reads it again.
        self.stamp = Stamp::take(data_dirs);
        self.reads += 1;
        self.unreadable = 0;
        let mut all = Vec::new();
        for dir in data_dirs {
            let (records, errors) = Store::new(dir).list_all();
            self.unreadable += errors.len();
            all.extend(records);
        }
        self.text.clear();
        write_records(&mut self.text, &all);
    }

    pub(super) fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.text);
    }
}

/// The two families of `records`: an info sample per record, one per GID.
fn write_records(out: &mut Vec<u8>, records: &[Attachment]) {
    let mut f = FamilyText::new(out, &INFO);
    for a in records {
        f.sample(&info_labels(a), 1);
    }
    let mut f = FamilyText::new(out, &GID_INFO);
    for a in records {
        let (namespace, pod) = pod_names(a);
        for g in a.gids() {
            let (port, index, ip) = (g.port.to_string(), g.index.to_string(), g.ip.to_string());
            let gid = labels(&[
                ("namespace", namespace),
                ("pod", pod),
                ("network", &a.network),
                ("interface", &a.ifname),
                ("device", &g.ibdev),
                ("port", &port),
                ("gid_index", &index),
                ("gid_type", &g.gid_type),
                ("ip", &ip),
            ]);
            f.sample(&gid, 1);
        }
    }
}

/// The pod's namespace and name, empty when the record has none.
fn pod_names(a: &Attachment) -> (&str, &str) {
    let pod = a.pod.as_ref();
    (
        pod.and_then(|p| p.namespace.as_deref()).unwrap_or(""),
        pod.and_then(|p| p.name.as_deref()).unwrap_or(""),
    )
}

/// The attachment's labels: its ib device and port are the moved device's, else those of its
/// first RoCE v2 GID (else its first GID), whose index `gid_index` names.
fn info_labels(a: &Attachment) -> Vec<u8> {
    let (namespace, pod) = pod_names(a);
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
        Phase::Adding => "adding",
        Phase::Ready => "ready",
    };
    labels(&[
        ("namespace", namespace),
        ("pod", pod),
        ("network", &a.network),
        ("container_id", &a.container_id),
        ("interface", &a.ifname),
        ("mode", a.mode().as_str()),
        ("host_device", a.netdev_name()),
        ("device", ibdev),
        ("port", &port),
        ("gid_index", &index),
        ("phase", phase),
    ])
}
