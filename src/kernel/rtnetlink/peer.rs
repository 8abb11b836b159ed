//! Looking a link up in a peer netns, by the id the socket's own netns knows that netns by.

use super::Link;
use super::{request, RealKernel};
use crate::kernel::{KResult, KernelError, Ns};

impl RealKernel {
    /// The link with ifindex `index` in the netns that `ns` calls `netnsid` (an upper
    /// device's IFLA_LINK_NETNSID), asked on `ns`'s socket; None when there is no such link.
    /// The kernel answers EACCES unless this process has CAP_NET_ADMIN over that netns
    /// (rtnetlink.c `rtnl_get_net_ns_capable`), and EINVAL for an id `ns` does not know.
    pub fn link_by_index_in_netnsid(
        &self,
        ns: Ns<'_>,
        netnsid: i32,
        index: u32,
    ) -> KResult<Option<Link>> {
        if index == 0 {
            return Ok(None);
        }
        self.get_one_link(ns, request::get_link_by_index_in_netnsid(index, netnsid))
            .map_err(|e| {
                KernelError::netlink(
                    "look up link by index in a peer netns",
                    format!("ifindex {index} in netns id {netnsid}"),
                    ns,
                    e,
                )
            })
    }
}
