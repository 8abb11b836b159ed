//! NLDEV, the RDMA netlink family (NETLINK_RDMA) that `rdma` from iproute2 speaks: message
//! encoders and reply decoders for the RDMA subsystem's netns mode, the ib device list, a
//! port's netdev, moving an ib device to another netns, and adding and deleting a software
//! RDMA link (a Soft-RoCE device bound to a netdev). The socket is the shared one
//! ([`NlSocket<Rdma>`](crate::kernel::netlink::NlSocket)); the operations built on these
//! messages are in [`rdma_ops`](crate::kernel::rdma_ops).
//!
//! Constants are the uapi values of `rdma/rdma_netlink.h`; a unit test reads them back out of
//! the installed header. Requests are byte-for-byte what iproute2's `rdma` sends (tests compare
//! against captures), and the reply decoders are tested on replies captured from a 6.1 kernel.

use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkHeader, NlasIterator, NLA_TYPE_MASK, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_REQUEST,
};

use super::netlink::NlError;
use super::topology::Guid;

const NLMSG_HDRLEN: usize = 16;

/// RDMA_NL_NLDEV, the "RDMA device interface" client.
pub const RDMA_NL_NLDEV: u16 = 5;

pub const RDMA_NLDEV_CMD_GET: u16 = 1;
pub const RDMA_NLDEV_CMD_SET: u16 = 2;
/// `rdma link add NAME type TYPE netdev IF`: a software RDMA device (rxe, siw) bound to a
/// netdev, which the kernel looks up by name in the requesting socket's netns.
pub const RDMA_NLDEV_CMD_NEWLINK: u16 = 3;
/// `rdma link delete NAME`, by DEV_INDEX; only drivers that allow user unregistration (rxe,
/// siw) accept it.
pub const RDMA_NLDEV_CMD_DELLINK: u16 = 4;
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
/// The software RDMA driver of a NEWLINK (`rxe`, `siw`), a NUL-terminated string.
pub const RDMA_NLDEV_ATTR_LINK_TYPE: u16 = 65;
/// u8: 0 exclusive, 1 shared.
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
/// `ib`, `iw`, `roce`, `usnic`, `opa`.
pub const RDMA_NLDEV_ATTR_DEV_PROTOCOL: u16 = 67;
/// u32: an fd of the sender naming the target netns.
pub const RDMA_NLDEV_NET_NS_FD: u16 = 68;

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

    /// A string with its NUL, as libmnl's `mnl_attr_put_strz` writes it (the kernel's policy
    /// for these attributes is NLA_NUL_STRING).
    fn strz_attr(kind: u16, v: &str) -> DefaultNla {
        let mut bytes = v.as_bytes().to_vec();
        bytes.push(0);
        DefaultNla::new(kind, bytes)
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

    /// `rdma link add <name> type <link_type> netdev <netdev>`.
    pub fn new_link(seq: u32, name: &str, link_type: &str, netdev: &str) -> Vec<u8> {
        let attrs = [
            strz_attr(RDMA_NLDEV_ATTR_DEV_NAME, name),
            strz_attr(RDMA_NLDEV_ATTR_LINK_TYPE, link_type),
            strz_attr(RDMA_NLDEV_ATTR_NDEV_NAME, netdev),
        ];
        frame(RDMA_NLDEV_CMD_NEWLINK, DO, seq, &attrs)
    }

    /// `rdma link delete <name>` after the dump resolved the name.
    pub fn del_link(seq: u32, dev_index: u32) -> Vec<u8> {
        let attrs = [u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, dev_index)];
        frame(RDMA_NLDEV_CMD_DELLINK, DO, seq, &attrs)
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

fn c_string(value: &[u8]) -> String {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

/// The attributes of one NLDEV message, by type (flags masked off).
#[derive(Debug, Default)]
pub struct Attrs(Vec<(u16, Vec<u8>)>);

impl Attrs {
    pub fn parse(payload: &[u8]) -> Result<Attrs, NlError> {
        let mut out = Vec::new();
        for nla in NlasIterator::new(payload) {
            let nla = nla.map_err(|e| NlError::decode(format!("bad attribute: {e}")))?;
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
pub fn decode_dev(payload: &[u8]) -> Result<RdmaDev, NlError> {
    let a = Attrs::parse(payload)?;
    Ok(RdmaDev {
        index: a
            .u32(RDMA_NLDEV_ATTR_DEV_INDEX)
            .ok_or_else(|| NlError::decode("device reply without DEV_INDEX"))?,
        name: a
            .string(RDMA_NLDEV_ATTR_DEV_NAME)
            .ok_or_else(|| NlError::decode("device reply without DEV_NAME"))?,
        port_count: a.u32(RDMA_NLDEV_ATTR_PORT_INDEX).unwrap_or(0),
        node_guid: a.u64(RDMA_NLDEV_ATTR_NODE_GUID).map(Guid),
        protocol: a.string(RDMA_NLDEV_ATTR_DEV_PROTOCOL),
    })
}

/// Decodes a SYS_GET reply into the netns mode.
pub fn decode_netns_mode(payload: &[u8]) -> Result<NetnsMode, NlError> {
    match Attrs::parse(payload)?.u8(RDMA_NLDEV_SYS_ATTR_NETNS_MODE) {
        Some(0) => Ok(NetnsMode::Exclusive),
        Some(1) => Ok(NetnsMode::Shared),
        Some(v) => Err(NlError::decode(format!("unknown netns mode {v}"))),
        None => Err(NlError::decode("SYS_GET reply without NETNS_MODE")),
    }
}

/// Decodes a PORT_GET reply.
pub fn decode_port(payload: &[u8]) -> Result<RdmaPort, NlError> {
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
            .ok_or_else(|| NlError::decode("port reply without DEV_INDEX"))?,
        port: a
            .u32(RDMA_NLDEV_ATTR_PORT_INDEX)
            .ok_or_else(|| NlError::decode("port reply without PORT_INDEX"))?,
        state: a.u8(RDMA_NLDEV_ATTR_PORT_STATE),
        phys_state: a.u8(RDMA_NLDEV_ATTR_PORT_PHYS_STATE),
        netdev,
    })
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
