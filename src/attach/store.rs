//! The data dir as the CNI reads it: records/store.rs's [`Store`](crate::records::store::Store)
//! with its records' mode state as the CNI's modes.

pub use crate::records::store::{DeviceLock, DEFAULT_DATA_DIR};

/// The attachment records of a data dir, read as the CNI's modes.
pub type Store = crate::records::store::Store<crate::attach::modes::ModeState>;
