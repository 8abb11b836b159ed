//! Unit tests of the attach layer over the fake host (testkit.rs). Each scenario builds its node
//! with kit.rs's `TestHost` and runs commands through its `World` as the plugin would; a file
//! keeps only its own fixtures (links, conf fields, IPAM results).

mod child;
mod conformance;
mod ib_device;
mod kill_points;
mod kit;
mod move_dev;
