//! VM tier, Linux 7 kernel: RDMA traffic on each rail of a routed two-rail fabric. Linux 7.1's
//! Soft-RoCE receives in the netns of its netdev, so `"softRoce": true` gives each pod rail an
//! rxe device that carries RoCE between pods; on 6.1 it receives only in the host netns (see
//! docs/soft-roce.md).
//!
//! The fabric of the root tier's tests/rails.rs (tests/common/fabric.rs): two pods with two rails
//! each, every rail its own subnet behind its own gateway in a router netns and the same
//! east-west route on every rail, all four attachments with `rail` and `softRoce`. For each rail,
//! an RDMA CM server bound to the peer pod's address on that rail and a client bound to this
//! pod's address on it (`rping -I`): RDMA CM resolves the route from the bound source, which the
//! rail's rule sends through the rail's table, so the RoCE traffic crosses the router on that
//! rail, and the router's per-port counters show it there and not on the other rail.

mod common;
mod vm_support;

use common::fabric::*;
use common::*;
use serde_json::json;

/// rping's exchanges per rail: each is a few RoCE packets each way.
const PINGS: &str = "20";

/// `rping -s` in the peer pod on its rail-`r` address, then, once it listens, `rping -c` from
/// this pod bound to its own rail-`r` address, each under `timeout -s KILL`; the client's output.
fn rping_on_rail(server: &Pod, client: &Pod, r: u32) -> String {
    let (peer, mine) = (format!("{}.2", subnet(1, r)), format!("{}.2", subnet(0, r)));
    let out = vm_support::server_and_client(
        "90",
        &server.ns.name,
        &["rping", "-s", "-a", &peer, "-C", PINGS],
        || vm_support::rdma_cm_listening(&server.ns.name),
        &client.ns.name,
        &["rping", "-c", "-v", "-a", &peer, "-I", &mine, "-C", PINGS],
    );
    vm_support::both_ok(&format!("rail {r}: rping from {mine} to {peer}"), &out);
    vm_support::text(&out.1)
}

#[test]
fn vm_rdma_cm_bound_to_each_rail_reaches_the_other_pod_across_the_router_on_that_rail() {
    vm_support::require_vm();
    let router = Router::new();
    let pods = fabric(&router);
    let data = state_dir();
    let extra = json!({"rail": true, "softRoce": true});
    for pod in &pods {
        for r in 0..2 {
            let conf = pod.conf(r, &data, extra.clone());
            call("ADD", pod, r).run(&conf).ok();
        }
    }
    let (a, b) = (&pods[0], &pods[1]);
    for r in 0..2u32 {
        let (this, other) = (&a.nics[r as usize].peer, &a.nics[1 - r as usize].peer);
        let (this_before, other_before) = (router.rx_packets(this), router.rx_packets(other));
        let out = rping_on_rail(b, a, r);
        assert!(out.contains("ping data"), "rail {r}: {out}");
        let (this_now, other_now) = (router.rx_packets(this), router.rx_packets(other));
        let pings: u64 = PINGS.parse().unwrap();
        assert!(
            this_now >= this_before + pings,
            "rail {r}'s port carried the RDMA traffic: {this_before} -> {this_now}"
        );
        assert!(
            other_now < other_before + pings,
            "the other rail's port did not: {other_before} -> {other_now}"
        );
        eprintln!(
            "rail {r}: router port rx {this_before} -> {this_now}, other rail {other_before} -> \
             {other_now}"
        );
    }
    for pod in &pods {
        for r in 0..2 {
            let conf = pod.conf(r, &data, extra.clone());
            call("DEL", pod, r).run(&conf).ok();
        }
        assert!(
            pod.ns.source_rules().is_empty(),
            "{:?}",
            pod.ns.source_rules()
        );
    }
}
