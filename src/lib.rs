//! rdma-ns: a CNI plugin that gives pods RDMA netdevices and ib devices, and its DRA driver.
//!
//! The plugin's path, top down:
//! - [`cni`] speaks the protocol (environment, conf, CNI_ARGS, versions, results, IPAM
//!   delegation) and knows nothing about RDMA.
//! - [`attach`] turns a request into a mode's steps with undo: `attach::modes` (the mode list and
//!   one `ModeDriver` file each), `attach::steps` (the steps every mode may run), the shared
//!   lifecycle and DEL frame in `attach::lifecycle`, the conf's fields (`attach::config`, every
//!   field in `attach::conf_fields`), and the CNI's side of DRA (`attach::claim`: the pod's
//!   prepared claim, the kubelet's checkpoint, the pod's nodes reported into the claim's spec).
//! - [`records`], at the bottom: what the CNI and the DRA driver share on the node: the
//!   attachment record (generic over its mode's state, so it names no mode), prepared-claim
//!   records and who may set which key of a claim's config, a claim's CDI spec rendered from its
//!   record, the lock keys, atomic writes and the store. It imports nothing above [`kernel`].
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
//! And beside the CNI path, never on it, `dra` (feature `dra`): the DRA driver `rdma-ns-dra`
//! (its main is `src/bin/rdma-ns-dra.rs`), over [`records`] and [`kernel`], with every call to
//! the API server behind `dra::api::DriverApi` (a fake in `dra/api/fake.rs` for the tests).
//!
//! `testutil` (unit tests only) holds the conf fuzzer and shared test helpers, and `docs_tests`
//! holds the docs to the code (links, conf fields, error codes, the DRA tables). The subcommands
//! themselves (`src/cli/`) and the probe (`src/probe/`, feature `verbs`) are binaries over this
//! library.
//!
//! Where a change goes: a new mode is a file in `attach/modes/` and its line in the mode list
//! (`attach/modes/mod.rs`); a new selector a variant in `attach/select.rs`; a step every mode may
//! run a file implementing `attach::steps::Step`, its `pub mod` in `attach/mod.rs` and a line in
//! each mode's `STEPS`; a conf field a line in `attach/conf_fields.rs` and a row in
//! docs/configuration.md; a new netlink request its family's files in `kernel/`, the fake host
//! and the conformance scenarios (see [`kernel`]); a doctor check a file in `node/doctor/` and its
//! line in `doctor::run`; a key of a claim's config a row of `records::claim::CONFIG_KEYS`; a
//! subcommand a file in `src/cli/` and its dispatch arm. docs/architecture.md names every file
//! each of these touches.

pub mod attach;
pub mod cni;
pub mod discover;
#[cfg(test)]
mod docs_tests;
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
