//! Step `addresses`: the IPAM result's addresses, admin state and routes of the pod interface,
//! once it is in the pod; its CHECK looks for prevResult's addresses.

use crate::attach::plan::Plan;
use crate::attach::steps::{CheckSubject, PodSide, Step, StepAdd};
use crate::attach::Ctx;
use crate::cni::result::{CniResult, IpConfig, Route};
use crate::cni::{NetConf, Request};
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::rtnetlink::{Link, LinkChange, NetOps, RouteSpec};
use crate::kernel::{Netns, Ns};

/// Step `addresses` (checkpoints `addresses`, `up`, `routes`): see [`configure_pod_interface`].
/// Nothing to release: the addresses and routes go with the interface.
#[derive(Debug)]
pub struct Addresses;

impl Step for Addresses {
    fn configure(&self, _conf: &NetConf) -> Result<Box<dyn StepAdd>> {
        Ok(Box::new(Addresses))
    }

    fn check(&self, ctx: &Ctx<'_>, subject: &CheckSubject<'_>, link: Option<&Link>) -> Result<()> {
        match link {
            Some(link) => check_prev_addresses(ctx.kernel, subject.ns, link, subject.req),
            None => Ok(()),
        }
    }
}

impl StepAdd for Addresses {
    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()> {
        let index = pod.link()?.index;
        let (kernel, ifname) = (pod.ctx.kernel, &pod.req.env.ifname);
        configure_pod_interface(kernel, pod.netns, index, ifname, &pod.result, plan)
    }
}

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

    add_routes(k, netns, index, ifname, &result.routes, plan)?;
    plan.checkpoint("routes")
}

/// Adds `routes` through the interface `index` in the pod, each with its undo: a route via a
/// gateway needs the connected route that the address and the up state create.
pub fn add_routes<'a>(
    k: &'a dyn NetOps,
    netns: &'a Netns,
    index: u32,
    ifname: &str,
    routes: &[Route],
    plan: &mut Plan<'a>,
) -> Result<()> {
    let pod = Ns::Pod(netns);
    for route in routes {
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
                "adding route {}{}{} on {ifname} in the pod",
                route.dst,
                route.gw.map(|g| format!(" via {g}")).unwrap_or_default(),
                route
                    .table
                    .map(|t| format!(" table {t}"))
                    .unwrap_or_default(),
            )
        })?;
        plan.on_undo("route", move || {
            k.del_route(pod, &spec)
                .kernel_ctx(|| format!("removing route {}", spec.dst))
        });
    }
    Ok(())
}

/// CHECK: every prevResult IP of this interface is on the pod link.
fn check_prev_addresses(kernel: &dyn NetOps, ns: &Netns, link: &Link, req: &Request) -> Result<()> {
    let Some(prev) = &req.conf.prev_result else {
        return Ok(());
    };
    let have = kernel
        .addresses(Ns::Pod(ns), link.index)
        .kernel_ctx(|| format!("reading addresses of {}", req.env.ifname))?;
    for ip in prev_ips_for(prev, &req.env.ifname) {
        if !have.contains(&ip.address) {
            return Err(Error::CheckFailed(format!(
                "{} in the pod lacks address {} from prevResult (has {})",
                req.env.ifname,
                ip.address,
                have.iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

/// prevResult's IPs that belong to `ifname` (or carry no interface index at all).
pub(crate) fn prev_ips_for<'r>(
    prev: &'r CniResult,
    ifname: &str,
) -> impl Iterator<Item = &'r IpConfig> {
    let index = prev.interfaces.iter().position(|i| i.name == ifname);
    prev.ips
        .iter()
        .filter(move |ip| ip.interface.is_none() || ip.interface == index)
}
