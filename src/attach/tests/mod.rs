//! Unit tests of the attach layer over the fake host (testkit.rs). Each scenario builds its node
//! with kit.rs's `TestHost` and runs commands through its `World` as the plugin would; a file
//! keeps only its own fixtures (links, conf fields, IPAM results). The kit and the kill-point
//! loop are open to the rest of attach/, so a mode's file can carry its own scenarios.

mod child;
mod conformance;
mod ib_device;
pub(in crate::attach) mod kill_points;
pub(in crate::attach) mod kit;
mod move_dev;
