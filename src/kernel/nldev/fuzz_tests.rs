//! Property-based fuzz tests of the NLDEV reply decoders: datagrams of several messages with
//! corrupted lengths, types, flags and sequence numbers, and device, port and system replies
//! built from NLDEV attributes. Case counts and the deep mode: docs/testing.md, "Fuzzing".

use proptest::prelude::*;

use netlink_packet_core::{NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_DUMP_INTR};

use super::*;
use crate::error::Error;
use crate::kernel::netlink::{messages, NlError, ReplyMsg};
use crate::kernel::rtnetlink::fuzz_tests::{encode, nlas};
use crate::kernel::KernelError;
use crate::testutil::fuzz::{self, check_rejection};

const SEQ: u32 = 7;

/// The attributes the decoders read, plus a few neighbours.
fn nldev_kinds() -> Vec<u16> {
    vec![
        RDMA_NLDEV_ATTR_DEV_INDEX,
        RDMA_NLDEV_ATTR_DEV_NAME,
        RDMA_NLDEV_ATTR_PORT_INDEX,
        RDMA_NLDEV_ATTR_NODE_GUID,
        RDMA_NLDEV_ATTR_PORT_STATE,
        RDMA_NLDEV_ATTR_PORT_PHYS_STATE,
        RDMA_NLDEV_ATTR_NDEV_INDEX,
        RDMA_NLDEV_ATTR_NDEV_NAME,
        RDMA_NLDEV_SYS_ATTR_NETNS_MODE,
        RDMA_NLDEV_ATTR_DEV_PROTOCOL,
        4,
        5,
    ]
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    (nlas(nldev_kinds()), fuzz::byte_edits(2))
        .prop_map(|(attrs, edits)| fuzz::apply_byte_edits(encode(&attrs), &edits))
}

/// One message: nlmsghdr (length possibly wrong) and its payload.
fn message() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        Just(NLMSG_NOOP),
        Just(NLMSG_ERROR),
        Just(NLMSG_DONE),
        Just(NLMSG_OVERRUN),
        Just(nldev_type(RDMA_NLDEV_CMD_GET)),
        Just(nldev_type(RDMA_NLDEV_CMD_PORT_GET)),
        Just(nldev_type(RDMA_NLDEV_CMD_SYS_GET)),
        any::<u16>(),
    ];
    let body =
        prop_oneof![
            payload(),
            (prop_oneof![Just(0i32), -200i32..0, any::<i32>()], payload())
                .prop_map(|(code, rest)| [code.to_ne_bytes().to_vec(), rest].concat()),
        ];
    (
        kind,
        prop_oneof![
            Just(0u16),
            Just(NLM_F_DUMP_INTR),
            Just(0x100),
            Just(0x200),
            any::<u16>()
        ],
        prop_oneof![4 => Just(SEQ), 1 => any::<u32>()],
        body,
        prop_oneof![8 => Just(0i64), 1 => -20i64..20, 1 => any::<u32>().prop_map(i64::from)],
    )
        .prop_map(|(kind, flags, seq, body, delta)| {
            let len = (16 + body.len() as i64 + delta).clamp(0, i64::from(u32::MAX)) as u32;
            let mut out = len.to_ne_bytes().to_vec();
            out.extend_from_slice(&kind.to_ne_bytes());
            out.extend_from_slice(&flags.to_ne_bytes());
            out.extend_from_slice(&seq.to_ne_bytes());
            out.extend_from_slice(&0u32.to_ne_bytes());
            out.extend(body);
            while out.len() % 4 != 0 {
                out.push(0);
            }
            out
        })
}

fn datagram() -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(message(), 0..5), fuzz::byte_edits(2))
        .prop_map(|(msgs, edits)| fuzz::apply_byte_edits(msgs.concat(), &edits))
}

/// A refusal becomes code 105 with its errno or the decoder's text.
fn reported(f: NlError) -> Result<(), TestCaseError> {
    prop_assert!(
        f.errno != 0 || f.ext_ack.as_deref().is_some_and(|m| !m.is_empty()),
        "{:?}",
        f
    );
    let err = Error::kernel(
        "list ib devices",
        KernelError::netlink("list ib devices", "rdma subsystem", "host netns", f),
    );
    check_rejection(&err, &[105])
}

proptest! {
    #![proptest_config(fuzz::config(3000))]

    /// A datagram splits into at most one message per 16 bytes; every data message then goes
    /// through each decoder.
    #[test]
    fn datagram_and_replies_never_panic(buf in prop_oneof![6 => datagram(), 1 => fuzz::bytes()]) {
        let mut count = 0;
        for m in messages(&buf, SEQ) {
            count += 1;
            match m {
                Ok(ReplyMsg::Data { payload, .. }) => {
                    prop_assert!(payload.len() <= buf.len());
                    decode_all(payload)?;
                }
                Ok(ReplyMsg::Error(f)) | Err(f) => reported(f)?,
                Ok(ReplyMsg::Done | ReplyMsg::Ack | ReplyMsg::Skip) => {}
            }
        }
        prop_assert!(count <= buf.len() / 16 + 1);
    }

    /// Device, port and system replies straight from attributes.
    #[test]
    fn nldev_decoders_never_panic(p in prop_oneof![6 => payload(), 1 => fuzz::bytes()]) {
        decode_all(&p)?;
    }
}

fn decode_all(p: &[u8]) -> Result<(), TestCaseError> {
    match decode_dev(p) {
        Ok(dev) => prop_assert!(!dev.name.contains('\0')),
        Err(f) => reported(f)?,
    }
    match decode_port(p) {
        Ok(port) => {
            if let Some((_, name)) = port.netdev {
                prop_assert!(!name.contains('\0'));
            }
        }
        Err(f) => reported(f)?,
    }
    if let Err(f) = decode_netns_mode(p) {
        reported(f)?;
    }
    Ok(())
}
