//! What the attachment steps need from RDMA netlink, behind a narrow trait so every ib-device
//! step and its failure can be exercised without RDMA hardware.

use std::cell::OnceCell;

use nix::errno::Errno;

use crate::kernel::nldev::{NetnsMode, RdmaNetlink};
use crate::kernel::{KResult, KernelError, Netns, Ns};

pub trait RdmaOps {
    /// The subsystem's netns mode; None when the kernel has no RDMA netlink (ib_core not loaded,
    /// or a kernel without InfiniBand): then there is no ib device to handle.
    fn netns_mode(&self) -> KResult<Option<NetnsMode>>;
    /// The ib device's index as seen from `ns` (exclusive mode shows a device only in its own
    /// netns; the index is stable across moves).
    fn device_index(&self, ns: Ns<'_>, name: &str) -> KResult<Option<u32>>;
    /// RDMA_NLDEV_CMD_SET + NET_NS_FD, sent on a socket opened in `ns` (the device's current
    /// netns: a socket acts in the netns it was opened in, and from any other the device is
    /// invisible in exclusive mode).
    fn move_device(&self, ns: Ns<'_>, index: u32, target: Ns<'_>) -> KResult<()>;
    /// The IB port state number (4 = ACTIVE) as seen from `ns`.
    fn port_state(&self, ns: Ns<'_>, index: u32, port: u32) -> KResult<Option<u8>>;
}

/// RDMA netlink for real: a socket per request, opened in the namespace it acts in.
#[derive(Default)]
pub struct RealRdma {
    host_ns: OnceCell<Netns>,
}

impl RealRdma {
    fn socket(&self, ns: Ns<'_>) -> KResult<RdmaNetlink> {
        match ns {
            Ns::Host => RdmaNetlink::open(),
            Ns::Pod(n) => RdmaNetlink::open_in(n),
        }
    }

    fn host_netns(&self) -> KResult<&Netns> {
        if self.host_ns.get().is_none() {
            let ns = Netns::current().map_err(|e| {
                KernelError::new(
                    "open the host netns",
                    "self",
                    Ns::Host,
                    e.raw_os_error().unwrap_or(0),
                )
            })?;
            let _ = self.host_ns.set(ns);
        }
        Ok(self.host_ns.get().expect("set above"))
    }
}

impl RdmaOps for RealRdma {
    fn netns_mode(&self) -> KResult<Option<NetnsMode>> {
        match RdmaNetlink::open() {
            Ok(s) => s.get_netns_mode().map(Some),
            Err(e) if e.is_errno(Errno::EPROTONOSUPPORT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn device_index(&self, ns: Ns<'_>, name: &str) -> KResult<Option<u32>> {
        Ok(self.socket(ns)?.device_by_name(name)?.map(|d| d.index))
    }

    fn move_device(&self, ns: Ns<'_>, index: u32, target: Ns<'_>) -> KResult<()> {
        let sock = self.socket(ns)?;
        match target {
            Ns::Host => sock.move_device_to_netns(index, self.host_netns()?.fd()),
            Ns::Pod(n) => sock.move_device_to_netns(index, n.fd()),
        }
    }

    fn port_state(&self, ns: Ns<'_>, index: u32, port: u32) -> KResult<Option<u8>> {
        Ok(self.socket(ns)?.port(index, port)?.state)
    }
}
