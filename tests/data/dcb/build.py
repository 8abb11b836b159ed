#!/usr/bin/env python3
"""Writes the DCB_CMD_IEEE_GET replies of tests/data/dcb/*.hex: the datagram a kernel sends for
`dcb pfc show dev ens1f0np0` on an mlx5 PF (no NIC here answers DCB: a veth, a bridge and
rxe's netdev answer EOPNOTSUPP), laid out as net/dcb/dcbnl.c's dcbnl_ieee_fill writes it for
mlx5's ops (en_dcbnl.c): DCB_ATTR_IFNAME, DCB_ATTR_IEEE { ETS, MAXRATE, PFC, DCB_BUFFER,
APP_TABLE { one DCB_ATTR_IEEE_APP per entry }, REWR_TABLE (empty, NLA_F_NESTED) }, DCB_ATTR_DCBX.
The structs are those of linux/dcbnl.h (ieee_ets 59 bytes, ieee_maxrate 64, ieee_pfc 136 with
its padding, dcbnl_buffer 44, dcb_app 4), native endian, little here.

tests/support/dcb-replay.c feeds each to iproute2's `dcb` (netlink_root.rs's
`dcb_reads_the_fixture_replies_as_the_doctor_does`), whose output must say what the file says.

usage: tests/data/dcb/build.py   (rewrites the .hex files beside it)
"""
import os
import struct

RTM_GETDCB, NLM_F_REQUEST, NLM_F_ACK = 78, 1, 4
DCB_CMD_IEEE_GET = 21
DCB_ATTR_IFNAME, DCB_ATTR_IEEE, DCB_ATTR_DCBX = 1, 13, 14
IEEE_ETS, IEEE_PFC, IEEE_APP_TABLE, IEEE_MAXRATE, DCB_BUFFER, REWR_TABLE = 1, 2, 3, 7, 10, 12
IEEE_APP, SEL_DSCP, NLA_F_NESTED = 1, 5, 0x8000
TSA_VENDOR = 255


def nla(kind, value):
    out = struct.pack("=HH", 4 + len(value), kind) + value
    return out + b"\0" * (-len(out) % 4)


def ets():
    # willing, ets_cap, cbs, then tc_tx_bw, tc_rx_bw, tc_tsa, prio_tc, tc_reco_bw,
    # tc_reco_tsa, reco_prio_tc: mlnx_qos's "tsa: vendor", priority 0 on tc 1.
    prio_tc = [1, 0, 2, 3, 4, 5, 6, 7]
    return bytes([0, 8, 0] + [0] * 8 + [0] * 8 + [TSA_VENDOR] * 8 + prio_tc + [0] * 24)


def pfc(enabled):
    # pfc_cap, pfc_en, mbc, pad, delay (u16), pad, requests[8], indications[8] (u64)
    return struct.pack("=BBBxHxx8Q8Q", 8, enabled, 0, 7, *([0] * 16))


def buffer():
    prio2buffer = [0, 0, 0, 1, 0, 0, 0, 0]
    sizes = [130944, 130944, 0, 0, 0, 0, 0, 0]
    return bytes(prio2buffer) + struct.pack("=8I", *sizes) + struct.pack("=I", 261888)


def app(priority, dscp):
    return nla(IEEE_APP, struct.pack("=BBH", SEL_DSCP, priority, dscp))


def reply(enabled, dscp_map):
    ieee = nla(IEEE_ETS, ets()) + nla(IEEE_MAXRATE, bytes(64)) + nla(IEEE_PFC, pfc(enabled))
    ieee += nla(DCB_BUFFER, buffer())
    # dcbnl's APP list puts each new entry first; mlx5 adds DSCP 0 to 63 in order.
    apps = b"".join(app(dscp_map[d], d) for d in reversed(range(64))) if dscp_map else b""
    ieee += nla(IEEE_APP_TABLE, apps) + nla(REWR_TABLE | NLA_F_NESTED, b"")
    body = struct.pack("=BBH", 0, DCB_CMD_IEEE_GET, 0)
    body += nla(DCB_ATTR_IFNAME, b"ens1f0np0\0") + nla(DCB_ATTR_IEEE, ieee)
    # DCB_CAP_DCBX_HOST | VER_CEE | VER_IEEE: mlnx_qos's "DCBX mode: OS controlled".
    body += nla(DCB_ATTR_DCBX, bytes([0x0D]))
    # The sequence number and port id are the request's and the socket's: the tests set them.
    return struct.pack("=IHHII", 16 + len(body), RTM_GETDCB, NLM_F_REQUEST | NLM_F_ACK, 0, 0) + body


def hex_text(data):
    words = [data[i:i + 4].hex() for i in range(0, len(data), 4)]
    return "\n".join(" ".join(words[i:i + 8]) for i in range(0, len(words), 8)) + "\n"


DEFAULT_MAP = {d: d >> 3 for d in range(64)}
FILES = {
    # trust dscp, the default map (DSCP 26 -> 3), PFC on priority 3: lossless for DSCP 26.
    "mlx5-lossless.hex": reply(0x08, DEFAULT_MAP),
    # trust pcp (no DSCP entry), PFC off: a port as it comes.
    "mlx5-pcp-no-pfc.hex": reply(0x00, None),
    # trust dscp with DSCP 26 moved to priority 0, PFC on 3.
    "mlx5-dscp26-prio0.hex": reply(0x08, {**DEFAULT_MAP, 26: 0}),
}

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    for name, data in FILES.items():
        with open(os.path.join(here, name), "w") as f:
            f.write(hex_text(data))
