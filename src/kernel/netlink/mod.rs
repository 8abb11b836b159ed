//! rtnetlink over NETLINK_ROUTE sockets.

mod socket;

pub use self::socket::{NlError, NlSocket, Reply};
