//! A small typed NETLINK_RDMA client for the NLDEV family: the RDMA subsystem's netns mode,
//! the ib device list, a port's netdev, and moving an ib device to another netns.
//!
//! Constants are the uapi values of `rdma/rdma_netlink.h`; a unit test reads them back out of
//! the installed header. Requests are byte-for-byte what iproute2's `rdma` sends (tests compare
//! against captures), and the reply decoders are tested on replies captured from a 6.1 kernel.
//!
//! A netlink socket acts in the netns it was created in (NLDEV handlers use the socket's
//! `sock_net`), so [`RdmaNetlink::open_in`] creates the socket on a thread inside the target
//! netns; the calling thread never changes namespace.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkBuffer, NetlinkHeader, NlasIterator, NLA_TYPE_MASK, NLMSG_DONE,
    NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_sys::{Socket, SocketAddr};

use crate::kernel::netlink::{parse_done, parse_error};
use nix::libc;

use super::topology::Guid;
use super::{KResult, KernelError, Netns, Ns};

/// linux/netlink.h
pub const NETLINK_RDMA: isize = 20;
/// RDMA_NL_NLDEV, the "RDMA device interface" client.
pub const RDMA_NL_NLDEV: u16 = 5;

pub const RDMA_NLDEV_CMD_GET: u16 = 1;
pub const RDMA_NLDEV_CMD_SET: u16 = 2;
pub const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
pub const RDMA_NLDEV_CMD_SYS_SET: u16 = 7;

pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
/// In CMD_GET replies: the number of ports; in port messages: the port (from 1).
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
/// Host byte order u64.
pub const RDMA_NLDEV_ATTR_NODE_GUID: u16 = 6;
pub const RDMA_NLDEV_ATTR_PORT_STATE: u16 = 12;
pub const RDMA_NLDEV_ATTR_PORT_PHYS_STATE: u16 = 13;
pub const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50;
pub const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51;
/// u8: 0 exclusive, 1 shared.
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
/// `ib`, `iw`, `roce`, `usnic`, `opa`.
pub const RDMA_NLDEV_ATTR_DEV_PROTOCOL: u16 = 67;
/// u32: an fd of the sender naming the target netns.
pub const RDMA_NLDEV_NET_NS_FD: u16 = 68;

const NLMSG_HDRLEN: usize = 16;
/// NLDEV dumps restarted when the kernel flags them inconsistent (NLM_F_DUMP_INTR).
const DUMP_ATTEMPTS: usize = 3;

/// RDMA_NL_GET_TYPE(client, op) = (client << 10) + op.
pub const fn nldev_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

/// How the RDMA subsystem shares ib devices between network namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// Each ib device lives in exactly one netns and can be moved
    /// (`ib_core netns_mode=0`, `rdma system set netns exclusive`).
    Exclusive,
    /// Every netns sees every ib device (the default).
    Shared,
}

impl NetnsMode {
    fn to_u8(self) -> u8 {
        match self {
            NetnsMode::Exclusive => 0,
            NetnsMode::Shared => 1,
        }
    }
}

/// An ib device as NLDEV reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDev {
    pub index: u32,
    pub name: String,
    /// PORT_INDEX in a device reply: how many ports the device has.
    pub port_count: u32,
    pub node_guid: Option<Guid>,
    pub protocol: Option<String>,
}

/// One port as NLDEV reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    pub dev_index: u32,
    pub port: u32,
    /// IB port state (4 = ACTIVE), as sysfs `ports/N/state` numbers it.
    pub state: Option<u8>,
    pub phys_state: Option<u8>,
    /// The netdev (ifindex, name); the kernel sends it only for RoCE/iWARP ports whose
    /// netdev is in the requesting socket's netns (nldev.c `fill_port_info`).
    pub netdev: Option<(u32, String)>,
}

/// Request encoders, public so tests compare them with iproute2's bytes.
pub mod request {
    use super::*;

    /// Frames one NLDEV request: nlmsghdr (port id 0: the kernel addresses replies by the
    /// socket's bound port) followed by the attributes, each padded to 4 bytes.
    pub fn frame(op: u16, flags: u16, seq: u32, attrs: &[DefaultNla]) -> Vec<u8> {
        let payload_len = attrs.buffer_len();
        let mut header = NetlinkHeader::default();
        header.length = (NLMSG_HDRLEN + payload_len) as u32;
        header.message_type = nldev_type(op);
        header.flags = flags;
        header.sequence_number = seq;
        let mut buf = vec![0u8; NLMSG_HDRLEN + payload_len];
        header.emit(&mut buf[..NLMSG_HDRLEN]);
        attrs.emit(&mut buf[NLMSG_HDRLEN..]);
        buf
    }

    fn u32_attr(kind: u16, v: u32) -> DefaultNla {
        DefaultNla::new(kind, v.to_ne_bytes().to_vec())
    }

    const DO: u16 = NLM_F_REQUEST | NLM_F_ACK;
    const DUMP: u16 = NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP;

    /// `rdma system show`
    pub fn sys_get(seq: u32) -> Vec<u8> {
        frame(RDMA_NLDEV_CMD_SYS_GET, DO, seq, &[])
    }

    /// `rdma system set netns {exclusive|shared}`
    pub fn sys_set_netns_mode(seq: u32, mode: NetnsMode) -> Vec<u8> {
        let attr = DefaultNla::new(RDMA_NLDEV_SYS_ATTR_NETNS_MODE, vec![mode.to_u8()]);
        frame(RDMA_NLDEV_CMD_SYS_SET, DO, seq, &[attr])
    }

    /// The device dump every `rdma` command starts with.
    pub fn dev_dump(seq: u32) -> Vec<u8> {
        frame(RDMA_NLDEV_CMD_GET, DUMP, seq, &[])
    }

    /// `rdma dev show <dev>` after the dump resolved the name.
    pub fn dev_get(seq: u32, dev_index: u32) -> Vec<u8> {
        let attrs = [u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, dev_index)];
        frame(RDMA_NLDEV_CMD_GET, DO, seq, &attrs)
    }

    /// `rdma link show <dev>/<port>`
    pub fn port_get(seq: u32, dev_index: u32, port: u32) -> Vec<u8> {
        let attrs = [
            u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, dev_index),
            u32_attr(RDMA_NLDEV_ATTR_PORT_INDEX, port),
        ];
        frame(RDMA_NLDEV_CMD_PORT_GET, DO, seq, &attrs)
    }

    /// `rdma dev set <dev> netns <name>` (the fd is the sender's, opened on the netns file).
    pub fn dev_set_netns(seq: u32, dev_index: u32, netns_fd: u32) -> Vec<u8> {
        let attrs = [
            u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, dev_index),
            u32_attr(RDMA_NLDEV_NET_NS_FD, netns_fd),
        ];
        frame(RDMA_NLDEV_CMD_SET, DO, seq, &attrs)
    }
}

/// A refusal or an undecodable reply, before it is given its context: the same NLMSG_ERROR /
/// NLMSG_DONE decoding as rtnetlink's (src/kernel/netlink/socket.rs).
pub type Failure = crate::kernel::netlink::NlError;

/// One decoded message of a reply datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyMsg {
    /// An NLDEV message: its type, flags and attribute bytes.
    Data {
        message_type: u16,
        flags: u16,
        payload: Vec<u8>,
    },
    /// NLMSG_DONE: the end of a dump.
    Done,
    /// NLMSG_ERROR with error 0.
    Ack,
    /// NLMSG_ERROR (or a failed NLMSG_DONE) with its errno and extended ack.
    Error(Failure),
    /// NLMSG_NOOP, or a message for another sequence number.
    Skip,
}

/// Splits a datagram into its messages, keeping only those for `seq`.
pub fn parse_datagram(buf: &[u8], seq: u32) -> Result<Vec<ReplyMsg>, Failure> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < buf.len() {
        let msg = NetlinkBuffer::new_checked(&buf[offset..])
            .map_err(|e| Failure::decode(format!("bad netlink reply: {e}")))?;
        offset += crate::kernel::netlink::align4(msg.length() as usize).max(NLMSG_HDRLEN);
        if msg.sequence_number() != seq {
            out.push(ReplyMsg::Skip);
            continue;
        }
        let flags = msg.flags();
        let payload = msg.payload();
        out.push(match msg.message_type() {
            NLMSG_NOOP => ReplyMsg::Skip,
            NLMSG_OVERRUN => ReplyMsg::Error(Failure {
                errno: libc::ENOBUFS,
                ext_ack: Some("netlink overrun".into()),
            }),
            NLMSG_ERROR => match parse_error(payload, flags)? {
                None => ReplyMsg::Ack,
                Some(f) => ReplyMsg::Error(f),
            },
            NLMSG_DONE => match parse_done(payload, flags) {
                None => ReplyMsg::Done,
                Some(f) => ReplyMsg::Error(f),
            },
            message_type => ReplyMsg::Data {
                message_type,
                flags,
                payload: payload.to_vec(),
            },
        });
    }
    Ok(out)
}

fn c_string(value: &[u8]) -> String {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

/// The attributes of one NLDEV message, by type (flags masked off).
#[derive(Debug, Default)]
pub struct Attrs(Vec<(u16, Vec<u8>)>);

impl Attrs {
    pub fn parse(payload: &[u8]) -> Result<Attrs, Failure> {
        let mut out = Vec::new();
        for nla in NlasIterator::new(payload) {
            let nla = nla.map_err(|e| Failure::decode(format!("bad attribute: {e}")))?;
            out.push((nla.kind() & NLA_TYPE_MASK, nla.value().to_vec()));
        }
        Ok(Attrs(out))
    }

    fn get(&self, kind: u16) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, v)| v.as_slice())
    }

    fn u8(&self, kind: u16) -> Option<u8> {
        self.get(kind).and_then(|v| v.first().copied())
    }

    fn u32(&self, kind: u16) -> Option<u32> {
        let v = self.get(kind)?;
        Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
    }

    fn u64(&self, kind: u16) -> Option<u64> {
        let v = self.get(kind)?;
        Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))
    }

    fn string(&self, kind: u16) -> Option<String> {
        self.get(kind).map(c_string)
    }
}

/// Decodes an NLDEV device message (CMD_GET reply or dump entry).
pub fn decode_dev(payload: &[u8]) -> Result<RdmaDev, Failure> {
    let a = Attrs::parse(payload)?;
    Ok(RdmaDev {
        index: a
            .u32(RDMA_NLDEV_ATTR_DEV_INDEX)
            .ok_or_else(|| Failure::decode("device reply without DEV_INDEX"))?,
        name: a
            .string(RDMA_NLDEV_ATTR_DEV_NAME)
            .ok_or_else(|| Failure::decode("device reply without DEV_NAME"))?,
        port_count: a.u32(RDMA_NLDEV_ATTR_PORT_INDEX).unwrap_or(0),
        node_guid: a.u64(RDMA_NLDEV_ATTR_NODE_GUID).map(Guid),
        protocol: a.string(RDMA_NLDEV_ATTR_DEV_PROTOCOL),
    })
}

/// Decodes a SYS_GET reply into the netns mode.
pub fn decode_netns_mode(payload: &[u8]) -> Result<NetnsMode, Failure> {
    match Attrs::parse(payload)?.u8(RDMA_NLDEV_SYS_ATTR_NETNS_MODE) {
        Some(0) => Ok(NetnsMode::Exclusive),
        Some(1) => Ok(NetnsMode::Shared),
        Some(v) => Err(Failure::decode(format!("unknown netns mode {v}"))),
        None => Err(Failure::decode("SYS_GET reply without NETNS_MODE")),
    }
}

/// Decodes a PORT_GET reply.
pub fn decode_port(payload: &[u8]) -> Result<RdmaPort, Failure> {
    let a = Attrs::parse(payload)?;
    let netdev = match (
        a.u32(RDMA_NLDEV_ATTR_NDEV_INDEX),
        a.string(RDMA_NLDEV_ATTR_NDEV_NAME),
    ) {
        (Some(i), Some(n)) => Some((i, n)),
        _ => None,
    };
    Ok(RdmaPort {
        dev_index: a
            .u32(RDMA_NLDEV_ATTR_DEV_INDEX)
            .ok_or_else(|| Failure::decode("port reply without DEV_INDEX"))?,
        port: a
            .u32(RDMA_NLDEV_ATTR_PORT_INDEX)
            .ok_or_else(|| Failure::decode("port reply without PORT_INDEX"))?,
        state: a.u8(RDMA_NLDEV_ATTR_PORT_STATE),
        phys_state: a.u8(RDMA_NLDEV_ATTR_PORT_PHYS_STATE),
        netdev,
    })
}

/// A NETLINK_RDMA socket, acting in the netns it was opened in.
pub struct RdmaNetlink {
    sock: Socket,
    seq: Cell<u32>,
    /// For error messages: `host netns` or `netns /run/netns/x`.
    netns: String,
}

impl RdmaNetlink {
    /// Opens a socket in the calling thread's netns.
    pub fn open() -> KResult<RdmaNetlink> {
        let netns = Ns::Host.to_string();
        Self::open_socket()
            .map_err(|e| open_error(e, &netns))
            .map(|sock| RdmaNetlink {
                sock,
                seq: Cell::new(0),
                netns,
            })
    }

    /// Opens a socket inside `ns` (created on a thread that joined it).
    pub fn open_in(ns: &Netns) -> KResult<RdmaNetlink> {
        let netns = Ns::Pod(ns).to_string();
        Netns::current()
            .and_then(|home| ns.run_in(&home, Self::open_socket))
            .map_err(|e| open_error(e, &netns))
            .map(|sock| RdmaNetlink {
                sock,
                seq: Cell::new(0),
                netns,
            })
    }

    fn open_socket() -> io::Result<Socket> {
        // EPROTONOSUPPORT here means the kernel has no ib_core (no RDMA netlink).
        let mut sock = Socket::new(NETLINK_RDMA)?;
        // Without NETLINK_EXT_ACK the kernel drops its explanation (policy failures such as
        // "Attribute failed policy validation") and only the errno comes back.
        sock.set_ext_ack(true)?;
        // NETLINK_CAP_ACK: errors echo only our nlmsghdr, as iproute2 asks too.
        sock.set_cap_ack(true)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(sock)
    }

    /// `rdma system show`: the subsystem's netns mode.
    pub fn get_netns_mode(&self) -> KResult<NetnsMode> {
        let ctx = Ctx::new("read RDMA netns mode", "rdma subsystem", &self.netns);
        let replies = self.exchange(request::sys_get, &ctx)?;
        let payload = single(replies, &ctx)?;
        decode_netns_mode(&payload).map_err(|f| ctx.error(f))
    }

    /// `rdma system set netns {exclusive|shared}`. The kernel refuses with EBUSY while any
    /// netns besides init_net exists (device.c `rdma_compatdev_set`; seen on 6.1).
    pub fn set_netns_mode(&self, mode: NetnsMode) -> KResult<()> {
        let op = format!("set RDMA netns mode to {mode:?}");
        let ctx = Ctx::new(&op, "rdma subsystem", &self.netns);
        self.exchange(|seq| request::sys_set_netns_mode(seq, mode), &ctx)
            .map(|_| ())
    }

    /// Every ib device visible in this socket's netns (in exclusive mode only those that
    /// live there).
    pub fn devices(&self) -> KResult<Vec<RdmaDev>> {
        let ctx = Ctx::new("list ib devices", "rdma subsystem", &self.netns);
        for _ in 0..DUMP_ATTEMPTS {
            let replies = self.exchange(request::dev_dump, &ctx)?;
            if replies
                .iter()
                .any(|(flags, _)| flags & NLM_F_DUMP_INTR != 0)
            {
                continue;
            }
            return replies
                .into_iter()
                .map(|(_, p)| decode_dev(&p).map_err(|f| ctx.error(f)))
                .collect();
        }
        Err(ctx.error(Failure {
            errno: libc::EINTR,
            ext_ack: Some(format!(
                "device dump interrupted by concurrent changes {DUMP_ATTEMPTS} times"
            )),
        }))
    }

    /// The device named `name`, or None. NLDEV looks devices up by index only (nldev.c
    /// `nldev_get_doit` requires DEV_INDEX), so this filters the dump, as `rdma` does.
    pub fn device_by_name(&self, name: &str) -> KResult<Option<RdmaDev>> {
        Ok(self.devices()?.into_iter().find(|d| d.name == name))
    }

    /// The device with index `dev_index`; EINVAL from the kernel when there is none.
    pub fn device(&self, dev_index: u32) -> KResult<RdmaDev> {
        let target = format!("ib device index {dev_index}");
        let ctx = Ctx::new("get ib device", &target, &self.netns);
        let replies = self.exchange(|seq| request::dev_get(seq, dev_index), &ctx)?;
        decode_dev(&single(replies, &ctx)?).map_err(|f| ctx.error(f))
    }

    /// One port's state and netdev; EINVAL from the kernel for an unknown device or port.
    pub fn port(&self, dev_index: u32, port: u32) -> KResult<RdmaPort> {
        let target = format!("ib device index {dev_index} port {port}");
        let ctx = Ctx::new("get ib port", &target, &self.netns);
        let replies = self.exchange(|seq| request::port_get(seq, dev_index, port), &ctx)?;
        decode_port(&single(replies, &ctx)?).map_err(|f| ctx.error(f))
    }

    /// The netdev (ifindex, name) of a port, as `rdma link` shows it; None for IB ports and
    /// when the netdev is in another netns.
    pub fn port_netdev(&self, dev_index: u32, port: u32) -> KResult<Option<(u32, String)>> {
        Ok(self.port(dev_index, port)?.netdev)
    }

    /// Moves an ib device into the netns `netns_fd` refers to (`rdma dev set X netns Y`).
    /// The kernel refuses with EOPNOTSUPP in shared mode and for drivers that cannot
    /// disassociate user contexts (rxe), and with EPERM without CAP_NET_ADMIN over the
    /// target (device.c `ib_device_set_netns_put`).
    pub fn move_device_to_netns(&self, dev_index: u32, netns_fd: BorrowedFd<'_>) -> KResult<()> {
        let target = format!("ib device index {dev_index}");
        let ctx = Ctx::new("move ib device to netns", &target, &self.netns);
        let fd = netns_fd.as_raw_fd() as u32;
        self.exchange(|seq| request::dev_set_netns(seq, dev_index, fd), &ctx)
            .map(|_| ())
    }

    /// Sends one request and collects the data messages (with their flags) until the ACK or,
    /// for dumps, NLMSG_DONE. NLDEV handles requests synchronously inside sendmsg and
    /// produces dump parts inside recvmsg, so the reads only wait on the kernel.
    fn exchange(
        &self,
        build: impl FnOnce(u32) -> Vec<u8>,
        ctx: &Ctx<'_>,
    ) -> KResult<Vec<(u16, Vec<u8>)>> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let bytes = build(seq);
        let sent = retry_eintr(|| self.sock.send(&bytes, 0)).map_err(|e| ctx.io(e))?;
        if sent != bytes.len() {
            return Err(ctx.error(Failure {
                errno: libc::EIO,
                ext_ack: Some(format!("short send: {sent} of {} bytes", bytes.len())),
            }));
        }
        let mut data = Vec::new();
        loop {
            let datagram = self.recv_datagram().map_err(|e| ctx.io(e))?;
            for msg in parse_datagram(&datagram, seq).map_err(|f| ctx.error(f))? {
                match msg {
                    ReplyMsg::Data { flags, payload, .. } => data.push((flags, payload)),
                    ReplyMsg::Done | ReplyMsg::Ack => return Ok(data),
                    ReplyMsg::Error(f) => return Err(ctx.error(f)),
                    ReplyMsg::Skip => {}
                }
            }
        }
    }

    fn recv_datagram(&self) -> io::Result<Vec<u8>> {
        let mut probe = [0u8; 0];
        let want = retry_eintr(|| {
            self.sock
                .recv(&mut &mut probe[..], libc::MSG_PEEK | libc::MSG_TRUNC)
        })?;
        let mut buf = vec![0u8; want.max(NLMSG_HDRLEN)];
        let got = retry_eintr(|| self.sock.recv(&mut &mut buf[..], 0))?;
        buf.truncate(got);
        Ok(buf)
    }
}

/// What a request was, for its errors.
struct Ctx<'a> {
    op: &'a str,
    target: &'a str,
    netns: &'a str,
}

impl<'a> Ctx<'a> {
    fn new(op: &'a str, target: &'a str, netns: &'a str) -> Self {
        Ctx { op, target, netns }
    }

    fn error(&self, f: Failure) -> KernelError {
        KernelError {
            op: self.op.to_string(),
            target: self.target.to_string(),
            netns: self.netns.to_string(),
            errno: f.errno,
            ext_ack: f.ext_ack,
        }
    }

    fn io(&self, e: io::Error) -> KernelError {
        self.error(Failure {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            ext_ack: None,
        })
    }
}

fn open_error(e: io::Error, netns: &str) -> KernelError {
    KernelError {
        op: "open NETLINK_RDMA socket".to_string(),
        target: "rdma subsystem".to_string(),
        netns: netns.to_string(),
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        ext_ack: None,
    }
}

/// The one data message a non-dump request answers with.
fn single(mut replies: Vec<(u16, Vec<u8>)>, ctx: &Ctx<'_>) -> KResult<Vec<u8>> {
    match replies.len() {
        1 => Ok(replies.pop().expect("one reply").1),
        n => Err(ctx.error(Failure::decode(format!(
            "expected one reply message, got {n}"
        )))),
    }
}

fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests;
