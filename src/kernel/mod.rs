//! What the kernel offers, with nothing about CNI: network namespaces, rtnetlink, RDMA
//! netlink (NLDEV) and sysfs.
//!
//! The attach layer talks to the kernel only through narrow traits holding exactly what the
//! attachment steps need: [`NetOps`](rtnetlink::NetOps) (links, addresses, routes) and
//! [`RdmaOps`](rdma_ops::RdmaOps) (ib devices). Each trait sits beside its real implementation,
//! [`RealKernel`](rtnetlink::RealKernel) and [`RealRdma`](rdma_ops::RealRdma), which use netlink
//! sockets opened inside each namespace. Unit tests use the fake host of `fake.rs` (test builds
//! only): one state behind both traits, recording every call and failing on demand; the
//! scenarios of `conformance.rs` hold the fake and the real kernel to the same behaviour.
//!
//! Where things go:
//! - [`netlink`]: the one transport (socket, exchange, error replies) for every family. A new
//!   request never changes it.
//! - A new rtnetlink request: [`rtnetlink`] (`request.rs`, `decode.rs`, the trait method and
//!   `RealKernel` in `mod.rs`), then `fake.rs`, and a scenario in `conformance.rs` when the steps
//!   rely on how the kernel behaves. A new NLDEV request: [`nldev`] (encoder, decoder), then
//!   [`rdma_ops`] (the trait method, `RealRdma`), then `fake.rs`.
//! - Facts read from files: [`sysfs`] (the one root) and [`topology`] (ib devices, ports,
//!   GIDs, char devices and the PCI functions behind them); [`netns`] for namespace handles.
//! - RDMA CM's per-port defaults in configfs: [`rdma_cm`] (files below the same root), which
//!   [`RdmaOps`](rdma_ops::RdmaOps) offers the steps beside NLDEV, so the fake host keeps them
//!   as the kernel does (a move resets them).

#[cfg(any(test, feature = "test-support"))]
pub mod conformance;
pub mod dcbnl;
pub mod ethtool;
#[cfg(test)]
pub mod fake;
pub mod netlink;
pub mod netns;
pub mod nldev;
pub mod rdma_cm;
pub mod rdma_ops;
pub mod rtnetlink;
pub mod sock_diag;
pub mod sysfs;
pub mod topology;

use std::fmt;

pub use netns::Netns;

/// Which network namespace an operation acts in.
#[derive(Clone, Copy)]
pub enum Ns<'a> {
    /// The namespace the plugin was started in (the host's).
    Host,
    /// A pod's namespace, held open by fd.
    Pod(&'a Netns),
}

impl fmt::Debug for Ns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ns::Host => write!(f, "host netns"),
            Ns::Pod(ns) => write!(f, "netns {}", ns.path().display()),
        }
    }
}

impl fmt::Display for Ns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A kernel operation that failed, with the errno and the kernel's extended-ack text if any.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} on {target} in {netns} failed: {}{}", errno_text(*.errno), ext_ack_text(.ext_ack))]
pub struct KernelError {
    /// What was asked, e.g. `move and rename link` or `add address 10.0.0.2/24`.
    pub op: String,
    /// Which device or object, e.g. `eth3 (ifindex 7)`.
    pub target: String,
    /// Which namespace it was asked in.
    pub netns: String,
    /// Positive errno value; 0 when the failure was not an errno (decode errors).
    pub errno: i32,
    /// NLMSGERR_ATTR_MSG from the kernel, or a decode error text.
    pub ext_ack: Option<String>,
}

impl KernelError {
    pub fn new(
        op: impl Into<String>,
        target: impl Into<String>,
        netns: Ns<'_>,
        errno: i32,
    ) -> Self {
        KernelError {
            op: op.into(),
            target: target.into(),
            netns: netns.to_string(),
            errno,
            ext_ack: None,
        }
    }

    /// A netlink request that the kernel refused or answered with something undecodable.
    pub fn netlink(
        op: impl Into<String>,
        target: impl Into<String>,
        netns: impl fmt::Display,
        e: netlink::NlError,
    ) -> Self {
        KernelError {
            op: op.into(),
            target: target.into(),
            netns: netns.to_string(),
            errno: e.errno,
            ext_ack: e.ext_ack,
        }
    }

    pub fn is_errno(&self, errno: nix::errno::Errno) -> bool {
        self.errno == errno as i32
    }
}

fn errno_text(errno: i32) -> String {
    if errno == 0 {
        "malformed reply".to_string()
    } else {
        let e = nix::errno::Errno::from_raw(errno);
        format!("{} ({:?})", e.desc(), e)
    }
}

fn ext_ack_text(msg: &Option<String>) -> String {
    match msg {
        Some(m) if !m.is_empty() => format!(": {m}"),
        _ => String::new(),
    }
}

pub type KResult<T> = Result<T, KernelError>;
