//! A synchronous netlink socket, generic over the protocol (after netavark's `Socket<P>`):
//! one request at a time, replies matched by sequence number, interrupted dumps restarted.
//!
//! The families the plugin speaks handle a request synchronously inside sendmsg and produce
//! a dump's next part inside our recvmsg, so the reads never wait on anything but the kernel.

use std::io;
use std::marker::PhantomData;

use netlink_packet_core::NLM_F_DUMP_INTR;
use netlink_sys::{protocols, Socket, SocketAddr};
use nix::libc;

use super::message::{messages, NlError, Reply, ReplyMsg};
use crate::kernel::Netns;

/// The kernel sizes each dump datagram from the largest receive buffer it has seen on the
/// socket (capped near 32 KiB in netlink_recvmsg) and otherwise uses NLMSG_GOODSIZE (about
/// a page): reading 32 KiB from the first datagram on makes a large link dump come in a
/// handful of big datagrams instead of one small one per few links, saving one recvmsg
/// round per datagram (measured in docs/benchmarks.md, "Measured once").
const RECV_BUF_START: usize = 32 * 1024;

/// How often a dump is restarted when the kernel flags it inconsistent (NLM_F_DUMP_INTR:
/// the table changed while it was being walked, so entries may be missing or doubled).
const DUMP_ATTEMPTS: usize = 5;

/// A netlink family: what socket(2) is asked for, and the options that differ.
pub trait Protocol {
    /// The NETLINK_* protocol number.
    const NUMBER: isize;
    /// Whether to set NETLINK_GET_STRICT_CHK.
    const STRICT_CHK: bool;
}

/// NETLINK_ROUTE: links, addresses, routes.
pub enum Route {}

impl Protocol for Route {
    const NUMBER: isize = protocols::NETLINK_ROUTE;
    // Strict checking makes the kernel reject malformed GET requests instead of silently
    // ignoring header fields, and honour ifa_index as a dump filter.
    const STRICT_CHK: bool = true;
}

/// NETLINK_RDMA: the NLDEV client (ib devices, ports, the subsystem's netns mode).
pub enum Rdma {}

impl Protocol for Rdma {
    const NUMBER: isize = protocols::NETLINK_RDMA;
    // NLDEV parses every request the same way whatever the flag says; iproute2's `rdma` does
    // not set it either, which keeps our requests comparable with its captures.
    const STRICT_CHK: bool = false;
}

/// NETLINK_SOCK_DIAG: the sockets of a netns (inet_diag), as `ss` reads them.
pub enum SockDiag {}

impl Protocol for SockDiag {
    const NUMBER: isize = protocols::NETLINK_SOCK_DIAG;
    // `ss` does not set it either, which keeps our requests comparable with its captures.
    const STRICT_CHK: bool = false;
}

/// A netlink socket of protocol `P`, acting in the namespace it was created in, whichever
/// thread later uses it.
pub struct NlSocket<P> {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
    protocol: PhantomData<P>,
}

impl<P: Protocol> NlSocket<P> {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Self> {
        Self::configure(Self::create()?)
    }

    /// Opens a socket acting in `ns`: only the socket(2) runs with the thread inside `ns`,
    /// after which the thread goes back to `home` (the namespace it is in, held open by the
    /// caller).
    pub fn open_in(ns: &Netns, home: &Netns) -> io::Result<Self> {
        Self::configure(ns.run_in(home, Self::create)?)
    }

    /// The bare socket(2), which alone fixes the namespace the socket acts in; bind and the
    /// options act on the socket's namespace, not the caller's, so [`NlSocket::configure`]
    /// runs after the thread is back ([`Netns::run_in`] keeps its work to a syscall).
    /// EPROTONOSUPPORT for NETLINK_RDMA means the kernel has no ib_core.
    pub fn create() -> io::Result<Socket> {
        Socket::new(P::NUMBER)
    }

    /// Sets the options, binds and connects a socket from [`NlSocket::create`].
    pub fn configure(mut sock: Socket) -> io::Result<Self> {
        // Without NETLINK_EXT_ACK the kernel drops its explanation (e.g. "mtu greater than
        // device maximum", "Attribute failed policy validation") and only the errno comes back.
        sock.set_ext_ack(true)?;
        if P::STRICT_CHK {
            sock.set_netlink_get_strict_chk(true)?;
        }
        // NETLINK_CAP_ACK: errors echo only our nlmsghdr, not the whole request.
        sock.set_cap_ack(true)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(Self::wrap(sock))
    }

    fn wrap(sock: Socket) -> Self {
        NlSocket {
            sock,
            seq: 0,
            buf: vec![0; RECV_BUF_START],
            protocol: PhantomData,
        }
    }

    /// Sends the request `build(seq)` returns and collects the replies until NLMSG_DONE
    /// (dumps) or the ACK, so every request must ask for one (NLM_F_ACK) unless it is a dump.
    /// A dump the kernel flags as interrupted is sent again, with a new sequence number.
    pub fn request(&mut self, build: impl Fn(u32) -> Vec<u8>) -> Result<Vec<Reply>, NlError> {
        self.request_keeping(build, |_, _| true)
    }

    /// [`NlSocket::request`] keeping only the replies `keep(message_type, payload)` accepts:
    /// the others are neither copied nor decoded (a dump of thousands of links searched for
    /// one address).
    pub fn request_keeping(
        &mut self,
        build: impl Fn(u32) -> Vec<u8>,
        keep: impl Fn(u16, &[u8]) -> bool,
    ) -> Result<Vec<Reply>, NlError> {
        for _ in 0..DUMP_ATTEMPTS {
            let (replies, interrupted) = self.exchange(&build, &keep)?;
            if !interrupted {
                return Ok(replies);
            }
        }
        Err(NlError::errno(
            libc::EINTR,
            format!(
                "dump was interrupted by concurrent changes {DUMP_ATTEMPTS} times in a row \
                 (NLM_F_DUMP_INTR)"
            ),
        ))
    }

    /// One request and its replies; true when a reply carried NLM_F_DUMP_INTR (only dump
    /// parts do).
    fn exchange(
        &mut self,
        build: &dyn Fn(u32) -> Vec<u8>,
        keep: &dyn Fn(u16, &[u8]) -> bool,
    ) -> Result<(Vec<Reply>, bool), NlError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let bytes = build(seq);
        let sent = retry_eintr(|| self.sock.send(&bytes, 0))?;
        if sent != bytes.len() {
            return Err(NlError::errno(
                libc::EIO,
                format!("short netlink send: {sent} of {} bytes", bytes.len()),
            ));
        }

        let mut replies = Vec::new();
        let mut interrupted = false;
        loop {
            let len = self.recv_datagram()?;
            for msg in messages(&self.buf[..len], seq) {
                match msg? {
                    ReplyMsg::Data {
                        message_type,
                        flags,
                        payload,
                    } => {
                        interrupted |= flags & NLM_F_DUMP_INTR != 0;
                        if keep(message_type, payload) {
                            replies.push(Reply {
                                message_type,
                                flags,
                                payload: payload.to_vec(),
                            });
                        }
                    }
                    ReplyMsg::Done | ReplyMsg::Ack => return Ok((replies, interrupted)),
                    ReplyMsg::Error(e) => return Err(e),
                    ReplyMsg::Skip => {}
                }
            }
        }
    }

    /// Reads one datagram into `self.buf`, growing it first if the datagram is larger.
    fn recv_datagram(&mut self) -> Result<usize, NlError> {
        // A zero-length peek with MSG_TRUNC returns the datagram's size without copying it: a
        // dump's data is copied out of the kernel once, by the read below.
        let peek = libc::MSG_PEEK | libc::MSG_TRUNC;
        let want = retry_eintr(|| self.sock.recv(&mut &mut self.buf[..0], peek))?;
        if want > self.buf.len() {
            self.buf.resize(want, 0);
        }
        let got = retry_eintr(|| self.sock.recv(&mut &mut self.buf[..], 0))?;
        Ok(got)
    }
}

/// Repeats a syscall that a signal with a handler interrupted (the test harness, or whatever
/// process embeds the library): the request is still pending in the kernel.
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
