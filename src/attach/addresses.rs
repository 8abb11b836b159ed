//! Addresses, admin state and routes of an interface already in the pod: the steps every mode
//! shares after its device is in place.

use crate::attach::plan::Plan;
use crate::cni::result::CniResult;
use crate::error::KernelContext;
use crate::error::Result;
use crate::kernel::{LinkChange, NetOps, Netns, Ns, RouteSpec};

/// Adds the IPAM result's addresses, sets the link up, then adds the routes (a route via a
/// gateway needs the connected route that the address and the up state create). Each change
/// registers its undo; checkpoints `addresses`, `up`, `routes`.
pub fn configure_pod_interface<'a>(
    k: &'a dyn NetOps,
    netns: &'a Netns,
    index: u32,
    ifname: &str,
    result: &CniResult,
    plan: &mut Plan<'a>,
) -> Result<()> {
    let pod = Ns::Pod(netns);
    for ip in &result.ips {
        let addr = ip.address;
        k.add_address(pod, index, addr)
            .kernel_ctx(|| format!("adding address {addr} to {ifname} in the pod"))?;
        plan.on_undo("address", move || {
            k.del_address(pod, index, addr)
                .kernel_ctx(|| format!("removing address {addr}"))
        });
    }
    plan.checkpoint("addresses")?;

    let up = |state: bool| LinkChange {
        up: Some(state),
        ..Default::default()
    };
    k.set_link(pod, index, &up(true))
        .kernel_ctx(|| format!("setting {ifname} up in the pod"))?;
    plan.on_undo("up", move || {
        k.set_link(pod, index, &up(false))
            .kernel_ctx(|| "setting the interface down")
    });
    plan.checkpoint("up")?;

    for route in &result.routes {
        let spec = RouteSpec {
            dst: route.dst,
            gateway: route.gw,
            oif: index,
            metric: route.priority,
            mtu: route.mtu,
            table: route.table,
            scope: route.scope,
        };
        k.add_route(pod, &spec).kernel_ctx(|| {
            format!(
                "adding route {}{} on {ifname} in the pod",
                route.dst,
                route.gw.map(|g| format!(" via {g}")).unwrap_or_default(),
            )
        })?;
        plan.on_undo("route", move || {
            k.del_route(pod, &spec)
                .kernel_ctx(|| format!("removing route {}", spec.dst))
        });
    }
    plan.checkpoint("routes")
}
