//! The few verbs the probe needs, over rdma-sys (libibverbs), each object released on drop in
//! the order verbs requires (QP before CQ and MR, those before PD, PD before the context).

use std::ffi::CStr;
use std::io;
use std::net::Ipv6Addr;
use std::ptr;
use std::time::Instant;

use rdma_sys::*;

use crate::completions::{Completions, PollCq, Waiter, Work};

/// A verbs call that failed, with errno.
#[derive(Debug, thiserror::Error)]
#[error("{call} on {dev}: {err}")]
pub struct VerbsError {
    pub call: &'static str,
    pub dev: String,
    pub err: io::Error,
}

type Result<T> = std::result::Result<T, VerbsError>;

fn fail(call: &'static str, dev: &str, rc: i32) -> VerbsError {
    // Verbs calls return the errno (modify/query) or set it (create/alloc).
    let err = if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        io::Error::last_os_error()
    };
    VerbsError {
        call,
        dev: dev.to_string(),
        err,
    }
}

/// An opened ib device.
pub struct Context {
    pub name: String,
    ctx: *mut ibv_context,
}

impl Context {
    /// Opens the device libibverbs lists under `name`; None when it does not list it (no
    /// uverbs node, no provider for the driver).
    pub fn open(name: &str) -> Result<Option<Context>> {
        let mut n = 0;
        // SAFETY: libibverbs returns an array of `n` device pointers or NULL.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(fail("ibv_get_device_list", name, 0));
        }
        let mut out = None;
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n; the array and the names live until ibv_free_device_list.
            let dev = unsafe { *list.add(i) };
            let dev_name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) };
            if dev_name.to_bytes() == name.as_bytes() {
                // SAFETY: dev is from the list; the context outlives the list by design.
                let ctx = unsafe { ibv_open_device(dev) };
                out = Some(if ctx.is_null() {
                    Err(fail("ibv_open_device", name, 0))
                } else {
                    Ok(Context {
                        name: name.to_string(),
                        ctx,
                    })
                });
                break;
            }
        }
        // SAFETY: the list came from ibv_get_device_list.
        unsafe { ibv_free_device_list(list) };
        out.transpose()
    }

    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr> {
        // SAFETY: plain C struct, zero is a valid initial value; the call fills it.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        let rc = unsafe { ___ibv_query_port(self.ctx, port, &mut attr) };
        if rc != 0 {
            return Err(fail("ibv_query_port", &self.name, rc));
        }
        Ok(attr)
    }

    pub fn query_gid(&self, port: u8, index: u32) -> Result<Ipv6Addr> {
        let mut gid = ibv_gid { raw: [0; 16] };
        let rc = unsafe { ibv_query_gid(self.ctx, port, index as i32, &mut gid) };
        if rc != 0 {
            return Err(fail("ibv_query_gid", &self.name, rc));
        }
        // SAFETY: both union members are plain bytes.
        Ok(Ipv6Addr::from(unsafe { gid.raw }))
    }

    /// The non-empty GIDs of a port's table, by index: what libibverbs reads (sysfs, through
    /// the provider), to compare with what rdma-ns read itself.
    pub fn gid_table(&self, port: u8, len: u32) -> Result<Vec<(u32, Ipv6Addr)>> {
        let mut out = Vec::new();
        for i in 0..len {
            match self.query_gid(port, i) {
                Ok(g) if !g.is_unspecified() => out.push((i, g)),
                Ok(_) => {}
                // An entry that empties or fails to read is not an error for the table.
                Err(_) => {}
            }
        }
        Ok(out)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device; everything made from it is dropped before.
        unsafe { ibv_close_device(self.ctx) };
    }
}

/// PD, CQ, a registered buffer and an RC QP on one port.
pub struct Endpoint<'c> {
    ctx: &'c Context,
    pub port: u8,
    pub gid_index: u8,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    mr: *mut ibv_mr,
    qp: *mut ibv_qp,
    buf: Vec<u8>,
    waiter: Waiter,
}

/// What the peer needs to reach an endpoint (exchanged over TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    pub qpn: u32,
    pub psn: u32,
    pub gid: Ipv6Addr,
    pub rkey: u32,
    pub addr: u64,
    pub active_mtu: u32,
}

pub const CQ_DEPTH: i32 = 64;
pub const MAX_SEND: u32 = 32;

impl<'c> Endpoint<'c> {
    /// Creates PD, CQ, an MR over `buf_len` bytes and an RC QP (state RESET).
    pub fn new(ctx: &'c Context, port: u8, gid_index: u8, buf_len: usize) -> Result<Self> {
        let mut ep = Endpoint {
            ctx,
            port,
            gid_index,
            pd: ptr::null_mut(),
            cq: ptr::null_mut(),
            mr: ptr::null_mut(),
            qp: ptr::null_mut(),
            buf: vec![0u8; buf_len.max(64)],
            waiter: Waiter::default(),
        };
        let dev = &ctx.name;
        ep.pd = unsafe { ibv_alloc_pd(ctx.ctx) };
        if ep.pd.is_null() {
            return Err(fail("ibv_alloc_pd", dev, 0));
        }
        ep.cq = unsafe { ibv_create_cq(ctx.ctx, CQ_DEPTH, ptr::null_mut(), ptr::null_mut(), 0) };
        if ep.cq.is_null() {
            return Err(fail("ibv_create_cq", dev, 0));
        }
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        ep.mr = unsafe {
            ibv_reg_mr(
                ep.pd,
                ep.buf.as_mut_ptr().cast(),
                ep.buf.len(),
                access as i32,
            )
        };
        if ep.mr.is_null() {
            return Err(fail("ibv_reg_mr", dev, 0));
        }
        // SAFETY: plain C struct, filled below.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = ep.cq;
        init.recv_cq = ep.cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = MAX_SEND;
        init.cap.max_recv_wr = MAX_SEND;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        ep.qp = unsafe { ibv_create_qp(ep.pd, &mut init) };
        if ep.qp.is_null() {
            return Err(fail("ibv_create_qp", dev, 0));
        }
        Ok(ep)
    }

    /// The registered buffer (the MR covers it; its address never changes).
    pub fn buf(&self) -> &[u8] {
        &self.buf
    }

    pub fn buf_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: a created QP.
        unsafe { (*self.qp).qp_num }
    }

    pub fn info(&self, psn: u32, gid: Ipv6Addr, active_mtu: u32) -> PeerInfo {
        PeerInfo {
            qpn: self.qpn(),
            psn,
            gid,
            // SAFETY: a registered MR.
            rkey: unsafe { (*self.mr).rkey },
            addr: self.buf.as_ptr() as u64,
            active_mtu,
        }
    }

    fn modify(&self, attr: &mut ibv_qp_attr, mask: u32, call: &'static str) -> Result<()> {
        let rc = unsafe { ibv_modify_qp(self.qp, attr, mask as i32) };
        if rc != 0 {
            return Err(fail(call, &self.ctx.name, rc));
        }
        Ok(())
    }

    /// RESET → INIT → RTR (towards `peer`, over this endpoint's GID index) → RTS.
    pub fn connect(&self, my_psn: u32, peer: &PeerInfo, path_mtu: u32) -> Result<()> {
        use ibv_qp_attr_mask as m;
        // SAFETY: plain C struct.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.port_num = self.port;
        a.pkey_index = 0;
        a.qp_access_flags = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        self.modify(
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS).0,
            "ibv_modify_qp(INIT)",
        )?;
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = path_mtu;
        a.dest_qp_num = peer.qpn;
        a.rq_psn = peer.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = self.port;
        a.ah_attr.grh.dgid = ibv_gid {
            raw: peer.gid.octets(),
        };
        a.ah_attr.grh.sgid_index = self.gid_index;
        a.ah_attr.grh.hop_limit = 64;
        self.modify(
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER)
                .0,
            "ibv_modify_qp(RTR)",
        )?;
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        // NCCL's default (NCCL_IB_TIMEOUT 20: 4.096 us * 2^20, about 4 s). A short timeout
        // retransmits whenever the responder is slow to ACK (rxe under emulation), and a
        // retransmission is one more path to get wrong.
        a.timeout = 20;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = my_psn;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC)
                .0,
            "ibv_modify_qp(RTS)",
        )
    }

    /// The QP's state as the provider reports it (ibv_query_qp).
    pub fn state(&self) -> Result<u32> {
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            ibv_query_qp(
                self.qp,
                &mut a,
                ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        };
        if rc != 0 {
            return Err(fail("ibv_query_qp", &self.ctx.name, rc));
        }
        Ok(a.qp_state)
    }

    fn sge(&self, offset: usize, len: usize) -> ibv_sge {
        ibv_sge {
            addr: self.buf.as_ptr() as u64 + offset as u64,
            length: len as u32,
            // SAFETY: a registered MR.
            lkey: unsafe { (*self.mr).lkey },
        }
    }

    pub fn post_recv(&self, len: usize) -> Result<()> {
        let mut sge = self.sge(0, len);
        let mut wr = ibv_recv_wr {
            wr_id: RECV_WR_ID,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        let rc = unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(fail("ibv_post_recv", &self.ctx.name, rc));
        }
        Ok(())
    }

    /// A signaled SEND of `len` bytes, or an RDMA WRITE of `len` bytes to the peer's buffer.
    pub fn post_send(&self, len: usize, write_to: Option<(u64, u32)>) -> Result<()> {
        let mut sge = self.sge(0, len);
        // SAFETY: plain C struct, filled below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = SEND_WR_ID;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        match write_to {
            Some((addr, rkey)) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = rdma_t {
                    remote_addr: addr,
                    rkey,
                };
            }
            None => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
        }
        let mut bad = ptr::null_mut();
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(fail("ibv_post_send", &self.ctx.name, rc));
        }
        Ok(())
    }

    /// Waits for `want` successful completions of each kind (busy polling, bounded by
    /// `deadline`); one that came early, during another wait, counts here.
    pub fn wait(&mut self, want: Completions, deadline: Instant) -> Result<()> {
        let mut cq = VerbsCq {
            cq: self.cq,
            dev: &self.ctx.name,
        };
        self.waiter.wait(&mut cq, want, deadline)
    }
}

/// The `wr_id`s the probe posts with, which tell its completions apart.
const RECV_WR_ID: u64 = 1;
const SEND_WR_ID: u64 = 2;

/// An endpoint's CQ, polled with ibv_poll_cq.
struct VerbsCq<'e> {
    cq: *mut ibv_cq,
    dev: &'e str,
}

impl PollCq for VerbsCq<'_> {
    fn poll(&mut self, room: &mut [Work]) -> Result<usize> {
        // SAFETY: plain C struct array the call fills.
        let mut wc: [ibv_wc; 8] = unsafe { std::mem::zeroed() };
        let max = room.len().min(wc.len());
        let k = unsafe { ibv_poll_cq(self.cq, max as i32, wc.as_mut_ptr()) };
        if k < 0 {
            return Err(fail("ibv_poll_cq", self.dev, -k));
        }
        for (slot, c) in room.iter_mut().zip(&wc[..k as usize]) {
            *slot = work_of(c, self.dev)?;
        }
        Ok(k as usize)
    }

    fn device(&self) -> &str {
        self.dev
    }
}

/// What a successful completion finished; a failed one is an error naming its status.
fn work_of(c: &ibv_wc, dev: &str) -> Result<Work> {
    let failed = |what: String| VerbsError {
        call: "work completion",
        dev: dev.to_string(),
        err: io::Error::other(what),
    };
    if c.status != ibv_wc_status::IBV_WC_SUCCESS {
        // SAFETY: ibv_wc_status_str returns a static string for any status.
        let text = unsafe { CStr::from_ptr(ibv_wc_status_str(c.status)) };
        return Err(failed(format!(
            "status {} ({})",
            c.status,
            text.to_string_lossy()
        )));
    }
    match c.wr_id {
        RECV_WR_ID => Ok(Work::Recv),
        SEND_WR_ID => Ok(Work::Send),
        other => Err(failed(format!(
            "wr_id {other}, which the probe never posts"
        ))),
    }
}

impl Drop for Endpoint<'_> {
    fn drop(&mut self) {
        // SAFETY: each was created above (or is null); destroyed in dependency order.
        unsafe {
            if !self.qp.is_null() {
                ibv_destroy_qp(self.qp);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
        }
    }
}

/// IBV_MTU_* (1 = 256 ... 5 = 4096) in bytes.
pub fn mtu_bytes(mtu: u32) -> u32 {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

/// The port states' names (ibv_port_state_str).
pub fn port_state_str(state: u32) -> String {
    let s = unsafe { CStr::from_ptr(ibv_port_state_str(state)) };
    s.to_string_lossy().into_owned()
}
