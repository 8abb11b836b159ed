//! The node's records: the one format the CNI and the DRA driver share, at the bottom of the
//! crate. It imports nothing above `kernel` (and `error`, `log`): the modes, the CNI and the
//! driver import it, never the reverse.
//!
//! - [`attachment`]: the attachment record (one per pod interface the CNI attached), with its
//!   mode's state as a type parameter;
//! - [`claim`]: the prepared-claim records the driver writes and the CNI reads, and who may set
//!   which key of a claim's config;
//! - [`cdi`]: a claim's CDI spec, rendered from its record;
//! - [`lock`]: the lock keys (one function each), [`store`]: the data dir's layout, listing,
//!   locks and sweep, [`atomic`]: writes a crash cannot tear.

pub mod atomic;
pub mod attachment;
pub mod cdi;
pub mod claim;
pub mod lock;
pub(crate) mod lock_file;
pub mod store;

/// Debug builds SIGKILL themselves at a named point when `RDMA_NS_TEST_KILL_AT` names it: the
/// tests that kill the driver or the plugin between two writes of a record. Release builds
/// never read the variable.
pub fn kill_point(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("RDMA_NS_TEST_KILL_AT").is_ok_and(|v| v == name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    let _ = name;
}
