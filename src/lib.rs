//! rdma-ns: a CNI plugin that gives pods RDMA netdevices and ib devices.
//!
//! Layers: [`cni`] speaks the protocol and knows nothing about RDMA; [`attach`] turns a
//! request into a mode's steps with undo (`attach::modes`, one `ModeDriver` each; the shared
//! lifecycle and DEL frame in `attach::lifecycle`); [`kernel`] talks to netlink (one transport,
//! `kernel::netlink`), netns and sysfs and knows nothing about CNI. A new mode is a file in
//! `attach/modes/` and its line in the mode list (`attach/modes/mod.rs`), a new selector a variant
//! in `attach/select.rs`, a step every mode may run a file implementing `attach::steps::Step` and
//! a line in each mode's `STEPS`, a new netlink request its family's files in `kernel/`, the
//! fake host and the conformance scenarios (see [`kernel`]).

pub mod attach;
pub mod cni;
pub mod discover;
pub mod error;
pub mod kernel;
pub mod log;
pub mod nad;
pub mod node;
pub mod peers;
#[cfg(test)]
pub(crate) mod testutil;
