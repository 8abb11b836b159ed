//! The netlink transport, shared by every netlink family the plugin speaks.

pub(crate) mod socket;

pub use self::socket::{
    align4, frame, parse_done, parse_error, NlError, NlSocket, Reply, NLMSGERR_ATTR_MSG,
};
