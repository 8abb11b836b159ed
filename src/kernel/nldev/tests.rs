use super::*;
use crate::kernel::netlink::{messages, Protocol, Rdma, ReplyMsg, NLMSGERR_ATTR_MSG};
use crate::kernel::KernelError;
use crate::testutil::hex;
use crate::testutil::uapi::{assert_header_agrees, header, lit};
use netlink_packet_core::{NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP_INTR};
use nix::libc;

/// Zeroes nlmsg_seq and nlmsg_pid (bytes 8..16), which differ per run.
fn normalized(mut msg: Vec<u8>) -> Vec<u8> {
    msg[8..16].fill(0);
    msg
}

fn seq_of(msg: &[u8]) -> u32 {
    u32::from_ne_bytes(msg[8..12].try_into().unwrap())
}

// ---- constants, read back from the kernel uapi headers ----

/// Every `pub const NAME: u16 = VALUE;` of nldev.rs, so a constant added there is checked
/// against the header without being listed here too.
fn nldev_constants() -> Vec<(&'static str, i64)> {
    include_str!("../nldev.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter(|l| !l.starts_with("fn "))
        .map(|l| {
            let (name, rest) = l.split_once(": u16 = ").expect("a u16 constant");
            let value = rest
                .strip_suffix(';')
                .and_then(lit)
                .expect("a literal value");
            (name, value)
        })
        .collect()
}

#[test]
fn constants_match_the_installed_uapi_headers() {
    assert_header_agrees(
        "/usr/include/linux/netlink.h",
        &[
            ("NETLINK_RDMA", Rdma::NUMBER as i64),
            ("NLMSGERR_ATTR_MSG", NLMSGERR_ATTR_MSG.into()),
            ("NLM_F_CAPPED", NLM_F_CAPPED.into()),
            ("NLM_F_ACK_TLVS", NLM_F_ACK_TLVS.into()),
            ("NLM_F_DUMP_INTR", NLM_F_DUMP_INTR.into()),
        ],
    );
    let ours = nldev_constants();
    // The source read is the one compiled: spot-check a client, a command and an attribute.
    for compiled in [
        ("RDMA_NL_NLDEV", RDMA_NL_NLDEV.into()),
        ("RDMA_NLDEV_CMD_SYS_SET", RDMA_NLDEV_CMD_SYS_SET.into()),
        ("RDMA_NLDEV_NET_NS_FD", RDMA_NLDEV_NET_NS_FD.into()),
    ] {
        assert!(ours.contains(&compiled), "{compiled:?} not in {ours:?}");
    }
    assert_header_agrees("/usr/include/rdma/rdma_netlink.h", &ours);
    // The message type macro itself, so a change of the shift or the operator shows up.
    let text = header("/usr/include/rdma/rdma_netlink.h");
    assert!(
        text.contains("#define RDMA_NL_GET_TYPE(client, op) ((client << 10) + op)"),
        "RDMA_NL_GET_TYPE changed"
    );
    assert_eq!(nldev_type(RDMA_NLDEV_CMD_SYS_SET), 0x1407);
}

// ---- requests, byte for byte against iproute2 ----
//
// Captured with `strace -f -e trace=sendto,sendmsg,recvmsg -e write=all -e read=all -xx`
// around iproute2 6.1.0's `rdma` (Debian 12 package 6.1.0-3, "rdma utility,
// iproute2-6.1.0"). The host kernel (6.18) has no NETLINK_RDMA (socket() fails with
// EPROTONOSUPPORT), so the captures were taken inside a virtme-ng VM running Debian's
// 6.1.0-57-amd64 with `rdma link add rxe0 type rxe netdev v0`.

/// `rdma system show` (its second request; the first is the device dump).
const IPROUTE_SYS_GET: &str = "10000000 06140500 a8e90c6b 00000000";
/// `rdma system set netns exclusive`
const IPROUTE_SYS_SET_EXCLUSIVE: &str = "18000000 07140500 afe90c6b 00000000 05004200 00000000";
/// `rdma system set netns shared`
const IPROUTE_SYS_SET_SHARED: &str = "18000000 07140500 b2e90c6b 00000000 05004200 01000000";
/// The device dump every `rdma` command starts with (`rdma dev show`).
const IPROUTE_DEV_DUMP: &str = "10000000 01140503 a9e90c6b 00000000";
/// `rdma dev show` (its second request, for device index 0).
const IPROUTE_DEV_GET: &str = "18000000 01140500 a9e90c6b 00000000 08000100 00000000";
/// `rdma link show` (its second request: rxe0 = index 0, port 1).
const IPROUTE_PORT_GET: &str =
    "20000000 05140500 aae90c6b 00000000 08000100 00000000 08000300 01000000";
/// `rdma dev set rxe0 netns p1`, where `rdma` had opened /run/netns/p1 as fd 7.
const IPROUTE_DEV_SET_NETNS: &str =
    "20000000 02140500 b6e90c6b 00000000 08000100 00000000 08004400 07000000";

/// `rdma link add rxa type rxe netdev v0` (its second request, after the device dump),
/// captured with `strace -f -e trace=sendto,sendmsg,recvmsg -e write=all` in the same VM:
/// DEV_NAME, LINK_TYPE and NDEV_NAME as NUL-terminated strings, in that order.
const IPROUTE_LINK_ADD: &str = "28000000 03140500 c93f0f6b 00000000 \
    08000200 72786100 08004100 72786500 07003300 76300000";
/// `rdma link delete rxa` (rxa = index 0, resolved by the dump before it).
const IPROUTE_LINK_DELETE: &str = "18000000 04140500 cd3f0f6b 00000000 08000100 00000000";

#[test]
fn requests_match_iproute2_byte_for_byte() {
    let cases: &[(&str, Vec<u8>)] = &[
        (IPROUTE_SYS_GET, request::sys_get(1)),
        (
            IPROUTE_SYS_SET_EXCLUSIVE,
            request::sys_set_netns_mode(2, NetnsMode::Exclusive),
        ),
        (
            IPROUTE_SYS_SET_SHARED,
            request::sys_set_netns_mode(3, NetnsMode::Shared),
        ),
        (IPROUTE_DEV_DUMP, request::dev_dump(4)),
        (IPROUTE_DEV_GET, request::dev_get(5, 0)),
        (IPROUTE_PORT_GET, request::port_get(6, 0, 1)),
        (IPROUTE_DEV_SET_NETNS, request::dev_set_netns(7, 0, 7)),
        (IPROUTE_LINK_ADD, request::new_link(8, "rxa", "rxe", "v0")),
        (IPROUTE_LINK_DELETE, request::del_link(9, 0)),
    ];
    for (captured, ours) in cases {
        assert_eq!(
            normalized(ours.clone()),
            normalized(hex(captured)),
            "captured {captured}"
        );
    }
    // The sequence number lands where the kernel echoes it back from.
    assert_eq!(seq_of(&request::sys_get(0x6b0c_e9a8)), 0x6b0c_e9a8);
}

#[test]
fn attribute_values_are_encoded_as_the_kernel_policy_reads_them() {
    // u32 in host order, padded attributes, lengths without padding.
    let r = request::port_get(9, 0x0102_0304, 2);
    assert_eq!(
        u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize,
        r.len()
    );
    assert_eq!(&r[16..20], &[8, 0, 1, 0]);
    assert_eq!(&r[20..24], &0x0102_0304u32.to_ne_bytes());
    assert_eq!(&r[28..32], &2u32.to_ne_bytes());
    let m = request::sys_set_netns_mode(9, NetnsMode::Shared);
    assert_eq!(&m[16..24], &[5, 0, 66, 0, 1, 0, 0, 0]);
}

// ---- replies captured from the 6.1 kernel ----

/// A device dump entry for rxe0 (index 0, 1 port, node_guid 2861:d6ff:fe59:e610, protocol
/// roce), then NLMSG_DONE; seq 0x6b0ce9a9. Two datagrams, as received.
const REPLY_DEV_DUMP: &str = "6c000000 01140200 a9e90c6b 16010000 \
    08000100 00000000 09000200 72786530 00000000 08000300 01000000 0c000400 763c2201 00000000 \
    0c000600 10e659fe ffd66128 0c000700 10e659fe ffd66128 05000e00 01000000 05005400 00000000 \
    09004300 726f6365 00000000";
const REPLY_DEV_DUMP_DONE: &str = "14000000 03000200 a9e90c6b 16010000 00000000";

/// SYS_GET reply in shared mode (NETNS_MODE 1, plus COPY_ON_FORK and another u8), then the
/// ACK capped to our header; seq 0x6b0ce9a8.
const REPLY_SYS_GET_SHARED: &str = "28000000 06140000 a8e90c6b e42287df \
    05004200 01000000 05006000 00000000 05005d00 01000000";
const REPLY_SYS_GET_ACK: &str =
    "24000000 02000001 a8e90c6b e42287df 00000000 10000000 06140500 a8e90c6b 00000000";
/// The same after `rdma system set netns exclusive`; seq 0x6b0ce9b1.
const REPLY_SYS_GET_EXCLUSIVE: &str = "28000000 06140000 b1e90c6b f61244e9 \
    05004200 00000000 05006000 00000000 05005d00 01000000";

/// PORT_GET reply for rxe0/1: state 4, phys_state 5, netdev v0 with ifindex 3; seq 0x6b0ce9aa.
const REPLY_PORT_GET: &str = "4c000000 01140000 aae90c6b 559034d0 \
    08000100 00000000 09000200 72786530 00000000 08000300 01000000 05000c00 04000000 \
    05000d00 05000000 08003200 03000000 07003300 76300000";

/// `rdma system set netns exclusive` while netns p1 existed: EBUSY; seq 0x6b0ce9b4.
const REPLY_SYS_SET_EBUSY: &str =
    "24000000 02000001 b4e90c6b da67daa3 f0ffffff 18000000 07140500 b4e90c6b 00000000";
/// `rdma dev set rxe0 netns p1` in shared mode: EOPNOTSUPP; seq 0x6b0ce9b6.
const REPLY_DEV_SET_EOPNOTSUPP: &str =
    "24000000 02000001 b6e90c6b 36d8f2e2 a1ffffff 20000000 02140500 b6e90c6b 00000000";

/// Extended acks, from raw NETLINK_RDMA sockets (python, NETLINK_EXT_ACK on) in the same VM:
/// a CMD_GET whose DEV_INDEX is 2 bytes long; seq 4242. Capped (NETLINK_CAP_ACK on):
const REPLY_POLICY_EINVAL_CAPPED: &str = "78000000 02000003 92100000 08010000 eaffffff \
    18000000 01140500 92100000 00000000 \
    27000100 41747472 69627574 65206661 696c6564 20706f6c 69637920 76616c69 64617469 6f6e0000 \
    08000200 10000000 24000480 0c000400 00000000 00000000 0c000500 ffffffff 00000000 \
    08000100 04000000";
/// The same without NETLINK_CAP_ACK: the whole request is echoed before the attributes.
const REPLY_POLICY_EINVAL_UNCAPPED: &str = "80000000 02000002 92100000 08010000 eaffffff \
    18000000 01140500 92100000 00000000 06000100 00000000 \
    27000100 41747472 69627574 65206661 696c6564 20706f6c 69637920 76616c69 64617469 6f6e0000 \
    08000200 10000000 24000480 0c000400 00000000 00000000 0c000500 ffffffff 00000000 \
    08000100 04000000";
/// PORT_GET for port 2 of one-port rxe0: plain EINVAL, no text.
const REPLY_PORT_GET_EINVAL: &str =
    "24000000 02000001 92100000 08010000 eaffffff 20000000 05140500 92100000 00000000";
/// CMD_SET with NET_NS_FD 999 (not an open fd): EBADF.
const REPLY_DEV_SET_EBADF: &str =
    "24000000 02000001 92100000 08010000 f7ffffff 20000000 02140500 92100000 00000000";

/// The messages of a captured datagram addressed to `seq`.
fn parse(datagram: &[u8], seq: u32) -> Result<Vec<ReplyMsg<'_>>, NlError> {
    messages(datagram, seq).collect()
}

fn data(text: &str, seq: u32) -> Vec<u8> {
    let bytes = hex(text);
    match parse(&bytes, seq).unwrap().as_slice() {
        [ReplyMsg::Data { payload, .. }] => payload.to_vec(),
        other => panic!("expected one data message, got {other:?}"),
    }
}

fn failure(text: &str, seq: u32) -> NlError {
    match parse(&hex(text), seq).unwrap().as_slice() {
        [ReplyMsg::Error(f)] => f.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn device_dump_reply_decodes() {
    let bytes = hex(REPLY_DEV_DUMP);
    let msgs = parse(&bytes, 0x6b0c_e9a9).unwrap();
    let [ReplyMsg::Data {
        message_type,
        flags,
        ..
    }] = msgs.as_slice()
    else {
        panic!("{msgs:?}")
    };
    assert_eq!(*message_type, nldev_type(RDMA_NLDEV_CMD_GET));
    assert_eq!(flags & netlink_packet_core::NLM_F_MULTIPART, 2);
    let dev = decode_dev(&data(REPLY_DEV_DUMP, 0x6b0c_e9a9)).unwrap();
    assert_eq!(
        dev,
        RdmaDev {
            index: 0,
            name: "rxe0".into(),
            port_count: 1,
            node_guid: Some("2861:d6ff:fe59:e610".parse().unwrap()),
            protocol: Some("roce".into()),
        }
    );
    assert_eq!(
        parse(&hex(REPLY_DEV_DUMP_DONE), 0x6b0c_e9a9).unwrap(),
        vec![ReplyMsg::Done]
    );
}

#[test]
fn replies_for_other_sequence_numbers_are_skipped() {
    assert_eq!(
        parse(&hex(REPLY_DEV_DUMP), 1).unwrap(),
        vec![ReplyMsg::Skip]
    );
    // Two messages in one datagram are both seen.
    let mut two = hex(REPLY_SYS_GET_SHARED);
    two.extend(hex(REPLY_SYS_GET_ACK));
    let msgs = parse(&two, 0x6b0c_e9a8).unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1], ReplyMsg::Ack);
}

#[test]
fn netns_mode_replies_decode() {
    let shared = data(REPLY_SYS_GET_SHARED, 0x6b0c_e9a8);
    assert_eq!(decode_netns_mode(&shared).unwrap(), NetnsMode::Shared);
    let excl = data(REPLY_SYS_GET_EXCLUSIVE, 0x6b0c_e9b1);
    assert_eq!(decode_netns_mode(&excl).unwrap(), NetnsMode::Exclusive);
    assert_eq!(
        parse(&hex(REPLY_SYS_GET_ACK), 0x6b0c_e9a8).unwrap(),
        vec![ReplyMsg::Ack]
    );
    assert_eq!(decode_netns_mode(&[]).unwrap_err().errno, 0);
}

#[test]
fn port_reply_decodes_with_its_netdev() {
    let p = decode_port(&data(REPLY_PORT_GET, 0x6b0c_e9aa)).unwrap();
    assert_eq!(
        p,
        RdmaPort {
            dev_index: 0,
            port: 1,
            state: Some(4),
            phys_state: Some(5),
            netdev: Some((3, "v0".into())),
        }
    );
}

/// NEWLINK refusals on 6.1 (iproute2's requests, replies capped to their header): the name
/// `rxa` taken, on netdev v1: ENFILE (the core's duplicate-name answer; Linux 7.3 answers
/// EEXIST, shared/notes/rdma-kernel-facts.md); a second link on v0,
/// which has one: EEXIST (rxe's); netdev `nosuch`: ENODEV; type `nosuchtype`, no such
/// module: EINVAL.
const REPLY_LINK_ADD_NAME_TAKEN: &str =
    "24000000 02000001 ca3f0f6b 3787d5fa e9ffffff 28000000 03140500 ca3f0f6b 00000000";
const REPLY_LINK_ADD_NETDEV_HAS_ONE: &str =
    "24000000 02000001 cc3f0f6b d2222e8c efffffff 28000000 03140500 cc3f0f6b 00000000";
const REPLY_LINK_ADD_NO_NETDEV: &str =
    "24000000 02000001 5d3f0f6b 7fa1f4e8 edffffff 2c000000 03140500 5d3f0f6b 00000000";
const REPLY_LINK_ADD_NO_DRIVER: &str =
    "24000000 02000001 5e3f0f6b 63b87ed8 eaffffff 30000000 03140500 5e3f0f6b 00000000";

#[test]
fn kernel_refusals_decode_to_errno() {
    assert_eq!(
        failure(REPLY_SYS_SET_EBUSY, 0x6b0c_e9b4),
        NlError {
            errno: libc::EBUSY,
            ext_ack: None
        }
    );
    assert_eq!(
        failure(REPLY_DEV_SET_EOPNOTSUPP, 0x6b0c_e9b6).errno,
        libc::EOPNOTSUPP
    );
    assert_eq!(failure(REPLY_PORT_GET_EINVAL, 4242).errno, libc::EINVAL);
    assert_eq!(failure(REPLY_DEV_SET_EBADF, 4242).errno, libc::EBADF);
    for (reply, seq, errno) in [
        (REPLY_LINK_ADD_NAME_TAKEN, 0x6b0f_3fca, libc::ENFILE),
        (REPLY_LINK_ADD_NETDEV_HAS_ONE, 0x6b0f_3fcc, libc::EEXIST),
        (REPLY_LINK_ADD_NO_NETDEV, 0x6b0f_3f5d, libc::ENODEV),
        (REPLY_LINK_ADD_NO_DRIVER, 0x6b0f_3f5e, libc::EINVAL),
    ] {
        assert_eq!(failure(reply, seq).errno, errno, "{reply}");
    }
}

#[test]
fn extended_acks_decode_capped_and_uncapped() {
    for reply in [REPLY_POLICY_EINVAL_CAPPED, REPLY_POLICY_EINVAL_UNCAPPED] {
        assert_eq!(
            failure(reply, 4242),
            NlError {
                errno: libc::EINVAL,
                ext_ack: Some("Attribute failed policy validation".into()),
            }
        );
    }
}

#[test]
fn kernel_errors_carry_op_target_and_netns() {
    let error = |f| {
        KernelError::netlink(
            "set RDMA netns mode to Exclusive",
            "rdma subsystem",
            "host netns",
            f,
        )
    };
    let e = error(failure(REPLY_SYS_SET_EBUSY, 0x6b0c_e9b4));
    assert!(e.is_errno(nix::errno::Errno::EBUSY));
    assert_eq!(
        e.to_string(),
        "set RDMA netns mode to Exclusive on rdma subsystem in host netns failed: \
         Device or resource busy (EBUSY)"
    );
    let e = error(failure(REPLY_POLICY_EINVAL_CAPPED, 4242));
    assert!(
        e.to_string()
            .ends_with(": Attribute failed policy validation"),
        "{e}"
    );
}

#[test]
fn malformed_replies_are_decode_errors() {
    assert_eq!(parse(&[1, 2, 3], 0).unwrap_err().errno, 0);
    // Length field larger than the datagram.
    let mut cut = hex(REPLY_PORT_GET);
    cut.truncate(40);
    assert_eq!(parse(&cut, 0x6b0c_e9aa).unwrap_err().errno, 0);
    // A device message without its name.
    assert!(decode_dev(&hex("08000100 00000000")).is_err());
}
