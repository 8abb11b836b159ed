//! Unit tests of the attach layer over the kernel's fake host (src/kernel/fake.rs) and the fake
//! IPAM (fake_ipam.rs). Each scenario builds its node with kit.rs's `TestHost` and runs commands
//! through its `World` as the plugin would; a file keeps only its own fixtures (links, conf
//! fields, IPAM results). The kit, the fake IPAM and the kill-point loop are open to the rest of
//! attach/, so a mode's file can carry its own scenarios.

mod child;
mod claim;
mod claim_cdi;
pub(in crate::attach) mod fake_ipam;
mod ib_device;
pub(in crate::attach) mod kill_points;
pub(in crate::attach) mod kit;
mod move_dev;
mod rail;
