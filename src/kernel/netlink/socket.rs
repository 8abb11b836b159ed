//! A synchronous NETLINK_ROUTE socket: one request at a time, replies matched by sequence
//! number, NLMSG_ERROR turned into an errno plus the kernel's extended-ack text.
//!
//! Replies come back as raw payloads ([`Reply`]); callers decode only the attributes they
//! need (see `decode`), so an attribute a newer kernel encodes differently than
//! netlink-packet-route expects cannot make a whole request or dump fail.

use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator, NLMSG_DONE,
    NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use nix::libc;

/// NLMSGERR_ATTR_MSG (linux/netlink.h): the extended-ack text.
pub const NLMSGERR_ATTR_MSG: u16 = 1;
/// NLMSGERR_ATTR_MISS_TYPE: the attribute the kernel wanted but did not get (5.19+).
const NLMSGERR_ATTR_MISS_TYPE: u16 = 5;

const NLMSG_HDRLEN: usize = 16;

/// The kernel sizes each dump datagram from the largest receive buffer it has seen on the
/// socket (capped near 32 KiB in netlink_recvmsg) and otherwise uses NLMSG_GOODSIZE (about
/// a page). With 32 KiB reads a dump of 2201 links (about 1.1 KiB each without stats) took
/// 81 datagrams on 6.18, about 27 links each instead of 3.
const RECV_BUF_START: usize = 32 * 1024;

/// How often a dump is restarted when the kernel flags it inconsistent (NLM_F_DUMP_INTR:
/// the table changed while it was being walked, so entries may be missing or doubled).
const DUMP_ATTEMPTS: usize = 5;

/// A failed request: positive errno (0 when the reply could not be decoded) and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlError {
    pub errno: i32,
    pub ext_ack: Option<String>,
}

impl NlError {
    pub fn decode(msg: impl Into<String>) -> Self {
        NlError {
            errno: 0,
            ext_ack: Some(msg.into()),
        }
    }

    pub fn errno(errno: i32, msg: impl Into<String>) -> Self {
        NlError {
            errno,
            ext_ack: Some(msg.into()),
        }
    }
}

impl From<io::Error> for NlError {
    fn from(e: io::Error) -> Self {
        NlError {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            ext_ack: None,
        }
    }
}

/// One reply message: its type, netlink flags and payload (the bytes after nlmsghdr).
#[derive(Debug, Clone)]
pub struct Reply {
    pub message_type: u16,
    pub flags: u16,
    pub payload: Vec<u8>,
}

/// Serializes `msg` as one netlink message. NLM_F_REQUEST is always set, and NLM_F_ACK for
/// anything but a dump, so every exchange ends with either NLMSG_DONE or NLMSG_ERROR (an
/// ACK is an NLMSG_ERROR with error 0). The port id stays 0: the kernel addresses replies
/// by the socket's bound port, not by this field.
pub fn frame(msg: RouteNetlinkMessage, flags: u16, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = final_flags(flags);
    header.sequence_number = seq;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);
    buf
}

fn final_flags(flags: u16) -> u16 {
    if flags & NLM_F_DUMP == NLM_F_DUMP {
        NLM_F_REQUEST | flags
    } else {
        NLM_F_REQUEST | NLM_F_ACK | flags
    }
}

/// A NETLINK_ROUTE socket bound in the namespace of the thread that opened it.
pub struct NlSocket {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl NlSocket {
    /// Opens a socket in the calling thread's network namespace. A netlink socket keeps
    /// acting in the namespace it was created in, whichever thread later uses it.
    pub fn open() -> io::Result<NlSocket> {
        NlSocket::configure(NlSocket::create()?)
    }

    /// The bare socket(2), which alone fixes the namespace the socket acts in: it is all that
    /// runs while the thread is inside a pod's namespace
    /// ([`Netns::run_in`](crate::kernel::Netns::run_in)); [`NlSocket::configure`] runs after
    /// the thread is back (bind and the options act on the socket's namespace, not the
    /// caller's).
    pub fn create() -> io::Result<Socket> {
        Socket::new(NETLINK_ROUTE)
    }

    /// Sets the options, binds and connects a socket from [`NlSocket::create`].
    pub fn configure(mut sock: Socket) -> io::Result<NlSocket> {
        // Without NETLINK_EXT_ACK the kernel drops its explanation (e.g. "mtu greater than
        // device maximum") and only the errno comes back.
        sock.set_ext_ack(true)?;
        // Strict checking makes the kernel reject malformed GET requests instead of
        // silently ignoring header fields, and honour ifa_index as a dump filter.
        sock.set_netlink_get_strict_chk(true)?;
        // NETLINK_CAP_ACK: errors echo only our nlmsghdr, not the whole request.
        sock.set_cap_ack(true)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(NlSocket {
            sock,
            seq: 0,
            buf: vec![0; RECV_BUF_START],
        })
    }

    /// Sends `msg` and collects the replies until NLMSG_DONE (dumps) or the ACK.
    ///
    /// rtnetlink handles a request synchronously inside sendmsg, and a dump produces its
    /// next part inside our recvmsg, so the reads never wait on anything but the kernel.
    pub fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<Vec<Reply>, NlError> {
        self.request_keeping(msg, flags, |_, _| true)
    }

    /// [`NlSocket::request`] keeping only the replies `keep(message_type, payload)` accepts:
    /// the others are neither copied nor decoded (a dump of thousands of links searched for
    /// one address).
    pub fn request_keeping(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        keep: impl Fn(u16, &[u8]) -> bool,
    ) -> Result<Vec<Reply>, NlError> {
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        if !dump {
            return self.exchange(msg, flags, &keep).map(|(replies, _)| replies);
        }
        for _ in 0..DUMP_ATTEMPTS {
            let (replies, interrupted) = self.exchange(msg.clone(), flags, &keep)?;
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

    fn exchange(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        keep: &dyn Fn(u16, &[u8]) -> bool,
    ) -> Result<(Vec<Reply>, bool), NlError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let bytes = frame(msg, flags, seq);
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
            let mut offset = 0;
            while offset < len {
                let data = &self.buf[offset..len];
                let msg = NetlinkBuffer::new_checked(data)
                    .map_err(|e| NlError::decode(format!("bad netlink reply: {e}")))?;
                let msg_len = msg.length() as usize;
                offset += align4(msg_len).max(NLMSG_HDRLEN);
                // Leftovers of an earlier request that returned early (an error in the
                // middle of a dump) carry an older sequence number.
                if msg.sequence_number() != seq {
                    continue;
                }
                let msg_flags = msg.flags();
                let payload = msg.payload();
                match msg.message_type() {
                    NLMSG_NOOP => {}
                    NLMSG_OVERRUN => {
                        return Err(NlError::errno(libc::ENOBUFS, "netlink overrun"));
                    }
                    NLMSG_ERROR => {
                        return match parse_error(payload, msg_flags)? {
                            None => Ok((replies, interrupted)),
                            Some(err) => Err(err),
                        };
                    }
                    NLMSG_DONE => {
                        return match parse_done(payload, msg_flags) {
                            None => Ok((replies, interrupted)),
                            Some(err) => Err(err),
                        };
                    }
                    message_type => {
                        interrupted |= msg_flags & NLM_F_DUMP_INTR != 0;
                        if !keep(message_type, payload) {
                            continue;
                        }
                        replies.push(Reply {
                            message_type,
                            flags: msg_flags,
                            payload: payload.to_vec(),
                        });
                    }
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

fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Netlink pads messages and attributes to 4 bytes (NLMSG_ALIGN / NLA_ALIGN).
pub fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Decodes an NLMSG_ERROR payload: `Ok(None)` for an ACK, `Ok(Some(err))` for a refusal.
///
/// Layout (linux/netlink.h, struct nlmsgerr): i32 error, then the request's nlmsghdr and,
/// unless NLM_F_CAPPED, the rest of the request; then, with NLM_F_ACK_TLVS, the
/// NLMSGERR_ATTR_* attributes.
pub fn parse_error(payload: &[u8], flags: u16) -> Result<Option<NlError>, NlError> {
    if payload.len() < 4 {
        return Err(NlError::decode("NLMSG_ERROR shorter than its error code"));
    }
    let code = i32::from_ne_bytes(payload[..4].try_into().expect("4 bytes"));
    if code == 0 {
        return Ok(None);
    }
    let mut tlv_start = 4 + NLMSG_HDRLEN;
    if flags & NLM_F_CAPPED == 0 && payload.len() >= 4 + NLMSG_HDRLEN {
        let echoed = u32::from_ne_bytes(payload[4..8].try_into().expect("4 bytes")) as usize;
        tlv_start = 4 + align4(echoed.max(NLMSG_HDRLEN));
    }
    let ext_ack = if flags & NLM_F_ACK_TLVS != 0 && payload.len() > tlv_start {
        ext_ack_text(&payload[tlv_start..])
    } else {
        None
    };
    Ok(Some(NlError {
        errno: code.saturating_neg(),
        ext_ack,
    }))
}

/// Decodes an NLMSG_DONE payload: i32 status (negative errno when the dump failed), then
/// the extended-ack attributes directly (no echoed header).
pub fn parse_done(payload: &[u8], flags: u16) -> Option<NlError> {
    if payload.len() < 4 {
        // The kernel may send an empty NLMSG_DONE: a clean end.
        return None;
    }
    let code = i32::from_ne_bytes(payload[..4].try_into().expect("4 bytes"));
    if code == 0 {
        return None;
    }
    let ext_ack = if flags & NLM_F_ACK_TLVS != 0 {
        ext_ack_text(&payload[4..])
    } else {
        None
    };
    Some(NlError {
        errno: code.saturating_neg(),
        ext_ack,
    })
}

fn ext_ack_text(tlvs: &[u8]) -> Option<String> {
    let mut msg = None;
    let mut missing = None;
    for nla in NlasIterator::new(tlvs) {
        let Ok(nla) = nla else { break };
        match nla.kind() {
            NLMSGERR_ATTR_MSG => {
                let value = nla.value();
                let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
                msg = Some(String::from_utf8_lossy(&value[..end]).into_owned());
            }
            NLMSGERR_ATTR_MISS_TYPE if nla.value().len() >= 4 => {
                missing = Some(u32::from_ne_bytes(
                    nla.value()[..4].try_into().expect("4 bytes"),
                ));
            }
            _ => {}
        }
    }
    match (msg, missing) {
        (Some(m), Some(t)) => Some(format!("{m} (missing attribute type {t})")),
        (Some(m), None) => Some(m),
        (None, Some(t)) => Some(format!("missing attribute type {t}")),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testutil::nla;

    fn nlmsghdr(len: u32) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&len.to_ne_bytes());
        h.extend_from_slice(&16u16.to_ne_bytes());
        h.extend_from_slice(&5u16.to_ne_bytes());
        h.extend_from_slice(&7u32.to_ne_bytes());
        h.extend_from_slice(&0u32.to_ne_bytes());
        h
    }

    #[test]
    fn ack_is_not_an_error() {
        let mut p = 0i32.to_ne_bytes().to_vec();
        p.extend(nlmsghdr(32));
        assert_eq!(parse_error(&p, NLM_F_CAPPED).unwrap(), None);
    }

    #[test]
    fn capped_error_with_message() {
        let mut p = (-17i32).to_ne_bytes().to_vec();
        p.extend(nlmsghdr(60));
        p.extend(nla(NLMSGERR_ATTR_MSG, b"name in use\0"));
        let err = parse_error(&p, NLM_F_CAPPED | NLM_F_ACK_TLVS)
            .unwrap()
            .unwrap();
        assert_eq!(err.errno, 17);
        assert_eq!(err.ext_ack.as_deref(), Some("name in use"));
    }

    #[test]
    fn uncapped_error_skips_the_echoed_request() {
        // The echoed request is 22 bytes (padded to 24); the TLVs start after it.
        let mut p = (-22i32).to_ne_bytes().to_vec();
        p.extend(nlmsghdr(22));
        p.extend([0xaa; 6]);
        p.extend([0, 0]);
        p.extend(nla(NLMSGERR_ATTR_MSG, b"bad mtu\0"));
        p.extend(nla(NLMSGERR_ATTR_MISS_TYPE, &4u32.to_ne_bytes()));
        let err = parse_error(&p, NLM_F_ACK_TLVS).unwrap().unwrap();
        assert_eq!(err.errno, 22);
        assert_eq!(
            err.ext_ack.as_deref(),
            Some("bad mtu (missing attribute type 4)")
        );
    }

    #[test]
    fn error_without_tlvs_has_no_text() {
        let mut p = (-19i32).to_ne_bytes().to_vec();
        p.extend(nlmsghdr(32));
        let err = parse_error(&p, NLM_F_CAPPED).unwrap().unwrap();
        assert_eq!(
            err,
            NlError {
                errno: 19,
                ext_ack: None
            }
        );
    }

    #[test]
    fn truncated_error_is_a_decode_error() {
        assert_eq!(parse_error(&[1, 2], 0).unwrap_err().errno, 0);
    }

    #[test]
    fn done_carries_dump_errors() {
        assert_eq!(parse_done(&[], 0), None);
        assert_eq!(parse_done(&0i32.to_ne_bytes(), 0), None);
        let mut p = (-22i32).to_ne_bytes().to_vec();
        p.extend(nla(NLMSGERR_ATTR_MSG, b"Invalid header for link dump\0"));
        let err = parse_done(&p, NLM_F_ACK_TLVS).unwrap();
        assert_eq!(err.errno, 22);
        assert_eq!(err.ext_ack.as_deref(), Some("Invalid header for link dump"));
    }

    #[test]
    fn flags_add_ack_except_for_dumps() {
        assert_eq!(final_flags(0), NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(final_flags(NLM_F_DUMP), NLM_F_REQUEST | NLM_F_DUMP);
    }
}
