//! Step `rail` in chained mode (`rdma` after sriov-cni, ib-sriov-cni or host-device): the
//! previous plugin made the interface, gave it prevResult's addresses, brought it up and put
//! prevResult's routes into the pod's main table. The rail takes it from there: the interface's
//! ARP values, the rules for prevResult's addresses of this interface, the table with their
//! connected routes and copies of prevResult's routes, and then those routes out of main, so
//! that the next rail's previous plugin finds main free for its own copy.

use crate::attach::addresses::{add_routes, prev_ips_for};
use crate::attach::plan::Plan;
use crate::attach::steps::PodSide;
use crate::error::{Error, KernelContext, Result};
use crate::kernel::rtnetlink::{Ipv4Setting, NetOps, RouteSpec};
use crate::kernel::{Netns, Ns};

use super::{add_rules, plan_rail, record_intent, result_routes, set_ipv4_values, RailConf};

/// RT_TABLE_MAIN.
const MAIN_TABLE: u32 = 254;

/// The rail on the previous plugin's interface (see the module doc). Its undo puts back what
/// was the previous plugin's: the interface's old ARP values and prevResult's routes in main,
/// since the interface stays in the pod. DEL leaves main as the rail left it: the previous
/// plugin's DEL, which comes next, takes the interface and its routes away.
pub(super) fn after_previous_plugin<'a>(
    pod: &mut PodSide<'a>,
    conf: &RailConf,
    plan: &mut Plan<'a>,
) -> Result<()> {
    let (k, netns, ifname) = (pod.ctx.kernel, pod.netns, pod.req.env.ifname.as_str());
    let link = k
        .link_by_name(Ns::Pod(netns), ifname)
        .kernel_ctx(|| format!("looking up {ifname} in the pod"))?
        .ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "{ifname} is not in the pod netns {}: the previous plugin in the chain should \
                 have put it there",
                netns.path().display()
            ))
        })?;
    set_values_keeping_old(k, netns, ifname, link.index, conf, plan)?;
    plan.checkpoint("rail-sysctls")?;
    let ips: Vec<_> = prev_ips_for(&pod.result, ifname)
        .map(|ip| ip.address)
        .collect();
    let ipam = pod.result.routes.clone();
    let rec = plan_rail(k, netns, conf, &link, &ips, &ipam)?;
    record_intent(pod, &rec)?;
    plan.checkpoint("rail-intent")?;
    add_rules(k, netns, &rec, plan)?;
    plan.checkpoint("rail-rules")?;
    let routes = result_routes(&rec, &ipam);
    add_routes(k, netns, link.index, ifname, &routes, plan)?;
    for route in &ipam {
        if route.table.unwrap_or(MAIN_TABLE) == MAIN_TABLE {
            let main = RouteSpec {
                dst: route.dst,
                gateway: route.gw,
                oif: link.index,
                metric: route.priority,
                mtu: route.mtu,
                table: None,
                scope: route.scope,
            };
            take_out_of_main(k, netns, main, plan)?;
        }
    }
    plan.checkpoint("rail-routes")?;
    pod.result.routes = routes;
    Ok(())
}

/// Sets the rail's ARP values on the previous plugin's interface; the undo puts back the ones
/// it had.
fn set_values_keeping_old<'a>(
    k: &'a dyn NetOps,
    netns: &'a Netns,
    ifname: &str,
    index: u32,
    conf: &RailConf,
    plan: &mut Plan<'a>,
) -> Result<()> {
    let old = k
        .ipv4_conf(Ns::Pod(netns), index)
        .kernel_ctx(|| format!("reading the IPv4 values of {ifname} in the pod"))?
        .unwrap_or_default();
    let old: Vec<(Ipv4Setting, u32)> = Ipv4Setting::ALL
        .iter()
        .filter_map(|s| old.get(*s).map(|v| (*s, v)))
        .collect();
    set_ipv4_values(k, netns, ifname, index, &conf.ipv4_values())?;
    let ifname = ifname.to_string();
    plan.on_undo("rail-sysctls", move || {
        set_ipv4_values(k, netns, &ifname, index, &old)
    });
    Ok(())
}

/// Deletes prevResult's `route` from main, where the previous plugin put it; one main never had
/// (its IPAM gave it a table, or it is gone) is left alone. The undo puts it back.
fn take_out_of_main<'a>(
    k: &'a dyn NetOps,
    netns: &'a Netns,
    route: RouteSpec,
    plan: &mut Plan<'a>,
) -> Result<()> {
    let pod = Ns::Pod(netns);
    match k.del_route(pod, &route) {
        Ok(()) => {
            plan.on_undo("rail-main-route", move || {
                k.add_route(pod, &route)
                    .kernel_ctx(|| format!("putting route {} back into main", route.dst))
            });
            Ok(())
        }
        Err(e) if e.is_errno(nix::errno::Errno::ESRCH) => {
            crate::log_info!("route {} is not in main: nothing to take out", route.dst);
            Ok(())
        }
        Err(e) => Err(Error::kernel(
            format!("taking route {} out of the pod's main table", route.dst),
            e,
        )),
    }
}
