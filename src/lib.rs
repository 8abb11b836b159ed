//! rdma-ns: a CNI plugin that gives pods RDMA netdevices and ib devices.
//!
//! The plugin's path, top down:
//! - [`cni`] speaks the protocol (environment, conf, CNI_ARGS, versions, results, IPAM
//!   delegation) and knows nothing about RDMA.
//! - [`attach`] turns a request into a mode's steps with undo: `attach::modes` (the mode list and
//!   one `ModeDriver` file each), `attach::steps` (the steps every mode may run), the shared
//!   lifecycle and DEL frame in `attach::lifecycle`, the record and its store.
//! - [`kernel`] talks to netlink (one transport, `kernel::netlink`; `NetOps` in
//!   `kernel::rtnetlink`, `RdmaOps` in `kernel::rdma_ops`), netns and sysfs (`kernel::sysfs`, the
//!   one root; `kernel::topology` and its per-client readers `topology::pod`, `topology::node`),
//!   and knows nothing about CNI. Test builds add the fake host (`kernel::fake`) and the scenarios
//!   that hold it and the real kernel to the same behaviour (`kernel::conformance`).
//! - [`error`] is the one error type and its map to CNI codes; [`log`] the leveled log (never
//!   stdout, which belongs to CNI JSON).
//!
//! Beside it, read-only views for people and the node, over the same `kernel` readers and records:
//! - [`discover`]: a pod's RDMA seen from inside its netns, for `rdma-ns env` and `rdma-ns-probe`;
//! - [`node`]: `doctor`, Node Feature Discovery labels and the exporter's metrics;
//! - [`peers`]: the plugins rdma-ns replaces or chains after, their schemas, and `migrate`;
//! - [`nad`]: confs, conflists and NetworkAttachmentDefinitions as files hold them.
//!
//! `testutil` (unit tests only) holds the conf fuzzer and shared test helpers. The subcommands
//! themselves (`src/cli/`) and the probe (`src/probe/`, feature `verbs`) are binaries over this
//! library.
//!
//! Where a change goes: a new mode is a file in `attach/modes/` and its line in the mode list
//! (`attach/modes/mod.rs`); a new selector a variant in `attach/select.rs`; a step every mode may
//! run a file implementing `attach::steps::Step`, its `pub mod` in `attach/mod.rs` and a line in
//! each mode's `STEPS`; a new netlink request its family's files in `kernel/`, the fake host and
//! the conformance scenarios (see [`kernel`]); a doctor check a file in `node/doctor/` and its
//! line in `doctor::run`; a subcommand a file in `src/cli/` and its dispatch arm. README's
//! "Architecture" names every file each of these touches.

pub mod attach;
pub mod cni;
pub mod discover;
#[cfg(feature = "dra")]
pub mod dra;
pub mod error;
pub mod kernel;
pub mod log;
pub mod nad;
pub mod node;
pub mod peers;
pub mod qos;
pub mod records;
#[cfg(test)]
pub(crate) mod testutil;
