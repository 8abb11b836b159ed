//! Unit tests of the attach layer over the fake host (testkit.rs).

mod child;
mod conformance;
mod ib_device;
mod kill_points;
mod move_dev;
