//! The plugin's modes, one file each.

pub mod chained;
pub mod child;
pub mod move_dev;
