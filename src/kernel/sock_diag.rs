//! NETLINK_SOCK_DIAG (inet_diag), as `ss -uan` asks it: the UDP sockets of a network namespace,
//! dumped per address family from a socket opened in that namespace. The plugin asks it one
//! question, whether something is bound to a UDP port there: Soft-RoCE (rdma_rxe) receives
//! RoCE v2 on UDP 4791, and only kernels that open that socket in the netns of the rxe device's
//! netdev (Linux 7.1 and later) deliver RoCE traffic to a pod.
//!
//! The request is byte for byte what iproute2's `ss -uan` sends (a test compares it with a
//! capture); the reply decoder reads the fixed `inet_diag_msg` header only.

use netlink_packet_core::{NetlinkHeader, NLM_F_DUMP, NLM_F_REQUEST};
use nix::libc;

use super::netlink::{NlError, NlSocket, SockDiag};

const NLMSG_HDRLEN: usize = 16;

/// SOCK_DIAG_BY_FAMILY (linux/sock_diag.h): the request and reply type of inet_diag.
pub const SOCK_DIAG_BY_FAMILY: u16 = 20;

/// Every TCP state bit `ss -a` asks for (`SS_ALL`): an unconnected UDP socket is in state
/// TCP_CLOSE, a connected one in TCP_ESTABLISHED.
const ALL_STATES: u32 = 0xfff;

/// sizeof(struct inet_diag_req_v2).
const REQ_LEN: usize = 56;

/// sizeof(struct inet_diag_msg).
const MSG_LEN: usize = 72;

/// One socket of a dump: its family and local port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiagSocket {
    pub family: u8,
    pub local_port: u16,
}

/// A dump of every UDP socket of `family` (AF_INET, AF_INET6) in the socket's netns.
pub fn udp_dump(seq: u32, family: u8) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.length = (NLMSG_HDRLEN + REQ_LEN) as u32;
    header.message_type = SOCK_DIAG_BY_FAMILY;
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = seq;
    let mut buf = vec![0u8; NLMSG_HDRLEN + REQ_LEN];
    netlink_packet_core::Emitable::emit(&header, &mut buf[..NLMSG_HDRLEN]);
    let req = &mut buf[NLMSG_HDRLEN..];
    req[0] = family;
    req[1] = libc::IPPROTO_UDP as u8;
    // idiag_ext 0 (no extensions asked), pad 0, then the state mask; the socket id stays zero:
    // a dump ignores it.
    req[4..8].copy_from_slice(&ALL_STATES.to_ne_bytes());
    buf
}

/// Decodes the `inet_diag_msg` at the start of a SOCK_DIAG_BY_FAMILY reply.
pub fn decode_socket(payload: &[u8]) -> Result<DiagSocket, NlError> {
    if payload.len() < MSG_LEN {
        return Err(NlError::decode(format!(
            "inet_diag reply of {} bytes, shorter than inet_diag_msg ({MSG_LEN})",
            payload.len()
        )));
    }
    Ok(DiagSocket {
        family: payload[0],
        // idiag_sport is big-endian, after family, state, timer and retrans.
        local_port: u16::from_be_bytes([payload[4], payload[5]]),
    })
}

/// Whether a UDP socket of either family is bound to `port` in the netns `sock` acts in. A
/// kernel without IPv6 answers the AF_INET6 dump with ENOENT (no handler): no socket there.
pub fn udp_port_bound(sock: &mut NlSocket<SockDiag>, port: u16) -> Result<bool, NlError> {
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        let replies = match sock.request(|seq| udp_dump(seq, family)) {
            Ok(r) => r,
            Err(e) if family == libc::AF_INET6 as u8 && e.errno == libc::ENOENT => continue,
            Err(e) => return Err(e),
        };
        for reply in replies {
            if decode_socket(&reply.payload)?.local_port == port {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::netlink::{messages, Protocol, ReplyMsg};
    use crate::testutil::hex;
    use crate::testutil::uapi::assert_header_agrees;

    // Captured on the 6.18 host with `strace -e trace=sendmsg,recvmsg -e read=all -e
    // write=all ss -uan` (iproute2 6.1.0) in a netns where a Python process had bound UDP
    // 4791 on 0.0.0.0 and on :: (IPV6_V6ONLY); seq 0x0001e240, port id 0x0853.

    /// `ss -uan`, its AF_INET request.
    const SS_UDP4: &str = "48000000 14000103 40e20100 00000000 02110000 ff0f0000 \
        00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 \
        00000000 00000000 00000000";
    /// Its AF_INET6 request.
    const SS_UDP6: &str = "48000000 14000103 40e20100 00000000 0a110000 ff0f0000 \
        00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 \
        00000000 00000000 00000000";
    /// The AF_INET reply: 0.0.0.0:4791 in TCP_CLOSE, inode 1311038, with the attributes
    /// SHUTDOWN, MARK, CGROUP_ID and SOCKOPT; then NLMSG_DONE.
    const REPLY_UDP4: &str = "7c000000 14000200 40e20100 53080000 \
        02070000 12b70000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 \
        00000000 00000000 21000000 00000000 00000000 00000000 00000000 00000000 3e011400 \
        05000800 00000000 08000f00 00000000 0c001500 01000000 00000000 06001600 50000000";
    const REPLY_DONE: &str = "14000000 03000200 40e20100 53080000 00000000";
    /// The AF_INET6 reply: [::]:4791, inode 1311039, SKV6ONLY 1 among the attributes.
    const REPLY_UDP6: &str = "84000000 14000200 40e20100 53080000 \
        0a070000 12b70000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 \
        00000000 00000000 22000000 00000000 00000000 00000000 00000000 00000000 3f011400 \
        05000800 00000000 05000b00 01000000 08000f00 00000000 0c001500 01000000 00000000 \
        06001600 10000000";

    #[test]
    fn the_dump_request_is_what_ss_sends() {
        for (captured, family) in [(SS_UDP4, libc::AF_INET), (SS_UDP6, libc::AF_INET6)] {
            let ours = udp_dump(0x0001_e240, family as u8);
            assert_eq!(ours, hex(captured), "{captured}");
        }
    }

    #[test]
    fn captured_replies_name_the_bound_port_and_family() {
        for (captured, family) in [(REPLY_UDP4, libc::AF_INET), (REPLY_UDP6, libc::AF_INET6)] {
            let datagram = hex(captured);
            let msgs: Vec<_> = messages(&datagram, 0x0001_e240).collect();
            let [Ok(ReplyMsg::Data {
                message_type,
                payload,
                ..
            })] = msgs.as_slice()
            else {
                panic!("{msgs:?}")
            };
            assert_eq!(*message_type, SOCK_DIAG_BY_FAMILY);
            let socket = decode_socket(payload).unwrap();
            assert_eq!(
                socket,
                DiagSocket {
                    family: family as u8,
                    local_port: 4791
                }
            );
        }
        let done = hex(REPLY_DONE);
        assert!(matches!(
            messages(&done, 0x0001_e240).next(),
            Some(Ok(ReplyMsg::Done))
        ));
        let err = decode_socket(&hex(REPLY_UDP4)[16..40]).unwrap_err();
        assert!(
            err.ext_ack
                .as_deref()
                .is_some_and(|m| m.contains("shorter")),
            "{err:?}"
        );
    }

    #[test]
    fn constants_match_the_installed_uapi_headers() {
        assert_header_agrees(
            "/usr/include/linux/sock_diag.h",
            &[("SOCK_DIAG_BY_FAMILY", SOCK_DIAG_BY_FAMILY.into())],
        );
        assert_header_agrees(
            "/usr/include/linux/netlink.h",
            &[("NETLINK_SOCK_DIAG", SockDiag::NUMBER as i64)],
        );
    }
}
