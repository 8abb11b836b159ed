//! Reply datagrams, as every netlink family frames them: messages matched by sequence number,
//! NLMSG_ERROR and NLMSG_DONE turned into an errno plus the kernel's extended-ack text.

use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NlasIterator, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN,
    NLM_F_ACK_TLVS, NLM_F_CAPPED,
};
use nix::libc;

/// NLMSGERR_ATTR_MSG (linux/netlink.h): the extended-ack text.
pub const NLMSGERR_ATTR_MSG: u16 = 1;
/// NLMSGERR_ATTR_MISS_TYPE: the attribute the kernel wanted but did not get (5.19+).
const NLMSGERR_ATTR_MISS_TYPE: u16 = 5;

pub(super) const NLMSG_HDRLEN: usize = 16;

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

/// One message of a reply datagram, its payload still in the receive buffer: the exchange
/// loop copies only the data messages its caller keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyMsg<'a> {
    /// A message of the family (RTM_NEWLINK, an NLDEV reply...).
    Data {
        message_type: u16,
        flags: u16,
        payload: &'a [u8],
    },
    /// NLMSG_DONE: the end of a dump.
    Done,
    /// NLMSG_ERROR with error 0.
    Ack,
    /// NLMSG_ERROR, a failed NLMSG_DONE or NLMSG_OVERRUN.
    Error(NlError),
    /// NLMSG_NOOP, or a leftover of an earlier request that returned early (an error in the
    /// middle of a dump): it carries an older sequence number.
    Skip,
}

/// The messages of one datagram, those of other sequence numbers than `seq` as
/// [`ReplyMsg::Skip`]. A malformed message ends the iteration with its error.
pub fn messages(datagram: &[u8], seq: u32) -> Messages<'_> {
    Messages {
        buf: datagram,
        offset: 0,
        seq,
    }
}

pub struct Messages<'a> {
    buf: &'a [u8],
    offset: usize,
    seq: u32,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<ReplyMsg<'a>, NlError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.offset >= self.buf.len() {
            return None;
        }
        let buf: &'a [u8] = self.buf;
        let msg = match NetlinkBuffer::new_checked(&buf[self.offset..]) {
            Ok(msg) => msg,
            Err(e) => {
                self.offset = buf.len();
                return Some(Err(NlError::decode(format!("bad netlink reply: {e}"))));
            }
        };
        let start = self.offset;
        let len = msg.length() as usize;
        self.offset += align4(len).max(NLMSG_HDRLEN);
        if msg.sequence_number() != self.seq {
            return Some(Ok(ReplyMsg::Skip));
        }
        let flags = msg.flags();
        // new_checked made sure the message lies within the datagram.
        let payload = &buf[start + NLMSG_HDRLEN..start + len];
        Some(Ok(match msg.message_type() {
            NLMSG_NOOP => ReplyMsg::Skip,
            NLMSG_OVERRUN => ReplyMsg::Error(NlError::errno(libc::ENOBUFS, "netlink overrun")),
            NLMSG_ERROR => match parse_error(payload, flags) {
                Ok(None) => ReplyMsg::Ack,
                Ok(Some(e)) => ReplyMsg::Error(e),
                Err(e) => return Some(Err(e)),
            },
            NLMSG_DONE => match parse_done(payload, flags) {
                None => ReplyMsg::Done,
                Some(e) => ReplyMsg::Error(e),
            },
            message_type => ReplyMsg::Data {
                message_type,
                flags,
                payload,
            },
        }))
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
}
