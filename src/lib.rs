//! rdma-ns: a CNI plugin that gives pods RDMA netdevices and ib devices.
//!
//! Layers: [`cni`] speaks the protocol and knows nothing about RDMA; [`attach`] turns a
//! request into steps with undo; [`kernel`] talks to netlink, netns and sysfs and knows
//! nothing about CNI.

pub mod attach;
pub mod cni;
pub mod error;
pub mod kernel;
pub mod log;
pub mod node;
#[cfg(test)]
pub(crate) mod testutil;
