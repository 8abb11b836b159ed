//! `peer`: the peer plugins (rdma-cni, ipoib-cni, host-device, sriov-cni, ib-sriov-cni) a
//! node's confs still use, and what in rdma-ns takes each one's place ([`crate::peers`], the
//! table `rdma-ns migrate` converts by).

use super::{Options, Report, Severity};
use crate::node::confs::PeerEntry;
use crate::peers::Role;

pub(super) struct PeerCheck<'a> {
    pub(super) opts: &'a Options,
}

impl PeerCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        for entry in &self.opts.peer_entries {
            let object = match &entry.network {
                Some(n) => format!("network {n} ({})", entry.source),
                None => entry.source.clone(),
            };
            let (severity, finding, fix) = judge(entry);
            r.push("peer", severity, object, finding, fix);
        }
    }
}

/// A replaced peer is a warning with the command that converts its file; a peer rdma-ns chains
/// after is fine, and says whether the rdma-ns entry it wants follows it.
fn judge(entry: &PeerEntry) -> (Severity, String, Option<String>) {
    let peer = entry.peer;
    let uses = format!("uses {} (type {})", peer.plugin, peer.type_description());
    match peer.role {
        Role::Replaced(mode) => (
            Severity::Warn,
            format!("{uses}, which rdma-ns mode `{mode}` replaces"),
            Some(format!(
                "rdma-ns migrate {}   # prints the rdma-ns conflist; review its warnings",
                entry.file
            )),
        ),
        Role::KeptWithRdmaAfter if entry.rdma_ns_after => (
            Severity::Ok,
            format!("{uses} to configure the VF; rdma-ns follows it"),
            None,
        ),
        Role::KeptWithRdmaAfter => (
            Severity::Ok,
            format!(
                "{uses} to configure the VF, with no rdma-ns after it: in exclusive netns mode \
                 the pod gets no ib device unless rdma-ns mode `rdma` follows it"
            ),
            None,
        ),
        Role::Kept => (
            Severity::Ok,
            format!("{uses}: {}", peer.replaced_by()),
            None,
        ),
    }
}
