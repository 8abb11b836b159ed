//! DCB netlink (rtnetlink's RTM_GETDCB, `net/dcb/dcbnl.c`), as iproute2's `dcb` asks it: a
//! netdev's IEEE 802.1Qaz configuration, of which `doctor` reads the PFC enables and the APP
//! table (the DSCP-to-priority map a port trusting DSCP classifies RoCE by). Read-only: the
//! one request is DCB_CMD_IEEE_GET.
//!
//! Only devices whose driver has DCB ops answer (mlx5 installs them on the PF and uplink
//! representor, not on VFs or SFs); every other netdev, a veth or a bridge, answers
//! EOPNOTSUPP, which [`query`] turns into None. No crate implements the family: the request
//! is built on netlink-packet-core's header and the reply read with its NLA iterator, each
//! compared with iproute2's bytes in the tests.

use netlink_packet_core::{NetlinkHeader, NlasIterator, NLM_F_ACK, NLM_F_REQUEST};
use nix::libc;

use super::netlink::{NlError, NlSocket, Route};

const NLMSG_HDRLEN: usize = 16;

/// RTM_GETDCB (linux/rtnetlink.h): the request's and the reply's type.
pub const RTM_GETDCB: u16 = 78;
/// DCB_CMD_IEEE_GET (linux/dcbnl.h `enum dcbnl_commands`).
pub const DCB_CMD_IEEE_GET: u8 = 21;
/// `enum dcbnl_attrs`.
pub const DCB_ATTR_IFNAME: u16 = 1;
pub const DCB_ATTR_IEEE: u16 = 13;
pub const DCB_ATTR_DCBX: u16 = 14;
/// `enum ieee_attrs`, nested in DCB_ATTR_IEEE.
pub const DCB_ATTR_IEEE_PFC: u16 = 2;
pub const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
/// `enum ieee_attrs_app`, nested in DCB_ATTR_IEEE_APP_TABLE: an APP entry of an IEEE selector.
pub const DCB_ATTR_IEEE_APP: u16 = 1;
/// The APP selector of DSCP entries (`IEEE_8021QAZ_APP_SEL_DSCP`).
pub const IEEE_8021QAZ_APP_SEL_DSCP: u8 = 5;

/// sizeof(struct dcbmsg): family, command, two bytes of padding.
const DCBMSG_LEN: usize = 4;

/// One entry of the APP table (`struct dcb_app`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcbApp {
    pub selector: u8,
    pub priority: u8,
    /// The DSCP for selector [`IEEE_8021QAZ_APP_SEL_DSCP`].
    pub protocol: u16,
}

/// What DCB_CMD_IEEE_GET reports of a netdev.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DcbIeee {
    /// `struct ieee_pfc`'s `pfc_cap` and `pfc_en` (a bit per priority), when the driver
    /// reports PFC.
    pub pfc: Option<(u8, u8)>,
    /// The APP table: every entry the kernel holds for the netdev (dcbnl.c fills it from its
    /// own list, which the driver's setapp calls keep).
    pub apps: Vec<DcbApp>,
    /// DCB_ATTR_DCBX: the DCBX mode bits (DCB_CAP_DCBX_HOST 0x1, LLD_MANAGED 0x2, VER_CEE
    /// 0x4, VER_IEEE 0x8), when the driver reports them.
    pub dcbx: Option<u8>,
}

impl DcbIeee {
    /// Whether PFC is on for `priority`.
    pub fn pfc_enabled(&self, priority: u8) -> bool {
        self.pfc.is_some_and(|(_, en)| en & (1 << priority) != 0)
    }

    /// The priorities the APP table maps `dscp` to (one, when the table is consistent).
    pub fn dscp_priorities(&self, dscp: u8) -> Vec<u8> {
        self.apps
            .iter()
            .filter(|a| a.selector == IEEE_8021QAZ_APP_SEL_DSCP && a.protocol == u16::from(dscp))
            .map(|a| a.priority)
            .collect()
    }

    /// Whether the table holds any DSCP entry: mlx5 keeps all 64 while the port trusts DSCP
    /// and none while it trusts PCP (en_dcbnl.c `mlx5e_dcbnl_dscp_app`).
    pub fn trusts_dscp(&self) -> bool {
        self.apps
            .iter()
            .any(|a| a.selector == IEEE_8021QAZ_APP_SEL_DSCP)
    }
}

/// DCB_CMD_IEEE_GET of `ifname`, as `dcb pfc show dev IFNAME` sends it (NLM_F_ACK, the name
/// with its NUL).
pub fn ieee_get(seq: u32, ifname: &str) -> Vec<u8> {
    let mut attr = Vec::new();
    let name_len = ifname.len() + 1;
    attr.extend_from_slice(&((4 + name_len) as u16).to_ne_bytes());
    attr.extend_from_slice(&DCB_ATTR_IFNAME.to_ne_bytes());
    attr.extend_from_slice(ifname.as_bytes());
    attr.push(0);
    while attr.len() % 4 != 0 {
        attr.push(0);
    }
    let mut header = NetlinkHeader::default();
    header.length = (NLMSG_HDRLEN + DCBMSG_LEN + attr.len()) as u32;
    header.message_type = RTM_GETDCB;
    header.flags = NLM_F_REQUEST | NLM_F_ACK;
    header.sequence_number = seq;
    let mut buf = vec![0u8; NLMSG_HDRLEN];
    netlink_packet_core::Emitable::emit(&header, &mut buf[..]);
    buf.extend_from_slice(&[libc::AF_UNSPEC as u8, DCB_CMD_IEEE_GET, 0, 0]);
    buf.extend_from_slice(&attr);
    buf
}

/// Decodes the payload (dcbmsg and attributes) of the reply to [`ieee_get`].
pub fn decode_ieee(payload: &[u8]) -> Result<DcbIeee, NlError> {
    let bad = |what: String| NlError::decode(format!("DCB IEEE reply: {what}"));
    let head = payload
        .get(..DCBMSG_LEN)
        .ok_or_else(|| bad(format!("{} bytes, no dcbmsg", payload.len())))?;
    if head[1] != DCB_CMD_IEEE_GET {
        return Err(bad(format!("command {}, not DCB_CMD_IEEE_GET", head[1])));
    }
    let mut out = DcbIeee::default();
    for nla in NlasIterator::new(&payload[DCBMSG_LEN..]) {
        let nla = nla.map_err(|e| bad(format!("attributes: {e}")))?;
        match nla.kind() {
            DCB_ATTR_IEEE => decode_nested_ieee(nla.value(), &mut out).map_err(bad)?,
            DCB_ATTR_DCBX => out.dcbx = nla.value().first().copied(),
            _ => {}
        }
    }
    Ok(out)
}

fn decode_nested_ieee(value: &[u8], out: &mut DcbIeee) -> Result<(), String> {
    for nla in NlasIterator::new(value) {
        let nla = nla.map_err(|e| format!("DCB_ATTR_IEEE: {e}"))?;
        match nla.kind() {
            DCB_ATTR_IEEE_PFC => {
                let v = nla.value();
                // pfc_cap, pfc_en, mbc, then delay at 4: a shorter one is no ieee_pfc.
                if v.len() < 6 {
                    return Err(format!("DCB_ATTR_IEEE_PFC of {} bytes", v.len()));
                }
                out.pfc = Some((v[0], v[1]));
            }
            DCB_ATTR_IEEE_APP_TABLE => {
                for app in NlasIterator::new(nla.value()) {
                    let app = app.map_err(|e| format!("DCB_ATTR_IEEE_APP_TABLE: {e}"))?;
                    // DCB_ATTR_DCB_APP (2) carries selectors of no IEEE standard (PCP).
                    if app.kind() != DCB_ATTR_IEEE_APP {
                        continue;
                    }
                    let v = app.value();
                    if v.len() < 4 {
                        return Err(format!("an APP entry of {} bytes", v.len()));
                    }
                    out.apps.push(DcbApp {
                        selector: v[0],
                        priority: v[1],
                        protocol: u16::from_ne_bytes([v[2], v[3]]),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The IEEE DCB configuration of `ifname` in the socket's netns; None when its driver has no
/// DCB (EOPNOTSUPP: a veth, a bridge, a VF).
pub fn query(sock: &mut NlSocket<Route>, ifname: &str) -> Result<Option<DcbIeee>, NlError> {
    let replies = match sock.request(|seq| ieee_get(seq, ifname)) {
        Ok(r) => r,
        Err(e) if e.errno == libc::EOPNOTSUPP => return Ok(None),
        Err(e) => return Err(e),
    };
    let reply = replies
        .into_iter()
        .find(|r| r.message_type == RTM_GETDCB)
        .ok_or_else(|| NlError::decode("no RTM_GETDCB reply to DCB_CMD_IEEE_GET"))?;
    decode_ieee(&reply.payload).map(Some)
}

#[cfg(test)]
mod tests;
