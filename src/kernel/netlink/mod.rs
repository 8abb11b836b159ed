//! The netlink transport, one for every family the plugin speaks: NETLINK_ROUTE
//! ([`rtnetlink`](super::rtnetlink)), NETLINK_RDMA ([`nldev`](super::nldev)) and
//! NETLINK_SOCK_DIAG ([`sock_diag`](super::sock_diag)).
//!
//! [`NlSocket`] sends one request at a time and collects its replies; a family only
//! encodes requests and decodes the payloads of [`Reply`]. Replies come back raw so that a
//! family decodes only the attributes it needs: an attribute a newer kernel encodes
//! differently than a crate expects cannot make a whole request or dump fail.

mod message;
mod socket;

pub use self::message::{
    align4, messages, parse_done, parse_error, NlError, Reply, ReplyMsg, NLMSGERR_ATTR_MSG,
};
pub use self::socket::{NlSocket, Protocol, Rdma, Route, SockDiag};
