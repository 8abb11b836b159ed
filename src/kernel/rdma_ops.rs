//! What the attachment steps need from the RDMA subsystem, behind a narrow trait
//! ([`RdmaOps`]) so every ib-device step and its failure can be exercised without RDMA
//! hardware; [`RealRdma`] implements it with [`RdmaNetlink`], the NLDEV operations on one
//! socket, asks sock_diag whether Soft-RoCE's UDP socket is where a pod needs it, and reads and
//! writes RDMA CM's defaults in configfs ([`RdmaCmFs`]).

use std::cell::{OnceCell, RefCell};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

use crate::kernel::netlink::{NlError, NlSocket, Rdma, Reply, SockDiag};
use crate::kernel::nldev::{self, request, NetnsMode, RdmaDev, RdmaPort};
use crate::kernel::rdma_cm::{CmFs, RdmaCmFs};
use crate::kernel::sysfs::SysRoot;
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
    /// invisible in exclusive mode), by a thread in `ns` too: the kernel moves a device only
    /// for a task in the device's netns.
    fn move_device(&self, ns: Ns<'_>, index: u32, target: Ns<'_>) -> KResult<()>;
    /// The IB port state number ([`PORT_ACTIVE`] when it is up) as seen from `ns`.
    fn port_state(&self, ns: Ns<'_>, index: u32, port: u32) -> KResult<Option<u8>>;
    /// RDMA_NLDEV_CMD_NEWLINK, sent on a socket opened in `ns`: a software RDMA device `name`
    /// of driver `link_type` (`rxe`) bound to the netdev the kernel finds by the name `netdev`
    /// in `ns`. The device registers in the host netns, whatever `ns` is.
    fn add_link(&self, ns: Ns<'_>, name: &str, link_type: &str, netdev: &str) -> KResult<()>;
    /// RDMA_NLDEV_CMD_DELLINK of the device `index`, on a socket opened in `ns` (one the device
    /// is visible from).
    fn delete_link(&self, ns: Ns<'_>, index: u32) -> KResult<()>;
    /// Whether a UDP socket is bound to `port` in `ns` (sock_diag, as `ss -uan` asks).
    fn udp_port_bound(&self, ns: Ns<'_>, port: u16) -> KResult<bool>;
    /// Whether RDMA CM's configfs directory is there to write defaults in (kernel/rdma_cm.rs:
    /// configfs is the node's, not a netns's, so none of the `cm_` calls takes one).
    fn cm_availability(&self) -> CmFs;
    /// Whether ib device `name` has an RDMA CM configfs group.
    fn cm_group_exists(&self, name: &str) -> KResult<bool>;
    /// Makes the group of ib device `name`: ENODEV when no ib device has that name, EEXIST
    /// when the group exists.
    fn cm_make_group(&self, name: &str) -> KResult<()>;
    /// Removes the group (the device keeps its values); ENOENT when it is gone.
    fn cm_remove_group(&self, name: &str) -> KResult<()>;
    /// RDMA CM's default ToS of the port, through the device's group: ENOENT without a group,
    /// ENODEV when the device is gone.
    fn cm_default_tos(&self, name: &str, port: u32) -> KResult<u8>;
    /// Sets it, through the device's group.
    fn cm_set_default_tos(&self, name: &str, port: u32, tos: u8) -> KResult<()>;
}

/// IB_PORT_ACTIVE (ib_verbs.h `enum ib_port_state`), what [`RdmaOps::port_state`] reports for a
/// port that carries traffic.
pub const PORT_ACTIVE: u8 = 4;

/// The UDP port RoCE v2 is carried on (IANA), where Soft-RoCE (rdma_rxe) receives.
pub const ROCE_V2_PORT: u16 = 4791;

/// RDMA netlink for real, with one socket per namespace, as [`RealKernel`] keeps them: the
/// host's is opened on first use in the calling thread's namespace, a pod's by a socket(2)
/// with the thread briefly inside the pod's namespace ([`Netns::run_in`]). An open socket
/// holds a reference on its namespace, so the nsfs inode the cache is keyed by cannot be
/// reused while it is cached.
///
/// [`RealKernel`]: crate::kernel::rtnetlink::RealKernel
pub struct RealRdma {
    host_ns: OnceCell<Netns>,
    host: OnceCell<RdmaNetlink>,
    pods: RefCell<HashMap<(u64, u64), RdmaNetlink>>,
    cm: RdmaCmFs,
}

impl Default for RealRdma {
    /// The node's: RDMA CM's configfs below `/sys`.
    fn default() -> Self {
        RealRdma::with_sysfs(&SysRoot::default())
    }
}

impl RealRdma {
    /// With RDMA CM's configfs below `sys` (`kernel/config/rdma_cm`), the root every sysfs
    /// path goes through.
    pub fn with_sysfs(sys: &SysRoot) -> Self {
        RealRdma {
            host_ns: OnceCell::new(),
            host: OnceCell::new(),
            pods: RefCell::new(HashMap::new()),
            cm: RdmaCmFs::new(sys),
        }
    }

    /// Runs `f` with the socket of `ns`, opening it on first use. Errors name `ns` as the
    /// caller named it, whichever handle opened the cached socket.
    fn with_socket<T>(&self, ns: Ns<'_>, f: impl FnOnce(&RdmaNetlink) -> KResult<T>) -> KResult<T> {
        let relabel = |mut e: KernelError| {
            e.netns = ns.to_string();
            e
        };
        match ns {
            Ns::Host => f(self.host_socket()?),
            Ns::Pod(netns) => {
                let key = netns.identity().map_err(|e| {
                    KernelError::new(
                        "identify the netns (fstat on its fd)",
                        "rdma subsystem",
                        ns,
                        e.raw_os_error().unwrap_or(0),
                    )
                })?;
                let mut pods = self.pods.borrow_mut();
                let sock = match pods.entry(key) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => e.insert(RdmaNetlink::open_in(netns, self.host_netns()?)?),
                };
                f(sock).map_err(relabel)
            }
        }
    }

    fn host_socket(&self) -> KResult<&RdmaNetlink> {
        if self.host.get().is_none() {
            let _ = self.host.set(RdmaNetlink::open()?);
        }
        Ok(self.host.get().expect("set above"))
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
        match self.host_socket() {
            Ok(s) => s.get_netns_mode().map(Some),
            Err(e) if e.is_errno(Errno::EPROTONOSUPPORT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn device_index(&self, ns: Ns<'_>, name: &str) -> KResult<Option<u32>> {
        self.with_socket(ns, |s| Ok(s.device_by_name(name)?.map(|d| d.index)))
    }

    fn move_device(&self, ns: Ns<'_>, index: u32, target: Ns<'_>) -> KResult<()> {
        let target_fd = match target {
            Ns::Host => self.host_netns()?.fd(),
            Ns::Pod(n) => n.fd(),
        };
        let Ns::Pod(from) = ns else {
            return self.with_socket(ns, |s| s.move_device_to_netns(index, target_fd));
        };
        // device.c `rdma_dev_change_netns` answers ENODEV unless the netns of the task that
        // sends the request is the device's: a socket opened in the pod is not enough (seen on
        // Linux 7.3 moving a rxe device back out of a pod). So the pod's socket is opened
        // first, and the request goes out with the thread inside the pod.
        self.with_socket(ns, |_| Ok(()))?;
        let home = self.host_netns()?;
        let sent = from.run_in(home, || {
            Ok(self.with_socket(ns, |s| s.move_device_to_netns(index, target_fd)))
        });
        sent.map_err(|e| {
            KernelError::new(
                "enter the netns to move the ib device out of it",
                format!("ib device index {index}"),
                ns,
                e.raw_os_error().unwrap_or(0),
            )
        })?
    }

    fn port_state(&self, ns: Ns<'_>, index: u32, port: u32) -> KResult<Option<u8>> {
        self.with_socket(ns, |s| Ok(s.port(index, port)?.state))
    }

    fn add_link(&self, ns: Ns<'_>, name: &str, link_type: &str, netdev: &str) -> KResult<()> {
        self.with_socket(ns, |s| s.add_link(name, link_type, netdev))
    }

    fn delete_link(&self, ns: Ns<'_>, index: u32) -> KResult<()> {
        self.with_socket(ns, |s| s.delete_link(index))
    }

    fn udp_port_bound(&self, ns: Ns<'_>, port: u16) -> KResult<bool> {
        let op = format!("list the UDP sockets (looking for port {port})");
        let error = |e: NlError| KernelError::netlink(&op, "sock_diag", ns, e);
        let mut sock = match ns {
            Ns::Host => NlSocket::<SockDiag>::open(),
            Ns::Pod(netns) => NlSocket::<SockDiag>::open_in(netns, self.host_netns()?),
        }
        .map_err(|e| error(e.into()))?;
        crate::kernel::sock_diag::udp_port_bound(&mut sock, port).map_err(error)
    }

    fn cm_availability(&self) -> CmFs {
        self.cm.availability()
    }

    fn cm_group_exists(&self, name: &str) -> KResult<bool> {
        self.cm.group_exists(name)
    }

    fn cm_make_group(&self, name: &str) -> KResult<()> {
        self.cm.make_group(name)
    }

    fn cm_remove_group(&self, name: &str) -> KResult<()> {
        self.cm.remove_group(name)
    }

    fn cm_default_tos(&self, name: &str, port: u32) -> KResult<u8> {
        self.cm.default_tos(name, port)
    }

    fn cm_set_default_tos(&self, name: &str, port: u32, tos: u8) -> KResult<()> {
        self.cm.set_default_tos(name, port, tos)
    }
}

/// The NLDEV operations, on a NETLINK_RDMA socket acting in the netns it was opened in
/// (NLDEV handlers use the socket's `sock_net`).
pub struct RdmaNetlink {
    sock: RefCell<NlSocket<Rdma>>,
    /// For error messages: `host netns` or `netns /run/netns/x`.
    netns: String,
}

const SUBSYSTEM: &str = "rdma subsystem";

impl RdmaNetlink {
    /// Opens a socket in the calling thread's netns.
    pub fn open() -> KResult<RdmaNetlink> {
        Self::wrap(NlSocket::open(), Ns::Host)
    }

    /// Opens a socket acting in `ns`; the thread enters `ns` for the socket(2) alone and then
    /// goes back to `home`, the netns it is in.
    pub fn open_in(ns: &Netns, home: &Netns) -> KResult<RdmaNetlink> {
        Self::wrap(NlSocket::open_in(ns, home), Ns::Pod(ns))
    }

    fn wrap(sock: std::io::Result<NlSocket<Rdma>>, ns: Ns<'_>) -> KResult<RdmaNetlink> {
        match sock {
            Ok(sock) => Ok(RdmaNetlink {
                sock: RefCell::new(sock),
                netns: ns.to_string(),
            }),
            // EPROTONOSUPPORT here means the kernel has no ib_core (no RDMA netlink).
            Err(e) => Err(KernelError::netlink(
                "open NETLINK_RDMA socket",
                SUBSYSTEM,
                ns,
                e.into(),
            )),
        }
    }

    /// `rdma system show`: the subsystem's netns mode.
    pub fn get_netns_mode(&self) -> KResult<NetnsMode> {
        let op = "read RDMA netns mode";
        self.request(request::sys_get)
            .and_then(single)
            .and_then(|p| nldev::decode_netns_mode(&p))
            .map_err(|e| self.error(op, SUBSYSTEM, e))
    }

    /// `rdma system set netns {exclusive|shared}`. The kernel refuses with EBUSY while any
    /// netns besides init_net exists (device.c `rdma_compatdev_set`; seen on 6.1).
    pub fn set_netns_mode(&self, mode: NetnsMode) -> KResult<()> {
        let op = format!("set RDMA netns mode to {mode:?}");
        self.request(|seq| request::sys_set_netns_mode(seq, mode))
            .map(drop)
            .map_err(|e| self.error(&op, SUBSYSTEM, e))
    }

    /// Every ib device visible in this socket's netns (in exclusive mode only those that
    /// live there).
    pub fn devices(&self) -> KResult<Vec<RdmaDev>> {
        let op = "list ib devices";
        self.request(request::dev_dump)
            .and_then(|replies| {
                replies
                    .iter()
                    .map(|r| nldev::decode_dev(&r.payload))
                    .collect()
            })
            .map_err(|e| self.error(op, SUBSYSTEM, e))
    }

    /// The device named `name`, or None. NLDEV looks devices up by index only (nldev.c
    /// `nldev_get_doit` requires DEV_INDEX), so this filters the dump, as `rdma` does.
    pub fn device_by_name(&self, name: &str) -> KResult<Option<RdmaDev>> {
        Ok(self.devices()?.into_iter().find(|d| d.name == name))
    }

    /// The device with index `dev_index`; EINVAL from the kernel when there is none.
    pub fn device(&self, dev_index: u32) -> KResult<RdmaDev> {
        let (op, target) = ("get ib device", format!("ib device index {dev_index}"));
        self.request(|seq| request::dev_get(seq, dev_index))
            .and_then(single)
            .and_then(|p| nldev::decode_dev(&p))
            .map_err(|e| self.error(op, &target, e))
    }

    /// One port's state and netdev; EINVAL from the kernel for an unknown device or port.
    pub fn port(&self, dev_index: u32, port: u32) -> KResult<RdmaPort> {
        let op = "get ib port";
        let target = format!("ib device index {dev_index} port {port}");
        self.request(|seq| request::port_get(seq, dev_index, port))
            .and_then(single)
            .and_then(|p| nldev::decode_port(&p))
            .map_err(|e| self.error(op, &target, e))
    }

    /// The netdev (ifindex, name) of a port, as `rdma link` shows it; None for IB ports and
    /// when the netdev is in another netns.
    pub fn port_netdev(&self, dev_index: u32, port: u32) -> KResult<Option<(u32, String)>> {
        Ok(self.port(dev_index, port)?.netdev)
    }

    /// `rdma link add NAME type LINK_TYPE netdev NETDEV`; the kernel finds the netdev by name in
    /// this socket's netns (ENODEV when there is none), loads the driver's module on demand
    /// and answers EINVAL when there is none (nldev.c `nldev_newlink`); rxe answers EEXIST for
    /// a netdev that has a device already, and the core for a name that is taken.
    pub fn add_link(&self, name: &str, link_type: &str, netdev: &str) -> KResult<()> {
        let (op, target) = (
            format!("add {link_type} link on netdev {netdev}"),
            format!("ib device {name}"),
        );
        self.request(|seq| request::new_link(seq, name, link_type, netdev))
            .map(drop)
            .map_err(|e| self.error(&op, &target, e))
    }

    /// `rdma link delete NAME` by index: EINVAL when no device of that index is visible here,
    /// EOPNOTSUPP for a device whose driver does not allow it (hardware).
    pub fn delete_link(&self, dev_index: u32) -> KResult<()> {
        let (op, target) = ("delete link", format!("ib device index {dev_index}"));
        self.request(|seq| request::del_link(seq, dev_index))
            .map(drop)
            .map_err(|e| self.error(op, &target, e))
    }

    /// Moves an ib device into the netns `netns_fd` refers to (`rdma dev set X netns Y`).
    /// The kernel refuses with EOPNOTSUPP in shared mode and for drivers that cannot
    /// disassociate user contexts (rxe), and with EPERM without CAP_NET_ADMIN over the
    /// target (device.c `ib_device_set_netns_put`).
    pub fn move_device_to_netns(&self, dev_index: u32, netns_fd: BorrowedFd<'_>) -> KResult<()> {
        let (op, target) = (
            "move ib device to netns",
            format!("ib device index {dev_index}"),
        );
        let fd = netns_fd.as_raw_fd() as u32;
        self.request(|seq| request::dev_set_netns(seq, dev_index, fd))
            .map(drop)
            .map_err(|e| self.error(op, &target, e))
    }

    fn request(&self, build: impl Fn(u32) -> Vec<u8>) -> Result<Vec<Reply>, NlError> {
        self.sock.borrow_mut().request(build)
    }

    fn error(&self, op: &str, target: &str, e: NlError) -> KernelError {
        KernelError::netlink(op, target, &self.netns, e)
    }
}

/// The one data message a non-dump request answers with.
fn single(mut replies: Vec<Reply>) -> Result<Vec<u8>, NlError> {
    match replies.len() {
        1 => Ok(replies.pop().expect("one reply").payload),
        n => Err(NlError::decode(format!(
            "expected one reply message, got {n}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::libc;

    #[test]
    fn opening_reports_the_kernel_answer() {
        // Either the kernel has RDMA netlink (VM) or socket() fails with EPROTONOSUPPORT (no
        // ib_core); both must come back as what they are, not a panic or a different errno.
        match RdmaNetlink::open() {
            Ok(nl) => {
                nl.get_netns_mode().unwrap();
            }
            Err(e) => {
                assert_eq!(e.errno, libc::EPROTONOSUPPORT, "{e}");
                assert_eq!(e.op, "open NETLINK_RDMA socket");
            }
        }
    }
}
