use super::*;
use crate::kernel::netlink::{messages, ReplyMsg};
use crate::testutil::hex;
use crate::testutil::uapi::assert_header_agrees;

// ---- constants, read back from the kernel uapi headers ----

#[test]
fn constants_match_the_installed_uapi_headers() {
    // rtnetlink.h interleaves `#define RTM_X RTM_X` with its enum, which the header reader does
    // not follow: the value is read as written.
    let rtnetlink = crate::testutil::uapi::header("/usr/include/linux/rtnetlink.h");
    assert!(
        rtnetlink.contains(&format!("RTM_GETDCB = {RTM_GETDCB},")),
        "RTM_GETDCB changed"
    );
    assert_header_agrees(
        "/usr/include/linux/dcbnl.h",
        &[
            ("DCB_CMD_IEEE_GET", DCB_CMD_IEEE_GET.into()),
            ("DCB_ATTR_IFNAME", DCB_ATTR_IFNAME.into()),
            ("DCB_ATTR_IEEE", DCB_ATTR_IEEE.into()),
            ("DCB_ATTR_DCBX", DCB_ATTR_DCBX.into()),
            ("DCB_ATTR_IEEE_PFC", DCB_ATTR_IEEE_PFC.into()),
            ("DCB_ATTR_IEEE_APP_TABLE", DCB_ATTR_IEEE_APP_TABLE.into()),
            ("DCB_ATTR_IEEE_APP", DCB_ATTR_IEEE_APP.into()),
            (
                "IEEE_8021QAZ_APP_SEL_DSCP",
                IEEE_8021QAZ_APP_SEL_DSCP.into(),
            ),
        ],
    );
}

// ---- the request, byte for byte against iproute2 ----
//
// Captured on the 6.18 host with `strace -f -e trace=sendto,recvmsg -e write=all -e read=all
// dcb pfc show dev qv0` (iproute2 6.1.0, "dcb utility, iproute2-6.1.0") on a veth end qv0;
// `dcb app show` sends the same request. A veth has no DCB: the reply is EOPNOTSUPP.

/// `dcb pfc show dev qv0`
const DCB_PFC_SHOW: &str = "1c000000 4e000500 c589116b 00000000 00150000 08000100 71763000";
/// Its reply on a veth: NLMSG_ERROR -EOPNOTSUPP, the request's header echoed (NLM_F_CAPPED).
const EOPNOTSUPP_REPLY: &str =
    "24000000 02000001 c589116b 54550000 a1ffffff 1c000000 4e000500 c589116b 00000000";

#[test]
fn the_request_is_what_dcb_sends() {
    assert_eq!(ieee_get(0x6b11_89c5, "qv0"), hex(DCB_PFC_SHOW));
    // A name whose NUL leaves the attribute unaligned is padded, its length not (the shim's
    // capture of `dcb pfc show dev lo`, tests/netlink_root.rs).
    assert_eq!(
        ieee_get(0x6b11_8a4e, "lo"),
        hex("1c000000 4e000500 4e8a116b 00000000 00150000 07000100 6c6f0000")
    );
}

#[test]
fn a_netdev_without_dcb_answers_eopnotsupp() {
    let datagram = hex(EOPNOTSUPP_REPLY);
    let msgs: Vec<_> = messages(&datagram, 0x6b11_89c5).collect();
    let [Ok(ReplyMsg::Error(e))] = msgs.as_slice() else {
        panic!("{msgs:?}")
    };
    assert_eq!(e.errno, libc::EOPNOTSUPP);
}

// ---- replies: tests/data/dcb (build.py), each read by iproute2's dcb as well ----

/// The payload (dcbmsg and attributes) of a fixture reply.
fn payload(fixture: &str) -> Vec<u8> {
    let datagram = hex(fixture);
    let msgs: Vec<_> = messages(&datagram, 0).collect();
    let [Ok(ReplyMsg::Data {
        message_type,
        payload,
        ..
    })] = msgs.as_slice()
    else {
        panic!("{msgs:?}")
    };
    assert_eq!(*message_type, RTM_GETDCB);
    payload.to_vec()
}

const LOSSLESS: &str = include_str!("../../../tests/data/dcb/mlx5-lossless.hex");
const PCP_NO_PFC: &str = include_str!("../../../tests/data/dcb/mlx5-pcp-no-pfc.hex");
const DSCP26_PRIO0: &str = include_str!("../../../tests/data/dcb/mlx5-dscp26-prio0.hex");

#[test]
fn a_lossless_port_reads_pfc_on_3_and_the_default_dscp_map() {
    let d = decode_ieee(&payload(LOSSLESS)).unwrap();
    assert_eq!(d.pfc, Some((8, 0x08)));
    assert!(d.pfc_enabled(3) && !d.pfc_enabled(0) && !d.pfc_enabled(4));
    assert!(d.trusts_dscp());
    assert_eq!(d.apps.len(), 64);
    for dscp in 0..64u8 {
        assert_eq!(d.dscp_priorities(dscp), vec![dscp >> 3], "DSCP {dscp}");
    }
    assert_eq!(d.dcbx, Some(0x0d));
}

#[test]
fn a_port_as_it_comes_trusts_pcp_and_pauses_nothing() {
    let d = decode_ieee(&payload(PCP_NO_PFC)).unwrap();
    assert_eq!(d.pfc, Some((8, 0)));
    assert!(!d.pfc_enabled(3));
    assert!(!d.trusts_dscp());
    assert!(d.dscp_priorities(26).is_empty());
}

#[test]
fn a_moved_dscp_reads_its_own_priority() {
    let d = decode_ieee(&payload(DSCP26_PRIO0)).unwrap();
    assert_eq!(d.dscp_priorities(26), vec![0]);
    assert_eq!(d.dscp_priorities(27), vec![3]);
}

#[test]
fn a_malformed_reply_is_named() {
    let mut p = payload(LOSSLESS);
    p[1] = 22;
    let e = decode_ieee(&p).unwrap_err();
    assert!(
        e.ext_ack
            .as_deref()
            .is_some_and(|m| m.contains("command 22")),
        "{e:?}"
    );
    let e = decode_ieee(&[0, 21]).unwrap_err();
    assert!(
        e.ext_ack
            .as_deref()
            .is_some_and(|m| m.contains("no dcbmsg")),
        "{e:?}"
    );
    // A PFC attribute cut to 4 bytes.
    let mut ieee = crate::testutil::nla(DCB_ATTR_IEEE_PFC, &[8, 8, 0, 0]);
    ieee = crate::testutil::nla(DCB_ATTR_IEEE, &ieee);
    let mut short = vec![0, DCB_CMD_IEEE_GET, 0, 0];
    short.extend(ieee);
    let e = decode_ieee(&short).unwrap_err();
    assert!(
        e.ext_ack
            .as_deref()
            .is_some_and(|m| m.contains("PFC of 4 bytes")),
        "{e:?}"
    );
}
